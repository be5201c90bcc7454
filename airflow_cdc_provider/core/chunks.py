"""Chunks of a table and how to split a table into them (Flink CDC's ``MySqlChunkSplitter``, improved).

A chunk is a half-open key range ``[start, end)``; the first chunk has ``start=None`` (unbounded below),
the last ``end=None`` (unbounded above), and a small table is one ``(None, None)`` chunk. Ranges are
contiguous, so every key, including keys inserted during the snapshot, belongs to exactly one chunk.

Two paths, as in Flink CDC:

* **even**: a single integer key whose values are dense enough (distribution factor
  ``(max - min + 1) / approx_rows`` within ``[lower, upper]``) is split by arithmetic, with no query per
  chunk;
* **uneven**: every other key (sparse integers, strings, composite keys, dates) asks the database for the
  next boundary, one indexed query per chunk. Boundaries are compared by the database (its collation),
  never by Python.

Differences from Flink CDC, on purpose: the uneven path takes the key of the ``(chunk_size + 1)``-th row as
the next end, so a chunk holds ``chunk_size`` rows rather than ``chunk_size - 1``; composite keys split on
the whole key (row-value comparison) rather than on its first column; and "is this table small?" is an
exact bounded count, not the InnoDB row estimate (which is 0 or stale right after bulk loads).
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field
from decimal import ROUND_CEILING, Decimal
from typing import Any, Callable, Iterable, Protocol, Sequence

from airflow_cdc_provider.core.keys import Key, decode_key, encode_key, format_key

DEFAULT_CHUNK_SIZE = 8096
DEFAULT_EVEN_LOWER_BOUND = 0.05
DEFAULT_EVEN_UPPER_BOUND = 1000.0


@dataclass(frozen=True)
class TableId:
    database: str
    table: str

    @classmethod
    def parse(cls, name: str) -> "TableId":
        db, sep, table = name.partition(".")
        if not sep or not db or not table:
            raise ValueError(f"table name {name!r} must be written as 'database.table'")
        return cls(db, table)

    def __str__(self) -> str:
        return f"{self.database}.{self.table}"


@dataclass(frozen=True)
class Chunk:
    """One key range of one table. ``start``/``end`` are key tuples (one value per key column) or None;
    ``epoch`` names the snapshot of the table the chunk belongs to (each re-snapshot is a new epoch);
    ``key_order``: what decided the source's order of the key when the chunk was planned (``source.key_order.
    order_signature``; empty: not known), under which the ranges of an epoch's chunks split the keys."""

    table: TableId
    index: int
    key_columns: tuple[str, ...]
    start: Key | None
    end: Key | None
    epoch: int = 0
    key_order: tuple[str, ...] = field(default=(), compare=False)

    @property
    def split_id(self) -> str:
        return f"{self.table}:{self.index}"

    @property
    def label(self) -> str:
        """``db.t [105, 109)`` as shown in the Airflow UI (``map_index_template``)."""
        if self.start is None and self.end is None:
            return f"{self.table} (whole table)"
        lo = "(-inf" if self.start is None else f"[{format_key(self.start)}"
        hi = "+inf)" if self.end is None else f"{format_key(self.end)})"
        return f"{self.table} {lo}, {hi}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "split_id": self.split_id,
            "table": str(self.table),
            "index": self.index,
            "key_columns": list(self.key_columns),
            "start": encode_key(self.start),
            "end": encode_key(self.end),
            "epoch": self.epoch,
            "key_order": list(self.key_order),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Chunk":
        return cls(
            table=TableId.parse(data["table"]),
            index=int(data["index"]),
            key_columns=tuple(data["key_columns"]),
            start=decode_key(data["start"]),
            end=decode_key(data["end"]),
            epoch=int(data.get("epoch") or 0),
            key_order=tuple(data.get("key_order") or ()),
        )


class KeyRangeQueries(Protocol):
    """What the splitter needs to ask the database about one table's chunk key (see source/chunk_queries)."""

    def has_more_rows_than(self, n: int) -> bool:
        """Exact, bounded: does the table hold more than ``n`` rows?"""

    def min_max_single(self) -> tuple[Any, Any]:
        """MIN and MAX of a single-column key (None, None for an empty table)."""

    def approximate_row_count(self) -> int:
        """The optimizer's row estimate (cheap, may be stale)."""

    def min_key(self) -> Key | None:
        """The smallest key, or None for an empty table."""

    def nth_key_from(self, start: Key, n: int) -> tuple[Key | None, bool]:
        """The key of the ``n``-th row (0-based) with key >= ``start`` in key order, and whether the database
        considers it equal to ``start``. ``(None, False)`` when fewer rows remain."""

    def next_key_after(self, key: Key) -> Key | None:
        """The smallest key > ``key`` (database collation), or None."""


