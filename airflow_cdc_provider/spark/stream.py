"""The streaming binlog job: binlog source -> emit filter -> ``foreachBatch`` -> sink, checkpointed.

Exactly once: Spark's checkpoint (in the state store) records each batch's offsets before the batch runs;
the sink write of batch ``B`` replaces whatever an interrupted earlier attempt of ``B`` wrote (parquet) or
is a versioned upsert (jdbc). A restart re-runs the unfinished batch over the same offsets.

Modes: ``available_now`` catches up to the position current at start and exits 0; ``continuous`` runs with
a processing-time trigger until SIGTERM/SIGINT or a stop request in the state store, then stops gracefully.
After every batch (and every few seconds while idle) the job writes ``stream/status.json``: ``last_offset``,
``lag_seconds``, ``rows_emitted``, ``updated_at``, ``batch_id``, ``state``, ``pid``.

On a Spark Connect session (``spark.connect_conn_id``, ``available_now`` only) the same job runs in the
Airflow task's process: the source's reads and the ``foreachBatch`` function (``BatchWriter``, pickled) run
in Python processes of the server, so the writer publishes its totals to the state store for the status.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import logging
import os
import signal
import threading
import time
from functools import partial
from typing import Any

from airflow_cdc_provider.compat import pyspark_internals
from airflow_cdc_provider.core.chunks import TableId
from airflow_cdc_provider.core.offsets import BinlogOffset, EventPosition
from airflow_cdc_provider.core.schema_changes import EVOLVE, KIND_OF_OP, RESYNC, SchemaChange
from airflow_cdc_provider.pipeline.faults import FaultSwitch
from airflow_cdc_provider.pipeline.job_errors import failure_summary
from airflow_cdc_provider.pipeline.jobspec import JobSpec
from airflow_cdc_provider.pipeline.query_seed import query_seed
from airflow_cdc_provider.pipeline.stream_evolutions import StreamEvolutions, covered_through, held_tables
from airflow_cdc_provider.pipeline.table_schemas import chunk_order_schemas, pending_resyncs, stream_versions
from airflow_cdc_provider.sinks.base import META_COLUMNS
from airflow_cdc_provider.sinks.registry import open_sink
from airflow_cdc_provider.sinks.types import TableSinkTypes
from airflow_cdc_provider.source.connection import connect
from airflow_cdc_provider.source.binlog import DefinitionsChanged
from airflow_cdc_provider.source.segments import BinlogMap
from airflow_cdc_provider.source.server import current_offset
from airflow_cdc_provider.source.table_versions import sink_versions
from airflow_cdc_provider.spark.binlog_source import image_column, register_source, source_schema
from airflow_cdc_provider.spark.driver_batches import schema_change_records, span_bytes, table_changes
from airflow_cdc_provider.spark.session import default_parallelism, is_connect, observation
from airflow_cdc_provider.state.records import ReloadRequest, StreamStatus
from airflow_cdc_provider.state.store import StateStore

log = logging.getLogger("airflow_cdc.stream")
IDLE_HEARTBEAT_SECONDS = 5.0
EMPTY_TOTALS = {"rows_emitted": 0, "rows_by_table": {}, "batches": 0, "batch_id": None, "last_event_ms": 0}
STOP_GRACE_SECONDS = 90
BATCH_TOTALS = "stream/batch_totals.json"  # BatchWriter.totals(), published on Spark Connect
CHANGE_FIELDS = ("table", "op", "file_seq", "pos", "row", "statement")  # a schema change's record in a batch


def application_info(spark) -> dict[str, str | None]:
    """The Spark application's id and UI address, for the status (a Connect client sees only the id)."""
    if is_connect(spark):
        return {"app_id": spark.conf.get("spark.app.id", None), "ui_url": None}
    return {"app_id": spark.sparkContext.applicationId, "ui_url": spark.sparkContext.uiWebUrl}


class _GracefulStopHook:
    """A JVM shutdown hook, run before Spark's own hooks stop the SparkContext: it asks the driver loop to stop
    the query and waits until the status says so. Without it, SIGTERM to spark-submit (the JVM is the parent
    of this Python driver) would tear the session down under a running batch."""

    def __init__(self, job: "StreamJob") -> None:
        self.job = job

    def run(self) -> None:
        self.job.request_stop()
        self.job._done.wait(STOP_GRACE_SECONDS)

    class Java:
        implements = ["java.lang.Runnable"]


