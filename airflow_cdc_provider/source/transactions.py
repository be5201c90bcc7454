"""What of a logged transaction happened: rows the binlog holds but the server rolled back are not changes.

A server writes a transaction to the binlog when it commits, so its rows are normally changes. A transaction
that also changed a non-transactional table (MyISAM, Aria, MEMORY, a temporary table) is logged even when it
rolls back, whole or to a savepoint: the non-transactional changes stayed, and a replica has to make them
too. The group then ends in ``ROLLBACK`` (or holds ``SAVEPOINT s`` ... ``ROLLBACK TO s``), and the row events of
transactional tables before it never happened. ``committed`` buffers each transaction's records and lets
through what stayed: every record at a commit, and at a rollback only the rows of non-transactional tables and
the schema changes.

XA: a prepared transaction's group ends at ``XA PREPARE``, and ``XA COMMIT`` or ``XA ROLLBACK`` follows in a
later group of its own, which does not say what the transaction changed. The rows are taken at the prepare
(most prepared transactions commit); ``XA ROLLBACK`` after it is a ``PREPARED_ROLLBACK`` mark, and the reader
re-snapshots the captured tables (``TableChangeReader.unknown_rollback``). ``XA END`` and the ``XA COMMIT`` of
a prepared transaction are passed on with the transaction's xid: a chunk window that meets the commit of one it did
not see end was prepared before its low watermark, and its SELECT may have missed the rows.
"""

from __future__ import annotations

import contextlib
import re
from dataclasses import dataclass, replace
from typing import Callable, Iterable, Iterator, Mapping

from airflow_cdc_provider.core.chunks import TableId
from airflow_cdc_provider.core.offsets import EventPosition
from airflow_cdc_provider.core.records import ChangeRecord
from airflow_cdc_provider.source.sql import unquote_ident

BEGIN = "begin"
XA_START = "xa_start"
COMMIT = "commit"
PREPARED = "prepared"  # XA PREPARE: the group of an XA transaction ends, its outcome logged later
ROLLBACK = "rollback"
SAVEPOINT = "savepoint"
ROLLBACK_TO = "rollback_to"
PREPARED_ROLLBACK = "prepared_rollback"  # XA ROLLBACK of a transaction prepared in an earlier group
XA_END = "xa_end"  # XA END <xid>: the xid of the XA transaction whose group this is
PREPARED_COMMIT = "prepared_commit"  # XA COMMIT <xid> of a transaction prepared in an earlier group
UNSURE = "unsure"  # a ROLLBACK or SAVEPOINT not read: what it undid is not known
OTHER = "other"  # RELEASE SAVEPOINT, other XA statements: nothing to do

# engines whose changes a rollback undoes (information_schema.TABLES.ENGINE); any other keeps them
TRANSACTIONAL_ENGINES = frozenset({"innodb", "xtradb", "rocksdb", "tokudb"})
_NEVER = 1 << 62  # a time no binlog event carries

# a savepoint's name as the server writes it: in backticks, in double quotes (sql_mode ANSI_QUOTES), or bare
_NAME = r'(`(?:[^`]|``)+`|"(?:[^"]|"")+"|[\w$]+)\s*$'
_MARKS = [
    (re.compile(r"BEGIN(?!\s+NOT\s+ATOMIC)\b|START\s+TRANSACTION\b", re.I), BEGIN),
    (re.compile(r"XA\s+(?:START|BEGIN)\b", re.I), XA_START),
    (re.compile(rf"ROLLBACK(?:\s+WORK)?\s+TO\s+(?:SAVEPOINT\s+)?{_NAME}", re.I), ROLLBACK_TO),
    (re.compile(r"ROLLBACK(?:\s+WORK)?\s*$", re.I), ROLLBACK),
    (re.compile(r"ROLLBACK\b", re.I), UNSURE),
    (re.compile(rf"SAVEPOINT\s+{_NAME}", re.I), SAVEPOINT),
    (re.compile(r"SAVEPOINT\b", re.I), UNSURE),
    (re.compile(r"COMMIT\b|XA\s+COMMIT\b.*\bONE\s+PHASE\b", re.I | re.S), COMMIT),
    (re.compile(r"XA\s+PREPARE\b", re.I), PREPARED),
    (re.compile(r"XA\s+ROLLBACK\b", re.I), PREPARED_ROLLBACK),
    (re.compile(r"XA\s+END\s+(.+)", re.I | re.S), XA_END),
    (re.compile(r"XA\s+COMMIT\s+(.+)", re.I | re.S), PREPARED_COMMIT),
    (re.compile(r"RELEASE\s+SAVEPOINT\b|XA\b", re.I), OTHER),
]


