"""Schema changes as the binlog reader sees them, against the real MariaDB: statements of captured tables
become schema change records at their positions, a row event of another definition is never decoded with the
known one, what a snapshot covers is skipped unread, and a chunk window folds a TRUNCATE and refuses an ALTER.
"""

from __future__ import annotations

import contextlib

import pytest

from airflow_cdc_provider.core.chunks import SplitOptions, TableId
from airflow_cdc_provider.core.records import ChangeRecord
from airflow_cdc_provider.core.schema_changes import SchemaChange
from airflow_cdc_provider.core.window import SchemaChangeInWindow
from airflow_cdc_provider.pipeline.chunk_window import ChunkReadHooks, read_chunk
from airflow_cdc_provider.source.binlog import TableChangeReader, read_changes_between
from airflow_cdc_provider.source.chunk_queries import split_schema
from airflow_cdc_provider.source.schema import load_schema
from airflow_cdc_provider.source.server import current_offset
from airflow_cdc_provider.source.validation import check_foreign_key_actions


def offset(db):
    with db.connection() as conn:
        return current_offset(conn)


def schema_of(db, table="t"):
    with db.connection() as conn:
        return load_schema(conn, TableId(db.name, table))


def read(db, start, stop, schemas, server_id, compiled=True, covered_through=None):
    reader = TableChangeReader({s.table: s for s in schemas}, compiled=compiled, covered_through=covered_through)
    return list(read_changes_between(db.settings, server_id, start, stop, {s.table: s for s in schemas}, reader))


def tables_of_one_row(db, *names):
    """Tables ``names`` (id INT PRIMARY KEY) holding the row 1, as the reader knows them."""
    for name in names:
        db.execute(f"CREATE TABLE {name} (id INT PRIMARY KEY)")
        db.execute(f"INSERT INTO {name} VALUES (1)")
    return [schema_of(db, name) for name in names]


def read_statements(db, schemas, server_id, statements):
    """What the reader makes of ``statements``, run one after the other."""
    start = offset(db)
    for statement in statements:
        db.execute(statement)
    return read(db, start, offset(db), schemas, server_id)


@pytest.mark.parametrize("compiled", [True, False], ids=["packet-reader", "library-reader"])
def test_statements_of_captured_tables_are_records_at_their_positions(source_db, server_id, compiled):
    db = source_db
    db.execute("CREATE TABLE t (id INT PRIMARY KEY, v VARCHAR(10))")
    db.execute("CREATE TABLE other (id INT PRIMARY KEY)")
    db.executemany("INSERT INTO t VALUES (%s, %s)", [(i, f"v{i}") for i in range(5)])
    known = schema_of(db)
    start = offset(db)
    db.execute("UPDATE t SET v = 'before' WHERE id = 1")
    db.execute("TRUNCATE TABLE t")
    db.execute("INSERT INTO t VALUES (7, 'after')")
    db.execute("ALTER TABLE other ADD COLUMN c INT")  # not captured: nothing
    db.execute("ALTER TABLE t ADD COLUMN c INT NOT NULL DEFAULT 3")
    db.execute("INSERT INTO t VALUES (8, 'new def', 4)")  # another definition: never decoded with the old one
    db.execute("ALTER TABLE t ADD INDEX (v)")  # leaves rows as they are: nothing
    stop = offset(db)
    got = read(db, start, stop, [known], server_id, compiled=compiled)
    summary = [r.kind if isinstance(r, SchemaChange) else (r.op, r.key) for r in got]
    assert summary[:3] == [("u", (1,)), "truncate", ("c", (7,))]
    # the ALTER holds the table: the row of the new definition is neither decoded nor reported again
    assert [r.kind for r in got[3:]] == ["resync"] and "add column c" in got[3].detail.lower(), got[3:]
    positions = [r.position.sort_key for r in got]
    assert positions == sorted(positions)


def test_a_dropped_and_a_renamed_table_are_drop_records(source_db, server_id):
    db = source_db
    schemas = tables_of_one_row(db, "t", "u")
    got = read_statements(db, schemas, server_id,
                          ["INSERT INTO t VALUES (2)", "DROP TABLE t", "RENAME TABLE u TO u_old"])
    assert [type(r).__name__ for r in got] == ["ChangeRecord", "SchemaChange", "SchemaChange"]
    assert [(r.kind, r.table.table) for r in got[1:]] == [("drop", "t"), ("drop", "u")]
    assert "u_old" in got[2].detail


