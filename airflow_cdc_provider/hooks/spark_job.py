"""SparkJobHook: starts one of this provider's Spark jobs, watches it, stops it, and opens the Spark Connect
sessions the opt-in Connect mode runs jobs in.

It wraps the Spark provider's ``SparkSubmitHook``, which turns the Spark connection (``spark_default`` or
the YAML's ``spark.conn_id``) and the operator's ``SparkSubmitOperator`` arguments into a spark-submit
command. An attached job runs through the operator's own ``execute`` (the provider's path, including its
tracking of standalone cluster drivers); what the provider has no API for lives here:

* ``launch``: a detached job that outlives the task's process (a continuous stream): a spark-submit in a
  new session writing to a log file, or a standalone cluster-mode driver (spark-submit returns once it is
  submitted); either way a ``StreamLaunch`` record;
* ``alive`` / ``terminate``: liveness of a launched job (the process on this host, or the driver's state at
  the standalone master's REST API) and a graceful stop (stop request, SIGTERM), then a hard one (SIGKILL of
  its process group, or the REST kill);
* ``connect_session``: a session of a long-lived Spark Connect server, for one job attempt.

The provider's internals are reached through ``hooks.spark_provider`` only.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable, Iterator

from airflow.sdk import BaseHook

from airflow_cdc_provider.compat import spark_provider
from airflow_cdc_provider.spark.launch.standalone_rest import StandaloneRest
from airflow_cdc_provider.spark.launch.target import SparkTarget
from airflow_cdc_provider.state.records import StreamLaunch


def _stat_fields(pid: int | None) -> list[bytes] | None:
    """The fields of Linux's ``/proc/<pid>/stat`` after the process's name (which may hold spaces, parentheses and
    bytes of no encoding), its state first; None when it cannot be read (gone, or no ``/proc``)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()
    except (OSError, IndexError):
        return None


def process_start(pid: int | None) -> int | None:
    """When process ``pid`` started, in clock ticks after boot (``/proc/<pid>/stat``'s 22nd field); None when it
    does not run or this host cannot tell. With its pid it names one process: a pid alone names another process
    once the first has ended and the kernel hands the pid out again. Ticks after boot, unlike a wall-clock time,
    do not move when the clock is set."""
    try:
        return int(_stat_fields(pid)[19])
    except (TypeError, ValueError, IndexError):
        return None


def process_alive(pid: int | None, started: int | None = None) -> bool:
    """True while ``pid`` runs, and, given ``started`` (its ``process_start``), is still the process that started
    then, not another one given the same pid since. Reaps it when it is our exited child; a zombie counts as dead."""
    if not pid:
        return False
    try:
        done, _ = os.waitpid(pid, os.WNOHANG)
        if done == pid:
            return False
    except ChildProcessError:
        pass
    try:
        os.kill(pid, 0)
    except OSError:
        return False
    fields = _stat_fields(pid)
    if fields is None:  # runs, and nothing more is known of it here
        return True
    return fields[0] != b"Z" and (started is None or fields[19:20] == [str(started).encode()])


