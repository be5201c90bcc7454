"""pg_chameleon beside our jdbc sink, on the same sysbench table, MariaDB and PostgreSQL (``--only chameleon``).

pg_chameleon is what a user replicating MariaDB into PostgreSQL would run instead of our jdbc sink. For each
size, on one sysbench table:

* a concurrent writer (sysbench oltp_write_only at a fixed rate) during our snapshot, during pg_chameleon's
  ``init_replica`` and with no snapshot at all: its per-second p99 and max latency, as the write stall each
  snapshot causes (pg_chameleon takes ``FLUSH TABLES ... WITH READ LOCK``; ours takes no lock, but shares the
  machine's cores with the writer);
* on an idle source: our snapshot phase (``sink: jdbc``) vs ``init_replica``;
* a backlog of row changes made with both replicas stopped: our stream task vs pg_chameleon's replay
  (``start_replica`` until its batches report every change replayed);
* count and checksum of both replicas against MariaDB after the snapshot and after the catch-up; a divergence is
  a result line, the run goes on;
* unless ``--no-connect``: the same snapshot and catch-up by a second pipeline whose tasks are sessions of a
  long-lived Spark Connect server (``spark.connect_conn_id``, opt-in), started before them and warmed by one
  snapshot DAG of its own, as a deployment's server has served tasks before: no JVM starts in a task.

pg_chameleon is installed into a venv of its own under the bench's work directory (Debian's python3: the venv
must be usable by another user) and runs as the ``postgres`` OS user, because it refuses to run as root. Its
configuration avoids its known pitfalls: ``log_dest: stdout`` (otherwise ``init_replica`` and
``start_replica`` daemonize and cannot be timed), ``gtid_enable: false`` (MariaDB GTIDs are not MySQL's), and
``work_mem`` of 256MB for its PostgreSQL role: with the default 4MB its replay of a batch of more than ~52k events
can sort the events out of order on disk and silently disable the table.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import re
import secrets
import signal
import statistics
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import yaml

from airflow_cdc_provider.testing.mariadb import PrivateMariaDB
from airflow_cdc_provider.testing.postgres import PrivatePostgres
from airflow_cdc_provider.testing.sysbench import sysbench

if TYPE_CHECKING:
    from run import Bench

CHAMELEON_REQUIREMENTS = ("pg_chameleon==2.0.21",
                          # its dependencies pinned too: a newer binlog reader may change what it does
                          "mysql-replication==1.0.17", "PyMySQL==1.2.4", "psycopg2-binary==2.9.13")
SYSTEM_PYTHON = "/usr/bin/python3"
RUN_AS = "postgres"  # the Debian PostgreSQL package's user: present wherever the bench's PostgreSQL runs
SOURCE = "mysql"  # pg_chameleon's name of its source in the configuration
# oltp_write_only transactions/s of the concurrent writer (1,000 row changes/s): a fixed rate well below what the
# machine sustains, so that its latency shows stalls rather than a saturated server
WRITER_TPS = 250
WRITER_THREADS = 2
WRITER_SEGMENT = 250  # seconds of one sysbench run of the writer
CHANGES_PER_EVENT = 4  # oltp_write_only: 2 updates, 1 delete, 1 insert per transaction
SNAPSHOT_TASKS = ("validate_source", "plan_chunks", "snapshot_chunk", "collect_watermarks")


# -- checksums ---------------------------------------------------------------------------------------------
MARIADB_CHECKSUM = ("SELECT COUNT(*), COALESCE(SUM(CAST(CONV(LEFT(MD5(CONCAT_WS('|', id, k, c, pad)), 15), 16, 10) "
                    "AS UNSIGNED)), 0) FROM {table}")
# character(n) is blank-padded in PostgreSQL; MariaDB returns CHAR values without trailing blanks
POSTGRES_CHECKSUM = ("SELECT count(*), coalesce(sum(('x' || left(md5(concat_ws('|', id, k, rtrim(c), rtrim(pad))), 15))"
                     "::bit(60)::bigint), 0) FROM {table}{where}")


def mariadb_checksum(db: PrivateMariaDB, table: str) -> tuple[int, int]:
    with contextlib.closing(db.app_connection()) as c, c.cursor() as cur:
        cur.execute(MARIADB_CHECKSUM.format(table=table))
        count, total = cur.fetchone()
    return int(count), int(total)


def postgres_checksum(conn, table: str, where: str = "") -> tuple[int, int]:
    with conn.cursor() as cur:
        cur.execute(POSTGRES_CHECKSUM.format(table=table, where=where))
        count, total = cur.fetchone()
    return int(count), int(total)


def compare(source: tuple[int, int], replica: tuple[int, int]) -> tuple[str, str, str]:
    """(the replica's cell, the source's cell, the verdict) of a result line."""
    verdict = "match" if source == replica else ("DIVERGED: count" if source[0] != replica[0] else "DIVERGED: checksum")
    return f"{replica[0]:,} rows, sum {replica[1]}", f"{source[0]:,} rows, sum {source[1]}", verdict


# -- the concurrent writer ---------------------------------------------------------------------------------
@dataclass
class Second:
    end: float  # wall clock at the end of this second of the writer's run
    transactions: int
    p99_ms: float
    max_ms: float


_CHECKPOINT = re.compile(r"\[ (\d+)s \] Checkpoint report:(.*?)(?=\[ \d+s \] Checkpoint report:|\Z)", re.S)


class Writer:
    """sysbench oltp_write_only at ``WRITER_TPS`` in the background, with a checkpoint report every second.

    sysbench's per-second interval reports carry one percentile only; its checkpoint reports are full reports of
    the second since the last one, p99 and max latency among them. A run takes at most 256 checkpoints, so the
    writer is a chain of runs of ``WRITER_SEGMENT`` seconds."""

    def __init__(self, mariadb: PrivateMariaDB, schema: str, table_rows: int, log: Path) -> None:
        self.mariadb, self.schema, self.table_rows, self.log = mariadb, schema, table_rows, log
        self.segments: list[tuple[float, list[str]]] = []  # (wall clock at its start, its output lines)
        self.proc: subprocess.Popen | None = None
        self._halt = threading.Event()

    def __enter__(self) -> "Writer":
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()
        return self

    def _run(self) -> None:
        checkpoints = ",".join(str(s) for s in range(1, WRITER_SEGMENT + 1))
        while not self._halt.is_set():
            lines: list[str] = []
            self.segments.append((time.time(), lines))
            self.proc = sysbench(self.mariadb, self.schema, "run", self.table_rows, f"--threads={WRITER_THREADS}",
                                 f"--rate={WRITER_TPS}", f"--time={WRITER_SEGMENT}", "--percentile=99",
                                 f"--report-checkpoints={checkpoints}", background=True)
            for line in self.proc.stdout:
                lines.append(line)
            if self.proc.wait() != 0 and not self._halt.is_set():
                break

    def __exit__(self, *exc: object) -> None:
        self._halt.set()
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
        self.thread.join(30)
        self.log.write_text("".join(line for _, lines in self.segments for line in lines))
        if not any(_CHECKPOINT.search("".join(lines)) for _, lines in self.segments):
            raise RuntimeError(f"the sysbench writer reported nothing; see {self.log}")

    def seconds(self, start: float, end: float) -> list[Second]:
        """The seconds of the run overlapping the wall clock interval ``[start, end]``."""
        out = []
        for started, lines in self.segments:
            for n, body in _CHECKPOINT.findall("".join(lines)):
                second_end = started + int(n)
                if second_end <= start or second_end - 1 >= end:
                    continue
                field = lambda name: float(re.search(rf"{name}:\s+([\d.]+)", body).group(1))  # noqa: E731
                out.append(Second(second_end, int(field("transactions")), field("99th percentile"), field("max")))
        return out


def stall(seconds: list[Second]) -> tuple[float, float, float, float]:
    """(worst second's p99, median second's p99, max latency, transactions/s) of a window, in ms."""
    if not seconds:
        return 0.0, 0.0, 0.0, 0.0
    p99 = [s.p99_ms for s in seconds]
    tps = sum(s.transactions for s in seconds) / len(seconds)
    return max(p99), statistics.median(p99), max(s.max_ms for s in seconds), tps


def describe_stall(seconds: list[Second]) -> str:
    worst, median, top, tps = stall(seconds)
    return f"p99 {worst:.0f} ms worst second (median {median:.0f}), max {top:.0f} ms; {tps:.0f} tps, {len(seconds)} s"


# -- pg_chameleon ------------------------------------------------------------------------------------------
def install(directory: Path, log: Path) -> Path:
    """A venv with pg_chameleon in ``directory`` (once per work directory); its ``chameleon`` command."""
    command = directory / "bin" / "chameleon"
    if command.exists():
        return command
    with open(log, "ab") as out:
        subprocess.run([SYSTEM_PYTHON, "-m", "venv", str(directory)], stdout=out, stderr=subprocess.STDOUT,
                       check=True)
        subprocess.run([str(directory / "bin" / "pip"), "install", "--disable-pip-version-check",
                        *CHAMELEON_REQUIREMENTS], stdout=out, stderr=subprocess.STDOUT, check=True)
    if not command.exists():
        raise RuntimeError(f"pg_chameleon installed no {command}; see {log}")
    return command


class ChameleonError(RuntimeError):
    pass


class PgChameleon:
    """One pg_chameleon source replicating tables of MariaDB database ``schema`` into a PostgreSQL database of its
    own (the same server as our jdbc sink), under ``directory``."""

    def __init__(self, directory: Path, mariadb: PrivateMariaDB, pg: PrivatePostgres, schema: str,
                 work: Path) -> None:
        """``work``: the bench's work directory, which holds ``directory``."""
        self.dir, self.mariadb, self.pg, self.schema, self.work = directory, mariadb, pg, schema, work
        self.name = f"bench_{schema}"  # configuration file, PostgreSQL database
        self.password = secrets.token_urlsafe(16)
        self.home = directory / "home"
        self.out_dir = directory / "out"
        self.command: Path | None = None
        self.replica: subprocess.Popen | None = None
        self._replica_log = None
        self._as: dict = {}

    # -- set-up --------------------------------------------------------------------------------------
    def setup(self, venv: Path, tables: list[str]) -> None:
        """Install (if not yet), create its accounts, write its configuration, create its replica schema and add
        its source: what comes before ``init_replica``."""
        self.dir.mkdir(parents=True, exist_ok=True)
        self.command = install(venv, venv.parent / "install.log")
        self._prepare_user()
        self._accounts()
        self._configure(tables)
        self._chameleon("create_replica_schema", log="setup.log")
        self._chameleon("add_source", log="setup.log")

    def _prepare_user(self) -> None:
        """pg_chameleon refuses to run as root: run it as ``RUN_AS``, with its files reachable by that user."""
        for d in (self.home, self.out_dir):
            d.mkdir(parents=True, exist_ok=True)
        if os.geteuid() != 0:
            return
        pw = pwd.getpwnam(RUN_AS)
        self._as = {"user": pw.pw_uid, "group": pw.pw_gid, "extra_groups": []}
        for d in (self.home, self.out_dir):
            os.chown(d, pw.pw_uid, pw.pw_gid)
        # the bench's work directory is private to root: others may pass through it (not list it) to these
        for d in (self.dir, *self.dir.parents):
            if not d.is_relative_to(self.work):
                break
            os.chmod(d, d.stat().st_mode | 0o111)

    def _accounts(self) -> None:
        """A MariaDB account with what pg_chameleon needs (reading, the binlog, and RELOAD and LOCK TABLES for its
        snapshot's ``FLUSH TABLES ... WITH READ LOCK``), a PostgreSQL role owning the replica's database."""
        with contextlib.closing(self.mariadb.root_connection()) as c, c.cursor() as cur:
            for host in ("localhost", "127.0.0.1"):
                cur.execute(f"CREATE USER IF NOT EXISTS 'chameleon'@'{host}' IDENTIFIED BY %s", (self.password,))
                cur.execute(f"ALTER USER 'chameleon'@'{host}' IDENTIFIED BY %s", (self.password,))
                cur.execute(f"GRANT SELECT, RELOAD, LOCK TABLES, REPLICATION CLIENT, REPLICATION SLAVE ON *.* "
                            f"TO 'chameleon'@'{host}'")
        conn = self.pg.connect()
        conn.autocommit = True
        try:
            with conn.cursor() as cur:
                cur.execute("SELECT 1 FROM pg_roles WHERE rolname = 'chameleon'")
                verb = "ALTER" if cur.fetchone() else "CREATE"
                cur.execute(f"{verb} ROLE chameleon LOGIN PASSWORD %s", (self.password,))
                # with the default 4MB its replay's batch sort spills to disk and can reorder a batch's events
                cur.execute("ALTER ROLE chameleon SET work_mem = '256MB'")
                cur.execute(f"DROP DATABASE IF EXISTS {self.name}")
                cur.execute(f"CREATE DATABASE {self.name} OWNER chameleon")
        finally:
            conn.close()

    def _configure(self, tables: list[str]) -> None:
        cham = self.home / ".pg_chameleon"
        config = {
            "pid_dir": str(cham / "pid"), "log_dir": str(cham / "logs"),
            "log_dest": "stdout",  # foreground: init_replica and start_replica can be timed and stopped
            "log_level": "info", "log_days_keep": 1, "rollbar_key": "", "rollbar_env": "",
            "pg_conn": {"host": "127.0.0.1", "port": str(self.pg.port), "user": "chameleon",
                        "password": self.password, "database": self.name, "charset": "utf8"},
            "sources": {SOURCE: {
                "db_conn": {"host": "127.0.0.1", "port": str(self.mariadb.port), "user": "chameleon",
                            "password": self.password, "charset": "utf8", "connect_timeout": 10},
                "schema_mappings": {self.schema: self.schema},
                "limit_tables": tables, "skip_tables": [], "grant_select_to": [],
                "lock_timeout": "120s", "my_server_id": 100,
                "replica_batch_size": 10000, "replay_max_rows": 10000, "batch_retention": "1 day",
                "copy_max_memory": "300M", "copy_mode": "file", "out_dir": str(self.out_dir),
                "sleep_loop": 1, "on_error_replay": "continue", "on_error_read": "continue",
                "auto_maintenance": "disabled",
                "gtid_enable": False,  # MariaDB's GTIDs are not MySQL's
                "type": "mysql", "skip_events": {"insert": [], "delete": [], "update": []},
                "keep_existing_schema": False, "net_read_timeout": 600,
            }},
        }
        for d in (cham, cham / "configuration", cham / "pid", cham / "logs"):
            d.mkdir(parents=True, exist_ok=True)
        path = cham / "configuration" / f"{self.name}.yml"
        path.write_text(yaml.safe_dump(config, sort_keys=False))
        if self._as:
            for d in (cham, cham / "configuration", cham / "pid", cham / "logs", path):
                os.chown(d, self._as["user"], self._as["group"])
        os.chmod(path, 0o600)

    # -- commands ------------------------------------------------------------------------------------
    def _argv(self, command: str) -> list[str]:
        # with a --source, it first checks that the source is in its replica schema
        source = [] if command == "create_replica_schema" else ["--source", SOURCE]
        return [str(self.command), command, "--config", self.name, *source]

    def _popen_kw(self) -> dict:
        env = {"HOME": str(self.home), "PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"}
        return {"env": env, "cwd": str(self.home), **self._as}

    def _chameleon(self, command: str, log: str) -> float:
        """Run one pg_chameleon command in the foreground; its seconds. It exits 0 on most of its errors, hence
        the look at its output."""
        path = self.dir / log
        before = path.stat().st_size if path.exists() else 0
        with open(path, "ab") as out:
            out.write(f"\n$ chameleon {command}\n".encode())
            out.flush()
            t = time.monotonic()
            rc = subprocess.run(self._argv(command), stdout=out, stderr=subprocess.STDOUT,
                                **self._popen_kw()).returncode
            seconds = time.monotonic() - t
        text = path.read_bytes()[before:].decode(errors="replace")
        # its daemonize library's exit in the foreground leaves this traceback after every command
        text = re.sub(r"Exception ignored in atexit callback.*?SystemExit: 0", "", text, flags=re.S)
        if rc != 0 or any(m in text for m in ("FATAL", "Traceback", "ERROR - ", " CRITICAL:", "cannot be run as root")):
            raise ChameleonError(f"pg_chameleon {command} failed (exit {rc}); see {path}")
        return seconds

    def connect(self):
        import psycopg2

        return psycopg2.connect(host="127.0.0.1", port=self.pg.port, user="chameleon", password=self.password,
                                dbname=self.name)

    def status(self) -> str:
        with contextlib.closing(self.connect()) as conn, conn.cursor() as cur:
            cur.execute("SELECT enm_status FROM sch_chameleon.t_sources WHERE t_source = %s", (SOURCE,))
            row = cur.fetchone()
        return row[0] if row else "missing"

    def init(self) -> float:
        """Seconds of ``init_replica`` (the copy of its ``limit_tables``, indexes, the schema swap)."""
        seconds = self._chameleon("init_replica", log="init.log")
        state = self.status()
        if state != "initialised":
            raise ChameleonError(f"pg_chameleon init_replica ended with source status {state!r}; see {self.dir}")
        return seconds

    def replay(self, changes: int, timeout: float) -> tuple[float, int, str]:
        """Start the replica (in the foreground of a child process) and wait until its batches report ``changes``
        rows replayed: (seconds from the start, rows replayed, problem or ''). A table it disabled on a replay
        error, a replica that exited and a timeout are problems; the replica is left running until ``stop()``."""
        with contextlib.closing(self.connect()) as conn:
            conn.autocommit = True
            with conn.cursor() as cur:
                cur.execute("SELECT clock_timestamp()::timestamp")
                since = cur.fetchone()[0]
            self._replica_log = open(self.dir / "replica.log", "ab")
            t = time.monotonic()
            self.replica = subprocess.Popen(self._argv("start_replica"), stdout=self._replica_log,
                                            stderr=subprocess.STDOUT, start_new_session=True, **self._popen_kw())
            replayed, problem = 0, ""
            while True:
                with conn.cursor() as cur:
                    cur.execute("SELECT coalesce(sum(i_replayed), 0) FROM sch_chameleon.t_replica_batch "
                                "WHERE ts_replayed >= %s", (since,))
                    replayed = int(cur.fetchone()[0])
                    if replayed >= changes:
                        break
                    cur.execute("SELECT string_agg(v_schema_name || '.' || v_table_name, ', ') "
                                "FROM sch_chameleon.t_replica_tables WHERE NOT b_replica_enabled")
                    disabled = cur.fetchone()[0]
                if disabled:
                    problem = f"replay error: pg_chameleon disabled {disabled}"
                    break
                if self.replica.poll() is not None:
                    problem = f"start_replica exited with {self.replica.returncode}"
                    break
                if time.monotonic() - t > timeout:
                    problem = f"timeout after {timeout:.0f} s"
                    break
                time.sleep(0.2)
            return time.monotonic() - t, replayed, problem

    def stop(self) -> None:
        """Stop the replica as ``stop_replica`` does (SIGINT to its main process: it ends its read and replay
        processes), then its whole process group if it lingers."""
        proc, self.replica = self.replica, None
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        if self._replica_log is not None:
            self._replica_log.close()
            self._replica_log = None

    def checksum(self, table: str) -> tuple[int, int]:
        with contextlib.closing(self.connect()) as conn:
            return postgres_checksum(conn, f'"{self.schema}"."{table}"')


