"""The Spark snapshot job and the binlog stream against MariaDB, real spark-submit."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from airflow_cdc_provider.core.chunks import TableId
from airflow_cdc_provider.sinks.parquet import ParquetLayout
from airflow_cdc_provider.source.binlog import read_changes_between
from airflow_cdc_provider.source.schema import load_schema
from airflow_cdc_provider.source.server import current_offset
from airflow_cdc_provider.spark.stream import warm_python_workers
from airflow_cdc_provider.state.records import StreamSeed

from .cdc_helpers import BackgroundWriter, Pipeline, jdbc_sink, parquet_sink, sink_rows, source_rows, table_types
from .conftest import scale

CLI = str(Path(sys.executable).parent / "airflow-cdc")


def make_orders(db, n: int) -> None:
    db.execute("CREATE TABLE orders (id INT PRIMARY KEY, v INT NOT NULL, note VARCHAR(20))")
    db.execute(f"INSERT INTO orders SELECT seq, seq, 'init' FROM seq_1_to_{n}")  # MariaDB's sequence engine


def expected_changelog(db, seed: StreamSeed, table: str, server_id: int) -> list[tuple]:
    """``(op, *key, file_seq, pos, row)`` of every committed change since the seed that no snapshot chunk
    contains, straight from the binlog: a change of key k at p belongs to the changelog iff p is after the HW
    of the chunk whose range holds k (every change, for a table without snapshot). (Python key order: use keys
    whose collation agrees with it.)"""
    with db.connection() as conn:
        schema = load_schema(conn, TableId.parse(table))
        end = current_offset(conn)
    chunks = seed.tables[table].chunks if table in seed.tables else ()

    def chunk_hw(key):
        if not chunks:
            return seed.start
        for r in chunks:
            if (r.start is None or r.start <= key) and (r.end is None or key < r.end):
                return r.high_watermark
        raise AssertionError(f"no chunk holds {key}")

    out = []
    for rec in read_changes_between(db.settings, server_id, seed.start, end, {schema.table: schema}):
        if rec.position.is_after(chunk_hw(rec.key)):
            out.append((rec.op, *rec.key, *rec.position.sort_key))
    return out


def changelog(spark, sink_path: str, table: str, key_columns: tuple[str, ...] = ("id",)) -> list[tuple]:
    """``(op, *key, file_seq, pos, row)`` of every change event in the parquet sink's changelog."""
    layout = ParquetLayout(sink_path)
    if not layout.has_changes(table):
        return []
    rows = spark.read.parquet(layout.location(layout.changes_dir(table))).select("_cdc_op", *key_columns, "_cdc_file_seq", "_cdc_pos", "_cdc_row").collect()
    return [tuple(r) for r in rows]


def verify_cli(tmp_path, db, sink_path: str, state_path: str, *args: str):
    cfg = tmp_path / "pipeline.yaml"
    cfg.write_text(
        f"dag_id: verify_test\nsource:\n  conn_id: src\n  tables: [{db.table('orders')}]\nsnapshot:\n  chunk_size: 5000\n"
        f"sink:\n  type: parquet\n  path: {sink_path}\nstate:\n  path: {state_path}\n"
    )
    env = {**os.environ, "AIRFLOW_CONN_SRC": db.server.connection_uri(), "AIRFLOW_HOME": str(tmp_path)}
    return subprocess.run([CLI, "verify", str(cfg), *args], capture_output=True, text=True, env=env, timeout=300)


def test_snapshot_under_concurrent_writes_then_stream_is_exactly_once(source_db, tmp_path, spark, server_id):
    make_orders(source_db, 30_000)
    p = Pipeline(source_db, tmp_path, parquet_sink(tmp_path), ["orders"], chunk_size=10_000)
    chunks = p.plan()
    assert len(chunks) >= 3
    with BackgroundWriter(source_db.server, source_db.name, key_space=31_000) as writer:
        p.snapshot(chunks)
        seed = p.collect()
        ops_during_snapshot = writer.ops
    reports = p.state.finished_snapshot(source_db.table("orders")).chunks
    assert ops_during_snapshot > 100
    assert sum(r.window_events_applied for r in reports) > 0, "no chunk window saw a change: the test lost its point"
    assert all(r.high_watermark >= r.low_watermark for r in reports)

    p.stream(max_bytes=400_000)
    status = p.state.read_status()
    assert status.state == "finished" and status.batches >= 2 and status.rows_emitted > 0

    assert sink_rows(spark, p.sink, p.secrets, table_types(source_db, "orders")) == source_rows(source_db, "orders")
    got = changelog(spark, p.sink.path, source_db.table("orders"))
    want = expected_changelog(source_db, seed, source_db.table("orders"), server_id)
    assert len(got) == len(set(got)), "a change was emitted twice"
    assert sorted(got) == sorted(want)

    res = verify_cli(tmp_path, source_db, p.sink.path, p.state.uri)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "EQUAL" in res.stdout and "source == sink" in res.stdout

    victim = source_db.execute("SELECT MIN(id) FROM orders")[0][0]
    source_db.execute("DELETE FROM orders WHERE id = %s", (victim,))  # not streamed: the sink still has it
    res = verify_cli(tmp_path, source_db, p.sink.path, p.state.uri, "--json")
    assert res.returncode == 1, res.stdout + res.stderr
    out = json.loads(res.stdout)
    assert out["equal"] is False
    assert out["tables"][0]["first_differences"] == [{"key": [victim], "chunk": None, "problem": "extra in sink"}]


