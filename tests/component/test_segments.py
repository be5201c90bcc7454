"""Cutting a binlog range into segments that decode in parallel (``mysql/segments.py``), on the real binlog.

The property the stream relies on: decoding the segments one by one and concatenating them gives exactly
the changes of decoding the whole range at once, and every cut is a place a reader may start at (a GTID
event or a file's start), also with a long transaction, a DDL and file rotations inside the range.
"""

from __future__ import annotations

import contextlib
import time

import pytest

from airflow_cdc_provider.core.chunks import TableId
from airflow_cdc_provider.core.records import OP_UPDATE
from airflow_cdc_provider.source.binlog import read_changes_between
from airflow_cdc_provider.source.schema import load_schema
from airflow_cdc_provider.source.segments import BOUNDARY_EVENTS, FILE_START, BinlogMap, UnreadableEvents
from airflow_cdc_provider.source.server import current_offset

from .test_validation import global_setting


def _changes(db, server_id, start, end, schemas):
    return [(r.op, r.key, dict(r.image), r.position.sort_key)
            for r in read_changes_between(db.settings, server_id, start, end, schemas)]


def _write(db):
    for i in range(1, 301):  # a transaction each (autocommit)
        db.execute("INSERT INTO seg VALUES (%s, %s)", (i, "x" * 150))
    db.execute("BEGIN")
    for i in range(1, 301):  # one long transaction of 300 row events
        db.execute("UPDATE seg SET v = %s WHERE id = %s", ("long " + str(i), i))
    db.execute("COMMIT")
    db.execute("FLUSH BINARY LOGS")
    db.execute("CREATE TABLE other (id INT PRIMARY KEY)")  # a DDL and a table not captured
    db.executemany("INSERT INTO other VALUES (%s)", [(i,) for i in range(100)])  # one multi-row INSERT
    for i in range(1, 301, 3):
        db.execute("DELETE FROM seg WHERE id = %s", (i,))
    db.execute("FLUSH BINARY LOGS")
    for i in range(2, 301, 3):
        db.execute("UPDATE seg SET v = %s WHERE id = %s", ("after " + str(i), i))


def test_segments_concatenate_to_the_whole_range_and_start_at_transactions(source_db, server_id):
    source_db.execute("CREATE TABLE seg (id INT PRIMARY KEY, v VARCHAR(200))")  # before the range: its creation
    with source_db.connection() as conn:  # in the range would be a resync (a name created again)
        start = current_offset(conn)
    _write(source_db)
    with source_db.connection() as conn:
        end = current_offset(conn)
        schema = load_schema(conn, TableId(source_db.name, "seg"))
        schemas = {schema.table: schema}
        binlog = BinlogMap(conn)
        size = binlog.span_bytes(start, end)
        cuts = binlog.cut(start, end, 8_000)
        with conn.cursor() as cur:
            for c in cuts:
                cur.execute("SHOW BINLOG EVENTS IN %s FROM %s LIMIT 1", (c.file, c.pos))
                kind = cur.fetchone()[2]
                assert c.pos == FILE_START or kind in BOUNDARY_EVENTS, f"cut {c} is at a {kind} event"
        capped = binlog.boundary_bytes_after(start, end, 30_000)

    assert end.file != start.file and size > 100_000
    assert len(cuts) > 10 and cuts == sorted(set(cuts)) and all(start < c < end for c in cuts)
    assert sum(1 for c in cuts if c.pos == FILE_START) == 2, "each file start is a cut"
    whole = _changes(source_db, server_id, start, end, schemas)
    assert len(whole) == 300 + 300 + 100 + 100
    points = [start, *cuts, end]
    pieces = [_changes(source_db, server_id, a, b, schemas) for a, b in zip(points, points[1:])]
    assert [c for piece in pieces for c in piece] == whole
    assert sum(1 for piece in pieces if piece) > 5, "the changes did not spread over segments"
    holding_long = {i for i, piece in enumerate(pieces) for c in piece
                    if c[0] == OP_UPDATE and str(c[2]["v"]).startswith("long ")}
    assert len(holding_long) == 1, "the long transaction was cut"

    assert start < capped < end and (capped.pos == FILE_START or _is_gtid(source_db, capped))


