"""The streaming binlog job: binlog source -> emit filter -> ``foreachBatch`` -> sink, checkpointed.

Exactly once: Spark's checkpoint (in the state store) records each batch's offsets before the batch runs;
the sink write of batch ``B`` replaces whatever an interrupted earlier attempt of ``B`` wrote (parquet) or
is a versioned upsert (jdbc). A restart re-runs the unfinished batch over the same offsets.

Modes: ``available_now`` catches up to the position current at start and exits 0; ``continuous`` runs with
a processing-time trigger until SIGTERM/SIGINT or a stop request in the state store, then stops gracefully.
After every batch (and every few seconds while idle) the job writes ``stream/status.json``: ``last_offset``,
``lag_seconds``, ``rows_emitted``, ``updated_at``, ``batch_id``, ``state``, ``pid``.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import threading
import time

from ..core.chunks import TableId
from ..faults import FaultSwitch
from ..jobspec import JobSpec
from ..mysql.planner import connect
from ..mysql.schema import load_schema
from ..mysql.types import TableSinkTypes
from ..sinks import META_COLUMNS, SinkConfig
from ..state import StateStore
from .binlog_source import image_column, source_class_with, source_schema
from .sinks import spark_sink

log = logging.getLogger("airflow_cdc.stream")
IDLE_HEARTBEAT_SECONDS = 5.0
STOP_GRACE_SECONDS = 90


class _GracefulStopHook:
    """A JVM shutdown hook, run before Spark's own hooks stop the SparkContext: it asks the driver loop to stop
    the query and waits until the status says so. Without it, SIGTERM to spark-submit (the JVM is the parent
    of this Python driver) would tear the session down under a running batch."""

    def __init__(self, job: "StreamJob") -> None:
        self.job = job

    def run(self) -> None:
        self.job._stop.set()
        self.job._done.wait(STOP_GRACE_SECONDS)

    class Java:
        implements = ["java.lang.Runnable"]


def _install_stop_hook(spark, job: "StreamJob"):
    from pyspark.java_gateway import ensure_callback_server_started

    gw = spark.sparkContext._gateway
    ensure_callback_server_started(gw)
    jvm = gw.jvm
    # A Java Thread around the Python Runnable: a JVM object with a stable identity, so it can be removed again.
    job._stop_hook_target = _GracefulStopHook(job)  # keep the Python side alive as long as the job
    hook = jvm.java.lang.Thread(job._stop_hook_target)
    # Hadoop's manager runs hooks by priority, highest first; Spark's hooks run inside one at priority 40.
    jvm.org.apache.hadoop.util.ShutdownHookManager.get().addShutdownHook(
        hook, 100, STOP_GRACE_SECONDS + 10, jvm.java.util.concurrent.TimeUnit.SECONDS)
    return hook


def _remove_stop_hook(spark, hook) -> None:
    """After a stop that did not come through the hook: this Python process may be gone when the JVM exits."""
    try:
        spark.sparkContext._gateway.jvm.org.apache.hadoop.util.ShutdownHookManager.get().removeShutdownHook(hook)
    except Exception as exc:  # IllegalStateException: the JVM is shutting down, the hook is running
        log.debug("shutdown hook not removed: %s", exc)


class StreamJob:
    def __init__(self, spark, spec: JobSpec, secrets: dict[str, str]) -> None:
        t0 = time.monotonic()
        self.spark = spark
        self.spec = spec
        self.secrets = secrets
        self.store = StateStore(spec.state_path)
        self.sink = spark_sink(spark, SinkConfig.from_dict(spec.sink), secrets)
        self.faults = FaultSwitch(spec.fault)
        self.mode = spec.stream.get("mode") or "available_now"
        self.rows_emitted = 0
        self.batches = 0
        self.last_batch_id: int | None = None
        self.last_event_ms = 0  # commit time of the newest change written (for the lag while behind)
        self._stop = threading.Event()
        self._done = threading.Event()
        settings = spec.source_settings(secrets)
        with contextlib.closing(connect(settings)) as conn:
            self.types = {
                str(t): TableSinkTypes.of(load_schema(conn, TableId.parse(t), (o or {}).get("chunk_key")))
                for t, o in spec.tables.items()
            }
        self.order = sorted(self.types)  # table i's rows carry their values in the source's image_<i>
        self.image_columns = {t: image_column(i) for i, t in enumerate(self.order)}
        for types in self.types.values():
            self.sink.prepare(types)
        log.info("stream job set up in %.2fs (%d tables)", time.monotonic() - t0, len(self.types))

    # -- one micro-batch -----------------------------------------------------------------------------
    def process_batch(self, batch_df, batch_id: int) -> None:
        from pyspark.sql import functions as F

        t0 = time.monotonic()
        batch_df = batch_df.persist()
        try:
            stats = batch_df.groupBy("table").agg(F.count("*"), F.max("ts_ms")).collect()
            counts = {r[0]: r[1] for r in stats}
            self.last_event_ms = max([self.last_event_ms] + [r[2] or 0 for r in stats])
            t_read = time.monotonic() - t0
            for i, table in enumerate(sorted(counts)):
                types = self.types[table]
                meta = [F.col(src).cast(kind).alias(name) for src, (name, kind) in
                        zip(("op", "ts_ms", "file_seq", "pos", "row"), META_COLUMNS)]
                data = batch_df.filter(F.col("table") == table).select(f"{self.image_columns[table]}.*", *meta)
                self.sink.write_changes(data, types, batch_id, lambda: self.faults.hit("mid_sink_write", f"{table} batch {batch_id}"))
                if i == 0:
                    self.faults.hit("mid_batch", f"batch {batch_id}")
            self.rows_emitted += sum(counts.values())
            self.batches += 1
            self.last_batch_id = batch_id
            log.info("batch %d: %d rows read in %.2fs, written in %.2fs", batch_id, sum(counts.values()), t_read,
                     time.monotonic() - t0 - t_read)
        finally:
            batch_df.unpersist()

    # -- status --------------------------------------------------------------------------------------
    def write_status(self, query, state: str) -> None:
        progress = query.lastProgress if query is not None else None
        end = None
        if progress and progress.get("sources"):
            end = progress["sources"][0].get("endOffset")
            if isinstance(end, str):

                end = json.loads(end)
        lag = 0.0
        if end and end.get("behind") and self.last_event_ms:
            lag = max(0.0, time.time() - self.last_event_ms / 1000.0)
        self.store.write_status({
            "state": state,
            "mode": self.mode,
            "launch_id": self.spec.stream.get("launch_id"),
            "pid": os.getpid(),
            "last_offset": {k: end.get(k) for k in ("file", "pos", "gtid")} if end else None,
            "lag_seconds": round(lag, 3),
            "rows_emitted": self.rows_emitted,
            "batches": self.batches,
            "batch_id": self.last_batch_id,
            "app_id": self.spark.sparkContext.applicationId,
            "ui_url": self.spark.sparkContext.uiWebUrl,
        })

    # -- run -----------------------------------------------------------------------------------------
    def run(self) -> int:
        hook = _install_stop_hook(self.spark, self) if self.mode == "continuous" else None
        try:
            return self._run()
        finally:
            self._done.set()
            if hook is not None:
                _remove_stop_hook(self.spark, hook)

    def _run(self) -> int:
        from pyspark.errors import StreamingQueryException

        self.store.clear_stop()
        self.spark.dataSource.register(source_class_with(self.secrets))
        schema = source_schema([self.types[t].spark_ddl for t in self.order])
        df = (self.spark.readStream.format("airflow_cdc_binlog").option("spec", self.spec.to_json())
              .option("partitions", str(self.spark.sparkContext.defaultParallelism))
              .option("tables", json.dumps(self.order)).option("schema", schema).load())
        writer = df.writeStream.foreachBatch(self.process_batch).option("checkpointLocation", self.store.checkpoint_location)
        if self.mode == "continuous":
            writer = writer.trigger(processingTime=self.spec.stream.get("trigger_interval") or "2 seconds")
        else:
            writer = writer.trigger(availableNow=True)
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: self._stop.set())
        self.write_status(None, "starting")
        t0 = time.monotonic()
        query = writer.start()
        log.info("query started in %.2fs", time.monotonic() - t0)
        last_write, seen_batch = 0.0, None
        state = "finished"
        while True:
            try:
                if query.awaitTermination(1):
                    break
            except StreamingQueryException:  # the query failed; reported below from query.exception()
                break
            if self.last_batch_id != seen_batch or time.time() - last_write > IDLE_HEARTBEAT_SECONDS:
                self.write_status(query, "running")
                last_write, seen_batch = time.time(), self.last_batch_id
            if self._stop.is_set() or self.store.stop_requested():
                log.info("stop requested: stopping the stream after the current batch")
                query.stop()
                state = "stopped"
                break
        error = query.exception()
        if error is not None:
            self.write_status(query, "failed")
            log.error("stream failed: %s", error)
            return 1
        self.write_status(query, state)
        log.info("stream %s: %d batches, %d rows emitted", state, self.batches, self.rows_emitted)
        return 0


def run_stream(spark, spec: JobSpec, secrets: dict[str, str]) -> int:
    return StreamJob(spark, spec, secrets).run()
