"""A private Airflow deployment: the four Airflow 3 components as separate processes, over a PostgreSQL
metadata database, as production runs them.

``dag.test()`` (``airflow_run``) runs every task in one process and never defers to a real triggerer; what
only a deployment does (the scheduler's runs and ``max_active_runs``, the LocalExecutor's task processes talking
to the API server's execution API, deferral to the triggerer, clearing a deferred task, backfills) needs the
real thing. ``start()`` creates a database on a ``PrivatePostgres`` for the metadata DB, runs ``airflow db
migrate`` and starts ``api-server`` (on a free 127.0.0.1 port), ``scheduler``, ``dag-processor`` and
``triggerer``, each in its own process group with its own log file in ``AIRFLOW_HOME/deployment-logs``.
Configuration goes through ``AIRFLOW__*`` variables in ``env``, so a command a test runs with that env (``airflow
...``, ``airflow-cdc resnapshot``) talks to the same deployment. Nothing listens beyond loopback: the log
servers of the scheduler and triggerer are not started (the API server reads task logs from the shared folder).

The helpers drive it as an operator would: the ``airflow`` CLI for runs and task states, the REST API (every
caller an admin: ``simple_auth_manager_all_admins``) where the CLI cannot name one run (clearing a task,
reading an XCom). They raise with the tail of the failing process's log; they assert nothing.
"""

from __future__ import annotations

import json
import secrets
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

from airflow_cdc_provider.cli import airflow_json_output
from airflow_cdc_provider.testing.airflow_run import airflow_env
from airflow_cdc_provider.testing.mariadb import PrivateServer, free_port, stop_process_group
from airflow_cdc_provider.testing.postgres import PrivatePostgres

AIRFLOW = str(Path(sys.executable).with_name("airflow"))
COMPONENTS = ("api-server", "scheduler", "dag-processor", "triggerer")
# stopped in this order: nothing schedules or defers new work while the others wind down; the API server,
# which the task processes report to, last
STOP_ORDER = ("scheduler", "triggerer", "dag-processor", "api-server")


class AirflowCommandError(RuntimeError):
    """An ``airflow`` command or API call failed; the message carries its output."""


def last_json_line(stdout: str) -> Any:
    """The JSON list an ``airflow ... -o json`` command printed, among its log lines."""
    out = airflow_json_output(stdout)
    if not out and "[]" not in stdout:
        raise ValueError(f"no JSON list in the output:\n{stdout[-3000:]}")
    return out


def tail(path: Path, lines: int = 40) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return f"({path}: no log)"