# -- the scenario --------------------------------------------------------------------------------------------
def our_mirror_checksum(bench: "Bench", dag_id: str, schema: str, table: str) -> tuple[int, int]:
    with contextlib.closing(bench.pg.connect()) as conn:
        return postgres_checksum(conn, f'"{dag_id}"."{schema}__{table}"', where=" WHERE NOT _cdc_deleted")


def chunk_task_time(result: dict) -> float:
    """The chunk tasks' time of a DAG run (``Bench.run``'s result): their sessions, watermarks, reads and writes."""
    return sum(t["end"] - t["start"] for t in result["tis"] if t["task_id"] == "snapshot_chunk")


def snapshot_on_connect(bench: "Bench", stack: contextlib.ExitStack, db: str, source_table: str,
                        dag_id: str) -> tuple[float, float | None, float, tuple[int, int]]:
    """Our jdbc snapshot of ``source_table`` by pipeline ``dag_id`` with its tasks on a Spark Connect server
    started here (it stays up in ``stack`` for the pipeline's catch-up) after one snapshot DAG of its own (a
    pipeline of the same table into its own schema): its snapshot phase, what ``dag.test()`` took to start its
    first task, its chunk tasks' time, and its mirror's checksum."""
    stack.enter_context(bench.connect_server(db))
    spark = bench.ON_CONNECT
    bench.pipeline(f"{dag_id}_warm", [source_table], sink="jdbc", spark=spark)
    bench.run(f"{dag_id}_warm", preload=True)
    bench.pipeline(dag_id, [source_table], sink="jdbc", spark=spark)
    res = bench.run(dag_id, preload=True)
    return (bench.span(res, SNAPSHOT_TASKS), bench.first_task_harness(dag_id, res), chunk_task_time(res),
            our_mirror_checksum(bench, dag_id, db, "sbtest1"))


