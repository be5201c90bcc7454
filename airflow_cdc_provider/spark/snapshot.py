"""The chunk snapshot job on Spark: the watermark read (``pipeline.chunk_window``) of a task's chunks.

The chunks a task holds are consecutive, so they are read together in one watermark window (their union is
one key range; the algorithm holds for any key range read between its watermarks). One window instead of one
per chunk is what makes a task cost about as much as a plain JDBC reload of the same rows: one JDBC read
spread over all cores, one sink write, one binlog window read. Each chunk still gets its own report (same
LW/HW), sink directory or tag, and emit-filter entry.

What Spark does in the window's steps:

* SELECT: Spark JDBC (integer keys: ``partitions`` even key sub-ranges over the whole window, each row tagged
  with its chunk by one SQL expression on the chunk bounds; other keys: one read per chunk). Spark is lazy and
  the read must happen *between* the watermarks, so the sink's ``open_window`` forces it (parquet and delta
  stage the rows, each written once; jdbc upserts them into the mirror under the low watermark);
* publish (``spark.window_fold``): the window's changed keys (only they reach the driver) bring the rows to
  ``HW``. Parquet and delta fold them in Spark (a keyed anti-join and a union) and give the rows version
  ``HW`` (parquet: the staged window renamed under its version, rewritten only if the binlog window changed
  it); jdbc upserts each changed key's last change on top, under its own position. Then one report per chunk
  goes to the state store (one file for the window).

A window's ``.started`` marker in the state store tells a retry that an earlier attempt may have written part
of its chunks; the JDBC sink then removes rows that attempt wrote and this one did not (deleted meanwhile).
"""

from __future__ import annotations

import contextlib
import logging
import math
import time
from typing import Any

from airflow_cdc_provider.core.chunks import Chunk, TableId
from airflow_cdc_provider.core.keys import Key
from airflow_cdc_provider.core.offsets import BinlogOffset
from airflow_cdc_provider.core.reports import ChunkReport
from airflow_cdc_provider.pipeline.chunk_window import (
    check_epoch_definition, check_finished_epoch, check_key_order, chunk_reports, read_window, read_window_again,
)
from airflow_cdc_provider.pipeline.faults import FaultSwitch
from airflow_cdc_provider.pipeline.jobspec import JobSpec
from airflow_cdc_provider.sinks.base import CHUNK_COLUMN
from airflow_cdc_provider.sinks.registry import open_sink
from airflow_cdc_provider.sinks.types import TableSinkTypes
from airflow_cdc_provider.source.connection import connect
from airflow_cdc_provider.source.key_order import DatabaseKeyOrder
from airflow_cdc_provider.source.schema import TableSchema, load_schema
from airflow_cdc_provider.source.server import server_info
from airflow_cdc_provider.source.sql import quote_ident, quote_table, range_predicate
from airflow_cdc_provider.spark.frames import quoted
from airflow_cdc_provider.spark.jdbc_read import read_key_ranges
from airflow_cdc_provider.spark.session import default_parallelism
from airflow_cdc_provider.state.store import StateStore

log = logging.getLogger("airflow_cdc.snapshot")

MIN_ROWS_PER_PARTITION = 20_000
# a window's read partition holds at most about this many keys: a Spark task's rows stay a bounded share of a
# small driver's heap however many chunks the window holds
MAX_KEYS_PER_RANGE = 250_000
MAX_CHUNKS_PER_WINDOW = 256  # other than single-integer keys: a window makes one JDBC read per chunk


def key_sub_ranges(conn: Any, schema: TableSchema, start: Key | None, end: Key | None,
                   partitions: int, chunks: int = 1) -> list[tuple[Key | None, Key | None]]:
    """Split ``[start, end)`` of a single-integer-key table into key ranges for a parallel read: ``partitions``
    of them, or more so that none spans over ``MAX_KEYS_PER_RANGE`` keys, but never more than the window's
    ``chunks`` (the plan sized those by rows; a key span says nothing of the rows in it when keys are sparse)."""
    whole = [(start, end)]
    if not schema.single_integer_key:
        return whole
    where, params = range_predicate(schema.key_columns, start, end)
    k = quote_ident(schema.key_columns[0])
    with conn.cursor() as cur:
        cur.execute(f"SELECT MIN({k}), MAX({k}) FROM {quote_table(schema.table)} WHERE {where}", params)
        lo, hi = cur.fetchone()
    if lo is None or hi - lo + 1 < partitions * MIN_ROWS_PER_PARTITION:
        return whole
    partitions = max(partitions, min(chunks, math.ceil((hi - lo + 1) / MAX_KEYS_PER_RANGE)))
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
        ranges = key_sub_ranges(conn, schema, chunks[0].start, chunks[-1].end, partitions, len(chunks))
        df = read_key_ranges(spark, settings, types, ranges)
        key_type = types.types[schema.column_names.index(schema.key_columns[0])].spark
        return df.withColumn(CHUNK_COLUMN, chunk_tag_column(schema.key_columns[0], key_type, chunks))
    parts = [read_key_ranges(spark, settings, types, [(c.start, c.end)]).withColumn(CHUNK_COLUMN, F.lit(c.index))
             for c in chunks]
    df = parts[0]
    for part in parts[1:]:
        df = df.unionByName(part)
    return df


