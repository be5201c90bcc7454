"""A backfill whose conf names a table to re-snapshot: its runs share the conf, so each would read the table
again, at once, and their collects would race to make their epochs current. A backfill run leaves a named table
whose snapshot another queued or running run has under way to that run; a run that is no backfill still
re-snapshots a table its conf names. Real MariaDB, real local state store and parquet sink; no Spark."""

from __future__ import annotations

from types import SimpleNamespace

from airflow_cdc_provider.operators.plan import PlanChunksOperator
from airflow_cdc_provider.pipeline.resolve import load_pipeline

DAG_ID = "shop_cdc"


def plan_step(config: str, run_id: str, run_type: str, conf: dict):
    """A plan_chunks task of ``run_id`` and the context Airflow would give it; every other run is running."""
    def xcom_push(key, value):
        ti.pushed[key] = value

    ti = SimpleNamespace(dag_id=DAG_ID, run_id=run_id, task_id="plan_chunks", try_number=1, pushed={},
                         xcom_push=xcom_push, get_dagrun_state=lambda dag_id, other: "running")
    dag_run = SimpleNamespace(run_type=run_type, conf=conf)
    return PlanChunksOperator(task_id="plan_chunks", config=config), {"ti": ti, "dag_run": dag_run}


def planned_tables(context) -> set[str]:
    return set(context["ti"].pushed["plan"])


def test_a_backfill_run_leaves_a_named_table_another_run_is_snapshotting(source_db, tmp_path, monkeypatch, capsys):
    source_db.execute("CREATE TABLE t (id INT NOT NULL PRIMARY KEY, v INT)")
    source_db.executemany("INSERT INTO t VALUES (%s, %s)", [(i, i) for i in range(1, 11)])
    table = source_db.table("t")
    monkeypatch.setenv("AIRFLOW_CONN_SRC", source_db.server.connection_uri())
    config = tmp_path / "shop.yaml"
    config.write_text(f"dag_id: {DAG_ID}\nsource: {{conn_id: src, tables: [{table}]}}\n"
                      f"sink: {{type: parquet, path: {tmp_path / 'sink'}}}\nstate: {{path: {tmp_path / 'state'}}}\n")
    state = load_pipeline(config).state
    conf = {"resnapshot": [table]}

    op, first = plan_step(str(config), "backfill__2026-11-01", "backfill", conf)
    op.execute(first)
    assert planned_tables(first) == {table}
    epoch = state.planned_snapshots()[table].epoch

    capsys.readouterr()
    op, second = plan_step(str(config), "backfill__2026-11-02", "backfill", conf)
    op.execute(second)
    assert planned_tables(second) == set()
    assert state.planned_snapshots()[table].epoch == epoch  # still the first run's
    assert f"its snapshot (epoch {epoch}) is under way in DAG run backfill__2026-11-01" in capsys.readouterr().out

    op, manual = plan_step(str(config), "manual__now", "manual", conf)  # asked for by hand: read again
    op.execute(manual)
    assert planned_tables(manual) == {table} and state.planned_snapshots()[table].run_id == "manual__now"
