"""One stream per pipeline: the stream task's lease in the state store, taken atomically, handed over from a
stale holder or from an earlier try of the same task (a cleared stream task), never shared with a live stream
of another run. The "jobs" here are real processes on this machine."""

import os
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import replace

import pytest

from airflow_cdc_provider.hooks.spark_job import SparkJobHook, process_start
from airflow_cdc_provider.operators.dag_run import is_backfill
from airflow_cdc_provider.operators.stream import BinlogStreamOperator, holder_alive
from airflow_cdc_provider.pipeline.resolve import load_pipeline
from airflow_cdc_provider.pipeline.stream_watch import lease_alive
from airflow_cdc_provider.state.records import StreamLaunch, StreamLease, StreamStatus
from airflow_cdc_provider.state.storage import Storage
from airflow_cdc_provider.state.store import StateStore

HOST = socket.gethostname()


def pipeline_of(tmp_path, monkeypatch, stream: str):
    """A pipeline YAML of one table with ``stream`` as its stream section: its path and the pipeline."""
    monkeypatch.setenv("AIRFLOW_CONN_SRC", "mysql://cdc:pw@db.example:3306")
    config = tmp_path / "shop.yaml"
    config.write_text(f"source: {{conn_id: src, tables: [shop.orders]}}\nstate: {{path: {tmp_path / 'state'}}}\n"
                      f"stream: {stream}\n")
    return str(config), load_pipeline(config)


@pytest.fixture
def pipeline(tmp_path, monkeypatch):
    return pipeline_of(tmp_path, monkeypatch, "{mode: continuous, heartbeat_timeout: 30}")


def lease(launch_id, holder="shop/run1/stream", try_number=1, pid=None, launch=None, host=HOST):
    pid = pid or os.getpid()
    return StreamLease(launch_id, holder, try_number, host, pid, "continuous", launch=launch,
                       pid_start=process_start(pid) if host == HOST else None)


def same_lease(a, b) -> bool:
    """Equal leases but for ``acquired_at``, which the store stamps when it takes one."""
    return a is not None and b is not None and replace(a, acquired_at=0.0) == replace(b, acquired_at=0.0)


def a_job():
    """A process standing in for a detached stream job: it ends on SIGTERM, as spark-submit does."""
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"], start_new_session=True)
    return proc, StreamLaunch("job", time.time(), "/x/job.log", pid=proc.pid, host=HOST,
                              pid_start=process_start(proc.pid))


@pytest.mark.parametrize("root", ["local", "memory"])
def test_only_one_writer_creates_the_file(tmp_path, root):
    storage = Storage(str(tmp_path) if root == "local" else f"memory://lease-{os.getpid()}-{time.time_ns()}")
    assert storage.create("stream/lease.json", "a") and not storage.create("stream/lease.json", "b")
    assert storage.read_text("stream/lease.json") == "a"
    assert storage.listdir("stream") == ["lease.json"]  # nothing written aside is left (local: then linked)


def test_the_lease_is_taken_once_and_released_only_by_its_holder(tmp_path):
    store = StateStore(tmp_path)
    first, second = lease("a"), lease("b", holder="shop/run2/stream")
    assert store.try_lease(first) is None
    assert same_lease(store.try_lease(second), first)  # held: the caller learns by whom
    store.release_lease("b")  # not the holder: nothing happens
    assert same_lease(store.read_lease(), first)
    store.release_lease("a")
    assert store.read_lease() is None and store.try_lease(second) is None


def test_liveness_of_a_holder_the_watcher_cannot_see():
    held = replace(lease("a", host="elsewhere"), acquired_at=1000.0)
    assert lease_alive(held, None, now=1020, heartbeat_timeout=30, alive=None)  # just taken
    assert not lease_alive(held, None, now=1031, heartbeat_timeout=30, alive=None)  # never started
    beat = StreamStatus("running", "continuous", launch_id="a", updated_at=1100)
    assert lease_alive(held, beat, now=1120, heartbeat_timeout=30, alive=None)
    assert not lease_alive(held, beat, now=1131, heartbeat_timeout=30, alive=None)  # heartbeat stale
    other = replace(beat, launch_id="z", updated_at=1130)
    assert not lease_alive(held, other, now=1131, heartbeat_timeout=30, alive=None)  # not its job's heartbeat
    assert not lease_alive(held, replace(beat, state="stopped"), now=1101, heartbeat_timeout=30, alive=None)
    assert lease_alive(held, None, now=9999, heartbeat_timeout=30, alive=True)


