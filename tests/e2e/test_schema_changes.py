"""Schema changes of captured tables through the real jobs, into both sinks, compared row by row with MariaDB.

TRUNCATE and DROP are applied by the stream at their positions (a kill right after a batch applied one runs
the batch again); under ``schema_changes: resnapshot`` an ALTER (and under any behaviour a table swapped in by an
online schema change tool's RENAME) holds the table's changes until its re-snapshot, after which the sink equals the source column by column, new, renamed and
widened columns included; ``schema_changes: fail`` stops before the change with nothing of the batch written.
Each kind of change has its own table of one pipeline, so one set of jobs covers them all. Besides the sinks'
own readers, the jdbc mirror is read with plain SQL and the parquet sink with pyarrow alone.
"""

from __future__ import annotations

import contextlib
import struct
from pathlib import Path

import pytest

from airflow_cdc_provider.core.chunks import SplitOptions
from airflow_cdc_provider.pipeline.plan import plan_chunks
from airflow_cdc_provider.pipeline.table_schemas import dropped_tables, pending_resyncs, resnapshots_due
from airflow_cdc_provider.sinks.parquet_arrow import read_current_state
from airflow_cdc_provider.sinks.postgres import mirror_table_name
from airflow_cdc_provider.sinks.registry import open_sink
from airflow_cdc_provider.spark.verify import verify_table
from airflow_cdc_provider.state.store import table_dir_name
from tests.e2e.cdc_helpers import Pipeline, delta_sink, jdbc_sink, parquet_sink, sink_rows, source_rows, table_types


def make_pipeline(source_db, tmp_path, postgres, sink_type, tables=("t", "other"), chunk_size=40):
    sink = {"parquet": lambda: parquet_sink(tmp_path), "delta": lambda: delta_sink(tmp_path),
            "jdbc": lambda: jdbc_sink(postgres, f"s_{source_db.name}")}[sink_type]()
    return Pipeline(source_db, tmp_path, sink, list(tables), postgres=postgres, chunk_size=chunk_size)


def make_tables(db, rows=100, copies=()):
    """``t`` and ``other``, and ``copies`` of ``t`` with its rows."""
    db.execute("CREATE TABLE t (id INT PRIMARY KEY, name VARCHAR(20) NOT NULL, qty INT)")
    db.execute("CREATE TABLE other (id INT PRIMARY KEY, v INT)")
    db.executemany("INSERT INTO t VALUES (%s, %s, %s)", [(i, f"n{i}", i) for i in range(1, rows + 1)])
    db.executemany("INSERT INTO other VALUES (%s, %s)", [(i, i) for i in range(1, 21)])
    for name in copies:
        db.execute(f"CREATE TABLE {name} LIKE t")
        db.execute(f"INSERT INTO {name} SELECT * FROM t")


def snapshot_all(p):
    p.snapshot(p.plan())
    p.collect()


def resnapshot(p, source_db, tmp_path, postgres, sink_type, table="t"):
    """What the next DAG run's plan step does for a table with a pending resync: a new epoch of it alone."""
    assert source_db.table(table) in pending_resyncs(p.state)
    q = make_pipeline(source_db, tmp_path, postgres, sink_type, tables=(table,))
    q.snapshot(q.plan())
    q.collect()
    assert source_db.table(table) not in pending_resyncs(p.state)


def pg_rows(postgres, source_db, table):
    """The jdbc mirror's live rows with plain SQL: {key: row} over the source's columns."""
    columns = source_rows_columns(source_db, table)
    with postgres.connect() as conn, conn.cursor() as cur:
        cur.execute(f'SELECT {", ".join(f"{chr(34)}{c}{chr(34)}" for c in columns)} FROM "s_{source_db.name}".'
                    f'"{mirror_table_name(source_db.table(table))}" WHERE NOT _cdc_deleted')
        return {(r[0],): tuple(r) for r in cur.fetchall()}


def source_rows_columns(source_db, table):
    return [r[0] for r in source_db.execute(
        "SELECT COLUMN_NAME FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s "
        "ORDER BY ORDINAL_POSITION", (source_db.name, table))]


