"""``make bench``: our pipeline against what users would run instead, measured in the same run.

    python bench/run.py [--rows 1000000,5000000,10000000] [--tables 10x100000] [--changes 200000]
                        [--latency-seconds 60] [--latency-rate 500] [--latency-trigger '1 second']
                        [--memory-changes 1000000]
                        [--only snapshot,tables,catchup,latency,memory] [--sinks parquet,jdbc,delta]
                        [--only chameleon --chameleon-rows 1000000]   (pg_chameleon side by side: bench/chameleon.py)
                        [--only alters --alter-changes 100000 --alter-every 10000]   (ALTERs: bench/alters.py)
                        [--only resnapshot --resnapshot-rows 1000000]   (a re-snapshot into the delta sink)

Everything runs on this machine: a private MariaDB (binlog ROW/FULL) with sysbench tables, a private
PostgreSQL for the JDBC sink, Airflow (SQLite) running the real generated DAG with ``dag.test()``, and Spark
``local[2]`` as the embedded default. Scenarios:

* snapshot (1M, 5M and 10M rows; 10M is one full chunk task at the default ``snapshot.rows_per_task``, the
  most rows a task's fixed costs are spread over): the snapshot phase of the DAG (validate -> plan -> chunk
  tasks -> collect watermarks, from the first task's start to the last one's end) vs ``mariadb --quick`` and
  vs one plain spark-submit reading the table over JDBC with 2 partitions and writing Parquet; then the same
  DAG with its chunk tasks on a long-lived Spark Connect server (``spark.connect_conn_id``, opt-in; the
  server is started first and its start-up reported on its own line), also against the same plain reload
  run through that server; these DAG runs import the Connect client at the start of their Airflow process
  (``airflow_local_settings.py`` importing ``airflow_cdc_provider.worker_preload``), as a Connect user's
  workers do, so that the tasks they fork do not each import it;
* tables: the snapshot phase of a schema of many small tables (default settings: they share one chunk task)
  vs one plain spark-submit reloading them one after the other, and the same DAG with one chunk task per
  table (``rows_per_task`` of one table's chunks) for reference;
* catch-up: the stream task applying the row changes of sysbench oltp_write_only (parquet and jdbc sinks) vs
  a bare python-mysql-replication loop that only decodes the same events (decoded before our runs and again
  after them; each of ours is compared with the mean of the two, as the machine's speed drifts within a
  run); then the same with the stream task on a long-lived Spark Connect server (``spark.connect_conn_id``,
  opt-in; the server started first; the worker preload as above);
* latency: continuous mode at a fixed sysbench rate; commit-to-sink delay of probe rows (committed with a
  client timestamp, seen in the sink by a 50 ms poller), p50/p99 over the whole load, and again over the
  probes committed after its first ``WARM_UP_SECONDS`` (the stream's first batches under load compile the
  JVM's hot paths; a stream that runs for hours lives in the steady state);
* memory: peak RSS of the Spark driver (JVM) and the Python processes (driver + workers), sampled every 0.2 s
  from /proc (this bench's processes only), during each snapshot and during a large catch-up;
* the delta sink (``--sinks ... delta``, on by default): each snapshot size and each catch-up again with
  ``sink: {type: delta}``, right after the parquet run on the same table and binlog (never at the same time),
  compared with the parquet run: snapshot phase time (goal <= 1.2x), catch-up throughput (goal >= 0.8x),
  where the snapshot's window work went (the chunk jobs' window lines: the read, with the rows written as the
  table's data files (delta) or staged (parquet), then the sink's write: for the delta sink the commit of the
  data files and of the binlog window's changes, or a MERGE), and
  the peak RSS of the Spark driver's JVM and of its Python driver process (where delta-rs runs) in both
  sinks' runs, with how much it grows from the smallest to the largest snapshot (``FLAT_IN_ROWS``);
* alters (``--only alters``, not in the default set: ~4-5 minutes at its default size): the catch-up of a binlog
  with an ALTER TABLE the stream applies in place every ``--alter-every`` row changes vs the same number of
  changes with no DDL, on one table, parquet and jdbc sinks; where the ALTERs' time goes (failed batch
  attempts, query restarts, the written batch), the state store's records and each sink against MariaDB at the
  end (``bench/alters.py``);
* resnapshot (``--only resnapshot``, not in the default set: ~6 minutes at 1M rows): a re-snapshot of a table the
  sink holds, 1 row in 100 deleted since its first snapshot, into the delta sink (its windows replace the table's
  files) vs that table's first snapshot, vs the parquet sink's re-snapshot, and vs the delta sink's re-snapshot of
  the same rows keyed by a BIGINT UNSIGNED (no statistics of the key: its windows are staged and MERGEd); each
  sink then equals MariaDB row by row.

Our spark-submits map the JVM class archives of their jobs (``airflow_cdc_provider.spark.launch.class_archive``), which
the first job of each kind on a machine dumps. The bench keeps them in its work directory and dumps them
first, in a warm-up DAG run reported on its own line (a one-time cost per machine, like a Connect server's
start). Their Python processes start through our Python launcher (``airflow_cdc_provider.spark.launch.python_launcher``).
Chunk jobs also run with the throughput collector (``operators.spark_submit.THROUGHPUT_GC``), the stream
job and chunk tasks of up to ``CLIENT_JIT_MAX_ROWS`` rows with the client compiler only (``CLIENT_JIT``). The
plain reload runs as users run it (none of these); a reference line gives it an archive of its own, the
collector, the compiler a chunk task of its rows gets, the launcher and our driver settings
(``spark.session.DRIVER_CONF``).

Ratios: for times, ours / baseline (lower is better); for throughput, ours / baseline (higher is better).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Iterator

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from airflow_cdc_provider.core.chunks import DEFAULT_CHUNK_SIZE  # noqa: E402
from airflow_cdc_provider.core.offsets import BinlogOffset  # noqa: E402
from airflow_cdc_provider.operators.snapshot import CLIENT_JIT_MAX_ROWS  # noqa: E402
from airflow_cdc_provider.operators.spark_submit import CLIENT_JIT, THROUGHPUT_GC  # noqa: E402
from airflow_cdc_provider.source.server import current_offset  # noqa: E402
from airflow_cdc_provider.source.settings import ConnectionSettings  # noqa: E402
from airflow_cdc_provider.spark.launch.class_archive import ARCHIVE_DIR_ENV  # noqa: E402
from airflow_cdc_provider.spark.launch.python_launcher import python_launcher  # noqa: E402
from airflow_cdc_provider.spark.session import DRIVER_CONF, default_jars  # noqa: E402
from airflow_cdc_provider.state.store import StateStore, table_dir_name  # noqa: E402
from airflow_cdc_provider.testing.airflow_run import (  # noqa: E402
    BackgroundDagRun,
    airflow_env,
    install_dag_files,
    install_worker_preload,
    migrate,
    run_dag,
)
from airflow_cdc_provider.testing.mariadb import PrivateMariaDB  # noqa: E402
from airflow_cdc_provider.testing.postgres import PrivatePostgres  # noqa: E402
from airflow_cdc_provider.testing.spark import spark_env, spark_submit_binary  # noqa: E402
from airflow_cdc_provider.testing.spark_connect import PrivateSparkConnect  # noqa: E402
from airflow_cdc_provider.testing.sysbench import sysbench  # noqa: E402
from alters import alters_vs_plain  # noqa: E402
from chameleon import side_by_side as chameleon_side_by_side  # noqa: E402

CLI = str(Path(sys.executable).with_name("airflow-cdc"))
SNAPSHOT_TASKS = ("validate_source", "plan_chunks", "snapshot_chunk", "collect_watermarks")
CHANGES_PER_EVENT = 4  # oltp_write_only: 2 updates, 1 delete, 1 insert per transaction


class Results:
    def __init__(self) -> None:
        self.rows: list[tuple[str, str, str, str, str]] = []

    def add(self, scenario: str, ours: str, base: str, ratio: str, goal: str) -> None:
        self.rows.append((scenario, ours, base, ratio, goal))
        print(f"  -> {scenario}: ours {ours} | baseline {base} | ratio {ratio} | goal {goal}", flush=True)

    def table(self) -> str:
        head = ("scenario", "ours", "baseline", "ratio", "goal")
        widths = [max(len(r[i]) for r in [head, *self.rows]) for i in range(5)]
        line = lambda r: "| " + " | ".join(c.ljust(w) for c, w in zip(r, widths)) + " |"  # noqa: E731
        return "\n".join([line(head), "|" + "|".join("-" * (w + 2) for w in widths) + "|", *map(line, self.rows)])


class RssSampler(threading.Thread):
    """Peak resident memory of Spark's JVMs and of the Python processes under them (driver, workers), and of
    the Python drivers alone (the processes running a ``spark_jobs/`` script: where a sink's driver-side work,
    such as the delta sink's commits and MERGEs, runs)."""

    def __init__(self, interval: float = 0.2) -> None:
        super().__init__(daemon=True)
        self.interval = interval
        self.peak_jvm = 0
        self.peak_python = 0
        self.peak_driver = 0
        self.root = os.getpid()
        self._halt = threading.Event()

    def run(self) -> None:
        while not self._halt.wait(self.interval):
            procs = {}
            for pid in os.listdir("/proc"):
                if not pid.isdigit():
                    continue
                try:
                    cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")
                    status = Path(f"/proc/{pid}/status").read_text().splitlines()
                    rss = next(int(x.split()[1]) for x in status if x.startswith("VmRSS:")) * 1024
                    ppid = next(int(x.split()[1]) for x in status if x.startswith("PPid:"))
                except (OSError, StopIteration):
                    continue
                procs[int(pid)] = (cmd, rss, ppid)
            # only this bench's processes (others may run Spark on the machine), and not a Spark Connect server
            # idling for other runs (nor its Python workers): it is not the run sampled
            servers = {pid for pid, (cmd, _, _) in procs.items() if b"SparkConnectServer" in cmd}

            def sampled(pid: int) -> bool:
                seen = set()
                while pid in procs and pid not in seen:
                    if pid in servers:
                        return False
                    if pid == self.root:
                        return True
                    seen.add(pid)
                    pid = procs[pid][2]
                return False

            jvm = py = driver = 0
            for pid, (cmd, rss, _) in procs.items():
                if not sampled(pid):
                    continue
                if b"org.apache.spark.deploy.SparkSubmit" in cmd:
                    jvm += rss
                elif b"pyspark.daemon" in cmd or b"pyspark.sql" in cmd:
                    py += rss
                elif b"spark_jobs/" in cmd:
                    py += rss
                    driver += rss
            self.peak_jvm, self.peak_python = max(self.peak_jvm, jvm), max(self.peak_python, py)
            self.peak_driver = max(self.peak_driver, driver)

    def __enter__(self) -> "RssSampler":
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._halt.set()
        self.join(5)


def mib(n: int) -> str:
    return f"{n / 2**20:.0f} MiB"


def driver_peaks(sampler: RssSampler) -> str:
    return f"{sampler.peak_jvm / 2**20:.0f} / {sampler.peak_driver / 2**20:.0f} / {mib(sampler.peak_python)}"


# Memory flat in rows: the snapshot's 10x rows (1M -> 10M) grow its peaks by at most this. A Python driver
# holding a tenth of the rows it writes (sysbench rows: ~190 bytes each in Arrow) would grow from ~210 MiB by
# ~1.7x; one holding a window's batches only (what the sinks stream) does not grow. The JVM's heap grows lazily
# up to the driver memory whatever the sink holds (the parquet sink's own JVM peak grows by ~1.4x), so for the
# JVM the goal is also met at the parquet sink's growth.
FLAT_IN_ROWS = 1.2


def flat_in_rows(results: Results, peaks: dict[int, tuple[RssSampler, RssSampler]]) -> None:
    """Peak RSS of the largest snapshot over the smallest's, delta sink (ours) and parquet sink (baseline):
    the Spark driver's JVM, then its Python driver (where delta-rs runs)."""
    small, large = min(peaks), max(peaks)
    for what, attr, goal in (("Spark driver JVM", "peak_jvm", f"<= {FLAT_IN_ROWS}x or parquet's"),
                             ("Python driver (delta-rs)", "peak_driver", f"<= {FLAT_IN_ROWS}x")):
        growth = [getattr(peaks[large][i], attr) / max(1, getattr(peaks[small][i], attr)) for i in (0, 1)]
        ours, base = (f"{getattr(peaks[small][i], attr) / 2**20:.0f} -> {mib(getattr(peaks[large][i], attr))}"
                      for i in (0, 1))
        results.add(f"memory flat in rows, delta snapshot: peak RSS of the {what}, {large:,} rows over {small:,}",
                    ours, f"{base} (parquet: {growth[1]:.2f}x)", f"{growth[0]:.2f}x", goal)


class Bench:
    # the ``spark`` section of a pipeline whose tasks run on the server of ``connect_server``
    ON_CONNECT = {"connect_conn_id": "bench_connect"}

    def __init__(self, work: Path, db: PrivateMariaDB, pg: PrivatePostgres) -> None:
        self.work, self.db, self.pg = work, db, pg
        self.results = Results()
        self.settings = ConnectionSettings.from_airflow_conn(db.connection_uri(), "bench")
        (work / "dags").mkdir(parents=True)
        (work / "pipelines").mkdir()
        install_dag_files(work / "dags")
        self.env = airflow_env(work / "airflow", work / "dags", work / "pipelines",
                               {"AIRFLOW_CONN_BENCH_SOURCE": db.connection_uri(),
                                "AIRFLOW_CONN_BENCH_PG": pg.connection_uri(),
                                ARCHIVE_DIR_ENV: str(work / "jvm-class-archives")})
        migrate(self.env)
        # Spark Connect pipelines run as a user of that mode deploys them: airflow_local_settings.py imports
        # worker_preload, so the client is imported when the Airflow process starts, not in each task
        self.preload_dir = str(install_worker_preload(work / "connect-worker-config").parent)

    # -- helpers -----------------------------------------------------------------------------------
    def pipeline(self, dag_id: str, tables: list[str], sink: str = "parquet", stream: dict | None = None,
                 spark: dict | None = None, snapshot: dict | None = None) -> Path:
        """A pipeline YAML with the default snapshot settings (what a user gets without tuning) but ``snapshot``'s."""
        sink_yaml = (f"sink:\n  type: jdbc\n  conn_id: bench_pg\n  schema: {dag_id}\n" if sink == "jdbc" else
                     f"sink:\n  type: {sink}\n  path: {self.work / dag_id / 'sink'}\n")
        p = self.work / "pipelines" / f"{dag_id}.yaml"
        p.write_text(f"dag_id: {dag_id}\nsource:\n  conn_id: bench_source\n  tables: {json.dumps(tables)}\n"
                     f"{sink_yaml}state:\n  path: {self.work / dag_id / 'state'}\n"
                     f"stream: {json.dumps(stream or {'mode': 'available_now'})}\n"
                     + (f"spark: {json.dumps(spark)}\n" if spark else "")
                     + (f"snapshot: {json.dumps(snapshot)}\n" if snapshot else ""))
        return p

    def run(self, dag_id: str, preload: bool = False, conf: dict | None = None) -> dict:
        """``dag.test()`` of ``dag_id`` in a new process (``conf``: its run's); ``preload``: one with the Spark
        Connect worker preload. Its log is ``<dag_id>.log``; an earlier run's becomes ``<dag_id>.<n>.log``."""
        env = self.env
        if preload:  # its airflow_local_settings.py on the process's sys.path
            env = {**env, "PYTHONPATH": os.pathsep.join(filter(None, [self.preload_dir, env.get("PYTHONPATH")]))}
        log = self.work / f"{dag_id}.log"
        if log.exists():  # an earlier run's log is kept, numbered
            log.rename(self.work / f"{dag_id}.{len(list(self.work.glob(f'{dag_id}.*.log'))) + 1}.log")
        res = run_dag(env, self.work / "dags", dag_id, conf=conf, timeout=7200, log_file=log)
        if res["state"] != "success":
            raise RuntimeError(f"DAG {dag_id} failed; see {self.work / f'{dag_id}.log'}")
        return res

    def first_task_harness(self, dag_id: str, result: dict) -> float | None:
        return first_task_harness(self.work / f"{dag_id}.log", result)

    @staticmethod
    def span(result: dict, tasks) -> float:
        tis = [t for t in result["tis"] if t["task_id"] in tasks and t["start"] and t["end"]]
        return max(t["end"] for t in tis) - min(t["start"] for t in tis)

    def prepare(self, db: str, rows: int, tables: int = 1) -> list[str]:
        """sysbench tables ``db.sbtest1..N`` of ``rows`` rows each, in the buffer pool; their names."""
        t = time.monotonic()
        self.db.create_database(db)
        sysbench(self.db, db, "prepare", rows, f"--tables={tables}", test="oltp_read_write")
        names = [f"sbtest{i}" for i in range(1, tables + 1)]
        with contextlib.closing(self.db.app_connection(db)) as c, c.cursor() as cur:
            for name in names:
                cur.execute(f"SELECT COUNT(*), SUM(LENGTH(c)) FROM {name}")  # warm the buffer pool
                if cur.fetchone()[0] != rows:
                    raise RuntimeError(f"sysbench prepared {db}.{name} without {rows} rows")
        print(f"  sysbench prepare {db}: {tables} table(s) of {rows} rows: {time.monotonic() - t:.0f}s", flush=True)
        return [f"{db}.{name}" for name in names]

    def offset(self) -> BinlogOffset:
        with contextlib.closing(self.db.app_connection()) as c:
            return current_offset(c)

    # -- scenarios ---------------------------------------------------------------------------------
    def warm_class_archives(self) -> None:
        """Dump the JVM class archives of the chunk and stream jobs (the first DAG run on a machine does it)
        and report what that first run cost over a second one."""
        print("\n== JVM class archives (once per machine)", flush=True)
        self.prepare("warm", 10_000)
        times = []
        for dag_id in ("warm_first", "warm_second"):
            self.pipeline(dag_id, ["warm.sbtest1"])
            res = self.run(dag_id)
            times.append(self.span(res, (*SNAPSHOT_TASKS, "binlog_retention", "stream")))
        self.results.add("first DAG run on a machine (10k rows: snapshot + stream) dumps the JVM class archives, vs "
                         "a second run", f"{times[0]:.1f} s", f"{times[1]:.1f} s", f"+{times[0] - times[1]:.1f} s once",
                         "-")

    def plain_reload(self, db: str, rows: int, out: str, remote: str | None = None, java_options: str = "",
                     python: str | None = None, conf: dict[str, str] | None = None,
                     tables: list[str] | None = None) -> float:
        """Seconds of the baseline: one plain spark-submit (or, with ``remote``, one Python client of that Spark
        Connect server) reading ``db.sbtest1`` (or ``tables``, one after the other) over JDBC with 2 partitions
        and writing Parquet. ``java_options``, ``python`` (the driver's and workers' Python) and ``conf`` give it
        our start-up aids, for a reference line."""
        script = str(ROOT / "bench" / "plain_jdbc_reload.py")
        args = [f"jdbc:mysql://127.0.0.1:{self.db.port}/?permitMysqlScheme", ",".join(tables or [f"{db}.sbtest1"]),
                "1", str(rows), str(self.work / out)]
        options = ["--driver-java-options", java_options] if java_options else []
        options += [a for k, v in (conf or {}).items() for a in ("--conf", f"{k}={v}")]
        cmd = ([sys.executable, script, *args] if remote else
               [spark_submit_binary(), "--master", "local[2]", "--conf", "spark.ui.enabled=false", *options,
                "--jars", ",".join(default_jars()), script, *args])
        env = {"BENCH_USER": self.settings.user, "BENCH_PASSWORD": self.settings.password,
               **({"SPARK_REMOTE": remote} if remote else {}),
               **({"PYSPARK_PYTHON": python, "PYSPARK_DRIVER_PYTHON": python} if python else {})}
        t = time.monotonic()
        subprocess.run(cmd, env=spark_env(env), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
        return time.monotonic() - t

    def snapshot_dag(self, dag_id: str, preload: bool = False,
                     conf: dict | None = None) -> tuple[float, float, float, float, int, int]:
        """Run a snapshot DAG (``conf``: its run's, e.g. a re-snapshot's): (snapshot phase, chunk task time, their
        Spark applications' time, their watermark-window work, tasks, chunks). A chunk task logs how long its
        spark-submit (or its Spark Connect session) ran."""
        res = self.run(dag_id, preload, conf)
        tasks = [t for t in res["tis"] if t["task_id"] == "snapshot_chunk"]
        reports = [r for k, v in res["xcom"].items() if k.startswith("snapshot_chunk[") for r in v]
        windows = {(r["table"], r["low_watermark"]["pos"], r["seconds"]) for r in reports}
        log = (self.work / f"{dag_id}.log").read_text()
        spark = [float(x) for x in re.findall(r"(?:snapshot_chunk: spark-submit|chunk job: Spark Connect session) "
                                              r"ran ([\d.]+) s", log)]
        if len(spark) != len(tasks):
            raise RuntimeError(f"{dag_id}: {len(tasks)} chunk task(s) but {len(spark)} Spark run times in the log")
        return (self.span(res, SNAPSHOT_TASKS), sum(t["end"] - t["start"] for t in tasks), sum(spark),
                sum(s for _, _, s in windows), len(tasks), len(reports))

    def snapshot(self, rows: int, sampler: RssSampler | None = None, connect: bool = True,
                 delta: RssSampler | None = None) -> None:
        """``delta`` (if given) watches the same snapshot DAG with the delta sink, run on the same table right
        after the parquet one and compared with it."""
        db = f"snap{rows}"
        print(f"\n== snapshot {rows} rows", flush=True)
        self.prepare(db, rows)
        t = time.monotonic()
        subprocess.run(["mariadb", "--quick", "-h", "127.0.0.1", "-P", str(self.db.port), "-u", self.settings.user,
                        "-e", f"SELECT * FROM {db}.sbtest1"], env={**os.environ, "MYSQL_PWD": self.settings.password},
                       stdout=subprocess.DEVNULL, check=True)
        t_cli = time.monotonic() - t
        t_plain = self.plain_reload(db, rows, f"plain-{rows}")
        self.pipeline(db, [f"{db}.sbtest1"])
        with sampler or contextlib.nullcontext():
            ours, task_time, spark_app, spark_work, tasks, chunks = self.snapshot_dag(db)
        if delta is not None:
            self.pipeline(f"{db}_delta", [f"{db}.sbtest1"], sink="delta")
            with delta:
                delta_run = self.snapshot_dag(f"{db}_delta")
        self.results.add(f"snapshot {rows:,} rows vs plain Spark JDBC->Parquet", f"{ours:.1f} s", f"{t_plain:.1f} s",
                         f"{ours / t_plain:.2f}x time", "<= 1.2x")
        self.results.add(f"snapshot {rows:,} rows vs mariadb --quick > /dev/null", f"{ours:.1f} s", f"{t_cli:.1f} s",
                         f"{ours / t_cli:.2f}x time", "(reference)")
        self.results.add(f"snapshot {rows:,} rows: {tasks} chunk task(s), {chunks} chunks; task time "
                         "over its watermark-window work", f"{task_time:.1f} s", f"{spark_work:.1f} s",
                         f"+{(task_time / spark_work - 1) * 100:.0f}%", "<= +10%")
        self.results.add("  same: task time over its Spark application (spark-submit, command to exit)",
                         f"{task_time:.1f} s", f"{spark_app:.1f} s", f"+{(task_time / spark_app - 1) * 100:.0f}%",
                         "(reference)")
        archive = self.work / f"plain-{rows}.jsa"
        self.plain_reload(db, rows, f"plain-dump-{rows}", java_options=f"-XX:ArchiveClassesAtExit={archive}")
        jit = f" {CLIENT_JIT}" if rows <= CLIENT_JIT_MAX_ROWS else ""
        t_plain_cds = self.plain_reload(db, rows, f"plain-cds-{rows}",
                                        java_options=f"-XX:SharedArchiveFile={archive} {THROUGHPUT_GC}{jit}",
                                        python=python_launcher(directory=self.work / "jvm-class-archives"),
                                        conf=DRIVER_CONF)
        self.results.add("  same vs the plain reload given our JVM and start-up aids (a class archive of its own, the "
                         "throughput collector, the client compiler up to 2M rows, our Python launcher, no class-path session "
                         "extensions)",
                         f"{ours:.1f} s",
                         f"{t_plain_cds:.1f} s", f"{ours / t_plain_cds:.2f}x time", "(reference)")
        if delta is not None:
            self.delta_snapshot_lines(db, rows, (ours, task_time, spark_app, spark_work, tasks, chunks), delta_run)
        if connect:
            self.snapshot_on_connect(db, rows, t_plain)

    def delta_snapshot_lines(self, db: str, rows: int, parquet: tuple, delta: tuple) -> None:
        """The delta sink's snapshot against the parquet sink's (``snapshot_dag`` results of each), and where
        their window work went (the chunk jobs' window lines: the read, then the sink's write; for the delta
        sink the read also stages the rows, and the write turns them into the table's data files and commits them,
        or MERGEs them with delta-rs on the driver)."""
        ours, task_time, _, work, tasks, chunks = delta
        base, base_task_time, _, base_work, _, _ = parquet
        self.results.add(f"snapshot {rows:,} rows -> delta sink ({tasks} chunk task(s), {chunks} chunks) vs the same "
                         "DAG -> parquet sink", f"{ours:.1f} s", f"{base:.1f} s", f"{ours / base:.2f}x time",
                         "<= 1.2x")
        self.results.add("  same: chunk task time / its watermark-window work, delta vs parquet",
                         f"{task_time:.1f} / {work:.1f} s", f"{base_task_time:.1f} / {base_work:.1f} s",
                         f"{work / base_work:.2f}x window work", "(reference)")
        split, base_split = (window_split(self.work / f"{d}.log") for d in (f"{db}_delta", db))
        if split and base_split:
            self.results.add("  same: window work split, read and written (delta: as the table's data files; "
                             "parquet: staged) + sink write (delta: their commit)",
                             f"{split[0]:.1f} + {split[1]:.1f} s", f"{base_split[0]:.1f} + {base_split[1]:.1f} s", "-",
                             "(where the time goes)")

    @contextlib.contextmanager
    def connect_server(self, name: str) -> Iterator[PrivateSparkConnect]:
        """A Spark Connect server (local[2], as the embedded default), up while in the block as the runs' Airflow
        connection ``bench_connect`` (pipelines with ``spark=Bench.ON_CONNECT`` run their tasks on it)."""
        with PrivateSparkConnect(base_dir=str(self.work / f"connect-{name}")) as server:
            self.env["AIRFLOW_CONN_BENCH_CONNECT"] = server.connection_uri()
            yield server

    def snapshot_on_connect(self, db: str, rows: int, t_plain: float) -> None:
        """The same snapshot with ``spark.connect_conn_id``: chunk tasks are sessions of a long-lived Spark
        Connect server (local[2], as the embedded default) started here, before the DAG, as a user's would be.
        Then the same snapshot again by a second pipeline on the same server: a long-lived server has served
        chunk tasks before, and a first one also warms the server's planner (the first session's plan analyses,
        its DDL parse: ~1.5 s on a new server here, ~0.05 s after). Both DAG runs have the worker preload."""
        t = time.monotonic()
        with self.connect_server(str(rows)) as server:
            t_start = time.monotonic() - t
            t_warm = self.plain_reload(db, rows, f"plain-connect-{rows}", remote=server.url)
            self.pipeline(f"{db}_connect", [f"{db}.sbtest1"], spark=self.ON_CONNECT)
            ours, task_time, spark_app, spark_work, tasks, chunks = self.snapshot_dag(f"{db}_connect", preload=True)
            self.pipeline(f"{db}_connect_again", [f"{db}.sbtest1"], spark=self.ON_CONNECT)
            again, again_task, again_session, again_work, _, _ = self.snapshot_dag(f"{db}_connect_again", preload=True)
        self.results.add(f"snapshot {rows:,} rows, chunk tasks on Spark Connect (opt-in) vs plain Spark "
                         "JDBC->Parquet (spark-submit)", f"{ours:.1f} s", f"{t_plain:.1f} s",
                         f"{ours / t_plain:.2f}x time", "<= 1.2x")
        self.results.add("  same vs the plain reload run through the same Connect server", f"{ours:.1f} s",
                         f"{t_warm:.1f} s", f"{ours / t_warm:.2f}x time", "(reference)")
        self.results.add(f"  same: {tasks} chunk task(s), {chunks} chunks; task time over its watermark-window "
                         "work", f"{task_time:.1f} s", f"{spark_work:.1f} s",
                         f"+{(task_time / spark_work - 1) * 100:.0f}%", "<= +10%")
        self.results.add("  same: task time over its Spark Connect session (open to stop; the client imported by "
                         "the worker: worker_preload)", f"{task_time:.1f} s", f"{spark_app:.1f} s",
                         f"+{(task_time / spark_app - 1) * 100:.0f}%", "(reference)")
        self.results.add(f"  the same snapshot again on that server (its second DAG; snapshot phase {again:.1f} s, "
                         f"{again / t_plain:.2f}x the plain reload): task time over its watermark-window work",
                         f"{again_task:.1f} s", f"{again_work:.1f} s", f"+{(again_task / again_work - 1) * 100:.0f}%",
                         "<= +10%")
        self.results.add("  same: task time over its Spark Connect session", f"{again_task:.1f} s",
                         f"{again_session:.1f} s", f"+{(again_task / again_session - 1) * 100:.0f}%", "(reference)")
        self.results.add("  Spark Connect server start (once per server, not per run)", f"{t_start:.1f} s", "-", "-",
                         "-")

    def many_tables(self, count: int, rows: int) -> None:
        """A schema of ``count`` small tables: the default plan reads them all in one chunk task (one Spark
        application), vs one plain spark-submit reloading them one after the other, and vs our DAG with one
        chunk task per table (how it planned them before tables shared a task)."""
        db = "tables"
        print(f"\n== snapshot of {count} tables x {rows} rows", flush=True)
        tables = self.prepare(db, rows, tables=count)
        t_plain = self.plain_reload(db, rows, "plain-tables", tables=tables)
        self.pipeline(db, tables)
        ours, task_time, spark_app, spark_work, tasks, chunks = self.snapshot_dag(db)
        per_table = chunks // count * DEFAULT_CHUNK_SIZE  # rows_per_task of exactly one table's chunks
        self.pipeline(f"{db}_task_each", tables, snapshot={"rows_per_task": per_table})
        each, each_task_time, _, each_work, each_tasks, _ = self.snapshot_dag(f"{db}_task_each")
        if each_tasks != count:
            raise RuntimeError(f"rows_per_task {per_table} planned {each_tasks} chunk tasks for {count} tables")
        self.results.add(f"snapshot of {count} tables x {rows:,} rows ({tasks} chunk task(s), {chunks} chunks) vs "
                         "one plain spark-submit reloading the tables one after the other",
                         f"{ours:.1f} s", f"{t_plain:.1f} s", f"{ours / t_plain:.2f}x time", "<= 1.2x")
        self.results.add("  same: task time over its watermark-window work", f"{task_time:.1f} s",
                         f"{spark_work:.1f} s", f"+{(task_time / spark_work - 1) * 100:.0f}%", "<= +10%")
        self.results.add("  same: task time over its Spark application (spark-submit, command to exit)",
                         f"{task_time:.1f} s", f"{spark_app:.1f} s", f"+{(task_time / spark_app - 1) * 100:.0f}%",
                         "(reference)")
        self.results.add(f"  same tables, one chunk task per table ({each_tasks} tasks; task time {each_task_time:.1f} s "
                         f"over window work {each_work:.1f} s) vs the plain reload", f"{each:.1f} s", f"{t_plain:.1f} s",
                         f"{each / t_plain:.2f}x time", "(reference)")

    def resnapshot(self, rows: int, deleted_every: int = 100) -> None:
        """A re-snapshot of a table the sink holds (``resnapshot`` in the run's conf), every ``deleted_every``-th
        row deleted since the first snapshot: the delta sink's windows replace the table's files in one commit
        each, the deleted rows carried over (``WrittenDeltaWindow``), against the same table's first snapshot,
        against the parquet sink's re-snapshot (a new epoch's files beside the old), and against the delta
        sink's re-snapshot of the same rows keyed by a BIGINT UNSIGNED, a key no file states statistics of,
        whose windows are staged and MERGEd by delta-rs on the driver."""
        db = f"resnap{rows}"
        print(f"\n== re-snapshot {rows} rows", flush=True)
        self.prepare(db, rows)
        with contextlib.closing(self.db.app_connection(db)) as c, c.cursor() as cur:
            cur.execute("CREATE TABLE sbtest_u LIKE sbtest1")
            cur.execute("ALTER TABLE sbtest_u MODIFY id BIGINT UNSIGNED NOT NULL AUTO_INCREMENT")
            cur.execute("INSERT INTO sbtest_u SELECT * FROM sbtest1")
            c.commit()
        runs: dict[str, tuple[tuple, tuple, dict[str, int], RssSampler]] = {}
        for residue, (how, sink, table) in enumerate((("parquet", "parquet", "sbtest1"), ("delta", "delta", "sbtest1"),
                                                      ("delta, BIGINT UNSIGNED key", "delta", "sbtest_u"))):
            dag_id = f"{db}_{sink}_{table}"
            self.pipeline(dag_id, [f"{db}.{table}"], sink=sink)
            first = self.snapshot_dag(dag_id)
            with contextlib.closing(self.db.app_connection(db)) as c, c.cursor() as cur:
                cur.execute(f"DELETE FROM {table} WHERE id % {deleted_every} = {residue}")  # rows no run deleted
                c.commit()
            with RssSampler() as sampler:
                again = self.snapshot_dag(dag_id, conf={"resnapshot": [f"{db}.{table}"]})
            log = (self.work / f"{dag_id}.log").read_text()
            paths = {"replaced": len(re.findall(r"replaced the table's files that may hold their keys", log)),
                     "appended": len(re.findall(r": appended \d+ rows", log)),
                     "MERGE": len(re.findall(r": MERGE \(", log)),
                     "staged": len(re.findall(r"chunks \d+-\d+ staged \(", log))}
            runs[how] = (first, again, paths, sampler)
            self.check_equal(db, table, dag_id, sink)
        (first, again, paths, sampler), base_again = runs["delta"], runs["parquet"][1]
        merged_first, merged, merged_paths, merged_sampler = runs["delta, BIGINT UNSIGNED key"]

        def windows(p: dict[str, int]) -> str:
            return ", ".join(f"{n} {k}" for k, n in p.items() if n) or "no window line"

        self.results.add(f"re-snapshot of {rows:,} rows (1 in {deleted_every} deleted since) -> delta sink "
                         f"({windows(paths)}) vs the same table's first snapshot -> delta",
                         f"{again[0]:.1f} s", f"{first[0]:.1f} s", f"{again[0] / first[0]:.2f}x time", "(reference)")
        self.results.add("  same vs the re-snapshot -> parquet sink (a new epoch's files)", f"{again[0]:.1f} s",
                         f"{base_again[0]:.1f} s", f"{again[0] / base_again[0]:.2f}x time", "(reference)")
        self.results.add(f"  same vs the same rows keyed by a BIGINT UNSIGNED ({windows(merged_paths)}; its first "
                         f"snapshot {merged_first[0]:.1f} s)", f"{again[0]:.1f} s", f"{merged[0]:.1f} s",
                         f"{again[0] / merged[0]:.2f}x time", "(reference)")
        self.results.add("  same: window work, replaced vs MERGEd", f"{again[3]:.1f} s", f"{merged[3]:.1f} s",
                         f"{again[3] / merged[3]:.2f}x", "(reference)")
        self.results.add("  same: peak RSS during the re-snapshot, JVM / Python driver (delta-rs) / all Python, "
                         "replaced vs MERGEd", driver_peaks(sampler), driver_peaks(merged_sampler), "-",
                         "(reference)")

    def catchup(self, changes: int, sinks=("parquet", "jdbc"), samplers: dict[str, RssSampler] | None = None,
                connect: bool = False) -> None:
        """``samplers``: the sinks whose catch-up (stream task by spark-submit) a sampler watches. ``connect``: the
        same catch-up also with the stream task on a long-lived Spark Connect server (``spark.connect_conn_id``),
        started before the runs, for the sinks other than delta. A delta catch-up is also compared with the
        parquet one (``sinks`` then holds both)."""
        db = f"cu{changes}"
        print(f"\n== stream catch-up of {changes} row changes", flush=True)
        self.prepare(db, 100_000)
        with contextlib.ExitStack() as stack:
            variants = [(sink, f"{db}_{sink}", None) for sink in sinks]
            if connect:
                stack.enter_context(self.connect_server(db))
                variants += [(sink, f"{db}_{sink}_connect", self.ON_CONNECT) for sink in sinks
                             if sink != "delta"]
            for sink, dag_id, spark in variants:
                self.pipeline(dag_id, [f"{db}.sbtest1"], sink=sink, stream={"mode": "available_now"}, spark=spark)
                self.run(dag_id, preload=spark is not None)  # snapshot + an empty stream
            start = self.offset()
            t = time.monotonic()
            events = changes // CHANGES_PER_EVENT
            sysbench(self.db, db, "run", 100_000, "--threads=2", "--time=0", f"--events={events}")
            end = self.offset()
            print(f"  sysbench: {events} transactions in {time.monotonic() - t:.0f}s", flush=True)
            decoded, t_decode = bare_decode(self.settings, start, end, db)
            print(f"  bare python-mysql-replication decode: {decoded} rows in {t_decode:.1f}s", flush=True)
            runs = []
            for sink, dag_id, spark in variants:
                watched = (samplers or {}).get(sink) if spark is None else None
                with watched or contextlib.nullcontext():
                    res = self.run(dag_id, preload=spark is not None)
                stream = next(t for t in res["tis"] if t["task_id"] == "stream")
                runs.append((sink, dag_id, spark, res["xcom"]["stream[-1]"]["rows_emitted"],
                             stream["end"] - stream["start"]))
            # the machine's speed drifts within a run (+-30% between hours here): the baseline is decoded
            # again after our runs, and their mean is what each of ours is compared with
            decoded_after, t_after = bare_decode(self.settings, start, end, db)
            print(f"  bare python-mysql-replication decode, again: {decoded_after} rows in {t_after:.1f}s", flush=True)
            rates = (decoded / t_decode, decoded_after / t_after)
            rate = sum(rates) / 2
            base = f"{rate:,.0f} rows/s (before {rates[0]:,.0f}, after {rates[1]:,.0f})"
            parquet = next((emitted / t_stream for sink, _, spark, emitted, t_stream in runs
                            if (sink, spark) == ("parquet", None)), None)
            for sink, dag_id, spark, emitted, t_stream in runs:
                where = "stream task on Spark Connect (opt-in)" if spark else "stream task"
                self.results.add(f"catch-up {emitted:,} changes -> {sink} ({where}) vs bare decoder",
                                 f"{emitted / t_stream:,.0f} rows/s", base,
                                 f"{(emitted / t_stream) / rate:.2f}x throughput", ">= 1.5x")
                steady = steady_throughput(self.work / f"{dag_id}.log")  # spark-submit's log is in the task's
                if steady is not None:
                    rows, seconds, batches = steady
                    self.results.add(f"  same, batches after the first ({batches} batches, {rows:,} rows; no start-up)",
                                     f"{rows / seconds:,.0f} rows/s", base,
                                     f"{(rows / seconds) / rate:.2f}x throughput", "(steady state)")
                if sink == "delta" and parquet:
                    self.results.add(f"catch-up {emitted:,} changes -> delta vs -> parquet (stream task, spark-submit, "
                                     "the same binlog)", f"{emitted / t_stream:,.0f} rows/s", f"{parquet:,.0f} rows/s",
                                     f"{(emitted / t_stream) / parquet:.2f}x throughput", ">= 0.8x")

    def latency(self, seconds: int, rate: int = 500, trigger: str = "1 second") -> None:
        """Continuous mode under load, twice: every batch written by Spark's executors (the baseline), then small
        batches written from the driver (the default, ``stream.driver_batch_bytes``)."""
        print(f"\n== continuous latency at {rate} row changes/s for {seconds}s (trigger interval {trigger})", flush=True)
        base = self._latency_run("latx", seconds, rate, trigger, driver_batch_bytes=0)
        ours = self._latency_run("lat", seconds, rate, trigger)
        for i, (what, goal) in enumerate(((f"({len(ours[0])} probes)", "p99 <= 5 s"),
                                          (f"probes after the load's first {WARM_UP_SECONDS} s (steady state, "
                                           f"{len(ours[1])} probes)", "p99 <= 1 s"))):
            title = (f"continuous, {rate} changes/s, trigger {trigger}: commit-to-sink delay p50 / p99 {what}, vs every "
                     "batch written by the executors" if i == 0 else f"  same, {what}")
            if not ours[i] or not base[i]:
                self.results.add(title, "no probes", "-", "-", goal)
                continue
            (p50, p99), (b50, b99) = percentiles(ours[i]), percentiles(base[i])
            self.results.add(title, f"{p50:.2f} s / {p99:.2f} s", f"{b50:.2f} s / {b99:.2f} s",
                             f"{p99 / b99:.2f}x p99", goal)
        self.results.add("continuous: first change after the launch, commit-to-sink (warm-up, not in p99)",
                         f"{ours[2]:.2f} s" if ours[2] is not None else "not seen", "-", "-", "-")

    def _latency_run(self, db: str, seconds: int, rate: int, trigger: str,
                     **stream: int) -> tuple[list[float], list[float], float | None]:
        """One continuous pipeline under load: every probe's delay, the steady state's, the first change's."""
        self.prepare(db, 100_000)
        with contextlib.closing(self.db.app_connection(db)) as c, c.cursor() as cur:
            cur.execute("CREATE TABLE probe (id INT PRIMARY KEY, committed_at DOUBLE)")
        config = self.pipeline(db, [f"{db}.sbtest1", f"{db}.probe"],
                               stream={"mode": "continuous", "trigger_interval": trigger, **stream})
        state = StateStore(self.work / db / "state")
        run = BackgroundDagRun(self.env, self.work / "dags", db, self.work / f"{db}.log")
        delays: list[tuple[float, float]] = []
        try:
            deadline = time.monotonic() + 900
            while getattr(state.read_status(), "state", None) != "running":
                if time.monotonic() > deadline or run.proc.poll() is not None:
                    raise RuntimeError(f"continuous stream did not start; see {self.work / f'{db}.log'}")
                time.sleep(1)
            # steady state: the load and the probes start once a first row has gone through the warm stream
            # (the launch's first batches start Python workers and the first writes); that row's delay is
            # reported on its own
            first = [d for _, d in probe_latency(self.db, db, self.work / db / "sink", 0, first_id=-1)]
            load = sysbench(self.db, db, "run", 100_000, "--threads=2", f"--rate={rate // CHANGES_PER_EVENT}",
                            f"--time={seconds}", background=True)
            delays = probe_latency(self.db, db, self.work / db / "sink", seconds)
            load.wait(seconds + 60)
        finally:
            subprocess.run([CLI, "stop", str(config), "--wait", "120"], env=self.env, capture_output=True)
            with contextlib.suppress(Exception):
                run.result(300)
            run.kill()
        # a delay measured by a pipeline that lost or mangled a change would mean nothing: the rest of the changes
        # (up to the server's position now) are streamed, then the sink is compared with the source
        catch_up = self.pipeline(db, [f"{db}.sbtest1", f"{db}.probe"], stream={"mode": "available_now", **stream})
        res = run_dag(self.env, self.work / "dags", db, timeout=900, log_file=self.work / f"{db}-catch-up.log")
        if res["state"] != "success":
            raise RuntimeError(f"DAG {db} ({catch_up}) failed; see {self.work / f'{db}-catch-up.log'}")
        self.check_equal(db, "sbtest1")
        return ([d for _, d in delays], [d for at, d in delays if at >= WARM_UP_SECONDS],
                first[0] if first else None)

    def check_equal(self, db: str, table: str, dag_id: str | None = None, sink_type: str = "parquet") -> None:
        """The sink's ``table`` (pipeline ``dag_id``'s, default ``db``; a parquet or delta sink) read with pyarrow or
        delta-rs equals MariaDB's, row by row; else the bench fails."""
        import deltalake
        import pyarrow.compute as pc

        from airflow_cdc_provider.sinks.parquet_arrow import read_current_state

        with contextlib.closing(self.db.app_connection(db)) as c, c.cursor() as cur:
            cur.execute(f"SELECT id, k, c, pad FROM {table}")
            source = set(cur.fetchall())
        path = self.work / (dag_id or db) / "sink"
        if sink_type == "delta":
            got = deltalake.DeltaTable(str(path / table_dir_name(f"{db}.{table}"))).to_pyarrow_table()
            got = got.filter(pc.invert(got.column("_cdc_deleted"))).select(["id", "k", "c", "pad"])
        else:
            got = read_current_state(str(path), f"{db}.{table}", ["id"]).select(["id", "k", "c", "pad"])
        sink = {(int(i), k, c, p) for i, k, c, p in zip(*(got[col].to_pylist() for col in got.column_names))}
        if sink != source:
            raise RuntimeError(f"{db}.{table}: the sink differs from the source ({len(source - sink)} source rows "
                               f"missing or different, {len(sink - source)} sink rows not in the source)")
        print(f"  {db}.{table}: sink == source, {len(source):,} rows compared one by one", flush=True)


WARM_UP_SECONDS = 20  # the latency scenario's steady state starts this long after its load

_BATCH_LINE = re.compile(r"(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) INFO airflow_cdc\.stream: batch \d+: (\d+) rows")


def steady_throughput(dag_log: Path) -> tuple[int, float, int] | None:
    """From the stream job's batch lines in the DAG run's log: the rows of the batches after the first and
    the time from the end of the first to the end of the last (planning between batches included)."""
    ends = []
    for m in _BATCH_LINE.finditer(dag_log.read_text(errors="replace")):
        ends.append((dt.datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S,%f").timestamp(), int(m.group(2))))
    ends = sorted(set(ends))
    if len(ends) < 2 or ends[-1][0] <= ends[0][0]:
        return None
    return sum(r for _, r in ends[1:]), ends[-1][0] - ends[0][0], len(ends) - 1


_WINDOW_LINE = re.compile(r"INFO airflow_cdc\.snapshot: window .*: \d+ rows, \d+ window changes, [\d.]+s "
                          r"\(select ([\d.]+)s, sink write ([\d.]+)s\)")


def window_split(dag_log: Path) -> tuple[float, float] | None:
    """From the chunk jobs' window lines in the DAG run's log: the seconds of their windows' select (the read,
    up to the rows written or staged in the sink) and of their sink write (publishing them), summed."""
    split = [(float(a), float(b)) for a, b in _WINDOW_LINE.findall(dag_log.read_text(errors="replace"))]
    return (sum(a for a, _ in split), sum(b for _, b in split)) if split else None


_TASK_STARTED = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d+)Z \[info\s*\] Task started ", re.M)


def first_task_harness(dag_log: Path, result: dict) -> float | None:
    """Seconds ``dag.test()`` spends between its first task instance's start and that task's first statement
    (its in-process execution API starting; a running deployment's workers do not pay it), from the run's log."""
    m = _TASK_STARTED.search(dag_log.read_text(errors="replace"))
    starts = [t["start"] for t in result["tis"] if t["start"]]
    if m is None or not starts:
        return None
    started = dt.datetime.strptime(m.group(1)[:26], "%Y-%m-%dT%H:%M:%S.%f").replace(tzinfo=dt.timezone.utc)
    return max(0.0, started.timestamp() - min(starts))


def bare_decode(settings: ConnectionSettings, start: BinlogOffset, end: BinlogOffset, schema: str) -> tuple[int, float]:
    """The baseline: one python-mysql-replication reader decoding the row events of ``[start, end)``."""
    from pymysqlreplication import BinLogStreamReader
    from pymysqlreplication.row_event import DeleteRowsEvent, UpdateRowsEvent, WriteRowsEvent

    t = time.monotonic()
    stream = BinLogStreamReader(
        connection_settings={"host": settings.host, "port": settings.port, "user": settings.user,
                             "passwd": settings.password},
        server_id=9999, log_file=start.file, log_pos=start.pos, resume_stream=True, blocking=False,
        only_events=[WriteRowsEvent, UpdateRowsEvent, DeleteRowsEvent], only_schemas=[schema])
    rows = 0
    stop = end.sort_key[:2]
    try:
        for ev in stream:
            if BinlogOffset(stream.log_file, ev.packet.log_pos).sort_key[:2] > stop:
                break
            rows += len(ev.rows)
    finally:
        stream.close()
    return rows, time.monotonic() - t


def percentiles(delays: list[float]) -> tuple[float, float]:
    """p50 and p99 of ``delays``."""
    ordered = sorted(delays)
    return ordered[len(ordered) // 2], ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]


def probe_latency(db: PrivateMariaDB, schema: str, sink: Path, seconds: int, per_second: int = 10,
                  first_id: int = 0) -> list[tuple[float, float]]:
    """Commit probe rows (ids from ``first_id``; one row if ``seconds`` is 0); a poller records when each
    appears in the parquet sink. Each probe seen: (seconds from the first probe's commit to its own, delay)."""
    import pyarrow.parquet as pq

    changes = sink / f"{schema}.probe" / "changes"
    committed: dict[int, float] = {}
    seen: dict[int, float] = {}
    done = threading.Event()

    def poll() -> None:
        read: set[str] = set()
        while not done.is_set() or len(seen) < len(committed):
            if done.is_set() and time.monotonic() > stop_at:
                break
            for d in (changes.glob("batch=*") if changes.is_dir() else []):
                if d.name in read:
                    continue
                read.add(d.name)
                now = time.time()
                for f in d.glob("*.parquet"):
                    for i in pq.read_table(f, columns=["id"]).column("id").to_pylist():
                        seen.setdefault(i, now)
            time.sleep(0.05)

    stop_at = float("inf")
    poller = threading.Thread(target=poll, daemon=True)
    poller.start()
    with contextlib.closing(db.app_connection(schema)) as c, c.cursor() as cur:
        for i in range(first_id, first_id + max(1, seconds * per_second)):
            cur.execute("INSERT INTO probe VALUES (%s, 0)", (i,))
            committed[i] = time.time()
            time.sleep(1.0 / per_second)
    stop_at = time.monotonic() + 30
    done.set()
    poller.join(60)
    began = min(committed.values())
    return [(committed[i] - began, seen[i] - committed[i]) for i in committed if i in seen]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", default="1000000,5000000,10000000", help="snapshot table sizes, comma separated")
    ap.add_argument("--changes", type=int, default=200_000, help="row changes of the catch-up scenario")
    ap.add_argument("--latency-seconds", type=int, default=60)
    ap.add_argument("--latency-rate", type=int, default=500, help="row changes/s of the latency scenario's load")
    ap.add_argument("--latency-trigger", default="1 second", help="the latency scenario's stream.trigger_interval")
    ap.add_argument("--memory-changes", type=int, default=1_000_000, help="row changes of the memory catch-up")
    ap.add_argument("--tables", default="10x100000", help="the many-tables snapshot: COUNTxROWS")
    ap.add_argument("--only", default="snapshot,tables,catchup,latency,memory")
    ap.add_argument("--sinks", default="parquet,jdbc,delta",
                    help="sinks of the snapshot and catch-up scenarios, any of parquet,jdbc,delta; parquet always runs "
                         "(the baseline of the others), jdbc in the catch-up, delta in the snapshot, the catch-up and "
                         "the memory scenario, each right after the parquet run on the same data; both in the ALTERs")
    ap.add_argument("--no-connect", action="store_true",
                    help="skip the snapshot and the catch-up with their tasks on a Spark Connect server")
    ap.add_argument("--chameleon-rows", default="1000000",
                    help="table sizes of --only chameleon, comma separated (not in the default --only: it installs "
                         "pg_chameleon from the package index, and takes minutes a size)")
    ap.add_argument("--alter-changes", type=int, default=100_000,
                    help="row changes of --only alters: the catch-up with an ALTER every --alter-every changes vs the "
                         "same with no DDL (not in the default --only)")
    ap.add_argument("--alter-every", type=int, default=10_000, help="row changes between two ALTERs of --only alters")
    ap.add_argument("--resnapshot-rows", default="1000000",
                    help="table sizes of --only resnapshot, comma separated (not in the default --only)")
    ap.add_argument("--keep", action="store_true", help="keep the work directory")
    args = ap.parse_args()
    only = set(args.only.split(","))
    sinks = [x for x in args.sinks.split(",") if x]
    if not set(sinks) <= {"parquet", "jdbc", "delta"} or "parquet" not in sinks:
        ap.error(f"--sinks {args.sinks!r}: a comma separated list of parquet, jdbc and delta holding parquet "
                 "(the baseline the other sinks are compared with), e.g. --sinks parquet,delta")
    delta = "delta" in sinks
    sizes = [int(x) for x in args.rows.split(",") if x]
    work = Path(tempfile.mkdtemp(prefix="airflow-cdc-bench-"))
    print(f"work directory: {work}")
    t0 = time.monotonic()
    try:
        with PrivateMariaDB(base_dir=work / "mariadb", extra_args=["--innodb-buffer-pool-size=2G"]) as db, \
                PrivatePostgres() as pg:  # its own temp dir: the server runs as user postgres
            bench = Bench(work, db, pg)
            bench.warm_class_archives()
            memory = "memory" in only
            if "snapshot" in only or memory:
                peaks: dict[int, tuple[RssSampler, RssSampler]] = {}
                for rows in sizes:
                    # with the delta sink both sinks' runs are sampled, alike
                    sampler = RssSampler() if memory or delta else None
                    delta_sampler = RssSampler() if delta else None
                    bench.snapshot(rows, sampler, connect="snapshot" in only and not args.no_connect,
                                   delta=delta_sampler)
                    if sampler is not None:
                        bench.results.add(f"memory, snapshot of {rows:,} rows: peak RSS JVM / Python",
                                          f"{mib(sampler.peak_jvm)} / {mib(sampler.peak_python)}", "-", "-",
                                          "flat in size")
                    if delta_sampler is not None:
                        peaks[rows] = (delta_sampler, sampler)
                        bench.results.add(f"memory, snapshot of {rows:,} rows -> delta vs -> parquet: peak RSS JVM / "
                                          "Python driver / all Python", driver_peaks(delta_sampler),
                                          driver_peaks(sampler), "-", "flat in size")
                if len(peaks) > 1:
                    flat_in_rows(bench.results, peaks)
            if "tables" in only:
                count, rows = (int(x) for x in args.tables.lower().split("x"))
                bench.many_tables(count, rows)
            for changes, wanted in ((args.changes, "catchup" in only), (args.memory_changes, memory)):
                if not wanted:
                    continue
                compared = [x for x in sinks if x != "delta"] if "catchup" in only else ["parquet"]
                samplers = {compared[-1]: RssSampler()} if memory else {}
                if delta:  # right after the others, on the same binlog; both it and parquet's run sampled, alike
                    samplers = {**samplers, "parquet": samplers.get("parquet", RssSampler()), "delta": RssSampler()}
                bench.catchup(changes, sinks=(*compared, *(["delta"] if delta else [])), samplers=samplers,
                              connect=changes == args.changes and "catchup" in only and not args.no_connect)
                if memory:
                    sampler = samplers[compared[-1]]
                    bench.results.add(f"memory, catch-up of {changes:,} changes: peak RSS JVM / Python",
                                      f"{mib(sampler.peak_jvm)} / {mib(sampler.peak_python)}", "-", "-",
                                      "flat in changes")
                if delta:
                    bench.results.add(f"memory, catch-up of {changes:,} changes -> delta vs -> parquet: peak RSS JVM "
                                      "/ Python driver / all Python", driver_peaks(samplers["delta"]),
                                      driver_peaks(samplers["parquet"]), "-", "flat in changes")
            if "latency" in only:
                bench.latency(args.latency_seconds, args.latency_rate, args.latency_trigger)
            if "chameleon" in only:
                for rows in (int(x) for x in args.chameleon_rows.split(",") if x):
                    chameleon_side_by_side(bench, rows, args.changes, connect=not args.no_connect)
            if "alters" in only:
                alters_vs_plain(bench, args.alter_changes, args.alter_every, sinks)
            if "resnapshot" in only:
                for rows in (int(x) for x in args.resnapshot_rows.split(",") if x):
                    bench.resnapshot(rows)
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    print(f"\nmake bench: {time.monotonic() - t0:.0f}s on {os.cpu_count()} cores, Spark local[2], "
          "ours and baselines measured in this run\n")
    print(bench.results.table())
    return 0


if __name__ == "__main__":
    sys.exit(main())