class SparkJobHook(BaseHook):
    """``submit_hook``: the ``SparkSubmitHook`` of the job's operator (``of_operator``)."""

    hook_name = "Spark job (CDC)"

    def __init__(self, submit_hook: Any = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.submit_hook = submit_hook

    @classmethod
    def of_operator(cls, operator: Any, process_env: dict[str, str] | None = None) -> "SparkJobHook":
        """The hook of a ``SparkSubmitOperator``'s current arguments, which its ``execute`` then uses;
        ``process_env`` goes to spark-submit's own environment (never argv, never Spark conf)."""
        submit_hook = spark_provider.use_submit_hook(operator, process_env)
        spark_provider.log_output_at_its_level(submit_hook)
        return cls(submit_hook)

    @classmethod
    def target_of(cls, operator: Any) -> SparkTarget:
        """Where the operator's job would go: the master and deploy mode its Spark connection resolves to."""
        conn = spark_provider.resolved_connection(spark_provider.new_submit_hook(operator))
        return SparkTarget(conn["master"], conn.get("deploy_mode") or "client", conn.get("rest_endpoint"))

    # -- detached jobs ------------------------------------------------------------------------------------
    def launch(self, application: str, log_path: Path, launch_id: str, target: SparkTarget) -> StreamLaunch:
        """Start the job without waiting for it: a cluster-mode driver on the standalone master (spark-submit
        returns once it is submitted; raises on a failed submission), else a spark-submit in a new session
        whose output goes to ``log_path``."""
        started = time.time()
        if target.cluster_mode and target.standalone:
            self.submit_hook.submit(application)
            driver = spark_provider.driver_id(self.submit_hook)
            return StreamLaunch(launch_id, started, f"the driver's stderr on its worker (Spark master UI, driver "
                                f"{driver})", driver_id=driver, rest_url=target.rest_url)
        cmd = spark_provider.submit_command(self.submit_hook, application)
        env = {**os.environ, **spark_provider.process_env(self.submit_hook)}
        with open(log_path, "ab") as log:
            # stdin from /dev/null: the task's own (under Airflow 3, its supervisor's request socket) must not
            # outlive the task in the job, or the supervisor holds the worker slot until it times the socket out
            proc = subprocess.Popen(cmd, env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                    start_new_session=True)
        return StreamLaunch(launch_id, started, str(log_path), pid=proc.pid, host=socket.gethostname(),
                            pid_start=process_start(proc.pid))

    @staticmethod
    def alive(launch: StreamLaunch) -> bool | None:
        """Whether the launched job is alive; None when this process cannot tell (then the heartbeat decides).

        A cluster-mode driver is asked about at the standalone master; a local spark-submit is checked on this
        host, and is unknown from another host."""
        if launch.driver_id:
            return StandaloneRest(launch.rest_url).alive(launch.driver_id) if launch.rest_url else None
        if not launch.pid:
            return False
        if launch.host and launch.host != socket.gethostname():
            return None
        return process_alive(launch.pid, launch.pid_start)

    @staticmethod
    def signal_stop(launch: StreamLaunch) -> None:
        """Ask a local spark-submit to stop gracefully (SIGTERM; its JVM shutdown hook lets the running batch
        finish). A cluster driver stops on the state store's stop request, which the caller writes."""
        if launch.pid and SparkJobHook.alive(launch):
            os.kill(launch.pid, signal.SIGTERM)

    @classmethod
    def terminate(cls, launch: StreamLaunch, grace_seconds: float) -> None:
        """Graceful first (SIGTERM to a local spark-submit; a cluster driver is expected to see the stop
        request the caller wrote), then after ``grace_seconds`` a hard stop: SIGKILL of the process group,
        or the standalone master's kill of the driver."""
        if not cls.alive(launch):
            return
        cls.signal_stop(launch)
        deadline = time.time() + grace_seconds
        while cls.alive(launch) and time.time() < deadline:
            time.sleep(0.5)
        if cls.alive(launch):
            if launch.driver_id and launch.rest_url:
                StandaloneRest(launch.rest_url).kill(launch.driver_id)
            elif process_alive(launch.pid, launch.pid_start):
                os.killpg(launch.pid, signal.SIGKILL)

    # -- Spark Connect --------------------------------------------------------------------------------------
    @staticmethod
    @contextlib.contextmanager
    def connect_session(conn_id: str, conf: dict[str, Any] | None, artifacts: list[str], what: str,
                        log: Any, on_open: Callable[[], None] = lambda: None) -> Iterator[Any]:
        """A new session of the Spark Connect server of connection ``conn_id`` (an Airflow ``spark_connect``
        connection) with the job's ``conf`` and Python ``artifacts``. An unreachable server fails at once,
        naming the key. Logs how long the session lasted, from after the client's import to its stop.
        ``on_open`` runs once the session is open (the operators freeze the client's modules there)."""
        from airflow.providers.apache.spark.hooks.spark_connect import SparkConnectHook

        from airflow_cdc_provider.spark.session import connect_session

        url = SparkConnectHook(conn_id).get_connection_url()
        where = url.split("/;", 1)[0]  # without the token
        if "pyspark.sql.connect.session" not in sys.modules:  # not preloaded by the worker: say what that costs
            t0 = time.monotonic()
            import pyspark.sql.connect.session  # noqa: F401 - the client (pandas included), timed apart from the session
            log.info("%s: imported the Spark Connect client in %.2f s; an Airflow worker can import it once for all "
                     "its tasks (airflow_local_settings.py: import airflow_cdc_provider.worker_preload)", what,
                     time.monotonic() - t0)
        with contextlib.ExitStack() as stack:
            started, opened = time.monotonic(), False
            stack.callback(lambda: opened and log.info("%s: Spark Connect session ran %.2f s (open to stop)", what,
                                                       time.monotonic() - started))
            try:
                spark = stack.enter_context(connect_session(url, conf=conf, artifacts=artifacts))
            except Exception as exc:  # noqa: BLE001 - gRPC errors of every kind mean the same to the user
                raise RuntimeError(
                    f"spark.connect_conn_id {conn_id!r}: cannot open a session on the Spark Connect server {where} "
                    f"({type(exc).__name__}: {str(exc).splitlines()[0][:300]}); start the server (spark-submit "
                    "--class org.apache.spark.sql.connect.service.SparkConnectServer) or remove "
                    f"spark.connect_conn_id to run the {what} with spark-submit") from None
            opened = True
            on_open()
            log.info("%s on Spark Connect %s (session %s)", what, where, spark.session_id)
            yield spark