def arrow_rows(p, source_db, table):
    """The parquet sink's current state read with pyarrow alone (no Spark): {key: row}."""
    state = read_current_state(p.sink.path, source_db.table(table), ["id"])
    return {(r["id"],): tuple(r.values()) for r in state.to_pylist()}


def delta_rows(p, source_db, table):
    """The Delta table's live rows read with delta-rs alone (no Spark): {key: row} over the source's columns."""
    import deltalake

    columns = source_rows_columns(source_db, table)
    uri = str(Path(p.sink.path) / table_dir_name(source_db.table(table)))
    live = deltalake.DeltaTable(uri).to_pyarrow_table(columns=columns, filters=[("_cdc_deleted", "=", False)])
    return {(r[columns[0]],): tuple(r[c] for c in columns) for r in live.to_pylist()}


def independent_rows(p, postgres, source_db, sink_type, table):
    """The sink's live rows read without our code: {key: row} over the source's columns."""
    if sink_type == "jdbc":
        return pg_rows(postgres, source_db, table)
    if sink_type == "delta":
        return delta_rows(p, source_db, table)
    return arrow_rows(p, source_db, table)


def assert_sink_equals_source(p, spark, postgres, source_db, sink_type, table):
    want = source_rows(source_db, table)
    assert sink_rows(spark, p.sink, p.secrets, table_types(source_db, table)) == want
    assert independent_rows(p, postgres, source_db, sink_type, table) == want


@pytest.mark.parametrize("sink_type", ["parquet", "jdbc"])
def test_truncate_alter_and_drop_each_at_its_position_then_the_held_table_converges_after_its_resnapshot(
        source_db, tmp_path, spark, postgres, sink_type):
    """One pipeline, one table per kind of change: ``tr`` truncated, ``t`` altered, ``gone`` dropped, ``other``
    streaming on beside them."""
    db = source_db
    make_tables(db, copies=("tr", "gone"))
    p = make_pipeline(db, tmp_path, postgres, sink_type, tables=("t", "tr", "gone", "other"))
    snapshot_all(p)
    gone_types = table_types(db, "gone")

    db.execute("UPDATE tr SET qty = -1 WHERE id <= 10")  # pending changes before the truncate
    db.execute("TRUNCATE TABLE tr")
    db.executemany("INSERT INTO tr VALUES (%s, %s, %s)", [(i, f"after{i}", i) for i in (3, 500, 501)])
    db.execute("UPDATE tr SET name = 'changed' WHERE id = 500")
    db.execute("UPDATE t SET qty = qty + 1000 WHERE id <= 20")  # still pending when the ALTER comes
    db.execute("DELETE FROM t WHERE id = 30")
    db.execute("ALTER TABLE t ADD COLUMN c VARCHAR(5) NOT NULL DEFAULT 'x', "
               "CHANGE name title VARCHAR(20) NOT NULL, MODIFY qty BIGINT")
    db.execute("UPDATE t SET qty = 5000000000, c = 'big' WHERE id = 2")
    db.execute("INSERT INTO t VALUES (1000, 'new', 3000000000, 'y')")
    db.execute("UPDATE gone SET qty = 0 WHERE id = 1")  # pending when the table goes
    db.execute("DROP TABLE gone")
    db.execute("UPDATE other SET v = -5 WHERE id = 2")  # another table keeps streaming

    # several batches; the job is killed right after a batch applied the truncate, before that batch commits:
    # the restart runs the batch again
    once = tmp_path / "fault-once"
    res = p.stream(max_bytes=2_000, check=False, schema_changes="resnapshot",
                   fault={"point": "after_schema_change", "action": "kill", "once": str(once)})
    assert res.returncode != 0 and once.exists(), "the injected kill did not happen"
    p.stream(max_bytes=3_000, schema_changes="resnapshot")
    assert p.state.read_status().state == "finished"
    changes = [(c.kind, c.table.table) for c in p.state.schema_changes()]
    assert changes == [("truncate", "tr"), ("resync", "t"), ("drop", "gone")], changes
    for table in ("tr", "other"):
        assert_sink_equals_source(p, spark, postgres, db, sink_type, table)
    assert len(source_rows(db, "tr")) == 3
    # the stream job started after the ALTER: the table's pending events of the old definition are decoded with
    # the definition its snapshot read, and from the ALTER on the table is held
    resync = pending_resyncs(p.state)[db.table("t")]
    assert "change column name to title" in resync.detail, resync.detail
    held = {(i,): (i, f"n{i}", i + 1000 if i <= 20 else i) for i in range(1, 101) if i != 30}
    assert held_rows(p, postgres, db, sink_type) == held
    verdict = verify_table(spark, db.settings, open_sink(p.sink, p.secrets, spark), table_types(db, "t"), [(None, None)])
    assert not verdict.equal and (verdict.missing_columns, verdict.extra_columns) == (["title", "c"], ["name"])
    assert db.table("gone") in dropped_tables(p.state)
    assert sink_rows(spark, p.sink, p.secrets, gone_types) == {}

    # a restart with the new definition: the altered table is still held, the dropped one is decoded with its
    # saved definition, the run succeeds
    db.execute("UPDATE other SET v = 98 WHERE id = 4")
    p.stream(schema_changes="resnapshot")
    assert held_rows(p, postgres, db, sink_type) == held
    assert_sink_equals_source(p, spark, postgres, db, sink_type, "other")
    plan = plan_chunks(db.settings, p.tables, SplitOptions(40), captured_before=set(p.tables))
    assert plan.validation.gone == [db.table("gone")]
    assert sorted(str(s.table) for s in plan.schemas) == sorted(db.table(n) for n in ("t", "tr", "other"))

    resnapshot(p, db, tmp_path, postgres, sink_type)
    db.execute("UPDATE t SET title = 'after', qty = 7000000000 WHERE id = 3")
    db.execute("INSERT INTO tr VALUES (600, 'later', 6)")
    p.stream(schema_changes="resnapshot")
    for table in ("t", "tr", "other"):
        assert_sink_equals_source(p, spark, postgres, db, sink_type, table)
    want = source_rows(db, "t")
    assert want[(2,)] == (2, "n2", 5000000000, "big") and want[(50,)] == (50, "n50", 50, "x")


