"""Where a new stream starts (``stream.startup``), when it has no checkpoint yet.

* ``initial`` (default): the stream seed, the smallest high watermark of the snapshot chunks;
* ``latest``: the server's current position (changes from now on; no snapshot needed);
* ``earliest``: the oldest binlog file still on the server;
* ``{file: mysql-bin.000042, pos: 1234}``: a position you know; if a transaction holds it, the stream starts
  at that transaction's first event (never in the middle of a transaction, whose earlier rows would be lost);
* ``{gtid: "0-1-1234"}``: just after the transaction with this GTID (MariaDB, one domain);
* ``{timestamp: 1700000000 | "2026-11-21T10:00:00Z"}``: the first transaction logged with its second or a later
  one. A transaction's events carry the whole second the statement that committed it started in (its COMMIT, or
  an autocommit statement itself), so one stamped with T's second may have committed at or after T: it is read.
  One whose committing statement started before that second and ended after T (a long autocommit statement, a
  lock wait, a slow commit) is stamped earlier and left out.

GTID and timestamp starts (MariaDB only) scan the binlog for the boundary from the last file that cannot start
after it: a MariaDB file's ``Gtid_list`` (the GTIDs logged before the file; trusted under ``gtid_strict_mode``
only, where a sequence number is never logged twice) and its start time (less an hour for other clocks) say
which files come wholly before, so a server keeping days of binlog is not read from its oldest file.

An XA transaction's rows are logged at its ``XA PREPARE``, and its commit later, in another event group. A start
between the two would read the commit without the rows, so every mode but ``initial`` starts at the first
event of the earliest XA transaction prepared before it and committed after it (or prepared still). If the
server no longer has that event, the start is refused, naming the transactions.
"""

from __future__ import annotations

import datetime as dt
import logging
import math
import re
import time
from typing import Any, Collection

from airflow_cdc_provider.core.offsets import BinlogOffset
from airflow_cdc_provider.source.server import (XA_COMMIT_GRACE, SourceError, binlog_files, current_offset,
                                                prepared_xa_transactions, server_info, variables)
from airflow_cdc_provider.source.settings import ConnectionSettings

log = logging.getLogger("airflow_cdc.startup")
# an XA transaction's prepared group starts so: MariaDB says it in the group's GTID event, MySQL in a Query event
_XA_START = re.compile(r"XA START (\S+)(?: GTID \S+)?")
_XA_COMMIT = re.compile(r"XA COMMIT (\S+)")


class StartupError(SourceError):
    pass


def _offset(file: str, pos: int, gtid: str | None = None) -> dict[str, Any]:
    return {"file": file, "pos": int(pos), "gtid": gtid, "ts_ms": 0, "behind": False}


def _timestamp(value: Any) -> float:
    if isinstance(value, (int, float)):
        return float(value)
    text = str(value).replace("Z", "+00:00")
    t = dt.datetime.fromisoformat(text)
    if t.tzinfo is None:
        t = t.replace(tzinfo=dt.timezone.utc)
    return t.timestamp()


def _events_reader(settings: ConnectionSettings, server_id: int, at: BinlogOffset, only_events: list):
    """A non-blocking replication reader of ``only_events`` from ``at`` (no rows are decoded: table maps only
    need their ids)."""
    from pymysqlreplication import BinLogStreamReader

    from airflow_cdc_provider.source.connection import SourceConnection

    return BinLogStreamReader(
        connection_settings=settings.replication_kwargs(), server_id=server_id, log_file=at.file, log_pos=at.pos,
        resume_stream=True, blocking=False, only_events=only_events, is_mariadb=False, enable_logging=False,
        freeze_schema=True, pymysql_wrapper=SourceConnection,
    )


def _scan(settings: ConnectionSettings, server_id: int, first: BinlogOffset, *, gtid: str | None = None,
          after_ts: float | None = None) -> dict[str, Any] | None:
    from pymysqlreplication.event import MariadbGtidEvent, QueryEvent, XidEvent

    stream = _events_reader(settings, server_id, first, [MariadbGtidEvent, XidEvent, QueryEvent])
    boundary = first
    found_gtid = False
    try:
        for ev in stream:
            if isinstance(ev, MariadbGtidEvent):
                if after_ts is not None and ev.timestamp >= math.floor(after_ts):
                    return _offset(boundary.file, boundary.pos)
                found_gtid = ev.gtid == gtid
                continue
            if isinstance(ev, XidEvent) or (isinstance(ev, QueryEvent) and ev.query.strip().upper() != "BEGIN"):
                boundary = BinlogOffset(stream.log_file, int(ev.packet.log_pos))
                if found_gtid:
                    return _offset(boundary.file, boundary.pos, gtid)
    finally:
        stream.close()
    # no transaction at or after the time yet: the stream starts after the last one read, not at the server's
    # position asked later (what was committed in between would be lost)
    return _offset(boundary.file, boundary.pos) if after_ts is not None else None


