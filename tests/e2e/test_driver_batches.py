"""Small stream batches written from the driver (``spark.driver_batches``): every type, key changes, deletes and
a truncate into each sink, compared with the source row by row; the parquet files equal those Spark writes;
a kill after a batch's first table and the restart; an ALTER applied in place inside a batch read in the driver."""

from __future__ import annotations

import json
import re
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
    drops = {"walls": WALL_CLOCKS, "stamps": INSTANTS}
    return {ALL: all_columns, **{n: [c for c in all_columns if c not in drops.get(n, ())] for n in names}}


def change_rows(db, table: str, columns: dict[str, list[str]], base: int = 0) -> None:
    """Every column of every row changed (to other values, to the extremes, to NULL), a key changed, rows
    inserted, one inserted and deleted again. ``columns``: ``make_tables``' answer; ``base``: added to every id
    (the rows 1-3 copied to ``base`` + 1-3 by ``copy_rows``)."""
    all_columns, columns = columns[ALL], columns[table]
    updated, extremes = dict(zip(all_columns, UPDATED)), dict(zip(all_columns, EXTREMES))
    set_all = f"UPDATE {table} SET " + ", ".join(f"`{c}` = %s" for c in columns[1:]) + " WHERE id = %s"
    db.execute(set_all, (*[updated[c] for c in columns[1:]], base + 1))
    db.execute(set_all, (*[extremes[c] for c in columns[1:]], base + 2))
    db.execute(set_all, (*[None] * (len(columns) - 1), base + 3))
    db.execute(f"UPDATE {table} SET id = {base + 10} WHERE id = {base + 1}")
    insert = f"INSERT INTO {table} ({', '.join(f'`{c}`' for c in columns)}) VALUES ({', '.join(['%s'] * len(columns))})"
    db.execute(insert, (base + 4, *[updated[c] for c in columns[1:]]))
    db.execute(insert, (base + 5, *[extremes[c] for c in columns[1:]]))
    db.execute(f"DELETE FROM {table} WHERE id = {base + 5}")


def copy_rows(db, table: str, columns: dict[str, list[str]], base: int) -> None:
    """``table``'s rows 1-3 again as ``base`` + 1-3: rows of their own for each pass of one pipeline."""
    values = ", ".join(f"`{c}`" for c in columns[table][1:])
    db.execute(f"INSERT INTO {table} (id, {values}) SELECT id + {base}, {values} FROM {table} WHERE id <= 3")


def batch_lines(p: Pipeline) -> list[str]:
    return [line for line in p.last_log("binlog_stream", tail=None).splitlines() if "rows read and written" in line]


def batch_id(line: str) -> int:
    return int(re.search(r" batch (\d+): ", line).group(1))


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


@pytest.mark.parametrize("sink_type", ["jdbc", "delta"])  # parquet: test_driver_batches_into_parquet
def test_small_batches_from_the_driver_equal_the_source_row_by_row(source_db, tmp_path, spark, postgres, sink_type):
    names = ["walls", "stamps", "all_types"]
    columns = make_tables(source_db, names)
    sink = delta_sink(tmp_path) if sink_type == "delta" else jdbc_sink(postgres, f"d_{source_db.name}")
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


FILES, KILL = 100, 200  # the ids' bases of the rows the files' passes and the kill's change (the last pass: 1-3)