@dataclass
class SplitOptions:
    chunk_size: int = DEFAULT_CHUNK_SIZE
    even_lower_bound: float = DEFAULT_EVEN_LOWER_BOUND
    even_upper_bound: float = DEFAULT_EVEN_UPPER_BOUND
    even_split: bool = True  # False: always ask the database for boundaries (e.g. unreliable row estimates)

    def __post_init__(self) -> None:
        if not isinstance(self.chunk_size, int) or self.chunk_size <= 0:
            raise ValueError(f"chunk_size must be a positive integer, got {self.chunk_size!r}")
        if not 0.0 <= self.even_lower_bound <= 1.0:
            raise ValueError(f"even_lower_bound must be within [0, 1], got {self.even_lower_bound}")
        if self.even_upper_bound < 1.0:
            raise ValueError(f"even_upper_bound must be >= 1, got {self.even_upper_bound}")


def distribution_factor(min_value: int, max_value: int, approx_rows: int) -> Decimal | None:
    """Flink CDC's ``(max - min + 1) / approx_rows`` rounded up to 4 decimals; None when rows are unknown."""
    if approx_rows <= 0:
        return None
    return (Decimal(max_value - min_value + 1) / Decimal(approx_rows)).quantize(
        Decimal("0.0001"), rounding=ROUND_CEILING
    )


def split_even(min_value: int, max_value: int, step: int) -> list[tuple[Key | None, Key | None]]:
    """Arithmetic split of ``[min, max]`` into ``(None, min+step) [min+step, min+2step) ... [s, None)``."""
    if step < 1:
        raise ValueError(f"step must be >= 1, got {step}")
    ranges: list[tuple[Key | None, Key | None]] = []
    start: int | None = None
    end = min_value + step
    while end <= max_value:
        ranges.append((None if start is None else (start,), (end,)))
        start = end
        end += step
    ranges.append((None if start is None else (start,), None))
    return ranges


def split_uneven(queries: KeyRangeQueries, chunk_size: int) -> list[tuple[Key | None, Key | None]]:
    """Query-driven split: each end is the key ``chunk_size`` rows after the start (duplicate-key safe)."""
    first = queries.min_key()
    if first is None:
        return [(None, None)]
    ranges: list[tuple[Key | None, Key | None]] = []
    start: Key | None = None
    cursor: Key = first
    while True:
        end, same_as_cursor = queries.nth_key_from(cursor, chunk_size)
        if end is not None and same_as_cursor:
            # more than chunk_size rows share one chunk-key value: the chunk must still end after it
            end = queries.next_key_after(cursor)
        if end is None:
            break
        ranges.append((start, end))
        start = cursor = end
    ranges.append((start, None))
    return ranges


def split_table(
    table: TableId,
    key_columns: Sequence[str],
    queries: KeyRangeQueries,
    options: SplitOptions,
    *,
    single_integer_key: bool,
) -> list[Chunk]:
    """Split one table into contiguous chunks covering the whole key space."""
    key_columns = tuple(key_columns)
    if not queries.has_more_rows_than(options.chunk_size):
        ranges: list[tuple[Key | None, Key | None]] = [(None, None)]
    else:
        ranges = []
        if single_integer_key and options.even_split:
            lo, hi = queries.min_max_single()
            if lo is not None and hi is not None and lo != hi:
                factor = distribution_factor(int(lo), int(hi), queries.approximate_row_count())
                if factor is not None and options.even_lower_bound <= factor <= options.even_upper_bound:
                    step = max(int(factor * options.chunk_size), 1)
                    ranges = split_even(int(lo), int(hi), step)
        if not ranges:
            ranges = split_uneven(queries, options.chunk_size)
    return [Chunk(table, i, key_columns, s, e) for i, (s, e) in enumerate(ranges)]


