"""The delta sink through the real jobs: snapshot under concurrent writes, stream catch-up, a stream killed
mid-batch, a re-snapshot, a TRUNCATE, an ALTER applied in place and one followed by its re-snapshot (the
versions' own cases: ``test_schema_evolution.py``, ``component/test_delta_evolution.py``).

Each time the Delta table is read without our code (delta-rs's ``to_pyarrow_table``, pandas, and Polars where
installed) and compared with MariaDB row by row; ``_delta_log`` must hold no application transaction version
twice for one app id (a replayed batch is skipped, never committed again).
"""

from __future__ import annotations

import json
from functools import partial
from pathlib import Path

import deltalake
import pytest

from airflow_cdc_provider.pipeline.table_schemas import pending_resyncs
from airflow_cdc_provider.sinks.delta_append import WRITE_KEY
from airflow_cdc_provider.state.store import table_dir_name

from .cdc_helpers import (
    BackgroundWriter,
    Pipeline,
    delta_sink,
    normalize,
    paused_snapshot,
    sink_rows,
    source_rows,
    table_types,
)


def table_uri(p: Pipeline, source_db, table: str) -> str:
    return str(Path(p.sink.path) / table_dir_name(source_db.table(table)))


def delta_rows(p: Pipeline, source_db, table: str, names=None) -> dict[tuple, tuple]:
    """The table's live rows with delta-rs alone, as {key: row} over the source's columns (or ``names``)."""
    types = table_types(source_db, table)
    names, keys = list(names or types.schema.column_names), list(types.schema.key_columns)
    live = deltalake.DeltaTable(table_uri(p, source_db, table)).to_pyarrow_table(
        columns=names, filters=[("_cdc_deleted", "=", False)])
    out = {}
    for r in live.to_pylist():
        out[tuple(normalize(r[k]) for k in keys)] = tuple(normalize(r[n]) for n in names)
    return out


def other_readers_agree(p: Pipeline, source_db, table: str, want: dict[tuple, tuple]) -> None:
    """pandas (and Polars, if installed) see the same keys and row count."""
    uri = table_uri(p, source_db, table)
    key = table_types(source_db, table).schema.key_columns[0]
    pdf = deltalake.DeltaTable(uri).to_pandas(filters=[("_cdc_deleted", "=", False)])
    assert sorted(pdf[key].tolist()) == sorted(k[0] for k in want)
    try:
        import polars as pl
    except ImportError:
        return
    live = pl.read_delta(uri).filter(~pl.col("_cdc_deleted"))
    assert sorted(live[key].to_list()) == sorted(k[0] for k in want)


def app_transactions(p: Pipeline, source_db, table: str) -> dict[str, list[int]]:
    """Every ``txn`` action of the table's log, in commit order, per app id."""
    return app_transactions_at(table_uri(p, source_db, table))


def assert_delta_equals_source(p: Pipeline, source_db, table: str) -> dict[tuple, tuple]:
    want = source_rows(source_db, table)
    got = delta_rows(p, source_db, table)
    missing, extra = want.keys() - got.keys(), got.keys() - want.keys()
    differ = [k for k in want.keys() & got.keys() if want[k] != got[k]]
    assert not (missing or extra or differ), (f"{table}: missing {sorted(missing)[:5]}, extra {sorted(extra)[:5]}, "
                                             f"differ {[(want[k], got[k]) for k in differ[:5]]}")
    for app, versions in app_transactions(p, source_db, table).items():
        assert len(versions) == len(set(versions)), f"{app} committed a version twice: {versions}"
    keys = table_types(source_db, table).schema.key_columns
    every = deltalake.DeltaTable(table_uri(p, source_db, table)).to_pyarrow_table(columns=list(keys)).to_pylist()
    assert len({tuple(r[k] for k in keys) for r in every}) == len(every), f"{table}: a key has two rows"
    return want


def filters_find_every_value(uri: str) -> None:
    """delta-rs's reader, filtering on any column for any value it holds, finds that row: no file's statistics
    make it skip a file that holds the value."""
    dt = deltalake.DeltaTable(uri)
    everything = dt.to_pyarrow_table()
    for name in everything.column_names:
        for value in set(everything.column(name).to_pylist()) - {None}:
            if value == value:  # not NaN
                assert dt.to_pyarrow_table(filters=[(name, "=", value)]).num_rows, f"{name} = {value!r} not found"