def windows(chunks: list[Chunk], max_chunks: int | None = MAX_CHUNKS_PER_WINDOW) -> list[list[Chunk]]:
    """``chunks`` grouped into watermark windows: runs of consecutive chunks of one epoch, of at most
    ``max_chunks`` (None: a single-integer key, read as a few even key ranges however many chunks)."""
    out: list[list[Chunk]] = []
    for c in chunks:
        prev = out[-1][-1] if out else None
        if (prev is not None and prev.epoch == c.epoch and prev.end is not None and prev.end == c.start
                and (max_chunks is None or len(out[-1]) < max_chunks)):
            out[-1].append(c)
        else:
            out.append([c])
    return out


class SnapshotJob:
    def __init__(self, spark, spec: JobSpec, secrets: dict[str, str]) -> None:
        self.spark = spark
        self.spec = spec
        self.settings = spec.source_settings(secrets)
        self.store = StateStore(spec.state_path)
        self.sink = open_sink(spec.sink, secrets, spark)
        self.faults = FaultSwitch(spec.fault)
        self.partitions = spec.read_partitions or default_parallelism(spark)

    def run(self) -> list[ChunkReport]:
        """Each table's chunks (a task holds consecutive chunks of one table or several whole small tables, in
        the plan's order), read in watermark windows one after the other, through one source connection."""
        by_table: dict[TableId, list[Chunk]] = {}
        for c in self.spec.chunks:
            by_table.setdefault(c.table, []).append(c)
        reports = []
        with contextlib.closing(connect(self.settings)) as conn:
            info = server_info(conn)
            for table, chunks in by_table.items():
                reports += self.read_table(conn, info, table, chunks)
        return reports

    def read_table(self, conn, info, table: TableId, chunks: list[Chunk]) -> list[ChunkReport]:
        schema = load_schema(conn, table, self.spec.chunk_key(table))
        check_key_order(chunks, schema)
        check_finished_epoch(self.store, chunks, schema)
        self.store.note_snapshot_definition(str(table), chunks[0].epoch, schema)
        check_epoch_definition(self.store, chunks, schema)
        self.store.write_table_schema(str(table), schema.to_dict())
        types = TableSinkTypes.of(schema, 0, chunks[0].epoch)
        self.sink.prepare(types, evolve=True)
        order = DatabaseKeyOrder(conn, schema)
        reports = []
        for window in windows(chunks, None if schema.single_integer_key else MAX_CHUNKS_PER_WINDOW):
            reports += self.read_window(conn, info, schema, types, order, window)
        return reports

    def _hit(self, point: str, chunks: list[Chunk]) -> None:
        for c in chunks:
            self.faults.hit(point, c.split_id)

    def read_window(self, conn, info, schema, types, order, chunks: list[Chunk]) -> list[ChunkReport]:
        """The window's chunks read (again, as a retried window, while an XA transaction prepared before its low
        watermark may have hidden rows from its SELECT) and published."""
        return read_window_again(lambda: self._read_window(conn, info, schema, types, order, chunks), schema)

    def _read_window(self, conn, info, schema, types, order, chunks: list[Chunk]) -> list[ChunkReport]:
        table, epoch = str(schema.table), chunks[0].epoch
        indexes = [c.index for c in chunks]
        retried = self.store.mark_window_started(table, epoch, indexes)
        self.store.clear_chunk_reports(table, epoch, indexes)
        t0 = time.monotonic()

        opened = []

        def select(low: BinlogOffset):
            rows = read_window_rows(self.spark, conn, self.settings, schema, types, chunks, self.partitions)
            opened.append(self.sink.open_window(rows, types, epoch, indexes, low.sort_key, retried,
                                                split_keys=bool(chunks[0].key_order)))
            return opened[-1]

        try:
            window, changes = read_window(conn, info, self.settings, self.spec.server_id, schema, order, chunks,
                                          select, lambda point: self._hit(point, chunks))
            t_select = time.monotonic() - t0
            t_publish = time.monotonic()
            lost = window.publish(changes, lambda: self._hit("mid_sink_write", chunks))
            self._hit("after_sink_write", chunks)
        except Exception:
            for w in opened:
                w.discard()
            raise
        for index in lost:  # their rows went with an earlier attempt's differently grouped directory
            log.warning("%s:%d: its rows were replaced by an overlapping window; its report is dropped so the "
                        "snapshot cannot finish until it is read again", table, index)
        if lost:
            self.store.clear_chunk_reports(table, epoch, lost)
        t_publish = time.monotonic() - t_publish
        seconds = time.monotonic() - t0
        reports = chunk_reports(chunks, changes, window.counts, seconds)
        self.store.write_window_reports(table, epoch, reports)
        log.info("window %s%s: %d rows, %d window changes, %.1fs (select %.1fs, sink write %.1fs)", chunks[0].label,
                 f" (+{len(chunks) - 1} chunks)" if len(chunks) > 1 else "", sum(window.counts.values()),
                 sum(changes.applied.values()), seconds, t_select, t_publish)
        return reports


def run_snapshot(spark, spec: JobSpec, secrets: dict[str, str]) -> list[ChunkReport]:
    return SnapshotJob(spark, spec, secrets).run()
