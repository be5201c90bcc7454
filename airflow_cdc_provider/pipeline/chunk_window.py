"""The watermark read of consecutive chunks of one table (DBLog / Flink CDC 2.0), without locks, step by step.

1. ``LW`` = the binlog position now, once the XA transactions prepared at it have ended (``low_watermark``);
2. SELECT the chunks' rows (autocommit, no lock, no ORDER BY); the read must happen here, between the
   watermarks;
3. ``HW`` = the binlog position now;
4. if ``HW > LW``: read the binlog window ``[LW, HW)`` of the table and keep the last change of every key
   inside the chunks (``core.window``); folded onto the rows, they give the chunks exactly as of ``HW`` (after
   a TRUNCATE in the window, onto no rows);
5. if an XA transaction prepared before ``LW`` committed in the window or just after it, or is still prepared
   after the SELECT, the SELECT may have missed its rows, which the binlog holds before ``LW``: the window is
   read again (``read_window_again``).

``read_window`` runs these steps for both readers: the Spark snapshot job (``spark.snapshot``, rows in a
DataFrame, brought to ``HW`` by the sink's window: ``spark.window_fold``) and ``read_chunk`` below (rows in a
dict, in this process: what tests run DML against at a precise moment). Only the SELECT and the fold differ. ``checkpoint(point)`` is called
after each step (``after_low_watermark``, ``after_select``, ``after_high_watermark``): the tests' hooks and
the fault injection switch use these points.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable, TypeVar

import pymysql

from airflow_cdc_provider.core.chunks import Chunk, chunk_locator
from airflow_cdc_provider.core.keys import Key
from airflow_cdc_provider.core.offsets import BinlogOffset, EventPosition
from airflow_cdc_provider.core.records import key_of
from airflow_cdc_provider.core.reports import ChunkReport
from airflow_cdc_provider.core.window import LastChanges, after_last_truncate, fold_rows, window_changes
from airflow_cdc_provider.source.binlog import TableChangeReader, read_changes_between
from airflow_cdc_provider.source.chunk_queries import select_chunk_sql
from airflow_cdc_provider.source.connection import connect
from airflow_cdc_provider.source.key_order import DatabaseKeyOrder, order_signature
from airflow_cdc_provider.source.schema import TableSchema, load_schema
from airflow_cdc_provider.source.server import (XA_COMMIT_GRACE, ServerInfo, SourceError, current_offset,
                                                prepared_xa_transactions, server_info)
from airflow_cdc_provider.source.settings import ConnectionSettings
from airflow_cdc_provider.source.values import RowCanonicalizer

T = TypeVar("T")
Checkpoint = Callable[[str], None]
CHECKPOINTS = ("after_low_watermark", "after_select", "after_high_watermark")
PREPARED_XA_WAIT = 120.0  # seconds a chunk read waits for the XA transactions prepared at its LW to end
WINDOW_ATTEMPTS = 10  # reads of a window an XA transaction prepared before its LW may take
log = logging.getLogger("airflow_cdc.chunk_window")


def no_checkpoint(point: str) -> None:
    pass


@dataclass
class WindowChanges:
    """What the binlog did to a window's chunks between its watermarks."""

    low: BinlogOffset
    high: BinlogOffset
    last: LastChanges = field(default_factory=dict)  # key -> its newest change, with its chunk index
    applied: Counter = field(default_factory=Counter)  # chunk index -> changes of its keys in the window
    truncate: EventPosition | None = None  # the window's last TRUNCATE: the SELECTed rows are void, ``last`` is all

    @property
    def truncated(self) -> bool:
        return self.truncate is not None

    @property
    def touched(self) -> set[int]:
        """The chunks whose rows the window changed."""
        return {index for _, index in self.last.values()}