def _install_stop_hook(spark, job: "StreamJob"):
    jvm = pyspark_internals.jvm_with_callbacks(spark)
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
        pyspark_internals.driver_jvm(spark).org.apache.hadoop.util.ShutdownHookManager.get().removeShutdownHook(hook)
    except Exception as exc:  # IllegalStateException: the JVM is shutting down, the hook is running
        log.debug("shutdown hook not removed: %s", exc)


class BatchWriter:
    """The ``foreachBatch`` function: one micro-batch, split by table, into the sink.

    Picklable by design: on Spark Connect it runs in a Python process of the server, which has none of the
    job's objects; it builds its sink from the batch's own session. ``publish`` (Connect) writes its totals
    to the state store after each batch, where the job's status loop reads them."""

    def __init__(self, spec: JobSpec, secrets: dict[str, str], types: dict[str, TableSinkTypes],
                 image_columns: dict[str, str], publish: bool = False, carried: dict[str, Any] | None = None,
                 definitions: list[dict] | None = None) -> None:
        self.spec_json = spec.to_json()
        self.definitions = definitions  # the source's option: a small batch is read here with them
        self.sink_config = spec.sink
        self.secrets = secrets
        self.types = types
        self.image_columns = image_columns
        self.faults = FaultSwitch(spec.fault)
        self.state_path = spec.state_path
        self.dag_id = spec.pipeline
        self.publish = publish
        carried = carried or EMPTY_TOTALS  # a reloaded stream goes on counting where its predecessor stopped
        self.rows_emitted = int(carried["rows_emitted"])
        self.rows_by_table: dict[str, int] = dict(carried["rows_by_table"])
        self.batches = int(carried["batches"])
        self.last_batch_id: int | None = carried["batch_id"]
        self.last_event_ms = int(carried["last_event_ms"])  # commit time of the newest change written (for the lag)
        self.driver_batch_bytes = spec.stream.driver_batch_bytes
        self._last_end: BinlogOffset | None = None  # where the last batch ended, per the checkpoint
        self._span: tuple[BinlogOffset, BinlogOffset] | None = None  # the small batch's start and end
        self._sink = None
        self._store: StateStore | None = None
        self._reader = None  # the source's reader, in this process, for small batches
        self._large_types = False  # Spark's Arrow string and binary types (``toArrow``'s)
        self._arrow: bool | None = None  # whether the sink takes every captured table's rows from the driver

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_sink": None, "_store": None, "_reader": None}

    def close(self) -> None:
        """Close the small batches' reader's connection to the source (the query ended)."""
        if self._reader is not None:
            self._reader.close()
            self._reader = None

    def totals(self) -> dict[str, Any]:
        return {"rows_emitted": self.rows_emitted, "rows_by_table": dict(self.rows_by_table), "batches": self.batches,
                "batch_id": self.last_batch_id, "last_event_ms": self.last_event_ms}

    def __call__(self, batch_df, batch_id: int) -> None:
        t0 = time.monotonic()
        if self._sink is None:
            self._sink = open_sink(self.sink_config, self.secrets, batch_df.sparkSession)
        if self._is_small(batch_id):
            write = self._write_from_driver
        else:
            write = self._write_in_one_pass if len(self.image_columns) == 1 else self._write_table_by_table
        counts, newest = write(batch_df, batch_id, t0)
        self.last_event_ms = max(self.last_event_ms, newest)
        self.rows_emitted += sum(counts.values())
        for table, rows in counts.items():
            self.rows_by_table[table] = self.rows_by_table.get(table, 0) + rows
        self.batches += 1
        self.last_batch_id = batch_id
        if self.publish:
            StateStore(self.state_path).write_json(BATCH_TOTALS, self.totals())

    def _apply_schema_changes(self, rows: list, batch_id: int) -> None:
        """The batch's schema changes (``rows``: ``CHANGE_FIELDS`` of each), after its rows are written: each sink
        applies truncates and drops by version (so the order with the rows does not matter), and the state store
        records them all, which tells the next run's plan step what to re-snapshot."""
        store = StateStore(self.state_path)
        held = set(pending_resyncs(store))  # a table's first resync is the one that counts; segments decoded in
        changes = []  # parallel may each have reported one
        # an observation counts a re-run task's rows again (a lost shuffle's map stage): one record per change
        unique = {(r["table"], r["op"], r["file_seq"], r["pos"], r["row"]): r for r in rows}
        for r in sorted(unique.values(), key=lambda r: (r["file_seq"], r["pos"], r["row"])):
            said = json.loads(r["statement"] or "{}")
            change = SchemaChange(KIND_OF_OP[r["op"]], TableId.parse(r["table"]), said.get("statement", ""),
                                  said.get("detail", ""), EventPosition(said["file"], int(r["pos"]), int(r["row"])),
                                  TableId.parse(said["renamed_to"]) if said.get("renamed_to") else None)
            if change.kind == RESYNC and str(change.table) in held:
                continue
            held |= {str(change.table)} if change.kind == RESYNC else set()
            changes.append(change)
        for change in changes:
            if change.kind == EVOLVE:
                log.warning("%s: applied in place (the table's rows are decoded with its new definition from here on)",
                            change.describe())
            elif change.kind == RESYNC:
                log.warning("%s: its changes from here on are held until the table is re-snapshotted, which the "
                            "next run of the pipeline does (or now: airflow dags trigger %s -c "
                            "'{\"resnapshot\": [\"%s\"]}')", change.describe(), self.dag_id, change.table)
            else:
                log.warning("%s: applied in the sink", change.describe())
            self._sink.apply_schema_change(change, self.types[str(change.table)])
        store.record_schema_changes(changes)
        self.faults.hit("after_schema_change", f"batch {batch_id}")

    def _changes(self, batch_df, table: str):
        """``table``'s rows of the batch as the sink takes them: its image's columns, then the change's metadata."""
        from pyspark.sql import functions as F

        meta = [F.col(src).cast(kind).alias(name) for src, (name, kind) in
                zip(("op", "ts_ms", "file_seq", "pos", "row"), META_COLUMNS)]
        return batch_df.select(f"{self.image_columns[table]}.*", *meta)

    def _mid_write(self, table: str, batch_id: int):
        return lambda: self.faults.hit("mid_sink_write", f"{table} batch {batch_id}")

    def _write_in_one_pass(self, batch_df, batch_id: int, t0: float) -> tuple[dict[str, int], int]:
        """One captured table, so every row is its: the batch goes from the source's tasks straight into the
        sink, counted on the way (an observation), never cached (a cache costs building it and a second job)."""
        from pyspark.sql import functions as F

        table = next(iter(self.image_columns))
        observed = observation(batch_df.sparkSession, f"airflow_cdc_batch_{batch_id}")
        # the schema changes' records (a few) are collected on the way too: the batch is read once
        changes = F.collect_list(F.when(F.col("op").isin(*KIND_OF_OP), F.struct(*CHANGE_FIELDS)))
        df = batch_df.observe(observed, F.count(F.lit(1)).alias("rows"), F.max("ts_ms").alias("newest"),
                              changes.alias("schema_changes"))
        self._sink.write_changes(self._changes(df, table), self.types[table], batch_id,
                                 self._mid_write(table, batch_id), lambda: observed.get["rows"])
        metrics = observed.get
        if metrics["schema_changes"]:
            self._apply_schema_changes(metrics["schema_changes"], batch_id)
        if metrics["rows"]:
            self.faults.hit("mid_batch", f"batch {batch_id}")
        log.info("batch %d: %d rows read and written in %.2fs", batch_id, metrics["rows"], time.monotonic() - t0)
        return {table: metrics["rows"]}, metrics["newest"] or 0

    def _is_small(self, batch_id: int) -> bool:
        """Whether batch ``batch_id`` spans at most ``stream.driver_batch_bytes`` of binlog (``driver_batches``)
        and the sink can take its rows from the driver; never on Spark Connect (its writer runs on the server)."""
        if self._arrow is None:
            self._arrow = all(self._sink.writes_arrow_changes(t) for t in self.types.values())
        if not self.driver_batch_bytes or self.publish or not self._arrow:
            return False
        if self._store is None:
            self._store = StateStore(self.state_path)
        known = self._last_end is not None and self.last_batch_id == batch_id - 1
        start = self._last_end if known else self._store.batch_end(batch_id - 1)
        self._last_end = self._store.batch_end(batch_id)
        span = span_bytes(start, self._last_end)
        self._span = (start, self._last_end)
        return span is not None and span <= self.driver_batch_bytes

    def _write_from_driver(self, batch_df, batch_id: int, t0: float) -> tuple[dict[str, int], int]:
        """A small batch, read from the binlog here, as Arrow (or, when a value needs Spark's converter, read and
        collected in one Spark job); each table's rows are written from here by the sink's own writer. Counts,
        fault points and schema changes as in the Spark paths below."""
        import pyarrow.compute as pc

        batch = self._read_here(batch_df)
        where = "in the driver"
        if batch is None:
            batch, where = batch_df.toArrow(), "by Spark"
        t_read = time.monotonic() - t0
        changes = {t: table_changes(batch, t, column) for t, column in sorted(self.image_columns.items())}
        counts = {t: rows.num_rows for t, rows in changes.items()}
        for i, table in enumerate(t for t, n in counts.items() if n):
            self._sink.write_arrow_changes(changes[table], self.types[table], batch_id,
                                           self._mid_write(table, batch_id))
            if i == 0:
                self.faults.hit("mid_batch", f"batch {batch_id}")  # after the first table with rows
        log.info("batch %d: %d rows read and written in %.2fs from the driver (read %s in %.2fs)", batch_id,
                 batch.num_rows, time.monotonic() - t0, where, t_read)
        records = schema_change_records(batch, KIND_OF_OP, CHANGE_FIELDS)
        if records:
            self._apply_schema_changes(records, batch_id)
        newest = pc.max(batch["ts_ms"]).as_py() if batch.num_rows else None
        return {t: n for t, n in counts.items() if n}, newest or 0

    def _read_here(self, batch_df):
        """The small batch's rows read by the source's own reader in this process, over the batch's offsets as
        the checkpoint planned them, as one segment: the rows its tasks would read, with no Spark job (a job's
        scheduling and Python worker cost more than reading a small batch). As ``toArrow`` would collect them;
        None when Spark's tasks have to read them (``BinlogReader.read_table``)."""
        from airflow_cdc_provider.spark.binlog_source import BinlogReader

        if not self.definitions:
            return None
        if self._reader is None:
            self._reader = BinlogReader(self.spec_json, self.secrets, 1, self.definitions, batch_df.schema)
            self._large_types = batch_df.sparkSession.conf.get("spark.sql.execution.arrow.useLargeVarTypes",
                                                               "false") == "true"
        start, end = self._span
        return self._reader.read_table(start, end, self._large_types)

    def _write_table_by_table(self, batch_df, batch_id: int, t0: float) -> tuple[dict[str, int], int]:
        """Several captured tables: the batch is cached (decoded once) and each table's rows are written from the
        cache. Every table's rows are counted by an observation under the cache, so the first write, which builds
        the cache, counts them all on the way: a batch is one Spark job per table with rows, with no counting pass
        of its own. The first write is of the table that has had the most rows so far, the one most likely to have
        rows now; when it has none, that write is the one job more."""
        from pyspark.sql import functions as F

        tables = sorted(self.image_columns)
        observed = observation(batch_df.sparkSession, f"airflow_cdc_batch_{batch_id}")
        changes = F.collect_list(F.when(F.col("op").isin(*KIND_OF_OP), F.struct(*CHANGE_FIELDS)))
        batch_df = batch_df.observe(observed, *[F.count_if(F.col("table") == t).alias(f"rows_{i}")
                                                for i, t in enumerate(tables)],
                                    F.max("ts_ms").alias("newest"), changes.alias("schema_changes")).persist()

        def counts() -> dict[str, int]:
            metrics = observed.get
            return {t: metrics[f"rows_{i}"] for i, t in enumerate(tables)}

        def write(table: str) -> None:
            hook = self._mid_write(table, batch_id)

            def mid_write() -> None:
                if counts()[table]:  # a table without rows in the batch has no mid-write
                    hook()

            self._sink.write_changes(self._changes(batch_df.filter(F.col("table") == table), table),
                                     self.types[table], batch_id, mid_write, lambda: counts()[table])

        try:
            first = max(tables, key=lambda t: (self.rows_by_table.get(t, 0), t))
            write(first)
            t_first = time.monotonic() - t0
            written = counts()
            if written[first]:
                self.faults.hit("mid_batch", f"batch {batch_id}")  # after the first table with rows
            for i, table in enumerate(t for t in tables if t != first and written[t]):
                write(table)
                if i == 0 and not written[first]:
                    self.faults.hit("mid_batch", f"batch {batch_id}")
            log.info("batch %d: %d rows read and written in %.2fs (read and %s written in %.2fs)", batch_id,
                     sum(written.values()), time.monotonic() - t0, first, t_first)
            metrics = observed.get
            if metrics["schema_changes"]:
                self._apply_schema_changes(metrics["schema_changes"], batch_id)
            return {t: n for t, n in written.items() if n}, metrics["newest"] or 0
        finally:
            batch_df.unpersist()


