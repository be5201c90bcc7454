"""The chunk snapshot job: the DBLog / Flink CDC 2.0 watermark read of one or more chunks of one table.

Per chunk, in this order (``mysql/chunk_reader.py`` is the in-process reference of the same steps):

1. ``LW`` = binlog position now;
2. SELECT the chunk's rows with Spark JDBC, one partition per key sub-range, and persist them (Spark is
   lazy: the read must happen *between* the watermarks, so it is forced with a count);
3. ``HW`` = binlog position now;
4. if ``HW > LW``: read the binlog window ``[LW, HW)`` of this table on the driver, keep the changes of keys
   inside the chunk, and fold them in Spark: keyed anti-join removes every changed key from the SELECTed rows,
   a union adds back the last image of each key that is not deleted. Chunk rows never reach the driver;
   only the window's changed keys do;
5. write the rows with version ``HW`` to the sink (idempotent), then the chunk report to the state store.

A ``.started`` marker in the state store tells a retry that an earlier attempt may have written part of
this chunk; the JDBC sink then removes rows that attempt wrote and this one did not (deleted meanwhile).
"""

from __future__ import annotations

import contextlib
import logging
import math
import time
from typing import Any

from ..core.chunks import Chunk
from ..core.keys import Key
from ..core.records import OP_DELETE, ChangeRecord
from ..faults import FaultSwitch
from ..jobspec import JobSpec
from ..mysql.binlog import read_changes_between
from ..mysql.chunk_reader import chunk_report_base
from ..mysql.key_order import DatabaseKeyOrder
from ..mysql.planner import connect
from ..mysql.schema import TableSchema, load_schema
from ..mysql.server import current_offset, server_info
from ..mysql.sql import quote_ident, quote_table, range_predicate
from ..mysql.types import TableSinkTypes
from ..sinks import SinkConfig
from ..state import StateStore, table_dir_name
from .jdbc_read import read_key_ranges
from .sinks import spark_sink, with_meta

log = logging.getLogger("airflow_cdc.snapshot")

MIN_ROWS_PER_PARTITION = 20_000


def key_sub_ranges(conn: Any, schema: TableSchema, chunk: Chunk, partitions: int) -> list[tuple[Key | None, Key | None]]:
    """Split a chunk of a single-integer-key table into ``partitions`` key ranges for a parallel read."""
    whole = [(chunk.start, chunk.end)]
    if partitions <= 1 or not schema.single_integer_key:
        return whole
    where, params = range_predicate(schema.key_columns, chunk.start, chunk.end)
    k = quote_ident(schema.key_columns[0])
    with conn.cursor() as cur:
        cur.execute(f"SELECT MIN({k}), MAX({k}) FROM {quote_table(schema.table)} WHERE {where}", params)
        lo, hi = cur.fetchone()
    if lo is None or hi - lo + 1 < partitions * MIN_ROWS_PER_PARTITION:
        return whole
    step = math.ceil((hi - lo + 1) / partitions)
    bounds = [(lo + i * step,) for i in range(1, partitions) if lo + i * step <= hi]
    edges = [chunk.start, *bounds, chunk.end]
    return list(zip(edges[:-1], edges[1:]))


def window_changes(records: list[ChangeRecord], in_chunk) -> tuple[dict[Key, ChangeRecord], int]:
    """The last change of every key inside the chunk, and how many window changes touched the chunk."""
    last: dict[Key, ChangeRecord] = {}
    applied = 0
    for rec in records:
        if in_chunk(rec.key):
            last[rec.key] = rec
            applied += 1
    return last, applied


