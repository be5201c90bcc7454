"""The chunk snapshot job: the DBLog / Flink CDC 2.0 watermark read of the chunks of one table.

The chunks a task holds are consecutive, so they are read together in one watermark window (their union is
one key range; the algorithm holds for any key range read between its watermarks). One window instead of one
per chunk is what makes a task cost about as much as a plain JDBC reload of the same rows: one JDBC read
spread over all cores, one sink write, one binlog window read. Each chunk still gets its own report (same
LW/HW), sink directory or tag, and emit-filter entry.

1. ``LW`` = binlog position now;
2. SELECT the window's rows with Spark JDBC (integer keys: ``partitions`` even key sub-ranges over the whole
   window, each row tagged with its chunk by a comparison tree on the chunk bounds; other keys: one read per
   chunk). Spark is lazy and the read must happen *between* the watermarks, so it is forced: the parquet
   sink writes the rows straight to staging (each row is written once), the jdbc sink persists and counts
   them (its versioned upserts need the HW);
3. ``HW`` = binlog position now;
4. if ``HW > LW``: read the binlog window ``[LW, HW)`` of this table on the driver, keep the changes of keys
   inside the window's chunks, and fold them in Spark: keyed anti-join removes every changed key from the
   SELECTed rows, a union adds back the last image of each key that is not deleted. Chunk rows never reach
   the driver; only the window's changed keys do;
5. give the rows version ``HW`` in the sink (parquet: publish the staged window under its version, rewritten
   only if the binlog window changed it; jdbc: versioned upserts), then one report per chunk to the state
   store (one file for the window).

A window's ``.started`` marker in the state store tells a retry that an earlier attempt may have written part
of its chunks; the JDBC sink then removes rows that attempt wrote and this one did not (deleted meanwhile).
"""

from __future__ import annotations

import contextlib
import logging
import math
import time
from collections import Counter
from typing import Any

from airflow_cdc_provider.core.chunks import Chunk, TableId, chunk_locator
from airflow_cdc_provider.core.keys import Key
from airflow_cdc_provider.core.records import OP_DELETE, ChangeRecord
from airflow_cdc_provider.pipeline.faults import FaultSwitch
from airflow_cdc_provider.pipeline.jobspec import JobSpec
from airflow_cdc_provider.sinks import SinkConfig
from airflow_cdc_provider.sinks.types import TableSinkTypes
from airflow_cdc_provider.source.binlog import read_changes_between
from airflow_cdc_provider.source.chunk_reader import chunk_report_base
from airflow_cdc_provider.source.connection import connect
from airflow_cdc_provider.source.key_order import DatabaseKeyOrder
from airflow_cdc_provider.source.schema import TableSchema, load_schema
from airflow_cdc_provider.source.server import current_offset, server_info
from airflow_cdc_provider.source.sql import quote_ident, quote_table, range_predicate
from airflow_cdc_provider.spark.columns import quoted
from airflow_cdc_provider.spark.jdbc_read import read_key_ranges
from airflow_cdc_provider.spark.session import default_parallelism
from airflow_cdc_provider.spark.sinks import CHUNK_COLUMN, spark_sink, with_meta
from airflow_cdc_provider.state.store import StateStore

log = logging.getLogger("airflow_cdc.snapshot")

MIN_ROWS_PER_PARTITION = 20_000
MAX_CHUNKS_PER_WINDOW = 256  # other than single-integer keys: a window makes one JDBC read per chunk


def key_sub_ranges(conn: Any, schema: TableSchema, start: Key | None, end: Key | None,
                   partitions: int) -> list[tuple[Key | None, Key | None]]:
    """Split ``[start, end)`` of a single-integer-key table into ``partitions`` key ranges for a parallel read."""
    whole = [(start, end)]
    if partitions <= 1 or not schema.single_integer_key:
        return whole
    where, params = range_predicate(schema.key_columns, start, end)
    k = quote_ident(schema.key_columns[0])
    with conn.cursor() as cur:
        cur.execute(f"SELECT MIN({k}), MAX({k}) FROM {quote_table(schema.table)} WHERE {where}", params)
        lo, hi = cur.fetchone()
    if lo is None or hi - lo + 1 < partitions * MIN_ROWS_PER_PARTITION:
        return whole
    step = math.ceil((hi - lo + 1) / partitions)
    bounds = [(lo + i * step,) for i in range(1, partitions) if lo + i * step <= hi]
    edges = [start, *bounds, end]
    return list(zip(edges[:-1], edges[1:]))


