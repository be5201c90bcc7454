"""Rows the binlog holds but the server rolled back, against the real MariaDB: a transaction that also changed a
non-transactional table is logged even when it rolls back (whole, or to a savepoint), and a prepared XA
transaction's rows are logged before its outcome. The reader must give what the tables hold, compared here with
the source table itself.
"""

from __future__ import annotations

import contextlib
import time

import pytest

from airflow_cdc_provider.core.chunks import TableId
from airflow_cdc_provider.core.records import ChangeRecord
from airflow_cdc_provider.core.schema_changes import SchemaChange
from airflow_cdc_provider.source.binlog import TableChangeReader, read_changes_between
from airflow_cdc_provider.source.schema import load_schema
from airflow_cdc_provider.source.server import current_offset
from airflow_cdc_provider.source.transactions import xid_of

READERS = pytest.mark.parametrize("compiled", [True, False], ids=["packet-reader", "library-reader"])


def offset(db):
    with db.connection() as conn:
        return current_offset(conn)


def schemas_of(db, *tables):
    with db.connection() as conn:
        return {TableId(db.name, t): load_schema(conn, TableId(db.name, t)) for t in tables}


def read(db, start, stop, schemas, server_id, compiled):
    reader = TableChangeReader(schemas, compiled=compiled)
    return list(read_changes_between(db.settings, server_id, start, stop, schemas, reader))


def run(db, *statements):
    """``statements`` on one connection of the application (each transaction opened and ended by them)."""
    with contextlib.closing(db.server.app_connection(db.name)) as conn, conn.cursor() as cur:
        for sql in statements:
            cur.execute(sql)


def replayed(db, table, records, before):
    """``before`` (key -> row) with ``table``'s records applied in binlog order."""
    rows = dict(before)
    for r in records:
        if isinstance(r, ChangeRecord) and r.table.table == table:
            if r.op == "d":
                rows.pop(r.key, None)
            else:
                rows[r.key] = tuple(r.after[c] for c in ("id", "v"))
    return rows


def source_rows(db, table):
    return {(r[0],): tuple(r) for r in db.execute(f"SELECT id, v FROM {table}")}


def transactional_and_not(db):
    """An InnoDB table ``orders`` with a row, a MyISAM table ``audit``: their rows, schemas, and the position."""
    db.execute("CREATE TABLE orders (id INT PRIMARY KEY, v INT) ENGINE=InnoDB")
    db.execute("CREATE TABLE audit (id INT PRIMARY KEY, v INT) ENGINE=MyISAM")
    db.execute("INSERT INTO orders VALUES (1, 1)")
    time.sleep(1.05)  # rows of a later second than the definitions: their engines judge the rollbacks
    before = {"orders": source_rows(db, "orders"), "audit": source_rows(db, "audit")}
    return before, schemas_of(db, "orders", "audit"), offset(db)


def rolled_back_insert(row: int) -> list[str]:
    """A transaction inserting ``row`` into ``orders`` and rolled back, which the server logs with its ROLLBACK
    (it also wrote a temporary table)."""
    return ["BEGIN", "CREATE TEMPORARY TABLE tt (id INT) ENGINE=MEMORY", f"INSERT INTO orders VALUES ({row}, {row})",
            "INSERT INTO tt VALUES (1)", "ROLLBACK"]


def outcome(got):
    """Each row read as (table, key), each schema change as (kind, table)."""
    return [(r.kind, r.table.table) if isinstance(r, SchemaChange) else (r.table.table, r.key) for r in got]


def assert_replays_to_source(db, got, before):
    for table in ("orders", "audit"):
        assert replayed(db, table, got, before[table]) == source_rows(db, table), table


@READERS
def test_rows_of_a_rolled_back_transaction_are_not_changes(source_db, server_id, compiled):
    db = source_db
    before, schemas, start = transactional_and_not(db)
    # a temporary table makes the server log the transaction with its ROLLBACK
    run(db, "BEGIN", "CREATE TEMPORARY TABLE tt (id INT) ENGINE=MEMORY", "INSERT INTO orders VALUES (5, 5)",
        "UPDATE orders SET v = 50 WHERE id = 1", "INSERT INTO tt VALUES (1)", "ROLLBACK")
    # the MyISAM table's row stays: only the InnoDB rows are undone
    run(db, "BEGIN", "INSERT INTO orders VALUES (6, 6)", "INSERT INTO audit VALUES (1, 1)", "ROLLBACK")
    run(db, "BEGIN", "INSERT INTO orders VALUES (7, 7)", "INSERT INTO audit VALUES (2, 2)", "COMMIT")
    stop = offset(db)
    events = [e[5] for e in db.execute(f"SHOW BINLOG EVENTS IN '{start.file}' FROM {start.pos}")]
    assert any(e.startswith("ROLLBACK") for e in events), events  # the scenario this test is about
    got = read(db, start, stop, schemas, server_id, compiled)
    assert_replays_to_source(db, got, before)
    assert sorted((r.table.table, r.key) for r in got) == [("audit", (1,)), ("audit", (2,)), ("orders", (7,))]


