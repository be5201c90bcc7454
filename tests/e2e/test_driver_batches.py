"""Small stream batches written from the driver (``spark.driver_batches``): every type, key changes, deletes and
a truncate into each sink, compared with the source row by row; the parquet files equal those Spark writes;
a kill after a batch's first table and the restart."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from airflow_cdc_provider.sinks.parquet_arrow import read_current_state
from airflow_cdc_provider.state.store import table_dir_name

from ..component.test_type_fidelity import ALL_TYPES_DDL, EXTREMES, UPDATED, ZEROS
from .cdc_helpers import Pipeline, delta_sink, jdbc_sink, normalize, parquet_sink, sink_rows, source_rows, table_types
from .test_delta_sink import app_transactions, delta_rows

DRIVER = 4 * 2**20  # stream.driver_batch_bytes: every batch of these tests is smaller
# the parquet sink writes a table with both TIMESTAMP and DATETIME columns with Spark: one table of each kind
WALL_CLOCKS = ("ts", "tsz")
INSTANTS = ("dt0", "dt3", "dt6", "dtz")
ALL = "all_types columns"


def make_tables(db, names: list[str]) -> dict[str, list[str]]:
    """``all_types`` with its three rows, and copies without its TIMESTAMP (``walls``) or DATETIME (``stamps``)
    columns; returns each table's columns, and ``all_types``' under ``ALL``."""
    db.execute(ALL_TYPES_DDL)
    db.execute("SET time_zone = '+05:00'")  # the values' zone (and the writer's must not matter)
    all_columns = table_types(db, "all_types").schema.column_names
    db.execute("INSERT INTO all_types VALUES (" + ", ".join(["%s"] * len(EXTREMES)) + ")", EXTREMES)
    db.execute("INSERT INTO all_types (id) VALUES (2)")
    db.execute("INSERT INTO all_types VALUES (" + ", ".join(["%s"] * len(ZEROS)) + ")", ZEROS)
    for name, dropped in (("walls", WALL_CLOCKS), ("stamps", INSTANTS)):
        if name in names:
            db.execute(f"CREATE TABLE {name} LIKE all_types")
            db.execute(f"INSERT INTO {name} SELECT * FROM all_types")
            db.execute(f"ALTER TABLE {name} " + ", ".join(f"DROP COLUMN {c}" for c in dropped))
    if "all_types" not in names:
        db.execute("DROP TABLE all_types")
    return {ALL: all_columns, **{n: [c for c in all_columns if c not in {"walls": WALL_CLOCKS, "stamps": INSTANTS}.get(n, ())]
                                 for n in names}}


def change_rows(db, table: str, columns: dict[str, list[str]]) -> None:
    """Every column of every row changed (to other values, to the extremes, to NULL), a key changed, rows
    inserted, one inserted and deleted again. ``columns``: ``make_tables``' answer."""
    all_columns, columns = columns[ALL], columns[table]
    updated, extremes = dict(zip(all_columns, UPDATED)), dict(zip(all_columns, EXTREMES))
    set_all = f"UPDATE {table} SET " + ", ".join(f"`{c}` = %s" for c in columns[1:]) + " WHERE id = %s"
    db.execute(set_all, (*[updated[c] for c in columns[1:]], 1))
    db.execute(set_all, (*[extremes[c] for c in columns[1:]], 2))
    db.execute(set_all, (*[None] * (len(columns) - 1), 3))
    db.execute(f"UPDATE {table} SET id = 10 WHERE id = 1")
    insert = f"INSERT INTO {table} ({', '.join(f'`{c}`' for c in columns)}) VALUES ({', '.join(['%s'] * len(columns))})"
    db.execute(insert, (4, *[updated[c] for c in columns[1:]]))
    db.execute(insert, (5, *[extremes[c] for c in columns[1:]]))
    db.execute(f"DELETE FROM {table} WHERE id = 5")


def batch_lines(p: Pipeline) -> list[str]:
    return [line for line in p.last_log("binlog_stream", tail=None).splitlines() if "rows read and written" in line]


def assert_equal_row_by_row(p: Pipeline, spark, db, table: str) -> dict[tuple, tuple]:
    want = source_rows(db, table)
    assert sink_rows(spark, p.sink, p.secrets, table_types(db, table)) == want, table
    if p.sink.type == "parquet":  # the pyarrow reader, no Spark
        types = table_types(db, table)
        got = read_current_state(p.sink.path, db.table(table), list(types.schema.key_columns)).to_pylist()
        assert {(normalize(r["id"]),): tuple(normalize(r[c]) for c in types.schema.column_names) for r in got} == want
    if p.sink.type == "delta":
        assert delta_rows(p, db, table) == want
        for app, versions in app_transactions(p, db, table).items():
            assert len(versions) == len(set(versions)), f"{app} committed a version twice: {versions}"
    return want


@pytest.mark.parametrize("sink_type", ["parquet", "jdbc", "delta"])
def test_small_batches_from_the_driver_equal_the_source_row_by_row(source_db, tmp_path, spark, postgres, sink_type):
    names = ["walls", "stamps"] + ([] if sink_type == "parquet" else ["all_types"])
    columns = make_tables(source_db, names)
    sink = {"parquet": parquet_sink(tmp_path), "delta": delta_sink(tmp_path),
            "jdbc": jdbc_sink(postgres, f"d_{source_db.name}")}[sink_type]
    p = Pipeline(source_db, tmp_path, sink, names, postgres=postgres, chunk_size=2)
    p.snapshot(p.plan())
    p.collect()

    for name in names:
        change_rows(source_db, name, columns)
    source_db.execute("TRUNCATE stamps")
    source_db.execute("INSERT INTO stamps (id, vc) VALUES (7, 'after the truncate')")
    p.stream(max_bytes=6_000, driver_batch_bytes=DRIVER)  # several batches, some with one table's rows only

    lines = batch_lines(p)  # batch 0 of a new checkpoint has no end of a batch before it to measure from
    assert len(lines) >= 3 and all("from the driver (read in the driver" in line for line in lines[1:]), lines
    for name in names:
        assert_equal_row_by_row(p, spark, source_db, name)
    assert source_rows(source_db, "stamps").keys() == {(7,)}


