"""The stream's catch-up over a binlog with ALTERs it applies in place, against the same catch-up with no DDL
(``--only alters``).

On one sysbench table, with a parquet pipeline (and a jdbc or delta one with ``--sinks ... jdbc,delta``),
snapshotted first:

* **plain**: ``changes`` row changes of sysbench oltp_write_only, then each pipeline's catch-up (a DAG run; the
  stream task's time, ``available_now``);
* **alters**: the same number of row changes with one ALTER TABLE in the middle of every ``every`` of them,
  then the catch-ups;
* **plain again**: as the first, so that the machine's drift within the run shows (the ALTER run is compared
  with the mean of the two).

The ALTERs rotate through the kinds the stream applies in place: ``ADD COLUMN a<n> INT NOT NULL DEFAULT <n>``,
``MODIFY w<n> BIGINT NOT NULL DEFAULT 0`` (from INT), ``CHANGE r<n> r<n>_renamed INT NOT NULL DEFAULT 0`` (a
rename, same type) and ``DROP COLUMN d<n>``. ``n`` is the ALTER's number. The columns modified, renamed and
dropped are added (and given values) before the snapshot, and every column is the subject of at most one ALTER:
an ALTER is applied in place only if what it adds or redefines is still on the source, as it defined it, when the
stream gets there (here, after the whole load), so no later ALTER may drop, rename or retype it again. The
outcome is checked all the same: the state store's schema changes (``evolve`` for each ALTER, no ``resync``).

The stream job records the versions of its first batch's ALTERs before its query starts (the batch's statements
read ahead); ALTERs of a later batch are recorded when that batch is planned, and the query restarts from its
checkpoint before any task reads it (``DefinitionsChanged``); a task that meets an ALTER no one recorded fails
its batch, which then restarts the same way. Where the time goes comes from the stream task's
log (the job's ``query started`` and ``table definition changed`` lines, Spark's first failed task, the call of
the batch function, each line's time as Airflow read it) and from Spark's event log of the stream job (its jobs'
start and end). Both sides run with the event log on. At the end each sink's table is compared with MariaDB's:
row count and a checksum of every column, by name, in the source's order.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import hashlib
import json
import re
import shutil
import subprocess
import statistics
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Sequence

from airflow_cdc_provider.core.schema_changes import EVOLVE, RESYNC
from airflow_cdc_provider.sinks.parquet_arrow import read_current_state
from airflow_cdc_provider.sinks.postgres import mirror_table_name
from airflow_cdc_provider.state.store import StateStore
from airflow_cdc_provider.testing.sysbench import sysbench

if TYPE_CHECKING:
    from run import Bench

TABLE_ROWS = 100_000
CHANGES_PER_EVENT = 4  # oltp_write_only: 2 updates, 1 delete, 1 insert per transaction
KINDS = ("add", "modify", "change", "drop")
GOAL = 0.90


def alter_sequence(count: int) -> tuple[list[str], list[str]]:
    """(the INT columns the table needs before the snapshot, the ``count`` ALTERs in binlog order)."""
    before, alters = [], []
    for i in range(count):
        n, kind = i + 1, KINDS[i % len(KINDS)]
        if kind == "add":
            alters.append(f"ALTER TABLE sbtest1 ADD COLUMN a{n} INT NOT NULL DEFAULT {n}")
        elif kind == "modify":
            before.append(f"w{n}")
            alters.append(f"ALTER TABLE sbtest1 MODIFY w{n} BIGINT NOT NULL DEFAULT 0")
        elif kind == "change":
            before.append(f"r{n}")
            alters.append(f"ALTER TABLE sbtest1 CHANGE r{n} r{n}_renamed INT NOT NULL DEFAULT 0")
        else:
            before.append(f"d{n}")
            alters.append(f"ALTER TABLE sbtest1 DROP COLUMN d{n}")
    return before, alters


# -- the sink against the source ------------------------------------------------------------------------------
def _text(value: Any) -> str:
    if value is None:
        return "\\N"
    if isinstance(value, str):
        return value.rstrip(" ")  # CHAR: MariaDB gives it without its trailing blanks
    return str(value)


def checksum(rows: Iterable[Sequence[Any]]) -> tuple[int, int]:
    """(rows, the sum of the first 15 hex digits of the md5 of each row's values joined by '|')."""
    count = total = 0
    for row in rows:
        count += 1
        total += int(hashlib.md5("|".join(map(_text, row)).encode()).hexdigest()[:15], 16)
    return count, total


def source_columns(bench: "Bench", db: str) -> list[str]:
    with contextlib.closing(bench.db.app_connection()) as c, c.cursor() as cur:
        cur.execute("SELECT column_name FROM information_schema.columns WHERE table_schema = %s AND table_name = "
                    "'sbtest1' ORDER BY ordinal_position", (db,))
        return [r[0] for r in cur.fetchall()]


def source_checksum(bench: "Bench", db: str, columns: list[str]) -> tuple[int, int]:
    with contextlib.closing(bench.db.app_connection()) as c, c.cursor() as cur:
        cur.execute(f"SELECT {', '.join(f'`{x}`' for x in columns)} FROM `{db}`.sbtest1")
        return checksum(cur.fetchall())


def sink_checksum(bench: "Bench", dag_id: str, sink: str, db: str, columns: list[str]) -> tuple[int, int] | str:
    """The sink's current table as a checksum, or why it cannot be compared (its columns are not the source's)."""
    if sink == "parquet":
        table = read_current_state(str(bench.work / dag_id / "sink"), f"{db}.sbtest1", ["id"])
        have = table.column_names
        if sorted(have) != sorted(columns):
            return f"columns differ: {', '.join(sorted(set(have) ^ set(columns)))}"
        return checksum(zip(*(table[x].to_pylist() for x in columns)))
    if sink == "delta":
        import deltalake

        dt_ = deltalake.DeltaTable(str(bench.work / dag_id / "sink" / f"{db}.sbtest1"))
        have = [f.name for f in dt_.schema().fields if not f.name.startswith("_cdc_")]
        if sorted(have) != sorted(columns):
            return f"columns differ: {', '.join(sorted(set(have) ^ set(columns)))}"
        live = dt_.to_pyarrow_table(columns=columns, filters=[("_cdc_deleted", "=", False)])
        return checksum(zip(*(live.column(x).to_pylist() for x in columns)))
    with contextlib.closing(bench.pg.connect()) as conn, conn.cursor() as cur:
        name = mirror_table_name(f"{db}.sbtest1")
        cur.execute("SELECT column_name FROM information_schema.columns WHERE table_schema = %s AND table_name = %s",
                    (dag_id, name))
        have = [r[0] for r in cur.fetchall() if not r[0].startswith("_cdc_")]
        if sorted(have) != sorted(columns):
            return f"columns differ: {', '.join(sorted(set(have) ^ set(columns)))}"
        cur.execute(f'SELECT {", ".join(chr(34) + x + chr(34) for x in columns)} FROM "{dag_id}"."{name}" '
                    "WHERE NOT _cdc_deleted")
        return checksum(cur.fetchall())


# -- where the time goes --------------------------------------------------------------------------------------
DEFINITION_CHANGED = "table definition changed"
# a line of the stream task's log: the time Airflow read it from spark-submit's output (the same clock for the
# job's own lines and Spark's), then the line
_LOG_LINE = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d+)Z \[\w+ *\] (.*?)(?: \[airflow\.task[^\]]*\] loc=\S+)?$",
                       re.M)