def window_commits(uri: str) -> list[tuple[str, str]]:
    """(what, how) of the snapshot windows' commits, oldest first: "append" for data files appended, "replace"
    for data files in place of the table's that may hold their keys, "MERGE" otherwise."""
    return [(c["airflow_cdc"], c.get(WRITE_KEY) or c["operation"]) for c in reversed(deltalake.DeltaTable(uri).history())
            if str(c.get("airflow_cdc", "")).startswith("snapshot epoch") and "chunks" in c["airflow_cdc"]
            and "binlog window" not in c["airflow_cdc"]]


def window_change_commits(uri: str) -> list[str]:
    """What the commits say that applied a written window's binlog changes onto it, oldest first."""
    return [c["airflow_cdc"] for c in reversed(deltalake.DeltaTable(uri).history())
            if "binlog window" in str(c.get("airflow_cdc", ""))]


def test_late_replayed_and_emptied_writes_converge_without_spark(tmp_path):
    """The version guard alone, through delta-rs (rows staged with pyarrow as Spark would stage them): a
    replayed batch commits nothing, a snapshot window published after newer stream changes keeps them, a retried
    chunk's rows that its new attempt lacks become tombstones, and nothing older than a TRUNCATE comes back."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from airflow_cdc_provider.core.chunks import TableId
    from airflow_cdc_provider.core.offsets import EventPosition
    from airflow_cdc_provider.core.schema_changes import SchemaChange
    from airflow_cdc_provider.sinks.base import CHUNK_COLUMN
    from airflow_cdc_provider.sinks.delta import DeltaSink, StagedDeltaWindow, snapshot_batch
    from airflow_cdc_provider.sinks.delta_append import append_files, window_ranges, write_data_file
    from airflow_cdc_provider.sinks.types import TableSinkTypes
    from airflow_cdc_provider.source.schema import Column, TableSchema

    def column(name, kind):
        return Column(name, kind, kind, True, None, None, None, None, None, None)

    types = TableSinkTypes.of(TableSchema(TableId.parse("db.t"), (column("id", "int"), column("name", "varchar")),
                                          ("id",), ("id",)))
    sink = DeltaSink(delta_sink(tmp_path), {})
    sink.prepare(types)

    def stage(rows):
        rel = sink.layout.staging_dir("db.t")
        sink.layout.storage.fs.makedirs(sink.layout.storage.path(rel), exist_ok=True)
        pq.write_table(pa.Table.from_pylist(rows), sink.layout.storage.path(rel) + "/part-0.parquet")
        return rel

    def window(rows, epoch, indexes, low, high, retried=()):
        staged = stage([{"id": i, "name": n, CHUNK_COLUMN: i // 10} for i, n in rows])
        w = StagedDeltaWindow(sink, staged, types, epoch, indexes, (1, low, -1), set(retried))
        w.publish_rows(None, (1, high, -1), lambda: None)

    def batch(batch_id, changes):
        rows = [{"id": i, "name": n, "_cdc_op": op, "_cdc_ts_ms": 1, "_cdc_file_seq": 1, "_cdc_pos": pos,
                 "_cdc_row": 0, "_cdc_deleted": op == "d", "_cdc_chunk": None} for i, n, op, pos in changes]
        sink.commit_changes(types, stage(rows), ("airflow-cdc:db.t:stream:q", batch_id))

    def live():
        dt = deltalake.DeltaTable(sink.layout.table_uri("db.t"))
        return {r["id"]: r["name"] for r in dt.to_pyarrow_table(filters=[("_cdc_deleted", "=", False)]).to_pylist()}

    uri = sink.layout.table_uri("db.t")
    window([(i, f"n{i}") for i in range(20)], 1, [0, 1], 100, 200)  # a fresh table: appended, no MERGE
    assert window_commits(uri) == [("snapshot epoch 1 chunks 0-1", "append")]
    files, version = sorted(Path(uri).glob("*.parquet")), deltalake.DeltaTable(uri).version()
    window([(i, f"n{i}") for i in range(20)], 1, [0, 1], 100, 200)  # replayed: nothing written
    assert sorted(Path(uri).glob("*.parquet")) == files and deltalake.DeltaTable(uri).version() == version
    window([(i, f"w{i}") for i in range(20, 30)], 1, [2], 120, 210)  # disjoint from the table's files: appended
    assert window_commits(uri)[-1] == ("snapshot epoch 1 chunks 2-2", "append")
    filters_find_every_value(uri)
    # a window of a later epoch over the last window's file (a file of another epoch may hold its keys): MERGE
    window([(i, f"x{i}") for i in range(25, 40)], 2, [2, 3], 130, 220)
    assert window_commits(uri)[-1] == ("snapshot epoch 2 chunks 2-3", "MERGE")
    assert {f.name for f in Path(uri).glob("*.parquet")} <= logged_files(uri), "the refused append left its files"
    changes = [(1, "upd", "u", 300), (2, None, "d", 301), (100, "new", "c", 302), (3, "old", "u", 150)]
    batch(0, changes)
    version = deltalake.DeltaTable(sink.layout.table_uri("db.t")).version()
    batch(0, changes)  # the replay after a kill
    assert deltalake.DeltaTable(sink.layout.table_uri("db.t")).version() == version
    # chunk 0 retried: read between 250 and 260 (before the stream's changes at 300+), key 5 deleted meanwhile
    window([(i, f"r{i}") for i in range(10) if i != 5], 1, [0], 250, 260, retried=[0])
    assert window_commits(uri)[-1] == ("snapshot epoch 1 chunks 0-0", "MERGE")
    state = live()
    assert state[1] == "upd" and 2 not in state and 5 not in state and state[100] == "new" and state[3] == "r3"
    assert state[15] == "n15" and state[22] == "w22" and state[25] == "x25" and len(state) == 39

    # an append is committed on exactly the version it checked: a stream batch committed after that version makes
    # it check again, and if the batch holds a key of the window's range, fall back to the MERGE
    for batch_id, (low, high), streamed, expected in ((1, (200, 210), 300, "appended"),
                                                      (2, (400, 410), 405, "may overlap")):
        rows = pa.RecordBatch.from_pylist([{"id": i, "name": "a", CHUNK_COLUMN: 9} for i in range(low, high)])
        schema = pa.schema(deltalake.DeltaTable(uri).schema().to_arrow())
        finish = partial(snapshot_batch, schema=schema, epoch=1, version=(1, 390, -1), table="db.t")
        files = [write_data_file(sink.config.path, "db.t", schema, schema.names, [rows], finish)]
        checked = deltalake.DeltaTable(uri)
        batch(batch_id, [(streamed, "s", "c", 400 + batch_id)])
        opened = iter([checked])
        outcome = append_files(lambda: next(opened, None) or sink.open_table("db.t"), files,
                               window_ranges(files, ["id"], schema), (f"airflow-cdc:db.t:snapshot:1:{low}", 390),
                               f"window {low}", refuse=lambda dt: False)
        assert outcome == expected
    state = live()
    assert state[205] == "a" and state[300] == "s" and state[405] == "s" and 404 not in state

    truncate = SchemaChange("truncate", TableId.parse("db.t"), "TRUNCATE t", position=EventPosition("b.000001", 500, 0))
    sink.apply_schema_change(truncate, types)
    sink.apply_schema_change(truncate, types)
    window([(555, "late")], 2, [0], 455, 460)  # a window read before the truncate, published after it
    batch(3, [(7, "after", "c", 600)])
    sink.finish_snapshot("db.t", 2, (1, 550, -1))
    assert live() == {7: "after"}
    stream_versions = app_transactions_at(sink.layout.table_uri("db.t"))["airflow-cdc:db.t:stream:q"]
    assert stream_versions == [0, 1, 2, 3]
    assert not list(Path(sink.layout.storage.path("_staging/db.t")).iterdir())


def app_transactions_at(uri: str) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for commit in sorted((Path(uri.removeprefix("file://")) / "_delta_log").glob("*.json")):
        for line in commit.read_text().splitlines():
            action = json.loads(line)
            if "txn" in action:
                out.setdefault(action["txn"]["appId"], []).append(action["txn"]["version"])
    return out


def logged_files(uri: str) -> set[str]:
    """Every data file an add action of the table's log ever named."""
    out = set()
    for commit in (Path(uri.removeprefix("file://")) / "_delta_log").glob("*.json"):
        out |= {json.loads(line)["add"]["path"] for line in commit.read_text().splitlines() if '"add"' in line}
    return out