@dataclass
class ChunkTask:
    """The unit one mapped Airflow task (one Spark application) works on: consecutive chunks of one table, or
    several whole small tables, one after the other."""

    chunks: list[Chunk] = field(default_factory=list)

    @property
    def tables(self) -> list[TableId]:
        return list(dict.fromkeys(c.table for c in self.chunks))

    @property
    def label(self) -> str:
        if len(self.chunks) == 1:
            return self.chunks[0].label
        tables = self.tables
        if len(tables) > 1:
            more = len(tables) - 1
            return f"{tables[0]} and {more} more table{'s' if more > 1 else ''} ({len(self.chunks)} chunks)"
        first, last = self.chunks[0], self.chunks[-1]
        merged = Chunk(first.table, first.index, first.key_columns, first.start, last.end)
        return f"{merged.label} ({len(self.chunks)} chunks)"

    def to_dict(self) -> dict[str, Any]:
        return {"tables": [str(t) for t in self.tables], "label": self.label,
                "chunks": [c.to_dict() for c in self.chunks]}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "ChunkTask":
        return cls([Chunk.from_dict(c) for c in data["chunks"]])


def group_into_tasks(chunks: Iterable[Chunk], max_tasks: int, chunks_per_task: int = 1) -> list[ChunkTask]:
    """Tasks of at most ``chunks_per_task`` chunks each (a task is one Spark application, so grouping
    amortises its start-up): a table of more chunks is spread evenly over tasks of its consecutive chunks;
    a table of that many or fewer is read whole by one task, which consecutive such tables share while their
    chunks fit. Never more tasks than ``max_tasks`` (Airflow's ``[core] max_map_length``): above that, tasks
    take more chunks each, the fewest more that fit, down to one task for everything."""
    if max_tasks < 1:
        raise ValueError(f"max_tasks must be >= 1, got {max_tasks}")
    if chunks_per_task < 1:
        raise ValueError(f"chunks_per_task must be >= 1, got {chunks_per_task}")
    by_table: dict[TableId, list[Chunk]] = {}
    for c in chunks:
        by_table.setdefault(c.table, []).append(c)
    tables = list(by_table.values())
    tasks = _group(tables, chunks_per_task)
    if len(tasks) <= max_tasks:
        return tasks
    lo, hi = chunks_per_task + 1, max(chunks_per_task + 1, sum(len(cs) for cs in tables))  # hi: a single task
    while lo < hi:
        mid = (lo + hi) // 2
        if len(_group(tables, mid)) <= max_tasks:
            hi = mid
        else:
            lo = mid + 1
    return _group(tables, lo)


def _group(tables: list[list[Chunk]], per_task: int) -> list[ChunkTask]:
    """The tables' chunks (in order) in tasks of at most ``per_task`` chunks, as ``group_into_tasks`` says."""
    tasks: list[ChunkTask] = []
    shared: ChunkTask | None = None  # the task that consecutive small tables fill
    for cs in tables:
        if len(cs) > per_task:
            tasks += _spread(cs, -(-len(cs) // per_task))
            shared = None
        elif shared is not None and len(shared.chunks) + len(cs) <= per_task:
            shared.chunks.extend(cs)
        else:
            shared = ChunkTask(list(cs))
            tasks.append(shared)
    return tasks


def _spread(cs: list[Chunk], n: int) -> list[ChunkTask]:
    """``cs`` in ``n`` tasks of consecutive chunks, sizes differing by at most one."""
    base, extra = divmod(len(cs), n)
    tasks, pos = [], 0
    for i in range(n):
        size = base + (1 if i < extra else 0)
        tasks.append(ChunkTask(cs[pos : pos + size]))
        pos += size
    return tasks


def chunk_locator(chunks: Sequence[Chunk], order: Callable[[Key], Any] = lambda k: k) -> Callable[[Key], Chunk | None]:
    """``locate(key)``: the chunk of the consecutive ``chunks`` holding ``key`` (keys compared by ``order``,
    the database's key order), or None when the key is outside all of them. Used to assign the changes of a
    watermark window that spans several chunks to their chunks."""
    if not chunks:
        raise ValueError("chunk_locator needs at least one chunk")
    for a, b in zip(chunks, chunks[1:]):
        if a.table != b.table or a.end is None or a.end != b.start:
            raise ValueError(f"chunks {a.label} and {b.label} are not consecutive")
    first, last = chunks[0].start, chunks[-1].end
    bounds = [order(c.start) for c in chunks[1:]]

    def locate(key: Key) -> Chunk | None:
        k = order(key)
        if (first is not None and k < order(first)) or (last is not None and not k < order(last)):
            return None
        return chunks[bisect.bisect_right(bounds, k)]

    return locate
