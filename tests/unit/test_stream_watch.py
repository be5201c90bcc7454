"""The stream watch's judgement: heartbeat age, final states, dead processes, stale status files."""

import os
import subprocess
import sys
import time
from dataclasses import replace

from airflow_cdc_provider.hooks.spark_job import process_alive, process_start
from airflow_cdc_provider.pipeline.stream_watch import judge
from airflow_cdc_provider.state.records import StreamLaunch, StreamStatus

LAUNCH = StreamLaunch("", 1000.0, "/x/job.log", pid=4242, host="h")


def status(state, updated_at, **kw):
    return StreamStatus(state, "continuous", updated_at=updated_at, batches=3, rows_emitted=7, **kw)


def test_running_while_the_heartbeat_is_fresh():
    h = judge(status("running", 1050), LAUNCH, now=1100, heartbeat_timeout=60, alive=True)
    assert h.verdict == "running" and not h.final


def test_stalled_when_the_heartbeat_is_older_than_the_limit():
    h = judge(status("running", 1050), LAUNCH, now=1111, heartbeat_timeout=60, alive=True)
    assert h.verdict == "stalled" and h.final and "61s old (limit 60s)" in h.message


def test_a_job_that_never_wrote_a_status_stalls_from_its_launch_time():
    assert judge(None, LAUNCH, now=1030, heartbeat_timeout=60, alive=True).verdict == "starting"
    assert judge(None, LAUNCH, now=1061, heartbeat_timeout=60, alive=True).verdict == "stalled"


def test_an_older_runs_status_does_not_count():
    old = status("stopped", 900)
    assert judge(old, LAUNCH, now=1010, heartbeat_timeout=60, alive=True).verdict == "starting"


def test_with_a_launch_id_only_that_launchs_status_counts_whatever_the_clocks_say():
    launch = replace(LAUNCH, launch_id="new")
    predecessor = status("running", 999.5, launch_id="old")  # a killed job's last beat, just before the relaunch
    assert judge(predecessor, launch, now=1001, heartbeat_timeout=60, alive=True).verdict == "starting"
    skewed = status("running", 990, launch_id="new")  # the new job on a host whose clock is 10 s behind
    assert judge(skewed, launch, now=1001, heartbeat_timeout=60, alive=True).verdict == "running"


def test_final_states_win_over_a_dead_process():
    assert judge(status("stopped", 1200), LAUNCH, now=1201, heartbeat_timeout=60, alive=False).verdict == "ended"
    assert judge(status("finished", 1200), LAUNCH, now=1201, heartbeat_timeout=60, alive=False).verdict == "ended"
    h = judge(status("failed", 1200), LAUNCH, now=1201, heartbeat_timeout=60, alive=False)
    assert h.verdict == "failed" and "/x/job.log" in h.message


def test_dead_without_a_final_status_is_died_but_unknown_liveness_relies_on_the_heartbeat():
    h = judge(status("running", 1200), LAUNCH, now=1201, heartbeat_timeout=60, alive=False)
    assert h.verdict == "died" and "retry resumes" in h.message
    assert judge(status("running", 1200), LAUNCH, now=1201, heartbeat_timeout=60, alive=None).verdict == "running"


def test_process_alive_reaps_an_exited_child():
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    assert process_alive(os.getpid()) and not process_alive(None)
    deadline = time.monotonic() + 30
    while process_alive(p.pid):  # turns False once the child exited: reaped, not left as a zombie
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert not os.path.exists(f"/proc/{p.pid}")


def test_a_pid_is_alive_only_as_the_process_that_started_then():
    """A pid with its start names one process: the same pid with another start is one that ended since."""
    me, started = os.getpid(), process_start(os.getpid())
    assert started is not None and process_start(me) == started
    assert process_alive(me, started) and process_alive(me)
    assert not process_alive(me, started - 1) and not process_alive(me, started + 1)
    assert process_start(None) is None


def test_a_process_named_with_parentheses_spaces_and_no_encoding_is_told_apart_by_its_start():
    """``/proc/<pid>/stat`` puts the process's name (any bytes but NUL, up to 15) between its pid and its state."""
    name = "b'\\xff) (a b'"
    rename = f"import ctypes, time; ctypes.CDLL(None).prctl(15, {name}, 0, 0, 0); print(flush=True); time.sleep(60)"
    proc = subprocess.Popen([sys.executable, "-c", rename], stdout=subprocess.PIPE)  # PR_SET_NAME: 15
    try:
        proc.stdout.readline()  # named by now
        with open(f"/proc/{proc.pid}/comm", "rb") as f:
            assert f.read().rstrip(b"\n") == b"\xff) (a b"
        started = process_start(proc.pid)
        assert started is not None and process_alive(proc.pid, started) and not process_alive(proc.pid, started - 1)
    finally:
        proc.kill()
        proc.wait()


def test_failure_summary_is_the_exception_line_of_a_worker_traceback():
    from airflow_cdc_provider.pipeline.job_errors import failure_summary

    error = ("[STREAM_FAILED] [PYTHON_EXCEPTION] Found error inside foreachBatch Python process: Traceback (most recent call last):\n"
             '  File "/x/stream.py", line 140, in __call__\n'
             '    self.faults.hit("mid_batch", f"batch {batch_id}")\n'
             "pymysql.err.OperationalError: (2003, \"Can't connect to MySQL server on 'db'\")\n"
             " SQLSTATE: 38000\n=== Streaming Query ===\nIdentifier: [id = 1]\n\nJVM stacktrace:\nBoom: x\n")
    assert failure_summary(error) == "pymysql.err.OperationalError: (2003, \"Can't connect to MySQL server on 'db'\")"
    assert failure_summary("[CAST_INVALID_INPUT] bad value") == "[CAST_INVALID_INPUT] bad value"
    assert failure_summary("") == ""