def test_a_live_stream_of_another_run_keeps_the_lease(pipeline):
    config, p = pipeline
    proc, launch = a_job()
    try:
        held = lease("a", launch=launch)
        assert p.state.try_lease(held) is None
        op = BinlogStreamOperator(task_id="stream", config=config)
        assert same_lease(op._acquire_lease(p, lease("b", holder="shop/run2/stream")), held)
        assert proc.poll() is None and same_lease(p.state.read_lease(), held)
    finally:
        proc.kill()
        proc.wait()


def test_a_stale_lease_is_taken_over(pipeline):
    config, p = pipeline
    proc, launch = a_job()
    proc.kill()
    proc.wait()  # its job is gone without releasing the lease (a killed worker)
    p.state.try_lease(lease("a", launch=launch))
    op = BinlogStreamOperator(task_id="stream", config=config)
    mine = lease("b", holder="shop/run2/stream")
    assert op._acquire_lease(p, mine) is None and same_lease(p.state.read_lease(), mine)


def test_a_cleared_stream_task_stops_its_earlier_try_and_takes_over(pipeline):
    config, p = pipeline
    proc, launch = a_job()
    try:
        p.state.try_lease(lease("a", try_number=1, launch=launch))
        op = BinlogStreamOperator(task_id="stream", config=config)
        mine = lease("b", try_number=2)
        assert op._acquire_lease(p, mine) is None
        assert proc.wait(10) is not None  # the earlier try's job was stopped (SIGTERM first)
        assert same_lease(p.state.read_lease(), mine) and not p.state.stop_requested()
    finally:
        if proc.poll() is None:
            proc.kill()


def test_a_backfill_run_is_told_apart_whatever_form_its_run_type_takes():
    from airflow.utils.types import DagRunType

    class Run:
        def __init__(self, run_type):
            self.run_type = run_type

    assert is_backfill({"dag_run": Run(DagRunType.BACKFILL_JOB)}) and is_backfill({"dag_run": Run("backfill")})
    assert not is_backfill({"dag_run": Run(DagRunType.SCHEDULED)}) and not is_backfill({})


def test_a_stream_launched_before_leases_existed_is_not_joined_by_a_second_one(pipeline):
    config, p = pipeline
    proc, launch = a_job()
    try:
        p.state.write_launch(launch)  # what an earlier provider version left: a launch record, no lease
        op = BinlogStreamOperator(task_id="stream", config=config)
        holder = op._acquire_lease(p, lease("b", holder="shop/run2/stream"))
        assert holder is not None and holder.launch == launch and proc.poll() is None
    finally:
        proc.kill()
        proc.wait()


# -- a plan step carrying renamed tables over holds the lease --------------------------------------------------------
def plan_step(config, try_number=1):
    from types import SimpleNamespace

    from airflow_cdc_provider.operators.plan import PlanChunksOperator

    ti = SimpleNamespace(dag_id="shop", run_id="run2", task_id="plan_chunks", try_number=try_number)
    return PlanChunksOperator(task_id="plan_chunks", config=config), {"ti": ti}


def test_a_plan_step_carrying_tables_over_holds_the_stream_lease_until_it_is_done(pipeline):
    """From before the sink data moves until the new names' snapshots are planned: a stream launched in between
    would read the old names (and write them to the sink again)."""
    from airflow_cdc_provider.state.records import CARRY_OVER_MODE

    config, p = pipeline
    op, context = plan_step(config)
    with op._stream_held(context, p, True):
        held = p.state.read_lease()
        assert held.mode == CARRY_OVER_MODE and held.holder == "shop/run2/plan_chunks" and held.pid == os.getpid()
        assert p.state.try_lease(lease("b", holder="shop/run3/stream")) == held  # a stream task finds it taken
    assert p.state.read_lease() is None
    with pytest.raises(RuntimeError), op._stream_held(context, p, True):
        raise RuntimeError("the move failed")
    assert p.state.read_lease() is None  # given up however the carry-over ends
    with op._stream_held(context, p, False):  # nothing to carry over: nothing taken
        assert p.state.read_lease() is None


