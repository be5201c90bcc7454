"""Which tables a stream launch reads: the snapshotted ones, and under a startup mode other than ``initial``
every captured table, also after one of them was re-snapshotted."""

from __future__ import annotations

from airflow_cdc_provider.core.chunks import Chunk, TableId
from airflow_cdc_provider.core.offsets import BinlogOffset
from airflow_cdc_provider.core.reports import ChunkReport
from airflow_cdc_provider.pipeline.collect import build_seed, streamed_tables
from airflow_cdc_provider.state.records import FinishedSnapshot, StreamSeed

CAPTURED = ["db.t", "db.u", "db.v"]


def at(pos: int) -> BinlogOffset:
    return BinlogOffset("mysql-bin.000002", pos)


def snapshot(table: str) -> FinishedSnapshot:
    return FinishedSnapshot(table, 1, (
        ChunkReport(Chunk(TableId.parse(table), 0, ("id",), None, None, 1), at(100), at(200), 10, 0, 0.1),))


def test_a_stream_without_snapshot_keeps_every_table_after_one_is_re_snapshotted():
    started = StreamSeed(at(50), {})  # what the plan step records for stream.startup other than initial
    assert streamed_tables(started, "latest", lambda: CAPTURED) == CAPTURED
    reseeded = build_seed({"db.t": snapshot("db.t")}, started)
    assert list(reseeded.tables) == ["db.t"] and reseeded.start == at(50)
    assert streamed_tables(reseeded, "latest", lambda: CAPTURED) == CAPTURED
    assert streamed_tables(reseeded, "earliest", lambda: ["db.u"]) == ["db.t", "db.u"]


def test_an_initial_stream_reads_the_snapshotted_tables_only():
    seed = build_seed({"db.t": snapshot("db.t"), "db.u": snapshot("db.u")})
    assert streamed_tables(seed, "initial", lambda: CAPTURED) == ["db.t", "db.u"]


def test_a_table_left_out_of_source_tables_is_still_streamed_so_it_has_no_gap_when_it_comes_back(tmp_path):
    """Left out of the stream for a while and captured again, the table would have missed the changes between."""
    from airflow_cdc_provider.state.store import StateStore

    store = StateStore(tmp_path / "state")
    started = StreamSeed(at(50), {})
    first = streamed_tables(started, "latest", lambda: CAPTURED, store.streamed_tables())
    store.add_streamed_tables(first)
    assert streamed_tables(started, "latest", lambda: ["db.t"], store.streamed_tables()) == CAPTURED
    store.add_streamed_tables(["db.t"])
    assert store.streamed_tables() == set(CAPTURED)
    assert streamed_tables(started, "latest", lambda: ["db.w"], store.streamed_tables()) == [*CAPTURED, "db.w"]


def test_a_table_first_streamed_past_its_snapshots_high_watermark_is_held_until_re_snapshotted(tmp_path):
    """A stream launched while a new table's snapshot ran did not read it: launched later with it, it resumes
    after that snapshot's high watermark, and the changes between would be lost without a word."""
    from types import SimpleNamespace

    from airflow_cdc_provider.operators.stream import BinlogStreamOperator
    from airflow_cdc_provider.pipeline.table_schemas import pending_resyncs
    from airflow_cdc_provider.state.store import StateStore

    store = StateStore(tmp_path / "state")
    store.storage.write_text(f"{store.CHECKPOINT}/offsets/0", 'v1\n{}\n{"file": "mysql-bin.000002", "pos": 500}\n')
    store.storage.write_text(f"{store.CHECKPOINT}/commits/0", "v1\n{}\n")
    assert store.checkpoint_offset() == at(500)
    for table in ("db.t", "db.u", "db.v"):
        store.write_finished_snapshot(snapshot(table))  # high watermark at 200, behind the checkpoint
    store.add_streamed_tables(["db.t"])
    op = BinlogStreamOperator(task_id="stream", config="unused.yaml")
    op._hold_tables_passed_unread(SimpleNamespace(state=store), ["db.t", "db.u"])
    held = pending_resyncs(store)
    assert set(held) == {"db.u"} and held["db.u"].position.pos == 500  # db.t was streamed; db.v is not launched

    fresh = StateStore(tmp_path / "fresh")  # no stream launched with this record yet: nothing to judge by
    fresh.storage.write_text(f"{fresh.CHECKPOINT}/offsets/0", 'v1\n{}\n{"file": "mysql-bin.000002", "pos": 500}\n')
    fresh.storage.write_text(f"{fresh.CHECKPOINT}/commits/0", "v1\n{}\n")
    fresh.write_finished_snapshot(snapshot("db.u"))
    op._hold_tables_passed_unread(SimpleNamespace(state=fresh), ["db.u"])
    assert pending_resyncs(fresh) == {}
