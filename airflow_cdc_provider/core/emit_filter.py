"""The stream's emit filter: send each change exactly once, never one a chunk snapshot already holds.

The stream starts at the smallest high watermark over all chunks. A change of table T, key k, at position p
is emitted iff

* p is after the largest high watermark of T (T is in its pure-binlog phase), or
* p is after the high watermark of the chunk that contains k (Flink CDC ``BinlogSplitReader#shouldEmit``).

Chunks are contiguous and unbounded at both ends, so every key has exactly one chunk, found by binary search
over the chunk starts. Starts are compared through the table's *key order* (for string keys: the database
collation's weights), never by Python's string order; the filter refuses starts that do not ascend in the
order it is given (``ChunkOrderError``), which would give changes the wrong chunk. The filter is stateless, so
parallel decoders of different binlog segments can share it.

Memory: one table's chunk infos are two flat lists (sorted starts, high watermark tuples), not one object
per chunk, and adjacent chunks with the same high watermark (the chunks one snapshot task read in one
watermark window) are one entry: the filter's size follows the number of windows, not of chunks.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping, Sequence

from airflow_cdc_provider.core.chunks import TableId
from airflow_cdc_provider.core.keys import Key
from airflow_cdc_provider.core.offsets import EventPosition
from airflow_cdc_provider.core.reports import ChunkRange

KeyOrder = Callable[[Key], Any]
"""Maps a key to a value whose Python order equals the database's order of keys."""


def natural_order(key: Key) -> Any:
    return key


@dataclass
class TableSplitInfo:
    """Compact chunk infos of one table: starts of chunks 1..n-1 (in key order) and each chunk's HW."""

    starts: list[Any]
    high_watermarks: list[tuple[int, int, int]]
    max_high_watermark: tuple[int, int, int]
    key_order: KeyOrder = natural_order

    def chunk_index(self, key: Key) -> int:
        return bisect.bisect_right(self.starts, self.key_order(key))


class EmitFilter:
    def __init__(
        self,
        tables: Mapping[TableId, TableSplitInfo],
        emit_tables_without_snapshot: bool = True,
    ) -> None:
        self._tables = dict(tables)
        self._emit_unknown = emit_tables_without_snapshot

    def should_emit(self, table: TableId, key: Key, position: EventPosition) -> bool:
        info = self._tables.get(table)
        if info is None:
            return self._emit_unknown
        p = position.sort_key
        if p > info.max_high_watermark:
            return True
        return p > info.high_watermarks[info.chunk_index(key)]

    def tables(self) -> list[TableId]:
        return list(self._tables)

    def max_high_watermark(self, table: TableId) -> tuple[int, int, int] | None:
        """Past this position the table is in its pure-binlog phase (every change is emitted)."""
        info = self._tables.get(table)
        return info.max_high_watermark if info else None


def table_split_info(ranges: Sequence[ChunkRange], key_order: KeyOrder = natural_order) -> TableSplitInfo:
    """One table's infos from its chunk ranges (a report's ``range``, or the seed's compact ones). The ranges
    must cover the table contiguously, from ``start=None`` to ``end=None``. They are taken in chunk order, which
    the plan numbered in the key's order: checking that each ends where the next starts needs no key compared
    in the collation's order (``key_order`` may be Python's, as when the snapshot is collected)."""
    if not ranges:
        raise ValueError("no chunk reports given")
    ordered = sorted(ranges, key=lambda r: r.index)
    if ordered[0].start is not None or any(r.start is None for r in ordered[1:]):
        raise ValueError(f"chunk reports of {ranges[0].table} must contain exactly one first chunk")
    for prev, cur in zip(ordered, ordered[1:]):
        if prev.end is None or key_order(prev.end) != key_order(cur.start):
            raise ValueError(
                f"chunk reports of {cur.table} are not contiguous: {prev.split_id} ends at "
                f"{prev.end!r} but {cur.split_id} starts at {cur.start!r}; a chunk report is missing"
            )
    if ordered[-1].end is not None:
        raise ValueError(f"chunk reports of {ranges[0].table} miss the last chunk")
    hws = [r.high_watermark.sort_key for r in ordered]
    starts = [key_order(r.start) for r in ordered[1:]]
    keep = [i for i in range(1, len(hws)) if hws[i] != hws[i - 1]]  # merge runs sharing one HW
    return TableSplitInfo(
        starts=[starts[i - 1] for i in keep],
        high_watermarks=[hws[0], *(hws[i] for i in keep)],
        max_high_watermark=max(hws),
        key_order=key_order,
    )


def build_emit_filter(
    ranges: Iterable[ChunkRange],
    key_orders: Mapping[str, KeyOrder] | None = None,
    emit_tables_without_snapshot: bool = True,
) -> EmitFilter:
    """Group chunk ranges by table and build the filter. ``key_orders`` maps 'db.table' -> KeyOrder."""
    by_table: dict[TableId, list[ChunkRange]] = {}
    for r in ranges:
        by_table.setdefault(r.table, []).append(r)
    key_orders = key_orders or {}
    infos = {t: table_split_info(rs, key_orders.get(str(t), natural_order)) for t, rs in by_table.items()}
    for t, info in infos.items():
        _check_ascending(t, info)
    return EmitFilter(infos, emit_tables_without_snapshot=emit_tables_without_snapshot)


class ChunkOrderError(ValueError):
    """A table's chunk starts do not ascend in the key order the filter was given: the binary search would give
    changes the wrong chunk, dropping some and sending others twice."""


def _check_ascending(table: TableId, info: TableSplitInfo) -> None:
    for a, b in zip(info.starts, info.starts[1:]):
        if not a < b:
            raise ChunkOrderError(
                f"{table}: its snapshot's chunk bounds do not ascend in the order the stream compares its keys in: "
                f"the table's key does not order as when its chunks were planned (a key column's collation or type "
                f"changed). Re-snapshot the table (airflow-cdc resnapshot <pipeline.yaml> --table {table})")
