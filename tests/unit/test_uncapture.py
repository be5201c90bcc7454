"""``airflow-cdc uncapture``'s refusals and what it leaves in the state store, against a real (local) state
store; the whole path through DAG runs is tests/e2e/test_table_renames.py."""

from __future__ import annotations

import time
from dataclasses import replace

import pytest

from airflow_cdc_provider.core.chunks import Chunk, TableId
from airflow_cdc_provider.core.offsets import BinlogOffset, EventPosition
from airflow_cdc_provider.core.reports import ChunkReport
from airflow_cdc_provider.core.schema_changes import SchemaChange
from airflow_cdc_provider.pipeline.collect import build_seed
from airflow_cdc_provider.pipeline.config import load_config
from airflow_cdc_provider.pipeline.resolve import captured_tables_in
from airflow_cdc_provider.pipeline.uncapture import UncaptureError, uncapture
from airflow_cdc_provider.state.records import (CARRY_OVER_MODE, FinishedSnapshot, PlannedSnapshot, StreamLease, StreamSeed,
                                                StreamStatus)
from airflow_cdc_provider.state.store import StateStore


def finished(table: str, hw: int) -> FinishedSnapshot:
    chunk = Chunk(TableId.parse(table), 0, ("id",), None, None, epoch=1)
    return FinishedSnapshot(table, 1, (ChunkReport(chunk, BinlogOffset("b.000002", hw - 10),
                                                   BinlogOffset("b.000002", hw), 5, 0, 0.1),))


@pytest.fixture
def pipeline(tmp_path):
    """A pipeline that snapshotted and streamed db.t and db.u, with db.u now out of source.tables."""
    state = StateStore(tmp_path / "state")
    for table, hw in (("db.t", 100), ("db.u", 200)):
        state.write_finished_snapshot(finished(table, hw))
        state.write_table_schema(table, {"table": table})
    state.write_seed(build_seed(state.finished_tables()))
    state.add_streamed_tables(["db.t", "db.u"])
    state.record_schema_changes([SchemaChange("truncate", TableId.parse("db.u"), "TRUNCATE u",
                                              position=EventPosition("b.000002", 300)),
                                 SchemaChange("truncate", TableId.parse("db.t"), "TRUNCATE t",
                                              position=EventPosition("b.000002", 400))])

    def config(tables: str):
        path = tmp_path / "shop.yaml"
        path.write_text(f"source: {{conn_id: src, tables: {tables}}}\nstate: {{path: {tmp_path / 'state'}}}\n")
        return load_config(path)

    return config, state


def test_the_table_leaves_the_seed_the_streamed_list_and_the_schema_changes(pipeline, tmp_path):
    config, state = pipeline
    done = uncapture(config("[db.t]"), state, "db.u", now=1_800_000_000)
    assert done.archive == str(tmp_path / "state" / "uncaptured" / "db.u-1800000000000")
    assert list(state.read_seed().tables) == ["db.t"] and state.read_seed().start == BinlogOffset("b.000002", 100)
    assert state.streamed_tables() == {"db.t"} and captured_tables_in(state) == {"db.t"}
    assert [str(c.table) for c in state.schema_changes()] == ["db.t"]
    archived = state.read_json("uncaptured/db.u-1800000000000/uncaptured.json")
    assert [c["statement"] for c in archived["schema_changes"]] == ["TRUNCATE u"]
    assert state.read_json("uncaptured/db.u-1800000000000/state/snapshot.json")["table"] == "db.u"


@pytest.mark.parametrize("tables, table, problem", [
    ("[db.t, db.u]", "db.u", "source.tables still captures db.u (through 'db.u'): take it out of source.tables first"),
    ("['db.*']", "db.u", "source.tables still captures db.u (through 'db.*')"),
    ("[db.t]", "db.v", "--table db.v: not a table this pipeline has captured (did you mean 'db.u'?); it has "
                       "captured: db.t, db.u"),
])
def test_refused_while_the_table_is_still_captured_or_was_never(pipeline, tables, table, problem):
    config, state = pipeline
    with pytest.raises(UncaptureError) as exc:
        uncapture(config(tables), state, table)
    assert problem in str(exc.value), str(exc.value)
    assert captured_tables_in(state) == {"db.t", "db.u"}


