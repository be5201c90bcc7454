"""A pipeline's YAML edited between DAG runs: a table added while a continuous stream runs, a table taken out
(``airflow-cdc uncapture``) and added back, and the sink moved while the state store stays. Checked by comparing the sink with MariaDB row by row."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from airflow_cdc_provider.hooks.spark_job import process_alive
from airflow_cdc_provider.state.store import StateStore, table_dir_name
from airflow_cdc_provider.testing.airflow_run import BackgroundDagRun, run_dag

from .cdc_helpers import (jdbc_pipeline_sink, parquet_sink, sink_rows, source_rows, stream_state, table_types, wait_until,
                          write_pipeline)
from .test_generated_dag import make_shop

CLI = str(Path(sys.executable).parent / "airflow-cdc")
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


def test_sink_path_changed_while_state_path_stays(airflow_home, source_db, tmp_path, spark):
    """The state store records what was written to one sink: with sink.path moved and state.path kept, a run
    would stream only the changes since into an empty sink. The run fails at validation instead, naming both
    locations, writes nothing to the new one, and the pipeline goes on once sink.path is put back."""
    env, dags, pipelines = airflow_home
    make_shop(source_db, orders=300, customers=30)
    write_pipeline(pipelines, source_db, tmp_path)
    sink = parquet_sink(tmp_path)
    run1 = run_dag(env, dags, "shop_cdc", log_file=tmp_path / "run1.log")
    assert run1["state"] == "success", run1
    for t in ("orders", "customers"):
        assert sink_rows(spark, sink, {}, table_types(source_db, t)) == source_rows(source_db, t), t

    moved = tmp_path / "moved"
    write_pipeline(pipelines, source_db, tmp_path, sink=f"sink:\n  type: parquet\n  path: {moved}\n")
    source_db.execute("UPDATE orders SET note = 'while moved' WHERE id <= 2")
    run2 = run_dag(env, dags, "shop_cdc", log_file=tmp_path / "run2.log")
    states = {t["task_id"]: t["state"] for t in run2["tis"] if t["task_id"] != "snapshot_chunk"}
    assert run2["state"] == "failed", states
    assert states["validate_source"] == "failed" and states["stream"] != "success", states
    log = (tmp_path / "run2.log").read_text(errors="replace")
    said = [line for line in log.splitlines() if "state.path" in line and sink.path in line and str(moved) in line]
    assert said, log[-4000:]
    tables = {table_dir_name(source_db.table(t)) for t in ("orders", "customers")}
    written = [p for p in moved.rglob("*") if p.suffix == ".parquet" or p.name in tables] if moved.exists() else []
    assert written == [], written

    write_pipeline(pipelines, source_db, tmp_path)
    run3 = run_dag(env, dags, "shop_cdc", log_file=tmp_path / "run3.log")
    assert run3["state"] == "success", run3
    for t in ("orders", "customers"):
        assert sink_rows(spark, sink, {}, table_types(source_db, t)) == source_rows(source_db, t), t
    orders = sink_rows(spark, sink, {}, table_types(source_db, "orders"))
    assert [orders[(i,)][2] for i in (1, 2)] == ["while moved", "while moved"]


# each startup mode, sink and route once (the route does not touch the sink; each sink's re-snapshot is its own)
@pytest.mark.parametrize("startup, sink_type, route", [("latest", "parquet", "conf"), ("initial", "jdbc", "cli")])
def test_a_table_taken_out_stops_streaming_and_comes_back_snapshotted(airflow_home, source_db, postgres, tmp_path,
                                                                       spark, startup, sink_type, route):
    """A table left out of source.tables is streamed still, until ``airflow-cdc uncapture`` (or a DAG run with
    conf ``{"uncapture": [...]}``) takes it out of the state: that run streams the other table alone and leaves
    the table's sink as it was, with no re-snapshot of anything. Added back, it is snapshotted again and its sink
    converges (rows deleted meanwhile are gone), also under a startup mode that snapshots nothing by itself."""
    env, dags, pipelines = airflow_home
    make_shop(source_db, orders=300, customers=40)
    extra = f"stream:\n  startup: {startup}\n"
    secrets, sink_yaml, sink = {}, None, parquet_sink(tmp_path)
    if sink_type == "jdbc":
        env, sink_yaml, sink, secrets = jdbc_pipeline_sink(env, postgres, source_db)

    def converged(table: str) -> bool:
        return sink_rows(spark, sink, secrets, table_types(source_db, table)) == source_rows(source_db, table)

    def write(tables=("orders", "customers")):
        return write_pipeline(pipelines, source_db, tmp_path, extra, tables=tables, sink=sink_yaml)

    config = write()
    if startup == "latest":  # changes of both tables for the sink to hold
        run_dag(env, dags, "shop_cdc", log_file=tmp_path / "run0.log")
        source_db.execute("UPDATE customers SET name = 'streamed' WHERE `customer id` <= 'c0035'")
    state = StateStore(tmp_path / "state")
    customers = source_db.table("customers")
    run1 = run_dag(env, dags, "shop_cdc", log_file=tmp_path / "run1.log")
    assert run1["state"] == "success", run1

    def uncapture():
        return subprocess.run([CLI, "uncapture", str(config), "--table", customers], capture_output=True,
                              text=True, timeout=120, env={**os.environ, **env})

    held = sink_rows(spark, sink, secrets, table_types(source_db, "customers"))
    source_db.execute("UPDATE orders SET note = 'after' WHERE id <= 5")
    source_db.execute("DELETE FROM customers WHERE `customer id` >= 'c0030'")
    source_db.execute("UPDATE customers SET name = 'renamed' WHERE `customer id` <= 'c0004'")
    if route == "cli":
        res = uncapture()
        assert res.returncode == 2 and res.stderr.strip() == (
            f"airflow-cdc: error: {config}: source.tables still captures {customers} (through '{customers}'): take "
            "it out of source.tables first (a pattern can exclude it: 're:...' with a negative lookahead), then run "
            "this again"), res.stderr
        write(tables=("orders",))
        res = uncapture()
        assert res.returncode == 0 and res.stdout.startswith(f"{customers}: no longer captured."), \
            res.stdout + res.stderr
        assert customers not in state.read_seed().tables and customers not in state.streamed_tables()
        assert customers not in state.read_status().tables
        assert uncapture().stderr.startswith(f"airflow-cdc: error: {config}: --table {customers}: not a table this "
                                             "pipeline has captured")
        run2 = run_dag(env, dags, "shop_cdc", log_file=tmp_path / "run2.log")
    else:  # from the Airflow UI: a DAG run's conf, refused (the run fails at its plan step) while the YAML has it
        refused = run_dag(env, dags, "shop_cdc", conf={"uncapture": [customers]}, log_file=tmp_path / "refused.log")
        assert refused["state"] == "failed", refused
        assert [t["state"] for t in refused["tis"] if t["task_id"] == "plan_chunks"] == ["failed"], refused
        assert (f"{config}: source.tables still captures {customers} (through '{customers}'): take it out of "
                "source.tables first (a pattern can exclude it: 're:...' with a negative lookahead), then trigger the "
                "DAG with this conf again") in (tmp_path / "refused.log").read_text()
        assert customers in state.streamed_tables()
        write(tables=("orders",))
        run2 = run_dag(env, dags, "shop_cdc", conf={"uncapture": [customers]}, log_file=tmp_path / "run2.log")
        assert f"{customers}: no longer captured." in (tmp_path / "run2.log").read_text()
        assert customers not in state.read_seed().tables and customers not in state.streamed_tables()
    assert run2["state"] == "success", run2
    assert [t for t in run2["tis"] if t["task_id"] == "snapshot_chunk" and t["state"] == "success"] == []
    assert state.read_status().tables == [source_db.table("orders")]
    if startup == "initial":
        assert converged("orders")
    assert sink_rows(spark, sink, secrets, table_types(source_db, "customers")) == held
    assert held != source_rows(source_db, "customers")  # the sink did not follow the changes, as asked

    write()
    source_db.execute("DELETE FROM customers WHERE `customer id` = 'c0000'")
    run3 = run_dag(env, dags, "shop_cdc", log_file=tmp_path / "run3.log")
    assert run3["state"] == "success", run3
    for t in ("orders", "customers") if startup == "initial" else ("customers",):
        assert converged(t), t
    source_db.execute("UPDATE customers SET name = 'streamed again' WHERE `customer id` = 'c0001'")
    run4 = run_dag(env, dags, "shop_cdc", log_file=tmp_path / "run4.log")
    assert run4["state"] == "success", run4
    assert converged("customers")
    assert sink_rows(spark, sink, secrets, table_types(source_db, "customers"))[("c0001",)][1] == "streamed again"