_JOB_LINE = re.compile(r"INFO airflow_cdc\.stream: (.*)$")
_MARKS = (("failed", re.compile(r"ERROR Executor: Exception in task")),
          ("called", re.compile(r"INFO py4j\.clientserver: Received command c on object id")))


def stream_events(log: str) -> list[tuple[float, str]]:
    """The events of the stream task's log, in order: (time, what). ``what`` is the job's own message
    (``airflow_cdc.stream``), ``failed`` (a Spark task failed) or ``called`` (Spark called the job's batch
    function: the batch's write starts)."""
    events = []
    for m in _LOG_LINE.finditer(log):
        when = dt.datetime.strptime(m.group(1)[:26], "%Y-%m-%dT%H:%M:%S.%f").replace(
            tzinfo=dt.timezone.utc).timestamp()
        job = _JOB_LINE.search(m.group(2))
        if job is not None:
            events.append((when, job.group(1)))
            continue
        events += [(when, mark) for mark, pattern in _MARKS if pattern.search(m.group(2))]
    return events


def restart_costs(log: str) -> dict[str, list[float]]:
    """Where each failed batch attempt and restart went, one entry per ``table definition changed`` line of the
    stream job, from the query's start before it to the next query's start: ``to_batch`` (query started to
    the batch function called: Spark takes the batch up from its checkpoint), ``to_failure`` (to the first
    failed task: the read up to the ALTER), ``propagation`` (to the job's ``table definition changed`` line:
    the other tasks cancelled, the query ended, the job's poll), ``restart`` (to the next query's start: the
    job set up again and its query started), and the job's own ``setup`` and ``query_start`` of the restart."""
    events = stream_events(log)
    costs: dict[str, list[float]] = {k: [] for k in ("attempt", "to_batch", "to_failure", "propagation", "restart",
                                                     "setup", "query_start")}
    started = called = failed = None
    for i, (t, what) in enumerate(events):
        if what.startswith("query started in "):
            started, called, failed = t, None, None
        elif what == "called" and called is None:
            called = t
        elif what == "failed" and failed is None:
            failed = t
        elif DEFINITION_CHANGED in what and started is not None:
            costs["attempt"].append(t - started)
            if called is not None and failed is not None and started <= called <= failed:
                costs["to_batch"].append(called - started)
                costs["to_failure"].append(failed - called)
                costs["propagation"].append(t - failed)
            following = next(((u, w) for u, w in events[i + 1:] if w.startswith("query started in ")), None)
            setup = next((w for _, w in events[i + 1:] if w.startswith("stream job set up in ")), None)
            if following is not None:
                costs["restart"].append(following[0] - t)
                costs["query_start"].append(float(following[1].split()[3].rstrip("s")))
            if setup is not None:
                costs["setup"].append(float(setup.split()[5].rstrip("s")))
    return costs


