"""A continuous pipeline in a real Airflow deployment: api-server, scheduler (LocalExecutor), dag-processor and
triggerer as separate processes over a PostgreSQL metadata database, driven with the airflow CLI and
``airflow-cdc`` as an operator would, while an application writes to the source.

One scenario, in order: the scheduled run snapshots and its stream task defers with the stream running; a
backfill over past dates runs beside it and launches no stream; clearing the deferred stream task relaunches
the stream; a re-snapshot run beside the stream's run is taken up by the running stream; ``airflow-cdc stop``
ends the stream task in success. After each step the sink equals the source row by row. Then what Airflow
recorded: the sink table's asset events, and the OpenLineage events the tasks sent (to a file transport, with
the provider's default of a forked process per event)."""

from __future__ import annotations

import contextlib
import datetime as dt
import itertools
import json
import os
import random
import re
import subprocess
import sys
import threading
from pathlib import Path

from airflow_cdc_provider.hooks.spark_job import SparkJobHook
from airflow_cdc_provider.state.store import StateStore
from airflow_cdc_provider.testing.airflow_deployment import PrivateAirflowDeployment
from airflow_cdc_provider.testing.airflow_run import install_dag_files

from .cdc_helpers import parquet_sink, sink_rows, source_rows, stream_state, table_types, wait_until, write_pipeline
from .test_generated_dag import make_shop

CLI = str(Path(sys.executable).parent / "airflow-cdc")
DAG_ID = "shop_cdc"
CONSUMER = "orders_batches"  # scheduled on the orders table's Asset per stream batch
TABLES = ("orders", "customers")
ORDERS = 1000
FINAL = ("success", "failed")


class BoundedWriter:
    """The application: small inserts (new keys) and updates of ``orders``, ``ops`` of them at ``rate`` per
    second, in a thread of its own; ``join()`` waits until it has made them all."""

    _ids = itertools.count(ORDERS + 1)  # new keys, unique across writers

    def __init__(self, source_db, ops: int, rate: float, seed: int) -> None:
        self.source_db, self.ops, self.pause = source_db, ops, 1.0 / rate
        self.rng = random.Random(seed)
        self.done = 0
        self.error: BaseException | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        try:
            with contextlib.closing(self.source_db.server.app_connection(self.source_db.name)) as conn, \
                    conn.cursor() as cur:
                for i in range(self.ops):
                    if self._stop.wait(self.pause):
                        return
                    if i % 3 == 0:
                        cur.execute("INSERT INTO orders VALUES (%s, %s, 'writer')", (next(self._ids), i))
                    else:
                        cur.execute("UPDATE orders SET v = v + 1, note = 'upd' WHERE id = %s",
                                    (self.rng.randrange(1, ORDERS + 1),))
                    self.done += 1
        except BaseException as exc:  # surfaced by join()
            self.error = exc

    def start(self) -> "BoundedWriter":
        self._thread.start()
        return self

    def join(self, timeout: float = 300) -> None:
        self._thread.join(timeout)
        if self._thread.is_alive():
            raise AssertionError(f"the writer did not finish within {timeout:.0f}s ({self.done}/{self.ops} made)")
        if self.error:
            raise self.error

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)


def sink_differences(spark, sink, source_db) -> list[str]:
    """Per table, what differs between sink and source (empty: equal row by row)."""
    out = []
    for t in TABLES:
        got, want = sink_rows(spark, sink, {}, table_types(source_db, t)), source_rows(source_db, t)
        if got != want:
            wrong = sorted(k for k in set(got) | set(want) if got.get(k) != want.get(k))
            out.append(f"{t}: {len(wrong)} key(s) differ, e.g. "
                       + "; ".join(f"{k}: sink {got.get(k)} source {want.get(k)}" for k in wrong[:3]))
    return out


def wait_sink_equal(spark, sink, source_db, what: str, timeout: float) -> None:
    last: list[list[str]] = [[]]

    def equal() -> bool:
        last[0] = sink_differences(spark, sink, source_db)
        return not last[0]

    try:
        wait_until(equal, what, timeout, 1.0)
    except AssertionError as exc:
        raise AssertionError(f"{exc}: {last[0]}") from None


def wait_run_ended(dep, run_id: str, timeout: float) -> str:
    def ended():
        dep.check_running()
        state = dep.run_states(DAG_ID).get(run_id)
        return state if state in FINAL else None

    return wait_until(ended, f"DAG run {run_id} to end", timeout, 5.0)


