"""BinlogStreamOperator: launch the streaming binlog Spark job and watch its heartbeat."""

from __future__ import annotations

import json
import os
import socket
import time
import uuid
from dataclasses import replace
from typing import Any, Sequence

from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator

from airflow_cdc_provider.hooks.spark_job import SparkJobHook, process_alive, process_start
from airflow_cdc_provider.operators.assets import emit_table_events
from airflow_cdc_provider.operators.dag_run import is_backfill, snapshots_under_way
from airflow_cdc_provider.operators.frozen_heap import with_frozen_heap
from airflow_cdc_provider.operators.lineage import CdcLineageMixin
from airflow_cdc_provider.operators.links import SPARK_UI_XCOM_KEY, SparkUILink
from airflow_cdc_provider.operators.metrics import emit, source_bytes_behind, stream_progress
from airflow_cdc_provider.operators.spark_submit import CdcSparkSubmitOperator
from airflow_cdc_provider.pipeline.metrics import StreamMeter
from airflow_cdc_provider.pipeline.collect import streamed_tables
from airflow_cdc_provider.pipeline.plan import STREAM_SERVER_ID_SLOT
from airflow_cdc_provider.pipeline.resolve import load_pipeline
from airflow_cdc_provider.pipeline.stream_watch import ProgressLog, StreamHealth, current_status, judge, lease_alive
from airflow_cdc_provider.state.records import (
    CARRY_OVER_MODE,
    RUNNING_STATES,
    ReloadRequest,
    StreamLaunch,
    StreamLease,
    StreamStatus,
)

STOP_GRACE_SECONDS = 90  # a graceful stop ends the running batch first
# how long a stream task waits for a plan step carrying renamed tables over (it holds the stream lease meanwhile)
CARRY_OVER_WAIT_SECONDS = 120


def holder_alive(p, lease: StreamLease, heartbeat_timeout: float) -> bool:
    """Whether the stream job holding ``lease`` still runs."""
    if lease.launch is not None:
        alive = SparkJobHook.alive(lease.launch)
    else:  # the job runs in (a child of) the holding task's process
        alive = process_alive(lease.pid, lease.pid_start) if lease.host == socket.gethostname() else None
    return lease_alive(lease, p.state.read_status(), now=time.time(), heartbeat_timeout=heartbeat_timeout,
                       alive=alive)


def stop_holder(p, lease: StreamLease, heartbeat_timeout: float) -> bool:
    """Stop the stream holding ``lease``: its detached job gracefully (then hard, after the grace period); a job
    in its task's own process ends with it (Airflow stops a cleared running task), so wait for that. Whether it
    stopped: one still running after the grace period (a job on another host, which only its stop request in the
    state store reaches) keeps that request, to stop once it sees it."""
    p.state.request_stop()
    if lease.launch is not None:
        SparkJobHook.terminate(lease.launch, STOP_GRACE_SECONDS)
    deadline = time.time() + STOP_GRACE_SECONDS
    while holder_alive(p, lease, heartbeat_timeout) and time.time() < deadline:
        time.sleep(1.0)
    if holder_alive(p, lease, heartbeat_timeout):
        return False
    p.state.clear_stop()
    return True


def lease_unleased_stream(p, heartbeat_timeout: float) -> None:
    """A stream launched before leases existed (by an earlier provider version) that still runs holds the lease
    all the same: it is taken in its name, so that a stream task does not launch a second one beside it and a
    plan step stops it as it stops any running stream (for a table new to it, or a carry-over)."""
    launched = p.state.read_launch()
    if launched is None or p.state.read_lease() is not None:
        return
    lease = StreamLease(launched.launch_id, "a stream launched without a lease", 0, launched.host or "",
                        launched.pid or 0, "continuous", launched.started_at, launched, launched.pid_start)
    if holder_alive(p, lease, heartbeat_timeout):
        p.state.try_lease(lease)


def tables_new_to_running_stream(p, tables: set[str], heartbeat_timeout: float) -> tuple[StreamLease | None, set[str]]:
    """Of ``tables`` (about to be snapshotted), those the pipeline's running continuous stream does not read,
    and its lease. Such a table's changes after its snapshot would be lost: the stream passes its high watermark
    without reading it, and a stream launched later resumes past it."""
    holder = p.state.read_lease()
    if holder is None or holder.mode != "continuous" or not tables or not holder_alive(p, holder, heartbeat_timeout):
        return None, set()
    status = p.state.read_status()
    if status is None or status.launch_id != holder.launch_id:
        return holder, set(tables)  # what it reads is not known yet
    reading = set(status.tables or status.epochs)
    return holder, {t for t in tables if t not in reading}