def test_driver_batches_into_parquet(source_db, tmp_path, spark):
    """The parquet sink's cases share one snapshot, one pass after another, each changing rows of its own: a
    pass read in the driver then one by Spark's tasks, whose files must be alike; a kill after a driver batch's
    first table and the restart; every type changed, a truncate and an ALTER inside a batch read in the driver.
    Only the first pass has a batch 0, the one batch of a driver pass that goes the executors' way."""
    db = source_db
    columns = make_tables(db, ["walls", "stamps"])
    for name in ("walls", "stamps"):
        for base in (FILES, KILL):
            copy_rows(db, name, columns, base)
    p = Pipeline(db, tmp_path, parquet_sink(tmp_path), ["walls", "stamps"], chunk_size=2)
    p.snapshot(p.plan())
    p.collect()

    # Each batch directory is read by Spark, pyarrow and DuckDB alike: the driver's file must have Spark's
    # physical types (INT96 for TIMESTAMP, INT64 for DATETIME) and its schema in the footer.
    files = {}
    for path, driver in (("driver", DRIVER), ("executors", 0)):
        for name in ("walls", "stamps"):
            change_rows(db, name, columns, FILES)
            db.execute(f"DELETE FROM {name} WHERE id IN ({FILES + 4}, {FILES + 10})")
        p.stream(max_bytes=6_000, driver_batch_bytes=driver)
        lines = batch_lines(p)[1:] if path == "driver" else batch_lines(p)  # batch 0 of the new checkpoint
        assert lines and all(("from the driver" in line) == (path == "driver") for line in lines), lines
        for name in ("walls", "stamps"):
            changes = Path(p.sink.path) / table_dir_name(db.table(name)) / "changes"
            newest = max(changes.iterdir(), key=lambda d: int(d.name.split("=")[1]))
            files[path, name] = pq.ParquetFile(next(newest.glob("*.parquet")))
        for name in ("walls", "stamps"):
            assert_equal_row_by_row(p, spark, db, name)
    for name in ("walls", "stamps"):
        driver, executors = files["driver", name], files["executors", name]
        assert [(c.name, c.physical_type, c.logical_type.to_json()) for c in driver.schema] == \
               [(c.name, c.physical_type, c.logical_type.to_json()) for c in executors.schema], name
        key = b"org.apache.spark.sql.parquet.row.metadata"
        assert json.loads(driver.schema_arrow.metadata[key]) == json.loads(executors.schema_arrow.metadata[key])
    assert files["driver", "stamps"].schema.column(columns["stamps"].index("ts")).physical_type == "INT96"

    # a kill after the first table of the pass's second batch (its first, read in the driver, is written)
    for name in ("walls", "stamps"):
        change_rows(db, name, columns, KILL)
    first = batch_id(batch_lines(p)[-1]) + 1
    once = tmp_path / "fault-once"
    res = p.stream(fault={"point": "mid_batch", "action": "kill", "match": f"batch {first + 1}", "once": str(once)},
                   check=False, max_bytes=6_000, driver_batch_bytes=DRIVER)
    assert res.returncode != 0 and once.exists(), "the injected kill did not happen"
    assert batch_id(batch_lines(p)[-1]) == first and "from the driver" in batch_lines(p)[-1], batch_lines(p)
    p.stream(max_bytes=6_000, driver_batch_bytes=DRIVER)  # the killed batch again, over the same offsets, then the rest
    assert batch_id(batch_lines(p)[0]) == first + 1 and "from the driver" in batch_lines(p)[0], batch_lines(p)
    for name in ("walls", "stamps"):
        assert_equal_row_by_row(p, spark, db, name)

    # Every column of rows 1-3 changed and a truncate, into several batches, some with one table's rows only; then
    # the driver's read of a batch meets an ALTER of columns: it records the table's next version and the query
    # starts again from its checkpoint, as when a Spark task meets it; rows on both sides of it are equal. The
    # batches before the ALTER's: the job's set-up does not read it ahead.
    for name in ("walls", "stamps"):
        change_rows(db, name, columns)
    db.execute("TRUNCATE stamps")
    db.execute("INSERT INTO stamps (id, vc) VALUES (7, 'after the truncate')")
    db.execute(f"UPDATE walls SET vc = 'before the alter' WHERE id = {FILES + 2}")
    db.execute("ALTER TABLE walls ADD COLUMN extra INT NOT NULL DEFAULT 7, RENAME COLUMN vc TO vc2")
    db.execute(f"UPDATE walls SET extra = 8, vc2 = 'after the alter' WHERE id = {FILES + 3}")
    db.execute("INSERT INTO walls (id, extra) VALUES (20, 9)")
    p.stream(max_bytes=6_000, driver_batch_bytes=DRIVER)

    log = p.last_log("binlog_stream", tail=None)
    assert "table definition changed: " in log and "walls version 1" in log, log[-3000:]
    lines = batch_lines(p)
    assert len(lines) >= 3 and all("from the driver (read in the driver" in line for line in lines), lines
    for name in ("walls", "stamps"):
        assert_equal_row_by_row(p, spark, db, name)
    assert source_rows(db, "stamps").keys() == {(7,)}
    walls = source_rows(db, "walls")
    assert walls[(FILES + 2,)] != walls[(FILES + 3,)]