_AHEAD = re.compile(r"the first batch's ALTERs read in ([\d.]+)s: (.*)$")


def read_ahead(log: str) -> tuple[int, float]:
    """The versions the stream job recorded before its query started, and the seconds that took."""
    found = [(len(m.group(2).split(", ")), float(m.group(1))) for _, w in stream_events(log) if (m := _AHEAD.match(w))]
    return sum(n for n, _ in found), sum(s for _, s in found)


_BATCH = re.compile(r"batch \d+: (\d+) rows read and written in ([\d.]+)s")


def batch_lines(log: str) -> list[tuple[int, float]]:
    """The job's written batches: (rows, seconds from the batch function's call to the write's end)."""
    return [(int(m.group(1)), float(m.group(2))) for _, w in stream_events(log) if (m := _BATCH.match(w))]


def spark_jobs(event_log: Path) -> list[tuple[float, float, bool, str]]:
    """The Spark jobs of an application's event log: (start, end, succeeded, the name of its first stage)."""
    starts, jobs = {}, []
    for line in event_log.read_text(errors="replace").splitlines():
        if '"SparkListenerJob' not in line[:40]:
            continue
        event = json.loads(line)
        if event["Event"] == "SparkListenerJobStart":
            stages = event.get("Stage Infos") or [{}]
            starts[event["Job ID"]] = (event["Submission Time"] / 1000, min(stages, key=lambda x: x.get(
                "Stage ID", 0)).get("Stage Name", "?"))
        elif event["Event"] == "SparkListenerJobEnd" and event["Job ID"] in starts:
            start, name = starts.pop(event["Job ID"])
            jobs.append((start, event["Completion Time"] / 1000,
                         event.get("Job Result", {}).get("Result") == "JobSucceeded", name))
    return sorted(jobs)


_APP_NAME = re.compile(r'"App Name":"([^"]*)"')


def stream_event_log(directory: Path, before: set[Path]) -> Path | None:
    """The event log of the stream job among the applications that logged to ``directory`` since ``before``."""
    for path in sorted(set(directory.iterdir()) - before, key=lambda p: p.stat().st_mtime, reverse=True):
        name = _APP_NAME.search(path.read_text(errors="replace"))
        if name is not None and name.group(1).endswith(" stream"):
            return path
    return None


def mean(values: Sequence[float]) -> float:
    return statistics.mean(values) if values else float("nan")


# -- the scenario ---------------------------------------------------------------------------------------------
class Load:
    """Row changes of sysbench oltp_write_only in blocks of ``every``, with an ALTER in the middle of each block
    when there are ALTERs."""

    def __init__(self, bench: "Bench", db: str, every: int) -> None:
        self.bench, self.db, self.every = bench, db, every

    def run(self, blocks: int, alters: list[str] | None) -> float:
        half = self.every // 2 // CHANGES_PER_EVENT
        t = time.monotonic()
        for i in range(blocks):
            sysbench(self.bench.db, self.db, "run", TABLE_ROWS, "--threads=2", "--time=0", f"--events={half}")
            if alters:
                with contextlib.closing(self.bench.db.app_connection(self.db)) as c, c.cursor() as cur:
                    cur.execute(alters[i])
            sysbench(self.bench.db, self.db, "run", TABLE_ROWS, "--threads=2", "--time=0", f"--events={half}")
        return time.monotonic() - t


