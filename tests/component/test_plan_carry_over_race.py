"""Two DAG runs of one continuous pipeline plan while a rename is due: only one of them carries it over.

The source renamed a captured table (``t`` to ``u``) and the stream committed the batch that read it, so the
next plan step moves ``t``'s sink data to ``u`` and plans ``u``'s snapshot, holding the stream lease
(``PlanChunksOperator._stream_held``). Two runs of a continuous pipeline can run their plan steps at the same
time: run A takes the lease first and carries over; run B gets the lease only after. B must then see that the
rename is done and that ``u``'s snapshot is A's (A's run is still running), and leave both alone. Deciding
before the lease (the bug) made B go on with a stale plan: a false "not carried over" warning and ``u``
planned a second time, over A's plan. Real MariaDB, real local state store and parquet sink; no Spark.
"""

from __future__ import annotations

from types import SimpleNamespace

from airflow_cdc_provider.core.chunks import Chunk, TableId
from airflow_cdc_provider.core.offsets import BinlogOffset, EventPosition
from airflow_cdc_provider.core.reports import ChunkReport
from airflow_cdc_provider.core.schema_changes import SchemaChange
from airflow_cdc_provider.operators.plan import PlanChunksOperator
from airflow_cdc_provider.pipeline.collect import build_seed
from airflow_cdc_provider.pipeline.renames import renames_due
from airflow_cdc_provider.pipeline.resolve import load_pipeline
from airflow_cdc_provider.state.records import FinishedSnapshot
from tests.unit.test_renames import rows_of, table_rows as sink_rows, write_rows

DAG_ID = "shop_cdc"
RUN_A, RUN_B = "manual__run_a", "manual__run_b"
SINK_ROWS = [(1, "one"), (3, "three")]  # t's rows in the sink: 1, 2 and 3 written, 2 deleted since


def captured_and_renamed(state, old: str, new: str) -> None:
    """The state a pipeline leaves when it captured ``old`` (snapshot, seed, streamed, definition saved) and its
    stream read ``RENAME TABLE old TO new`` (the old name's drop, naming the new one) at ``b.000002:500`` and
    committed the batch that read it (it ends at 900)."""
    chunk = Chunk(TableId.parse(old), 0, ("id",), None, None, epoch=1)
    report = ChunkReport(chunk, BinlogOffset("b.000002", 90), BinlogOffset("b.000002", 100), 3, 0, 0.1)
    state.write_finished_snapshot(FinishedSnapshot(old, 1, (report,)))
    state.write_table_schema(old, rows_of(old).schema.to_dict())
    state.write_seed(build_seed(state.finished_tables()))
    state.add_streamed_tables([old])
    state.record_schema_changes([SchemaChange("drop", TableId.parse(old), f"RENAME TABLE {old} TO {new}",
                                              f"renamed to {new}", EventPosition("b.000002", 500),
                                              TableId.parse(new))])
    offset = '{"file": "b.000002", "pos": 900, "gtid": null, "ts_ms": 0, "behind": false}'
    state.storage.write_text(f"{state.CHECKPOINT}/offsets/0", f"v1\n{{\"batchWatermarkMs\":0}}\n{offset}\n")
    state.storage.write_text(f"{state.CHECKPOINT}/commits/0", "v1\n{\"nextBatchWatermarkMs\":0}")


def plan_step(config: str, run_id: str):
    """A plan_chunks task of ``run_id``: the operator and the context Airflow would give it (both runs running)."""
    def xcom_push(key, value):
        ti.pushed[key] = value

    def get_dagrun_state(dag_id, other_run_id):
        assert dag_id == DAG_ID and other_run_id in (RUN_A, RUN_B), (dag_id, other_run_id)
        return "running"

    ti = SimpleNamespace(dag_id=DAG_ID, run_id=run_id, task_id="plan_chunks", try_number=1, pushed={},
                         xcom_push=xcom_push, get_dagrun_state=get_dagrun_state)
    return PlanChunksOperator(task_id="plan_chunks", config=config), {"ti": ti, "dag_run": None}


