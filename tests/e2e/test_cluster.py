"""The same pipeline on a real Spark standalone cluster (master + worker on loopback),
in client and in cluster deploy mode, through dag.test(), ending with `airflow-cdc verify` equal. State
store and sink are given as file:// URIs (a path the cluster shares)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from airflow_cdc_provider.sinks.parquet import ParquetLayout
from airflow_cdc_provider.spark.launch.standalone_rest import StandaloneRest
from airflow_cdc_provider.state.store import StateStore
from airflow_cdc_provider.testing.airflow_run import BackgroundDagRun, run_dag
from airflow_cdc_provider.testing.spark_cluster import PrivateSparkCluster

from .cdc_helpers import rows_emitted, stream_state, wait_until
from .test_generated_dag import make_shop

CLI = str(Path(sys.executable).parent / "airflow-cdc")
SMALL_RESOURCES = "spark:\n  executor_memory: 512m\n  driver_memory: 512m\n  total_executor_cores: 1\n"


@pytest.fixture(scope="module")
def cluster():
    with PrivateSparkCluster(workers=1, cores=4, memory="4g") as c:
        yield c


def write_cluster_pipeline(pipelines: Path, db, tmp_path: Path, extra: str = "") -> Path:
    p = pipelines / "shop_cdc.yaml"
    p.write_text(
        f"dag_id: shop_cdc\nsource:\n  conn_id: src\n  tables: [{db.table('orders')}, {db.table('customers')}]\n"
        "snapshot:\n  chunk_size: 2000\n  max_active_chunks: 1\n"
        f"sink:\n  type: parquet\n  path: file://{tmp_path / 'shared' / 'sink'}\n"
        f"state:\n  path: file://{tmp_path / 'shared' / 'state'}\n"
        f"default_args:\n  retries: 1\n  retry_delay: 0\n{SMALL_RESOURCES}{extra}")
    return p


def verify_equal(env, config: Path) -> None:
    res = subprocess.run([CLI, "verify", str(config)], env=env, capture_output=True, text=True, timeout=600)
    assert res.returncode == 0 and res.stdout.count("EQUAL") == 2, res.stdout + res.stderr[-3000:]


def test_client_deploy_mode_runs_the_pipeline_on_the_cluster(airflow_home, source_db, tmp_path, cluster):
    env, dags, pipelines = airflow_home
    env = {**env, "AIRFLOW_CONN_SPARK_DEFAULT": cluster.connection_uri("client")}
    make_shop(source_db, orders=3000, customers=50)
    config = write_cluster_pipeline(pipelines, source_db, tmp_path)

    run1 = run_dag(env, dags, "shop_cdc", log_file=tmp_path / "run1.log")
    assert run1["state"] == "success", run1
    chunk_tasks = [t for t in run1["tis"] if t["task_id"] == "snapshot_chunk"]
    assert len(chunk_tasks) == 1 and " and 1 more table " in chunk_tasks[0]["label"]  # two small tables, one app
    log = (tmp_path / "run1.log").read_text()
    assert f"--master {cluster.master_url}" in log and "--py-files" in log and "airflow-cdc-provider-" in log
    apps = (cluster.master_state() or {}).get("completedapps", [])
    assert len([a for a in apps if "airflow-cdc" in a.get("name", "")]) >= 2  # the chunk task + the stream ran there

    source_db.execute("UPDATE orders SET note = 'on cluster' WHERE id <= 30")
    source_db.execute("DELETE FROM customers WHERE `customer id` < 'c0010'")
    run2 = run_dag(env, dags, "shop_cdc", log_file=tmp_path / "run2.log")
    assert run2["state"] == "success", run2
    assert run2["xcom"]["stream[-1]"]["rows_emitted"] == 40
    verify_equal(env, config)


def test_cluster_deploy_mode_stream_survives_its_driver_being_killed(airflow_home, source_db, tmp_path, cluster, spark):
    env, dags, pipelines = airflow_home
    env = {**env, "AIRFLOW_CONN_SPARK_DEFAULT": cluster.connection_uri("cluster")}
    make_shop(source_db, orders=3000, customers=50)
    config = write_cluster_pipeline(pipelines, source_db, tmp_path,
                                    "stream:\n  mode: continuous\n  trigger_interval: 1 second\n  heartbeat_timeout: 60\n")
    state = StateStore(f"file://{tmp_path / 'shared' / 'state'}")
    rest = StandaloneRest(f"http://127.0.0.1:{cluster.rest_port}")
    run = BackgroundDagRun(env, dags, "shop_cdc", tmp_path / "run.log")
    relaunch: dict = {}
    try:
        wait_until(lambda: stream_state(state) == "running", "the stream's driver to run", 600)
        launch = state.read_json(state.LAUNCH)
        assert launch["driver_id"].startswith("driver-") and rest.driver_state(launch["driver_id"]) == "RUNNING"
        assert "pid" not in launch  # tracked by its driver id, not by a local process
        source_db.execute("UPDATE orders SET note = 'live' WHERE id <= 20")
        wait_until(lambda: rows_emitted(state) >= 20, "the live changes", 180)
        first_app = state.read_status().app_id

        # kill the driver's processes on the worker: the task fails (driver gone), the retry relaunches
        pids = cluster.driver_processes(launch["driver_id"])
        assert pids, "no driver process found on the worker"
        for pid in pids:
            os.kill(pid, signal.SIGKILL)
        source_db.execute("UPDATE orders SET note = 'after kill' WHERE id BETWEEN 100 AND 109")
        # the relaunched driver's own status (a new app id), not the killed one's last word
        relaunched = lambda: getattr(state.read_status(), "app_id", None) not in (None, first_app)  # noqa: E731
        wait_until(lambda: (state.read_json(state.LAUNCH) or {}).get("driver_id") not in (None, launch["driver_id"])
                   and relaunched() and state.read_status().state == "running", "the retry to relaunch the driver", 400)
        wait_until(lambda: relaunched() and state.read_status().rows_emitted >= 10,
                   "the changes made while it was dead", 180)
        relaunch = state.read_json(state.LAUNCH)
        assert relaunch["driver_id"] != launch["driver_id"] and rest.driver_state(relaunch["driver_id"]) == "RUNNING"
        assert rest.driver_state(launch["driver_id"]) in ("FAILED", "KILLED", "ERROR")
        log = (tmp_path / "run.log").read_text()
        assert f"the stream job (driver {launch['driver_id']}) is gone without a final status" in log \
            or f"the stream job (driver {launch['driver_id']}) failed" in log, "the first try did not fail on the kill"
        verify_equal(env, config)  # while the relaunched stream runs: nothing lost
        layout = ParquetLayout(f"file://{tmp_path / 'shared' / 'sink'}")
        rows = spark.read.parquet(layout.location(layout.changes_dir(source_db.table("orders")))).select("_cdc_file_seq", "_cdc_pos", "_cdc_row").collect()
        keys = [tuple(r) for r in rows]
        # a graceful stop of the relaunched driver ends the DAG run
        stop = subprocess.run([CLI, "stop", str(config), "--wait", "120"], env=env, capture_output=True, text=True)
        assert stop.returncode == 0, stop.stdout + stop.stderr
        result = run.result(300)
        assert result["state"] == "success", result
        assert [t["try_number"] for t in result["tis"] if t["task_id"] == "stream"] == [2]
        assert result["xcom"]["stream[-1]"]["state"] == "stopped"
        wait_until(lambda: rest.driver_state(relaunch["driver_id"]) == "FINISHED", "the driver to finish", 60)
        assert state.read_json(state.LAUNCH) is None
    finally:
        run.kill()
        for rec in (state.read_json(state.LAUNCH) or {}, relaunch):
            if rec.get("driver_id"):
                rest.kill(rec["driver_id"])
    assert len(keys) == len(set(keys)) == 20 + 10, "a change was lost or written twice across the driver kill"