def read_window(conn: Any, info: ServerInfo, settings: ConnectionSettings, server_id: int, schema: TableSchema,
                order: DatabaseKeyOrder, chunks: list[Chunk], select: Callable[[BinlogOffset], T],
                checkpoint: Checkpoint = no_checkpoint, prepared_wait: float = PREPARED_XA_WAIT
                ) -> tuple[T, WindowChanges]:
    """Steps 1-4 for the consecutive ``chunks``: ``select(low_watermark)`` reads their rows (and must force the
    read); returns what it returned and the window's changes, ready to fold."""
    low, ended_before_select = low_watermark(conn, info, schema, prepared_wait)
    checkpoint("after_low_watermark")
    selected = select(low)
    checkpoint("after_select")
    prepared = prepared_xa_transactions(conn)  # before HW: each one's prepare is in the binlog before HW
    high = current_offset(conn, info)
    checkpoint("after_high_watermark")
    _check_definition(conn, schema, high)
    changes = WindowChanges(low, high)
    reader = TableChangeReader({schema.table: schema}, window=True)
    if high > low:
        records, changes.truncate = after_last_truncate(
            read_changes_between(settings, server_id, low, high, {schema.table: schema}, reader))
        if order.needs_database:
            order.prefetch([r.key for r in records] + [k for c in chunks for k in (c.start, c.end) if k is not None])
        changes.last, changes.applied = window_changes(records, chunk_locator(chunks, order))
    _check_prepared_before(schema, low, reader, prepared, _commits_after(settings, server_id, schema, high, conn, info),
                           ended_before_select)
    return selected, changes


def _commits_after(settings: ConnectionSettings, server_id: int, schema: TableSchema, high: BinlogOffset, conn: Any,
                   info: ServerInfo) -> set[str]:
    """The xids of XA transactions committed just after HW, prepared before it: a commit in progress at HW is in
    neither ``XA RECOVER`` (the server takes the transaction off its list first) nor the binlog yet, and lands
    there moments later (``XA_COMMIT_GRACE``)."""
    time.sleep(XA_COMMIT_GRACE)
    later = current_offset(conn, info)
    if not later > high:
        return set()
    reader = TableChangeReader({schema.table: schema}, window=True, rows=False)
    for _ in read_changes_between(settings, server_id, high, later, {schema.table: schema}, reader):
        pass
    return reader.xa_committed_unseen


class PreparedBeforeWindow(SourceError):
    """An XA transaction prepared before the low watermark ended after it, or may: read the window again."""


def _check_prepared_before(schema: TableSchema, low: BinlogOffset, reader: TableChangeReader,
                           prepared: list[str], committed_after: set[str], ended_before_select: set[str]) -> None:
    """The window holds no XA transaction prepared before its low watermark whose commit the SELECT may have
    missed: none committed inside the window without ending there (``XA END`` in the window), none prepared
    after the SELECT (``XA RECOVER`` just before HW, so its prepare is in the binlog before HW) or committed just
    after HW (``committed_after``) that did not, but those ``low_watermark`` waited for (``ended_before_select``:
    their commits are visible to the SELECT).
    ``low_watermark``'s wait cannot promise it alone: the server writes a prepare to the binlog before ``XA
    RECOVER`` lists it."""
    not_ended_here = {x for x in [*prepared, *committed_after] if x not in reader.xa_ended}
    unseen = sorted((reader.xa_committed_unseen | not_ended_here) - ended_before_select)
    if unseen:
        raise PreparedBeforeWindow(
            f"reading chunks of {schema.table} from {low}: XA transactions prepared before the low watermark "
            f"committed after it, or may: {'; '.join(unseen[:5])}{' ...' if len(unseen) > 5 else ''}")


def read_window_again(read: Callable[[], T], schema: TableSchema, attempts: int = WINDOW_ATTEMPTS) -> T:
    """``read()`` (a whole window, steps 1-4 and what its caller does with them), again while an XA transaction
    prepared before its low watermark makes it ``PreparedBeforeWindow``; after ``attempts``, that error."""
    for attempt in range(1, attempts + 1):
        try:
            return read()
        except PreparedBeforeWindow as exc:
            if attempt == attempts:
                raise PreparedBeforeWindow(f"{exc}; still so after {attempts} reads of the window: end the XA "
                                           "transactions on the source (XA RECOVER lists them), then retry") from exc
            log.info("%s; reading the window again", exc)
    raise AssertionError("unreachable")


class PreparedTransactions(SourceError):
    """XA transactions stayed prepared for longer than a chunk read waits to take its low watermark."""