@dataclass(frozen=True)
class TransactionMark:
    """A statement or event that opens, ends or rolls back (part of) a transaction; ``savepoint``: the name a
    SAVEPOINT or ROLLBACK TO gives, as the server compares it (case-insensitively)."""

    kind: str
    savepoint: str | None = None
    position: EventPosition | None = None
    tables: frozenset[TableId] = frozenset()  # an UNSURE mark passed on: the tables whose rows it may have undone
    xid: str | None = None  # XA END, XA COMMIT: the transaction's xid (``canonical_xid``)
    detail: str | None = None  # an UNSURE mark passed on: why what the rollback undid is not known


COMMITTED = TransactionMark(COMMIT)  # an XID event
PREPARED_GROUP = TransactionMark(PREPARED)  # the XA_PREPARE event: an XA transaction's rows, taken here
GROUP_STARTS = TransactionMark(BEGIN)  # a GTID event: MariaDB logs no BEGIN statement after it


def transaction_mark(statement: str, position: EventPosition | None = None) -> TransactionMark | None:
    """The mark a QUERY event's statement (at ``position``) is, or None for a statement that is not about the
    transaction."""
    text = statement.lstrip()
    for pattern, kind in _MARKS:
        m = pattern.match(text)
        if m is not None:
            name = unquote_ident(m.group(1)).lower() if kind in (SAVEPOINT, ROLLBACK_TO) else None
            xid = canonical_xid(m.group(1)) if kind in (XA_END, PREPARED_COMMIT) else None
            return TransactionMark(kind, name, position, xid=xid)
    return None


def canonical_xid(text: str) -> str:
    """An xid as the server writes it in XA statements of the binlog (``X'6162',X'',1``), comparable with
    ``xid_of`` (``XA RECOVER``'s)."""
    return re.sub(r"\s+", "", text).lower()


def xid_of(format_id: int, gtrid: bytes, bqual: bytes) -> str:
    """The xid of an ``XA RECOVER`` row as ``canonical_xid`` gives it, and as ``XA COMMIT`` takes it."""
    return f"x'{gtrid.hex()}',x'{bqual.hex()}',{format_id}"


Judge = Callable[[Mapping[TableId, int]], tuple[set[TableId], set[TableId]]]


def committed(items: Iterable[object], transactional: Judge) -> Iterator[object]:
    """``items`` (records, schema changes and ``TransactionMark``s, in binlog order) less the rows a rollback undid,
    without the marks; ``transactional(tables)`` (table -> the newest ``ts_ms`` of its rolled-back rows): which
    of them a rollback undoes, and which it cannot tell. Passed on as marks: XA END and XA COMMIT (with their
    xids), the rollback of an XA transaction prepared before (``tables``: those of the XA transactions this read
    saw prepared), and a ROLLBACK or SAVEPOINT that is not read or whose tables' engines are not known then
    (``tables``: those whose rows it may have undone). Records outside a group pass at once; a read that ends
    inside one (it cannot, as reads end at transaction boundaries) lets its records through."""
    buffer: list[object] | None = None
    savepoints: dict[str, int] = {}
    prepared: set[TableId] = set()
    for item in items:
        if not isinstance(item, TransactionMark):
            if buffer is None:
                yield item
            else:
                buffer.append(item)
            continue
        if item.kind in (XA_END, PREPARED_COMMIT):  # passed on as they come: they undo nothing
            yield item
        elif item.kind == BEGIN:  # a group's GTID event, then (MySQL) its BEGIN
            if buffer:  # a group without a commit: a statement logged on its own
                yield from buffer
            buffer, savepoints = [], {}
        elif item.kind == XA_START:
            buffer = [] if buffer is None else buffer
        elif item.kind == PREPARED_ROLLBACK and not _rows_in(buffer):  # of a transaction prepared before
            yield from buffer or ()
            buffer = None
            yield replace(item, tables=frozenset(prepared))
        elif buffer is None:
            continue
        elif item.kind in (COMMIT, PREPARED):
            if item.kind == PREPARED:
                prepared |= _rows_in(buffer)
            yield from buffer
            buffer = None
        elif item.kind in (ROLLBACK, PREPARED_ROLLBACK):  # an XA ROLLBACK in its own group: not prepared
            yield from _kept(buffer, transactional, item)
            buffer = None
        elif item.kind == SAVEPOINT:
            savepoints[item.savepoint] = len(buffer)
        elif item.kind == ROLLBACK_TO and item.savepoint in savepoints:
            at = savepoints[item.savepoint]
            buffer[at:] = _kept(buffer[at:], transactional, item)
            # the savepoints set after it are gone; it stays
            savepoints = {name: i for name, i in savepoints.items() if i <= at}
        elif item.kind in (ROLLBACK_TO, UNSURE) and _rows_in(buffer):
            buffer.append(replace(item, kind=UNSURE, tables=frozenset(_rows_in(buffer))))
    if buffer:
        yield from buffer