def last_query_jobs(log: str, jobs: list[tuple[float, float, bool, str]]) -> list[tuple[float, str]]:
    """The Spark jobs of the stream's last query (after its last ``query started`` line), succeeded: (seconds,
    name)."""
    starts = [t for t, w in stream_events(log) if w.startswith("query started in ")]
    since = starts[-1] if starts else 0.0
    return [(end - start, name) for start, end, ok, name in jobs if ok and start >= since]


def describe_jobs(jobs: list[tuple[float, str]]) -> str:
    if not jobs:
        return "no event log"
    return f"{len(jobs)} job(s): " + " + ".join(f"{seconds:.1f}" for seconds, _ in jobs) + " s"


def code_state() -> str:
    """The code measured: the commit, and the files under ``airflow_cdc_provider/`` that differ from it (the
    working tree may be shared)."""
    root = Path(__file__).resolve().parent.parent
    head = subprocess.run(["git", "-C", str(root), "rev-parse", "--short", "HEAD"], capture_output=True,
                          text=True).stdout.strip()
    diff = subprocess.run(["git", "-C", str(root), "diff", "HEAD", "--", "airflow_cdc_provider"], capture_output=True,
                          text=True).stdout
    if not diff:
        return f"commit {head or '?'}"
    files = diff.count("\ndiff --git ") + diff.startswith("diff --git ")
    digest = hashlib.sha1(diff.encode()).hexdigest()[:8]
    return f"commit {head or '?'} + uncommitted changes in {files} file(s) (diff {digest})"