def test_stream_killed_mid_batch_resumes_without_loss_or_duplicates(source_db, tmp_path, spark, server_id, scenario):
    make_orders(source_db, scale(2_000, 200_000))
    p = Pipeline(source_db, tmp_path, parquet_sink(tmp_path), ["orders"], chunk_size=scale(1_000, 50_000))
    p.snapshot(p.plan())
    seed = p.collect()
    for i in range(1, 1201):
        source_db.execute("UPDATE orders SET v = v + 1 WHERE id = %s", (i,))
    source_db.execute("DELETE FROM orders WHERE id > 1900")
    fault = {"point": "mid_batch", "action": "kill", "match": "batch 1", "once": str(tmp_path / "fault-once")}
    res = p.stream(fault=fault, check=False, max_bytes=100_000)
    assert res.returncode != 0, "the injected SIGKILL did not happen"
    assert (tmp_path / "fault-once").exists()
    p.stream(max_bytes=100_000)

    got = changelog(spark, p.sink.path, source_db.table("orders"))
    assert len(got) == len(set(got)), "a change was written twice"
    assert sorted(got) == sorted(expected_changelog(source_db, seed, source_db.table("orders"), server_id))
    assert sink_rows(spark, p.sink, p.secrets, table_types(source_db, "orders")) == source_rows(source_db, "orders")
    scenario.update(rows=scale(2_000, 200_000), changes=len(got), faults=1)