class BinlogStreamOperator(CdcLineageMixin, CdcSparkSubmitOperator):
    """Run ``binlog_stream.py`` for the pipeline (seeded by collect_watermarks, resumed from its checkpoint).

    ``available_now`` (YAML ``stream.mode``): the job catches up to the position current at its start and
    exits; the task fails on a non-zero exit. With ``connect_conn_id`` (an Airflow ``spark_connect``
    connection; opt-in, as for the chunk tasks) it runs in the task's process as a session of that server
    instead of a spark-submit: no JVM start, the binlog reads and the sink writes in the server's Python
    workers. The server must reach the source, the sink and the state path.

    ``continuous``: the job is started detached (pid, host and log in XCom key ``stream_launch`` and in the
    state store; in standalone cluster deploy mode the driver id and the master's REST URL), and once it is
    up the task defers to ``StreamHeartbeatTrigger`` (``deferrable=False`` watches in the worker instead). The
    task fails when the job dies, fails, or its status heartbeat is older than ``heartbeat_timeout`` seconds, so an Airflow retry restarts it from its checkpoint; it succeeds when
    the job stops on request (``airflow-cdc stop CONFIG``, or SIGTERM to spark-submit). A second stream of
    the same pipeline is never launched while one is alive. Marking the task failed or clearing it stops the
    job gracefully (``on_kill`` of the operator, or of the trigger while deferred).
    """

    template_fields: Sequence[str] = (*SparkSubmitOperator.template_fields, "config", "connect_conn_id")
    ui_color = "#f3e8fd"
    operator_extra_links = (SparkUILink(),)
    job = "binlog_stream"
    client_jit = True

    def __init__(self, *, config: str, heartbeat_timeout: float | None = None, poll_interval: float = 5.0,
                 deferrable: bool = True, connect_conn_id: str | None = None, **kwargs: Any) -> None:
        kwargs.setdefault("durable", False)
        kwargs.setdefault("name", "airflow-cdc-stream")
        super().__init__(connect_conn_id=connect_conn_id, **kwargs)
        self.config = config
        self.heartbeat_timeout = heartbeat_timeout
        self.poll_interval = poll_interval
        self.deferrable = deferrable
        self._connect_job = None
        self._launched: StreamLaunch | None = None
        self._meter = StreamMeter()  # the metrics this launch's watchers sent so far
        self._state = None

    @with_frozen_heap
    def execute(self, context: Any) -> dict[str, Any]:
        p = load_pipeline(self.config)
        self._state = p.state
        if is_backfill(context):
            self.log.info("backfill run: the stream is not launched; the pipeline's own runs stream every change "
                          "(a backfill re-snapshots the tables named in its conf's resnapshot, nothing more)")
            ti, holder = context["ti"], p.state.read_lease()
            if holder is None or holder.mode != "continuous" or not self._holder_alive(p, holder):
                return {"skipped": "backfill"}
            # its re-snapshots, if any, are taken up by the continuous stream running now
            taken_up = self._hand_over_snapshots(p, holder, f"{ti.dag_id}/{ti.run_id}/{ti.task_id}")
            return {"skipped": "backfill", **({"taken_up": taken_up} if taken_up else {})}
        tables = self._tables_to_stream(context, p)
        if isinstance(tables, dict):
            return tables
        # the job writes this id into its status: a status is this launch's only if the ids match (a killed
        # predecessor's last heartbeat must never pass for the new job's, whatever the clocks say)
        self._launch_id = uuid.uuid4().hex
        ti = context["ti"]
        lease = StreamLease(self._launch_id, f"{ti.dag_id}/{ti.run_id}/{ti.task_id}", int(ti.try_number or 1),
                            socket.gethostname(), os.getpid(), p.stream.mode, pid_start=process_start(os.getpid()))
        holder = self._acquire_lease(p, lease)
        if holder is not None and p.stream.startup != "initial":
            # a table captured since it was launched: it reads it once launched again (a snapshotted table is
            # stopped for by the plan step, before its snapshot). The tables are read again: a carry-over waited
            # for above may have moved some to new names, which the running stream, launched after it, reads
            now = self._tables_to_stream(context, p)
            _, new = tables_new_to_running_stream(p, set(now) if isinstance(now, list) else set(), self._timeout(p))
            if new:
                self.log.warning("the running stream (%s) does not read %s, captured since it was launched: stopping "
                                 "it (after its current batch) to launch it again reading them too", holder.holder,
                                 sorted(new))
                self._stop_holder(p, holder)
                holder = self._acquire_lease(p, lease)
        if holder is not None and holder.mode == CARRY_OVER_MODE:
            self.log.warning("%s still carries renamed tables over after %d s: this task launches no stream, the "
                             "next DAG run does", holder.holder, CARRY_OVER_WAIT_SECONDS)
            return {"skipped": "carry-over under way", "holder": holder.holder}
        if holder is not None:
            self.log.info("the stream of this pipeline runs in %s (try %d, %s since %s): it streams this run's "
                          "changes too, so this task launches none", holder.holder, holder.try_number, holder.mode,
                          time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(holder.acquired_at)))
            taken_up = self._hand_over_snapshots(p, holder, lease.holder) if holder.mode == "continuous" else {}
            return {"skipped": "stream running", "holder": holder.holder, "taken_up": taken_up}
        try:  # again under the lease: a plan step carrying renamed tables over, which holds it, may have moved them
            tables = self._tables_to_stream(context, p)
            if isinstance(tables, dict):
                p.state.release_lease(lease.launch_id)
                return tables
            self._hold_tables_passed_unread(p, tables)
            p.state.add_streamed_tables(tables)
        except BaseException:
            p.state.release_lease(lease.launch_id)
            raise
        if p.stream.mode == "continuous":
            return self._run_continuous(context, p, lease, tables)
        try:
            return self._run_available_now(context, p, tables)
        finally:
            p.state.release_lease(lease.launch_id)

    def _run_available_now(self, context: Any, p, tables: list[str]) -> dict[str, Any]:
        spec = p.job_spec(server_id=p.server_id(STREAM_SERVER_ID_SLOT), tables=tables, launch_id=self._launch_id)
        spec_path = p.state.write_spec(p.state.STREAM_SPEC, spec.to_json())
        p.state.clear_stop()
        if self.connect_conn_id:
            self.run_on_connect(p, spec)
        else:
            self.configure_job(p, spec_path)
            self.submit(context)
        status = p.state.read_status()
        context["ti"].xcom_push(key=SPARK_UI_XCOM_KEY, value=(status.ui_url if status else None) or "")
        return self._ended(context, p, StreamHealth("ended", "", status))

    def _tables_to_stream(self, context: Any, p) -> list[str] | dict[str, Any]:
        """The tables this launch reads; or, when it must not launch yet, what the task returns instead (the first
        snapshots under way launch it once done)."""
        from airflow.sdk.exceptions import AirflowFailException

        seed = p.state.read_seed()
        if seed is None and p.stream.startup == "initial":
            under_way = snapshots_under_way(context, p.state.planned_snapshots())
            if under_way:
                return self._left_to(under_way)
            raise AirflowFailException("no finished snapshot and no stream seed: run the snapshot tasks first")
        tables = streamed_tables(seed, p.stream.startup, p.captured_tables, p.state.streamed_tables())
        unread = {t: s for t, s in p.state.planned_snapshots().items() if t not in tables}
        first_snapshots = snapshots_under_way(context, unread) if unread else {}
        if first_snapshots:  # launched now, the stream would pass their high watermarks without them
            return self._left_to(first_snapshots)
        return tables

    def job_failure(self, error: str) -> str | None:
        """What the stream job itself reported when it failed (its status), else its output's last exception."""
        status = self._state.read_status() if self._state is not None else None
        if status is not None and status.launch_id == getattr(self, "_launch_id", None) and status.error:
            return status.error
        return super().job_failure(error)

    # -- one stream per pipeline --------------------------------------------------------------------
    def _acquire_lease(self, p, lease: StreamLease) -> StreamLease | None:
        """Take the pipeline's stream lease; None once taken, else the live holder of another DAG run. A stale
        lease (its holder gone) is taken over; so is the lease of an earlier try of this same task (a cleared
        stream task): its job is stopped first, gracefully, and this try resumes from the checkpoint. A plan step
        carrying renamed tables over holds it for seconds: waited for, up to ``CARRY_OVER_WAIT_SECONDS``."""
        lease_unleased_stream(p, self._timeout(p))
        carry_over_ends = time.monotonic() + CARRY_OVER_WAIT_SECONDS
        while True:
            other = p.state.try_lease(lease)
            if other is None or other.launch_id == lease.launch_id:
                return None
            if other.mode == CARRY_OVER_MODE and time.monotonic() < carry_over_ends and self._holder_alive(p, other):
                self.log.info("%s carries renamed tables over to their new names: waiting for it", other.holder)
                time.sleep(1.0)
                continue
            if not self._holder_alive(p, other):
                self.log.warning("the stream lease of %s (try %d) is stale, its %s is gone: taking it over",
                                 other.holder, other.try_number,
                                 "carry-over" if other.mode == CARRY_OVER_MODE else "stream")
            elif other.holder == lease.holder and other.try_number < lease.try_number:
                self.log.info("try %d of this task still runs the stream: stopping it (after its current batch) to "
                              "take over from its checkpoint", other.try_number)
                if not self._stop_holder(p, other):
                    from airflow.sdk.exceptions import AirflowException

                    raise AirflowException(
                        f"try {other.try_number} of this task still runs the stream {STOP_GRACE_SECONDS} s after it "
                        "was asked to stop (the request stays): a second stream beside it would fight it over its "
                        "checkpoint; clear this task again once it has stopped (airflow-cdc status)")
            else:
                return other
            p.state.release_lease(other.launch_id)

    def _left_to(self, under_way: dict) -> dict[str, Any]:
        """No launch: the runs snapshotting tables for the first time launch the stream once they are done."""
        runs = sorted({s.run_id for s in under_way.values()})
        self.log.info("the first snapshot of %s is under way in DAG run(s) %s: the stream is launched there, once "
                      "it is finished, reading them too", sorted(under_way), runs)
        return {"skipped": "snapshot under way", "runs": runs}

    def _hold_tables_passed_unread(self, p, tables: list[str]) -> None:
        """A table this launch streams for the first time whose snapshot a high watermark of ended before the
        checkpoint the stream resumes from: the changes between were read by no stream (a stream launched
        while its snapshot ran). It is held, as after a resync, and the next run re-snapshots it."""
        from airflow_cdc_provider.core.chunks import TableId
        from airflow_cdc_provider.core.offsets import EventPosition
        from airflow_cdc_provider.core.schema_changes import RESYNC, SchemaChange

        before, resume = p.state.read_json(p.state.STREAMED), p.state.checkpoint_offset()
        if before is None or resume is None:  # no stream yet, or one launched before this was recorded
            return
        finished = p.state.finished_tables()
        passed = []
        for table in sorted(set(tables) - set(before)):
            snapshot = finished.get(table)
            if snapshot is not None and min(r.high_watermark for r in snapshot.chunks) < resume:
                passed.append(SchemaChange(RESYNC, TableId.parse(table), "", "its snapshot ended before the stream's "
                                           "checkpoint, and no stream read it in between",
                                           EventPosition(resume.file, resume.pos)))
        if passed:
            p.state.record_schema_changes(passed)
            self.log.warning("%s: streamed for the first time from %s, after their snapshot ended; held until the "
                             "next run re-snapshots them (or now: airflow dags trigger <dag_id> -c "
                             "'{\"resnapshot\": %s}')", [str(c.table) for c in passed], resume,
                             json.dumps([str(c.table) for c in passed]))

    def _hand_over_snapshots(self, p, holder: StreamLease, me: str) -> dict[str, int]:
        """Snapshots finished after the running continuous stream set up (this run's re-snapshot, a held table's
        new definition) are taken up by it: a reload request, then a wait until its status shows their epochs.
        The stream goes on; its query starts again from its checkpoint. Returns ``{table: epoch}`` taken up."""
        from airflow.sdk.exceptions import AirflowException

        finished = {t: s.epoch for t, s in p.state.finished_tables().items()}

        def missing(status: StreamStatus | None) -> dict[str, int]:
            loaded = status.epochs if status is not None and status.launch_id == holder.launch_id else {}
            return {t: e for t, e in finished.items() if loaded.get(t, -1) < e}

        status = p.state.read_status()
        newer = missing(status)
        if not newer:
            return {}
        unread = sorted(t for t in newer if status is not None and status.launch_id == holder.launch_id
                        and status.tables and t not in status.tables)
        if unread:
            raise AirflowException(f"the running stream ({holder.holder}) does not read {unread}, snapshotted by this "
                                   "run: it cannot take them up. Stop it (airflow-cdc stop), then trigger the DAG with "
                                   f"{{\"resnapshot\": {json.dumps(unread)}}}: the stream is launched again with them")
        p.state.request_reload(ReloadRequest(newer, me))
        self.log.info("asked the running stream to take up the snapshot(s) %s without stopping", newer)
        limit = self._timeout(p) + STOP_GRACE_SECONDS  # its current batch, a stop, a new query's set-up
        deadline = time.time() + limit
        while time.time() < deadline:
            status = p.state.read_status()
            if status is not None and status.launch_id == holder.launch_id and status.state not in RUNNING_STATES:
                raise AirflowException(f"the running stream ended ({status.state}) before it took up {newer}; the "
                                       "next stream launched takes them up")
            if not missing(status):
                self.log.info("the running stream took up %s; it goes on from its checkpoint", newer)
                return newer
            time.sleep(1.0)
        launch = holder.launch
        raise AirflowException(f"the running stream did not take up the snapshot(s) {newer} within "
                               f"{limit:.0f} s; its log: "
                               f"{launch.log if launch else 'see its task'}. The request stays: it takes them up with "
                               "its next batch, or when it is launched again")

    def _holder_alive(self, p, lease: StreamLease) -> bool:
        return holder_alive(p, lease, self._timeout(p))

    def _stop_holder(self, p, lease: StreamLease) -> bool:
        return stop_holder(p, lease, self._timeout(p))

    def run_on_connect(self, pipeline, spec) -> None:
        """The ``available_now`` stream job in this process, on a new session of the ``connect_conn_id`` server."""
        from airflow.sdk.exceptions import AirflowException

        from airflow_cdc_provider.pipeline.job_errors import failure_summary
        from airflow_cdc_provider.spark.stream import StreamJob

        # the source's reads and the foreachBatch writer run in the server's Python workers: they import this package
        with self.connect_job(pipeline, True, "stream job") as spark:
            job = self._connect_job = StreamJob(spark, spec, pipeline.secrets)
            try:
                failed = job.run() != 0
            finally:
                self._connect_job = None
        if failed:  # retried like a failed spark-submit: the retry resumes from the checkpoint
            raise AirflowException(f"the stream job failed: {failure_summary(job.error or '')}; its whole error is in "
                                   "the log above")

    # -- continuous ---------------------------------------------------------------------------------
    def _timeout(self, p) -> float:
        return float(self.heartbeat_timeout or p.stream.heartbeat_timeout)

    def _run_continuous(self, context: Any, p, lease: StreamLease, tables: list[str]) -> dict[str, Any]:
        from airflow.sdk.exceptions import AirflowException

        if self.connect_conn_id:
            self.log.info("stream.mode continuous: the stream runs with spark-submit, not on Spark Connect %r "
                          "(a Connect session lasts only as long as its task's process)", self.connect_conn_id)
        try:
            spec = p.job_spec(server_id=p.server_id(STREAM_SERVER_ID_SLOT), tables=tables, launch_id=self._launch_id)
            spec_path = p.state.write_spec(p.state.STREAM_SPEC, spec.to_json())
            p.state.clear_stop()
            target = self.configure_job(p, spec_path, detached=True)
            launch = self.launch_detached(p.state.local_dir("stream") / "job.log", self._launch_id, target)
            self._launched = launch
            p.state.write_launch(launch)
            # the job outlives this process: it holds the lease, and has from now to write its first status
            p.state.write_lease(replace(lease, launch=launch, acquired_at=time.time()))
        except BaseException:
            p.state.release_lease(lease.launch_id)
            self.release_secrets()
            raise
        try:
            context["ti"].xcom_push(key="stream_launch", value=launch.to_dict())
            self.log.info("stream launched (%s), log: %s", launch.name, launch.log)
            timeout = self._timeout(p)
            health = self._watch(p, launch, timeout, until_started=True)
        finally:  # the job has read its secrets once it wrote a status; then the file goes
            self.release_secrets()
        context["ti"].xcom_push(key=SPARK_UI_XCOM_KEY, value=(health.status.ui_url if health.status else None) or "")
        if not health.final and self.deferrable:
            from airflow_cdc_provider.triggers.stream import StreamHeartbeatTrigger

            self.defer(trigger=StreamHeartbeatTrigger(p.state.uri, launch.to_dict(), timeout, self.poll_interval,
                                                      config=self.config, dag_id=p.dag_id,
                                                      meter=self._meter.to_dict()),
                       method_name="execute_complete")
        if not health.final:
            health = self._watch(p, launch, timeout)
        if health.verdict != "ended":
            self._terminate(launch)
            raise AirflowException(health.message)
        return self._ended(context, p, health, launch.launch_id)

    def _watch(self, p, launch: StreamLaunch, timeout: float, until_started: bool = False) -> StreamHealth:
        progress = ProgressLog()
        while True:
            health = judge(p.state.read_status(), launch, now=time.time(), heartbeat_timeout=timeout,
                           alive=SparkJobHook.alive(launch))
            if health.final or (until_started and current_status(health.status, launch)):
                return health
            if health.status is not None:
                line, metrics = stream_progress(progress, self._meter, health.status, time.time(), p.source)
                if line:
                    self.log.info(line)
                emit(metrics, p.dag_id)
            time.sleep(1.0 if until_started else self.poll_interval)

    def execute_complete(self, context: Any, event: dict[str, Any]) -> dict[str, Any]:
        from airflow.sdk.exceptions import AirflowException

        p = load_pipeline(self.config)
        self._state = p.state
        health = StreamHealth.from_dict(event)
        self._meter = StreamMeter.from_dict(event.get("meter"))  # what the trigger counted
        launch = self._watched_launch(context, event)
        if health.verdict != "ended":
            self._terminate(launch)
            raise AirflowException(health.message)
        return self._ended(context, p, health, launch.launch_id if launch else None)

    @staticmethod
    def _watched_launch(context: Any, event: dict[str, Any]) -> StreamLaunch | None:
        """The launch the trigger watched: its event names it (one of a task deferred by an earlier provider
        version: the task's ``stream_launch`` XCom). Never the state store's current launch, which another run's
        stream task may have replaced meanwhile (stopping this one for a table new to it)."""
        data = event.get("launch")
        if data is None:
            ti = context["ti"]
            data = ti.xcom_pull(task_ids=ti.task_id, key="stream_launch")
        return StreamLaunch.from_dict(data) if data else None

    def _ended(self, context: Any, p, health: StreamHealth, launch_id: str | None = None) -> dict[str, Any]:
        from airflow.sdk.exceptions import AirflowFailException

        p.state.delete_launch(launch_id)
        if launch_id:
            p.state.release_lease(launch_id)
        status = health.status
        if status is None or status.state not in ("finished", "stopped"):
            raise AirflowFailException(f"the stream job ended in state {status.state if status else None!r}; see its "
                                       "log above")
        self.log.info("stream %s: %s rows emitted in %s batches, last offset %s", status.state,
                      status.rows_emitted, status.batches, status.last_offset)
        self._report_ended(context, p, status)
        return status.to_dict()

    def _report_ended(self, context: Any, p, status: StreamStatus) -> None:
        """The stream's last metrics, and an asset event for each table it wrote rows of (the sink holds them
        now that the task succeeds)."""
        try:
            behind = source_bytes_behind(p.source, status.last_offset)
        except Exception as exc:  # noqa: BLE001 - the stream's work is done; only a gauge is missing
            self.log.warning("binlog bytes behind not measured: %s: %s", type(exc).__name__, exc)
            behind = None
        emit(self._meter.observe(status, behind), p.dag_id)
        offset = f"{status.last_offset.file}:{status.last_offset.pos}" if status.last_offset else None
        emit_table_events(self, context, p.sink, {
            table: {"kind": "stream", "rows": rows, "batches": status.batches, "offset": offset}
            for table, rows in status.rows_by_table.items() if rows})

    def _terminate(self, launch: StreamLaunch | None) -> None:
        """Graceful first (a stop request in the state store, SIGTERM to a local spark-submit), then after
        ``STOP_GRACE_SECONDS`` a hard stop (``SparkJobHook.terminate``). The stop request only while ``launch``
        holds the lease: once another task took the lease over, it would stop that task's stream."""
        if self._state is not None:
            holder = self._state.read_lease() if launch is not None else None
            if launch is None or (holder is not None and holder.launch_id == launch.launch_id):
                self._state.request_stop()
        if launch is not None and SparkJobHook.alive(launch):
            SparkJobHook.terminate(launch, STOP_GRACE_SECONDS)
        if self._state is not None and launch is not None and SparkJobHook.alive(launch) is False:
            self._state.delete_launch(launch.launch_id)
            self._state.release_lease(launch.launch_id)

    def on_kill(self) -> None:
        if self._connect_job is not None:  # on Connect: the job's loop stops the query, execute() then ends
            self._connect_job.request_stop()
        elif self._launched is not None:
            self._terminate(self._launched)
        else:
            super().on_kill()
