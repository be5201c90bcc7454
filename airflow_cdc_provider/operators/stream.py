"""BinlogStreamOperator: launch the streaming binlog Spark job and watch its heartbeat."""

from __future__ import annotations

import time
import uuid
from typing import Any, Sequence

from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator

from airflow_cdc_provider.hooks.spark_job import SparkJobHook
from airflow_cdc_provider.operators.frozen_heap import with_frozen_heap
from airflow_cdc_provider.operators.links import SPARK_UI_XCOM_KEY, SparkUILink
from airflow_cdc_provider.operators.spark_submit import CdcSparkSubmitOperator
from airflow_cdc_provider.pipeline.plan import STREAM_SERVER_ID_SLOT
from airflow_cdc_provider.pipeline.resolve import load_pipeline
from airflow_cdc_provider.pipeline.stream_watch import StreamHealth, current_status, judge
from airflow_cdc_provider.state.records import StreamLaunch

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
        self._state = None

    @with_frozen_heap
    def execute(self, context: Any) -> dict[str, Any]:
        from airflow.sdk.exceptions import AirflowFailException

        p = load_pipeline(self.config)
        self._state = p.state
        launch = p.state.read_launch()
        if launch is not None and SparkJobHook.alive(launch) is not False:
            raise AirflowFailException(
                f"a stream of this pipeline is already running ({launch.name}); "
                "stop it first (airflow-cdc stop CONFIG, or mark its task failed) instead of launching a second one")
        dag_run = context.get("dag_run")
        if dag_run is not None and str(getattr(dag_run, "run_type", "")).endswith("backfill"):
            self.log.info("backfill run: the stream is not launched (CDC backfills are re-snapshots)")
            return {"skipped": "backfill"}
        seed = p.state.read_seed()
        if seed is None and p.stream.startup == "initial":
            raise AirflowFailException("no finished snapshot and no stream seed: run the snapshot tasks first")
        # the snapshotted tables, or (a stream without snapshot) the tables the YAML's names and patterns match
        tables = sorted(seed.tables) if seed and seed.tables else p.captured_tables()
        # the job writes this id into its status: a status is this launch's only if the ids match (a killed
        # predecessor's last heartbeat must never pass for the new job's, whatever the clocks say)
        self._launch_id = uuid.uuid4().hex
        spec = p.job_spec(server_id=p.server_id(STREAM_SERVER_ID_SLOT), tables=tables, launch_id=self._launch_id)
        spec_path = p.state.write_spec("binlog_stream.json", spec.to_json())
        p.state.clear_stop()
        if p.stream.mode == "available_now" and self.connect_conn_id:
            self.run_on_connect(p, spec)
        elif p.stream.mode == "available_now":
            self.configure_job(p, spec_path)
            self.submit(context)
        if p.stream.mode == "available_now":
            status = p.state.read_status()
            context["ti"].xcom_push(key=SPARK_UI_XCOM_KEY, value=(status.ui_url if status else None) or "")
            return self._ended(p, StreamHealth("ended", "", status))
        if self.connect_conn_id:
            self.log.info("stream.mode continuous: the stream runs with spark-submit, not on Spark Connect %r "
                          "(a Connect session lasts only as long as its task's process)", self.connect_conn_id)
        return self._run_continuous(context, p, self.configure_job(p, spec_path, detached=True))

    def run_on_connect(self, pipeline, spec) -> None:
        """The ``available_now`` stream job in this process, on a new session of the ``connect_conn_id`` server."""
        from airflow.sdk.exceptions import AirflowException

        from airflow_cdc_provider.spark.stream import StreamJob, failure_summary

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

    def _run_continuous(self, context: Any, p, target) -> dict[str, Any]:
        from airflow.sdk.exceptions import AirflowException

        try:
            launch = self.launch_detached(p.state.local_dir("stream") / "job.log", self._launch_id, target)
            self._launched = launch
            p.state.write_launch(launch)
            context["ti"].xcom_push(key="stream_launch", value=launch.to_dict())
            self.log.info("stream launched (%s), log: %s", launch.name, launch.log)
            timeout = self._timeout(p)
            health = self._watch(p, launch, timeout, until_started=True)
        finally:  # the job has read its secrets once it wrote a status; then the file goes
            self.release_secrets()
        context["ti"].xcom_push(key=SPARK_UI_XCOM_KEY, value=(health.status.ui_url if health.status else None) or "")
        if not health.final and self.deferrable:
            from airflow_cdc_provider.triggers.stream import StreamHeartbeatTrigger

            self.defer(trigger=StreamHeartbeatTrigger(p.state.uri, launch.to_dict(), timeout, self.poll_interval),
                       method_name="execute_complete")
        if not health.final:
            health = self._watch(p, launch, timeout)
        if health.verdict != "ended":
            self._terminate(launch)
            raise AirflowException(health.message)
        return self._ended(p, health)

    def _watch(self, p, launch: StreamLaunch, timeout: float, until_started: bool = False) -> StreamHealth:
        while True:
            health = judge(p.state.read_status(), launch, now=time.time(), heartbeat_timeout=timeout,
                           alive=SparkJobHook.alive(launch))
            if health.final or (until_started and current_status(health.status, launch)):
                return health
            time.sleep(1.0 if until_started else self.poll_interval)

    def execute_complete(self, context: Any, event: dict[str, Any]) -> dict[str, Any]:
        from airflow.sdk.exceptions import AirflowException

        p = load_pipeline(self.config)
        self._state = p.state
        health = StreamHealth.from_dict(event)
        if health.verdict != "ended":
            self._terminate(p.state.read_launch())
            raise AirflowException(health.message)
        return self._ended(p, health)

    def _ended(self, p, health: StreamHealth) -> dict[str, Any]:
        from airflow.sdk.exceptions import AirflowFailException

        p.state.delete_launch()
        status = health.status
        if status is None or status.state not in ("finished", "stopped"):
            raise AirflowFailException(f"the stream job ended in state {status.state if status else None!r}; see its "
                                       "log above")
        self.log.info("stream %s: %s rows emitted in %s batches, last offset %s", status.state,
                      status.rows_emitted, status.batches, status.last_offset)
        return status.to_dict()

    def _terminate(self, launch: StreamLaunch | None) -> None:
        """Graceful first (a stop request in the state store, SIGTERM to a local spark-submit), then after
        ``STOP_GRACE_SECONDS`` a hard stop (``SparkJobHook.terminate``)."""
        if self._state is not None:
            self._state.request_stop()
        if launch is None or not SparkJobHook.alive(launch):
            return
        SparkJobHook.terminate(launch, STOP_GRACE_SECONDS)
        if self._state is not None:
            self._state.delete_launch()

    def on_kill(self) -> None:
        if self._connect_job is not None:  # on Connect: the job's loop stops the query, execute() then ends
            self._connect_job.request_stop()
        elif self._launched is not None:
            self._terminate(self._launched)
        else:
            super().on_kill()