def tables_of(tasks: list[dict]) -> set[str]:
    return {c["table"] for task in tasks for c in task["chunks"]} | {t for task in tasks for t in task["tables"]}


def renamed(source_db, tmp_path, monkeypatch, stream: str = "{mode: continuous}"):
    """A pipeline of ``t`` and ``u`` (``stream``: its stream section) whose source renamed ``t`` to ``u`` and whose
    stream committed the batch that read it: the rename is due. Its config path, pipeline, sink, and the names."""
    old, new = source_db.table("t"), source_db.table("u")
    source_db.execute("CREATE TABLE u (id INT NOT NULL PRIMARY KEY, name VARCHAR(20))")  # t renamed: no t left
    source_db.executemany("INSERT INTO u VALUES (%s, %s)", [(1, "one"), (3, "three"), (4, "four")])
    monkeypatch.setenv("AIRFLOW_CONN_SRC", source_db.server.connection_uri())
    config = tmp_path / "shop.yaml"
    config.write_text(f"dag_id: {DAG_ID}\nsource: {{conn_id: src, tables: [{old}, {new}]}}\n"
                      f"stream: {stream}\n"
                      f"sink: {{type: parquet, path: {tmp_path / 'sink'}}}\nstate: {{path: {tmp_path / 'state'}}}\n")
    p = load_pipeline(config)
    sink = p.open_sink()
    write_rows(sink, old, 0, [(1, "one"), (2, "two"), (3, "three")])
    write_rows(sink, old, 1, [(2, None)], op="d", pos=200)
    captured_and_renamed(p.state, old, new)
    assert sink_rows(sink, old) == SINK_ROWS
    assert list(renames_due(p.state, p.source_tables)) == [new]  # the rename is due: both runs would carry it
    return str(config), p, sink, old, new


def test_a_run_that_gets_the_lease_after_another_carried_over_leaves_the_rename_and_its_snapshot_alone(
        source_db, tmp_path, monkeypatch, capsys):
    """Run A carries ``t`` over to ``u`` and plans ``u``'s snapshot while run B waits for the lease; B, once it
    holds it, plans nothing of ``u`` and warns of nothing: the rename is done and the snapshot is A's."""
    config, p, sink, old, new = renamed(source_db, tmp_path, monkeypatch)
    op_a, context_a = plan_step(config, RUN_A)
    op_b, context_b = plan_step(config, RUN_B)
    # the operators log through Airflow's structlog to stdout (the task's log), not the logging module's handlers
    capsys.readouterr()
    logs: dict[str, str] = {}  # each phase's log: B before the lease, A's whole step, B under the lease
    after_a: dict = {}  # what A's step left, seen before B goes on
    real_held = op_b._stream_held

    def a_first_then_b(context, p_b, carrying):
        """B is about to take the lease: A's whole plan step runs first (once, however often B comes here)."""
        if not after_a:
            logs["b before the lease"] = capsys.readouterr().out
            after_a["tasks"] = op_a.execute(context_a)
            logs["a"] = capsys.readouterr().out
            after_a["planned"] = p.state.planned_snapshots()
            after_a["lease"] = p.state.read_lease()
            after_a["carried"] = p.state.carried_tables()
            after_a["rows"] = sink_rows(p.open_sink(), new)
        return real_held(context, p_b, carrying)

    monkeypatch.setattr(op_b, "_stream_held", a_first_then_b)
    tasks_b = op_b.execute(context_b)
    logs["b under the lease"] = capsys.readouterr().out
    assert after_a, "B's plan step never came to the stream lease: the race was not run"

    # A carried over: t's sink data is u's, the state knows, and u is snapshotted in A's run
    assert f"its sink data moved to {new}" in logs["a"], logs  # A's warning: the log is seen here
    assert after_a["carried"] == {new: old} and after_a["rows"] == SINK_ROWS
    assert new in tables_of(after_a["tasks"]) and old not in tables_of(after_a["tasks"])
    plan_a = context_a["ti"].pushed["plan"]
    assert list(plan_a) == [new]
    planned = after_a["planned"][new]
    assert (planned.dag_id, planned.run_id, planned.epoch) == (DAG_ID, RUN_A, plan_a[new]["epoch"])
    assert after_a["lease"] is None  # given up before B takes it

    # B: nothing carried (no false "not carried over"), nothing of u planned, A's plan of u kept
    assert not [phase for phase, text in logs.items() if "not carried over" in text], logs
    assert new not in tables_of(tasks_b), tasks_b
    assert new not in context_b["ti"].pushed["plan"]
    assert p.state.planned_snapshots()[new] == planned
    assert p.state.carried_tables() == {new: old}  # carried, its snapshot (A's) still to come

    # the sink data stays under u, the lease is free
    assert sink_rows(sink, new) == SINK_ROWS
    assert not sink.layout.storage.exists(old)
    assert p.state.read_lease() is None


