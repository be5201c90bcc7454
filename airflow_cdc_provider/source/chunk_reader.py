"""Lock-free read of one chunk, in process (the reference the Spark snapshot job is tested against).

1. LW = binlog position now.
2. SELECT the rows of ``[start, end)``: autocommit, no lock, no ORDER BY.
3. HW = binlog position now.
4. If HW > LW: read the binlog window ``[LW, HW)`` of this table and fold the changes of keys inside the
   chunk onto the rows (``core.normalize``). The result is the chunk exactly as of HW.

``ChunkReadHooks`` are called between the steps; tests use them to run concurrent DML at a precise moment,
and the fault-injection switch uses the same points.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass
from typing import Any, Callable

import pymysql

from airflow_cdc_provider.core.chunks import Chunk
from airflow_cdc_provider.core.keys import Key, encode_key
from airflow_cdc_provider.core.offsets import BinlogOffset
from airflow_cdc_provider.core.records import key_of
from airflow_cdc_provider.core.window import normalize_chunk
from airflow_cdc_provider.source.binlog import read_changes_between
from airflow_cdc_provider.source.key_order import DatabaseKeyOrder
from airflow_cdc_provider.source.schema import TableSchema
from airflow_cdc_provider.source.server import ServerInfo, current_offset, server_info
from airflow_cdc_provider.source.settings import ConnectionSettings
from airflow_cdc_provider.source.sql import quote_ident, quote_table, range_predicate
from airflow_cdc_provider.source.values import RowCanonicalizer

Hook = Callable[[], None]


@dataclass
class ChunkReadHooks:
    after_low_watermark: Hook | None = None
    after_select: Hook | None = None
    after_high_watermark: Hook | None = None

    @staticmethod
    def call(hook: Hook | None) -> None:
        if hook is not None:
            hook()


@dataclass
class ChunkReadResult:
    chunk: Chunk
    rows: dict[Key, dict[str, Any]]
    low_watermark: BinlogOffset
    high_watermark: BinlogOffset
    window_events_applied: int
    seconds: float

    def report(self) -> dict[str, Any]:
        """The chunk report contract (architecture guide, section 4)."""
        return {
            **chunk_report_base(self.chunk),
            "low_watermark": self.low_watermark.to_dict(),
            "high_watermark": self.high_watermark.to_dict(),
            "rows": len(self.rows),
            "window_events_applied": self.window_events_applied,
            "seconds": round(self.seconds, 3),
        }


def chunk_report_base(chunk: Chunk) -> dict[str, Any]:
    return {
        "split_id": chunk.split_id,
        "table": str(chunk.table),
        "key_columns": list(chunk.key_columns),
        "start": encode_key(chunk.start),
        "end": encode_key(chunk.end),
    }


def select_chunk_sql(schema: TableSchema, chunk: Chunk) -> tuple[str, list[Any]]:
    where, params = range_predicate(schema.key_columns, chunk.start, chunk.end)
    cols = ", ".join(quote_ident(c) for c in schema.column_names)
    return f"SELECT {cols} FROM {quote_table(schema.table)} WHERE {where}", params


def read_chunk(
    settings: ConnectionSettings,
    schema: TableSchema,
    chunk: Chunk,
    *,
    server_id: int,
    hooks: ChunkReadHooks | None = None,
) -> ChunkReadResult:
    hooks = hooks or ChunkReadHooks()
    t0 = time.monotonic()
    with contextlib.closing(pymysql.connect(**settings.pymysql_kwargs())) as conn:
        info: ServerInfo = server_info(conn)
        canon = RowCanonicalizer(schema)
        low = current_offset(conn, info)
        hooks.call(hooks.after_low_watermark)
        sql, params = select_chunk_sql(schema, chunk)
        rows: dict[Key, dict[str, Any]] = {}
        with conn.cursor(pymysql.cursors.SSCursor) as cur:
            cur.execute(sql, params)
            for raw in cur:
                row = canon.from_select(raw)
                rows[key_of(row, schema.key_columns)] = row
        hooks.call(hooks.after_select)
        high = current_offset(conn, info)
        hooks.call(hooks.after_high_watermark)
        applied = 0
        if high > low:
            order = DatabaseKeyOrder(conn, schema)
            window = list(read_changes_between(settings, server_id, low, high, {schema.table: schema}))
            if order.needs_database:
                order.prefetch([r.key for r in window] + [k for k in (chunk.start, chunk.end) if k is not None])
            normalized, applied = normalize_chunk(
                rows, window, lambda key: order.in_range(key, chunk.start, chunk.end)
            )
            rows = dict(normalized)
    return ChunkReadResult(chunk, rows, low, high, applied, time.monotonic() - t0)
