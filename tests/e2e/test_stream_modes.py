"""Stream modes: continuous (follows changes, stops gracefully on SIGTERM and on a stop
request, resumes from its checkpoint) and the GTID / timestamp startup modes."""

from __future__ import annotations

import math
import signal
import time

from .cdc_helpers import Pipeline, parquet_sink, sink_rows, source_rows, table_types, wait_until
from .test_spark_jobs import changelog, expected_changelog, make_orders

SIGTERM_EXIT = 128 + signal.SIGTERM  # the JVM's exit status after SIGTERM, also when it stopped cleanly


def drivers_of(p) -> list[int]:
    """The pids of the Python drivers of ``p``'s jobs still running (their command line names the job's spec)."""
    import psutil

    jobs = str(p.tmp / "jobs")
    return [proc.pid for proc in psutil.process_iter(["cmdline"])
            if any(jobs in arg for arg in proc.info["cmdline"] or []) and "python" in (proc.info["cmdline"] or [""])[0]]


def _notes(spark, p, db) -> dict:
    return {k[0]: row[2] for k, row in sink_rows(spark, p.sink, p.secrets, table_types(db, "orders")).items()}


def _follow(spark, p, db, note: str, ids: range) -> None:
    db.execute(f"UPDATE orders SET note = %s WHERE id BETWEEN {ids.start} AND {ids.stop - 1}", (note,))
    wait_until(lambda: sum(n == note for n in _notes(spark, p, db).values()) == len(ids),
               f"{len(ids)} updates to {note!r} to reach the sink")


def test_continuous_stream_follows_changes_and_stops_gracefully(source_db, tmp_path, spark, server_id):
    make_orders(source_db, 1_000)
    p = Pipeline(source_db, tmp_path, parquet_sink(tmp_path), ["orders"], chunk_size=500)
    p.snapshot(p.plan())
    seed = p.collect()

    # 1) SIGTERM to spark-submit: the query stops between batches and says so
    with p.continuous_stream() as proc:
        _follow(spark, p, source_db, "live", range(1, 51))
        proc.send_signal(signal.SIGTERM)  # to spark-submit (the JVM), as a supervisor would
        rc = proc.wait(120)
    assert rc == SIGTERM_EXIT, p.last_log("binlog_stream")
    # the JVM is gone; its Python driver, orphaned, ends too instead of hanging in the interpreter's shutdown
    wait_until(lambda: not drivers_of(p), "the stream job's Python driver to exit after spark-submit's", 60)
    status = p.state.read_status()
    assert status.state == "stopped" and status.rows_emitted == 50, status
    assert "stream stopped" in p.last_log("binlog_stream")

    # 2) changes while it is down, then a restart from the checkpoint, stopped through the state store
    source_db.execute("DELETE FROM orders WHERE id > 990")
    with p.continuous_stream() as proc:
        _follow(spark, p, source_db, "again", range(100, 131))
        p.state.request_stop()
        rc = proc.wait(120)
    assert rc == 0, p.last_log("binlog_stream")
    assert p.state.read_status().state == "stopped"

    assert sink_rows(spark, p.sink, p.secrets, table_types(source_db, "orders")) == source_rows(source_db, "orders")
    got = changelog(spark, p.sink.path, source_db.table("orders"))
    assert len(got) == len(set(got)) == 50 + 10 + 31
    assert sorted(got) == sorted(expected_changelog(source_db, seed, source_db.table("orders"), server_id))


def test_a_stop_asked_for_during_a_batch_lets_the_batch_finish(source_db, tmp_path, spark):
    """The batch in progress when the stop comes is written and committed to the checkpoint once, not interrupted
    (an interrupted batch leaves its offsets without a commit, and the next launch runs it again)."""
    make_orders(source_db, 200)
    p = Pipeline(source_db, tmp_path, parquet_sink(tmp_path), ["orders"], chunk_size=500)
    p.snapshot(p.plan())
    p.collect()
    paused = tmp_path / "batch-paused"
    with p.continuous_stream(fault={"point": "mid_batch", "action": "pause", "seconds": 15,
                                    "once": str(paused)}) as proc:
        source_db.execute("UPDATE orders SET note = 'during' WHERE id <= 40")
        wait_until(paused.exists, "a batch to pause after writing its rows")
        p.state.request_stop()
        rc = proc.wait(120)
    assert rc == 0, p.last_log("binlog_stream")
    log = p.last_log("binlog_stream", None)
    assert "stream stopped" in log, log[-3000:]
    checkpoint = tmp_path / "state" / "stream" / "checkpoint"
    planned = max(int(f.name) for f in (checkpoint / "offsets").iterdir() if f.name.isdigit())
    committed = max((int(f.name) for f in (checkpoint / "commits").iterdir() if f.name.isdigit()), default=-1)
    assert committed == planned, f"batch {planned} was interrupted: the newest commit is {committed}"
    assert p.state.read_status().rows_emitted == 40
    assert sink_rows(spark, p.sink, p.secrets, table_types(source_db, "orders")) == source_rows(source_db, "orders")


def test_startup_at_a_gtid_or_a_timestamp_streams_only_later_transactions(source_db, tmp_path, spark):
    source_db.execute("CREATE TABLE orders (id INT PRIMARY KEY, v INT NOT NULL, note VARCHAR(20))")
    source_db.executemany("INSERT INTO orders VALUES (%s, %s, 'before')", [(i, i) for i in range(1, 101)])
    gtid = source_db.execute("SELECT @@gtid_binlog_pos")[0][0]  # the GTID of the last transaction so far
    assert gtid and "," not in gtid, gtid
    source_db.executemany("INSERT INTO orders VALUES (%s, %s, 'after gtid')", [(i, i) for i in range(101, 151)])
    time.sleep(1.1)  # binlog timestamps have whole seconds
    cut = math.ceil(time.time())
    while time.time() < cut + 0.05:
        time.sleep(0.05)
    source_db.executemany("INSERT INTO orders VALUES (%s, %s, 'after ts')", [(i, i) for i in range(151, 171)])
    source_db.execute("UPDATE orders SET note = 'updated' WHERE id = 160")

    def streamed(startup, name):
        p = Pipeline(source_db, tmp_path / name, parquet_sink(tmp_path / name), ["orders"])
        p.stream(startup=startup)
        return p, changelog(spark, p.sink.path, source_db.table("orders"))

    p, got = streamed({"gtid": gtid}, "gtid")
    assert sorted(r[1] for r in got if r[0] == "c") == list(range(101, 171))
    assert [r[1] for r in got if r[0] == "u"] == [160]
    notes = _notes(spark, p, source_db)
    assert set(notes) == set(range(101, 171)) and notes[160] == "updated"

    p, got = streamed({"timestamp": cut}, "timestamp")
    assert sorted(r[1] for r in got if r[0] == "c") == list(range(151, 171))
    assert [r[1] for r in got if r[0] == "u"] == [160]

    iso = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(cut))
    p, got = streamed({"timestamp": iso}, "timestamp_iso")
    assert sorted(r[1] for r in got if r[0] == "c") == list(range(151, 171))
