"""Driving the Spark jobs the way the operators do (spark-submit, spec file, secrets file), and reading
source and sink independently for comparisons."""

from __future__ import annotations

import contextlib
import datetime as dt
import itertools
import os
import signal
import subprocess
import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from airflow_cdc_provider.core.chunks import Chunk, SplitOptions, TableId
from airflow_cdc_provider.pipeline.collect import collect_watermarks
from airflow_cdc_provider.pipeline.config import StreamConfig
from airflow_cdc_provider.pipeline.jobspec import JobSpec
from airflow_cdc_provider.pipeline.plan import plan_chunks
from airflow_cdc_provider.sinks.base import SinkConfig
from airflow_cdc_provider.sinks.registry import open_sink
from airflow_cdc_provider.sinks.types import TableSinkTypes
from airflow_cdc_provider.source.schema import load_schema
from airflow_cdc_provider.source.sql import quote_ident, quote_table
from airflow_cdc_provider.source.values import RowCanonicalizer
from airflow_cdc_provider.state.records import StreamSeed, TablePlan
from airflow_cdc_provider.state.store import StateStore
from airflow_cdc_provider.testing.spark import submit

_server_ids = itertools.count(8001)


def parquet_sink(tmp: Path) -> SinkConfig:
    return SinkConfig(type="parquet", path=str(tmp / "sink"))


def delta_sink(tmp: Path) -> SinkConfig:
    return SinkConfig(type="delta", path=str(tmp / "delta"))


def jdbc_sink(postgres, schema: str) -> SinkConfig:
    return SinkConfig(type="jdbc", conn={"conn_id": "pg", "host": "127.0.0.1", "port": postgres.port,
                                         "login": postgres.user, "schema": postgres.database}, schema=schema)


def jdbc_pipeline_sink(env: dict, postgres, source_db) -> tuple[dict, str, SinkConfig, dict]:
    """A pipeline YAML's jdbc sink into schema ``s_<database>`` of the test PostgreSQL: the DAG runs' environment
    with its connection, the YAML section, the sink as the jobs get it, and its secrets."""
    schema = f"s_{source_db.name}"
    secrets = {"source_password": source_db.settings.password, "sink_password": postgres.password}
    return ({**env, "AIRFLOW_CONN_PG": postgres.connection_uri()},
            f"sink:\n  type: jdbc\n  conn_id: pg\n  schema: {schema}\n", jdbc_sink(postgres, schema), secrets)


