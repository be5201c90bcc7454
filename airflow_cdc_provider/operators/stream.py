"""BinlogStreamOperator: launch the streaming binlog Spark job and watch its heartbeat."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from typing import Any, Sequence

from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator

from ..spark_jobs import application_path
from ..jobspec import SECRETS_FILE_ENV
from ._common import load_pipeline, private_secrets_file, remove_secrets_file, server_id_for, spark_submit_defaults

STREAM_SERVER_ID_SLOT = 10_000  # far from the chunk readers' slots


def _alive(pid: int | None) -> bool:
    if not pid:
        return False
    try:
        os.kill(pid, 0)
    except OSError:
        return False
    return True


class BinlogStreamOperator(SparkSubmitOperator):
    """Run ``binlog_stream.py`` for the pipeline (seeded by collect_watermarks, resumed from its checkpoint).

    ``available_now`` (YAML ``stream.mode``): the job catches up to the position current at its start and
    exits; the task fails on a non-zero exit. ``continuous``: the job is started detached (pid and app id in
    XCom and the state store), then watched: the task fails when the job dies or its status heartbeat is
    older than ``heartbeat_timeout`` seconds, so an Airflow retry restarts it from its checkpoint; it ends
    successfully when the job stops on request (``airflow-cdc`` state ``stream/stop``). A second stream of the
    same pipeline is never launched while one is alive; ``on_kill`` stops the job.
    """

    template_fields: Sequence[str] = (*SparkSubmitOperator.template_fields, "config")
    ui_color = "#f3e8fd"

    def __init__(self, *, config: str, heartbeat_timeout: float | None = None, poll_interval: float = 2.0,
                 **kwargs: Any) -> None:
        kwargs.setdefault("durable", False)
        kwargs.setdefault("name", "airflow-cdc-stream")
        super().__init__(application=application_path("binlog_stream"), **spark_submit_defaults(kwargs))
        self.config = config
        self.heartbeat_timeout = heartbeat_timeout
        self.poll_interval = poll_interval
        self._proc: subprocess.Popen | None = None
        self._state = None

    def execute(self, context: Any) -> dict[str, Any]:
        from airflow.sdk.exceptions import AirflowFailException

        p = load_pipeline(self.config)
        self._state = p.state
        launch = p.state.read_json(p.state.LAUNCH) or {}
        if _alive(launch.get("pid")):
            raise AirflowFailException(
                f"a stream of this pipeline is already running (pid {launch['pid']}); stop it first "
                "(mark its task failed, or request a stop) instead of launching a second one")
        dag_run = context.get("dag_run")
        if dag_run is not None and str(getattr(dag_run, "run_type", "")).endswith("backfill"):
            self.log.info("backfill run: the stream is not launched (CDC backfills are re-snapshots)")
            return {"skipped": "backfill"}
        tables = {t: {"chunk_key": p.config.source.chunk_key.get(t)} for t in sorted((p.state.read_seed() or {}).get("tables", {}))}
        if not tables:
            raise AirflowFailException("no finished snapshot and no stream seed: run the snapshot tasks first")
        spec = p.job_spec(server_id=server_id_for(p, STREAM_SERVER_ID_SLOT), tables=tables)
        spec_path = spec.write(p.state.path("specs", "binlog_stream.json"))
        secrets_file = private_secrets_file(p.secrets)
        self.application_args = ["--spec", str(spec_path)]
        self.env_vars = {**(self.env_vars or {}), SECRETS_FILE_ENV: str(secrets_file)}
        mode = p.stream.get("mode") or "available_now"
        timeout = float(self.heartbeat_timeout or p.stream.get("heartbeat_timeout") or 120)
        p.state.clear_stop()
        try:
            if mode == "available_now":
                super().execute(context)
            else:
                self._run_continuous(context, p, timeout)
        finally:
            remove_secrets_file(secrets_file)
            p.state.delete(p.state.LAUNCH)
        status = p.state.read_status() or {}
        if status.get("state") not in ("finished", "stopped"):
            raise AirflowFailException(f"the stream job ended in state {status.get('state')!r}; see its log above")
        self.log.info("stream %s: %s rows emitted in %s batches, last offset %s", status.get("state"),
                      status.get("rows_emitted"), status.get("batches"), status.get("last_offset"))
        return status

    def _run_continuous(self, context: Any, p, heartbeat_timeout: float) -> None:
        from airflow.sdk.exceptions import AirflowException

        hook = self._get_hook()
        cmd = hook._build_spark_submit_command(self.application)
        env = {**os.environ, **(self.env_vars or {})}
        log_path = p.state.path("stream", "job.log")
        log_path.parent.mkdir(parents=True, exist_ok=True)
        started = time.time()
        with open(log_path, "ab") as log:
            self._proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        p.state.write_json(p.state.LAUNCH, {"pid": self._proc.pid, "started_at": started})
        context["ti"].xcom_push(key="stream_pid", value=self._proc.pid)
        self.log.info("stream launched (pid %d), log %s", self._proc.pid, log_path)
        while True:
            rc = self._proc.poll()
            if rc is not None:
                if rc != 0:
                    raise AirflowException(f"the stream job exited with {rc}; see {log_path}")
                return
            status = p.state.read_status() or {}
            beat = status.get("updated_at") or started
            if time.time() - max(beat, started) > heartbeat_timeout:
                self._terminate()
                raise AirflowException(f"the stream's heartbeat is {time.time() - beat:.0f}s old (limit "
                                       f"{heartbeat_timeout:.0f}s): stopped it; a retry restarts it from its checkpoint")
            time.sleep(self.poll_interval)

    def _terminate(self) -> None:
        proc = self._proc
        if proc is None or proc.poll() is not None:
            return
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)

    def on_kill(self) -> None:
        if self._state is not None:
            self._state.request_stop()
        if self._proc is not None:
            self._terminate()
        else:
            super().on_kill()