def test_a_running_continuous_stream_is_stopped_for_the_carry_over(pipeline):
    """It does not read the new names, which are snapshotted now: the plan step stops it, as for any table new to
    it, and this run's stream task launches it again."""
    config, p = pipeline
    op, context = plan_step(config)
    proc, launch = a_job()
    try:
        p.state.try_lease(lease("a", launch=launch))
        with op._stream_held(context, p, True):
            assert proc.wait(10) is not None  # stopped (SIGTERM first)
            assert p.state.read_lease().holder == "shop/run2/plan_chunks"
        assert p.state.read_lease() is None and not p.state.stop_requested()
    finally:
        if proc.poll() is None:
            proc.kill()


@pytest.mark.parametrize("step", ["carry-over", "table new to the stream"])
def test_a_plan_step_stops_a_stream_launched_before_leases_existed(pipeline, step):
    """An earlier provider version's stream (a launch record, no lease) is stopped as a leased one is: left
    running, it would write the carried tables' old names again, or pass a new table's snapshot unread."""
    config, p = pipeline
    op, context = plan_step(config)
    proc, launch = a_job()
    try:
        p.state.write_launch(launch)
        if step == "carry-over":
            with op._stream_held(context, p, True):
                assert proc.wait(10) is not None  # stopped (SIGTERM first)
                assert p.state.read_lease().holder == "shop/run2/plan_chunks"
            assert p.state.read_lease() is None
        else:
            op._stop_a_stream_that_misses(p, {"shop.orders"}, backfill=False)
            assert proc.wait(10) is not None
            assert p.state.read_lease() is None  # the lease taken in its name is freed with it
        assert not p.state.stop_requested()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


@pytest.mark.parametrize("holding", ["launched job", "holding task"])
def test_a_pid_another_process_was_given_since_does_not_pass_for_the_stream(pipeline, holding, capsys):
    """The stream's job (or the task holding the lease) ended, and the kernel gave its pid to an unrelated
    process since: the lease is stale, taken over by a plan step and by a stream task, and that process is
    never signalled."""
    config, p = pipeline
    proc, launch = a_job()
    try:
        started = launch.pid_start
        assert started is not None and SparkJobHook.alive(launch)
        earlier = started - 1  # the ended process that had this pid: it started before the one that has it now
        if holding == "launched job":
            held = lease("a", launch=replace(launch, pid_start=earlier))
            assert SparkJobHook.alive(held.launch) is False
        else:
            held = replace(lease("a", pid=proc.pid), pid_start=earlier)
        assert not holder_alive(p, held, 30)
        p.state.try_lease(held)
        op, context = plan_step(config)
        with op._stream_held(context, p, True):
            assert p.state.read_lease().holder == "shop/run2/plan_chunks"
        assert "is stale: taken over" in capsys.readouterr().out
        p.state.try_lease(held)
        mine = lease("b", holder="shop/run3/stream")
        assert BinlogStreamOperator(task_id="stream", config=config)._acquire_lease(p, mine) is None
        assert same_lease(p.state.read_lease(), mine)
        assert proc.poll() is None  # the unrelated process: neither stopped nor killed
    finally:
        proc.kill()
        proc.wait()


def test_a_stream_launched_before_leases_existed_and_gone_is_given_no_lease(pipeline):
    """Its launch record stays behind. Launched on another host an hour ago, its heartbeat long silent: neither a
    plan step nor a stream task takes a lease in its name."""
    config, p = pipeline
    p.state.write_launch(StreamLaunch("old", time.time() - 3600, "/x/job.log", pid=12345, host="elsewhere"))
    op, _ = plan_step(config)
    op._stop_a_stream_that_misses(p, {"shop.orders"}, backfill=False)
    assert p.state.read_lease() is None
    mine = lease("b", holder="shop/run2/stream")
    assert BinlogStreamOperator(task_id="stream", config=config)._acquire_lease(p, mine) is None
    assert same_lease(p.state.read_lease(), mine)


