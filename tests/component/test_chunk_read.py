"""The lock-free chunk read under concurrent writes: the result is exactly the chunk as of HW.

The reader's hooks run the other connection's DML at precise points (after LW, after the SELECT, after HW),
so the interleavings are deterministic. The expected rows are always what the database itself returns
for the chunk's range at the high watermark.
"""

from __future__ import annotations

import contextlib
import threading

import pytest

from airflow_cdc_provider.core.chunks import SplitOptions, TableId
from airflow_cdc_provider.pipeline.chunk_window import ChunkReadHooks, PreparedTransactions, read_chunk
from airflow_cdc_provider.source.chunk_queries import select_chunk_sql, split_schema
from airflow_cdc_provider.source.schema import load_schema
from airflow_cdc_provider.source.transactions import xid_of


def plan(db, table, chunk_size, **opts):
    with db.connection() as conn:
        schema = load_schema(conn, TableId(db.name, table))
        return schema, split_schema(conn, schema, SplitOptions(chunk_size, **opts))


def rows_now(db, schema, chunk):
    sql, params = select_chunk_sql(schema, chunk)
    with db.connection() as conn, conn.cursor() as cur:
        cur.execute(sql, params)
        return {tuple(r[schema.column_names.index(k)] for k in schema.key_columns): dict(zip(schema.column_names, r))
                for r in cur.fetchall()}


def make_even_table(db):
    db.execute("CREATE TABLE t (id INT PRIMARY KEY, v VARCHAR(20), n INT)")
    db.executemany("INSERT INTO t VALUES (%s, %s, %s)", [(i, f"v{i}", i) for i in range(2, 82, 2)])  # even ids
    return plan(db, "t", 10, even_split=False)


def test_writes_between_low_and_high_watermark_in_and_around_the_chunk(source_db, server_id):
    schema, chunks = make_even_table(source_db)
    chunk = chunks[1]
    lo, hi = chunk.start[0], chunk.end[0]
    prev_key, next_key = chunks[0].start or 2, hi  # a key of the previous chunk, the first key of the next
    assert prev_key < lo

    def after_low_watermark():  # before the SELECT: the SELECT already sees these
        source_db.execute("UPDATE t SET v = 'early update' WHERE id = %s", (lo + 2,))
        source_db.execute("DELETE FROM t WHERE id = %s", (lo + 4,))
        source_db.execute("INSERT INTO t VALUES (%s, 'early insert', 0)", (lo + 1,))
        source_db.execute("UPDATE t SET v = 'neighbour' WHERE id = %s", (next_key,))

    def after_select():  # after the SELECT: only the binlog window brings these in
        source_db.execute("UPDATE t SET v = 'late update', n = -1 WHERE id = %s", (lo,))
        source_db.execute("DELETE FROM t WHERE id = %s", (lo + 6,))
        source_db.execute("INSERT INTO t VALUES (%s, 'late insert', 0)", (lo + 3,))
        source_db.execute("UPDATE t SET id = %s WHERE id = %s", (lo + 5, prev_key))  # moves into the chunk
        source_db.execute("UPDATE t SET id = %s WHERE id = %s", (1001, lo + 8))  # moves out of the chunk
        source_db.execute("DELETE FROM t WHERE id = %s", (next_key + 2,))  # neighbour chunk
        source_db.execute("INSERT INTO t VALUES (%s, 'ins then del', 0)", (lo + 7,))
        source_db.execute("DELETE FROM t WHERE id = %s", (lo + 7,))

    result = read_chunk(source_db.settings, schema, chunk, server_id=server_id,
                        hooks=ChunkReadHooks(after_low_watermark=after_low_watermark, after_select=after_select))
    expected = rows_now(source_db, schema, chunk)
    assert result.rows == expected
    assert expected[(lo,)]["v"] == "late update" and (lo + 5,) in expected and (lo + 8,) not in expected
    assert result.report.high_watermark > result.report.low_watermark
    assert result.report.window_events_applied >= 7  # every change of a key in the chunk, neighbours ignored
    report = result.report.to_dict()
    assert report["rows"] == len(expected) and report["split_id"] == chunk.split_id
    assert set(report) == {"split_id", "table", "index", "epoch", "key_columns", "start", "end", "low_watermark",
                           "high_watermark", "rows", "window_events_applied", "seconds"}


