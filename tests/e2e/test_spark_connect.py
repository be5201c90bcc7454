"""Opt-in Spark Connect mode: with ``spark.connect_conn_id`` the chunk tasks and the
``available_now`` stream are sessions of a long-lived Spark Connect server instead of one spark-submit each.
Same watermark job, same sinks, same exactly-once result; no password in the server's UI or event log."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
import urllib.request
from pathlib import Path

import pytest

from airflow_cdc_provider.testing.airflow_run import install_worker_preload, run_dag
from airflow_cdc_provider.testing.spark_connect import PrivateSparkConnect

from .cdc_helpers import BackgroundWriter, jdbc_sink, sink_rows, source_rows, table_types, write_pipeline
from .test_generated_dag import make_shop


@pytest.fixture(scope="module")
def connect_server():
    with PrivateSparkConnect(event_log=True, ui=True, driver_memory="1g") as server:
        yield server


def test_dag_chunks_on_spark_connect_then_stream(airflow_home, source_db, postgres, connect_server, tmp_path, spark):
    env, dags, pipelines = airflow_home
    make_shop(source_db, orders=6000, customers=300)
    schema = f"s_{source_db.name}"
    write_pipeline(pipelines, source_db, tmp_path, rows_per_task=2000, chunk_size=2000,
                   sink=f"sink:\n  type: jdbc\n  conn_id: pg\n  schema: {schema}\n",
                   extra="spark:\n  connect_conn_id: cdc_connect\n"
                         "  conf: {spark.sql.shuffle.partitions: 3, spark.executor.memory: 1g,\n"
                         "         spark.sql.extensions.test.loadFromCp: 'true'}\n")  # a static spark.sql key
    # the middle chunk of orders fails once on its first try: Airflow retries it on a new session
    fault = {"point": "after_select", "action": "fail", "match": "orders:1", "once": str(tmp_path / "fault-once")}
    env = {**env, "AIRFLOW_CONN_PG": postgres.connection_uri(), "AIRFLOW_CONN_CDC_CONNECT": connect_server.connection_uri(),
           "AIRFLOW_CDC_FAULT": json.dumps(fault)}

    with BackgroundWriter(source_db.server, source_db.name, key_space=6000, rate=200) as writer:
        run1 = run_dag(env, dags, "shop_cdc", log_file=tmp_path / "run1.log")
    assert run1["state"] == "success", run1
    assert writer.ops > 20 and writer.error is None
    chunks = [t for t in run1["tis"] if t["task_id"] == "snapshot_chunk"]
    assert len(chunks) == 4 and (tmp_path / "fault-once").exists()
    assert sorted(t["try_number"] for t in chunks) == [1, 1, 1, 2]  # the failed chunk, retried
    log = (tmp_path / "run1.log").read_text(errors="replace")
    assert log.count(f"chunk job on Spark Connect sc://127.0.0.1:{connect_server.port}") == 5, "4 chunks + 1 retry"
    # each attempt logs how long its session ran (what make bench compares the task's time with)
    assert len(re.findall(r"chunk job: Spark Connect session ran \d+\.\d\d s \(open to stop\)", log)) == 5
    assert "airflow-cdc-snapshot" not in log  # no chunk went through spark-submit (its app name)
    # the first task of the process imports the client and says how a worker could do it once (worker_preload)
    assert log.count("imported the Spark Connect client in") == 1 and "worker_preload" in log
    assert ("spark.conf spark.executor.memory, spark.sql.extensions.test.loadFromCp: the Spark Connect server's own "
            "settings apply") in log  # warned about, not failing the session

    # the available_now stream is a session of the same server too (no spark-submit), in both runs
    where = f"sc://127.0.0.1:{connect_server.port}"
    assert log.count(f"stream job on Spark Connect {where}") == 1 and "airflow-cdc-stream" not in log
    assert run1["xcom"]["stream[-1]"]["state"] == "finished"

    source_db.execute("UPDATE orders SET note = 'later' WHERE id <= 50")
    deleted = len([k for k in source_rows(source_db, "customers") if k[0] < "c0010"])
    source_db.execute("DELETE FROM customers WHERE `customer id` < 'c0010'")
    # the stream's first batch fails in the writer (on the server) after its first table: the task fails,
    # Airflow retries it on a new session, and the retry redoes that batch from the checkpoint
    stream_fault = {"point": "mid_batch", "action": "fail", "once": str(tmp_path / "fault-stream")}
    run2 = run_dag({**env, "AIRFLOW_CDC_FAULT": json.dumps(stream_fault)}, dags, "shop_cdc",
                   log_file=tmp_path / "run2.log")
    assert run2["state"] == "success", run2
    assert (tmp_path / "fault-stream").exists()
    assert next(t for t in run2["tis"] if t["task_id"] == "stream")["try_number"] == 2
    log2 = (tmp_path / "run2.log").read_text(errors="replace")
    assert log2.count(f"stream job on Spark Connect {where}") == 2 and "airflow-cdc-stream" not in log2
    assert ("the stream job failed: airflow_cdc_provider.pipeline.faults.InjectedFault: injected fault at mid_batch (batch 1)"
            in log2)
    stream = run2["xcom"]["stream[-1]"]
    # counted by the writer on the server (the retry's own count); the background writer's last changes of
    # run 1, after its stream's target position, are in this batch too
    assert deleted > 0 and stream["rows_emitted"] >= 50 + deleted and stream["batches"] == 1, stream
    assert stream["app_id"] and stream["state"] == "finished", stream
    secrets = {"source_password": source_db.settings.password, "sink_password": postgres.password}
    for table in ("orders", "customers"):
        got = sink_rows(spark, jdbc_sink(postgres, schema), secrets, table_types(source_db, table))
        assert got == source_rows(source_db, table), table

    # what the server logs and shows of our sessions: the statements (JDBC reads with their options) are
    # there, the passwords are not; the event log keeps whole statements, so there they are redacted
    events = [p for p in connect_server.event_log_dir.rglob("*") if p.is_file()]
    text = b"".join(p.read_bytes() for p in events)
    assert b"SparkListenerConnectOperationStarted" in text and b"__cdc_src" in text
    assert b"*********(redacted)" in text  # the JDBC password options
    # every statement on one page (the UI shows 100 a page, newest first: a slow run's stream batches push the
    # chunk reads onto page 2)
    with urllib.request.urlopen(f"{connect_server.ui_url}/connect/?sqlstat.pageSize=100000", timeout=10) as r:
        ui = r.read()
    # the chunk jobs' writes are there; the UI abbreviates a statement's plan, so the JDBC read at the leaf of a
    # write's plan may be cut off (the event log above keeps it whole)
    assert b"map_partitions" in ui and b"to_df" in ui
    for name, secret in secrets.items():
        assert secret.encode() not in text, f"{name} in the Connect server's event log"
        assert secret.encode() not in ui, f"{name} in the Connect server's UI"


def test_spark_submit_after_a_connect_session_in_the_same_process(connect_server, tmp_path):
    """pyspark marks a process that opened a Connect session (and keeps the mark after ``stop()``); a
    spark-submit started from it later (a continuous stream after Connect chunk tasks under ``dag.test()``)
    inherited it and its driver failed with CONNECT_URL_NOT_SET. The session's end puts the environment back."""
    import subprocess

    from airflow_cdc_provider.spark.session import connect_session
    from airflow_cdc_provider.testing.spark import spark_env, spark_submit_binary

    before = {k: os.environ.get(k) for k in ("SPARK_CONNECT_MODE_ENABLED", "SPARK_REMOTE")}
    with connect_session(connect_server.url) as spark:
        assert spark.range(3).count() == 3
    assert {k: os.environ.get(k) for k in before} == before
    job = tmp_path / "job.py"
    job.write_text("from pyspark.sql import SparkSession\n"
                   "print('rows', SparkSession.builder.getOrCreate().range(4).count())\n")
    done = subprocess.run([spark_submit_binary(), "--master", "local[1]", str(job)], env=spark_env(),
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and "rows 4" in done.stdout, done.stderr[-2000:]


WORKER = textwrap.dedent("""
    import os, sys
    import airflow  # every Airflow process imports the local settings at its start
    assert "pyspark.sql.connect.session" in sys.modules, "the local settings did not preload the Connect client"
    from airflow_cdc_provider.spark.session import connect_session
    for task in range(2):  # two tasks, each a fork of the worker, as LocalExecutor and Celery workers run them
        pid = os.fork()
        if pid == 0:
            before = set(sys.modules)
            with connect_session(sys.argv[1]) as spark:
                rows = spark.range(5).count()
            heavy = sorted(m for m in set(sys.modules) - before if m.split(".")[0] in ("pandas", "pyarrow"))
            print(f"task {task}: rows {rows}; imported {heavy}", flush=True)
            os._exit(0 if rows == 5 and not heavy else 1)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0, f"task {task} failed"
    print("worker done")
""")


def test_tasks_forked_from_a_preloading_worker_use_its_connect_client(airflow_home, connect_server, tmp_path):
    """``airflow_local_settings.py`` importing ``worker_preload``: Airflow imports the Connect client when the
    worker starts, and the tasks it forks open their sessions (gRPC after a fork) without importing it again."""
    env, _, _ = airflow_home
    install_worker_preload(Path(env["AIRFLOW_HOME"]) / "config")
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    done = subprocess.run([sys.executable, str(script), connect_server.url], env=env, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    assert "task 0: rows 5; imported []" in done.stdout and "task 1: rows 5; imported []" in done.stdout
    assert "worker done" in done.stdout


def test_unreachable_connect_server_names_the_key_and_what_to_do(airflow_home, source_db, tmp_path):
    from airflow_cdc_provider.testing.mariadb import free_port

    env, dags, pipelines = airflow_home
    source_db.execute("CREATE TABLE orders (id INT PRIMARY KEY, v INT NOT NULL, note VARCHAR(20))")
    source_db.execute("INSERT INTO orders VALUES (1, 1, 'a')")
    write_pipeline(pipelines, source_db, tmp_path, tables=("orders",), extra="spark:\n  connect_conn_id: gone\n")
    port = free_port()  # nothing listens there
    env = {**env, "AIRFLOW_CONN_GONE": json.dumps({"conn_type": "spark_connect", "host": "127.0.0.1", "port": port,
                                                   "password": "connect-token-1234"})}
    run = run_dag(env, dags, "shop_cdc", log_file=tmp_path / "run.log")
    assert run["state"] == "failed"
    log = (tmp_path / "run.log").read_text(errors="replace")
    assert f"spark.connect_conn_id 'gone': cannot open a session on the Spark Connect server sc://127.0.0.1:{port}" in log
    assert "remove spark.connect_conn_id" in log
    assert "connect-token-1234" not in log


def test_delta_windows_on_spark_connect_are_appended_then_replaced(airflow_home, source_db, connect_server, tmp_path):
    """The delta sink with its chunk tasks on Spark Connect: the first snapshot's window written by the server as
    the table's data files and appended; a re-snapshot's window in place of those files, the row deleted in
    between carried over (then a tombstone); the Delta table, read with delta-rs, equals MariaDB row by row."""
    import deltalake

    from airflow_cdc_provider.state.store import table_dir_name

    from .cdc_helpers import normalize
    from .test_spark_jobs import make_orders

    env, dags, pipelines = airflow_home
    make_orders(source_db, 3000)
    write_pipeline(pipelines, source_db, tmp_path, tables=("orders",), chunk_size=500,
                   sink=f"sink:\n  type: delta\n  path: {tmp_path / 'delta'}\n",
                   extra="spark:\n  connect_conn_id: cdc_connect\n")
    env = {**env, "AIRFLOW_CONN_CDC_CONNECT": connect_server.connection_uri()}
    run1 = run_dag(env, dags, "shop_cdc", log_file=tmp_path / "run1.log")
    assert run1["state"] == "success", run1
    log1 = (tmp_path / "run1.log").read_text(errors="replace")
    assert re.search(r"appended \d+ rows in \d+ data files written by the executors", log1), \
        [line for line in log1.splitlines() if "airflow_cdc.delta" in line]
    assert "airflow-cdc-snapshot" not in log1  # no chunk went through spark-submit

    source_db.execute("DELETE FROM orders WHERE id = 1500")
    run2 = run_dag(env, dags, "shop_cdc", conf={"resnapshot": [source_db.table("orders")]},
                   log_file=tmp_path / "run2.log")
    assert run2["state"] == "success", run2
    log2 = (tmp_path / "run2.log").read_text(errors="replace")
    assert "replaced the table's files that may hold their keys (1 rows of those carried over)" in log2, \
        [line for line in log2.splitlines() if "airflow_cdc.delta" in line]

    uri = str(tmp_path / "delta" / table_dir_name(source_db.table("orders")))
    every = deltalake.DeltaTable(uri).to_pyarrow_table().to_pylist()
    names = list(table_types(source_db, "orders").schema.column_names)
    live = {(r["id"],): tuple(normalize(r[n]) for n in names) for r in every if not r["_cdc_deleted"]}
    assert live == source_rows(source_db, "orders")
    assert [r["id"] for r in every if r["_cdc_deleted"]] == [1500] and len(every) == 3000