def _gtid_list(conn: Any, file: str) -> dict[tuple[int, int], int] | None:
    """The last sequence number per ``(domain, server_id)`` logged before ``file``: its MariaDB ``Gtid_list``
    event (None where the server writes none)."""
    with conn.cursor() as cur:
        cur.execute("SHOW BINLOG EVENTS IN %s LIMIT 3", (file,))
        info = next((r[5] for r in cur.fetchall() if r[2] == "Gtid_list"), None)
    if info is None:
        return None
    last = {}
    for gtid in filter(None, info.strip("[] ").split(",")):
        domain, server, seq = (int(x) for x in gtid.strip().split("-"))
        last[(domain, server)] = max(seq, last.get((domain, server), 0))
    return last


def _gtid_scan_start(conn: Any, files: list[str], gtid: str) -> BinlogOffset:
    """The last file whose ``Gtid_list`` does not hold ``gtid`` already (a server's sequence numbers in a domain
    only grow, unless set back without ``gtid_strict_mode``: a scan from here that finds nothing looks again from
    the oldest file): the transaction is in it or later."""
    try:
        domain, server, seq = (int(x) for x in gtid.split("-"))
    except ValueError:
        return BinlogOffset(files[0], 4)
    start = files[0]
    for file in files[1:]:
        last = _gtid_list(conn, file)
        if last is None or last.get((domain, server), 0) >= seq:
            break
        start = file
    return BinlogOffset(start, 4)


def _file_started_at(settings: ConnectionSettings, server_id: int, file: str) -> int | None:
    """The time ``file`` was opened: its format description event's timestamp."""
    from pymysqlreplication.event import FormatDescriptionEvent

    stream = _events_reader(settings, server_id, BinlogOffset(file, 4), [FormatDescriptionEvent])
    try:
        for ev in stream:
            if isinstance(ev, FormatDescriptionEvent):
                return int(ev.timestamp)
            if stream.log_file != file:
                break
    finally:
        stream.close()
    return None


CLOCK_SKEW_MARGIN = 3600.0


def _timestamp_scan_start(settings: ConnectionSettings, server_id: int, files: list[str], after_ts: float,
                          margin: float = CLOCK_SKEW_MARGIN) -> BinlogOffset:
    """The last file opened ``margin`` seconds before ``after_ts``: every event of the files before it was written
    before it was opened, so before ``after_ts`` (found by bisection; the files' start times only grow). The
    margin covers events stamped by another clock than the one that opened the files: a replica logs its
    master's times (``log_slave_updates``), a session can set its own."""
    lo, hi = 0, len(files) - 1
    while lo < hi:
        mid = (lo + hi + 1) // 2
        started = _file_started_at(settings, server_id, files[mid])
        if started is not None and started < after_ts - margin:
            lo = mid
        else:
            hi = mid - 1
    return BinlogOffset(files[lo], 4)


def resolve_startup(mode: str | dict[str, Any], settings: ConnectionSettings, conn: Any, server_id: int,
                    seed_start: BinlogOffset | None, state_path: str) -> dict[str, Any]:
    """The stream's first offset for ``stream.startup`` ``mode``; ``seed_start`` is the stream seed's start
    (``initial``), ``server_id`` the replica id a GTID or timestamp scan reads with. Every mode but ``initial``
    starts before the XA transactions open across its position (``_before_open_xa``)."""
    offset = _resolve(mode, settings, conn, server_id, seed_start, state_path)
    return offset if mode == "initial" else _before_open_xa(conn, offset, mode)


def _before_open_xa(conn: Any, offset: dict[str, Any], mode: Any) -> dict[str, Any]:
    """``offset``, or the first event of the earliest XA transaction prepared before it and committed after it or
    prepared still (their rows are logged at their prepare, before the offset)."""
    from airflow_cdc_provider.source.segments import BinlogMap
    from airflow_cdc_provider.source.transactions import canonical_xid

    start = BinlogOffset(offset["file"], offset["pos"])
    prepared = set(prepared_xa_transactions(conn))
    time.sleep(XA_COMMIT_GRACE)
    now = current_offset(conn)
    started, committed = set(), set()
    binlog = BinlogMap(conn)
    for _, kind, info in binlog.events(start, now):
        if xid := _xa_started(kind, info):
            started.add(xid)
        elif kind == "Query" and (m := _XA_COMMIT.match(info)):
            committed.add(canonical_xid(m.group(1)))
    open_across = (prepared | committed) - started
    if not open_across:
        return offset
    firsts = _xa_starts(binlog, open_across, start)
    missing = sorted(open_across - firsts.keys())
    names = "; ".join(sorted(open_across)[:5]) + (" ..." if len(open_across) > 5 else "")
    if missing:
        raise StartupError(
            f"stream.startup {mode!r} starts at {start}, inside XA transactions prepared before it and committed "
            f"after it or prepared still: {'; '.join(missing[:5])}{' ...' if len(missing) > 5 else ''}. Their "
            "rows are logged at their XA PREPARE, in a binlog file the server no longer has, so the stream would "
            "lose them. Start after their commit (end a prepared one first: XA RECOVER lists them), or set "
            "stream.startup to initial (a snapshot)")
    first = min(firsts.values())
    log.warning("stream.startup %r: XA transactions prepared before %s committed after it or are prepared still "
                "(%s); their rows are logged at their prepare, so the stream starts at %s, the first event of the "
                "earliest (the changes between the two are read too)", mode, start, names, first)
    return _offset(first.file, first.pos)