def chunk_tag_sql(key_sql: str, chunks: list[Chunk], integral: bool) -> str:
    """SQL for the index of the chunk holding each row of a single-integer-key window, as one expression
    (one call into Spark however many chunks). Evenly split bounds (what ``even_split`` makes) need one
    integer division per row; other bounds a balanced comparison tree, log2(chunks) comparisons per row."""
    if len(chunks) == 1:
        return str(chunks[0].index)
    bounds = [int(c.start[0]) for c in chunks[1:]]  # a window's chunks are consecutive: end i == start i+1
    indexes = [c.index for c in chunks]
    step = bounds[1] - bounds[0] if len(bounds) > 1 else 1
    if (step > 0 and indexes == list(range(indexes[0], indexes[0] + len(chunks)))
            and all(b == bounds[0] + i * step for i, b in enumerate(bounds))):
        n = len(chunks)
        # keys far above the bounds may overflow the subtraction: try_subtract gives NULL, the last chunk
        value = f"CAST({key_sql} AS BIGINT)" if integral else key_sql
        offset = f"COALESCE(LEAST({n - 2}, try_subtract({value}, {bounds[0]}) div {step}), {n - 2})"
        return f"CASE WHEN {key_sql} < {bounds[0]} THEN {indexes[0]} ELSE {indexes[0] + 1} + {offset} END"

    def tree(lo: int, hi: int) -> str:
        if lo == hi:
            return str(chunks[lo].index)
        mid = (lo + hi + 1) // 2
        return f"CASE WHEN {key_sql} < {chunks[mid].start[0]} THEN {tree(lo, mid - 1)} ELSE {tree(mid, hi)} END"

    return tree(0, len(chunks) - 1)


def chunk_tag_column(key_column: str, key_type: str, chunks: list[Chunk]):
    """Spark: ``chunk_tag_sql`` as an int column."""
    from pyspark.sql import functions as F

    integral = key_type in ("tinyint", "smallint", "int", "bigint")
    return F.expr(chunk_tag_sql(quoted(key_column), chunks, integral)).cast("int")


def read_window_rows(spark, conn, settings, schema: TableSchema, types: TableSinkTypes, chunks: list[Chunk],
                     partitions: int):
    """The rows of the window's chunks, each with its chunk index in ``CHUNK_COLUMN``."""
    from pyspark.sql import functions as F

    if schema.single_integer_key:
        ranges = key_sub_ranges(conn, schema, chunks[0].start, chunks[-1].end, partitions)
        df = read_key_ranges(spark, settings, types, ranges)
        key_type = types.types[schema.column_names.index(schema.key_columns[0])].spark
        return df.withColumn(CHUNK_COLUMN, chunk_tag_column(schema.key_columns[0], key_type, chunks))
    parts = [read_key_ranges(spark, settings, types, [(c.start, c.end)]).withColumn(CHUNK_COLUMN, F.lit(c.index))
             for c in chunks]
    df = parts[0]
    for part in parts[1:]:
        df = df.unionByName(part)
    return df


def chunk_counts(df) -> dict[int, int]:
    return {r[0]: r[1] for r in df.groupBy(CHUNK_COLUMN).count().collect()}


def window_changes(records: list[ChangeRecord], locate) -> tuple[dict[Key, tuple[ChangeRecord, int]], Counter]:
    """The last change of every key inside the window with its chunk index, and per chunk index how many
    window changes touched it."""
    last: dict[Key, tuple[ChangeRecord, int]] = {}
    applied: Counter = Counter()
    for rec in records:
        chunk = locate(rec.key)
        if chunk is not None:
            last[rec.key] = (rec, chunk.index)
            applied[chunk.index] += 1
    return last, applied