@pytest.mark.parametrize("compiled", [True, False], ids=["packet-reader", "library-reader"])
@pytest.mark.parametrize("before, after, row", [
    ("f FLOAT(7,2), d DOUBLE(12,2)", "f FLOAT(7,4), d DOUBLE(12,6)", (1, 1.2345, 3.141593)),
    ("d DOUBLE(12,2)", "d DOUBLE", (1, 3.14159265)),
    ("b BINARY(4)", "b VARBINARY(8)", (1, b"ab")),
], ids=["float-scale", "double-scale-dropped", "binary-to-varbinary"])
@pytest.mark.parametrize("create", ["plain", "if-not-exists", "or-replace"])
def test_a_table_created_again_under_its_name_is_a_resync_not_decoded_with_the_old_definition(
        source_db, server_id, compiled, before, after, row, create):
    """The row events of these definitions look alike (a FLOAT's scale and a BINARY's length are not in them), so
    the re-created table's rows would be rounded or padded as the dropped table's; its re-snapshot reads them."""
    db = source_db
    db.execute(f"CREATE TABLE t (id INT PRIMARY KEY, {before})")
    known = schema_of(db)
    start = offset(db)
    if create != "or-replace":
        db.execute("DROP TABLE t")
    head = {"plain": "CREATE TABLE", "if-not-exists": "CREATE TABLE IF NOT EXISTS",
            "or-replace": "CREATE OR REPLACE TABLE"}[create]
    db.execute(f"{head} t (id INT PRIMARY KEY, {after})")
    db.execute("INSERT INTO t VALUES (" + ", ".join(["%s"] * len(row)) + ")", row)
    got = read(db, start, offset(db), [known], server_id, compiled=compiled)
    kinds = [r.kind if isinstance(r, SchemaChange) else (r.op, r.key) for r in got]
    assert kinds == (["resync"] if create == "or-replace" else ["drop", "resync"]), kinds


def test_statements_run_under_set_statement_are_read_as_their_statement(source_db, server_id):
    """MariaDB logs ``SET STATEMENT var=value FOR <statement>`` as typed: the statement's change is still read."""
    db = source_db
    schemas = tables_of_one_row(db, "t", "u")
    got = read_statements(db, schemas, server_id, [
        "SET STATEMENT max_statement_time=100 FOR TRUNCATE TABLE t", "INSERT INTO t VALUES (2)",
        "SET STATEMENT lock_wait_timeout=30, max_statement_time=100 FOR RENAME TABLE u TO u_old"])
    summary = [r.kind if isinstance(r, SchemaChange) else (r.op, r.key) for r in got]
    assert summary == ["truncate", ("c", (2,)), "drop"], summary
    assert got[2].table.table == "u" and "u_old" in got[2].detail


def test_a_cascading_foreign_key_added_to_a_captured_table_holds_it(source_db, server_id):
    """MariaDB logs no row event for the rows a cascading foreign key deletes: the ALTER that adds one to a captured
    table is a resync (the table is held; its re-snapshot's validation refuses it). A table only referenced by such
    a key has row events of its own."""
    db = source_db
    db.execute("CREATE TABLE parent (id INT PRIMARY KEY)")
    db.execute("INSERT INTO parent VALUES (1), (2)")
    for name, parent in (("t", 1), ("other", 2)):
        db.execute(f"CREATE TABLE {name} (id INT PRIMARY KEY, p INT)")
        db.execute(f"INSERT INTO {name} VALUES (10, {parent})")
    captured = [schema_of(db, "parent"), schema_of(db, "t")]
    start = offset(db)
    db.execute("ALTER TABLE other ADD FOREIGN KEY (p) REFERENCES parent (id) ON DELETE CASCADE")  # not captured
    db.execute("ALTER TABLE t ADD CONSTRAINT fk FOREIGN KEY (p) REFERENCES parent (id) ON DELETE CASCADE")
    altered = offset(db)
    db.execute("DELETE FROM parent")
    stop = offset(db)
    got = read(db, start, stop, captured, server_id)
    summary = [(r.kind, r.table.table) if isinstance(r, SchemaChange) else (r.op, r.table.table) for r in got]
    assert summary == [("resync", "t"), ("d", "parent"), ("d", "parent")], summary
    assert "ON DELETE CASCADE" in got[0].detail
    # why: the cascade emptied both children, and the binlog has the parent's deletes only
    assert db.execute("SELECT COUNT(*) FROM t") == db.execute("SELECT COUNT(*) FROM other") == [(0,)]
    every = captured + [schema_of(db, "other")]
    assert [(r.op, r.table.table) for r in read(db, altered, stop, every, server_id)] == [
        ("d", "parent"), ("d", "parent")]
    with db.connection() as conn:  # what the re-snapshot's plan step finds
        refused = check_foreign_key_actions(conn, TableId(db.name, "t"))
    assert len(refused) == 1 and "foreign key fk (to parent) has ON DELETE CASCADE" in refused[0], refused