def side_by_side(bench: "Bench", rows: int, changes: int, connect: bool = True) -> None:
    """Our jdbc sink and pg_chameleon on one ``rows``-row sysbench table: write stall of each snapshot, snapshot
    time on an idle source, catch-up of ``changes`` row changes, and both replicas checked against MariaDB.
    ``connect``: our snapshot and catch-up also with the tasks on a long-lived Spark Connect server."""
    db = f"cham{rows}"
    results = bench.results
    print(f"\n== pg_chameleon side by side: {rows} rows, {changes} changes", flush=True)
    bench.prepare(db, rows)
    source_table = f"{db}.sbtest1"
    cham = PgChameleon(bench.work / "chameleon" / db, bench.db, bench.pg, db, bench.work)
    t = time.monotonic()
    cham.setup(bench.work / "chameleon" / "venv", [source_table])
    print(f"  pg_chameleon installed and set up: {time.monotonic() - t:.0f}s", flush=True)

    def writer(name: str) -> Writer:
        return Writer(bench.db, db, rows, bench.work / f"{db}-writer-{name}.log")

    on_connect = f"{db}_connect"
    stack = contextlib.ExitStack()
    try:
        # the write stall: the writer runs through each snapshot, then alone for as long as our snapshot took
        loaded_dag = f"{db}_load"
        bench.pipeline(loaded_dag, [source_table], sink="jdbc")
        with writer("ours") as w:
            time.sleep(2)  # its connections are up before the DAG's process starts
            res = bench.run(loaded_dag)
        tis = [x for x in res["tis"] if x["task_id"] in SNAPSHOT_TASKS and x["start"] and x["end"]]
        ours_window = (min(x["start"] for x in tis), max(x["end"] for x in tis))
        ours_loaded = ours_window[1] - ours_window[0]
        ours_stall = w.seconds(*ours_window)
        print(f"  under the writer: our snapshot phase {ours_loaded:.1f}s", flush=True)
        with writer("chameleon") as w:
            time.sleep(2)
            start = time.time()
            cham_loaded = cham.init()
            end = time.time()
            time.sleep(1.5)  # the second holding the end is reported
        cham_stall = w.seconds(start, end)
        print(f"  under the writer: pg_chameleon init_replica {cham_loaded:.1f}s", flush=True)
        with writer("none") as w:
            time.sleep(2)
            start = time.time()
            time.sleep(max(10.0, ours_loaded))
            end = time.time()
        none_stall = w.seconds(start, end)

        # snapshot time on an idle source, then each copy against MariaDB
        cham_init = cham.init()
        source = mariadb_checksum(bench.db, source_table)
        cham_copy = cham.checksum("sbtest1")
        bench.pipeline(db, [source_table], sink="jdbc")
        t = time.monotonic()
        res = bench.run(db)
        ours_process = time.monotonic() - t
        ours_snapshot = bench.span(res, SNAPSHOT_TASKS)
        ours_chunks = chunk_task_time(res)
        harness = bench.first_task_harness(db, res)
        ours_copy = our_mirror_checksum(bench, db, db, "sbtest1")
        print(f"  idle source: pg_chameleon init_replica {cham_init:.1f}s, our snapshot phase {ours_snapshot:.1f}s",
              flush=True)
        if connect:
            connected = snapshot_on_connect(bench, stack, db, source_table, on_connect)
            print(f"  idle source, on Spark Connect: our snapshot phase {connected[0]:.1f}s", flush=True)

        # catch-up of a backlog made with both replicas stopped
        events = changes // CHANGES_PER_EVENT
        t = time.monotonic()
        sysbench(bench.db, db, "run", rows, "--threads=2", "--time=0", f"--events={events}")
        print(f"  sysbench: {events} transactions in {time.monotonic() - t:.0f}s", flush=True)
        t = time.monotonic()
        res = bench.run(db)
        ours_catchup_process = time.monotonic() - t
        stream = next(x for x in res["tis"] if x["task_id"] == "stream")
        emitted = res["xcom"]["stream[-1]"]["rows_emitted"]
        ours_stream = stream["end"] - stream["start"]
        cham_replay, replayed, problem = cham.replay(events * CHANGES_PER_EVENT,
                                                     timeout=120 + events * CHANGES_PER_EVENT / 1000)
        cham.stop()
        if connect:
            res = bench.run(on_connect, preload=True)
            connect_stream = next(x for x in res["tis"] if x["task_id"] == "stream")
            connect_emitted = res["xcom"]["stream[-1]"]["rows_emitted"]
            connect_after = our_mirror_checksum(bench, on_connect, db, "sbtest1")
        print(f"  catch-up: ours {emitted} rows in {ours_stream:.1f}s (stream task), pg_chameleon {replayed} rows "
              f"in {cham_replay:.1f}s{' (' + problem + ')' if problem else ''}", flush=True)
        source_after = mariadb_checksum(bench.db, source_table)
        cham_after = cham.checksum("sbtest1")
        ours_after = our_mirror_checksum(bench, db, db, "sbtest1")
    finally:
        cham.stop()
        stack.close()

    results.add(f"pg_chameleon: snapshot {rows:,} rows -> jdbc (snapshot phase: validate -> collect) vs pg_chameleon "
                "init_replica, idle source", f"{ours_snapshot:.1f} s", f"{cham_init:.1f} s",
                f"{ours_snapshot / cham_init:.2f}x time", "<= 1.0x")
    if harness is not None:
        results.add(f"  same, less the {harness:.1f} s dag.test() takes to start its first task (a running deployment "
                    "does not)", f"{ours_snapshot - harness:.1f} s", f"{cham_init:.1f} s",
                    f"{(ours_snapshot - harness) / cham_init:.2f}x time", "(reference)")
    results.add("  same, its chunk task alone (spark-submit, the session, the watermarks, the read and the COPY) vs "
                "init_replica", f"{ours_chunks:.1f} s", f"{cham_init:.1f} s", f"{ours_chunks / cham_init:.2f}x time",
                "(reference)")
    results.add("  same, our whole dag.test() process (Airflow start, snapshot, an empty stream) vs init_replica",
                f"{ours_process:.1f} s", f"{cham_init:.1f} s", f"{ours_process / cham_init:.2f}x time", "(reference)")
    results.add(f"  same under the writer ({WRITER_TPS} tps): snapshot phase vs init_replica",
                f"{ours_loaded:.1f} s", f"{cham_loaded:.1f} s", f"{ours_loaded / cham_loaded:.2f}x time", "(reference)")
    if connect:
        connect_snapshot, connect_harness, connect_chunks, connect_copy = connected
        results.add("  same, tasks on a long-lived Spark Connect server (opt-in; it has served one snapshot DAG "
                    "before): snapshot phase vs init_replica", f"{connect_snapshot:.1f} s", f"{cham_init:.1f} s",
                    f"{connect_snapshot / cham_init:.2f}x time", "<= 1.0x")
        if connect_harness is not None:
            less = connect_snapshot - connect_harness
            results.add(f"  same on Spark Connect, less the {connect_harness:.1f} s dag.test() takes to start its "
                        "first task", f"{less:.1f} s", f"{cham_init:.1f} s", f"{less / cham_init:.2f}x time",
                        "(reference)")
        results.add("  same on Spark Connect, its chunk task alone (the session, the watermarks, the read and the "
                    "COPY) vs init_replica", f"{connect_chunks:.1f} s", f"{cham_init:.1f} s",
                    f"{connect_chunks / cham_init:.2f}x time", "(reference)")
    none = stall(none_stall)
    for who, seconds in (("our snapshot (no lock)", ours_stall), ("pg_chameleon init_replica (FLUSH TABLES WITH "
                                                                    "READ LOCK)", cham_stall)):
        worst, _, top, _ = stall(seconds)
        results.add(f"writer stall: sysbench oltp_write_only {WRITER_TPS} tps during {who} vs no snapshot "
                    "(per-second p99 and max latency)", describe_stall(seconds), describe_stall(none_stall),
                    f"{worst / none[0]:.2f}x p99, {top / none[2]:.2f}x max" if none[0] and none[2] else "-",
                    "<= 1.0x" if who.startswith("our") else "(reference)")
    ours_rate, cham_rate = emitted / ours_stream, replayed / cham_replay
    cham_cell = f"{cham_rate:,.0f} rows/s"
    if problem:
        cham_cell += f" ({replayed:,} of {changes:,} rows replayed: {problem})"
    results.add(f"pg_chameleon: catch-up {changes:,} changes -> jdbc (stream task) vs pg_chameleon replay "
                "(start_replica until every change replayed)", f"{ours_rate:,.0f} rows/s", cham_cell,
                f"{ours_rate / cham_rate:.2f}x throughput" if cham_rate and not problem else "-", ">= 3x")
    results.add("  same, our whole second dag.test() process vs the replay",
                f"{emitted / ours_catchup_process:,.0f} rows/s", cham_cell,
                f"{emitted / ours_catchup_process / cham_rate:.2f}x throughput" if cham_rate and not problem else "-",
                "(reference)")
    if connect:
        connect_rate = connect_emitted / (connect_stream["end"] - connect_stream["start"])
        results.add("  same, the stream task on the Spark Connect server vs the replay", f"{connect_rate:,.0f} rows/s",
                    cham_cell, f"{connect_rate / cham_rate:.2f}x throughput" if cham_rate and not problem else "-",
                    ">= 3x")
    for what, replica, base in (("pg_chameleon replica after init_replica", cham_copy, source),
                                ("our jdbc mirror after the snapshot", ours_copy, source),
                                (f"pg_chameleon replica after the replay of {changes:,} changes", cham_after,
                                 source_after),
                                (f"our jdbc mirror after the catch-up of {changes:,} changes", ours_after,
                                 source_after),
                                *((("our jdbc mirror on Spark Connect after the snapshot", connect_copy, source),
                                   (f"our jdbc mirror on Spark Connect after the catch-up of {changes:,} changes",
                                    connect_after, source_after)) if connect else ())):
        ours_cell, base_cell, verdict = compare(base, replica)
        results.add(f"correctness: {what} vs MariaDB (count + md5 checksum)", ours_cell, base_cell, verdict, "match")