def _rows_in(records: list[object] | None) -> set[TableId]:
    """The tables ``records`` hold rows of."""
    return {r.table for r in records or () if isinstance(r, ChangeRecord)}


def _kept(records: list[object], transactional: Judge, rollback: TransactionMark) -> list[object]:
    """What ``rollback`` leaves of ``records``: schema changes, rows of tables it does not undo, and an UNSURE mark
    for the tables whose engine then is not known (their rows are kept; the table is re-snapshotted)."""
    newest: dict[TableId, int] = {}
    for r in records:
        if isinstance(r, ChangeRecord):
            newest[r.table] = max(newest.get(r.table, 0), r.ts_ms)
    undone, unsure = transactional(newest) if newest else (set(), set())
    kept = [r for r in records if not (isinstance(r, ChangeRecord) and r.table in undone)]
    if unsure:
        kept.append(replace(rollback, kind=UNSURE, tables=frozenset(unsure),
                            detail="a rollback read after its table may have changed engine (altered since its "
                                   "rows, or the rows logged with a time ahead): what it undid is not known"))
    return kept


def transactional_tables(connect: Callable[[], object]) -> Judge:
    """``committed``'s ``transactional``: asks the source (a connection from ``connect``, opened only when a
    rollback holds rows) for the tables' engines. The engine now is the engine of the rollback only when the
    table's definition is older than its rows: an ALTER TABLE (one of the engine among them) creates it again,
    which ``information_schema.TABLES.CREATE_TIME`` shows. A table altered since (or in the same second), or rows
    logged with a time after the answer, are unsure.
    What the source said is kept for the rollbacks it is known to cover (older than the answer). A table the
    source no longer has counts as transactional, as nearly every table is; its rows are gone from the sink with
    its drop anyway."""
    known: dict[TableId, tuple[bool, int | None, int]] = {}  # -> (transactional, created, asked at), in seconds

    def transactional(tables: Mapping[TableId, int]) -> tuple[set[TableId], set[TableId]]:
        missing = [t for t, ts_ms in tables.items() if t not in known or known[t][2] <= ts_ms // 1000]
        if missing:
            with contextlib.closing(connect()) as conn, conn.cursor() as cur:
                with contextlib.suppress(Exception):  # MySQL may cache CREATE_TIME; MariaDB has no such variable
                    cur.execute("SET SESSION information_schema_stats_expiry = 0")
                for t in missing:
                    cur.execute("SELECT ENGINE, UNIX_TIMESTAMP(CREATE_TIME), UNIX_TIMESTAMP() FROM "
                                "information_schema.TABLES WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s",
                                (t.database, t.table))
                    row = cur.fetchone()
                    if row is None:  # gone: transactional, for every rollback of this read
                        known[t] = (True, 0, _NEVER)
                    else:
                        engine, created, now = row
                        known[t] = ((engine or "").lower() in TRANSACTIONAL_ENGINES,
                                    None if created is None else int(created), int(now))
        undone, unsure = set(), set()
        for t, ts_ms in tables.items():
            is_transactional, created, asked_at = known[t]
            # a writer's session can log a time ahead of the server's (SET timestamp): no later than the answer,
            # it says nothing of what came after the rows
            if created is None or created >= ts_ms // 1000 or asked_at < ts_ms // 1000:
                unsure.add(t)
            elif is_transactional:
                undone.add(t)
        return undone, unsure

    return transactional
