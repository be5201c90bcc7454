"""Where a stream without checkpoint starts (``stream.startup``), resolved on the real binlog: a position inside
a transaction moves to that transaction's first event, never in its middle; a position where no event starts
is refused naming the boundaries around it."""

from __future__ import annotations

import contextlib
import time

import pytest

from airflow_cdc_provider.core.chunks import TableId
from airflow_cdc_provider.core.offsets import BinlogOffset
from airflow_cdc_provider.source.binlog import read_changes_between
from airflow_cdc_provider.source.schema import load_schema
from airflow_cdc_provider.source.server import current_offset
from airflow_cdc_provider.source import startup
from airflow_cdc_provider.source.startup import StartupError, resolve_startup


def events(db, file: str) -> list[tuple[int, str, int]]:
    """``(start, type, end)`` of every event of ``file``."""
    with contextlib.closing(db.server.root_connection()) as conn, conn.cursor() as cur:
        cur.execute("SHOW BINLOG EVENTS IN %s", (file,))
        return [(int(r[1]), r[2], int(r[4])) for r in cur.fetchall()]


def a_transaction_of_three_statements(db):
    db.execute("CREATE TABLE t (id INT PRIMARY KEY, v VARCHAR(10))")
    with db.connection() as conn:
        before = current_offset(conn)
    with contextlib.closing(db.server.app_connection(db.name)) as app, app.cursor() as cur:
        cur.execute("BEGIN")
        for i in range(3):
            cur.execute("INSERT INTO t VALUES (%s, 'x')", (i,))
        cur.execute("COMMIT")
    with db.connection() as conn:
        after = current_offset(conn)
    inside = [e for e in events(db, before.file) if before.pos <= e[0] < after.pos]
    return before, after, inside


def resolve(db, server_id, startup):
    with db.connection() as conn:
        return resolve_startup(startup, db.settings, conn, server_id, None, "state")


def keys_read_from(db, server_id, start) -> list:
    """The keys of table ``t``'s changes a stream reads from ``start`` (a resolved startup) to the server's end."""
    with db.connection() as conn:
        schema = load_schema(conn, TableId(db.name, "t"))
        end = current_offset(conn)
    rows = read_changes_between(db.settings, server_id, BinlogOffset(start["file"], start["pos"]), end,
                                {schema.table: schema})
    return [r.key for r in rows]


def test_a_position_inside_a_transaction_starts_at_its_first_event(source_db, server_id):
    before, after, inside = a_transaction_of_three_statements(source_db)
    assert inside[0][1] == "Gtid" and [e[1] for e in inside].count("Write_rows_v1") == 3, inside
    for start, kind, _ in inside:  # every event of the transaction: its table map, each row event, the XID
        got = resolve(source_db, server_id, {"file": before.file, "pos": start})
        assert (got["file"], got["pos"]) == (before.file, inside[0][0]), kind
    # and from there the stream reads the whole transaction, none of its rows lost
    with source_db.connection() as conn:
        schema = load_schema(conn, TableId(source_db.name, "t"))
    rows = list(read_changes_between(source_db.settings, server_id, BinlogOffset(before.file, inside[0][0]), after,
                                     {schema.table: schema}))
    assert sorted(r.key for r in rows) == [(0,), (1,), (2,)]


def test_boundaries_stay_where_they_are(source_db, server_id):
    before, after, inside = a_transaction_of_three_statements(source_db)
    assert resolve(source_db, server_id, {"file": before.file, "pos": before.pos})["pos"] == before.pos
    assert resolve(source_db, server_id, {"file": before.file, "pos": after.pos})["pos"] == after.pos  # the end
    assert resolve(source_db, server_id, {"file": before.file})["pos"] == 4  # the file's start


def test_a_position_where_no_event_starts_is_refused_naming_the_boundaries(source_db, server_id):
    before, after, inside = a_transaction_of_three_statements(source_db)
    with pytest.raises(StartupError) as exc:
        resolve(source_db, server_id, {"file": before.file, "pos": inside[1][0] + 3})
    message = str(exc.value)
    assert f"{before.file}:{inside[1][0] + 3} is not the start of an event" in message
    assert f"{before.file}:{inside[0][0]}" in message and "set stream.startup to one of them" in message


def test_a_file_the_server_no_longer_has_is_refused(source_db, server_id):
    with pytest.raises(StartupError, match=r"stream.startup file 'mariadb-bin.999999' is not on the server"):
        resolve(source_db, server_id, {"file": "mariadb-bin.999999", "pos": 4})