def fold_window(spark, rows_df, types: TableSinkTypes, last: dict[Key, tuple[ChangeRecord, int]]):
    """Spark: rows without the changed keys, plus the last image of each changed key that still exists."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import IntegerType, StructField, StructType

    if not last:
        return rows_df
    schema = types.schema
    key_idx = [schema.column_names.index(k) for k in schema.key_columns]
    full = StructType.fromDDL(types.spark_ddl)
    key_struct = StructType([full.fields[i] for i in key_idx])
    key_rows = [tuple(types.types[i].convert(v) for i, v in zip(key_idx, key, strict=True)) for key in last]
    upserts = [(*types.row_to_sink(dict(rec.after)), index) for rec, index in last.values() if rec.op != OP_DELETE]
    changed = spark.createDataFrame(key_rows, key_struct)
    kept = rows_df.join(F.broadcast(changed), on=list(schema.key_columns), how="left_anti")
    tagged = StructType([*full.fields, StructField(CHUNK_COLUMN, IntegerType(), False)])
    return kept.unionByName(spark.createDataFrame(upserts, tagged))


def windows(chunks: list[Chunk], epochs: list[int], max_chunks: int | None = MAX_CHUNKS_PER_WINDOW) -> list[list[int]]:
    """Positions of ``chunks`` grouped into watermark windows: runs of consecutive chunks of one epoch, of at
    most ``max_chunks`` (None: a single-integer key, read as a few even key ranges however many chunks)."""
    out: list[list[int]] = []
    for i, (c, e) in enumerate(zip(chunks, epochs, strict=True)):
        prev = out[-1][-1] if out else None
        if (prev is not None and epochs[prev] == e and chunks[prev].end is not None and chunks[prev].end == c.start
                and (max_chunks is None or len(out[-1]) < max_chunks)):
            out[-1].append(i)
        else:
            out.append([i])
    return out


class SnapshotJob:
    def __init__(self, spark, spec: JobSpec, secrets: dict[str, str]) -> None:
        self.spark = spark
        self.spec = spec
        self.settings = spec.source_settings(secrets)
        self.store = StateStore(spec.state_path)
        self.sink = spark_sink(spark, SinkConfig.from_dict(spec.sink), secrets)
        self.faults = FaultSwitch(spec.fault)
        self.partitions = spec.read_partitions or default_parallelism(spark)

    def run(self) -> list[dict[str, Any]]:
        """Each table's chunks (a task holds consecutive chunks of one table or several whole small tables, in
        the plan's order), read in watermark windows one after the other, through one source connection."""
        chunks = [Chunk.from_dict(c) for c in self.spec.chunks]
        epochs = [int(c["epoch"]) for c in self.spec.chunks]
        by_table: dict[TableId, list[int]] = {}
        for i, c in enumerate(chunks):
            by_table.setdefault(c.table, []).append(i)
        reports = []
        with contextlib.closing(connect(self.settings)) as conn:
            info = server_info(conn)
            for table, positions in by_table.items():
                reports += self.read_table(conn, info, table, [chunks[i] for i in positions],
                                           [epochs[i] for i in positions])
        return reports

    def read_table(self, conn, info, table: TableId, chunks: list[Chunk], epochs: list[int]) -> list[dict[str, Any]]:
        chunk_key = (self.spec.tables.get(str(table)) or {}).get("chunk_key")
        schema = load_schema(conn, table, chunk_key)
        types = TableSinkTypes.of(schema)
        self.sink.prepare(types)
        order = DatabaseKeyOrder(conn, schema)
        reports = []
        for positions in windows(chunks, epochs, None if schema.single_integer_key else MAX_CHUNKS_PER_WINDOW):
            reports += self.read_window(conn, info, schema, types, order, [chunks[i] for i in positions],
                                        epochs[positions[0]])
        return reports

    def _hit(self, point: str, chunks: list[Chunk]) -> None:
        for c in chunks:
            self.faults.hit(point, c.split_id)

    def read_window(self, conn, info, schema, types, order, chunks: list[Chunk], epoch: int) -> list[dict[str, Any]]:
        from pyspark import StorageLevel

        table = str(schema.table)
        indexes = [c.index for c in chunks]
        retried = self.store.mark_window_started(table, epoch, indexes)
        self.store.clear_chunk_reports(table, epoch, indexes)
        t0 = time.monotonic()

        low = current_offset(conn, info)
        self._hit("after_low_watermark", chunks)
        rows_df = read_window_rows(self.spark, conn, self.settings, schema, types, chunks, self.partitions)
        staged = None
        if self.sink.stages_in_window:  # the staging write forces the read: each row is written once
            staged = self.sink.stage_window(rows_df, types)
            counts = self.sink.staged_counts(staged)
        else:  # persist + count forces the read; the rows are written once the HW is known
            rows_df = rows_df.persist(StorageLevel.MEMORY_AND_DISK)
            counts = {chunks[0].index: rows_df.count()} if len(chunks) == 1 else chunk_counts(rows_df)
        t_select = time.monotonic() - t0
        self._hit("after_select", chunks)
        high = current_offset(conn, info)
        self._hit("after_high_watermark", chunks)

        last: dict[Key, tuple[ChangeRecord, int]] = {}
        applied: Counter = Counter()
        if high > low:
            records = list(read_changes_between(self.settings, self.spec.server_id, low, high, {schema.table: schema}))
            if order.needs_database:
                order.prefetch([r.key for r in records] + [k for c in chunks for k in (c.start, c.end) if k is not None])
            last, applied = window_changes(records, chunk_locator(chunks, order))
        touched = {index for _, index in last.values()}
        t_write = time.monotonic()
        mid_write = lambda: self._hit("mid_sink_write", chunks)  # noqa: E731
        if staged is not None:
            folded = None
            if touched:
                folded = fold_window(self.spark, self.sink.read_staged(staged, types), types, last)
                folded = folded.persist(StorageLevel.MEMORY_AND_DISK)
                counts = chunk_counts(folded)
            lost = self.sink.publish_window(staged, types, epoch, indexes, high.sort_key, folded, mid_write)
            for index in lost:  # their rows went with an earlier attempt's differently grouped directory
                log.warning("%s:%d: its rows were replaced by an overlapping window; its report is dropped so "
                            "the snapshot cannot finish until it is read again", table, index)
            if lost:
                self.store.clear_chunk_reports(table, epoch, lost)
            if folded is not None:
                folded.unpersist()
        else:
            result = fold_window(self.spark, rows_df, types, last)
            if touched:
                result = result.persist(StorageLevel.MEMORY_AND_DISK)
                counts = chunk_counts(result)
            self.sink.write_chunks(with_meta(result, "r", 0, high.sort_key), types, epoch, indexes, low.sort_key,
                                   retried, mid_write)
            result.unpersist()
            rows_df.unpersist()
        t_write = time.monotonic() - t_write
        seconds = round(time.monotonic() - t0, 3)
        reports = [{
            **chunk_report_base(chunk),
            "low_watermark": low.to_dict(),
            "high_watermark": high.to_dict(),
            "rows": int(counts.get(chunk.index, 0)),
            "window_events_applied": applied[chunk.index],
            "seconds": seconds,
            "epoch": epoch,
            "index": chunk.index,
        } for chunk in chunks]
        self.store.write_window_reports(table, epoch, reports)
        log.info("window %s%s: %d rows, %d window changes, %.1fs (select %.1fs, sink write %.1fs)", chunks[0].label,
                 f" (+{len(chunks) - 1} chunks)" if len(chunks) > 1 else "", sum(counts.values()),
                 sum(applied.values()), seconds, t_select, t_write)
        return reports


def run_snapshot(spark, spec: JobSpec, secrets: dict[str, str]) -> list[dict[str, Any]]:
    return SnapshotJob(spark, spec, secrets).run()