def test_writes_after_the_high_watermark_are_not_in_the_chunk(source_db, server_id):
    schema, chunks = make_even_table(source_db)
    chunk = chunks[2]
    lo = chunk.start[0]
    at_hw = {}

    def after_high_watermark():
        at_hw.update(rows_now(source_db, schema, chunk))
        source_db.execute("UPDATE t SET v = 'too late' WHERE id = %s", (lo,))
        source_db.execute("DELETE FROM t WHERE id = %s", (lo + 2,))

    def after_select():
        source_db.execute("UPDATE t SET v = 'in window' WHERE id = %s", (lo + 4,))

    result = read_chunk(source_db.settings, schema, chunk, server_id=server_id,
                        hooks=ChunkReadHooks(after_select=after_select, after_high_watermark=after_high_watermark))
    assert result.rows == at_hw
    assert result.rows[(lo,)]["v"] == f"v{lo}" and result.rows[(lo + 4,)]["v"] == "in window"
    assert result.rows != rows_now(source_db, schema, chunk)


def test_no_writes_means_no_binlog_read(source_db, server_id):
    schema, chunks = make_even_table(source_db)
    result = read_chunk(source_db.settings, schema, chunks[0], server_id=server_id)
    assert result.report.low_watermark == result.report.high_watermark and result.report.window_events_applied == 0
    assert result.rows == rows_now(source_db, schema, chunks[0])


def test_binlog_rotation_inside_the_window(source_db, server_id):
    schema, chunks = make_even_table(source_db)
    chunk = chunks[1]
    lo = chunk.start[0]

    def after_low_watermark():
        source_db.execute("UPDATE t SET v = 'before rotation' WHERE id = %s", (lo,))

    def after_select():
        source_db.execute("UPDATE t SET v = 'old file' WHERE id = %s", (lo + 2,))
        source_db.execute("FLUSH BINARY LOGS")
        source_db.execute("UPDATE t SET v = 'new file' WHERE id = %s", (lo + 4,))
        source_db.execute("DELETE FROM t WHERE id = %s", (lo + 6,))

    result = read_chunk(source_db.settings, schema, chunk, server_id=server_id,
                        hooks=ChunkReadHooks(after_low_watermark=after_low_watermark, after_select=after_select))
    assert result.report.high_watermark.file_seq == result.report.low_watermark.file_seq + 1
    assert result.rows == rows_now(source_db, schema, chunk)
    assert result.rows[(lo + 4,)]["v"] == "new file" and (lo + 6,) not in result.rows


def test_string_key_window_uses_the_collation_not_python_order(source_db, server_id):
    source_db.execute("CREATE TABLE s (code VARCHAR(20) COLLATE utf8mb4_general_ci PRIMARY KEY, v INT)")
    codes = ["apple", "Banana", "cherry", "Date", "elder", "Fig", "grape", "Hazel", "iris", "Jujube", "kiwi"]
    source_db.executemany("INSERT INTO s VALUES (%s, 0)", [(c,) for c in codes])
    schema, chunks = plan(source_db, "s", 3)
    chunk = chunks[1]
    assert (chunk.start, chunk.end) == (("Date",), ("grape",))

    def after_select():
        # 'Zed' lies between 'Date' and 'grape' in Python's order, but after 'grape' in the collation
        source_db.execute("INSERT INTO s VALUES ('Zed', 1)")
        source_db.execute("INSERT INTO s VALUES ('eagle', 1)")  # inside the chunk either way
        source_db.execute("UPDATE s SET v = 2 WHERE code = 'FIG'")  # same key, other case: the collation matches

    result = read_chunk(source_db.settings, schema, chunk, server_id=server_id, hooks=ChunkReadHooks(after_select=after_select))
    expected = rows_now(source_db, schema, chunk)
    assert result.rows == expected
    assert ("Zed",) not in result.rows and ("eagle",) in result.rows and result.rows[("Fig",)]["v"] == 2


