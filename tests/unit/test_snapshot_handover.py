"""What lets a second DAG run re-snapshot beside a running continuous stream: the planned snapshot a run leaves
in the state store (another run leaves that table to it), the reload request the running stream takes up, and
collect's rule that an older epoch never replaces a newer one. Against the real state store and parquet sink."""

from airflow_cdc_provider.core.chunks import Chunk, TableId
from airflow_cdc_provider.core.offsets import BinlogOffset
from airflow_cdc_provider.core.reports import ChunkReport
from airflow_cdc_provider.pipeline.collect import collect_watermarks
from airflow_cdc_provider.sinks.base import SinkConfig
from airflow_cdc_provider.sinks.parquet import ParquetLayout
from airflow_cdc_provider.sinks.registry import open_sink
from airflow_cdc_provider.state.records import PlannedSnapshot, ReloadRequest, StreamStatus, TablePlan
from airflow_cdc_provider.state.store import StateStore


def report(table: str, epoch: int, hw: int) -> ChunkReport:
    chunk = Chunk(TableId.parse(table), 0, ("id",), None, None, epoch=epoch)
    return ChunkReport(chunk, BinlogOffset("mysql-bin.000002", hw - 10), BinlogOffset("mysql-bin.000002", hw), 5, 0, 0.1)


def test_a_planned_snapshot_is_under_way_until_an_epoch_as_new_finishes(tmp_path):
    store = StateStore(tmp_path / "state")
    assert store.planned_snapshots() == {}
    planned = PlannedSnapshot("db.t", 200, "shop_cdc", "manual__2026-11-26")
    store.write_planned_snapshot(planned)
    assert store.planned_snapshot("db.t") == planned and store.planned_snapshots() == {"db.t": planned}

    sink = open_sink(SinkConfig("parquet", path=str(tmp_path / "sink")), {})
    store.write_window_reports("db.t", 100, [report("db.t", 100, 500)])
    collect_watermarks(store, sink, {"db.t": TablePlan(100, 1)})  # an older epoch finishing: 200 is still due
    assert store.planned_snapshots() == {"db.t": planned}
    store.write_window_reports("db.t", 200, [report("db.t", 200, 900)])
    collect_watermarks(store, sink, {"db.t": TablePlan(200, 1)})
    assert store.planned_snapshot("db.t") is None and store.planned_snapshots() == {}


def test_an_older_epoch_collected_after_a_newer_one_changes_nothing(tmp_path):
    store = StateStore(tmp_path / "state")
    sink = open_sink(SinkConfig("parquet", path=str(tmp_path / "sink")), {})
    for epoch, hw in ((100, 500), (200, 900)):
        store.write_window_reports("db.t", epoch, [report("db.t", epoch, hw)])
    layout = ParquetLayout(str(tmp_path / "sink"))
    seed = collect_watermarks(store, sink, {"db.t": TablePlan(200, 1)})
    current = layout.read_current("db.t")
    # the run that planned epoch 100 (a chunk cleared late, a slower run) collects after 200 finished
    again = collect_watermarks(store, sink, {"db.t": TablePlan(100, 1)})
    assert store.finished_snapshot("db.t").epoch == 200
    assert layout.read_current("db.t") == current and current["epoch"] == 200
    assert again.tables["db.t"].epoch == seed.tables["db.t"].epoch == 200


def test_a_reload_request_round_trips_and_only_the_one_taken_up_is_cleared(tmp_path):
    store = StateStore(tmp_path / "state")
    assert store.read_reload() is None
    first = ReloadRequest({"db.t": 200}, "shop_cdc/run1/stream", requested_at=1000.0)
    store.request_reload(first)
    assert store.read_reload() == first
    newer = ReloadRequest({"db.t": 200, "db.u": 300}, "airflow-cdc resnapshot", requested_at=1001.0)
    store.request_reload(newer)
    store.clear_reload(first)  # a stream set up from the first must not swallow the second
    assert store.read_reload() == newer
    store.clear_reload(newer)
    assert store.read_reload() is None


def test_the_stream_status_says_which_epochs_the_running_stream_has_taken_up(tmp_path):
    store = StateStore(tmp_path / "state")
    store.write_status(StreamStatus("running", "continuous", launch_id="L1", epochs={"db.t": 200}))
    assert store.read_status().epochs == {"db.t": 200}
    legacy = {k: v for k, v in store.read_json(store.STATUS).items() if k != "epochs"}  # a job of an earlier version
    store.write_json(store.STATUS, legacy)
    assert store.read_status().epochs == {}


class RunStates:
    """The task instance's view of other DAG runs (``RuntimeTaskInstance.get_dagrun_state``), as Airflow answers."""

    dag_id, run_id = "shop_cdc", "manual__b"

    def __init__(self, states: dict[str, str]) -> None:
        self.states = states

    def get_dagrun_state(self, dag_id: str, run_id: str) -> str:
        if run_id not in self.states:
            raise RuntimeError(f"DagRun {dag_id}/{run_id} not found")
        return self.states[run_id]


def test_a_snapshot_is_under_way_only_in_another_run_still_queued_or_running():
    from airflow_cdc_provider.operators.dag_run import snapshots_under_way

    planned = {t: PlannedSnapshot(t, 100, "shop_cdc", run) for t, run in
               (("db.a", "manual__a"), ("db.b", "manual__b"), ("db.c", "scheduled__c"), ("db.d", "deleted"),
                ("db.e", "queued__e"))}
    ti = RunStates({"manual__a": "running", "manual__b": "running", "scheduled__c": "failed", "queued__e": "queued"})
    assert snapshots_under_way({"ti": ti}, planned) == {"db.a": planned["db.a"], "db.e": planned["db.e"]}