def test_another_runs_stream_or_carry_over_refuses_it_and_a_stale_or_earlier_try_is_taken_over(pipeline):
    from airflow.sdk.exceptions import AirflowException

    config, p = pipeline
    op, context = plan_step(config, try_number=2)
    other = replace(lease("a", holder="shop/run1/stream"), mode="available_now")  # its job in its live task process
    p.state.try_lease(other)
    with pytest.raises(AirflowException, match=r"the running stream \(shop/run1/stream\) must stop before renamed "
                                               r"tables are carried over"):
        with op._stream_held(context, p, True):
            pytest.fail("carried over under a live stream")
    assert same_lease(p.state.read_lease(), other)
    p.state.release_lease("a")
    first_op, first_context = plan_step(config)
    with first_op._stream_held(first_context, p, True):
        second_op, second_context = plan_step(config)
        second_context["ti"].run_id = "run3"
        with pytest.raises(AirflowException, match=r"shop/run2/plan_chunks is carrying renamed tables over"):
            with second_op._stream_held(second_context, p, True):
                pytest.fail("two carry-overs at once")
        # try 2 of the same plan task (try 1's process lives on another host, say): try 1 is over
        with op._stream_held(context, p, True):
            assert p.state.read_lease().try_number == 2
    assert p.state.read_lease() is None
    proc, launch = a_job()
    proc.kill()
    proc.wait()  # a stream killed without releasing the lease
    p.state.try_lease(lease("z", launch=launch))
    with op._stream_held(context, p, True):
        assert p.state.read_lease().holder == "shop/run2/plan_chunks"


@pytest.fixture
def short_heartbeat(tmp_path, monkeypatch):
    """A pipeline whose lease is stale after 2 s without a heartbeat: a carry-over's lease is renewed each second."""
    return pipeline_of(tmp_path, monkeypatch, "{heartbeat_timeout: 2}")


def test_a_carry_over_held_long_renews_the_lease(short_heartbeat):
    """Another host judges the lease by the time it was taken: a carry-over held longer than the heartbeat
    timeout renews it, so that no stream takes it for stale."""
    config, p = short_heartbeat
    op, context = plan_step(config)
    with op._stream_held(context, p, True):
        taken = p.state.read_lease().acquired_at
        time.sleep(3.5)
        renewed = p.state.read_lease()
        assert renewed.acquired_at > taken and renewed.holder == "shop/run2/plan_chunks"
        assert lease_alive(replace(renewed, host="elsewhere"), None, now=time.time(), heartbeat_timeout=2, alive=None)
    assert p.state.read_lease() is None


def test_a_carry_over_whose_lease_was_taken_stops_before_moving_more(short_heartbeat):
    """Renewing finds the lease another's (taken for stale, say, after a long pause): the plan step moves nothing
    more and plans nothing; its next try carries the rest over."""
    from airflow.sdk.exceptions import AirflowException

    config, p = short_heartbeat
    op, context = plan_step(config)
    with op._stream_held(context, p, True) as lost:
        p.state.release_lease(p.state.read_lease().launch_id)
        assert p.state.try_lease(lease("x", holder="shop/run9/stream")) is None
        deadline = time.monotonic() + 10
        while not lost.is_set() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert lost.is_set()
        with pytest.raises(AirflowException, match="the stream lease this plan step held to carry renamed tables "
                                                   "over was lost"):
            op._carry_over(p, None, [("a rename", ("id",))], lost)
    assert p.state.read_lease().holder == "shop/run9/stream"  # the new holder's lease is left as it is


def test_a_stream_task_waits_for_a_carry_over_and_then_takes_the_lease(pipeline):
    import threading

    config, p = pipeline
    op, context = plan_step(config)
    stream = BinlogStreamOperator(task_id="stream", config=config)
    mine = lease("b", holder="shop/run3/stream")
    carrying, released = threading.Event(), []

    def carry_over():
        with op._stream_held(context, p, True):
            carrying.set()
            time.sleep(2.0)
        released.append(time.monotonic())

    t = threading.Thread(target=carry_over)
    t.start()
    assert carrying.wait(10)
    assert stream._acquire_lease(p, mine) is None and same_lease(p.state.read_lease(), mine)
    taken = time.monotonic()
    t.join()
    assert released and taken >= released[0]  # not before the carry-over gave the lease up