def test_parquet_files_from_the_driver_are_the_files_spark_writes(source_db, tmp_path, spark):
    """Each batch directory is read by Spark, pyarrow and DuckDB alike: the driver's file must have Spark's
    physical types (INT96 for TIMESTAMP, INT64 for DATETIME) and its schema in the footer."""
    columns = make_tables(source_db, ["walls", "stamps"])
    p = Pipeline(source_db, tmp_path, parquet_sink(tmp_path), ["walls", "stamps"], chunk_size=2)
    p.snapshot(p.plan())
    p.collect()
    files = {}
    for path, driver in (("driver", DRIVER), ("executors", 0)):
        for name in ("walls", "stamps"):
            change_rows(source_db, name, columns)
            source_db.execute(f"DELETE FROM {name} WHERE id IN (4, 10)")
        p.stream(max_bytes=6_000, driver_batch_bytes=driver)
        lines = batch_lines(p)[1:] if path == "driver" else batch_lines(p)  # batch 0: see above
        assert lines and all(("from the driver" in line) == (path == "driver") for line in lines), lines
        for name in ("walls", "stamps"):
            changes = Path(p.sink.path) / table_dir_name(source_db.table(name)) / "changes"
            newest = max(changes.iterdir(), key=lambda d: int(d.name.split("=")[1]))
            files[path, name] = pq.ParquetFile(next(newest.glob("*.parquet")))
        for name in ("walls", "stamps"):
            assert_equal_row_by_row(p, spark, source_db, name)
    for name in ("walls", "stamps"):
        driver, executors = files["driver", name], files["executors", name]
        assert [(c.name, c.physical_type, c.logical_type.to_json()) for c in driver.schema] == \
               [(c.name, c.physical_type, c.logical_type.to_json()) for c in executors.schema], name
        key = b"org.apache.spark.sql.parquet.row.metadata"
        assert json.loads(driver.schema_arrow.metadata[key]) == json.loads(executors.schema_arrow.metadata[key])
    assert files["driver", "stamps"].schema.column(columns["stamps"].index("ts")).physical_type == "INT96"


def test_a_kill_after_a_driver_batchs_first_table_then_the_restart(source_db, tmp_path, spark):
    columns = make_tables(source_db, ["walls", "stamps"])
    p = Pipeline(source_db, tmp_path, parquet_sink(tmp_path), ["walls", "stamps"], chunk_size=2)
    p.snapshot(p.plan())
    p.collect()
    for name in ("walls", "stamps"):
        change_rows(source_db, name, columns)
    once = tmp_path / "fault-once"
    res = p.stream(fault={"point": "mid_batch", "action": "kill", "match": "batch 2", "once": str(once)},
                   check=False, max_bytes=6_000, driver_batch_bytes=DRIVER)
    assert res.returncode != 0 and once.exists(), "the injected kill did not happen"
    assert "batch 1: " in batch_lines(p)[-1] and "from the driver" in batch_lines(p)[-1]
    p.stream(max_bytes=6_000, driver_batch_bytes=DRIVER)  # batch 2 again, over the same offsets, then the rest
    assert "batch 2: " in batch_lines(p)[0] and "from the driver" in batch_lines(p)[0]
    for name in ("walls", "stamps"):
        assert_equal_row_by_row(p, spark, source_db, name)


def test_an_alter_applied_in_place_inside_a_batch_read_in_the_driver(source_db, tmp_path, spark):
    """The driver's read of a small batch meets an ALTER of columns: it records the table's next version and the
    query starts again from its checkpoint, as when a Spark task meets it; rows on both sides of it are equal."""
    columns = make_tables(source_db, ["walls", "stamps"])
    p = Pipeline(source_db, tmp_path, parquet_sink(tmp_path), ["walls", "stamps"], chunk_size=2)
    p.snapshot(p.plan())
    p.collect()
    change_rows(source_db, "walls", columns)
    p.stream(max_bytes=6_000, driver_batch_bytes=DRIVER)  # batch 0 of the checkpoint goes the executors' way
    change_rows(source_db, "stamps", columns)  # batches before the ALTER's: the job's set-up does not read it ahead
    source_db.execute("UPDATE walls SET vc = 'before the alter' WHERE id = 2")
    source_db.execute("ALTER TABLE walls ADD COLUMN extra INT NOT NULL DEFAULT 7, RENAME COLUMN vc TO vc2")
    source_db.execute("UPDATE walls SET extra = 8, vc2 = 'after the alter' WHERE id = 3")
    source_db.execute("INSERT INTO walls (id, extra) VALUES (20, 9)")
    p.stream(max_bytes=6_000, driver_batch_bytes=DRIVER)

    log = p.last_log("binlog_stream", tail=None)
    assert "table definition changed: " in log and "walls version 1" in log, log[-3000:]
    lines = batch_lines(p)
    assert lines and all("from the driver (read in the driver" in line for line in lines), lines
    for name in ("walls", "stamps"):
        assert_equal_row_by_row(p, spark, source_db, name)
    assert source_rows(source_db, "walls")[(2,)] != source_rows(source_db, "walls")[(3,)]