class PrivateAirflowDeployment(PrivateServer):
    """``start()`` it (or use it as a context manager); ``env`` is the environment of its processes."""

    def __init__(self, home: Path, dags: Path, pipelines: Path, postgres: PrivatePostgres,
                 env: dict[str, str] | None = None, parallelism: int = 4, parse_interval: int = 10,
                 port: int | None = None) -> None:
        """``env``: extra variables for every process (connections, the provider's settings);
        ``parse_interval``: seconds between two parses of a DAG file (a changed pipeline YAML shows within it)."""
        self.home, self.dags, self.pipelines, self.postgres = Path(home), Path(dags), Path(pipelines), postgres
        self.parallelism, self.parse_interval = parallelism, parse_interval
        self.port = port or free_port()
        self.database = f"airflow_{secrets.token_hex(4)}"
        self.extra_env = dict(env or {})
        self.env: dict[str, str] = {}
        self.procs: dict[str, subprocess.Popen] = {}
        self._logs: dict[str, Any] = {}

    # -- configuration ------------------------------------------------------------------------------
    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def log_dir(self) -> Path:
        return self.home / "deployment-logs"

    def log_file(self, component: str) -> Path:
        return self.log_dir / f"{component}.log"

    def _db_uri(self, driver: str) -> str:
        pg = self.postgres
        password = urllib.parse.quote(pg.password, safe="")
        return f"postgresql+{driver}://{pg.user}:{password}@127.0.0.1:{pg.port}/{self.database}"

    def _config(self) -> dict[str, str]:
        """The ``AIRFLOW__*`` settings every component shares (keys as in Airflow 3.3's config.yml)."""
        from cryptography.fernet import Fernet

        settings = {
            "DATABASE__SQL_ALCHEMY_CONN": self._db_uri("psycopg2"),
            "DATABASE__SQL_ALCHEMY_CONN_ASYNC": self._db_uri("asyncpg"),  # the API server's async engine
            "DATABASE__SQL_ALCHEMY_POOL_SIZE": "3",  # 4 long-lived components and the CLI on one small server
            "DATABASE__SQL_ALCHEMY_MAX_OVERFLOW": "6",
            "CORE__EXECUTOR": "LocalExecutor",
            "CORE__PARALLELISM": str(self.parallelism),
            "CORE__FERNET_KEY": Fernet.generate_key().decode(),
            "CORE__EXECUTION_API_SERVER_URL": f"{self.url}/execution/",  # where task processes report
            "CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "True",
            "CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(self.home / "simple_auth_manager_passwords.json"),
            "CORE__DAGS_ARE_PAUSED_AT_CREATION": "True",
            "API__BASE_URL": f"{self.url}/",
            "API__HOST": "127.0.0.1",
            "API__PORT": str(self.port),
            "API__WORKERS": "1",
            "API__SECRET_KEY": secrets.token_urlsafe(64),
            "API__EXPOSE_STACKTRACE": "True",
            "API_AUTH__JWT_SECRET": secrets.token_urlsafe(64),  # shared: the API server signs, all verify (HS512)
            "SCHEDULER__SCHEDULER_HEARTBEAT_SEC": "2",
            "SCHEDULER__JOB_HEARTBEAT_SEC": "2",
            "SCHEDULER__SCHEDULER_IDLE_SLEEP_TIME": "0.5",
            "SCHEDULER__ENABLE_HEALTH_CHECK": "False",
            "SCHEDULER__TRIGGER_TIMEOUT_CHECK_INTERVAL": "5",
            "TRIGGERER__JOB_HEARTBEAT_SEC": "2",
            "DAG_PROCESSOR__REFRESH_INTERVAL": "2",  # a new DAG file is seen within seconds
            "DAG_PROCESSOR__MIN_FILE_PROCESS_INTERVAL": str(self.parse_interval),
            "DAG_PROCESSOR__PARSING_PROCESSES": "1",
            "DAG_PROCESSOR__PRINT_STATS_INTERVAL": "600",
            "LOGGING__WORKER_LOG_SERVER_PORT": str(free_port()),  # not started (--skip-serve-logs); never 8793
            "LOGGING__TRIGGER_LOG_SERVER_PORT": str(free_port()),
        }
        return {f"AIRFLOW__{k}": v for k, v in settings.items()}

    # -- lifecycle ----------------------------------------------------------------------------------
    def start(self, timeout: float = 180.0) -> "PrivateAirflowDeployment":
        self.home.mkdir(parents=True, exist_ok=True)
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self._create_database()
        self.env = airflow_env(self.home, self.dags, self.pipelines, {**self._config(), **self.extra_env})
        self.airflow("db", "migrate", timeout=600)
        try:
            for component in COMPONENTS:
                self._launch(component)
            self._wait_api(timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def _create_database(self) -> None:
        self._administer(self.postgres.connect(), f"CREATE DATABASE {self.database}")

    @staticmethod
    def _administer(conn, statement: str) -> None:
        """One statement outside a transaction (CREATE and DROP DATABASE), then the connection closed."""
        try:
            conn.autocommit = True
            with conn.cursor() as cur:
                cur.execute(statement)
        finally:
            conn.close()

    def _launch(self, component: str) -> None:
        args = [AIRFLOW, component]
        if component == "api-server":
            args += ["--host", "127.0.0.1", "--port", str(self.port), "--workers", "1"]
        elif component in ("scheduler", "triggerer"):
            args.append("--skip-serve-logs")  # its log server would listen on every interface
        out = open(self.log_file(component), "ab")
        self._logs[component] = out
        self.procs[component] = subprocess.Popen(args, env=self.env, stdout=out, stderr=subprocess.STDOUT,
                                                 stdin=subprocess.DEVNULL, start_new_session=True)

    def _wait_api(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while True:
            self.check_running()
            try:
                health = self.api("GET", "/api/v2/monitor/health")
                if health.get("metadatabase", {}).get("status") == "healthy":
                    return
            except (AirflowCommandError, OSError):
                pass
            if time.monotonic() > deadline:
                raise AirflowCommandError(f"the API server did not answer on {self.url} within {timeout:.0f}s:\n"
                                          + tail(self.log_file("api-server")))
            time.sleep(1)

    def check_running(self) -> None:
        """Raise if a component has exited, with the tail of its log."""
        for component, proc in self.procs.items():
            if proc.poll() is not None:
                raise AirflowCommandError(f"airflow {component} exited with {proc.returncode}; its log "
                                          f"({self.log_file(component)}):\n{tail(self.log_file(component))}")

    def stop(self, timeout: float = 60.0) -> None:
        """SIGTERM to every component's process group (its task processes, supervisors, parsers with it),
        SIGKILL after ``timeout``."""
        for component in STOP_ORDER:
            proc = self.procs.pop(component, None)
            if proc is not None:
                stop_process_group(proc, signal.SIGTERM, timeout)
            out = self._logs.pop(component, None)
            if out is not None:
                out.close()

    def cleanup(self) -> None:
        self.stop()
        try:
            conn = self.postgres.connect()
        except Exception:  # noqa: BLE001 - the server is gone: so is the database
            return
        self._administer(conn, f"DROP DATABASE IF EXISTS {self.database} WITH (FORCE)")

    # -- the airflow CLI and the REST API -----------------------------------------------------------
    def airflow(self, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
        res = subprocess.run([AIRFLOW, *args], env=self.env, capture_output=True, text=True, timeout=timeout,
                             stdin=subprocess.DEVNULL)
        if res.returncode != 0:
            raise AirflowCommandError(f"airflow {' '.join(args)} failed (exit {res.returncode}):\n"
                                      f"{res.stdout[-3000:]}\n{res.stderr[-3000:]}")
        return res

    def api(self, method: str, path: str, body: Any = None, timeout: float = 60) -> Any:
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.url + path, data=data, method=method,
                                     headers={"Content-Type": "application/json", "Accept": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=timeout) as resp:
                return json.loads(resp.read() or b"null")
        except urllib.error.HTTPError as exc:
            raise AirflowCommandError(f"{method} {path}: HTTP {exc.code}: "
                                      f"{exc.read().decode(errors='replace')[-2000:]}") from exc

    # -- what a test does with it -------------------------------------------------------------------
    def wait_dag_parsed(self, dag_id: str, timeout: float = 180.0) -> dict[str, Any]:
        """The DAG's record once the dag-processor has stored it; on timeout, the import errors."""
        quoted = urllib.parse.quote(dag_id, safe="")
        deadline = time.monotonic() + timeout
        while True:
            self.check_running()
            try:
                return self.api("GET", f"/api/v2/dags/{quoted}")
            except AirflowCommandError as exc:
                if "HTTP 404" not in str(exc):
                    raise
            if time.monotonic() > deadline:
                errors = self.api("GET", "/api/v2/importErrors")
                raise AirflowCommandError(f"DAG {dag_id} not parsed within {timeout:.0f}s; import errors: "
                                          f"{json.dumps(errors)[-3000:]}\ndag-processor log:\n"
                                          + tail(self.log_file("dag-processor")))
            time.sleep(2)

    def unpause(self, dag_id: str) -> None:
        self.airflow("dags", "unpause", dag_id, "-y")

    def trigger(self, dag_id: str, conf: dict[str, Any] | None = None) -> str:
        """Queue a manual run; its run id."""
        res = self.airflow("dags", "trigger", dag_id, "--conf", json.dumps(conf or {}), "-o", "json")
        return last_json_line(res.stdout)[0]["dag_run_id"]

    def run_states(self, dag_id: str) -> dict[str, str]:
        """``{run_id: state}`` of the DAG's runs (backfill runs' ids start with ``backfill__``)."""
        res = self.airflow("dags", "list-runs", dag_id, "-o", "json")
        return {r["run_id"]: r["state"] for r in last_json_line(res.stdout)}

    def task_states(self, dag_id: str, run_id: str) -> dict[str, str]:
        """``{task_id or task_id[map_index]: state}`` of one run."""
        res = self.airflow("tasks", "states-for-dag-run", dag_id, run_id, "-o", "json")
        return {(f"{t['task_id']}[{t['map_index']}]" if t.get("map_index") else t["task_id"]): t["state"]
                for t in last_json_line(res.stdout)}

    def clear_task(self, dag_id: str, task_id: str, run_id: str) -> list[str]:
        """Clear one task of one run, whatever its state (a running or deferred one is stopped and run again);
        the ids of the task instances cleared."""
        out = self.api("POST", f"/api/v2/dags/{urllib.parse.quote(dag_id, safe='')}/clearTaskInstances",
                       {"dry_run": False, "only_failed": False, "dag_run_id": run_id, "task_ids": [task_id]})
        return [ti["task_id"] for ti in out.get("task_instances", [])]

    def xcom(self, dag_id: str, run_id: str, task_id: str, key: str = "return_value") -> Any:
        """A task's XCom value, or None when it has none (yet)."""
        q = lambda s: urllib.parse.quote(s, safe="")  # noqa: E731
        try:
            entry = self.api("GET", f"/api/v2/dags/{q(dag_id)}/dagRuns/{q(run_id)}/taskInstances/{q(task_id)}"
                                    f"/xcomEntries/{q(key)}?deserialize=true")
        except AirflowCommandError as exc:
            if "HTTP 404" in str(exc):
                return None
            raise
        return entry.get("value")

    def upstream_asset_events(self, dag_id: str, run_id: str) -> list[dict[str, Any]]:
        """The asset events a run consumed. (Airflow 3.3's ``/assets/events`` answers 500 while a run one of its
        events created is queued: that run's null ``start_date`` fails the response model.)"""
        q = lambda s: urllib.parse.quote(s, safe="")  # noqa: E731
        return self.api("GET", f"/api/v2/dags/{q(dag_id)}/dagRuns/{q(run_id)}/upstreamAssetEvents")["asset_events"]

    def delete_run(self, dag_id: str, run_id: str) -> None:
        q = lambda s: urllib.parse.quote(s, safe="")  # noqa: E731
        self.api("DELETE", f"/api/v2/dags/{q(dag_id)}/dagRuns/{q(run_id)}")

    def task_log(self, dag_id: str, run_id: str, task_id: str, lines: int = 60) -> str:
        """The tail of every attempt's log of a task in a run (mapped tasks: of each index), for messages."""
        folder = self.home / "logs" / f"dag_id={dag_id}" / f"run_id={run_id}" / f"task_id={task_id}"
        files = sorted(folder.rglob("attempt=*.log"))
        return "\n".join(f"--- {f.relative_to(folder)}\n{tail(f, lines)}" for f in files) or f"({folder}: no log)"

    def backfill(self, dag_id: str, from_date: str, to_date: str, conf: dict[str, Any] | None = None) -> str:
        """``airflow backfill create`` over ``[from_date, to_date]`` (its runs are created at once and then
        scheduled); its output."""
        args = ["backfill", "create", "--dag-id", dag_id, "--from-date", from_date, "--to-date", to_date]
        if conf:
            args += ["--dag-run-conf", json.dumps(conf)]
        return self.airflow(*args).stdout
