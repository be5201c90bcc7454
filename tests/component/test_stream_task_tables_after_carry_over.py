"""A stream task that waited for a carry-over finds a continuous stream running: it judges that stream by the
tables as they are after the carry-over, not as it read them before.

The source renamed a captured table (``t`` to ``u``) and the stream committed the batch that read it. Run B's
stream task (``stream.startup: latest``) reads the tables it would stream, ``t`` and ``u``, just before run A's
plan step, holding the stream lease (``CARRY_OVER_MODE``), moves ``t``'s sink data to ``u`` and takes ``t`` out of
the pipeline. B waits for the lease (``BinlogStreamOperator._acquire_lease``); meanwhile A finishes and a stream
is launched (by run C's stream task) that reads the new set, ``u``. B then finds that stream holding the lease.
Judged by B's first read, the stream misses ``t`` and would be stopped (and launched again by B) for a table no
longer streamed; B reads its tables again after the wait (the tables of B's second read are those of the running
stream), and leaves it running. Real MariaDB, real local state store and parquet sink, a real process standing
in for the running stream job; no Spark.
"""

from __future__ import annotations

import os
import socket
import threading
import time
from dataclasses import replace
from types import SimpleNamespace

from airflow_cdc_provider.hooks.spark_job import process_start
from airflow_cdc_provider.operators import stream as stream_module
from airflow_cdc_provider.operators.stream import BinlogStreamOperator, tables_new_to_running_stream
from airflow_cdc_provider.state.records import CARRY_OVER_MODE, StreamLease, StreamStatus
from tests.component.test_plan_carry_over_race import DAG_ID, RUN_A, RUN_B, plan_step, renamed
from tests.unit.test_stream_lease import a_job

RUN_C = "manual__run_c"
WAIT = 20  # seconds: the most any step of the interleaving is waited for (each takes well under one)


def stream_task(config: str, run_id: str):
    """A stream task of ``run_id``: the operator and the context Airflow would give it (the runs all running)."""
    ti = SimpleNamespace(dag_id=DAG_ID, run_id=run_id, task_id="stream", try_number=1, pushed={},
                         xcom_push=lambda key, value: ti.pushed.__setitem__(key, value),
                         get_dagrun_state=lambda dag_id, other_run_id: "running")
    return BinlogStreamOperator(task_id="stream", config=config), {"ti": ti, "dag_run": None}


class ClockWithAHook:
    """The stream module's ``time``, whose first ``sleep`` (the stream task waiting for the carry-over's lease)
    runs ``on_first_sleep`` instead: another actor's steps, interleaved at that point."""

    def __init__(self, on_first_sleep):
        self._on_first_sleep = on_first_sleep
        self.slept = 0

    def __getattr__(self, name):
        return getattr(time, name)

    def sleep(self, seconds: float) -> None:
        self.slept += 1
        if self.slept == 1:
            self._on_first_sleep()
        else:
            time.sleep(seconds)