class Pipeline:
    """One pipeline over tables of a test database: snapshot jobs, collect, stream jobs."""

    def __init__(self, source_db, tmp: Path, sink: SinkConfig, tables: list[str], postgres=None,
                 chunk_size: int = 1000, chunk_keys: dict[str, str] | None = None) -> None:
        self.db = source_db
        self.tmp = tmp
        self.sink = sink
        self.tables = [source_db.table(t) for t in tables]
        self.chunk_keys = {source_db.table(t): k for t, k in (chunk_keys or {}).items()}  # source.chunk_key
        self.chunk_size = chunk_size
        self.state = StateStore(tmp / "state")
        self.secrets = {"source_password": source_db.settings.password}
        if postgres is not None:
            self.secrets["sink_password"] = postgres.password
        self.planned: dict[str, TablePlan] = {}

    def spec(self, **kw: Any) -> JobSpec:
        return JobSpec(pipeline="test", source=self.db.settings, tables={t: self.chunk_keys.get(t) for t in self.tables},
                       sink=self.sink, state_path=self.state.uri, server_id=next(_server_ids), **kw)

    def plan(self) -> list[Chunk]:
        plan = plan_chunks(self.db.settings, self.tables, SplitOptions(self.chunk_size), self.chunk_keys)
        epoch = int(time.time() * 1000)
        chunks = [replace(c, epoch=epoch) for c in plan.chunks]
        self.planned = {t: TablePlan(epoch, sum(1 for c in chunks if str(c.table) == t)) for t in self.tables}
        return chunks

    def snapshot(self, chunks: list[Chunk], fault: dict | None = None, check: bool = True):
        res = submit("snapshot_chunk", self.spec(chunks=chunks, fault=fault), self.secrets, self.tmp / "jobs")
        if check:
            assert res.returncode == 0, self.last_log("snapshot_chunk")
        return res

    def collect(self) -> StreamSeed:
        return collect_watermarks(self.state, open_sink(self.sink, self.secrets), self.planned)

    def stream(self, fault: dict | None = None, check: bool = True, max_bytes: int = 64 * 2**20, **stream: Any):
        """``max_bytes``: binlog bytes per batch; segments of 20 kB, so that small tests read batches with
        several Spark tasks in parallel, as large ones do; and for the same reason, written by the executors
        unless ``driver_batch_bytes`` says otherwise."""
        stream.setdefault("driver_batch_bytes", 0)
        spec = self.spec(stream=StreamConfig(mode="available_now", max_batch_bytes=max_bytes, min_segment_bytes=20_000,
                                             **stream), fault=fault)
        res = submit("binlog_stream", spec, self.secrets, self.tmp / "jobs")
        if check:
            assert res.returncode == 0, self.last_log("binlog_stream")
        return res

    @contextlib.contextmanager
    def continuous_stream(self, fault: dict | None = None, **stream: Any):
        """The stream job in ``continuous`` mode in the background (its own process group), yielded as its
        Popen once its status says running; stopped on the way out if the test left it running."""
        stream.setdefault("driver_batch_bytes", 0)
        spec = self.spec(stream=StreamConfig(mode="continuous", trigger_interval="1 second", **stream), fault=fault)
        proc = submit("binlog_stream", spec, self.secrets, self.tmp / "jobs", background=True)
        try:
            wait_until(lambda: stream_state(self.state) == "running", "the stream to run")
            yield proc
        finally:
            if proc.poll() is None:
                self.state.request_stop()
                try:
                    proc.wait(120)
                except subprocess.TimeoutExpired:
                    os.killpg(proc.pid, signal.SIGKILL)

    def last_log(self, app: str, tail: int | None = 6000) -> str:
        """The newest log of job ``app`` without Spark's WARN lines: its last ``tail`` characters (None: all)."""
        logs = sorted((self.tmp / "jobs").glob(f"{app}-*.log"), key=lambda p: p.stat().st_mtime)
        text = logs[-1].read_text(errors="replace") if logs else "(no log)"
        text = "\n".join(line for line in text.splitlines() if " WARN " not in line)
        return text if tail is None else text[-tail:]


def stream_state(state: StateStore) -> str | None:
    status = state.read_status()
    return status.state if status else None


def rows_emitted(state: StateStore) -> int:
    status = state.read_status()
    return status.rows_emitted if status else 0