def test_root_cause_is_the_last_exception_line_of_a_jobs_output():
    from airflow_cdc_provider.pipeline.job_errors import root_cause

    tail = ("Cannot execute: spark-submit --master local[2] ... binlog_stream.py --spec /x. Error code is: 1.\n"
            "Last spark-submit output:\n"
            "26/11/25 14:32:04 WARN Utils: Your hostname resolves to a loopback address\n"
            "Traceback (most recent call last):\n"
            'File "/x/airflow_cdc_provider/spark/jobs.py", line 40, in _run\n'
            "return runner(spark, spec, load_secrets())\n"
            "pyspark.errors.exceptions.captured.StreamingQueryException: [CONCURRENT_STREAM_LOG_UPDATE] Concurrent "
            "update to the log. Multiple streaming jobs detected for 12\n"
            "26/11/25 14:32:05 INFO ShutdownHookManager: Shutdown hook called\n")
    assert root_cause(tail) == ("pyspark.errors.exceptions.captured.StreamingQueryException: "
                                "[CONCURRENT_STREAM_LOG_UPDATE] Concurrent update to the log. Multiple streaming jobs "
                                "detected for 12")
    assert root_cause("  airflow_cdc_provider.source.startup.StartupError: stream.startup file 'x' ...") == \
        "airflow_cdc_provider.source.startup.StartupError: stream.startup file 'x' ..."
    assert root_cause("Error code is: 137.\nKilled\n") is None  # nothing to say beyond the provider's message


def test_progress_lines_come_with_new_batches_and_now_and_then_while_idle():
    from airflow_cdc_provider.core.offsets import BinlogOffset
    from airflow_cdc_provider.pipeline.stream_watch import ProgressLog

    log = ProgressLog(batch_gap=10, idle_gap=60)
    beat = StreamStatus("running", "continuous", batch_id=1, batches=2, rows_emitted=40, lag_seconds=0.5,
                        last_offset=BinlogOffset("mariadb-bin.000003", 1234))
    assert log.line(beat, 100) == ("stream running: 2 batch(es), 40 row(s) emitted, lag 0.5s, at "
                                   "mariadb-bin.000003:1234")
    assert log.line(replace(beat, batch_id=2), 105) is None  # batches come faster than one line per 10 s
    assert log.line(replace(beat, batch_id=3), 111) is not None
    assert log.line(replace(beat, batch_id=3), 160) is None and log.line(replace(beat, batch_id=3), 171)  # idle
    assert log.line(replace(beat, state="stopped"), 999) is None and log.line(None, 999) is None


def test_batches_of_a_table_are_reported_once_and_a_new_launch_counts_from_zero():
    from airflow_cdc_provider.core.offsets import BinlogOffset
    from airflow_cdc_provider.pipeline.stream_watch import BatchCursor, new_batches

    def at(launch, rows, batch):
        return StreamStatus("running", "continuous", launch_id=launch, rows_by_table=rows, batch_id=batch,
                            last_offset=BinlogOffset("mariadb-bin.000003", 4000 + batch))

    assert new_batches(None, "db.t", BatchCursor()) == (None, BatchCursor())
    payload, cursor = new_batches(at("a", {"db.t": 5, "db.u": 1}, 0), "db.t", BatchCursor())
    assert payload == {"kind": "stream batches", "table": "db.t", "rows": 5, "batch_id": 0, "launch_id": "a",
                       "position": "mariadb-bin.000003:4000"} and cursor == BatchCursor("a", 5)
    assert new_batches(at("a", {"db.t": 5, "db.u": 9}, 3), "db.t", cursor) == (None, cursor)  # another table's rows
    payload, cursor = new_batches(at("a", {"db.t": 8}, 4), "db.t", cursor)
    assert payload["rows"] == 3 and payload["batch_id"] == 4
    payload, cursor = new_batches(at("b", {"db.t": 2}, 0), "db.t", cursor)  # a relaunch: its own count
    assert payload["rows"] == 2 and cursor == BatchCursor("b", 2)
    assert new_batches(at("b", {}, 1), "db.t", cursor)[0] is None


def test_the_batches_trigger_fires_for_rows_written_after_it_started(tmp_path):
    import asyncio

    from airflow_cdc_provider.state.store import StateStore
    from airflow_cdc_provider.triggers.stream_batches import StreamBatchesTrigger

    store = StateStore(tmp_path / "state")
    store.write_status(StreamStatus("running", "continuous", launch_id="a", rows_by_table={"db.t": 4}, batch_id=1))
    trigger = StreamBatchesTrigger(store.uri, "db.t", poll_interval=0.05)
    classpath, kwargs = trigger.serialize()
    assert classpath == "airflow_cdc_provider.triggers.stream_batches.StreamBatchesTrigger"
    assert StreamBatchesTrigger(**kwargs).serialize() == (classpath, kwargs)

    async def first_event():
        events = trigger.run()
        pending = asyncio.ensure_future(events.__anext__())
        await asyncio.sleep(0.3)  # rows written before the trigger started fire nothing
        assert not pending.done()
        store.write_status(StreamStatus("running", "continuous", launch_id="a", rows_by_table={"db.t": 10},
                                        batch_id=2))
        event = await asyncio.wait_for(pending, 5)
        await events.aclose()
        return event

    assert asyncio.run(first_event()).payload["rows"] == 6