def low_watermark(conn: Any, info: ServerInfo, schema: TableSchema,
                  wait: float = PREPARED_XA_WAIT) -> tuple[BinlogOffset, set[str]]:
    """The binlog position now, once the XA transactions prepared at it have ended, and their xids. A transaction
    prepared before LW has its rows logged at its XA PREPARE, before the window; if it committed after the SELECT,
    neither the SELECT nor the window would hold them. ``XA RECOVER`` after LW lists such transactions (all but
    one whose prepare the server is still finishing: ``_check_prepared_before`` catches that one); the read waits
    until none of those is listed (committed ones are then visible to the SELECT), looking often at first (XA
    transactions are prepared for milliseconds), then less often."""
    started = time.monotonic()
    low = current_offset(conn, info)
    prepared = set(prepared_xa_transactions(conn))
    ended = set(prepared)
    while prepared:
        waited = time.monotonic() - started
        if waited >= wait:
            names = "; ".join(sorted(prepared)[:5]) + (" ..." if len(prepared) > 5 else "")
            raise PreparedTransactions(
                f"reading chunks of {schema.table}: XA transactions are still prepared after {wait:.0f} s: {names}. "
                f"A chunk read cannot start while one is prepared (its rows were logged before the read and are "
                f"not visible to it). End them on the source with XA COMMIT or XA ROLLBACK (XA RECOVER lists "
                f"them); the task's retry then reads the chunks")
        time.sleep(0.005 if waited < 2 else 0.25)
        prepared &= set(prepared_xa_transactions(conn))
    return low, ended


class KeyOrderChanged(RuntimeError):
    """The table's key no longer orders as when its chunks were planned: their ranges may overlap."""


class FinishedEpochChanged(RuntimeError):
    """Chunks of a snapshot epoch that finished, to be read again under another definition of the table."""


def check_finished_epoch(store, chunks: list[Chunk], schema: TableSchema) -> None:
    """Refuse to read again chunks of the table's finished snapshot epoch (a succeeded chunk task cleared) once
    the table's definition changed since the epoch read it: the sinks and the stream hold the epoch's rows under
    the definition it was read with (or evolved them from it in place), and rows of the new one would go among
    them. Unchanged, a chunk is read again as a repair: its rows converge with the stream's by version."""
    table, epoch = str(schema.table), chunks[0].epoch
    finished = store.finished_snapshot(table)
    base = store.table_base(table, epoch)
    if finished is None or finished.epoch != epoch or base is None or base.schema == schema:
        return
    raise FinishedEpochChanged(
        f"{table}: its snapshot epoch {epoch} has finished, and the table's definition changed since that snapshot "
        f"read it (an ALTER): these chunks read again would put rows of the new definition among the epoch's. "
        f"Re-snapshot the table instead of clearing its chunk tasks: airflow-cdc resnapshot <pipeline.yaml> --table "
        f"{table} (or trigger a run with {{\"resnapshot\": [\"{table}\"]}})")


class EpochDefinitionChanged(RuntimeError):
    """Chunks of a snapshot epoch to be read under another definition of the table than its first task read."""


def check_epoch_definition(store, chunks: list[Chunk], schema: TableSchema) -> None:
    """Refuse to read chunks under another definition of the table than the epoch's base (the definition its first
    task read, ``StateStore.note_snapshot_definition``): after an ALTER between the epoch's chunk tasks, the sink
    table would be changed under the rows the earlier tasks wrote (an added column NULL in them, not its default;
    a retyped column's values gone), and the epoch would hold rows of two definitions. It cannot finish: the
    table is snapshotted again, in a new epoch that reads one definition."""
    table, epoch = str(schema.table), chunks[0].epoch
    base = store.table_base(table, epoch)
    if base is None or base.schema == schema:
        return
    raise EpochDefinitionChanged(
        f"{table}: its definition changed while snapshot epoch {epoch} was being read (an ALTER between its chunk "
        f"tasks): the chunks read before it are in the sink under the old definition, and these, read under the "
        f"new one, would change the sink table under their rows. This epoch cannot finish; snapshot the table "
        f"again: airflow-cdc resnapshot <pipeline.yaml> --table {table} (or trigger a run with "
        f"{{\"resnapshot\": [\"{table}\"]}})")