def _xa_started(kind: str, info: str) -> str | None:
    """The xid of the XA transaction whose prepared group this event (``SHOW BINLOG EVENTS``'s type and info)
    starts, if it starts one."""
    from airflow_cdc_provider.source.transactions import canonical_xid

    m = _XA_START.fullmatch(info) if kind in ("Gtid", "Query") else None
    return canonical_xid(m.group(1)) if m else None


def _xa_starts(binlog, xids: Collection[str], before: BinlogOffset) -> dict[str, BinlogOffset]:
    """The first event of the last XA transaction of each of ``xids`` that starts before ``before``, looked for
    file by file backwards from ``before``'s file; an xid the files still on the server do not hold is left out."""
    from airflow_cdc_provider.source.segments import BOUNDARY_EVENTS, FILE_START

    names = [f for f, _ in binlog.files]
    found: dict[str, BinlogOffset] = {}
    for i in range(names.index(before.file) if before.file in names else -1, -1, -1):
        end = before if names[i] == before.file else BinlogOffset(names[i + 1], FILE_START)
        in_file = {}
        group = None  # where the group of the events read starts
        for at, kind, info in binlog.events(BinlogOffset(names[i], FILE_START), end):
            group = at if kind in BOUNDARY_EVENTS else group
            if (xid := _xa_started(kind, info)) in xids:
                in_file[xid] = group or at
        found = {**in_file, **found}  # a later file's start of an xid is the later one
        if found.keys() >= set(xids):
            break
    return found


def _resolve(mode: str | dict[str, Any], settings: ConnectionSettings, conn: Any, server_id: int,
             seed_start: BinlogOffset | None, state_path: str) -> dict[str, Any]:
    if mode == "initial":
        if seed_start is None:
            raise StartupError(
                f"stream.startup is 'initial' but the state store {state_path} has no stream seed: run the "
                "snapshot (plan -> chunks -> collect_watermarks) first, or set stream.startup to latest"
            )
        return _offset(seed_start.file, seed_start.pos, seed_start.gtid)
    if mode == "latest":
        o = current_offset(conn)
        return _offset(o.file, o.pos, o.gtid)
    if isinstance(mode, dict) and ("gtid" in mode or "timestamp" in mode) and not server_info(conn).is_mariadb:
        raise StartupError(f"stream.startup {mode!r}: GTID and timestamp starts read MariaDB's GTID events, which a "
                           "MySQL server does not log; give the position instead: {file, pos} (mysqlbinlog "
                           "--start-datetime or SHOW BINLOG EVENTS find it)")
    files = binlog_files(conn)
    if not files:
        raise StartupError("the server lists no binary logs (SHOW BINARY LOGS is empty); is log_bin on?")
    earliest = BinlogOffset(files[0][0], 4)
    if mode == "earliest":
        return _offset(earliest.file, earliest.pos)
    if isinstance(mode, dict) and "file" in mode:
        names = [f for f, _ in files]
        if mode["file"] not in names:
            raise StartupError(
                f"stream.startup file {mode['file']!r} is not on the server (it has {names[0]} .. {names[-1]})")
        from airflow_cdc_provider.source.segments import BinlogMap

        asked = int(mode.get("pos", 4))
        start = BinlogMap(conn).transaction_start(mode["file"], asked)
        if start.pos != asked:
            log.warning("stream.startup %s:%d lies inside a transaction: the stream starts at its first event, %s",
                        mode["file"], asked, start)
        return _offset(start.file, start.pos)
    if isinstance(mode, dict) and "gtid" in mode:
        g = str(mode["gtid"]).strip()
        if "," in g:
            raise StartupError("stream.startup gtid: give one GTID (domain-server-seq); multi-domain sets are not supported")
        strict = str(variables(conn, "gtid_strict_mode").get("gtid_strict_mode", "")).upper() in ("ON", "1")
        # without gtid_strict_mode a sequence number can be logged twice: the first time is the one to start after
        start = _gtid_scan_start(conn, [f for f, _ in files], g) if strict else earliest
        found = _scan(settings, server_id, start, gtid=g)
        if not found and start != earliest:  # a sequence number set back (no gtid_strict_mode): the whole binlog
            found = _scan(settings, server_id, earliest, gtid=g)
        if not found:
            raise StartupError(f"stream.startup gtid {g!r} is not in the binlogs still on the server")
        return found
    if isinstance(mode, dict) and "timestamp" in mode:
        after_ts = _timestamp(mode["timestamp"])
        return _scan(settings, server_id, _timestamp_scan_start(settings, server_id, [f for f, _ in files], after_ts),
                     after_ts=after_ts)
    raise StartupError(
        f"stream.startup {mode!r}: use initial, latest, earliest, {{file, pos}}, {{gtid}} or {{timestamp}}")