def test_a_run_that_plans_between_another_s_carry_over_and_its_plan_is_refused_then_leaves_the_snapshot_to_it(
        source_db, tmp_path, monkeypatch, capsys):
    """Run B plans in the moment after run A moved ``t``'s sink data to ``u`` and before A planned ``u``'s
    snapshot: the rename is no longer due, but ``u`` is carried over and planned by no one yet. B snapshots a
    table carried over, so it asks for the lease too, and is refused while A holds it (rather than planning ``u``
    beside A). B's retry, after A, leaves ``u``'s snapshot to A."""
    from airflow.sdk.exceptions import AirflowException

    config, p, sink, old, new = renamed(source_db, tmp_path, monkeypatch)
    op_a, context_a = plan_step(config, RUN_A)
    op_b, context_b = plan_step(config, RUN_B)
    real_carry_over = op_a._carry_over
    seen: dict = {}

    def carry_over_then_b(p_a, sink_a, renames, lost):
        """A's real carry-over; then, before A plans, B's whole plan step."""
        real_carry_over(p_a, sink_a, renames, lost)
        seen["carried"], seen["planned"] = p.state.carried_tables(), dict(p.state.planned_snapshots())
        capsys.readouterr()
        try:
            seen["b"] = op_b.execute(context_b)
        except AirflowException as refused:
            seen["refused"] = str(refused)
        seen["b log"] = capsys.readouterr().out

    monkeypatch.setattr(op_a, "_carry_over", carry_over_then_b)
    capsys.readouterr()
    tasks_a = op_a.execute(context_a)
    assert seen["carried"] == {new: old} and new not in seen["planned"]  # B came in the gap
    assert "b" not in seen, f"B planned beside A's carry-over: {seen['b']}"
    assert f"{DAG_ID}/{RUN_A}/plan_chunks is carrying renamed tables over" in seen["refused"]
    assert f"table {old} no longer exists on the source" in seen["b log"]  # what B saw is logged all the same
    assert new in tables_of(tasks_a) and list(context_a["ti"].pushed["plan"]) == [new]
    planned = p.state.planned_snapshots()[new]
    assert (planned.run_id, planned.epoch) == (RUN_A, context_a["ti"].pushed["plan"][new]["epoch"])

    _, context_b = plan_step(config, RUN_B)  # B's retry
    tasks_b = op_b.execute(context_b)
    assert new not in tables_of(tasks_b) and new not in context_b["ti"].pushed["plan"]
    assert p.state.planned_snapshots()[new] == planned  # still A's
    assert f"its snapshot (epoch {planned.epoch}) is under way in DAG run {RUN_A}" in capsys.readouterr().out
    assert sink_rows(sink, new) == SINK_ROWS and p.state.read_lease() is None