class StreamJob:
    """One streaming query over the binlog, with the definitions and the seed the state store holds when it is
    set up. ``carried``: the totals of the query this one takes over from (a reload)."""

    def __init__(self, spark, spec: JobSpec, secrets: dict[str, str], carried: dict[str, Any] | None = None) -> None:
        t0 = time.monotonic()
        self.spark = spark
        self.spec = spec
        self.secrets = secrets
        self.store = StateStore(spec.state_path)
        self.connect = is_connect(spark)
        sink = open_sink(spec.sink, secrets, spark)
        self.mode = spec.stream.mode
        self._stop = threading.Event()
        self._done = threading.Event()
        self.error: str | None = None  # why the query failed (``run`` returned 1)
        self._reported: tuple[dict[str, Any], dict | None] | None = None  # the last running status's totals, offset
        self.resumed = carried is not None
        # what this job sets up from: every reload request written so far, the epochs of the snapshots finished
        self.taken_up = self.store.read_reload()
        self.reload: ReloadRequest | None = None  # the request that ended this job's query, to start another
        seed = self._query_seed()
        # a table the query does not read is not taken up, whatever the seed holds (a table the YAML added since)
        self.epochs = {t: s.epoch for t, s in (seed.tables if seed else {}).items() if t in spec.tables}
        settings = spec.source_settings(secrets)
        with contextlib.closing(connect(settings)) as conn:
            self.versions = stream_versions(conn, self.store, spec.tables, self.epochs)
            if self._record_ahead(conn, settings, seed, sink.evolves_in_place):
                self.versions = stream_versions(conn, self.store, spec.tables, self.epochs)
        self.sink_versions = {t: followed_by_sink(v, spec.stream.schema_changes_for(t)) for t, v in self.versions.items()}
        # the sink's newest version of each table: rows of older ones are carried up to it (``source.table_versions``)
        self.types = {t: TableSinkTypes.of(v[-1].schema, v[-1].number, self.epochs.get(t, 0))
                      for t, v in self.sink_versions.items()}
        self.order = sorted(self.types)  # table i's rows carry their values in the source's image_<i>
        for table, types in self.types.items():
            sink.prepare(types)
            if len(self.sink_versions[table]) > 1 and sink.evolves_in_place:
                sink.evolve_in_place(self.sink_versions[table], types.epoch)
        self.restart = False  # the query stopped at a table's new version: another starts with it
        # each table's definitions, in image column order: the source's tasks and the writer's reads decode with these
        # and the one the snapshot's chunks were read with, in whose key order the stream tells a change its chunk
        chunk_orders = chunk_order_schemas(self.store, self.versions, self.epochs)
        self.definitions = [{"table": t, "epoch": self.epochs.get(t, 0), "versions": [v.to_dict() for v in self.versions[t]],
                             "sink_versions": [v.to_dict() for v in self.sink_versions[t]],
                             "chunk_order": chunk_orders[t].to_dict()} for t in self.order]
        self.writer = BatchWriter(spec, secrets, self.types, {t: image_column(i) for i, t in enumerate(self.order)},
                                  publish=self.connect, carried=carried, definitions=self.definitions)
        log.info("stream job set up in %.2fs (%d tables)", time.monotonic() - t0, len(self.types))

    def _query_seed(self):
        """The seed this job's query runs with (``pipeline.query_seed``), written for its tasks before it starts."""
        status = self.store.read_status()
        recorded = self.store.read_overlapped_epochs()
        seed, overlapped = query_seed(self.store.read_seed(), self.store.finished_tables(), recorded,
                                    status.epochs if status else {}, self.store.checkpoint_offset())
        for table, record in sorted(overlapped.items()):
            if recorded.get(table) != record:
                log.info("%s: snapshot epoch %d taken up where the stream resumes (%s), behind changes the stream "
                         "of an older epoch wrote during it: every change of the table after that is written",
                         table, record.epoch, record.after)
        if overlapped != recorded:
            self.store.write_overlapped_epochs(overlapped)
        self.store.write_query_seed(seed)
        return seed

    def _record_ahead(self, conn, settings, seed, in_place: bool) -> bool:
        """Records the versions of the ALTERs in the query's first batch before it starts, when a table's
        definition has changed (``StreamEvolutions.record_between``); whether any was recorded. The batch: the one
        the checkpoint planned and did not commit, or one from where the query starts towards the server's
        position now, capped as the source caps it. The query then reads it with them, with no attempt failing
        on them; a failure here only leaves the recording to the source's planning and tasks, as without it."""
        t0 = time.monotonic()
        try:
            start = self.store.checkpoint_offset() or (seed.start if seed is not None else None)
            if start is None:  # no seed: the startup mode says where the query starts, once it runs
                return False
            stream = self.spec.stream
            evolutions = StreamEvolutions(self.versions, self.epochs, self.spec.state_path, partial(connect, settings),
                                          {t: stream.schema_changes_for(t) for t in self.versions}, in_place=in_place)
            tables = {TableId.parse(t) for t in self.versions}
            covered = covered_through(seed, tables)
            held = held_tables(self.store, tables, covered)
            if not evolutions.definitions_changed(conn, held):
                return False
            stop = self.store.planned_batch_end()
            if stop is None:
                now = current_offset(conn)
                stop = BinlogMap(conn).batch_end(start, now, stream.max_batch_bytes)[0] if now > start else start
            # the stream's own id: none of its readers runs before its query starts
            recorded = evolutions.record_between(settings, settings.replica_server_id(self.spec.server_id, 0), start,
                                                 stop, covered, held)
        except Exception as exc:
            log.warning("the first batch's ALTERs were not read ahead (its tasks will record them): %s", exc)
            return False
        if recorded:
            log.info("the first batch's ALTERs read in %.2fs: %s", time.monotonic() - t0,
                     ", ".join(f"{r.table} version {r.version.number}" for r in recorded))
        return bool(recorded)

    def totals(self) -> dict[str, Any]:
        """The writer's totals: its own (same process) or, on Connect, what it last published."""
        if not self.connect:
            return self.writer.totals()
        return {**self.writer.totals(), **(self.store.read_json(BATCH_TOTALS) or {})}

    # -- status --------------------------------------------------------------------------------------
    def write_status(self, query, state: str, error: str | None = None) -> None:
        progress = query.lastProgress if query is not None else None
        end = None
        if progress and progress.get("sources"):
            end = progress["sources"][0].get("endOffset")
            if isinstance(end, str):
                end = json.loads(end)
        totals = self.totals()
        if state == "running":
            # the writer counts a batch before Spark reports its progress (and offset): until it does, the status
            # shows the last batch whose totals and offset go together, never one's rows at another's position
            written, reported = totals["batch_id"], (progress or {}).get("batchId", -1)
            if written is not None and reported < written:
                totals, end = self._reported or (EMPTY_TOTALS, None)
            else:
                self._reported = (totals, end)
        lag = 0.0
        if end and end.get("behind") and totals["last_event_ms"]:
            lag = max(0.0, time.time() - totals["last_event_ms"] / 1000.0)
        self.store.write_status(StreamStatus(
            state=state, mode=self.mode, launch_id=self.spec.launch_id, pid=os.getpid(),
            last_offset=BinlogOffset.from_dict(end) if end else None, lag_seconds=round(lag, 3),
            rows_emitted=totals["rows_emitted"], rows_by_table=totals.get("rows_by_table") or {},
            batches=totals["batches"], batch_id=totals["batch_id"], epochs=dict(self.epochs), tables=sorted(self.spec.tables),
            error=error,
            **self._app))

    # -- run -----------------------------------------------------------------------------------------
    def _reload_asked(self) -> bool:
        """Whether a reload request newer than what this job was set up from has come (``self.reload``)."""
        if not self.store.exists(self.store.RELOAD):
            return False
        request = self.store.read_reload()
        if request is None or (self.taken_up is not None and request.requested_at <= self.taken_up.requested_at):
            return False
        self.reload = request
        return True

    def request_stop(self) -> None:
        """Stop after the current batch (a signal, the task's ``on_kill``)."""
        self._stop.set()

    def run(self) -> int:
        self._app = application_info(self.spark)
        hook = _install_stop_hook(self.spark, self) if self.mode == "continuous" and not self.connect else None
        try:
            return self._run()
        finally:
            self.writer.close()
            self._done.set()
            if hook is not None:
                _remove_stop_hook(self.spark, hook)

    def _run(self) -> int:
        from pyspark.errors import StreamingQueryException

        if not self.resumed:  # a stop asked for while a reload set this query up still counts
            self.store.clear_stop()
        if self.connect:
            self.store.delete(BATCH_TOTALS)
        register_source(self.spark, self.secrets)
        # a streaming query runs without adaptive execution anyway; said here, Spark does not warn that it will be
        self.spark.conf.set("spark.sql.adaptive.enabled", "false")
        schema = source_schema([self.types[t].spark_ddl for t in self.order])
        # given here, Spark does not start a Python process to ask the source for it
        df = (self.spark.readStream.format("airflow_cdc_binlog").schema(schema).option("spec", self.spec.to_json())
              .option("partitions", str(default_parallelism(self.spark)))
              .option("definitions", json.dumps(self.definitions))
              .option("schema", schema).load())
        writer = df.writeStream.foreachBatch(self.writer).option("checkpointLocation", self.store.checkpoint_location)
        if self.mode == "continuous":
            writer = writer.trigger(processingTime=self.spec.stream.trigger_interval)
        else:
            writer = writer.trigger(availableNow=True)
        if not self.connect:  # spark-submit's driver; on Connect this is the Airflow task's process, its signals are Airflow's
            for sig in (signal.SIGTERM, signal.SIGINT):
                signal.signal(sig, lambda *_: self.request_stop())
        self.write_status(None, "starting")
        t0 = time.monotonic()
        query = writer.start()
        log.info("query started in %.2fs", time.monotonic() - t0)
        if self.taken_up is not None:
            self.store.clear_reload(self.taken_up)
        last_write, seen_batch, seen_progress = 0.0, None, None
        state = "finished"
        while True:
            try:
                if query.awaitTermination(1):
                    break
            except StreamingQueryException:  # the query failed; reported below from query.exception()
                break
            totals = self.totals()
            batch_id = totals["batch_id"]
            if self.connect and batch_id != seen_batch:  # the writer logs to the server's log, this to the task's
                log.info("batch %s written on the server: %d rows emitted so far", batch_id, totals["rows_emitted"])
            progress = query.lastProgress
            reported = progress.get("batchId") if progress else None  # Spark reports a batch after it was written
            if (batch_id, reported) != (seen_batch, seen_progress) or time.time() - last_write > IDLE_HEARTBEAT_SECONDS:
                self.write_status(query, "running")
                last_write, seen_batch, seen_progress = time.time(), batch_id, reported
            if self._stop.is_set() or self.store.stop_requested():
                log.info("stop requested: stopping the stream after the current batch")
                _let_the_batch_finish(query, STOP_GRACE_SECONDS - 30)
                query.stop()
                state = "stopped"
                break
            if self.mode == "continuous" and self._reload_asked():
                log.info("re-snapshot of %s finished (asked by %s): the query starts again from its checkpoint with "
                         "the new snapshots and definitions", ", ".join(f"{t} (epoch {e})" for t, e in
                                                                        sorted(self.reload.epochs.items())),
                         self.reload.requested_by)
                _let_the_batch_finish(query, STOP_GRACE_SECONDS - 30)
                query.stop()
                state = "running"  # the next query goes on; the watchers see no end
                break
        error = query.exception()
        if error is not None and DefinitionsChanged.MARKER in str(error):
            log.info("%s", _marked_line(str(error)))
            self.restart = True
            self.write_status(query, "running")
            return 0
        if error is not None:
            self.error = str(error)
            self.write_status(query, "failed", failure_summary(self.error))
            log.error("stream failed: %s", error)
            return 1
        self.write_status(query, state)
        if self.reload is None and not self.restart:
            totals = self.totals()
            log.info("stream %s: %d batches, %d rows emitted", state, totals["batches"], totals["rows_emitted"])
        return 0


