"""Where a stream without checkpoint starts (``stream.startup``), resolved on the real binlog: a position inside
a transaction moves to that transaction's first event, never in its middle; a position where no event starts
is refused naming the boundaries around it."""

from __future__ import annotations

import contextlib

import pytest

from airflow_cdc_provider.core.chunks import TableId
from airflow_cdc_provider.core.offsets import BinlogOffset
from airflow_cdc_provider.source.binlog import read_changes_between
from airflow_cdc_provider.source.schema import load_schema
from airflow_cdc_provider.source.server import current_offset
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