def make_orders(db, n: int) -> None:
    db.execute("CREATE TABLE orders (id INT PRIMARY KEY, v INT NOT NULL, note VARCHAR(20))")
    db.execute(f"INSERT INTO orders SELECT seq, seq, 'init' FROM seq_1_to_{n}")  # MariaDB's sequence engine


def make_kinds(db) -> None:
    """A column of most kinds the sink types map (decimal, wall clock and instant times, binary, unsigned)."""
    db.execute("CREATE TABLE kinds (id BIGINT UNSIGNED PRIMARY KEY, d DECIMAL(12,3), dt DATETIME(6), ts TIMESTAMP(3) "
               "NULL, dd DATE, b VARBINARY(10), tiny TINYINT, f DOUBLE, tm TIME(2), e ENUM('a','b'), y YEAR)")
    db.execute("INSERT INTO kinds VALUES (1, 12345.678, '9999-12-31 23:59:59.999999', '1970-01-01 00:00:01.5', "
               "'0001-01-01', x'00', 127, 2.5, '12:34:56.78', 'a', 2155), (18446744073709551615, NULL, NULL, NULL, "
               "NULL, NULL, NULL, NULL, NULL, NULL, NULL)")


def make_wide(db, n: int) -> None:
    """Columns of every kind whose statistics a written window's files take from their Parquet footers (a float
    among them, left out of statistics), ``n`` rows of spread values, and one row of extremes and NULLs."""
    db.execute("CREATE TABLE wide (id INT PRIMARY KEY, u BIGINT UNSIGNED, d DECIMAL(12,3), big DECIMAL(30,5), "
               "dt DATETIME(6), ts TIMESTAMP(3) NULL, dd DATE, s VARCHAR(200), b VARBINARY(10), tiny TINYINT, "
               "small SMALLINT, e ENUM('a','b'), y YEAR, flag BOOLEAN, t TEXT, f DOUBLE)")
    db.execute("INSERT INTO wide SELECT seq, seq * 184467440737095, seq / 7, seq * 1000000000000.5, "
               "TIMESTAMP('2020-01-01') + INTERVAL seq * 1000003 MICROSECOND, FROM_UNIXTIME(seq * 1000.5), "
               "DATE('2000-01-01') + INTERVAL seq DAY, CONCAT(REPEAT('\u00e9', seq % 40), seq), UNHEX(HEX(seq)), "
               "seq % 128, CAST(seq AS SIGNED) - 1000, IF(seq % 2, 'a', 'b'), 1901 + seq % 255, seq % 2, "
               f"CONCAT('t', seq), seq / 3 - 20 FROM seq_1_to_{n}")
    db.execute("INSERT INTO wide VALUES (100000, 18446744073709551615, -999999999.999, NULL, "
               "'9999-12-31 23:59:59.999999', NULL, '1000-01-01', '', x'', -128, -32768, NULL, NULL, NULL, "
               "REPEAT('\u00fc', 3000), -1.7976931348623157e308)")  # over 4 KiB: whole, no Parquet writer states it in a footer