@pytest.mark.parametrize("sink_type", ["parquet", "jdbc"])
def test_chunk_retried_after_kill_mid_write_leaves_one_copy(source_db, tmp_path, spark, postgres, sink_type, scenario):
    n = scale(3_000, 300_000)
    make_orders(source_db, n)
    sink = parquet_sink(tmp_path) if sink_type == "parquet" else jdbc_sink(postgres, f"s_{source_db.name}")
    p = Pipeline(source_db, tmp_path, sink, ["orders"], postgres=postgres, chunk_size=n // 3)
    chunks = p.plan()
    fault = {"point": "mid_sink_write", "action": "kill", "match": ":1", "once": str(tmp_path / "fault-once")}
    res = p.snapshot(chunks, fault=fault, check=False)
    assert res.returncode != 0, "the injected SIGKILL did not happen"
    assert p.state.read_chunk_report(source_db.table("orders"), chunks[0].epoch, 1) is None
    # between the attempts: a row the first attempt wrote disappears, another changes
    source_db.execute("DELETE FROM orders WHERE id = %s", (n // 2,))
    source_db.execute("UPDATE orders SET note = 'between' WHERE id = %s", (n // 2 + 100,))
    p.snapshot(chunks)
    p.collect()

    types = table_types(source_db, "orders")
    assert sink_rows(spark, p.sink, p.secrets, types) == source_rows(source_db, "orders")
    if sink_type == "parquet":
        layout = ParquetLayout(p.sink.path)
        epoch_dir = layout.epoch_dir(source_db.table("orders"), chunks[0].epoch)
        ids = [r[0] for r in spark.read.parquet(layout.location(epoch_dir)).select("id").collect()]
        assert len(ids) == len(set(ids)) == n - 1
    else:
        with postgres.connect() as conn, conn.cursor() as cur:
            cur.execute(f'SELECT count(*), count(*) FILTER (WHERE NOT _cdc_deleted) FROM "s_{source_db.name}"."{source_db.name}__orders"')
            assert cur.fetchone() == (n, n - 1)  # n // 2 is a tombstone
    scenario.update(rows=n, changes=2, faults=1)


def test_empty_table_and_a_string_key_window_then_stream(source_db, tmp_path, spark):
    """An empty table (a window with no rows) and a string-keyed table whose 5 chunks are read in one window
    (one JDBC read per chunk, unioned), then streamed changes: the sink equals the source."""
    source_db.execute("CREATE TABLE empty_t (id INT PRIMARY KEY, v INT)")
    source_db.execute("CREATE TABLE words (w VARCHAR(20) PRIMARY KEY, n INT)")
    source_db.executemany("INSERT INTO words VALUES (%s, %s)", [(f"w{i:04d}", i) for i in range(500)])
    p = Pipeline(source_db, tmp_path, parquet_sink(tmp_path), ["empty_t", "words"], chunk_size=100)
    chunks = p.plan()
    words = [c for c in chunks if str(c.table) == source_db.table("words")]
    assert len(words) == 5
    for table in (source_db.table("empty_t"), source_db.table("words")):
        p.snapshot([c for c in chunks if str(c.table) == table])
    p.collect()
    layout = ParquetLayout(p.sink.path)
    epoch_dir = layout.epoch_dir(source_db.table("words"), words[0].epoch)
    assert layout.storage.listdir(epoch_dir) == ["chunks=0-4"]  # one watermark window, one directory
    reports = p.state.finished_snapshot(source_db.table("words")).chunks
    assert sorted(r.rows for r in reports) == [100] * 5 and len({r.high_watermark.pos for r in reports}) == 1

    source_db.execute("INSERT INTO empty_t VALUES (1, 1), (2, 2)")
    source_db.execute("UPDATE words SET n = -n WHERE w < 'w0050'")
    source_db.execute("DELETE FROM words WHERE w >= 'w0490'")
    p.stream()
    for t in ("empty_t", "words"):
        assert sink_rows(spark, p.sink, p.secrets, table_types(source_db, t)) == source_rows(source_db, t)


def test_a_batch_without_rows_of_the_captured_table_publishes_nothing(source_db, tmp_path, spark, server_id):
    """One captured table: its batches are written straight from the source and counted on the way. A batch
    whose binlog holds only another table's changes writes nothing a reader sees (no ``batch=`` directory, no
    staging left), and the next batch with changes is streamed as usual."""
    make_orders(source_db, 200)
    source_db.execute("CREATE TABLE other (id INT PRIMARY KEY, v INT)")
    p = Pipeline(source_db, tmp_path, parquet_sink(tmp_path), ["orders"], chunk_size=100)
    p.snapshot(p.plan())
    seed = p.collect()
    source_db.executemany("INSERT INTO other VALUES (%s, %s)", [(i, i) for i in range(300)])
    p.stream()
    status = p.state.read_status()
    assert status.state == "finished" and status.batches >= 1 and status.rows_emitted == 0, status
    layout = ParquetLayout(p.sink.path)
    table = source_db.table("orders")
    assert not layout.has_changes(table)
    assert layout.storage.listdir(f"{layout.table_dir(table)}/_staging") == []

    source_db.execute("UPDATE orders SET v = v + 1 WHERE id <= 5")
    p.stream()
    assert p.state.read_status().rows_emitted == 5
    got = changelog(spark, p.sink.path, table)
    assert sorted(got) == sorted(expected_changelog(source_db, seed, table, server_id)) and len(got) == 5
    assert sink_rows(spark, p.sink, p.secrets, table_types(source_db, "orders")) == source_rows(source_db, "orders")


def test_the_stream_job_starts_its_python_workers_ahead_with_the_sources_modules(spark):
    """While the stream job sets up and its query starts, a background job starts a Python worker a task slot and
    imports the source's modules in it; the first batch's read tasks take those workers."""
    def worker_state(batches):  # pickled by value: unpickling it imports nothing of ours
        import os
        import sys

        import pyarrow as pa

        for batch in batches:
            yield pa.RecordBatch.from_pydict({"pid": [os.getpid()] * batch.num_rows,
                                              "ready": ["airflow_cdc_provider.spark.binlog_source" in sys.modules]
                                              * batch.num_rows})

    slots = spark.sparkContext.defaultParallelism
    workers = spark.range(0, slots, 1, slots).mapInArrow(worker_state, "pid long, ready boolean")
    warm = warm_python_workers(spark)
    warm.join(timeout=120)
    assert not warm.is_alive()
    started = workers.collect()
    assert len(started) == slots and all(w.ready for w in started), started


def test_an_alter_between_chunk_tasks_of_one_epoch_fails_the_later_task_and_leaves_the_sink_table_as_it_was(
        source_db, tmp_path, spark, postgres):
    """Chunk tasks of one snapshot epoch read under two definitions: the task after the ALTER refuses, before it
    changes the mirror table under the rows the earlier task wrote (the added column would be NULL in them, not
    its default). A new epoch then snapshots the table under one definition."""
    source_db.execute("CREATE TABLE t (id INT PRIMARY KEY, a INT)")
    source_db.execute("INSERT INTO t VALUES " + ", ".join(f"({i}, {i})" for i in range(1, 41)))
    table = source_db.table("t")
    schema = f"s_{source_db.name}"
    p = Pipeline(source_db, tmp_path, jdbc_sink(postgres, schema), ["t"], postgres=postgres, chunk_size=10)
    chunks = p.plan()
    p.snapshot(chunks[:2])
    source_db.execute("ALTER TABLE t ADD COLUMN c INT NOT NULL DEFAULT 7")
    assert p.snapshot(chunks[2:], check=False).returncode != 0
    assert (f"{table}: its definition changed while snapshot epoch {chunks[0].epoch} was being read"
            in p.last_log("snapshot_chunk", None))

    def mirror() -> dict[int, tuple]:
        with postgres.connect() as conn, conn.cursor() as cur:
            cur.execute(f'SELECT * FROM "{schema}"."{source_db.name}__t" WHERE NOT _cdc_deleted ORDER BY id')
            names = [d[0] for d in cur.description]
            return {r[0]: tuple(v for n, v in zip(names, r) if not n.startswith("_cdc_")) for r in cur.fetchall()}

    assert mirror() == {i: (i, i) for i in range(1, 21)}  # the first task's rows, under the definition they were read
    again = p.plan()
    p.snapshot(again)
    p.collect()
    assert mirror() == {i: (i, i, 7) for i in range(1, 41)}
    assert sink_rows(spark, p.sink, p.secrets, table_types(source_db, "t")) == source_rows(source_db, "t")


def test_a_snapshot_stops_at_a_row_keyed_by_a_zero_date_naming_table_and_column(source_db, tmp_path):
    """A zero date has no value: read as NULL, two rows of it would be one in the sinks. The snapshot task fails,
    naming the table and the column; it reports no chunk (the snapshot cannot be collected) and the parquet sink
    publishes nothing of its window."""
    source_db.execute("CREATE TABLE days (d DATE NOT NULL, id INT NOT NULL, v INT, PRIMARY KEY (d, id))")
    source_db.execute("INSERT INTO days VALUES ('2024-02-29', 1, 0), ('2024-03-01', 2, 0)")
    table = source_db.table("days")
    p = Pipeline(source_db, tmp_path, parquet_sink(tmp_path), ["days"])
    chunks = p.plan()  # one there already is refused by the plan step's validation
    with contextlib.closing(source_db.server.app_connection(source_db.name)) as conn, conn.cursor() as cur:
        cur.execute("SET SESSION sql_mode = ''")  # a writer that lets zero dates in, after the plan
        cur.execute("INSERT INTO days VALUES ('0000-00-00', 3, 0)")
        conn.commit()
    assert p.snapshot(chunks, check=False).returncode != 0
    assert f"{table}: a row the snapshot reads whose key column(s) d read as NULL" in p.last_log("snapshot_chunk", None)
    assert p.state.chunk_reports(table, chunks[0].epoch) == {}
    layout = ParquetLayout(p.sink.path)
    published = layout.storage.listdir(layout.epoch_dir(table, chunks[0].epoch))
    assert [n for n in published if n.startswith("chunks=")] == []


def test_a_chunk_of_a_finished_snapshot_is_read_again_unless_an_alter_changed_its_table(source_db, tmp_path, spark):
    """A succeeded chunk task cleared after its epoch finished reads its range again, a repair whose rows converge
    with the stream's by version; once an ALTER changed the table it is refused (its rows would go among the
    epoch's under the new definition), naming the table and the re-snapshot to run, and the sink's files stay."""
    source_db.execute("CREATE TABLE t (id INT PRIMARY KEY, a INT)")
    source_db.execute("INSERT INTO t VALUES " + ", ".join(f"({i}, {i})" for i in range(1, 41)))
    table = source_db.table("t")
    p = Pipeline(source_db, tmp_path, parquet_sink(tmp_path), ["t"], chunk_size=10)
    chunks = p.plan()
    p.snapshot(chunks)
    p.collect()
    source_db.execute("UPDATE t SET a = a + 100 WHERE id <= 3")
    p.snapshot(chunks)  # the task's chunks, as a cleared task reads them
    assert sink_rows(spark, p.sink, p.secrets, table_types(source_db, "t")) == source_rows(source_db, "t")
    layout = ParquetLayout(p.sink.path)
    epoch_files = layout.storage.fs.find(layout.storage.path(layout.epoch_dir(table, chunks[0].epoch)))
    source_db.execute("ALTER TABLE t RENAME COLUMN a TO b")
    assert p.snapshot(chunks, check=False).returncode != 0
    assert (f"{table}: its snapshot epoch {chunks[0].epoch} has finished, and the table's definition changed since"
            in p.last_log("snapshot_chunk", None))
    assert layout.storage.fs.find(layout.storage.path(layout.epoch_dir(table, chunks[0].epoch))) == epoch_files