def test_refused_while_a_stream_runs_or_launches_or_a_snapshot_of_it_is_planned(pipeline):
    config, state = pipeline
    state.write_status(StreamStatus("running", "continuous"))
    with pytest.raises(UncaptureError, match="is running or launching and reads db.u: stop it first"):
        uncapture(config("[db.t]"), state, "db.u")
    later = time.time() + 86400  # the status's heartbeat is stale by then: a killed stream's
    launching = StreamLease("l2", "shop_cdc/run2/stream", 1, "elsewhere", 1, "continuous", acquired_at=later - 5)
    assert state.try_lease(launching) is None  # a launch, before its first status
    state.write_lease(launching)  # taken just before ``later`` (the store records the time it took it at)
    with pytest.raises(UncaptureError, match="is running or launching"):
        uncapture(config("[db.t]"), state, "db.u", now=later)
    state.release_lease("l2")
    carrying = StreamLease("l3", "shop_cdc/run3/plan_chunks", 1, "elsewhere", 1, CARRY_OVER_MODE,
                           acquired_at=later - 5)
    assert state.try_lease(carrying) is None  # a plan step moving a renamed table
    state.write_lease(carrying)
    with pytest.raises(UncaptureError, match="shop_cdc/run3/plan_chunks is carrying renamed tables over to their new "
                                             "names: run this again once it has finished"):
        uncapture(config("[db.t]"), state, "db.u", now=later)
    state.release_lease("l3")
    # a snapshot of any table: the run that finishes it writes the seed and the lists uncapture rewrites
    state.write_planned_snapshot(PlannedSnapshot("db.t", 2, "shop_cdc", "manual__1"))
    with pytest.raises(UncaptureError, match="snapshots planned by DAG run\\(s\\) manual__1 \\(db.t, epoch 2\\) have "
                                             "not finished: .* run this again with --force"):
        uncapture(config("[db.t]"), state, "db.u", now=later)
    assert captured_tables_in(state) == {"db.t", "db.u"}
    uncapture(config("[db.t]"), state, "db.u", now=later, force=True)
    assert captured_tables_in(state) == {"db.t"} and set(state.uncaptured_tables()) == {"db.u"}


def test_the_last_querys_epoch_of_the_table_is_forgotten_with_it(pipeline):
    """Kept, it would pass for the epoch a later snapshot of the table follows (an overlapped epoch)."""
    config, state = pipeline
    state.write_status(StreamStatus("finished", "available_now", epochs={"db.t": 1, "db.u": 1},
                                    tables=["db.t", "db.u"]))
    beat = state.read_status().updated_at
    uncapture(config("[db.t]"), state, "db.u")
    status = state.read_status()
    assert (status.epochs, status.tables, status.updated_at) == ({"db.t": 1}, ["db.t"], beat)


def test_refused_for_the_streams_only_table(pipeline):
    config, state = pipeline
    uncapture(config("[db.t]"), state, "db.u")
    with pytest.raises(UncaptureError, match="db.t is the only table the stream reads.*new state.path"):
        uncapture(config("[db.v]"), state, "db.t")


def test_a_seed_of_one_re_snapshotted_table_is_not_the_streams_only_table(pipeline):
    """Under a startup mode other than initial the seed holds only the tables snapshotted since; the stream
    reads the others as well (the streamed list)."""
    config, state = pipeline
    seed = state.read_seed()
    state.write_seed(StreamSeed(seed.start, {"db.u": seed.tables["db.u"]}))
    uncapture(config("[db.t]"), state, "db.u")
    assert state.read_seed().tables == {} and state.streamed_tables() == {"db.t"}


@pytest.mark.parametrize("step", ["rename", "write_seed", "streamed", "complete"])
def test_a_crash_half_way_leaves_the_table_snapshotted_when_captured_again_and_can_run_again(pipeline, monkeypatch,
                                                                                            step):
    """Whichever step a crash stops uncapture at, the table counts as taken out for a snapshot once captured again
    (its sink holds the rows of before), no seed built from the finished snapshots takes it back after the first
    step, and running uncapture again finishes the job, into the same archive."""
    config, state = pipeline
    method = {"rename": "rename", "write_seed": "write_seed"}.get(step, "write_json")
    owner = state.storage if step == "rename" else state
    real = getattr(owner, method)

    def crash(*args, **kwargs):
        if step == "streamed" and args[0] != state.STREAMED:
            return real(*args, **kwargs)
        if step == "complete" and not (args[0].endswith("uncaptured.json") and args[1]["complete"]):
            return real(*args, **kwargs)
        raise OSError("killed")

    monkeypatch.setattr(owner, method, crash)
    with pytest.raises(OSError, match="killed"):
        uncapture(config("[db.t]"), state, "db.u")
    monkeypatch.setattr(owner, method, real)
    assert state.recaptured_tables() == {"db.u"}
    archive = state.unfinished_uncapture("db.u")
    assert archive is not None
    done = uncapture(config("[db.t]"), state, "db.u")
    assert done.archive == state.location(archive) and state.unfinished_uncapture("db.u") is None
    assert captured_tables_in(state) == {"db.t"} and state.streamed_tables() == {"db.t"}
    assert "db.u" not in state.read_seed().tables and state.recaptured_tables() == {"db.u"}
    with pytest.raises(UncaptureError, match="not a table this pipeline has captured"):
        uncapture(config("[db.t]"), state, "db.u")