def write_consumer(dags: Path, config: Path, table: str) -> None:
    """A downstream DAG that runs on the asset events of ``table`` the running stream's batches make."""
    (dags / f"{CONSUMER}.py").write_text(
        "from airflow.sdk import DAG, task\n"
        "from airflow_cdc_provider.operators.assets import table_asset\n\n"
        f"with DAG({CONSUMER!r}, schedule=[table_asset({str(config)!r}, {table!r}, per_batch=True, "
        "poll_interval=2)]):\n"
        "    @task\n"
        "    def read_new_rows():\n"
        "        pass\n\n"
        "    read_new_rows()\n")


def test_continuous_pipeline_in_an_airflow_deployment(source_db, postgres, tmp_path, spark):
    dags, pipelines = tmp_path / "dags", tmp_path / "pipelines"
    dags.mkdir()
    pipelines.mkdir()
    install_dag_files(dags)
    make_shop(source_db, orders=ORDERS, customers=50)
    config = write_pipeline(pipelines, source_db, tmp_path, extra=(
        "schedule: '@daily'\n"  # unpaused: one scheduled run (today's), the next one only at midnight
        "stream:\n  mode: continuous\n  trigger_interval: 1 second\n  heartbeat_timeout: 60\n"))
    state, sink = StateStore(tmp_path / "state"), parquet_sink(tmp_path)
    orders = source_db.table("orders")
    uri = f"file://{tmp_path}/sink/{orders}"
    write_consumer(dags, config, orders)
    lineage = tmp_path / "openlineage.jsonl"
    dep = PrivateAirflowDeployment(tmp_path / "airflow", dags, pipelines, postgres, env={
        "AIRFLOW_CONN_SRC": source_db.server.connection_uri(), "AIRFLOW_CDC_DATA": str(tmp_path / "cdc"),
        "AIRFLOW__OPENLINEAGE__TRANSPORT": json.dumps({"type": "file", "log_file_path": str(lineage), "append": True}),
        "AIRFLOW__OPENLINEAGE__NAMESPACE": "cdc_deployment"})
    writers: list[BoundedWriter] = []
    try:
        dep.start()
        dep.wait_dag_parsed(DAG_ID)
        dep.wait_dag_parsed(CONSUMER)

        # a. the scheduled run snapshots while the application writes, and its stream task defers, the stream running
        writers.append(BoundedWriter(source_db, ops=400, rate=2, seed=1).start())
        dep.unpause(DAG_ID)
        scheduled = wait_until(lambda: next((r for r in dep.run_states(DAG_ID) if r.startswith("scheduled__")), None),
                               "the scheduled run", 120, 5.0)

        def streaming() -> bool:
            dep.check_running()
            tasks = dep.task_states(DAG_ID, scheduled)
            failed = {t: s for t, s in tasks.items() if s in ("failed", "upstream_failed")}
            assert not failed, f"{failed}:\n" + "\n".join(dep.task_log(DAG_ID, scheduled, t.split("[")[0])
                                                           for t in failed)
            return tasks.get("stream") == "deferred" and stream_state(state) == "running"

        wait_until(streaming, "the stream task to defer with the stream running", 600, 5.0)
        launch = state.read_launch()
        assert launch is not None and SparkJobHook.alive(launch), launch
        # the detached job holds none of its task's descriptors: the supervisor's socket on stdin would keep the
        # deferred task's worker slot until the supervisor timed it out
        assert os.readlink(f"/proc/{launch.pid}/fd/0") == "/dev/null"
        ops_at_launch = writers[0].done
        wait_until(lambda: writers[0].done >= ops_at_launch + 20 or writers[0].done == writers[0].ops,
                   "the writer to change rows while the stream runs", 60)
        writers[0].stop()
        source_db.execute("UPDATE orders SET note = 'live' WHERE id <= 20")
        source_db.execute("INSERT INTO customers VALUES ('live one', 'x')")
        wait_sink_equal(spark, sink, source_db, "(a) the live changes to reach the sink", 120)

        # the consumer, once unpaused, runs on the asset events its watcher makes of the running stream's batches
        dep.unpause(CONSUMER)
        changes = itertools.count(1)

        def consumer_ran():
            dep.check_running()
            source_db.execute("UPDATE orders SET v = v + 1 WHERE id = %s", (next(changes),))
            ran = [r for r, s in dep.run_states(CONSUMER).items() if s == "success"]
            events = [e for r in ran for e in dep.upstream_asset_events(CONSUMER, r)]
            batches = [e for e in events if e["uri"] == uri and e["extra"].get("from_trigger")]
            return ran and batches and (ran, batches)

        ran, batches = wait_until(consumer_ran, "(a) a consumer run on a stream batch's asset event", 240, 5.0)
        assert all(r.startswith("asset_triggered__") for r in ran), ran
        payload = batches[0]["extra"]["payload"]
        assert payload["kind"] == "stream batches" and payload["table"] == orders and payload["rows"] > 0, payload
        assert payload["launch_id"] == launch.launch_id, payload
        dep.airflow("dags", "pause", CONSUMER)
        for run_id, run_state in dep.run_states(CONSUMER).items():
            if run_state == "queued":  # never starts while paused; /assets/events (read at the end) fails on it
                dep.delete_run(CONSUMER, run_id)
        lease = state.read_lease()
        assert lease is not None and lease.launch_id == launch.launch_id, lease
        assert lease.holder == f"{DAG_ID}/{scheduled}/stream", lease

        # b. a backfill of three past days beside the streaming run: each run succeeds, none launches a stream
        writers.append(BoundedWriter(source_db, ops=60, rate=2, seed=2).start())
        today = dt.datetime.now(dt.timezone.utc).date()
        dep.backfill(DAG_ID, str(today - dt.timedelta(days=10)), str(today - dt.timedelta(days=8)))

        def backfill_runs() -> dict[str, str] | None:
            dep.check_running()
            runs = {r: s for r, s in dep.run_states(DAG_ID).items() if r.startswith("backfill__")}
            return runs if len(runs) == 3 and all(s in FINAL for s in runs.values()) else None

        backfilled = wait_until(backfill_runs, "the three backfill runs to end", 420, 5.0)
        failed = [r for r, s in backfilled.items() if s != "success"]
        assert not failed, {r: dep.task_states(DAG_ID, r) for r in failed}
        for run_id in backfilled:
            assert dep.xcom(DAG_ID, run_id, "stream") == {"skipped": "backfill"}, run_id
        writers[-1].join()
        assert state.read_launch() == launch and state.read_lease() == lease, "a second stream was launched"
        assert dep.task_states(DAG_ID, scheduled)["stream"] == "deferred" and SparkJobHook.alive(launch)
        wait_sink_equal(spark, sink, source_db, "(b) the changes made during the backfill to reach the sink", 120)

        # c. clearing the deferred stream task stops its job; the task's next try relaunches the stream
        assert dep.clear_task(DAG_ID, "stream", scheduled) == ["stream"]

        def relaunched():
            dep.check_running()
            new, status = state.read_launch(), state.read_status()
            return (new is not None and new.launch_id != launch.launch_id and status is not None
                    and status.launch_id == new.launch_id and status.state == "running" and new)

        try:
            relaunch = wait_until(relaunched, "(c) the cleared stream task to relaunch the stream", 90, 1.0)
        except AssertionError as exc:
            raise AssertionError(f"{exc}; launch {state.read_launch()}, status {state.read_status()}, tasks "
                                 f"{dep.task_states(DAG_ID, scheduled)}\n"
                                 + dep.task_log(DAG_ID, scheduled, "stream")) from None
        assert not SparkJobHook.alive(launch), "the cleared try's job still runs beside the new one"
        source_db.executemany("INSERT INTO orders VALUES (%s, %s, 'after clear')",
                              [(i, i) for i in range(900_001, 900_011)])
        try:  # what the job did, if they did not
            wait_sink_equal(spark, sink, source_db, "(c) inserts after the relaunch to reach the sink", 120)
        except AssertionError as exc:
            job_log = Path(relaunch.log).read_text(errors="replace").splitlines()[-60:]
            raise AssertionError(f"{exc}; status {state.read_status()}, job alive {SparkJobHook.alive(relaunch)}\n"
                                 + "\n".join(job_log)) from None
        wait_until(lambda: dep.task_states(DAG_ID, scheduled)["stream"] == "deferred",
                   "(c) the relaunched stream task to defer", 60, 5.0)

        # d. a re-snapshot run beside the stream's run: the running stream takes the new snapshot up
        source_db.execute("UPDATE orders SET note = 'before resnap' WHERE id BETWEEN 30 AND 39")
        res = subprocess.run([CLI, "resnapshot", str(config), "--table", orders], env=dep.env, capture_output=True,
                             text=True, timeout=300)
        said = re.fullmatch(rf"re-snapshot of {re.escape(orders)}: DAG run (\S+) of {DAG_ID} queued",
                            res.stdout.strip())
        assert res.returncode == 0 and said, res.stdout + res.stderr
        resnap = said[1]
        source_db.execute("UPDATE orders SET note = 'during resnap' WHERE id BETWEEN 40 AND 49")
        ended = wait_run_ended(dep, resnap, 480)
        tasks = dep.task_states(DAG_ID, resnap)
        assert ended == "success" and set(tasks.values()) == {"success"}, (
            tasks, dep.task_log(DAG_ID, resnap, "stream"), dep.task_log(DAG_ID, resnap, "snapshot_chunk"))
        taken = dep.xcom(DAG_ID, resnap, "stream")
        assert taken["skipped"] == "stream running" and list(taken["taken_up"]) == [orders], taken
        assert state.read_launch() == relaunch and SparkJobHook.alive(relaunch), "the stream was relaunched"
        assert stream_state(state) == "running" and dep.run_states(DAG_ID)[scheduled] == "running"
        source_db.execute("UPDATE orders SET note = 'after resnap' WHERE id BETWEEN 50 AND 59")
        wait_sink_equal(spark, sink, source_db, "(d) the sink to converge after the re-snapshot", 120)

        # e. airflow-cdc stop: the stream task ends in success, the sink equals the source
        stop = subprocess.run([CLI, "stop", str(config), "--wait", "120"], env=dep.env, capture_output=True,
                              text=True, timeout=200)
        assert stop.returncode == 0, stop.stdout + stop.stderr
        assert wait_run_ended(dep, scheduled, 120) == "success", (
            dep.task_states(DAG_ID, scheduled), dep.task_log(DAG_ID, scheduled, "stream"))
        assert dep.task_states(DAG_ID, scheduled)["stream"] == "success"
        assert dep.xcom(DAG_ID, scheduled, "stream")["state"] == "stopped"
        assert not sink_differences(spark, sink, source_db)
        assert not SparkJobHook.alive(relaunch) and state.read_launch() is None

        # what Airflow recorded: the sink table's asset events (collect made the snapshots current; the stream
        # wrote rows), and OpenLineage events naming the MySQL table and the sink table
        events = dep.api("GET", f"/api/v2/assets/events?source_dag_id={DAG_ID}&limit=100")["asset_events"]
        kinds = {(e["source_task_id"], e["source_run_id"], e["extra"]["kind"]) for e in events if e["uri"] == uri}
        assert {("collect_watermarks", scheduled, "snapshot"), ("collect_watermarks", resnap, "snapshot"),
                ("stream", scheduled, "stream")} <= kinds, events
        complete = [json.loads(line) for line in lineage.read_text().splitlines() if '"COMPLETE"' in line]
        written = {(e["job"]["name"], o["name"]) for e in complete for o in e.get("outputs", [])}
        assert {(f"{DAG_ID}.{t}", f"{tmp_path}/sink/{orders}") for t in ("snapshot_chunk", "collect_watermarks",
                                                                        "stream")} <= written, sorted(written)
        assert source_db.server.cdc.password not in lineage.read_text()

        # the task logs as the UI shows them: no JVM warnings, no spurious errors, the stream's progress while
        # it ran (the triggerer's lines in the deferred task's log)
        logs = {f: f.read_text(errors="replace") for f in (dep.home / "logs" / f"dag_id={DAG_ID}").rglob("*.log")}
        assert logs, "no task log written"
        noise = ("[warning][cds]", "XCom not found", "Using incubator modules", "NativeCodeLoader", "INFO SparkContext",
                 "adaptive.enabled is not supported")
        noisy = {str(f): [line for line in text.splitlines() if any(n in line for n in noise)]
                 for f, text in logs.items()}
        assert not any(noisy.values()), {f: lines[:3] for f, lines in noisy.items() if lines}
        # the LocalExecutor echoes every task log line into the scheduler's output: Spark's start-up lines are not
        scheduler_out = (dep.home / "deployment-logs" / "scheduler.log").read_text(errors="replace").splitlines()
        echoed = [line for line in scheduler_out if any(n in line for n in noise)]
        assert not echoed, f"Spark's lines in the scheduler's output: {echoed[:3]}"
        progress = [line for f, text in logs.items() if f"run_id={scheduled}" in str(f) and "task_id=stream" in str(f)
                    for line in text.splitlines() if "stream running:" in line]
        assert any("binlog bytes behind" in line for line in progress), progress[-5:]
    finally:
        for w in writers:
            w.stop()
        dep.cleanup()
        leftover = state.read_launch()
        if leftover is not None:  # a failed test leaves no stream job behind
            SparkJobHook.terminate(leftover, grace_seconds=0)