@pytest.mark.parametrize("mode", ["earliest", "latest", "gtid", "file"])
def test_the_plan_step_records_the_start_of_a_stream_without_snapshot(source_db, tmp_path, monkeypatch, mode):
    """What the generated DAG's plan step writes as the stream seed for each startup mode but ``initial``."""
    from airflow_cdc_provider.pipeline.plan import startup_seed
    from airflow_cdc_provider.pipeline.resolve import load_pipeline

    before, after, inside = a_transaction_of_three_statements(source_db)
    gtid = source_db.execute("SELECT @@gtid_binlog_pos")[0][0]
    startup = {"earliest": "earliest", "latest": "latest", "gtid": f"{{gtid: '{gtid}'}}",
               "file": f"{{file: {before.file}, pos: {inside[2][0]}}}"}[mode]
    monkeypatch.setenv("AIRFLOW_CONN_SRC", source_db.server.connection_uri())
    config = tmp_path / "p.yaml"
    config.write_text(f"source:\n  conn_id: src\n  tables: [{source_db.table('t')}]\nstream:\n  startup: {startup}\n"
                      f"state:\n  path: {tmp_path / 'state'}\n")
    seed = startup_seed(load_pipeline(config))
    with source_db.connection() as conn, conn.cursor() as cur:
        cur.execute("SHOW BINARY LOGS")
        oldest = cur.fetchone()[0]
    expected = {"earliest": BinlogOffset(oldest, 4), "latest": after, "gtid": after,
                "file": BinlogOffset(before.file, inside[0][0])}[mode]
    assert seed.tables == {} and seed.start == expected, (seed.start, expected)


def xa_prepared(db, xid: str, ids: list[int]):
    """An XA transaction inserting ``ids`` into t, prepared; the connection that holds it."""
    app = db.server.app_connection(db.name)
    with app.cursor() as cur:
        cur.execute(f"XA START '{xid}'")
        for i in ids:
            cur.execute("INSERT INTO t VALUES (%s, 'xa')", (i,))
        cur.execute(f"XA END '{xid}'")
        cur.execute(f"XA PREPARE '{xid}'")
    return app


def end_xa(app, xid: str, how: str = "COMMIT") -> None:
    with app.cursor() as cur:
        cur.execute(f"XA {how} '{xid}'")
    app.close()


@pytest.mark.parametrize("mode, committed_first", [("latest", False), ("file", False), ("file", True),
                                                    ("gtid", True), ("timestamp", False)])
def test_a_start_between_an_xa_prepare_and_its_commit_moves_before_the_prepare(source_db, server_id, mode,
                                                                             committed_first):
    """The XA transaction's rows are logged at its prepare: a stream starting after it and before its commit
    (committed by the time the start is resolved, or later) would read the commit without them."""
    source_db.execute("CREATE TABLE t (id INT PRIMARY KEY, v VARCHAR(10))")
    with source_db.connection() as conn:
        before = current_offset(conn)
    app = xa_prepared(source_db, "across", [1, 2])
    try:
        source_db.execute("INSERT INTO t VALUES (3, 'plain')")
        gtid = source_db.execute("SELECT @@gtid_binlog_pos")[0][0]
        time.sleep(1.1)  # the binlog's timestamps are in seconds: a later transaction is in a later second
        with source_db.connection() as conn:
            asked = current_offset(conn)
        startup = {"latest": "latest", "file": {"file": asked.file, "pos": asked.pos}, "gtid": {"gtid": gtid},
                   "timestamp": {"timestamp": time.time()}}[mode]
        if committed_first:
            end_xa(app, "across")
        got = resolve(source_db, server_id, startup)
    finally:
        if not committed_first:
            end_xa(app, "across")
    source_db.execute("INSERT INTO t VALUES (4, 'after')")
    xa_group = next(e[0] for e in events(source_db, before.file) if e[0] >= before.pos and e[1] == "Gtid")
    assert (got["file"], got["pos"]) == (before.file, xa_group)
    with source_db.connection() as conn:
        schema = load_schema(conn, TableId(source_db.name, "t"))
        now = current_offset(conn)
    rows = list(read_changes_between(source_db.settings, server_id, BinlogOffset(got["file"], got["pos"]), now,
                                     {schema.table: schema}))
    assert sorted(r.key for r in rows) == [(1,), (2,), (3,), (4,)]


def test_a_start_after_an_xa_transaction_commits_stays_where_it_is(source_db, server_id):
    source_db.execute("CREATE TABLE t (id INT PRIMARY KEY, v VARCHAR(10))")
    end_xa(xa_prepared(source_db, "before", [1]), "before")
    with source_db.connection() as conn:
        now = current_offset(conn)
    assert resolve(source_db, server_id, "latest")["pos"] == now.pos


def test_an_xa_transaction_prepared_in_a_purged_file_refuses_the_start(source_db, server_id):
    source_db.execute("CREATE TABLE t (id INT PRIMARY KEY, v VARCHAR(10))")
    app = xa_prepared(source_db, "purged", [1])
    try:
        source_db.execute("FLUSH BINARY LOGS")
        with contextlib.closing(source_db.server.root_connection()) as conn, conn.cursor() as cur:
            cur.execute("SHOW BINARY LOGS")
            newest = cur.fetchall()[-1][0]
            # a binlog reader an earlier test on this server left connected keeps its file from the purge
            cur.execute("SELECT id FROM information_schema.PROCESSLIST WHERE COMMAND LIKE 'Binlog Dump%'")
            for (thread,) in cur.fetchall():
                cur.execute(f"KILL {int(thread)}")
            cur.execute(f"PURGE BINARY LOGS TO '{newest}'")
            cur.execute("SHOW BINARY LOGS")
            assert [r[0] for r in cur.fetchall()] == [newest], "the older binlog files were not purged"
        with pytest.raises(StartupError) as exc:
            resolve(source_db, server_id, "latest")
    finally:
        end_xa(app, "purged", "ROLLBACK")
    message = str(exc.value)
    assert "x'707572676564',x'',1" in message and "no longer has" in message, message
    assert "stream.startup to initial" in message