def test_a_stream_task_waits_for_a_carry_over_a_bounded_time(pipeline, monkeypatch):
    from airflow_cdc_provider.operators import stream as stream_module

    monkeypatch.setattr(stream_module, "CARRY_OVER_WAIT_SECONDS", 1.5)
    config, p = pipeline
    op, context = plan_step(config)
    with op._stream_held(context, p, True):
        held = p.state.read_lease()
        started = time.monotonic()
        assert BinlogStreamOperator(task_id="stream", config=config)._acquire_lease(p, lease("b")) == held
        assert 1.0 <= time.monotonic() - started < 10  # then it leaves the launch to a later run


def test_a_lease_taken_after_a_wait_gives_its_job_the_whole_timeout_from_then():
    """A stream task may wait minutes (for a carry-over, for an earlier try to stop) between making its lease and
    taking it: the lease records when it was taken, or a watcher on another host would judge it stale before the
    task's job could write its first status, and launch a second stream."""
    store = StateStore(tempfile.mkdtemp())
    made = replace(lease("a", host="elsewhere"), acquired_at=time.time() - 150)  # made before a 150 s wait
    before = time.time()
    assert store.try_lease(made) is None
    taken = store.read_lease()
    assert taken.acquired_at >= before
    assert lease_alive(taken, None, now=time.time(), heartbeat_timeout=120, alive=None)


@pytest.mark.parametrize("verdict", ["died", "ended"])
def test_a_deferred_stream_task_ending_late_leaves_the_stream_another_run_launched_since(pipeline, verdict):
    """Run 2's stream task stopped run 1's stream (a table new to it) and launched its own; run 1's trigger then
    reports its launch gone. Run 1's task acts on the launch its trigger watched: run 2's stream keeps running,
    with its launch record and its lease, and no stop is asked of it."""
    from airflow.sdk.exceptions import AirflowException

    from airflow_cdc_provider.pipeline.stream_watch import StreamHealth

    config, p = pipeline
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    first = StreamLaunch("L1", time.time() - 100, "/x/job1.log", pid=gone.pid, host=HOST, pid_start=1)
    proc, second = a_job()
    second = replace(second, launch_id="L2")
    try:
        p.state.write_launch(second)
        assert p.state.try_lease(lease("L2", holder="shop/run2/stream", launch=second)) is None
        event = {**StreamHealth(verdict, "the stream job is gone", None).to_dict(), "meter": None,
                 "launch": first.to_dict()}
        with pytest.raises(AirflowException):
            BinlogStreamOperator(task_id="stream", config=config).execute_complete({"ti": None}, event)
        assert proc.poll() is None, "run 2's stream was stopped"
        assert p.state.read_launch() == second and p.state.read_lease().launch_id == "L2"
        assert not p.state.stop_requested()
    finally:
        proc.kill()
        proc.wait()


def test_an_earlier_try_still_running_after_its_stop_request_is_not_joined_by_a_second_stream(pipeline, monkeypatch):
    """A cleared stream task's earlier try runs on another host, where only the stop request in the state store
    reaches it; still heartbeating after the grace period, it keeps the lease and that request, and the new try
    fails rather than launch a second stream beside it."""
    from airflow.sdk.exceptions import AirflowException

    from airflow_cdc_provider.operators import stream as stream_module

    monkeypatch.setattr(stream_module, "STOP_GRACE_SECONDS", 2)
    config, p = pipeline
    p.state.try_lease(lease("a", try_number=1, host="elsewhere"))
    p.state.write_status(StreamStatus("running", "continuous", launch_id="a", updated_at=time.time()))
    with pytest.raises(AirflowException, match="try 1 of this task still runs the stream"):
        BinlogStreamOperator(task_id="stream", config=config)._acquire_lease(p, lease("b", try_number=2))
    assert p.state.read_lease().launch_id == "a" and p.state.stop_requested()
