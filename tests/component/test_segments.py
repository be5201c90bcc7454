"""Cutting a binlog range into segments that decode in parallel (``mysql/segments.py``), on the real binlog.

The property the stream relies on: decoding the segments one by one and concatenating them gives exactly
the changes of decoding the whole range at once, and every cut is a place a reader may start at (a GTID
event or a file's start), also with a long transaction, a DDL and file rotations inside the range.
"""

from __future__ import annotations

from airflow_cdc_provider.core.chunks import TableId
from airflow_cdc_provider.core.records import OP_UPDATE
from airflow_cdc_provider.source.binlog import read_changes_between
from airflow_cdc_provider.source.schema import load_schema
from airflow_cdc_provider.source.segments import BOUNDARY_EVENTS, FILE_START, BinlogMap
from airflow_cdc_provider.source.server import current_offset


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