def followed_by_sink(versions: list, behaviour: str) -> list:
    """The versions the sink goes through under ``behaviour`` (``sink_versions``). The stream records a version
    only if the sink can follow it, so a refusal here means the table's behaviour changed since: say how on."""
    followed = sink_versions(versions, behaviour)
    if isinstance(followed, str):
        raise RuntimeError(f"{followed}; the table's stream.schema_changes changed after its columns changed in "
                           "place: set it back, or re-snapshot the table (airflow-cdc resnapshot <config> --table "
                           f"{versions[0].table})")
    return followed


def _let_the_batch_finish(query: Any, limit: float) -> None:
    """Wait, up to ``limit`` seconds, until no batch is in progress: a query stopped in a batch interrupts it, and
    the next launch runs the whole batch again (exactly once all the same, but a table taken out meanwhile would
    keep what the interrupted batch wrote of it)."""
    deadline = time.time() + limit
    while time.time() < deadline:
        try:
            if not (query.status or {}).get("isTriggerActive") or query.awaitTermination(0.2):
                return
        except Exception:  # noqa: BLE001 - a query failing or gone: the stop that follows says what it can
            return


def _marked_line(error: str) -> str:
    """The line of a failure that says which table's definition changed."""
    return next((line.strip() for line in error.splitlines() if DefinitionsChanged.MARKER in line), error)