@READERS
def test_a_rollback_of_a_table_altered_since_is_a_re_snapshot(source_db, server_id, compiled):
    """The InnoDB table's row was undone, but the table is MyISAM when the binlog is read: the engine it has now
    does not say what the rollback undid, so the table is re-snapshotted (its row is kept until then)."""
    db = source_db
    _, schemas, start = transactional_and_not(db)
    run(db, *rolled_back_insert(6))
    stop = offset(db)
    db.execute("ALTER TABLE orders ENGINE=MyISAM")
    got = read(db, start, stop, schemas, server_id, compiled)
    assert outcome(got) == [("orders", (6,)), ("resync", "orders")], outcome(got)
    assert "may have changed engine" in got[-1].detail and got[-1].statement == "ROLLBACK"
    # not altered since, the same rollback is judged by the engine: the InnoDB row is undone
    db.execute("ALTER TABLE orders ENGINE=InnoDB")
    time.sleep(1.05)
    start = offset(db)
    run(db, *rolled_back_insert(7))
    assert read(db, start, offset(db), schemas, server_id, compiled) == []


@READERS
def test_a_rollback_logged_with_a_time_ahead_of_the_server_is_a_re_snapshot(source_db, server_id, compiled):
    """A writer's session can set the time its events carry (SET timestamp): rows logged an hour ahead say
    nothing of the ALTERs that came after them, so the engine the table has now cannot judge them."""
    db = source_db
    _, schemas, start = transactional_and_not(db)
    try:
        run(db, "SET timestamp = UNIX_TIMESTAMP() + 3600", *rolled_back_insert(6))
        stop = offset(db)
        db.execute("ALTER TABLE orders ENGINE=MyISAM")
        got = read(db, start, stop, schemas, server_id, compiled)
    finally:
        purge_binlogs(db.server)  # a stream starting at a time (stream.startup) would start at these rows
    assert outcome(got) == [("orders", (6,)), ("resync", "orders")], outcome(got)


def purge_binlogs(server) -> None:
    """Every binlog file of the shared server but a new one gone (a dump thread may hold a file a moment)."""
    with contextlib.closing(server.root_connection()) as conn, conn.cursor() as cur:
        cur.execute("FLUSH BINARY LOGS")
        cur.execute("SHOW MASTER STATUS")
        newest = cur.fetchone()[0]
        deadline = time.monotonic() + 30
        while True:
            cur.execute(f"PURGE BINARY LOGS TO '{newest}'")
            cur.execute("SHOW BINARY LOGS")
            if [r[0] for r in cur.fetchall()] == [newest] or time.monotonic() > deadline:
                return
            time.sleep(0.5)


@READERS
def test_rows_rolled_back_to_a_savepoint_are_not_changes(source_db, server_id, compiled):
    db = source_db
    before, schemas, start = transactional_and_not(db)
    run(db, "BEGIN", "INSERT INTO audit VALUES (1, 1)", "SAVEPOINT sp", "INSERT INTO orders VALUES (2, 2)",
        "UPDATE orders SET v = 9 WHERE id = 1", "INSERT INTO audit VALUES (2, 2)", "SAVEPOINT `Later`",
        "DELETE FROM orders WHERE id = 2", "ROLLBACK TO SAVEPOINT sp", "INSERT INTO orders VALUES (3, 3)",
        "SAVEPOINT sp", "UPDATE orders SET v = 33 WHERE id = 3", "ROLLBACK TO sp", "COMMIT")
    stop = offset(db)
    events = [e[5] for e in db.execute(f"SHOW BINLOG EVENTS IN '{start.file}' FROM {start.pos}")]
    assert any(e.startswith("ROLLBACK TO") for e in events), events
    got = read(db, start, stop, schemas, server_id, compiled)
    assert_replays_to_source(db, got, before)
    assert source_rows(db, "orders") == {(1,): (1, 1), (3,): (3, 3)}