def test_a_stream_running_the_carried_over_tables_is_not_stopped_for_the_old_name(
        source_db, tmp_path, monkeypatch, capsys):
    config, p, _, old, new = renamed(source_db, tmp_path, monkeypatch, "{mode: continuous, startup: latest}")
    assert p.stream.mode == "continuous" and p.stream.startup == "latest"

    plan_a, context_a = plan_step(config, RUN_A)
    stream_b, context_b = stream_task(config, RUN_B)
    reads: list = []  # each of B's reads of its tables, in order
    seen: dict = {}  # what the interleaving saw at each step
    a_holds, a_may_move = threading.Event(), threading.Event()
    a_failed: list[BaseException] = []
    job = {}  # the stand-in for the stream run C's stream task launches after the carry-over

    real_tables_to_stream = stream_b._tables_to_stream

    def tables_to_stream(context, p_b):
        reads.append(real_tables_to_stream(context, p_b))
        return reads[-1]

    real_carry_over = plan_a._carry_over

    def carry_over_once_b_waits(p_a, sink_a, renames, lost):
        """A holds the lease and is about to move t: it moves once B has read its tables and waits for the lease."""
        a_holds.set()
        assert a_may_move.wait(WAIT), "B never came to wait for the lease"
        seen["moved"] = [(r.old, r.new) for r, _ in renames]
        return real_carry_over(p_a, sink_a, renames, lost)

    def run_a():
        try:
            seen["a tasks"] = plan_a.execute(context_a)
        except BaseException as exc:  # noqa: BLE001 - reported in the test's thread
            a_failed.append(exc)

    a_thread = threading.Thread(target=run_a, name="run A's plan step")
    real_acquire = stream_b._acquire_lease
    acquired: list = []

    def acquire_while_a_carries_over(p_b, lease):
        """B's first try for the lease comes while A holds it to carry t over."""
        if not acquired:
            seen["reads before the lease"] = len(reads)
            a_thread.start()
            assert a_holds.wait(WAIT), ("run A's plan step never took the stream lease", a_failed)
            seen["holder b found"] = p.state.read_lease()
        acquired.append(lease)
        return real_acquire(p_b, lease)

    def a_finishes_then_c_launches():
        """B waits for the lease (its first sleep): A carries t over, plans u's snapshot and gives the lease up;
        then run C's stream task launches the stream, reading the tables as they are now, before B tries again."""
        seen["lease while b waits"] = p.state.read_lease()
        a_may_move.set()
        a_thread.join(WAIT)
        assert not a_thread.is_alive() and not a_failed, a_failed
        seen["lease after a"] = p.state.read_lease()
        proc, launch = a_job()
        job["proc"] = proc
        launch = replace(launch, launch_id="launch-c")
        lease_c = StreamLease("launch-c", f"{DAG_ID}/{RUN_C}/stream", 1, socket.gethostname(), os.getpid(),
                              "continuous", pid_start=process_start(os.getpid()))
        assert p.state.try_lease(lease_c) is None
        p.state.write_launch(launch)
        p.state.write_lease(replace(lease_c, launch=launch))  # the job outlives C's task process: it holds the lease
        # C's stream reads what a stream task reads now (its own ``_tables_to_stream``), and says so in its status
        stream_c, context_c = stream_task(config, RUN_C)
        reads_c = stream_c._tables_to_stream(context_c, p)
        seen["c reads"] = reads_c
        p.state.write_status(StreamStatus("running", "continuous", launch_id="launch-c", pid=proc.pid,
                                          tables=list(reads_c)))
        job["lease"] = p.state.read_lease()
        # judged by B's first read (before the carry-over), C's stream misses t: it would be stopped for it
        seen["missed by the first read"] = tables_new_to_running_stream(p, set(reads[0]), 30)

    launched: list = []
    monkeypatch.setattr(stream_b, "_tables_to_stream", tables_to_stream)
    monkeypatch.setattr(stream_b, "_acquire_lease", acquire_while_a_carries_over)
    monkeypatch.setattr(plan_a, "_carry_over", carry_over_once_b_waits)
    # a launch by B would be a Spark job: recorded instead (it is what comes after the behaviour under test)
    monkeypatch.setattr(stream_b, "_run_continuous", lambda context, p_b, lease, tables: launched.append(tables))
    clock = ClockWithAHook(a_finishes_then_c_launches)
    monkeypatch.setattr(stream_module, "time", clock)
    capsys.readouterr()
    try:
        result = stream_b.execute(context_b)
        logs = capsys.readouterr().out
        proc = job.get("proc")

        # the race was run: B read its tables before A's carry-over, then found A's lease and waited for it;
        # A carried t over to u and gave the lease up; C's stream took it, reading u only
        assert seen.get("reads before the lease") == 1, seen
        assert seen["holder b found"].mode == CARRY_OVER_MODE
        assert seen["holder b found"].holder == f"{DAG_ID}/{RUN_A}/plan_chunks"
        assert seen["lease while b waits"] == seen["holder b found"]
        assert seen["moved"] == [(old, new)] and seen["lease after a"] is None
        assert p.state.carried_tables() == {new: old} and p.state.planned_snapshots()[new].run_id == RUN_A
        assert "carries renamed tables over to their new names: waiting for it" in logs, logs
        assert proc is not None and seen["c reads"] == [new]

        # B went by the tables as they are after the carry-over: C's stream runs on, holding the lease, and no
        # stop was asked for; B took no lease and launched nothing
        lease_c = job["lease"]
        assert proc.poll() is None, "the stream reading the carried-over tables was stopped"
        assert "captured since it was launched: stopping it" not in logs, logs
        assert p.state.read_lease().launch_id == lease_c.launch_id
        assert not p.state.stop_requested()
        assert len(acquired) == 1 and not launched
        assert result == {"skipped": "stream running", "holder": f"{DAG_ID}/{RUN_C}/stream", "taken_up": {}}

        # why: B's first read named t, which the carry-over took out; its second read, after the wait, does not.
        # By the first, C's stream misses t (and would have been stopped); by the second it misses nothing
        assert reads == [sorted([old, new]), [new]], reads
        assert seen["missed by the first read"] == (lease_c, {old})
        assert tables_new_to_running_stream(p, set(reads[1]), 30) == (lease_c, set())
    finally:
        a_may_move.set()
        if a_thread.is_alive():
            a_thread.join(WAIT)
        if job.get("proc") is not None and job["proc"].poll() is None:
            job["proc"].kill()
            job["proc"].wait()