def test_composite_key_chunk_read_with_window(source_db, server_id):
    source_db.execute("CREATE TABLE c (a INT, b VARCHAR(5), v INT, PRIMARY KEY (a, b))")
    source_db.executemany("INSERT INTO c VALUES (%s, %s, 0)", [(a, b) for a in range(4) for b in "pqrst"])
    schema, chunks = plan(source_db, "c", 6)
    chunk = chunks[1]

    def after_select():
        source_db.execute("UPDATE c SET v = 9 WHERE (a, b) = (%s, %s)", chunk.start)
        source_db.execute("INSERT INTO c VALUES (%s, 'pa', 1)", (chunk.start[0],))
        source_db.execute("DELETE FROM c WHERE (a, b) = (%s, %s)", chunk.end)  # first key of the next chunk

    result = read_chunk(source_db.settings, schema, chunk, server_id=server_id, hooks=ChunkReadHooks(after_select=after_select))
    assert result.rows == rows_now(source_db, schema, chunk)
    assert result.rows[chunk.start]["v"] == 9


def _prepare(db, xid, *statements):
    """An XA transaction of ``statements``, prepared on a connection of the application that then closes (the
    server keeps it prepared)."""
    with contextlib.closing(db.server.app_connection(db.name)) as conn, conn.cursor() as cur:
        for sql in (f"XA START '{xid}'", *statements, f"XA END '{xid}'", f"XA PREPARE '{xid}'"):
            cur.execute(sql)


def test_a_transaction_prepared_before_the_low_watermark_and_committed_after_the_select_is_in_the_chunk(
        source_db, server_id):
    """Its rows are logged at its XA PREPARE, before the window, and the SELECT cannot see them: the read waits for
    it to end before taking its low watermark."""
    schema, chunks = make_even_table(source_db)
    chunk = chunks[1]
    lo = chunk.start[0]
    xid = f"cr-{server_id}"
    _prepare(source_db, xid, f"INSERT INTO t VALUES ({lo + 1}, 'prepared insert', 0)",
             f"UPDATE t SET v = 'prepared update' WHERE id = {lo}")
    committer = threading.Timer(1.0, source_db.execute, (f"XA COMMIT '{xid}'",))
    committer.start()
    try:
        # without the wait, the commit lands after the SELECT (and is logged inside the window, rows-less)
        result = read_chunk(source_db.settings, schema, chunk, server_id=server_id,
                            hooks=ChunkReadHooks(after_select=committer.join))
    finally:
        committer.join()
    assert result.rows == rows_now(source_db, schema, chunk)
    assert result.rows[(lo + 1,)]["v"] == "prepared insert" and result.rows[(lo,)]["v"] == "prepared update"


def test_a_transaction_left_prepared_fails_the_read_naming_it(source_db, server_id):
    schema, chunks = make_even_table(source_db)
    xid = f"stuck-{server_id}"
    _prepare(source_db, xid, f"UPDATE t SET v = 'never decided' WHERE id = {chunks[0].end[0]}")
    try:
        with pytest.raises(PreparedTransactions) as failure:
            read_chunk(source_db.settings, schema, chunks[0], server_id=server_id, prepared_wait=0.5)
    finally:
        source_db.execute(f"XA ROLLBACK '{xid}'")
    message = str(failure.value)
    assert xid_of(1, xid.encode(), b"") in message and f"{source_db.name}.t" in message and "XA COMMIT or XA ROLLBACK" in message
    assert read_chunk(source_db.settings, schema, chunks[0], server_id=server_id).rows == rows_now(
        source_db, schema, chunks[0])