def test_written_windows_state_the_statistics_of_their_rows(source_db, tmp_path):
    """A first snapshot's windows written by Spark straight as the table's data files: each file's statistics,
    taken from its Parquet footer, are what pyarrow finds in its rows; readers filtering on any value find it;
    the windows' directories hold only the data files the log names."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from airflow_cdc_provider.sinks.delta_append import _Stats, stats_columns

    make_wide(source_db, 100)
    p = Pipeline(source_db, tmp_path, delta_sink(tmp_path), ["wide"], chunk_size=30)
    chunks = p.plan()
    assert len(chunks) >= 3
    p.snapshot(chunks[:2])  # two jobs: two windows, the second appended beside the first's file
    p.snapshot(chunks[2:])
    p.collect()
    want = assert_delta_equals_source(p, source_db, "wide")
    assert len(want) == 101
    uri = table_uri(p, source_db, "wide")
    assert [op for _, op in window_commits(uri)] == ["append", "append"]
    dt = deltalake.DeltaTable(uri)
    schema, columns = pa.schema(dt.schema().to_arrow()), stats_columns(dt)
    assert "id" in columns and "u" not in columns and "f" not in columns  # BIGINT UNSIGNED, DOUBLE: left out
    adds = [json.loads(line)["add"] for commit in sorted((Path(uri) / "_delta_log").glob("*.json"))
            for line in commit.read_text().splitlines() if '"add"' in line]  # with their statistics
    assert len(adds) >= 2 and all(a["path"].startswith("snapshot-") for a in adds), [a["path"] for a in adds]
    for add in adds:
        rows = pq.read_table(Path(uri) / add["path"])
        assert [(f.name, f.type) for f in rows.schema] == [(f.name, f.type) for f in schema]
        computed = _Stats(schema, columns)
        for batch in rows.to_batches():
            computed.add(batch)
        stated, exact = json.loads(add["stats"]), json.loads(computed.json())
        assert "id" in stated["minValues"] and "t" in stated["maxValues"], "a long value took the file's statistics"
        # strings are stated truncated to 64 bytes: still bounds of every value, equal to it when shorter
        strings = [f.name for f in schema if pa.types.is_string(f.type)]
        for c in strings:
            low, high = stated["minValues"].pop(c, None), stated["maxValues"].pop(c, None)
            want_low, want_high = exact["minValues"].pop(c, None), exact["maxValues"].pop(c, None)
            assert (low is None) == (want_low is None) and (high is None) == (want_high is None), c
            if want_low is not None:
                assert low.encode() <= want_low.encode() and high.encode() >= want_high.encode(), c
                assert low == want_low or len(want_low.encode()) > 64, c
        assert stated == exact, add["path"]
    left = {f.relative_to(uri).as_posix() for f in Path(uri).glob("snapshot-*/*")}
    assert left == {a["path"] for a in adds}, "Spark's own files or unreferenced data files were left"
    filters_find_every_value(uri)
    other_readers_agree(p, source_db, "wide", want)


def test_a_window_run_again_on_an_unchanged_binlog_keeps_its_rows(source_db, tmp_path):
    """A chunk job run again after its window was published (an Airflow retry after the job's success was lost),
    with nothing written to the binlog in between: the retry finds the window committed and writes nothing, and
    the finished epoch keeps the rows the first attempt wrote under its low watermark, though the retry's report
    states a later one."""
    make_orders(source_db, 300)
    p = Pipeline(source_db, tmp_path, delta_sink(tmp_path), ["orders"], chunk_size=100)
    chunks = p.plan()
    p.snapshot(chunks)
    uri = table_uri(p, source_db, "orders")
    version = deltalake.DeltaTable(uri).version()
    p.snapshot(chunks)
    assert deltalake.DeltaTable(uri).version() == version, "the retry wrote again: the binlog was not unchanged"
    p.collect()
    assert len(assert_delta_equals_source(p, source_db, "orders")) == 300


@pytest.mark.parametrize("point", ["mid_sink_write", "after_sink_write"])
def test_a_chunk_killed_before_or_after_its_commit_and_retried_holds_each_key_once(source_db, tmp_path, point):
    """A chunk job killed before its window's commit (nothing of it in the table: the retry's window is written
    as data files and appended) or after it (its chunks not reported: the retry MERGEs, and the rows of the first
    attempt the retry lacks, deleted in between, become tombstones); a row changed in between takes its new
    value."""
    n = 600
    make_orders(source_db, n)
    p = Pipeline(source_db, tmp_path, delta_sink(tmp_path), ["orders"], chunk_size=n // 3)
    chunks = p.plan()
    assert len(chunks) >= 3 and chunks[1].start[0] <= n // 2 < n // 2 + 10 < chunks[2].start[0]
    p.snapshot(chunks[:1])
    fault = {"point": point, "action": "kill", "once": str(tmp_path / "fault-once")}
    assert p.snapshot(chunks[1:2], fault=fault, check=False).returncode != 0, "the injected SIGKILL did not happen"
    uri = table_uri(p, source_db, "orders")
    assert [op for _, op in window_commits(uri)] == ["append"] * (1 if point == "mid_sink_write" else 2)
    source_db.execute("DELETE FROM orders WHERE id = %s", (n // 2,))  # in chunk 1
    source_db.execute("UPDATE orders SET note = 'between' WHERE id = %s", (n // 2 + 10,))
    p.snapshot(chunks[1:2])
    p.snapshot(chunks[2:])
    p.collect()
    assert len(assert_delta_equals_source(p, source_db, "orders")) == n - 1
    assert [op for _, op in window_commits(uri)] == (["append"] * 3 if point == "mid_sink_write" else
                                                     ["append", "append", "MERGE", "append"])
    if point == "mid_sink_write":  # the retry's window too written by the executors, not staged
        assert all(f.startswith("snapshot-") for f in logged_files(uri))
    every = deltalake.DeltaTable(uri).to_pyarrow_table(columns=["id", "_cdc_deleted"]).to_pylist()
    gone = [r["id"] for r in every if r["_cdc_deleted"]]
    assert len(every) == n - (point == "mid_sink_write") and gone == ([] if point == "mid_sink_write" else [n // 2])


def test_snapshot_stream_kill_and_resnapshot_converge(source_db, tmp_path, spark):
    make_orders(source_db, 3_000)
    p = Pipeline(source_db, tmp_path, delta_sink(tmp_path), ["orders"], chunk_size=1_000)
    chunks = p.plan()
    assert len(chunks) >= 3
    with BackgroundWriter(source_db.server, source_db.name, key_space=3_100, rate=100) as writer:
        p.snapshot(chunks)
        p.collect()
        ops_during_snapshot = writer.ops
    assert ops_during_snapshot > 20
    table = source_db.table("orders")
    assert sum(r.window_events_applied for r in p.state.finished_snapshot(table).chunks) > 0, \
        "no chunk window saw a change: the test lost its point"
    uri = table_uri(p, source_db, "orders")
    initial = window_commits(uri)
    assert initial and all(op == "append" for _, op in initial), f"the initial snapshot was not appended: {initial}"

    # the stream catches up in several batches; it is killed after batch 1 is in the Delta table and before Spark
    # committed the batch, so the restart runs batch 1 again, which must find it committed and skip it
    for i in range(1, 400):
        source_db.execute("UPDATE orders SET v = v + 1 WHERE id = %s", (i,))
    source_db.execute("DELETE FROM orders WHERE id BETWEEN 2900 AND 2950")
    once = tmp_path / "fault-once"
    res = p.stream(fault={"point": "mid_batch", "action": "kill", "match": "batch 1", "once": str(once)},
                   check=False, max_bytes=20_000)
    assert res.returncode != 0 and once.exists(), "the injected kill did not happen"
    p.stream()  # batch 1 again (its offsets are in the checkpoint), then the rest in one batch
    want = assert_delta_equals_source(p, source_db, "orders")
    other_readers_agree(p, source_db, "orders", want)
    streams = {a: v for a, v in app_transactions(p, source_db, "orders").items() if ":stream:" in a}
    assert len(streams) == 1, f"the restart wrote under another application id: {list(streams)}"
    versions, = streams.values()
    assert 1 in versions and versions == sorted(versions), versions
    assert sink_rows(spark, p.sink, p.secrets, table_types(source_db, "orders")) == want  # current_state (Spark)

    # a re-snapshot (new epoch) of a table whose rows changed and went without the stream seeing it yet: the
    # finished epoch removes what it did not read (the stream passing a re-snapshot: the ALTER test below)
    source_db.execute("DELETE FROM orders WHERE id BETWEEN 100 AND 140")
    source_db.execute("UPDATE orders SET note = 'resnap' WHERE id BETWEEN 200 AND 260")
    q = Pipeline(source_db, tmp_path, delta_sink(tmp_path), ["orders"], chunk_size=1_000)
    again = q.plan()
    q.snapshot(again[:1])

    last = source_db.execute("SELECT MAX(id) FROM orders")[0][0]  # in the second window's range

    def stream_inside_the_window():  # a row of the window changed after its SELECT, written by the stream first
        source_db.execute("UPDATE orders SET note = 'after the select' WHERE id = %s", (last,))
        p.stream()

    paused_snapshot(q, again[1:], tmp_path / "paused", stream_inside_the_window)
    q.collect()
    assert_delta_equals_source(p, source_db, "orders")
    # the first window's data files took the place of the table's files that may hold its keys, in one commit
    # (the deleted keys' rows carried over, then made tombstones by the finished epoch); the second window holds
    # a key the stream wrote after the window's low watermark, which only a MERGE keeps
    resnapshot = window_commits(uri)[len(initial):]
    assert [op for _, op in resnapshot] == ["replace", "MERGE"], resnapshot
    held = deltalake.DeltaTable(uri).file_uris()
    assert [f for f in held if f"/snapshot-{again[0].epoch}-0-0-" in f], held
    p.stream()
    assert_delta_equals_source(p, source_db, "orders")

    dt = deltalake.DeltaTable(table_uri(p, source_db, "orders"))
    assert dt.metadata().configuration.get("delta.enableChangeDataFeed") == "true"
    changes = dt.load_cdf(starting_version=0).read_all()
    assert changes.num_rows > 0 and "_change_type" in changes.column_names


def merge_predicates(uri: str, since: int) -> list[tuple[str, str]]:
    """(what, ON clause) of the MERGEs committed after version ``since``, oldest first."""
    return [(c.get("airflow_cdc", ""), c["operationParameters"]["mergePredicate"])
            for c in reversed(deltalake.DeltaTable(uri).history()) if c["version"] > since and c["operation"] == "MERGE"]


def test_truncate_an_alter_in_place_and_one_by_resnapshot(source_db, tmp_path, spark):
    db = source_db
    db.execute("CREATE TABLE t (id INT PRIMARY KEY, name VARCHAR(20) NOT NULL, qty INT)")
    db.executemany("INSERT INTO t VALUES (%s, %s, %s)", [(i, f"n{i}", i) for i in range(1, 101)])
    make_kinds(db)
    p = Pipeline(db, tmp_path, delta_sink(tmp_path), ["t", "kinds"], chunk_size=40)
    p.snapshot(p.plan())
    p.collect()
    assert_delta_equals_source(p, db, "t")
    kinds = assert_delta_equals_source(p, db, "kinds")
    for name in ("t", "kinds"):  # appended: data files the executors wrote, read by delta-rs and by Spark
        commits = window_commits(table_uri(p, db, name))
        assert commits and all(op == "append" for _, op in commits), f"{name}: {commits}"
        filters_find_every_value(table_uri(p, db, name))
    # both tables' windows were written as data files by Spark, kinds' DOUBLE left out of their statistics
    for name in ("t", "kinds"):
        assert all(f.startswith("snapshot-") for f in logged_files(table_uri(p, db, name)))
    assert sink_rows(spark, p.sink, p.secrets, table_types(db, "kinds")) == kinds

    db.execute("UPDATE t SET qty = -1 WHERE id <= 10")  # changes before the truncate
    db.execute("TRUNCATE TABLE t")
    db.executemany("INSERT INTO t VALUES (%s, %s, %s)", [(i, f"after{i}", i) for i in (3, 500, 501)])
    db.execute("UPDATE t SET name = 'changed' WHERE id = 500")
    db.execute("UPDATE kinds SET d = -0.5, ts = '2038-01-19 03:14:07.999', b = x'00ff' WHERE id = 18446744073709551615")
    db.execute("INSERT INTO kinds VALUES (7, 1.000, '1000-01-01 00:00:00', NULL, '2024-02-29', x'', -1, -1e300, "
               "'-838:59:59', 'b', 1901)")
    p.stream(max_bytes=2_000)
    assert [c.kind for c in p.state.schema_changes()] == ["truncate"]
    held = assert_delta_equals_source(p, db, "t")
    assert len(held) == 3
    assert len(assert_delta_equals_source(p, db, "kinds")) == 3

    db.executemany("INSERT INTO t VALUES (%s, %s, %s)", [(i, f"m{i}", i) for i in range(600, 640)])
    db.execute("ALTER TABLE t ADD COLUMN c VARCHAR(5) NOT NULL DEFAULT 'x'")
    db.execute("UPDATE t SET c = 'big' WHERE id = 3")
    db.execute("DELETE FROM t WHERE id = 501")
    # applied in place: the inserts before the ALTER are decoded with the snapshot's definition, the table is
    # rewritten with the new column holding 'x' in the rows that existed, and nothing is held
    p.stream()
    assert [c.kind for c in p.state.schema_changes()] == ["truncate", "evolve"]
    assert db.table("t") not in pending_resyncs(p.state)
    want = assert_delta_equals_source(p, db, "t")
    assert want[(3,)] == (3, "after3", 3, "big") and want[(600,)] == (600, "m600", 600, "x")
    assert deltalake.DeltaTable(table_uri(p, db, "t")).transaction_version(f"airflow-cdc:{db.table('t')}:schema") \
        % (1 << 20) == 1

    # an ALTER the sink cannot follow in place (a narrowing): from it on the table is held, its Delta table kept
    # as it was until the re-snapshot
    db.execute("UPDATE t SET qty = 5 WHERE id = 601")
    db.execute("ALTER TABLE t MODIFY name VARCHAR(10) NOT NULL")
    db.execute("UPDATE t SET name = 'short' WHERE id = 602")
    p.stream()
    assert db.table("t") in pending_resyncs(p.state)
    held = {k: v for k, v in want.items()}
    held[(601,)] = (601, "m601", 5, "x")
    assert delta_rows(p, db, "t", ("id", "name", "qty", "c")) == held
    q = Pipeline(db, tmp_path, delta_sink(tmp_path), ["t"], chunk_size=40)
    q.snapshot(q.plan())
    q.collect()
    assert db.table("t") not in pending_resyncs(p.state)
    db.execute("UPDATE t SET c = 'late', qty = 7 WHERE id = 600")
    p.stream()
    want = assert_delta_equals_source(p, db, "t")
    assert want[(602,)] == (602, "short", 602, "x") and want[(600,)] == (600, "m600", 7, "late")
    assert sink_rows(spark, p.sink, p.secrets, table_types(db, "t")) == want


def test_staged_files_rewritten_by_the_executors_or_here_are_the_same_data_files(tmp_path, spark):
    """A window's staged files made the table's data files by Spark's Python workers (a cluster's path) and by
    this process's threads (a local master's): the same rows and statistics, every staged row once."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from airflow_cdc_provider.sinks.base import CHUNK_COLUMN
    from airflow_cdc_provider.sinks.delta import DeltaLayout, snapshot_batch
    from airflow_cdc_provider.sinks.delta_append import write_data_files_from_staged, write_data_files_here

    root = tmp_path / "delta"
    staged = spark.range(0, 30_000, numPartitions=3).selectExpr(
        "cast(id as int) as id", "concat('n', id) as name", "cast(id % 7 as decimal(10,2)) as price",
        f"cast(id div 10000 as int) as {CHUNK_COLUMN}")
    staged.write.parquet(str(root / "_staging" / "w"))
    layout = DeltaLayout(str(root))
    files = layout.parquet_files("_staging/w")
    assert len(files) == 3
    schema = pa.schema([("id", pa.int32()), ("name", pa.string()), ("price", pa.decimal128(10, 2)),
                        ("_cdc_op", pa.string()), ("_cdc_ts_ms", pa.int64()), ("_cdc_file_seq", pa.int64()),
                        ("_cdc_pos", pa.int64()), ("_cdc_row", pa.int32()), ("_cdc_deleted", pa.bool_()),
                        ("_cdc_chunk", pa.string())])
    finish = partial(snapshot_batch, schema=schema, epoch=5, version=(1, 400, -1), table="db.t")
    columns = [f.name for f in schema]
    written = {}
    for how, write in (("executors", lambda d: write_data_files_from_staged(spark, files, str(root), d, schema,
                                                                             columns, finish)),
                       ("here", lambda d: write_data_files_here(files, str(root), d, schema, columns, finish, 2))):
        (root / how).mkdir()
        out = write(how)
        rows = pa.concat_tables([pq.read_table(root / how / f.path) for f in out]).sort_by("id")
        written[how] = (rows, sorted(json.loads(f.stats)["numRecords"] for f in out),
                        sorted((json.loads(f.stats)["minValues"]["id"], json.loads(f.stats)["maxValues"]["id"])
                               for f in out))
    rows, counts, ranges = written["executors"]
    assert rows.schema == schema and rows.num_rows == 30_000 and rows.column("id").to_pylist() == list(range(30_000))
    assert set(rows.column("_cdc_pos").to_pylist()) == {400} and rows.column("_cdc_chunk")[10_001].as_py() == "5:1"
    assert sum(counts) == 30_000 and len(ranges) == 3
    assert written["here"][0].equals(rows) and written["here"][1:] == (counts, ranges)