def wait_until(condition, what: str, timeout: float = 120.0, interval: float = 0.5) -> Any:
    """Poll ``condition`` until it returns something truthy; fail naming ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(interval)


def paused_snapshot(p: Pipeline, chunks, marker: Path, commit, match: str | None = None) -> None:
    """Snapshot ``chunks`` in one job whose window (the first, or the chunk whose id ``match`` names) pauses after
    its SELECT; ``commit()`` runs inside the pause, which ends as soon as ``commit()`` returns."""
    release = marker.with_name(marker.name + ".release")
    fault = {"point": "after_select", "action": "pause", "seconds": 600, "once": str(marker), "until": str(release)}
    if match is not None:
        fault["match"] = match
    job = threading.Thread(target=lambda: p.snapshot(chunks, fault=fault), daemon=True)
    job.start()
    wait_until(marker.exists, "the window to pause after its SELECT", 300)
    try:
        commit()
    finally:
        release.touch()
    job.join(600)
    assert not job.is_alive()


def normalize(v: Any) -> Any:
    if isinstance(v, (bytearray, memoryview)):
        return bytes(v)
    if isinstance(v, dt.datetime) and v.tzinfo is not None:
        return v.astimezone(dt.timezone.utc).replace(tzinfo=None)
    return v


def source_rows(source_db, table: str, chunk_key: str | None = None) -> dict[tuple, tuple]:
    """The source table through pymysql + the canonical/sink conversion (no Spark involved), by its primary key
    or ``chunk_key``."""
    with source_db.connection() as conn:
        schema = load_schema(conn, TableId.parse(source_db.table(table)), chunk_key)
        canon, types = RowCanonicalizer(schema), TableSinkTypes.of(schema)
        with conn.cursor() as cur:
            # a FLOAT as a DOUBLE: the server prints a FLOAT to 6 significant digits
            cols = [f"CAST({quote_ident(c.name)} AS DOUBLE)" if c.data_type == "float" and c.numeric_scale is None
                    else quote_ident(c.name) for c in schema.columns]
            cur.execute(f"SELECT {', '.join(cols)} FROM {quote_table(schema.table)}", ())
            rows = [types.row_to_sink(canon.from_select(r)) for r in cur.fetchall()]
    idx = [schema.column_names.index(k) for k in schema.key_columns]
    return {tuple(normalize(r[i]) for i in idx): tuple(normalize(v) for v in r) for r in rows}


def table_types(source_db, table: str, chunk_key: str | None = None) -> TableSinkTypes:
    with source_db.connection() as conn:
        return TableSinkTypes.of(load_schema(conn, TableId.parse(source_db.table(table)), chunk_key))


def sink_rows(spark, sink_cfg: SinkConfig, secrets: dict, types: TableSinkTypes) -> dict[tuple, tuple]:
    df = open_sink(sink_cfg, secrets, spark).current_state(types)
    idx = [types.schema.column_names.index(k) for k in types.schema.key_columns]
    out = {}
    for r in df.collect():
        row = tuple(normalize(v) for v in r)
        out[tuple(row[i] for i in idx)] = row
    return out


class ThreadedWriter:
    """Writes to a table of ``database`` from a thread until stopped: ``write(cur)`` once per operation, ``pause``
    seconds apart. An error of the thread is raised on the way out."""

    def __init__(self, server, database: str, pause: float = 0.0) -> None:
        self.server, self.database, self.pause = server, database, pause
        self.ops = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self.error: BaseException | None = None

    def write(self, cur) -> None:
        raise NotImplementedError

    def _run(self) -> None:
        try:
            with contextlib.closing(self.server.app_connection(self.database)) as conn, conn.cursor() as cur:
                while not self._stop.wait(self.pause):
                    self.write(cur)
                    self.ops += 1
        except BaseException as exc:  # surfaced by stop()
            self.error = exc

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(30)
        if self.error:
            raise self.error


class BackgroundWriter(ThreadedWriter):
    """Inserts, updates (also of the key) and deletes rows of ``orders(id, v, note)`` until stopped."""

    def __init__(self, server, database: str, key_space: int, seed: int = 7, rate: float | None = None) -> None:
        """``rate``: operations per second (default: as fast as the server takes them)."""
        import random

        super().__init__(server, database, 1.0 / rate if rate else 0.0)
        self.key_space = key_space
        self.rng = random.Random(seed)

    def write(self, cur) -> None:
        k = self.rng.randrange(1, self.key_space)
        op = self.rng.random()
        if op < 0.3:
            cur.execute("INSERT IGNORE INTO orders VALUES (%s, %s, 'ins')", (k, self.ops))
        elif op < 0.7:
            cur.execute("UPDATE orders SET v = v + 1, note = 'upd' WHERE id = %s", (k,))
        elif op < 0.9:
            cur.execute("DELETE FROM orders WHERE id = %s", (k,))
        else:
            cur.execute("UPDATE IGNORE orders SET id = %s WHERE id = %s", (self.key_space + k, k))


def write_pipeline(pipelines: Path, db, tmp_path: Path, extra: str = "", tables=("orders", "customers"),
                   sink: str | None = None, dag_id: str = "shop_cdc", chunk_size: int = 2000,
                   rows_per_task: int | None = None) -> Path:
    """A pipeline YAML over ``tables`` of the test database (parquet sink under tmp_path unless ``sink``);
    chunks share mapped tasks by the default ``rows_per_task`` unless it is given."""
    p = pipelines / f"{dag_id}.yaml"
    names = ", ".join(db.table(t) for t in tables)
    sink = sink or f"sink:\n  type: parquet\n  path: {tmp_path / 'sink'}\n"
    p.write_text(
        f"dag_id: {dag_id}\nsource:\n  conn_id: src\n  tables: [{names}]\n"
        f"snapshot:\n  chunk_size: {chunk_size}\n  max_active_chunks: 1\n"
        + (f"  rows_per_task: {rows_per_task}\n" if rows_per_task else "") + sink +
        f"state:\n  path: {tmp_path / 'state'}\ndefault_args:\n  retries: 1\n  retry_delay: 0\n{extra}"
    )
    return p