def fold_window(spark, rows_df, types: TableSinkTypes, last: dict[Key, ChangeRecord]):
    """Spark: rows without the changed keys, plus the last image of each changed key that still exists."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import StructType

    if not last:
        return rows_df
    schema = types.schema
    key_idx = [schema.column_names.index(k) for k in schema.key_columns]
    full = StructType.fromDDL(types.spark_ddl)
    key_struct = StructType([full.fields[i] for i in key_idx])
    key_rows = [tuple(types.types[i].convert(v) for i, v in zip(key_idx, key, strict=True)) for key in last]
    upserts = [types.row_to_sink(dict(rec.after)) for rec in last.values() if rec.op != OP_DELETE]
    changed = spark.createDataFrame(key_rows, key_struct)
    kept = rows_df.join(F.broadcast(changed), on=list(schema.key_columns), how="left_anti")
    return kept.unionByName(spark.createDataFrame(upserts, full))


class SnapshotJob:
    def __init__(self, spark, spec: JobSpec, secrets: dict[str, str]) -> None:
        self.spark = spark
        self.spec = spec
        self.settings = spec.source_settings(secrets)
        self.store = StateStore(spec.state_path)
        self.sink = spark_sink(spark, SinkConfig.from_dict(spec.sink), secrets)
        self.faults = FaultSwitch(spec.fault)
        self.partitions = spec.read_partitions or spark.sparkContext.defaultParallelism

    def run(self) -> list[dict[str, Any]]:
        chunks = [Chunk.from_dict(c) for c in self.spec.chunks]
        tables = {c.table for c in chunks}
        if len(tables) != 1:
            raise ValueError(f"a snapshot job reads chunks of one table, got {sorted(map(str, tables))}")
        table = tables.pop()
        chunk_key = (self.spec.tables.get(str(table)) or {}).get("chunk_key")
        reports = []
        with contextlib.closing(connect(self.settings)) as conn:
            info = server_info(conn)
            schema = load_schema(conn, table, chunk_key)
            types = TableSinkTypes.of(schema)
            self.sink.prepare(types)
            order = DatabaseKeyOrder(conn, schema)
            for chunk, raw in zip(chunks, self.spec.chunks, strict=True):
                reports.append(self.read_chunk(conn, info, schema, types, order, chunk, int(raw["epoch"])))
        return reports

    def read_chunk(self, conn, info, schema, types, order, chunk: Chunk, epoch: int) -> dict[str, Any]:
        from pyspark import StorageLevel

        ctx = chunk.split_id
        started = f"tables/{table_dir_name(str(schema.table))}/epoch={epoch}/{chunk.index}.started"
        retried = self.store.exists(started)
        self.store.write_json(started, {"split_id": ctx, "at": time.time()})
        self.store.clear_chunk_report(str(schema.table), epoch, chunk.index)
        t0 = time.monotonic()

        low = current_offset(conn, info)
        self.faults.hit("after_low_watermark", ctx)
        ranges = key_sub_ranges(conn, schema, chunk, self.partitions)
        rows_df = read_key_ranges(self.spark, self.settings, types, ranges).persist(StorageLevel.MEMORY_AND_DISK)
        selected = rows_df.count()
        self.faults.hit("after_select", ctx)
        high = current_offset(conn, info)
        self.faults.hit("after_high_watermark", ctx)

        last: dict[Key, ChangeRecord] = {}
        applied = 0
        if high > low:
            records = list(read_changes_between(self.settings, self.spec.server_id, low, high, {schema.table: schema}))
            if order.needs_database:
                order.prefetch([r.key for r in records] + [k for k in (chunk.start, chunk.end) if k is not None])
            last, applied = window_changes(records, lambda key: order.in_range(key, chunk.start, chunk.end))
        result = fold_window(self.spark, rows_df, types, last).persist(StorageLevel.MEMORY_AND_DISK)
        rows = result.count() if last else selected
        out = with_meta(result, "r", 0, high.sort_key)
        self.sink.write_chunk(out, types, epoch, chunk.index, low.sort_key, retried,
                              lambda: self.faults.hit("mid_sink_write", ctx))
        result.unpersist()
        rows_df.unpersist()
        report = {
            **chunk_report_base(chunk),
            "low_watermark": low.to_dict(),
            "high_watermark": high.to_dict(),
            "rows": int(rows),
            "window_events_applied": applied,
            "seconds": round(time.monotonic() - t0, 3),
            "epoch": epoch,
            "index": chunk.index,
        }
        self.store.write_chunk_report(epoch, chunk.index, report)
        log.info("chunk %s: %d rows, %d window changes, %.1fs", chunk.label, rows, applied, report["seconds"])
        return report


def run_snapshot(spark, spec: JobSpec, secrets: dict[str, str]) -> list[dict[str, Any]]:
    return SnapshotJob(spark, spec, secrets).run()