def test_a_captured_name_holding_a_backquote_is_followed(source_db, server_id):
    """Statements write the name ``a`b`` as ```a``b```: the reader still finds its statements."""
    db = source_db
    db.execute("CREATE TABLE `a``b` (id INT PRIMARY KEY)")
    db.execute("INSERT INTO `a``b` VALUES (1)")
    known = schema_of(db, "a`b")
    start = offset(db)
    db.execute("TRUNCATE TABLE `a``b`")
    db.execute("INSERT INTO `a``b` VALUES (2)")
    db.execute("ALTER TABLE `a``b` ADD COLUMN c VARCHAR(3)")
    got = read(db, start, offset(db), [known], server_id)
    summary = [r.kind if isinstance(r, SchemaChange) else (r.op, r.key) for r in got]
    assert summary == ["truncate", ("c", (2,)), "resync"], summary
    assert {r.table for r in got} == {known.table}


def test_events_a_snapshot_covers_are_skipped_unread(source_db, server_id):
    db = source_db
    db.execute("CREATE TABLE t (id INT PRIMARY KEY, v INT)")
    start = offset(db)
    db.execute("INSERT INTO t VALUES (1, 1)")
    db.execute("ALTER TABLE t ADD COLUMN c INT")  # old-definition events before a re-snapshot's watermark
    db.execute("INSERT INTO t VALUES (2, 2, 2)")
    covered = offset(db)
    db.execute("INSERT INTO t VALUES (3, 3, 3)")
    stop = offset(db)
    known = schema_of(db)  # the new definition, as a stream started after the ALTER knows it
    got = read(db, start, stop, [known], server_id, covered_through={known.table: covered.sort_key})
    assert [(r.op, r.key) for r in got if isinstance(r, ChangeRecord)] == [("c", (3,))]
    assert not [r for r in got if isinstance(r, SchemaChange)]


def window_plan(db):
    db.execute("CREATE TABLE t (id INT PRIMARY KEY, v VARCHAR(20))")
    db.executemany("INSERT INTO t VALUES (%s, %s)", [(i, f"v{i}") for i in range(1, 41)])
    with db.connection() as conn:
        schema = load_schema(conn, TableId(db.name, "t"))
        return schema, split_schema(conn, schema, SplitOptions(1000))


def test_a_truncate_inside_a_chunk_window_leaves_only_what_came_after_it(source_db, server_id):
    db = source_db
    schema, chunks = window_plan(db)

    def after_select():  # the SELECT saw 40 rows; the truncate and one insert follow before HW
        db.execute("TRUNCATE TABLE t")
        db.execute("INSERT INTO t VALUES (5, 'after truncate')")

    result = read_chunk(db.settings, schema, chunks[0], server_id=server_id, hooks=ChunkReadHooks(after_select=after_select))
    assert result.rows == {(5,): {"id": 5, "v": "after truncate"}}


def test_an_alter_inside_a_chunk_window_fails_the_read_naming_the_change(source_db, server_id):
    db = source_db
    schema, chunks = window_plan(db)

    def after_select():
        db.execute("ALTER TABLE t ADD COLUMN c INT DEFAULT 1")

    with pytest.raises(SchemaChangeInWindow, match=r"resync of .*\.t .*retry the chunk task"):
        read_chunk(db.settings, schema, chunks[0], server_id=server_id, hooks=ChunkReadHooks(after_select=after_select))


def test_a_primary_key_change_a_text_to_binary_change_and_a_held_table_are_never_decoded(source_db, server_id):
    db = source_db
    db.execute("CREATE TABLE t (id INT PRIMARY KEY, v VARCHAR(10) NOT NULL)")
    db.execute("INSERT INTO t VALUES (1, 'a')")
    known = schema_of(db)
    start = offset(db)
    db.execute("ALTER TABLE t DROP PRIMARY KEY, ADD PRIMARY KEY (id, v)")  # the same columns, another key
    db.execute("INSERT INTO t VALUES (1, 'b')")
    middle = offset(db)
    db.execute("ALTER TABLE t MODIFY v VARBINARY(10) NOT NULL")
    db.execute("INSERT INTO t VALUES (2, 'c')")
    stop = offset(db)
    got = read(db, start, middle, [known], server_id)
    assert [r.kind for r in got] == ["resync"], got
    # without the statement (a read starting after it), the row event's table map says it
    got = read(db, offset_after_statement(db, start, middle), middle, [known], server_id)
    assert [r.kind for r in got] == ["resync"] and "primary key (id, v), not (id)" in got[0].detail, got
    got = read(db, offset_after_statement(db, middle, stop), stop, [known], server_id)
    assert [r.kind for r in got] == ["resync"] and "text became binary" in got[0].detail, got
    # a table already held: its rows are skipped unread, whatever their definition, without a new report
    reader = TableChangeReader({known.table: known}, held={known.table})
    assert list(read_changes_between(db.settings, server_id, start, stop, {known.table: known}, reader)) == []