@pytest.mark.parametrize("sink_type", ["parquet", "jdbc"])
def test_a_table_created_again_and_a_temporary_tables_rename_are_re_snapshotted(source_db, tmp_path, spark, postgres,
                                                                               sink_type):
    """``m`` is dropped and created again under a definition whose row events look like the old one's (a FLOAT's
    scale, a BINARY's length are not in them): the CREATE is a resync, and the re-snapshot reads the rows the old
    definition would have rounded and padded. ``t`` is shadowed by a session's TEMPORARY table that is renamed:
    the binlog logs the RENAME as it would the real table's, the stream reads a drop, and the next plan step,
    seeing ``t`` still on the source, re-snapshots it."""
    db = source_db
    db.execute("CREATE TABLE m (id INT PRIMARY KEY, f FLOAT(7,2), b BINARY(4))")
    db.executemany("INSERT INTO m VALUES (%s, %s, %s)", [(i, i + 0.25, b"old") for i in range(1, 31)])
    make_tables(db, rows=30)
    p = make_pipeline(db, tmp_path, postgres, sink_type, tables=("m", "t", "other"))
    snapshot_all(p)

    db.execute("UPDATE m SET f = 9.5 WHERE id = 1")  # pending when the table goes
    db.execute("DROP TABLE m")
    db.execute("CREATE TABLE m (id INT PRIMARY KEY, f FLOAT(7,4), b VARBINARY(8))")
    db.executemany("INSERT INTO m VALUES (%s, %s, %s)", [(i, i + 0.1234, b"ab") for i in range(5, 16)])
    with contextlib.closing(db.server.app_connection(db.name)) as conn, conn.cursor() as cur:
        cur.execute("CREATE TEMPORARY TABLE t (id INT PRIMARY KEY)")
        cur.execute("RENAME TABLE t TO t_scratch")
    db.execute("UPDATE t SET qty = -1 WHERE id <= 5")
    db.execute("DELETE FROM t WHERE id = 30")
    db.execute("UPDATE other SET v = -5 WHERE id = 2")  # another table keeps streaming
    p.stream()
    assert [(c.kind, c.table.table) for c in p.state.schema_changes()] == [
        ("drop", "m"), ("resync", "m"), ("drop", "t")]
    assert_sink_equals_source(p, spark, postgres, db, sink_type, "other")
    present = {db.table(n) for n in ("m", "t", "other")}
    due = resnapshots_due(p.state, lambda: present)
    assert sorted(due) == sorted([db.table("m"), db.table("t")]) and "TEMPORARY" in due[db.table("t")].detail
    assert list(resnapshots_due(p.state, lambda: present - {db.table("t")})) == [db.table("m")]  # t really gone

    q = make_pipeline(db, tmp_path, postgres, sink_type, tables=("m", "t"))
    q.snapshot(q.plan())
    q.collect()
    assert resnapshots_due(p.state, lambda: present) == {}
    db.execute("INSERT INTO m VALUES (100, 2.5678, 'xyz')")
    db.execute("DELETE FROM m WHERE id = 5")
    db.execute("UPDATE t SET name = 'after' WHERE id = 7")
    p.stream()
    for table in ("t", "other"):
        assert_sink_equals_source(p, spark, postgres, db, sink_type, table)
    want = source_rows(db, "m")
    assert sink_rows(spark, p.sink, p.secrets, table_types(db, "m")) == want
    assert {k: as_float32_and_bytes(r) for k, r in independent_rows(p, postgres, db, sink_type, "m").items()} == {
        k: as_float32_and_bytes(r) for k, r in want.items()}
    assert sorted(want) == [(i,) for i in (*range(6, 16), 100)]
    assert round(want[(6,)][1], 4) == 6.1234 and want[(6,)][2] == b"ab"