def run_stream(spark, spec: JobSpec, secrets: dict[str, str]) -> int:
    """The stream job. A continuous stream asked to take up new snapshots (``ReloadRequest``), and any stream
    that met an ALTER applied in place (``DefinitionsChanged``), starts its query again here, from the
    checkpoint, in the same Spark application: its task and its lease never notice."""
    if not is_connect(spark):
        warm_python_workers(spark)
    carried = None
    while True:
        job = StreamJob(spark, spec, secrets, carried)
        rc = job.run()
        if (job.reload is None and not job.restart) or rc != 0:
            return rc
        carried = job.totals()


def warm_python_workers(spark) -> threading.Thread:
    """Starts Spark's Python workers, one a task slot, with the source's modules imported, in a background job
    while the job sets up and its query starts (the source plans in a Python process of its own meanwhile): the
    first batch's read tasks then take warm workers instead of starting them. Python UDF and data source tasks
    share the pool of workers. A failure here costs only the warm-up."""
    def run() -> None:
        try:
            spark.sparkContext.setJobDescription("airflow-cdc: start the Python workers")
            slots = default_parallelism(spark)
            spark.range(0, slots, 1, slots).mapInArrow(_with_source_modules, "id long").collect()
        except Exception as exc:  # the job stopped before it ran, a worker that cannot start (the read will say)
            log.debug("Python workers not started ahead: %s", exc)

    thread = threading.Thread(target=run, name="warm-python-workers", daemon=True)
    thread.start()
    return thread


def _with_source_modules(batches):
    """A warm-up task: imports what the source's read tasks run."""
    for module in ("airflow_cdc_provider.spark.binlog_source", "airflow_cdc_provider.pipeline.stream_evolutions"):
        importlib.import_module(module)
    yield from batches
