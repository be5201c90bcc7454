"""A pipeline's YAML edited between DAG runs: a table added while a continuous stream runs, checked by comparing
the sink with MariaDB row by row. A table taken out (``airflow-cdc uncapture``) and added back runs in
test_table_renames.py, the sink moved while the state store stays in test_generated_dag.py, each in a pipeline
that test runs anyway."""

from __future__ import annotations

import os
import signal

from airflow_cdc_provider.hooks.spark_job import process_alive
from airflow_cdc_provider.state.store import StateStore
from airflow_cdc_provider.testing.airflow_run import BackgroundDagRun

from .cdc_helpers import parquet_sink, sink_rows, source_rows, stream_state, table_types, wait_until, write_pipeline
from .test_generated_dag import make_shop

CONTINUOUS = "stream:\n  mode: continuous\n  trigger_interval: 1 second\n  heartbeat_timeout: 60\n"


def _converged(spark, sink, source_db, table: str) -> bool:
    return sink_rows(spark, sink, {}, table_types(source_db, table)) == source_rows(source_db, table)


def test_table_added_while_a_continuous_stream_runs(airflow_home, source_db, tmp_path, spark):
    """A table added to source.tables reaches the sink and keeps following its changes: the next run stops the
    running stream, snapshots the new table and launches a stream of its own that reads both tables, instead of
    leaving a stream running that never reads the new table's binlog."""
    env, dags, pipelines = airflow_home
    make_shop(source_db, orders=500, customers=50)
    write_pipeline(pipelines, source_db, tmp_path, CONTINUOUS, tables=("orders",))
    state, sink = StateStore(tmp_path / "state"), parquet_sink(tmp_path)
    run1 = BackgroundDagRun(env, dags, "shop_cdc", tmp_path / "run1.log")
    run2 = None
    pids = []
    try:
        wait_until(lambda: stream_state(state) == "running", "the first run's stream to run", 600)
        first = state.read_json(state.LAUNCH)["pid"]
        pids.append(first)
        source_db.execute("UPDATE orders SET note = 'live' WHERE id <= 20")
        wait_until(lambda: _converged(spark, sink, source_db, "orders"), "orders to converge", 120)

        write_pipeline(pipelines, source_db, tmp_path, CONTINUOUS, tables=("orders", "customers"))
        run2 = BackgroundDagRun(env, dags, "shop_cdc", tmp_path / "run2.log")

        def relaunched():
            pid = (state.read_json(state.LAUNCH) or {}).get("pid")
            return pid not in (None, first) and process_alive(pid) and stream_state(state) == "running" and pid

        wait_until(lambda: run2.proc.poll() is not None or relaunched(),
                   "the second run to launch its own stream", 420)
        assert run2.proc.poll() is None, \
            f"the second run ended without a stream of its own: {run2.result(10)['xcom'].get('stream[-1]')}"
        pids.append(relaunched())
        wait_until(lambda: run1.proc.poll() is not None, "the first run to end after its stream was stopped", 120)
        assert not process_alive(first)
        first_result = run1.result(60)
        assert first_result["state"] in ("success", "failed"), first_result
        assert _converged(spark, sink, source_db, "customers"), "customers' snapshot differs from the source"

        source_db.execute("UPDATE customers SET name = 'changed live' WHERE `customer id` <= 'c0009'")
        source_db.execute("DELETE FROM customers WHERE `customer id` >= 'c0045'")
        source_db.execute("INSERT INTO customers VALUES ('live new', 'x')")
        source_db.execute("UPDATE orders SET note = 'live 2' WHERE id BETWEEN 100 AND 104")
        wait_until(lambda: all(_converged(spark, sink, source_db, t) for t in ("orders", "customers")),
                   "both tables' live changes to reach the sink", 180)
        for t in ("orders", "customers"):
            assert sink_rows(spark, sink, {}, table_types(source_db, t)) == source_rows(source_db, t), t
        customers = source_rows(source_db, "customers")
        assert len(customers) == 46 and customers[("live new",)] == ("live new", "x")

        state.request_stop()
        result = run2.result(300)
    finally:
        run1.kill()
        if run2 is not None:
            run2.kill()
        for pid in pids + [(state.read_json(state.LAUNCH) or {}).get("pid")]:
            if process_alive(pid):
                os.killpg(pid, signal.SIGKILL)
    assert result["state"] == "success", result
    assert result["xcom"]["stream[-1]"]["state"] == "stopped", result["xcom"]