@READERS
def test_a_prepared_xa_transaction_rolled_back_re_snapshots_the_tables(source_db, server_id, compiled):
    db = source_db
    db.execute("CREATE TABLE orders (id INT PRIMARY KEY, v INT)")
    db.execute("INSERT INTO orders VALUES (1, 1)")
    schemas = schemas_of(db, "orders")
    start = offset(db)
    run(db, "XA START 'x1'", "INSERT INTO orders VALUES (2, 2)", "XA END 'x1'", "XA PREPARE 'x1'")
    run(db, "XA ROLLBACK 'x1'")
    run(db, "XA START 'x2'", "INSERT INTO orders VALUES (3, 3)", "XA END 'x2'", "XA PREPARE 'x2'")
    run(db, "XA COMMIT 'x2'")
    stop = offset(db)
    got = read(db, start, stop, schemas, server_id, compiled)
    # the rolled-back rows were read at the prepare; the rollback cannot say which: the table is re-snapshotted,
    # and its later rows wait for that (held)
    kinds = [r.kind if isinstance(r, SchemaChange) else (r.op, r.key) for r in got]
    assert kinds == [("c", (2,)), "resync"], kinds
    assert "XA" in got[1].detail


@READERS
def test_an_xa_transaction_committed_in_one_phase_is_taken(source_db, server_id, compiled):
    db = source_db
    db.execute("CREATE TABLE orders (id INT PRIMARY KEY, v INT)")
    schemas = schemas_of(db, "orders")
    start = offset(db)
    run(db, "XA START 'x3'", "INSERT INTO orders VALUES (4, 4)", "XA END 'x3'", "XA COMMIT 'x3' ONE PHASE")
    stop = offset(db)
    got = read(db, start, stop, schemas, server_id, compiled)
    assert replayed(db, "orders", got, {}) == source_rows(db, "orders") == {(4,): (4, 4)}


@READERS
def test_a_chunk_windows_read_re_snapshots_only_for_an_xa_transaction_it_saw_prepared(source_db, server_id, compiled):
    """A window's SELECT does not see the rows of a transaction prepared before the window: its rollback inside
    the window changes nothing there (a stream, which may have taken them in an earlier read, re-snapshots)."""
    db = source_db
    db.execute("CREATE TABLE orders (id INT PRIMARY KEY, v INT)")
    schemas = schemas_of(db, "orders")
    run(db, "XA START 'early'", "INSERT INTO orders VALUES (1, 1)", "XA END 'early'", "XA PREPARE 'early'")
    start = offset(db)
    run(db, "XA ROLLBACK 'early'")
    run(db, "INSERT INTO orders VALUES (2, 2)")
    stop = offset(db)

    def window_read():
        reader = TableChangeReader(schemas, compiled=compiled, window=True)
        return list(read_changes_between(db.settings, server_id, start, stop, schemas, reader))

    assert [(r.op, r.key) for r in window_read()] == [("c", (2,))]
    assert [r.kind for r in read(db, start, stop, schemas, server_id, compiled)] == ["resync"]
    start = offset(db)
    run(db, "XA START 'late'", "INSERT INTO orders VALUES (3, 3)", "XA END 'late'", "XA PREPARE 'late'")
    run(db, "XA ROLLBACK 'late'")
    stop = offset(db)
    assert [r.kind if isinstance(r, SchemaChange) else (r.op, r.key) for r in window_read()] == [("c", (3,)), "resync"]


@READERS
def test_a_read_knows_the_xa_transactions_it_saw_end_and_those_committed_without_it(source_db, server_id, compiled):
    """A chunk window that meets the XA COMMIT of a transaction it did not see end was read after that transaction's
    prepare: its SELECT may have missed the rows (``chunk_window._check_prepared_before``)."""
    db = source_db
    db.execute("CREATE TABLE orders (id INT PRIMARY KEY, v INT)")
    schemas = schemas_of(db, "orders")
    run(db, "XA START 'before'", "INSERT INTO orders VALUES (1, 1)", "XA END 'before'", "XA PREPARE 'before'")
    start = offset(db)
    run(db, "XA START 'inside', 'b', 7", "INSERT INTO orders VALUES (2, 2)", "XA END 'inside', 'b', 7",
        "XA PREPARE 'inside', 'b', 7")
    run(db, "XA COMMIT 'before'")
    run(db, "XA COMMIT 'inside', 'b', 7")
    stop = offset(db)
    reader = TableChangeReader(schemas, compiled=compiled, window=True)
    got = list(read_changes_between(db.settings, server_id, start, stop, schemas, reader))
    assert [(r.op, r.key) for r in got] == [("c", (2,))]
    inside, before = xid_of(7, b"inside", b"b"), xid_of(1, b"before", b"")
    assert reader.xa_ended == {inside} and reader.xa_committed_unseen == {before}
