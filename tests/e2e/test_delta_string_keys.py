"""Snapshot windows of tables whose key no integer column leads, through the real jobs into the delta sink. Once
the table has files, a window is appended when no file may hold one of its keys: by the files' statistics of a
string (in the order of its bytes), date or decimal key, or because each row of a file is of another chunk of
the same epoch (whatever the key's type). A window whose range other files overlap replaces them, carrying their
other rows over. Neither passes its rows through a MERGE on the driver. Each time the table equals MariaDB row by
row."""

from __future__ import annotations

from pathlib import Path

import deltalake

from .cdc_helpers import Pipeline, delta_sink
from .test_delta_sink import assert_delta_equals_source, merge_predicates, table_uri, window_commits


def how_windows_landed(uri: str, epoch: int) -> list[str]:
    """How each window of snapshot ``epoch`` was committed ("append", "replace" or "MERGE"), oldest first."""
    return [how for what, how in window_commits(uri) if what.startswith(f"snapshot epoch {epoch} ")]


def assert_merges_bounded(uris: dict[str, str], since: dict[str, int]) -> None:
    """The stream's MERGEs into ``readings``, ``ledger`` and ``accounts`` since the given versions were bounded by
    their first key column's range, as literals of its type."""
    for t, key, typed in (("readings", "day", "date"), ("ledger", "entry", "decimal(18, 0)")):
        stream = merge_predicates(uris[t], since[t])
        assert stream and all(f" AND t.{key} >= '" in on and on.endswith(f"'::{typed}") for _, on in stream), stream
    stream = merge_predicates(uris["accounts"], since["accounts"])
    assert stream and all(" AND t.region >= " in on for _, on in stream), stream
    stream = merge_predicates(uris["events"], since["events"])  # a DATETIME bounds nothing: the key's integer does
    assert stream and all(" AND t.id >= " in on and " AND t.at " not in on for _, on in stream), stream