def test_gtid_and_timestamp_starts_scan_from_the_file_that_holds_them(source_db, server_id, monkeypatch):
    """A GTID or timestamp start reads the binlog from the last file that cannot start after it (the files'
    Gtid_list and start times say so), and lands where a scan from the oldest file lands."""
    from airflow_cdc_provider.source.startup import _gtid_scan_start, _timestamp_scan_start

    source_db.execute("CREATE TABLE t (id INT PRIMARY KEY, v VARCHAR(10))")
    marks = []  # (gtid, offset after it, time before it) of one transaction per file
    for i in range(4):
        time.sleep(1.1)  # file start times are whole seconds
        source_db.execute("FLUSH BINARY LOGS")
        started = time.time()
        time.sleep(1.1)
        source_db.execute("INSERT INTO t VALUES (%s, 'x')", (i,))
        with source_db.connection() as conn:
            marks.append((source_db.execute("SELECT @@gtid_binlog_pos")[0][0], current_offset(conn), started))
    with source_db.connection() as conn, conn.cursor() as cur:
        cur.execute("SHOW BINARY LOGS")
        files = [r[0] for r in cur.fetchall()]
        gtid, after, started = marks[2]
        assert _gtid_scan_start(conn, files, gtid) == BinlogOffset(after.file, 4)
    at = int(started) + 0.5  # event times are whole seconds: after marks[1]'s insert's, before marks[2]'s
    assert _timestamp_scan_start(source_db.settings, server_id, files, at, margin=0) == BinlogOffset(after.file, 4)
    # an hour's margin for events stamped by another clock: every file here opened less than an hour ago
    assert _timestamp_scan_start(source_db.settings, server_id, files, at) == BinlogOffset(files[0], 4)
    assert resolve(source_db, server_id, {"gtid": gtid})["pos"] == after.pos  # read from the oldest file
    with contextlib.closing(source_db.server.root_connection()) as root, root.cursor() as cur:
        cur.execute("SET GLOBAL gtid_strict_mode = 1")  # a sequence number is then never logged twice
        try:
            starts = []
            monkeypatch.setattr(startup, "_gtid_scan_start",
                                lambda *a: starts.append(_gtid_scan_start(*a)) or starts[-1])
            assert resolve(source_db, server_id, {"gtid": gtid})["pos"] == after.pos
            assert starts == [BinlogOffset(after.file, 4)]
        finally:
            cur.execute("SET GLOBAL gtid_strict_mode = 0")
    got = resolve(source_db, server_id, {"timestamp": at})
    assert sorted(keys_read_from(source_db, server_id, got)) == [(2,), (3,)]
    # a GTID older than every file's list, and one never logged, are refused as before
    with pytest.raises(StartupError, match="is not in the binlogs still on the server"):
        resolve(source_db, server_id, {"gtid": "0-1-999999"})


def test_a_timestamp_no_transaction_reached_yet_starts_after_the_last_one_read(source_db, server_id):
    """Not at the server's position asked after the scan: a commit in between would be lost."""
    source_db.execute("CREATE TABLE t (id INT PRIMARY KEY, v VARCHAR(10))")
    source_db.execute("INSERT INTO t VALUES (1, 'before')")
    got = resolve(source_db, server_id, {"timestamp": time.time() + 3600})
    with source_db.connection() as conn:
        assert BinlogOffset(got["file"], got["pos"]) == current_offset(conn)  # after the insert
    source_db.execute("INSERT INTO t VALUES (2, 'after')")
    assert keys_read_from(source_db, server_id, got) == [(2,)]


def test_a_timestamp_inside_a_second_reads_the_transactions_stamped_with_that_second(source_db, server_id):
    """The binlog stamps a transaction with the whole second its committing statement started in: one committed
    after a timestamp with a fraction, in that timestamp's second, is stamped below it and must still be read."""
    source_db.execute("CREATE TABLE t (id INT PRIMARY KEY, v VARCHAR(10))")
    source_db.execute("INSERT INTO t VALUES (1, 'before')")
    time.sleep(1.1)  # the next second: row 1 is stamped with an earlier one
    while True:  # early in a second of the server's clock, so the insert below starts in the same second
        now = float(source_db.execute("SELECT UNIX_TIMESTAMP(NOW(6))")[0][0])
        if 0.05 <= now % 1 <= 0.5:
            break
        time.sleep(0.05)
    source_db.execute("INSERT INTO t VALUES (2, 'after')")
    at = int(now) + 0.01  # after row 1's commit, before row 2's (which started after ``now``)
    got = resolve(source_db, server_id, {"timestamp": at})
    assert keys_read_from(source_db, server_id, got) == [(2,)]
