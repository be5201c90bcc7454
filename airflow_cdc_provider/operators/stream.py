"""BinlogStreamOperator: launch the streaming binlog Spark job and watch its heartbeat."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
import uuid
from typing import Any, Sequence

from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator

from airflow_cdc_provider.operators.frozen_heap import with_frozen_heap
from airflow_cdc_provider.operators.links import SPARK_UI_XCOM_KEY, SparkUILink
from airflow_cdc_provider.operators.spark_submit import CdcSparkSubmitOperator
from airflow_cdc_provider.pipeline.resolve import load_pipeline
from airflow_cdc_provider.pipeline.stream_watch import (
    StreamHealth,
    current_status,
    judge,
    launch_alive,
    launch_name,
    process_alive,
)
from airflow_cdc_provider.spark.launch.standalone_rest import StandaloneRest

STREAM_SERVER_ID_SLOT = 10_000  # far from the chunk readers' slots
STOP_GRACE_SECONDS = 90  # a graceful stop ends the running batch first


class BinlogStreamOperator(CdcSparkSubmitOperator):
    """Run ``binlog_stream.py`` for the pipeline (seeded by collect_watermarks, resumed from its checkpoint).

    ``available_now`` (YAML ``stream.mode``): the job catches up to the position current at its start and
    exits; the task fails on a non-zero exit. With ``connect_conn_id`` (an Airflow ``spark_connect``
    connection; opt-in, as for the chunk tasks) it runs in the task's process as a session of that server
    instead of a spark-submit: no JVM start, the binlog reads and the sink writes in the server's Python
    workers. The server must reach the source, the sink and the state path.

    ``continuous``: the job is started detached (pid, host and log in XCom key ``stream_launch`` and in the
    state store; in standalone cluster deploy mode the driver id and the master's REST URL), and once it is
    up the task defers to ``StreamHeartbeatTrigger`` (``deferrable=False`` watches in the worker instead). The task fails when the job dies, fails, or its status heartbeat is older
    than ``heartbeat_timeout`` seconds, so an Airflow retry restarts it from its checkpoint; it succeeds when
    the job stops on request (``airflow-cdc stop CONFIG``, or SIGTERM to spark-submit). A second stream of
    the same pipeline is never launched while one is alive. Marking the task failed or clearing it stops the
    job gracefully (``on_kill`` of the operator, or of the trigger while deferred).
    """

    template_fields: Sequence[str] = (*SparkSubmitOperator.template_fields, "config", "connect_conn_id")
    ui_color = "#f3e8fd"
    operator_extra_links = (SparkUILink(),)
    job = "binlog_stream"

    def __init__(self, *, config: str, heartbeat_timeout: float | None = None, poll_interval: float = 5.0,
                 deferrable: bool = True, connect_conn_id: str | None = None, **kwargs: Any) -> None:
        kwargs.setdefault("durable", False)
        kwargs.setdefault("name", "airflow-cdc-stream")
        super().__init__(**kwargs)
        self.config = config
        self.heartbeat_timeout = heartbeat_timeout
        self.poll_interval = poll_interval
        self.deferrable = deferrable
        self.connect_conn_id = connect_conn_id
        self._connect_session = None
        self._connect_job = None
        self._launched: dict[str, Any] = {}
        self._state = None

    @with_frozen_heap
    def execute(self, context: Any) -> dict[str, Any]:
        from airflow.sdk.exceptions import AirflowFailException

        p = load_pipeline(self.config)
        self._state = p.state
        launch = p.state.read_json(p.state.LAUNCH) or {}
        if launch and launch_alive(launch) is not False:
            raise AirflowFailException(
                f"a stream of this pipeline is already running ({launch_name(launch)}); "
                "stop it first (airflow-cdc stop CONFIG, or mark its task failed) instead of launching a second one")
        dag_run = context.get("dag_run")
        if dag_run is not None and str(getattr(dag_run, "run_type", "")).endswith("backfill"):
            self.log.info("backfill run: the stream is not launched (CDC backfills are re-snapshots)")
            return {"skipped": "backfill"}
        tables = {t: {"chunk_key": p.config.source.chunk_key.get(t)} for t in sorted((p.state.read_seed() or {}).get("tables", {}))}
        if not tables and (p.stream.get("startup") or "initial") == "initial":
            raise AirflowFailException("no finished snapshot and no stream seed: run the snapshot tasks first")
        tables = tables or {t: {"chunk_key": p.config.source.chunk_key.get(t)} for t in p.config.source.tables}
        spec = p.job_spec(server_id=p.server_id(STREAM_SERVER_ID_SLOT), tables=tables)
        # the job writes this id into its status: a status is this launch's only if the ids match (a killed
        # predecessor's last heartbeat must never pass for the new job's, whatever the clocks say)
        self._launch_id = uuid.uuid4().hex
        spec.stream = {**spec.stream, "launch_id": self._launch_id}
        spec_path = p.state.write_spec("binlog_stream.json", spec.to_json())
        p.state.clear_stop()
        mode = p.stream.get("mode") or "available_now"
        if mode == "available_now" and self.connect_conn_id:
            self.run_on_connect(p, spec)
        elif mode == "available_now":
            self.configure_job(p, spec_path)
            self.submit(context)
        if mode == "available_now":
            status = p.state.read_status() or {}
            context["ti"].xcom_push(key=SPARK_UI_XCOM_KEY, value=status.get("ui_url") or "")
            return self._ended(p, StreamHealth("ended", "", status))
        if self.connect_conn_id:
            self.log.info("stream.mode continuous: the stream runs with spark-submit, not on Spark Connect %r "
                          "(a Connect session lasts only as long as its task's process)", self.connect_conn_id)
        return self._run_continuous(context, p, self.configure_job(p, spec_path, detached=True))

    def run_on_connect(self, pipeline, spec) -> None:
        """The ``available_now`` stream job in this process, on a new session of the ``connect_conn_id`` server."""
        from airflow.sdk.exceptions import AirflowException

        from airflow_cdc_provider.operators._connect import job_session
        from airflow_cdc_provider.spark.stream import StreamJob, failure_summary

        # the source's reads and the foreachBatch writer run in the server's Python workers: they import this package
        with job_session(self, pipeline, True, "stream job") as spark:
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
        return float(self.heartbeat_timeout or p.stream.get("heartbeat_timeout") or 120)

    def _launch(self, p, target) -> dict[str, Any]:
        """Start the job without waiting for it: a cluster-mode driver on the standalone master (spark-submit
        returns once it is submitted), else a detached spark-submit process logging to the state store."""
        started = time.time()
        ids = {"launch_id": self._launch_id}
        if target.cluster_mode and target.standalone:
            hook = self._hook = self._get_hook()
            hook.submit(self.application)  # raises on a failed submission; leaves the driver id
            return {**ids, "driver_id": hook._driver_id, "rest_url": target.rest_url, "started_at": started,
                    "log": f"the driver's stderr on its worker (Spark master UI, driver {hook._driver_id})"}
        cmd = self._get_hook()._build_spark_submit_command(self.application)
        log_path = p.state.local_dir("stream") / "job.log"
        with open(log_path, "ab") as log:
            proc = subprocess.Popen(cmd, env={**os.environ, **(self.env_vars or {})}, stdout=log,
                                    stderr=subprocess.STDOUT, start_new_session=True)
        return {**ids, "pid": proc.pid, "host": socket.gethostname(), "started_at": started, "log": str(log_path)}

    def _run_continuous(self, context: Any, p, target) -> dict[str, Any]:
        from airflow.sdk.exceptions import AirflowException

        try:
            launch = self._launch(p, target)
            self._launched = launch
            p.state.write_json(p.state.LAUNCH, launch)
            context["ti"].xcom_push(key="stream_launch", value=launch)
            self.log.info("stream launched (%s), log: %s", launch_name(launch), launch["log"])
            timeout = self._timeout(p)
            health = self._watch(p, launch, timeout, until_started=True)
        finally:  # the job has read its secrets once it wrote a status; then the file goes
            self.release_secrets()
        context["ti"].xcom_push(key=SPARK_UI_XCOM_KEY, value=health.status.get("ui_url") or "")
        if not health.final and self.deferrable:
            from airflow_cdc_provider.triggers.stream import StreamHeartbeatTrigger

            self.defer(trigger=StreamHeartbeatTrigger(p.state.uri, launch, timeout, self.poll_interval),
                       method_name="execute_complete")
        if not health.final:
            health = self._watch(p, launch, timeout)
        if health.verdict != "ended":
            self._terminate(launch)
            raise AirflowException(health.message)
        return self._ended(p, health)

    def _watch(self, p, launch: dict[str, Any], timeout: float, until_started: bool = False) -> StreamHealth:
        while True:
            health = judge(p.state.read_status(), launch, now=time.time(), heartbeat_timeout=timeout,
                           alive=launch_alive(launch))
            if health.final or (until_started and current_status(health.status, launch)):
                return health
            time.sleep(1.0 if until_started else self.poll_interval)

    def execute_complete(self, context: Any, event: dict[str, Any]) -> dict[str, Any]:
        from airflow.sdk.exceptions import AirflowException

        p = load_pipeline(self.config)
        self._state = p.state
        health = StreamHealth(event["verdict"], event["message"], event.get("status") or {})
        if health.verdict != "ended":
            self._terminate(p.state.read_json(p.state.LAUNCH) or {})
            raise AirflowException(health.message)
        return self._ended(p, health)

    def _ended(self, p, health: StreamHealth) -> dict[str, Any]:
        from airflow.sdk.exceptions import AirflowFailException

        p.state.delete(p.state.LAUNCH)
        status = health.status
        if status.get("state") not in ("finished", "stopped"):
            raise AirflowFailException(f"the stream job ended in state {status.get('state')!r}; see its log above")
        self.log.info("stream %s: %s rows emitted in %s batches, last offset %s", status.get("state"),
                      status.get("rows_emitted"), status.get("batches"), status.get("last_offset"))
        return status

    def _terminate(self, launch: dict[str, Any]) -> None:
        """Graceful first (stop request; SIGTERM to a local spark-submit), then a hard stop: SIGKILL of its
        process group, or the standalone master's kill of a cluster-mode driver."""
        if self._state is not None:
            self._state.request_stop()
        if not launch or not launch_alive(launch):
            return
        if launch.get("pid"):
            os.kill(launch["pid"], signal.SIGTERM)
        deadline = time.time() + STOP_GRACE_SECONDS
        while launch_alive(launch) and time.time() < deadline:
            time.sleep(0.5)
        if launch_alive(launch):
            if launch.get("driver_id"):
                StandaloneRest(launch["rest_url"]).kill(launch["driver_id"])
            elif process_alive(launch.get("pid")):
                os.killpg(launch["pid"], signal.SIGKILL)
        if self._state is not None:
            self._state.delete(self._state.LAUNCH)

    def on_kill(self) -> None:
        if self._connect_job is not None:  # on Connect: the job's loop stops the query, execute() then ends
            self._connect_job.request_stop()
        elif self._launched:
            self._terminate(self._launched)
        else:
            super().on_kill()
