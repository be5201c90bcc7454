"""Faults: each fault, then recovery the way Airflow would do it (the job's retry / restart), then
source == sink and an exactly-once changelog checked against the binlog itself.

Short sizes run in `make test`; `make soak` runs the same scenarios with the long sizes (conftest ``scale``).
"""

from __future__ import annotations

import contextlib
import threading
import time

import pytest

from airflow_cdc_provider.state.store import StateStore

from .cdc_helpers import (
    BackgroundWriter,
    Pipeline,
    jdbc_sink,
    parquet_sink,
    paused_snapshot,
    rows_emitted,
    sink_rows,
    source_rows,
    table_types,
    wait_until,
)
from .conftest import scale
from .test_spark_jobs import changelog, expected_changelog, make_orders


def check_exactly_once(spark, p, db, seed, server_id) -> int:
    assert sink_rows(spark, p.sink, p.secrets, table_types(db, "orders")) == source_rows(db, "orders")
    if p.sink.type != "parquet":
        return 0
    got = changelog(spark, p.sink.path, db.table("orders"))
    assert len(got) == len(set(got)), "a change was emitted twice"
    assert sorted(got) == sorted(expected_changelog(db, seed, db.table("orders"), server_id))
    return len(got)


@pytest.mark.parametrize("driver_batch_bytes", [0, 4 * 2**20], ids=["executors", "driver"])
def test_mariadb_restart_while_the_stream_runs(source_db, mariadb, tmp_path, spark, server_id, scenario,
                                               driver_batch_bytes):
    """Batches read by Spark's tasks, or (small ones) by the driver, which leaves a batch it cannot read to them."""
    n = scale(2_000, 100_000)
    make_orders(source_db, n)
    p = Pipeline(source_db, tmp_path, parquet_sink(tmp_path), ["orders"], chunk_size=max(n // 4, 500))
    p.snapshot(p.plan())
    seed = p.collect()
    with p.continuous_stream(driver_batch_bytes=driver_batch_bytes) as proc:
        source_db.execute("UPDATE orders SET note = 'before' WHERE id <= 100")
        wait_until(lambda: rows_emitted(p.state) >= 100, "the first changes")
        mariadb.restart()
        scenario["faults"] += 1
        source_db.reconnect()
        source_db.execute("UPDATE orders SET note = 'after' WHERE id BETWEEN 200 AND 299")
        source_db.execute("DELETE FROM orders WHERE id > %s", (n - 50,))
        wait_until(lambda: rows_emitted(p.state) >= 250,
                   "the stream to reconnect and emit the changes made after the restart")
        # the restart began a binlog file: the batch across it is left to Spark's tasks, the next one is not
        source_db.execute("UPDATE orders SET note = 'later' WHERE id BETWEEN 300 AND 349")
        wait_until(lambda: rows_emitted(p.state) >= 300, "the changes after the first batch in the new binlog file")
        assert proc.poll() is None, "the stream died instead of reconnecting"
        p.state.request_stop()
        assert proc.wait(120) == 0, p.last_log("binlog_stream")
    log = p.last_log("binlog_stream", tail=None)
    assert "reconnecting" in log
    assert ("(read in the driver" in log) == bool(driver_batch_bytes), log[-3000:]
    scenario.update(rows=n, changes=check_exactly_once(spark, p, source_db, seed, server_id))


def test_sink_down_during_a_batch_then_back(source_db, tmp_path, spark, postgres, scenario):
    n = scale(2_000, 100_000)
    make_orders(source_db, n)
    p = Pipeline(source_db, tmp_path, jdbc_sink(postgres, f"s_{source_db.name}"), ["orders"], postgres=postgres,
                 chunk_size=max(n // 4, 500))
    p.snapshot(p.plan())
    p.collect()
    try:
        with p.continuous_stream() as proc:
            postgres.stop()
            scenario["faults"] += 1
            source_db.execute("UPDATE orders SET note = 'while down' WHERE id <= 500")
            source_db.execute("DELETE FROM orders WHERE id BETWEEN 600 AND 650")
            rc = proc.wait(180)  # the batch that cannot write fails the query
    finally:
        postgres.restart()
    assert rc != 0, "the stream should fail while its sink is down"
    assert p.state.read_status().state == "failed"
    p.stream()  # the retry
    assert sink_rows(spark, p.sink, p.secrets, table_types(source_db, "orders")) == source_rows(source_db, "orders")
    scenario.update(rows=n, changes=551)


def test_binlog_rotation_during_chunk_windows_and_the_stream(source_db, mariadb, tmp_path, spark, server_id, scenario):
    n = scale(20_000, 1_000_000)
    source_db.execute("CREATE TABLE orders (id INT PRIMARY KEY, v INT NOT NULL, note VARCHAR(20))")
    source_db.execute(f"INSERT INTO orders SELECT seq, seq, 'init' FROM seq_1_to_{n}")
    p = Pipeline(source_db, tmp_path, parquet_sink(tmp_path), ["orders"], chunk_size=max(n // 4, 1000))
    chunks = p.plan()
    stop = threading.Event()
    rotations = []

    def rotate():
        with contextlib.closing(mariadb.root_connection()) as conn, conn.cursor() as cur:
            while not stop.wait(0.7):
                cur.execute("FLUSH BINARY LOGS")
                rotations.append(1)

    rotator = threading.Thread(target=rotate, daemon=True)
    rotator.start()
    try:
        # a fixed write rate: unthrottled, the writer outruns the snapshot by hundreds of thousands of changes
        with BackgroundWriter(mariadb, source_db.name, key_space=n + 1000, rate=scale(200, 500)) as writer:
            p.snapshot(chunks)
            seed = p.collect()
            p.stream(max_bytes=scale(400_000, 2_000_000))
        p.stream(max_bytes=scale(400_000, 2_000_000))
    finally:
        stop.set()
        rotator.join(10)
    assert len(rotations) >= 3 and writer.ops > 100
    reports = p.state.finished_snapshot(source_db.table("orders")).chunks  # every chunk's full report
    assert len({r.low_watermark.file for r in reports} | {r.high_watermark.file for r in reports}) > 1, \
        "no rotation happened during the chunk windows"
    scenario.update(rows=n, faults=len(rotations), changes=check_exactly_once(spark, p, source_db, seed, server_id))


def test_purged_binlog_fails_the_retention_sensor_before_the_stream(source_db, mariadb, tmp_path, monkeypatch, scenario):
    from airflow.sdk.exceptions import AirflowFailException

    from airflow_cdc_provider.sensors.retention import BinlogRetentionSensor

    make_orders(source_db, 500)
    p = Pipeline(source_db, tmp_path, parquet_sink(tmp_path), ["orders"], chunk_size=500)
    p.snapshot(p.plan())
    p.collect()
    config = tmp_path / "shop.yaml"
    config.write_text(f"dag_id: shop\nsource:\n  conn_id: src\n  tables: [{source_db.table('orders')}]\n"
                      f"sink:\n  path: {p.sink.path}\nstate:\n  path: {p.state.uri}\n")
    monkeypatch.setenv("AIRFLOW_CONN_SRC", mariadb.connection_uri())
    sensor = BinlogRetentionSensor(task_id="binlog_retention", config=str(config))
    assert sensor.poke({}) is True

    with contextlib.closing(mariadb.root_connection()) as conn, conn.cursor() as cur:
        cur.execute("FLUSH BINARY LOGS")
        cur.execute("SHOW BINARY LOGS")
        newest = cur.fetchall()[-1][0]
        # the server keeps a file a binlog dump thread still reads (the chunk job's, until the server notices
        # its client left): purge again until only the newest file is left
        deadline = time.monotonic() + 60
        while True:
            cur.execute(f"PURGE BINARY LOGS TO '{newest}'")
            cur.execute("SHOW BINARY LOGS")
            left = [r[0] for r in cur.fetchall()]
            if left == [newest] or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        assert left == [newest], f"the server kept {left} after PURGE BINARY LOGS TO '{newest}'"
    scenario["faults"] += 1
    with pytest.raises(AirflowFailException) as exc:
        sensor.poke({})
    message = str(exc.value)
    seed_file = StateStore(p.state.uri).read_seed().start.file
    assert f"no longer has {seed_file}" in message and f"oldest binlog: {newest}" in message
    assert "binlog_expire_logs_seconds" in message and "resnapshot" in message and source_db.table("orders") in message
    assert not p.state.exists(p.state.STATUS), "no stream may have started"


def test_large_transaction_inside_a_chunk_window(source_db, tmp_path, spark, server_id, scenario):
    n, big = scale(50_000, 400_000), 200_000
    source_db.execute("CREATE TABLE orders (id INT PRIMARY KEY, v INT NOT NULL, note VARCHAR(20))")
    source_db.execute(f"INSERT INTO orders SELECT seq, seq, 'init' FROM seq_1_to_{n}")
    p = Pipeline(source_db, tmp_path, parquet_sink(tmp_path), ["orders"], chunk_size=n // 2)
    chunks = p.plan()

    def big_transaction():
        """`big` row changes in one transaction, committed while chunk 0 sits between its SELECT and its HW."""
        source_db.app.begin()
        source_db.execute(f"UPDATE orders SET v = v + 1, note = 'big txn' WHERE id <= {min(n, big)}")
        if big > n:
            source_db.execute(f"INSERT INTO orders SELECT seq, seq, 'big txn' FROM seq_{n + 1}_to_{big}")
        source_db.execute("DELETE FROM orders WHERE id <= 10")
        source_db.app.commit()

    paused_snapshot(p, chunks, tmp_path / "window-open", big_transaction, match=":0")
    seed = p.collect()
    reports = {r.split_id: r for r in p.state.finished_snapshot(source_db.table("orders")).chunks}
    assert reports[f"{source_db.table('orders')}:0"].window_events_applied >= n // 4
    p.stream()
    scenario.update(rows=n, faults=1, changes=check_exactly_once(spark, p, source_db, seed, server_id))


def test_retention_sensor_checks_where_the_stream_resumes_after_a_failed_run(source_db, mariadb, tmp_path,
                                                                             monkeypatch, spark, scenario):
    """After a stream run that failed before its first batch (its status has no offset), the sensor checks the
    binlog file the checkpoint resumes from, not the seed's long-purged one; the stream then catches up."""
    from airflow_cdc_provider.sensors.retention import BinlogRetentionSensor

    make_orders(source_db, 500)
    p = Pipeline(source_db, tmp_path, parquet_sink(tmp_path), ["orders"], chunk_size=500)
    p.snapshot(p.plan())
    seed = p.collect()
    with contextlib.closing(mariadb.root_connection()) as conn, conn.cursor() as cur:
        cur.execute("FLUSH BINARY LOGS")
    source_db.execute("UPDATE orders SET note = 'first' WHERE id <= 50")
    p.stream()
    resume = p.state.checkpoint_offset()
    assert resume is not None and resume.file != seed.start.file
    source_db.execute("UPDATE orders SET note = 'second' WHERE id <= 20")
    res = p.stream(fault={"point": "mid_batch", "action": "fail"}, check=False)
    status = p.state.read_status()
    assert res.returncode != 0 and status.state == "failed" and status.last_offset is None, status
    assert p.state.checkpoint_offset() == resume  # the failed batch committed nothing

    with contextlib.closing(mariadb.root_connection()) as conn, conn.cursor() as cur:
        deadline = time.monotonic() + 60
        while True:  # a lingering binlog dump thread can keep a file for a moment
            cur.execute(f"PURGE BINARY LOGS TO '{resume.file}'")
            cur.execute("SHOW BINARY LOGS")
            left = [r[0] for r in cur.fetchall()]
            if seed.start.file not in left or time.monotonic() > deadline:
                break
            time.sleep(0.5)
    assert seed.start.file not in left and resume.file in left, left
    scenario["faults"] += 1
    config = tmp_path / "shop.yaml"
    config.write_text(f"dag_id: shop\nsource:\n  conn_id: src\n  tables: [{source_db.table('orders')}]\n"
                      f"sink:\n  path: {p.sink.path}\nstate:\n  path: {p.state.uri}\n")
    monkeypatch.setenv("AIRFLOW_CONN_SRC", mariadb.connection_uri())
    assert BinlogRetentionSensor(task_id="binlog_retention", config=str(config)).poke({}) is True

    p.stream()  # the retry resumes from the checkpoint
    assert sink_rows(spark, p.sink, p.secrets, table_types(source_db, "orders")) == source_rows(source_db, "orders")
    scenario.update(rows=500, changes=70)