def alters_vs_plain(bench: "Bench", changes: int, every: int, sinks: Sequence[str]) -> None:
    """The catch-up of ``changes`` row changes with an ALTER every ``every`` of them, against the same number of
    changes with no DDL, for each of ``sinks`` (parquet, jdbc, delta)."""
    blocks = max(1, changes // every)
    changes = blocks * every
    db = "alt"
    print(f"\n== stream catch-up of {changes} row changes with an ALTER every {every} ({blocks} ALTERs) vs none",
          flush=True)
    t0 = time.monotonic()
    code = code_state()
    print(f"  code: {code}", flush=True)
    bench.prepare(db, TABLE_ROWS)
    before, alters = alter_sequence(blocks)
    if before:
        with contextlib.closing(bench.db.app_connection(db)) as c, c.cursor() as cur:
            cur.execute("ALTER TABLE sbtest1 " + ", ".join(f"ADD COLUMN {x} INT NOT NULL DEFAULT 0" for x in before))
            cur.execute("UPDATE sbtest1 SET " + ", ".join(f"{x} = (id * {i + 7}) % 1000" for i, x in enumerate(before)))
    dags = {sink: f"{db}_{sink}" for sink in sinks}
    events = {sink: bench.work / f"{dag_id}-events" for sink, dag_id in dags.items()}
    for sink, dag_id in dags.items():
        # Spark's event log: when each job of a batch started and ended (the same in every run compared)
        events[sink].mkdir()
        conf = {"spark.eventLog.enabled": "true", "spark.eventLog.dir": events[sink].as_uri(),
                "spark.eventLog.compress": "false", "spark.eventLog.rolling.enabled": "false"}
        bench.pipeline(dag_id, [f"{db}.sbtest1"], sink=sink, stream={"mode": "available_now"}, spark={"conf": conf})
        bench.run(dag_id)  # snapshot + an empty stream
    load = Load(bench, db, every)
    runs: dict[tuple[str, str], dict[str, Any]] = {}
    for phase in ("plain", "alters", "plain again"):
        seconds = load.run(blocks, alters if phase == "alters" else None)
        print(f"  {phase}: {changes} row changes{f' and {blocks} ALTERs' if phase == 'alters' else ''} made in "
              f"{seconds:.0f}s", flush=True)
        for sink, dag_id in dags.items():
            logged = set(events[sink].iterdir())
            res = bench.run(dag_id)
            stream = next(t for t in res["tis"] if t["task_id"] == "stream")
            kept = bench.work / f"{dag_id}-{phase.replace(' ', '-')}.log"
            shutil.copyfile(bench.work / f"{dag_id}.log", kept)
            log = kept.read_text(errors="replace")
            event_log = stream_event_log(events[sink], logged)
            jobs = last_query_jobs(log, spark_jobs(event_log)) if event_log else []
            run = runs[(phase, sink)] = {"emitted": res["xcom"]["stream[-1]"]["rows_emitted"],
                                         "took": stream["end"] - stream["start"], "log": log,
                                         "batches": batch_lines(log), "jobs": jobs}
            print(f"  {phase} -> {sink}: {run['emitted']} rows in {run['took']:.1f}s (stream task); written "
                  f"batches {run['batches']}; the last query's Spark jobs: {describe_jobs(jobs)}; log {kept}",
                  flush=True)
    columns = source_columns(bench, db)
    source = source_checksum(bench, db, columns)
    print(f"  scenario: {time.monotonic() - t0:.0f}s", flush=True)
    code_after = code_state()
    bench.results.add("alters: the code measured", code if code_after == code else f"{code}, then {code_after}",
                      "-", "-" if code_after == code else "CHANGED during the run", "-")

    for sink, dag_id in dags.items():
        plain = [runs[(p, sink)] for p in ("plain", "plain again")]
        rates = [r["emitted"] / r["took"] for r in plain]
        base = statistics.mean(rates)
        run = runs[("alters", sink)]
        ours = run["emitted"] / run["took"]
        bench.results.add(f"alters: catch-up of {changes:,} changes with {blocks} ALTERs (one every {every:,} "
                          f"changes) -> {sink} vs the same with no DDL (stream task)", f"{ours:,.0f} rows/s",
                          f"{base:,.0f} rows/s (before {rates[0]:,.0f}, after {rates[1]:,.0f})",
                          f"{ours / base:.2f}x throughput", f">= {GOAL:.2f}x")
        costs = restart_costs(run["log"])
        restarts = len(costs["restart"])
        plain_took = statistics.mean(r["took"] for r in plain)
        batch = sum(x for _, x in run["batches"])
        plain_batch = statistics.mean(sum(x for _, x in r["batches"]) for r in plain)
        lost = sum(costs["attempt"]) + sum(costs["restart"])
        bench.results.add(f"  same: stream task time with the ALTERs vs without; of the difference: {restarts} failed "
                          "attempts and restarts / the written batches' extra time / the rest",
                          f"{run['took']:.1f} s", f"{plain_took:.1f} s",
                          f"+{run['took'] - plain_took:.1f} s: {lost:.1f} / {batch - plain_batch:.1f} / "
                          f"{run['took'] - plain_took - lost - (batch - plain_batch):.1f} s", "(where the time goes)")
        ahead, ahead_took = read_ahead(run["log"])
        bench.results.add("  same: versions recorded before the query started (the first batch's statements read "
                          "and its ALTERs recorded)", f"{ahead} in {ahead_took:.2f} s", f"{blocks} ALTERs", "-",
                          "(where the time goes)")
        if restarts:
            bench.results.add(f"  same, per query restart ({restarts} for {blocks} ALTERs): failed batch attempt "
                              "(query started -> batch function called -> first failed task -> the job's 'table "
                              "definition changed' line) + restart (-> next query started; of it, the job's set-up and "
                              "its query's start)",
                              f"{mean(costs['attempt']):.2f} s ({mean(costs['to_batch']):.2f} + "
                              f"{mean(costs['to_failure']):.2f} + {mean(costs['propagation']):.2f}) + "
                              f"{mean(costs['restart']):.2f} s ({mean(costs['setup']):.2f}, "
                              f"{mean(costs['query_start']):.2f})", "-",
                              f"{mean(costs['attempt']) + mean(costs['restart']):.2f} s a restart, "
                              f"{lost / blocks:.2f} s an ALTER", "(where the time goes)")
        bench.results.add("  same: the written batch (batch function called to written) with the ALTERs vs without; "
                          "the Spark jobs of the query that wrote it", f"{batch:.1f} s: {describe_jobs(run['jobs'])}",
                          f"{plain_batch:.1f} s: {describe_jobs(plain[0]['jobs'])}",
                          f"{batch / plain_batch:.2f}x time" if plain_batch else "-", "(where the time goes)")
        kinds = [c.kind for c in StateStore(bench.work / dag_id / "state").schema_changes()]
        seen = (kinds.count(EVOLVE), kinds.count(RESYNC))
        bench.results.add("  same: schema changes the state store recorded, evolve / resync (query restarts: "
                          f"{restarts})", " / ".join(map(str, seen)), f"{blocks} ALTERs",
                          "match" if seen == (blocks, 0) else "DIFFERS", f"{blocks} / 0")
        replica = sink_checksum(bench, dag_id, sink, db, columns)
        if isinstance(replica, str):
            bench.results.add(f"  same: {sink} sink vs MariaDB at the end (count + checksum of every column)",
                              replica, f"{source[0]:,} rows, sum {source[1]}", "DIVERGED", "match")
        else:
            bench.results.add(f"  same: {sink} sink vs MariaDB at the end (count + checksum of {len(columns)} columns)",
                              f"{replica[0]:,} rows, sum {replica[1]}", f"{source[0]:,} rows, sum {source[1]}",
                              "match" if replica == source else "DIVERGED", "match")