def as_float32_and_bytes(row):
    """A row of ``m`` as FLOAT and VARBINARY hold it: PostgreSQL gives a ``real`` as its shortest decimal text and
    ``bytea`` as a memoryview."""
    key, f, b = row
    return key, struct.unpack("f", struct.pack("f", f))[0], bytes(b)


def held_rows(p, postgres, source_db, sink_type):
    """A held table's sink as its own files or mirror hold it, with the columns it had: nothing of the changes
    since the change is written, nothing of the table's old definition is dropped, until its re-snapshot."""
    if sink_type == "parquet":
        return arrow_rows(p, source_db, "t")
    with postgres.connect() as conn, conn.cursor() as cur:
        cur.execute(f'SELECT id, name, qty FROM "s_{source_db.name}"."{mirror_table_name(source_db.table("t"))}" '
                    "WHERE NOT _cdc_deleted")
        return {(r[0],): tuple(r) for r in cur.fetchall()}


def test_fail_stops_before_the_change_with_nothing_written_then_resumes_after_a_resnapshot(
        source_db, tmp_path, spark, postgres):
    db = source_db
    make_tables(db)
    p = make_pipeline(db, tmp_path, postgres, "parquet")
    snapshot_all(p)
    old_types = table_types(db, "t")
    before = sink_rows(spark, p.sink, p.secrets, old_types)
    db.execute("UPDATE t SET qty = 1 WHERE id = 1")
    db.execute("ALTER TABLE t DROP COLUMN qty")
    res = p.stream(check=False, schema_changes="fail")
    assert res.returncode != 0
    status = p.state.read_status()
    assert status.state == "failed"
    assert db.table("t") in status.error and "DROP COLUMN qty" in status.error and "resnapshot" in status.error
    assert not p.state.has_checkpoint() and p.state.schema_changes() == []
    assert sink_rows(spark, p.sink, p.secrets, old_types) == before  # the update before the ALTER is not half-applied
    # the documented way on: re-snapshot the table, then the stream passes the change
    q = make_pipeline(db, tmp_path, postgres, "parquet", tables=("t",))
    q.snapshot(q.plan())
    q.collect()
    p.stream(schema_changes="fail")
    assert_sink_equals_source(p, spark, postgres, db, "parquet", "t")