def snapshot_in_two_tasks(p: Pipeline) -> int:
    """Plan the pipeline's tables and snapshot them as two tasks, each holding the first or the second half of
    every table's chunks (each half one window); then collect. The epoch."""
    chunks = p.plan()
    for half in (0, 1):
        task = []
        for t in sorted({str(c.table) for c in chunks}):
            own = [c for c in chunks if str(c.table) == t]
            task += own[: len(own) // 2] if half == 0 else own[len(own) // 2:]
        p.snapshot(task)
    p.collect()
    return chunks[0].epoch


def test_string_date_and_decimal_keyed_windows_append_or_replace_files_rather_than_merge(source_db, tmp_path):
    """``sessions``: UUID keys. ``codes``: keys whose case alternates under a case-insensitive collation, which
    the chunks split in the collation's order, so the second window's keys span the first's in byte order.
    ``readings``: a DATE key; ``ledger``: a DECIMAL key without a fraction, of negative and positive values
    (whose statistics are text, compared as numbers); ``accounts``: a key of two strings, the first holding
    quotes, a backslash and letters beyond ASCII (delta-rs's SQL reads it as the statistics and pyarrow order
    it); ``events``: a key of a DATETIME and an integer. The second task's window of each appends onto the
    first's files, which are of other chunks of the epoch. The stream's MERGEs (executor and driver batches) are
    bounded by the first key column's range (``events``: its integer's). A re-snapshot after changes the stream
    has partly seen replaces the earlier epoch's files window by window."""
    db = source_db
    db.execute("CREATE TABLE sessions (id CHAR(36) NOT NULL PRIMARY KEY, v INT NOT NULL, note VARCHAR(20))")
    db.execute("INSERT INTO sessions SELECT UUID(), seq, 'init' FROM seq_1_to_1200")
    db.execute("CREATE TABLE codes (code VARCHAR(20) COLLATE utf8mb4_general_ci NOT NULL PRIMARY KEY, v INT) "
               "CHARACTER SET utf8mb4")
    db.execute("INSERT INTO codes SELECT CONCAT(IF(seq % 2, 'K', 'k'), LPAD(seq, 5, '0')), seq FROM seq_1_to_1200")
    db.execute("CREATE TABLE readings (day DATE NOT NULL PRIMARY KEY, v INT NOT NULL)")
    db.execute("INSERT INTO readings SELECT '2020-01-01' + INTERVAL seq DAY, seq FROM seq_1_to_1200")
    db.execute("CREATE TABLE ledger (entry DECIMAL(18, 0) NOT NULL PRIMARY KEY, v INT NOT NULL)")
    db.execute("INSERT INTO ledger SELECT (CAST(seq AS SIGNED) - 600) * 1000000000003, seq FROM seq_1_to_1200")
    db.execute("CREATE TABLE accounts (region VARCHAR(20) NOT NULL, code VARCHAR(20) NOT NULL, id INT NOT NULL, "
               "v INT, note VARCHAR(20), PRIMARY KEY (region, code))")
    db.execute(r"INSERT INTO accounts SELECT ELT(1 + seq % 5, 'eu', 'us', 'ap''s', 'zürich', 'a\\b'), "
               "CONCAT('c', seq), seq, seq, 'init' FROM seq_1_to_2000")
    db.execute("CREATE TABLE events (at DATETIME(6) NOT NULL, id INT NOT NULL, v INT, PRIMARY KEY (at, id))")
    db.execute("INSERT INTO events SELECT TIMESTAMP('2024-01-01') + INTERVAL seq % 97 MINUTE, seq, seq "
               "FROM seq_1_to_1500")
    tables = ["sessions", "codes", "readings", "ledger", "accounts", "events"]
    p = Pipeline(db, tmp_path, delta_sink(tmp_path), tables, chunk_size=300)
    epoch = snapshot_in_two_tasks(p)
    uris = {t: table_uri(p, db, t) for t in tables}
    for t in tables:
        assert_delta_equals_source(p, db, t)
        assert how_windows_landed(uris[t], epoch) == ["append", "append"], (t, window_commits(uris[t]))

    db.execute("UPDATE sessions SET v = -v WHERE v % 5 = 0")
    db.execute("INSERT INTO sessions SELECT UUID(), seq, 'stream' FROM seq_2001_to_2100")
    db.execute("DELETE FROM codes WHERE v % 7 = 0")
    db.execute("UPDATE codes SET code = UPPER(code) WHERE v BETWEEN 100 AND 120")  # the same key in other bytes
    db.execute("UPDATE readings SET v = -v WHERE v % 4 = 0")
    db.execute("UPDATE ledger SET v = -v WHERE v % 6 = 0")
    db.execute("DELETE FROM ledger WHERE v BETWEEN 590 AND 610")
    db.execute("UPDATE accounts SET v = v + 1 WHERE id % 7 = 0")
    db.execute("DELETE FROM accounts WHERE region = 'ap''s' AND id < 300")
    db.execute("INSERT INTO accounts VALUES ('aa''', 'c1', 1, 1, 'new'), ('über', 'c2', 2, 2, 'new')")
    db.execute("UPDATE events SET v = -v WHERE id % 9 = 0")
    db.execute("DELETE FROM events WHERE id BETWEEN 200 AND 230")
    db.execute("INSERT INTO events VALUES ('2023-12-31 23:59:59.999999', 5000, 0)")
    versions = {t: deltalake.DeltaTable(uris[t]).version() for t in ("readings", "ledger", "accounts", "events")}
    p.stream()
    for t in tables:
        assert_delta_equals_source(p, db, t)
    assert_merges_bounded(uris, versions)

    # changes the stream has not read when the re-snapshot reads the tables: the finished epoch makes the deleted
    # keys tombstones, and the stream applies the rest on top
    db.execute("DELETE FROM sessions WHERE v BETWEEN 300 AND 400")
    db.execute("UPDATE codes SET v = v + 10000 WHERE v % 3 = 0")
    db.execute("DELETE FROM readings WHERE v BETWEEN 500 AND 510")
    db.execute("UPDATE ledger SET v = v + 10000 WHERE v % 5 = 0")
    db.execute("DELETE FROM accounts WHERE id BETWEEN 1000 AND 1200")
    db.execute("UPDATE accounts SET note = 'resnap' WHERE id BETWEEN 1500 AND 1510")
    db.execute("DELETE FROM events WHERE id BETWEEN 700 AND 720")
    q = Pipeline(db, tmp_path, delta_sink(tmp_path), tables, chunk_size=300)
    again = snapshot_in_two_tasks(q)
    for t in tables:
        assert_delta_equals_source(p, db, t)
    assert how_windows_landed(uris["sessions"], again) == ["replace", "replace"], window_commits(uris["sessions"])
    assert how_windows_landed(uris["codes"], again) == ["replace", "replace"], window_commits(uris["codes"])
    for t in ("readings", "ledger", "accounts"):
        assert how_windows_landed(uris[t], again) == ["replace", "replace"], window_commits(uris[t])
    db.execute("INSERT INTO codes VALUES ('k99999', 1)")
    db.execute("INSERT INTO readings VALUES ('1999-12-31', 0)")
    db.execute("INSERT INTO ledger VALUES (-999999999999999999, 0), (999999999999999999, 0)")
    db.execute("UPDATE readings SET v = v + 1 WHERE v BETWEEN 700 AND 720")
    db.execute("UPDATE accounts SET note = 'driver' WHERE region = 'zürich' AND id < 100")
    db.execute("UPDATE events SET v = v + 1 WHERE id BETWEEN 1000 AND 1010")
    versions = {t: deltalake.DeltaTable(uris[t]).version() for t in ("readings", "ledger", "accounts", "events")}
    p.stream(driver_batch_bytes=64 * 2**20)  # batches the driver reads and MERGEs from memory
    for t in tables:
        assert_delta_equals_source(p, db, t)
    assert_merges_bounded(uris, versions)


def test_a_key_collation_changed_after_the_plan_refuses_the_snapshot_until_planned_again(source_db, tmp_path):
    """The chunks were planned under a case-insensitive collation of the key, which an ALTER then makes binary:
    their ranges no longer split the table, so the snapshot task refuses before writing anything (two windows
    of the epoch could hold one key, and a window appends onto files of the epoch's other chunks). The next plan
    splits the keys in their new order, and its windows append."""
    db = source_db
    db.execute("CREATE TABLE codes (code VARCHAR(20) CHARACTER SET utf8mb4 COLLATE utf8mb4_general_ci NOT NULL "
               "PRIMARY KEY, v INT)")
    db.execute("INSERT INTO codes SELECT CONCAT(IF(seq % 2, 'K', 'k'), LPAD(seq, 5, '0')), seq FROM seq_1_to_600")
    p = Pipeline(db, tmp_path, delta_sink(tmp_path), ["codes"], chunk_size=200)
    chunks = p.plan()
    db.execute("ALTER TABLE codes MODIFY code VARCHAR(20) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL")
    assert p.snapshot(chunks, check=False).returncode != 0, "chunks planned under another key order were read"
    log = p.last_log("snapshot_chunk", None)
    assert "its chunks were planned with the key (code) ordered as varchar utf8mb4 utf8mb4_general_ci" in log \
        and "Clear the plan step" in log, log[-3000:]
    uri = table_uri(p, db, "codes")
    assert not Path(uri, "_delta_log").exists(), "the refused task wrote the table"

    epoch = snapshot_in_two_tasks(p)
    assert how_windows_landed(uri, epoch) == ["append", "append"], window_commits(uri)
    assert_delta_equals_source(p, db, "codes")
