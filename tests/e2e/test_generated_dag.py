"""YAML -> DAG, DagBag import errors, and dag.test() runs against MariaDB + Spark (a sink moved away from its
state store among them)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

from airflow_cdc_provider.cli import airflow_json_output
from airflow_cdc_provider.hooks.spark_job import process_alive
from airflow_cdc_provider.pipeline.table_schemas import pending_resyncs
from airflow_cdc_provider.sinks.parquet import ParquetLayout
from airflow_cdc_provider.state.store import StateStore, table_dir_name
from airflow_cdc_provider.testing.airflow_run import BackgroundDagRun, run_dag

from .cdc_helpers import parquet_sink, sink_rows, source_rows, stream_state, table_types, wait_until, write_pipeline
from .test_spark_jobs import changelog, expected_changelog, make_orders

CLI = str(Path(sys.executable).parent / "airflow-cdc")

def make_shop(db, orders: int, customers: int) -> None:
    """orders (integer key) and customers (string key with a space in its name)."""
    make_orders(db, orders)
    db.execute("CREATE TABLE customers (`customer id` VARCHAR(20) PRIMARY KEY, name VARCHAR(50))")
    db.executemany("INSERT INTO customers VALUES (%s, %s)", [(f"c{i:04d}", f"name {i}") for i in range(customers)])


def test_dagbag_reports_a_broken_pipeline_without_hiding_the_others(airflow_home, source_db, tmp_path):
    env, dags, pipelines = airflow_home
    write_pipeline(pipelines, source_db, tmp_path)
    (pipelines / "typo.yaml").write_text("dag_id: typo_cdc\nsource:\n  conn_id: src\n  tabels: [a.b]\n")
    # what Airflow itself would refuse or ignore, found by the error reporter too (it builds no DAG)
    (pipelines / "args.yaml").write_text("source: {conn_id: src, tables: [a.b]}\ndefault_args: {retires: 3}\n")
    out = run_dag(env, dags, "--import-only")
    assert out["dags"] == ["shop_cdc"], out
    assert list(out["import_errors"]) == [str(dags / "cdc_pipeline_errors.py")], out["import_errors"]
    error = out["import_errors"][str(dags / "cdc_pipeline_errors.py")]
    assert "2 pipeline file(s) not loaded" in error and "typo.yaml" in error and "tabels" in error, error
    assert "args.yaml: default_args.retires: not an operator argument Airflow knows (did you mean 'retries'?)" \
        in error, error
    assert "shop_cdc" not in error and str(pipelines / "shop_cdc.yaml") not in error

    (pipelines / "typo.yaml").write_text((pipelines / "typo.yaml").read_text().replace("tabels", "tables"))
    (pipelines / "args.yaml").write_text((pipelines / "args.yaml").read_text().replace("retires", "retries"))
    out = run_dag(env, dags, "--import-only")  # fixed: the errors are gone and the pipelines load
    assert out["import_errors"] == {} and sorted(out["dags"]) == ["args", "shop_cdc", "typo_cdc"], out


def test_snapshot_then_stream_then_resume_then_resnapshot(airflow_home, source_db, tmp_path, spark):
    env, dags, pipelines = airflow_home
    make_shop(source_db, orders=5000, customers=300)
    write_pipeline(pipelines, source_db, tmp_path, rows_per_task=2000)  # one mapped task per chunk
    fault = {"point": "after_select", "action": "kill", "match": "orders:1", "once": str(tmp_path / "fault-once")}
    env1 = {**env, "AIRFLOW_CDC_FAULT": __import__("json").dumps(fault)}

    run1 = run_dag(env1, dags, "shop_cdc", log_file=tmp_path / "run1.log")
    assert run1["state"] == "success", run1
    chunks = [t for t in run1["tis"] if t["task_id"] == "snapshot_chunk"]
    assert len(chunks) == 4  # orders: 3 chunks of ~2000, customers: 1
    # boundaries follow the InnoDB row estimate (Flink CDC's distribution factor): [2001, 4001) or [2000, 3999)
    orders = [t for t in chunks if t["label"].startswith(source_db.table("orders") + " ")]
    middle = [t for t in orders if "inf" not in t["label"]]
    assert len(orders) == 3 and len(middle) == 1, [t["label"] for t in chunks]
    assert middle[0]["try_number"] == 2 and (tmp_path / "fault-once").exists()  # chunk 1 killed once, retried
    # every attempt logs how long its spark-submit ran, the killed one too (what make bench compares with)
    log1 = (tmp_path / "run1.log").read_text(errors="replace")
    assert len(re.findall(r"snapshot_chunk: spark-submit ran \d+\.\d\d s \(command to exit\)", log1)) == 5
    # a chunk job is a batch: its local driver runs with the throughput collector; the stream keeps G1
    commands = re.findall(r"Spark-Submit cmd: (.*)", log1)
    chunk_jobs = [c for c in commands if "snapshot_chunk.py" in c]
    stream_jobs = [c for c in commands if "binlog_stream.py" in c]
    assert len(chunk_jobs) == 5 and all("-XX:+UseParallelGC" in c for c in chunk_jobs), commands
    # and, a small task, with the client compiler only, as the stream
    assert all("-XX:TieredStopAtLevel=1" in c for c in chunk_jobs + stream_jobs), commands
    assert stream_jobs and not any("UseParallelGC" in c for c in stream_jobs), commands
    assert [t["try_number"] for t in orders if t is not middle[0]] == [1, 1]
    reports = [r for k, v in run1["xcom"].items() if k.startswith("snapshot_chunk[") for r in v]
    assert sorted(r["split_id"] for r in reports) == sorted(
        [f"{source_db.table('orders')}:{i}" for i in range(3)] + [f"{source_db.table('customers')}:0"])
    assert all({"low_watermark", "high_watermark", "rows", "window_events_applied", "seconds"} <= set(r) for r in reports)

    sink = parquet_sink(tmp_path)
    for t in ("orders", "customers"):
        assert sink_rows(spark, sink, {}, table_types(source_db, t)) == source_rows(source_db, t)

    source_db.execute("UPDATE orders SET note = 'changed' WHERE id <= 100")
    source_db.execute("DELETE FROM orders WHERE id > 4900")
    source_db.execute("INSERT INTO customers VALUES ('new one', 'x')")
    run2 = run_dag(env, dags, "shop_cdc", log_file=tmp_path / "run2.log")
    assert run2["state"] == "success", run2
    assert [t["state"] for t in run2["tis"] if t["task_id"] == "snapshot_chunk"] in ([], ["skipped"])
    assert run2["xcom"]["stream[-1]"]["rows_emitted"] == 201
    for t in ("orders", "customers"):
        assert sink_rows(spark, sink, {}, table_types(source_db, t)) == source_rows(source_db, t)

    source_db.execute("DELETE FROM orders WHERE id <= 10")
    write_pipeline(pipelines, source_db, tmp_path)  # default rows_per_task: the re-snapshot is one task
    run3 = run_dag(env, dags, "shop_cdc", {"resnapshot": [source_db.table("orders")]}, log_file=tmp_path / "run3.log")
    assert run3["state"] == "success", run3
    labels = [t["label"] for t in run3["tis"] if t["task_id"] == "snapshot_chunk"]
    assert len(labels) == 1 and labels[0].startswith(source_db.table("orders")) and "(3 chunks)" in labels[0], labels
    reports = run3["xcom"]["snapshot_chunk[0]"]
    assert len(reports) == 3 and len({r["high_watermark"]["pos"] for r in reports}) == 1  # one watermark window
    for t in ("orders", "customers"):
        assert sink_rows(spark, sink, {}, table_types(source_db, t)) == source_rows(source_db, t)


def test_continuous_stream_task_follows_changes_until_stopped(airflow_home, source_db, tmp_path, spark):
    """The stream task follows changes, is relaunched by its retry after its job died, takes up a table's
    re-snapshot (after an ALTER held the table) run beside it without stopping, and stops on request."""
    env, dags, pipelines = airflow_home
    make_shop(source_db, orders=3000, customers=50)
    config = write_pipeline(pipelines, source_db, tmp_path,
                            "stream:\n  mode: continuous\n  trigger_interval: 1 second\n  heartbeat_timeout: 60\n")
    state, sink = StateStore(tmp_path / "state"), parquet_sink(tmp_path)
    run = BackgroundDagRun(env, dags, "shop_cdc", tmp_path / "run.log")
    try:
        wait_until(lambda: stream_state(state) == "running", "the stream task's job to run", 600)
        launch = state.read_json(state.LAUNCH)
        assert process_alive(launch["pid"])
        source_db.execute("UPDATE orders SET note = 'live' WHERE id <= 20")
        source_db.execute("DELETE FROM orders WHERE id > 2990")
        source_db.execute("INSERT INTO customers VALUES ('live one', 'x')")
        for t in ("orders", "customers"):
            wait_until(lambda: sink_rows(spark, sink, {}, table_types(source_db, t)) == source_rows(source_db, t),
                       f"{t}: the live changes to reach the sink", 120)
        # the job dies: the deferred task fails, its retry relaunches the job from the checkpoint
        os.killpg(launch["pid"], signal.SIGKILL)
        source_db.execute("UPDATE orders SET note = 'after kill' WHERE id BETWEEN 100 AND 109")
        wait_until(lambda: (state.read_json(state.LAUNCH) or {}).get("pid") not in (None, launch["pid"])
                   and stream_state(state) == "running", "the retry to relaunch the stream", 300)
        wait_until(lambda: sink_rows(spark, sink, {}, table_types(source_db, "orders")) == source_rows(source_db, "orders"),
                   "the changes made while the job was dead to reach the sink", 120)
        relaunch = state.read_json(state.LAUNCH)
        layout = ParquetLayout(sink.path)
        changes = spark.read.parquet(layout.location(layout.changes_dir(source_db.table("orders"))))
        keys = [tuple(r) for r in changes.select("_cdc_file_seq", "_cdc_pos", "_cdc_row").collect()]
        assert len(keys) == len(set(keys)) == 20 + 10 + 10, "a change was lost or written twice across the kill"

        # an ALTER whose effect on the existing rows the binlog cannot tell (a computed DEFAULT) holds the table; a
        # re-snapshot run beside the stream's run lets the running stream go on with it
        orders = source_db.table("orders")
        before = table_types(source_db, "orders")
        source_db.execute("ALTER TABLE orders ADD COLUMN qty BIGINT NOT NULL DEFAULT (id * 2)")
        source_db.execute("UPDATE orders SET qty = 5000000000, note = 'altered' WHERE id <= 5")
        wait_until(lambda: orders in pending_resyncs(state), "the stream to hold the altered table", 120)
        source_db.execute("UPDATE customers SET name = 'still streamed' WHERE `customer id` = 'c0001'")
        wait_until(lambda: sink_rows(spark, sink, {}, table_types(source_db, "customers"))
                   == source_rows(source_db, "customers"), "customers to stream on while orders is held", 120)
        assert sink_rows(spark, sink, {}, before)[(1,)] == (1, 1, "live"), "a held table's change reached the sink"
        resnap = run_dag(env, dags, "shop_cdc", conf={"resnapshot": [orders]}, log_file=tmp_path / "resnapshot.log")
        assert resnap["state"] == "success", (tmp_path / "resnapshot.log").read_text()[-4000:]
        taken = resnap["xcom"]["stream[-1]"]
        assert taken["skipped"] == "stream running" and list(taken["taken_up"]) == [orders], taken
        assert state.read_json(state.LAUNCH)["pid"] == relaunch["pid"] and process_alive(relaunch["pid"]), \
            "the stream was relaunched instead of taking the re-snapshot up"
        assert orders not in pending_resyncs(state)
        source_db.execute("UPDATE orders SET qty = qty + 1, note = 'after resnap' WHERE id BETWEEN 10 AND 12")
        wait_until(lambda: sink_rows(spark, sink, {}, table_types(source_db, "orders")) == source_rows(source_db, "orders"),
                   "orders, new column included, to converge after its re-snapshot while the stream ran", 120)
        assert source_rows(source_db, "orders")[(1,)] == (1, 1, "altered", 5000000000)
        assert state.read_json(state.LAUNCH)["pid"] == relaunch["pid"]
        # the command users run instead of writing the conf: a run of the DAG, queued in Airflow with that conf
        res = subprocess.run([CLI, "resnapshot", str(config), "--table", orders], env=env, capture_output=True,
                             text=True, timeout=300)
        said = re.fullmatch(rf"re-snapshot of {re.escape(orders)}: DAG run (\S+) of shop_cdc queued", res.stdout.strip())
        assert res.returncode == 0 and said, res.stdout + res.stderr
        runs = subprocess.run([sys.executable, "-m", "airflow", "dags", "list-runs", "shop_cdc", "-o", "json"],
                              env=env, capture_output=True, text=True, timeout=300)
        assert runs.returncode == 0, runs.stderr
        listed = airflow_json_output(runs.stdout)
        assert {"run_id": said[1], "state": "queued"}.items() <= next(r for r in listed if r["run_id"] == said[1]).items()
        stop = subprocess.run([CLI, "stop", str(config), "--wait", "120"], env=env, capture_output=True, text=True)
        assert stop.returncode == 0, stop.stdout + stop.stderr
        result = run.result(300)
    finally:
        run.kill()
        leftover = state.read_json(state.LAUNCH) or {}
        if process_alive(leftover.get("pid")):
            os.killpg(leftover["pid"], signal.SIGKILL)
    assert result["state"] == "success", result
    assert [t["try_number"] for t in result["tis"] if t["task_id"] == "stream"] == [2]
    stream = result["xcom"]["stream[-1]"]
    # the retry's own count, across the query it started again: of orders 10 after the kill, the ALTER's resync
    # record and 3 after the re-snapshot (the 5 changes the table held are in its snapshot); 1 of customers
    assert stream["state"] == "stopped" and stream["rows_by_table"] == {
        source_db.table("orders"): 10 + 1 + 3, source_db.table("customers"): 1}, stream
    assert not process_alive(relaunch["pid"]) and state.read_json(state.LAUNCH) is None


def test_startup_latest_streams_from_the_runs_start_and_a_moved_sink_is_refused(airflow_home, source_db, tmp_path,
                                                                                  spark):
    """``stream.startup: latest`` in the generated DAG: no snapshot; the plan step records the position at the
    run's start, so changes made after it and before the stream job launched reach the sink, and none from
    before the run does.

    The state store records what was written to one sink: with sink.path moved and state.path kept, a run
    would stream only the changes since into an empty sink. The run fails at validation instead, naming both
    locations, writes nothing to the new one, and the pipeline goes on once sink.path is put back."""
    env, dags, pipelines = airflow_home
    make_shop(source_db, orders=300, customers=10)
    source_db.execute("UPDATE orders SET note = 'before run' WHERE id <= 10")
    latest = "stream:\n  startup: latest\n"
    write_pipeline(pipelines, source_db, tmp_path, latest)
    state = StateStore(tmp_path / "state")
    run = BackgroundDagRun(env, dags, "shop_cdc", tmp_path / "run1.log")
    try:
        wait_until(lambda: state.read_seed() is not None, "the plan step to record where the stream starts", 300, 0.05)
        assert not state.exists(state.STATUS), "the stream started before the changes below: the test lost its point"
        source_db.execute("UPDATE orders SET note = 'during run' WHERE id BETWEEN 5 AND 14")
        source_db.execute("DELETE FROM orders WHERE id > 295")
        source_db.execute("INSERT INTO customers VALUES ('during', 'run')")
        result = run.result(600)
    finally:
        run.kill()
    assert result["state"] == "success", result
    assert [t["state"] for t in result["tis"] if t["task_id"] == "snapshot_chunk"] in ([], ["skipped"])
    seed = state.read_seed()
    assert seed.tables == {}
    for name, key in (("orders", ("id",)), ("customers", ("customer id",))):
        table = source_db.table(name)
        got = changelog(spark, str(tmp_path / "sink"), table, key)
        assert sorted(got) == sorted(expected_changelog(source_db, seed, table, 9_998)) and len(got) == len(set(got))
    orders = sink_rows(spark, parquet_sink(tmp_path), {}, table_types(source_db, "orders"))
    source = source_rows(source_db, "orders")
    assert orders == {k: v for k, v in source.items() if 5 <= k[0] <= 14}  # updated during the run; deletes gone
    assert [v for v in orders.values() if v[2] != "during run"] == []
    sink = parquet_sink(tmp_path)
    customers = sink_rows(spark, sink, {}, table_types(source_db, "customers"))
    assert customers == {("during",): source_rows(source_db, "customers")[("during",)]}

    # sink.path moved, state.path kept: refused before anything is planned or written
    moved = tmp_path / "moved"
    write_pipeline(pipelines, source_db, tmp_path, latest, sink=f"sink:\n  type: parquet\n  path: {moved}\n")
    source_db.execute("UPDATE orders SET note = 'while moved' WHERE id <= 2")
    refused = run_dag(env, dags, "shop_cdc", log_file=tmp_path / "moved.log")
    states = {t["task_id"]: t["state"] for t in refused["tis"] if t["task_id"] != "snapshot_chunk"}
    assert refused["state"] == "failed", states
    assert states["validate_source"] == "failed" and states["stream"] != "success", states
    log = (tmp_path / "moved.log").read_text(errors="replace")
    said = [line for line in log.splitlines() if "state.path" in line and sink.path in line and str(moved) in line]
    assert said, log[-4000:]
    tables = {table_dir_name(source_db.table(t)) for t in ("orders", "customers")}
    written = [p for p in moved.rglob("*") if p.suffix == ".parquet" or p.name in tables] if moved.exists() else []
    assert written == [], written

    write_pipeline(pipelines, source_db, tmp_path, latest)  # sink.path put back
    source_db.execute("UPDATE orders SET note = 'next run' WHERE id = 100")
    run2 = run_dag(env, dags, "shop_cdc", log_file=tmp_path / "run2.log")
    assert run2["state"] == "success", run2
    assert state.read_seed() == seed  # the second run keeps where the stream started; it resumes from its checkpoint
    # what the refused run left to stream: the 2 changes made while the sink was moved, then the one since
    assert run2["xcom"]["stream[-1]"]["rows_emitted"] == 2 + 1
    source = source_rows(source_db, "orders")
    orders = sink_rows(spark, sink, {}, table_types(source_db, "orders"))
    assert orders == {k: v for k, v in source.items() if 5 <= k[0] <= 14 or k[0] in (1, 2, 100)}
    assert [orders[(i,)][2] for i in (1, 2, 100)] == ["while moved", "while moved", "next run"]
    assert sink_rows(spark, sink, {}, table_types(source_db, "customers")) == customers