def offset_after_statement(db, start, stop):
    """The first transaction boundary after the first QUERY event in ``[start, stop)`` (the DDL's end)."""
    from airflow_cdc_provider.core.offsets import BinlogOffset

    with db.connection() as conn, conn.cursor() as cur:
        cur.execute("SHOW BINLOG EVENTS IN %s FROM %s", (start.file, start.pos))
        events = cur.fetchall()
    after_query = False
    for _, pos, kind, *_ in events:
        if after_query and kind == "Gtid":
            return BinlogOffset(start.file, int(pos))
        after_query = after_query or kind == "Query"
    raise AssertionError("no transaction after the statement")


def test_an_alter_between_the_jobs_look_at_the_table_and_the_low_watermark_fails_the_read(source_db, server_id):
    db = source_db
    schema, chunks = window_plan(db)
    db.execute("ALTER TABLE t ADD COLUMN c INT NOT NULL DEFAULT 1")  # before LW: no trace in the window
    with pytest.raises(SchemaChangeInWindow, match=r"no longer the one the chunk was read with"):
        read_chunk(db.settings, schema, chunks[0], server_id=server_id)


def test_a_statement_is_read_in_the_character_set_of_the_session_that_ran_it(source_db, server_id):
    """The server logs a statement's text as the client sent it: a latin1 session's TRUNCATE of `café` names the
    table in latin1 bytes, and the packet reader must read them so (the library path decodes UTF-8 only)."""
    db = source_db
    db.execute("CREATE TABLE `café` (id INT PRIMARY KEY, v VARCHAR(10))")
    db.execute("INSERT INTO `café` VALUES (1, 'a'), (2, 'b')")
    known = schema_of(db, "café")
    start = offset(db)
    with contextlib.closing(db.server.app_connection(db.name)) as conn, conn.cursor() as cur:
        conn.set_character_set("latin1")  # SET NAMES latin1, and pymysql encodes the statement so
        cur.execute("TRUNCATE TABLE `café`")
    db.execute("INSERT INTO `café` VALUES (9, 'new')")
    got = read(db, start, offset(db), [known], server_id)
    assert [r.kind if isinstance(r, SchemaChange) else (r.op, r.key) for r in got] == ["truncate", ("c", (9,))]


@pytest.mark.parametrize("keys", ["UNIQUE KEY uid (id)", "UNIQUE KEY ucode (code), UNIQUE KEY uid (id)"])
def test_a_table_without_a_primary_key_streams_by_its_chunk_key(source_db, server_id, keys):
    """Without a PRIMARY KEY the server names its first unique key of NOT NULL columns as the table's primary
    key in each table map; that is not a changed definition, whichever unique key is the chunk key."""
    db = source_db
    db.execute(f"CREATE TABLE t (id INT NOT NULL, code CHAR(3) NOT NULL, v INT, {keys})")
    db.execute("INSERT INTO t VALUES (1, 'a', 10), (2, 'b', 20)")
    with db.connection() as conn:
        known = load_schema(conn, TableId(db.name, "t"), "id")
    assert known.primary_key == () and known.key_columns == ("id",)
    start = offset(db)
    db.execute("INSERT INTO t VALUES (3, 'c', 30)")
    db.execute("UPDATE t SET v = 21 WHERE id = 2")
    db.execute("DELETE FROM t WHERE id = 1")
    stop = offset(db)
    for compiled in (True, False):
        got = read(db, start, stop, [known], server_id, compiled=compiled)
        assert [(r.op, r.key) for r in got] == [("c", (3,)), ("u", (2,)), ("d", (1,))], got
    # a primary key added since, over a column the definition has as nullable, is a changed definition
    db.execute("ALTER TABLE t MODIFY v INT NOT NULL, ADD PRIMARY KEY (v)")
    db.execute("INSERT INTO t VALUES (4, 'd', 40)")
    end = offset(db)
    got = read(db, offset_after_statement(db, stop, end), end, [known], server_id)
    assert [r.kind for r in got] == ["resync"] and "primary key (v), not none" in got[0].detail, got
