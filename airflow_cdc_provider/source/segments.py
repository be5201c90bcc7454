"""Cutting a binlog range at transaction boundaries without decoding it, so that segments decode in parallel.

A stream batch is decoded by several Spark tasks at once, each reading one segment through its own replica
connection. A segment must start where a transaction starts: python-mysql-replication silently drops the
rows of a transaction whose TABLE_MAP it did not see (feasibility P12). The server finds such places
cheaply: ``SHOW BINLOG EVENTS IN f FROM p LIMIT k, n`` skips ``k`` events inside the server (an order of
magnitude faster than decoding them in Python) and returns ``n``; the first GTID
event among them starts a transaction (every MariaDB and MySQL transaction, DDL included, begins with one).
The start of a binlog file is a boundary too.

An event larger than the server's ``max_allowed_packet`` (a row event holds both images of a row under
``binlog_row_image=FULL``, so an UPDATE of a 10 MiB blob logs 20 MiB) stops ``SHOW BINLOG EVENTS`` there, though
replication reads it: a batch or segment is then not cut inside that file (correct, only larger), and a scan
that must see every event (a ``stream.startup`` position's XA check) fails naming the setting to raise.

Event indexes are estimated from bytes, with the average event size of the first events after the segment
start, so segments are about equal in binlog bytes, not exactly. Needs BINLOG MONITOR (REPLICATION CLIENT),
which the CDC user already has.
"""

from __future__ import annotations

import logging
from typing import Any, Iterator

from airflow_cdc_provider.core.offsets import BinlogOffset, split_binlog_file
from airflow_cdc_provider.source.server import SourceError, binlog_files

log = logging.getLogger("airflow_cdc.segments")

BOUNDARY_EVENTS = frozenset({"Gtid", "Anonymous_Gtid"})
# events that open a binlog file, before its first transaction: starting at one is starting between transactions
HEADER_EVENTS = frozenset({"Format_desc", "Gtid_list", "Binlog_checkpoint", "Previous_gtids", "Start_encryption"})
FILE_START = 4  # the first event (FORMAT_DESCRIPTION) of every binlog file
_SCAN_WINDOW = 10_000
_SAMPLE_EVENTS = 256
_FIRST_WINDOW = 64
_MAX_WINDOW = 65_536


class UnreadableEvents(SourceError):
    """``SHOW BINLOG EVENTS`` stopped inside a file: an event there is larger than ``max_allowed_packet``."""