def _is_gtid(db, at):
    with db.connection() as conn, conn.cursor() as cur:
        cur.execute("SHOW BINLOG EVENTS IN %s FROM %s LIMIT 1", (at.file, at.pos))
        return cur.fetchone()[2] in BOUNDARY_EVENTS


def purge_to_a_new_file(db, timeout: float = 30.0) -> None:
    """Rotate and purge every earlier binlog file: later tests of this server scan its oldest file. The server
    keeps a file until its binlog checkpoint has passed it, so the purge is repeated until it took."""
    with contextlib.closing(db.server.root_connection()) as conn, conn.cursor() as cur:
        cur.execute("FLUSH BINARY LOGS")
        deadline = time.monotonic() + timeout
        while True:
            cur.execute("SHOW BINARY LOGS")
            files = [r[0] for r in cur.fetchall()]
            if len(files) == 1:
                return
            assert time.monotonic() < deadline, f"binlog files {files[:-1]} are still on the server after PURGE"
            cur.execute(f"PURGE BINARY LOGS TO '{files[-1]}'")
            time.sleep(0.1)


def test_an_event_larger_than_max_allowed_packet_is_read_in_an_uncut_batch(mariadb, source_db, server_id, caplog):
    """SHOW BINLOG EVENTS stops at an event larger than max_allowed_packet (an UPDATE's two images of a big
    row), which replication reads: a capped batch then takes the rest of the file whole, with every change,
    and a start that must list the events says which setting to raise."""
    source_db.execute("CREATE TABLE seg (id INT PRIMARY KEY, v LONGTEXT)")
    with source_db.connection() as conn:
        limit = source_db.execute("SELECT @@GLOBAL.max_allowed_packet")[0][0]
        start = current_offset(conn)
        source_db.executemany("INSERT INTO seg VALUES (%s, 'small')", [(i,) for i in range(2, 50)])
        with global_setting(mariadb, "max_allowed_packet", 4 * limit):
            with source_db.server.app_connection(source_db.name) as app, app.cursor() as cur:
                cur.execute("INSERT INTO seg VALUES (1, REPEAT('a', %s))", (limit * 6 // 10,))
                cur.execute("UPDATE seg SET v = REPEAT('b', %s) WHERE id = 1", (limit * 6 // 10,))  # > the limit
        for i in range(2, 50):
            source_db.execute("UPDATE seg SET v = 'after' WHERE id = %s", (i,))
        end = current_offset(conn)
    try:
        with source_db.connection() as conn:
            binlog = BinlogMap(conn)
            with caplog.at_level("WARNING", logger="airflow_cdc.segments"):
                ends, at = [], start  # capped batches one after the other, as the stream plans them
                while at < end:
                    at, _ = binlog.batch_end(at, end, 4096)
                    ends.append(at)
                binlog.cut(start, end, 4096)
            assert f"larger than the server's max_allowed_packet ({limit} bytes" in caplog.text
            assert "SET GLOBAL max_allowed_packet = 1073741824" in caplog.text
            with pytest.raises(UnreadableEvents, match="cannot read .* an event there is larger than the server's "
                                                       "max_allowed_packet"):
                list(binlog.events(start, end))
            schema = load_schema(conn, TableId(source_db.name, "seg"))
        schemas = {schema.table: schema}
        whole = _changes(source_db, server_id, start, end, schemas)
        batches = [c for a, b in zip([start] + ends, ends) for c in _changes(source_db, server_id, a, b, schemas)]
        assert batches == whole and len(whole) == 2 + 2 * 48, len(whole)
        assert [c[2]["v"] for c in whole if c[1] == (1,)] == ["a" * (limit * 6 // 10), "b" * (limit * 6 // 10)]
    finally:
        purge_to_a_new_file(source_db)