def test_a_snapshot_after_the_uncapture_ends_the_recapture(pipeline):
    config, state = pipeline
    uncapture(config("[db.t]"), state, "db.u", now=1000.0)
    assert state.recaptured_tables() == {"db.u"}
    old = state.finished_snapshot("db.t")
    state.write_finished_snapshot(replace(old, table="db.u", epoch=999_000))  # planned before: does not count
    assert state.recaptured_tables() == {"db.u"}
    state.write_finished_snapshot(replace(old, table="db.u", epoch=1_000_001))
    assert state.recaptured_tables() == set()


def test_a_stopped_streams_half_done_batch_is_named(pipeline):
    """A stopped or killed stream's planned batch is re-run without the table: what it wrote of the table stays,
    which the result says."""
    import json

    config, state = pipeline
    offset = json.dumps(BinlogOffset("b.000003", 400).to_dict())
    state.storage.write_text(f"{state.CHECKPOINT}/offsets/0", f"v1\n{{}}\n{offset}\n")
    done = uncapture(config("[db.t]"), state, "db.u")
    assert "the stream's last batch, through b.000003:400, was stopped before it committed" in done.describe()
    assert captured_tables_in(state) == {"db.t"}


def test_a_run_planned_before_the_uncapture_does_not_bring_the_table_back(pipeline, tmp_path):
    """A cleared chunk task and collect of a run that planned the table before it was taken out: the snapshot is
    not made current, and no seed takes the table back."""
    from airflow_cdc_provider.pipeline.collect import collect_watermarks
    from airflow_cdc_provider.sinks.base import SinkConfig
    from airflow_cdc_provider.sinks.registry import open_sink
    from airflow_cdc_provider.state.records import TablePlan

    config, state = pipeline
    uncapture(config("[db.t]"), state, "db.u", now=1000.0)
    chunk = Chunk(TableId.parse("db.u"), 0, ("id",), None, None, epoch=999_000)
    state.write_window_reports("db.u", 999_000, [ChunkReport(chunk, BinlogOffset("b.000004", 10),
                                                             BinlogOffset("b.000004", 20), 5, 0, 0.1)])
    sink = open_sink(SinkConfig("parquet", path=str(tmp_path / "sink")), {})
    seed = collect_watermarks(state, sink, {"db.u": TablePlan(999_000, 1)})
    assert state.finished_snapshot("db.u") is None and "db.u" not in seed.tables
    assert captured_tables_in(state) == {"db.t"}


def test_a_second_try_keeps_the_schema_changes_the_first_archived(pipeline, monkeypatch):
    """A crash after the table's schema changes left the store's list: the try that finishes the job still
    archives them."""
    config, state = pipeline
    change = SchemaChange("truncate", TableId.parse("db.u"), "TRUNCATE u", "", EventPosition("b.000003", 100))
    state.record_schema_changes([change])
    before = [c for c in state.schema_changes() if str(c.table) == "db.u"]
    assert change in before
    real = state.write_json

    def crash(rel, data):
        if rel.endswith("uncaptured.json") and data["complete"]:
            raise OSError("killed")
        return real(rel, data)

    monkeypatch.setattr(state, "write_json", crash)
    with pytest.raises(OSError, match="killed"):
        uncapture(config("[db.t]"), state, "db.u")
    monkeypatch.setattr(state, "write_json", real)
    assert all(str(c.table) != "db.u" for c in state.schema_changes())
    done = uncapture(config("[db.t]"), state, "db.u")
    archive = done.archive.removeprefix(state.location("")).strip("/")
    assert [SchemaChange.from_dict(d) for d in state.read_json(f"{archive}/uncaptured.json")["schema_changes"]] == \
        before