class BinlogMap:
    """What the server knows about its binlog files: their sizes, and where transactions start."""

    def __init__(self, conn: Any) -> None:
        self.conn = conn
        self.files = binlog_files(conn)

    # -- bytes ---------------------------------------------------------------------------------------
    def pieces(self, start: BinlogOffset, end: BinlogOffset) -> list[tuple[BinlogOffset, BinlogOffset, int]]:
        """``[start, end)`` split at file starts: ``(from, to, bytes)`` per file; ``to`` is the next file's
        start for every file but the last, so a reader that follows the rotation stops right there."""
        if not end > start:
            return []
        names = [f for f, _ in self.files]
        sizes = dict(self.files)
        first, last = split_binlog_file(start.file)[1], split_binlog_file(end.file)[1]
        inside = [f for f in names if first <= split_binlog_file(f)[1] <= last]
        if start.file not in sizes:
            inside = [start.file] + inside  # purged already: the reader will say so
        out = []
        for i, f in enumerate(inside):
            a = start if f == start.file else BinlogOffset(f, FILE_START)
            if f == end.file:
                b, size = end, end.pos - a.pos
            else:
                nxt = inside[i + 1] if i + 1 < len(inside) else end.file
                b, size = BinlogOffset(nxt, FILE_START), max(0, sizes.get(f, a.pos) - a.pos)
            out.append((a, b, size))
        return out

    def span_bytes(self, start: BinlogOffset, end: BinlogOffset) -> int:
        return sum(size for _, _, size in self.pieces(start, end))

    # -- transaction boundaries ----------------------------------------------------------------------
    def _events(self, file: str, pos: int, skip: int, count: int) -> list[tuple]:
        import pymysql

        with self.conn.cursor() as cur:
            try:
                cur.execute(f"SHOW BINLOG EVENTS IN %s FROM %s LIMIT {int(skip)}, {int(count)}", (file, int(pos)))
                return list(cur.fetchall())
            except pymysql.err.OperationalError as exc:
                if exc.args[0] != 1220 or "Wrong offset or I/O error" not in str(exc.args[1:]):
                    raise
            cur.execute("SELECT @@GLOBAL.max_allowed_packet")
            limit = int(cur.fetchone()[0])
        raise UnreadableEvents(
            f"SHOW BINLOG EVENTS cannot read {file} past {pos} (events {skip} to {skip + count} from there): an event "
            f"there is larger than the server's max_allowed_packet ({limit} bytes; a row event holds both images of "
            "a row), or the file is damaged. Raise the setting on the server (SET GLOBAL max_allowed_packet = "
            "1073741824, and in its configuration) so the binlog can be scanned")

    def _cut_after(self, at: BinlogOffset, skip: int) -> BinlogOffset | None:
        """``boundary_after``, or None where the events cannot be listed: no cut inside this file."""
        try:
            return self.boundary_after(at, skip)
        except UnreadableEvents as exc:
            log.warning("%s: the batch or segment is not cut inside %s and reads the rest of it whole", exc, at.file)
            return None

    def events(self, start: BinlogOffset, end: BinlogOffset | None = None) -> Iterator[tuple[BinlogOffset, str, str]]:
        """Every event from ``start`` to ``end`` (by default, the newest) as ``(where it starts, its type, what
        the server says of it)``, file after file; each window of events is asked from where the last ended, so
        a long range costs one pass."""
        names = [f for f, _ in self.files]
        if start.file not in names:
            return
        for file in names[names.index(start.file):]:
            pos = start.pos if file == start.file else FILE_START
            while True:
                rows = self._events(file, pos, 0, _SCAN_WINDOW)
                for row in rows:
                    at = BinlogOffset(file, int(row[1]))
                    if end is not None and not end > at:
                        return
                    yield at, row[2], str(row[5])
                if len(rows) < _SCAN_WINDOW or not int(rows[-1][4]):
                    break
                pos = int(rows[-1][4])
            if end is not None and file == end.file:
                return

    def average_event_bytes(self, at: BinlogOffset) -> float:
        for sample in (_SAMPLE_EVENTS, _SAMPLE_EVENTS // 16, 2):  # fewer where an unlistable event is near
            try:
                rows = self._events(at.file, at.pos, 0, sample)
                break
            except UnreadableEvents:
                continue
        else:
            return float("inf")
        if not rows:
            return float("inf")
        return max(1.0, (int(rows[-1][4]) - at.pos) / len(rows))  # End_log_pos of the last one

    def boundary_after(self, at: BinlogOffset, skip: int) -> BinlogOffset | None:
        """The start of the first transaction at or after the ``skip``-th event from ``at`` (same file);
        None if the file ends first. A long transaction widens the search window step by step."""
        window = _FIRST_WINDOW
        while True:
            rows = self._events(at.file, at.pos, skip, window)
            for row in rows:
                if row[2] in BOUNDARY_EVENTS and int(row[1]) > at.pos:
                    return BinlogOffset(at.file, int(row[1]))
            if len(rows) < window:
                return None
            skip += window
            window = min(window * 4, _MAX_WINDOW)

    def transaction_start(self, file: str, pos: int) -> BinlogOffset:
        """Where a read asked to start at ``file:pos`` must start: ``pos`` itself if it is a transaction boundary
        (a transaction's first event, a file header event, the end of the file), else the first event of the
        transaction holding it. A position where no event starts is refused, naming the boundaries around it.
        Scans the file's events from its start (in the server)."""
        from airflow_cdc_provider.source.startup import StartupError

        before: BinlogOffset | None = None  # the last boundary at or before pos
        after: BinlogOffset | None = None  # the first boundary after pos
        at: str | None = None  # the type of the event starting at pos
        end = FILE_START
        skip = 0
        while after is None:
            rows = self._events(file, FILE_START, skip, _SCAN_WINDOW)
            for row in rows:
                start, kind = int(row[1]), row[2]
                end = int(row[4]) or end
                boundary = kind in BOUNDARY_EVENTS or kind in HEADER_EVENTS
                if start == pos:
                    at = kind
                if boundary and start <= pos:
                    before = BinlogOffset(file, start)
                elif boundary and start > pos:
                    after = BinlogOffset(file, start)
                    break
            if len(rows) < _SCAN_WINDOW:
                break
            skip += _SCAN_WINDOW
        if at is not None and (at in BOUNDARY_EVENTS or at in HEADER_EVENTS):
            return BinlogOffset(file, pos)
        if at is not None and before is not None:
            return before  # inside a transaction: its first event
        if at is None and after is None and pos == end:
            return BinlogOffset(file, pos)  # the end of the file (or of what is written of it so far)
        what = f"a {at} event outside any transaction" if at is not None else "not the start of an event"
        raise StartupError(
            f"{file}:{pos} is {what} in {file}, so no read can start there; transaction "
            f"boundaries around it: {before or 'none'} and {after or 'the end of the file at ' + str(end)}; set "
            "stream.startup to one of them")

    def cut(self, start: BinlogOffset, end: BinlogOffset, segment_bytes: int) -> list[BinlogOffset]:
        """Transaction boundaries strictly between ``start`` and ``end``, about ``segment_bytes`` apart
        (file starts always among them)."""
        cuts: list[BinlogOffset] = []
        for a, b, size in self.pieces(start, end):
            if a != start:
                cuts.append(a)
            inner = round(size / max(1, segment_bytes)) - 1
            if inner <= 0:
                continue
            avg = self.average_event_bytes(a)
            step = size / (inner + 1)
            for i in range(1, inner + 1):
                here = self._cut_after(a, int(i * step / avg))
                if here is None or not here < b:
                    break
                if not cuts or here > cuts[-1]:
                    cuts.append(here)
        return [c for c in cuts if start < c < end]

    def batch_end(self, start: BinlogOffset, goal: BinlogOffset, cap: int | None) -> tuple[BinlogOffset, bool]:
        """Where a batch from ``start`` towards ``goal`` ends, holding about ``cap`` bytes of binlog at most (None:
        no cap), and whether it stops short of ``goal``."""
        if cap is None or self.span_bytes(start, goal) <= cap:
            return goal, False
        return self.boundary_bytes_after(start, goal, cap), True

    def boundary_bytes_after(self, start: BinlogOffset, end: BinlogOffset, nbytes: int) -> BinlogOffset:
        """A transaction boundary about ``nbytes`` after ``start`` (never past ``end``): where a batch
        capped at ``nbytes`` of binlog ends. At least one transaction is always included."""
        budget = nbytes
        for a, b, size in self.pieces(start, end):
            if size <= budget:
                budget -= size
                continue
            avg = self.average_event_bytes(a)
            here = self._cut_after(a, max(1, int(budget / avg)))
            if here is not None and here < b:
                return here
            return b
        return end