def check_key_order(chunks: list[Chunk], schema: TableSchema) -> None:
    """Refuse to read chunks planned under another key or another order of it than the table has now (an ALTER
    changed a key column's collation or type, or the key, since the plan step): their ranges no longer split
    the table, so two chunks could both hold a key. Chunks of a plan that did not record the order are read as
    they are."""
    planned, now = chunks[0].key_order, order_signature(schema)
    was, key = tuple(chunks[0].key_columns), tuple(schema.key_columns)
    if planned and (planned, was) != (now, key):
        raise KeyOrderChanged(
            f"{schema.table}: its chunks were planned with the key ({', '.join(was)}) ordered as "
            f"{'; '.join(planned)}, and its key is now ({', '.join(key)}) ordered as {'; '.join(now)}: an ALTER "
            f"(or an edit of source.chunk_key) changed the key or a key column's collation or type since the plan "
            f"step, so the planned key ranges no longer split the table. Clear the plan step of this DAG run (with "
            f"its downstream tasks) to plan and snapshot the table again")


def _check_definition(conn: Any, schema: TableSchema, high: BinlogOffset) -> None:
    """The table still has the definition its rows were SELECTed with (an ALTER between the job's look at the
    table and the low watermark leaves no trace in the window, and would give every row of it the old columns)."""
    from airflow_cdc_provider.core.offsets import EventPosition
    from airflow_cdc_provider.core.schema_changes import RESYNC, SchemaChange
    from airflow_cdc_provider.core.window import SchemaChangeInWindow

    chunk_key = None if schema.key_columns == schema.primary_key else schema.key_columns
    now = load_schema(conn, schema.table, chunk_key)
    if (now.columns, now.primary_key) != (schema.columns, schema.primary_key):
        raise SchemaChangeInWindow(SchemaChange(
            RESYNC, schema.table, "", f"its definition is no longer the one the chunk was read with: columns "
            f"({', '.join(now.column_names)}), not ({', '.join(schema.column_names)})",
            EventPosition(high.file, high.pos, 0)))


def chunk_reports(chunks: list[Chunk], changes: WindowChanges, counts: dict[int, int], seconds: float
                  ) -> list[ChunkReport]:
    """One report per chunk of a window (they share its watermarks)."""
    return [ChunkReport(c, changes.low, changes.high, int(counts.get(c.index, 0)), changes.applied[c.index],
                        round(seconds, 3)) for c in chunks]


# -- in process ---------------------------------------------------------------------------------------
@dataclass
class ChunkReadHooks:
    """Called between the steps of ``read_chunk`` (tests run concurrent DML at these moments)."""

    after_low_watermark: Callable[[], None] | None = None
    after_select: Callable[[], None] | None = None
    after_high_watermark: Callable[[], None] | None = None

    def checkpoint(self, point: str) -> None:
        hook = getattr(self, point)
        if hook is not None:
            hook()


@dataclass
class ChunkReadResult:
    report: ChunkReport
    rows: dict[Key, dict[str, Any]]


def read_chunk(settings: ConnectionSettings, schema: TableSchema, chunk: Chunk, *, server_id: int,
               hooks: ChunkReadHooks | None = None, prepared_wait: float = PREPARED_XA_WAIT) -> ChunkReadResult:
    """One chunk read in this process, rows as canonical dicts: the chunk exactly as of its HW."""
    t0 = time.monotonic()
    with contextlib.closing(connect(settings)) as conn:
        canon = RowCanonicalizer(schema)

        def select(low_watermark: BinlogOffset) -> dict[Key, dict[str, Any]]:
            rows = {}
            sql, params = select_chunk_sql(schema, chunk)
            with conn.cursor(pymysql.cursors.SSCursor) as cur:
                cur.execute(sql, params)
                for raw in cur:
                    row = canon.from_select(raw)
                    rows[key_of(row, schema.key_columns)] = row
            return rows

        rows, changes = read_window_again(lambda: read_window(
            conn, server_info(conn), settings, server_id, schema, DatabaseKeyOrder(conn, schema), [chunk], select,
            (hooks or ChunkReadHooks()).checkpoint, prepared_wait), schema)
    rows = fold_rows({} if changes.truncated else rows, changes.last)
    report, = chunk_reports([chunk], changes, {chunk.index: len(rows)}, time.monotonic() - t0)
    return ChunkReadResult(report, rows)
