"""ValidateSourceOperator and PlanChunksOperator."""

from __future__ import annotations

import contextlib
import os
import socket
import threading
import time
import uuid
from dataclasses import dataclass, replace
from typing import Any, Collection, Sequence

from airflow.sdk import BaseOperator

from airflow_cdc_provider.core.chunks import ChunkTask
from airflow_cdc_provider.operators.dag_run import is_backfill, snapshots_under_way
from airflow_cdc_provider.pipeline.plan import ChunkPlan, plan_chunks, startup_seed
from airflow_cdc_provider.pipeline.renames import (
    Rename,
    awaiting_drops,
    carry_over,
    finish_carried,
    half_done,
    renames_due,
    why_gone,
)
from airflow_cdc_provider.pipeline.resolve import check_sink_names, claim_sink, load_pipeline, sink_moved
from airflow_cdc_provider.pipeline.table_schemas import dropped_tables, resnapshots_due
from airflow_cdc_provider.pipeline.uncapture import held_tables
from airflow_cdc_provider.source.schema import TableSchema
from airflow_cdc_provider.source.validation import SourceValidationError
from airflow_cdc_provider.state.records import CARRY_OVER_MODE, PlannedSnapshot, StreamLease, TablePlan


@dataclass(frozen=True)
class PlanDecision:
    """What a plan step does: the tables it snapshots (``todo``, split into ``plan``'s chunks), the carry-overs a
    crash stopped that it finishes (``unfinished``, from ``half_done``) and the renames it carries over
    (``carried_now``: each rename with the new name's key columns). ``carried_before``: the tables of ``todo``
    carried over before, their snapshot not planned yet. ``finished``: the tables snapshotted before.
    ``notices``: what to log about it (level, text), logged once the decision is final."""

    finished: Collection[str]
    plan: ChunkPlan
    todo: list[TableSchema]
    unfinished: list
    carried_now: list[tuple[Rename, tuple[str, ...]]]
    carried_before: list[str]
    notices: list[tuple[str, str]]

    @property
    def carrying(self) -> bool:
        """Whether it moves sink data, or snapshots a table carried over that the run carrying it may be about to
        plan: then the stream lease is held (``PlanChunksOperator._stream_held``) and the decision made again."""
        return bool(self.unfinished or self.carried_now or self.carried_before)


def raise_lost_lease() -> None:
    from airflow.sdk.exceptions import AirflowException

    raise AirflowException("the stream lease this plan step held to carry renamed tables over was lost (its "
                           "renewal failed, or another task took it for stale): run this task again; what was "
                           "carried over stays, the rest is done then")


def stop_stream(p, holder: StreamLease, timeout: float) -> None:
    """Stop the running stream holding ``holder`` (gracefully, after its current batch) and free its lease; fail
    if it did not stop."""
    from airflow.sdk.exceptions import AirflowException

    from airflow_cdc_provider.operators.stream import holder_alive, stop_holder

    stop_holder(p, holder, timeout)
    if holder_alive(p, holder, timeout):
        raise AirflowException(f"the running stream ({holder.holder}) did not stop; stop it (airflow-cdc stop) and "
                               "run this task again")
    p.state.release_lease(holder.launch_id)


class ValidateSourceOperator(BaseOperator):
    """Fail fast, listing every problem of the source (binlog settings, privileges, tables, keys) with its fix."""

    template_fields: Sequence[str] = ("config",)
    ui_color = "#e8f4fd"

    def __init__(self, *, config: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.config = config

    def execute(self, context: Any) -> dict[str, Any]:
        from airflow.sdk.exceptions import AirflowFailException

        from airflow_cdc_provider.hooks.mysql_cdc import MySqlCdcHook
        from airflow_cdc_provider.pipeline.resolve import check_writable

        p = load_pipeline(self.config)
        problems = check_writable(p)
        if problems:
            raise AirflowFailException("pipeline paths:\n- " + "\n- ".join(problems))
        hook = MySqlCdcHook(p.config.source.conn_id, settings=p.source)
        try:
            result = hook.validate(p.config.source.tables, p.config.source.chunk_key, p.captured_before())
        except SourceValidationError as exc:
            raise AirflowFailException("source validation failed:\n- " + "\n- ".join(exc.problems)) from None
        problems = check_sink_names(p, [str(s.table) for s in result.schemas])
        if problems:
            raise AirflowFailException("sink table names:\n- " + "\n- ".join(problems))
        for name in result.gone:
            self.log.warning("table %s, captured before, no longer exists on the source (dropped or renamed)", name)
        return {"server": result.info.version, "tables": [str(s.table) for s in result.schemas], "gone": result.gone}


class PlanChunksOperator(BaseOperator):
    """Split the tables that need a snapshot into key-range chunks; return one spec per mapped chunk task.

    A table needs a snapshot unless the state store holds a finished one; ``dag_run.conf["resnapshot"]``
    (a list of ``db.table``) forces one; ``dag_run.conf["uncapture"]`` takes tables left out of ``source.tables``
    out of the pipeline first (``airflow-cdc uncapture``). With ``stream.startup`` other than ``initial`` no table is snapshotted
    unless named there: the first run records where the stream starts (``latest``: the position now), so no
    change between this run's start and the stream's launch is missed. The list never exceeds ``[core] max_map_length``: chunks are
    grouped into more per task when there are more. The per-table plan (epoch, chunk count) goes to XCom key
    ``plan`` for ``CollectWatermarksOperator``. Chunks share a task up to ``snapshot.rows_per_task`` rows (one
    Spark application, one JVM start): a bigger table's consecutive chunks (read in one watermark window), or
    several whole small tables, read one after the other; set it to ``chunk_size`` for one task per chunk.
    A table the source renamed to a name ``source.tables`` matches moves there with its sink data and is
    snapshotted under that name; while the stream has not read how a table it reads left the source, a table new
    to the pipeline waits, as it may be that one renamed (``pipeline.renames``).
    """

    template_fields: Sequence[str] = ("config",)
    ui_color = "#e8f4fd"

    def __init__(self, *, config: str, max_tasks: int | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.config = config
        self.max_tasks = max_tasks

    def execute(self, context: Any) -> list[dict[str, Any]]:
        from airflow.sdk import conf

        p = load_pipeline(self.config)
        p.state.ensure_writable()
        moved = sink_moved(p)
        if moved:
            from airflow.sdk.exceptions import AirflowFailException

            raise AirflowFailException("\n".join(moved))
        claim_sink(p)
        conf_run = (context.get("dag_run").conf or {}) if context.get("dag_run") else {}
        self._uncapture(context, p, conf_run.get("uncapture"))
        resnapshot = set(conf_run.get("resnapshot") or [])
        max_tasks = self.max_tasks or conf.getint("core", "max_map_length", fallback=1024)
        backfill = is_backfill(context)  # a backfill snapshots only what its conf names: a stream has no past
        snapshot_first = p.stream.startup == "initial" and not backfill
        if not snapshot_first and not backfill and p.state.read_seed() is None and not p.state.has_checkpoint():
            seed = startup_seed(p)
            p.state.write_seed(seed)
            self.log.info("stream.startup %s: no snapshot; the stream starts at %s (recorded now)",
                          p.stream.startup, seed.start)

        # a table renamed to a name source.tables captures moves there (pipeline.renames), and a carry-over a crash
        # stopped half way is finished, under the stream lease (``_stream_held``). Decided again once it is held:
        # another run may have carried the same renames over meanwhile, and planned their snapshots (so a table
        # carried over before is snapshotted under the lease too). A backfill leaves them
        sink = p.open_sink()
        decision = self._decide(context, p, resnapshot, max_tasks, backfill, snapshot_first)
        ti = context["ti"]
        said = False
        try:
            with self._stream_held(context, p, decision.carrying) as lost:
                if decision.carrying:
                    decision = self._decide(context, p, resnapshot, max_tasks, backfill, snapshot_first)
                self._say(decision)
                said = True
                per_table, epoch = self._carry_and_plan(context, p, sink, decision, backfill, lost)
        finally:
            if not said:  # refused or failed: what it had decided explains it
                self._say(decision)
        todo, chunks, tasks = decision.todo, decision.plan.chunks, decision.plan.tasks
        ti.xcom_push(key="plan", value={t: p.to_dict() for t, p in per_table.items()})
        self.log.info("snapshot of %d table(s) in %d chunk(s), %d task(s); already finished: %s",
                      len(todo), len(chunks), len(tasks), sorted(set(decision.finished) - set(per_table)) or "none")
        return [ChunkTask([replace(c, epoch=epoch) for c in t.chunks]).to_dict() for t in tasks]

    def _say(self, decision: PlanDecision) -> None:
        """Log what ``decision`` notices."""
        for level, text in decision.notices:
            getattr(self.log, level)(text)

    def _carry_and_plan(self, context: Any, p, sink, decision: PlanDecision, backfill: bool,
                        lost: threading.Event) -> tuple[dict[str, TablePlan], int]:
        """The decision carried out, under the stream lease when it carries: a stream that misses a table about
        to be snapshotted stopped, tables carried over, their snapshots and the others planned (the plan of each
        table, and the epoch)."""
        ti = context["ti"]
        todo, chunks = decision.todo, decision.plan.chunks
        self._stop_a_stream_that_misses(p, {str(s.table) for s in todo}, backfill)
        if decision.unfinished:
            finish_carried(p.state, sink)
        self._carry_over(p, sink, decision.carried_now, lost)
        if lost.is_set():
            raise_lost_lease()
        # planned after the moves: only a snapshot planned after a table was carried over counts for it
        # (``StateStore.carried_tables``)
        epoch = int(time.time() * 1000)
        per_table = {str(s.table): TablePlan(epoch, sum(1 for c in chunks if c.table == s.table)) for s in todo}
        for table in per_table:
            p.state.write_planned_snapshot(PlannedSnapshot(table, epoch, ti.dag_id, ti.run_id))
        return per_table, epoch

    def _decide(self, context: Any, p, resnapshot: set[str], max_tasks: int, backfill: bool,
                snapshot_first: bool) -> PlanDecision:
        """What this run carries over and snapshots, from the state store and the source as they are now."""
        notices: list[tuple[str, str]] = []
        finished = p.state.finished_tables()
        resyncs = {} if backfill else resnapshots_due(p.state, p.source_tables)
        for name, change in resyncs.items():
            notices.append(("warning", f"{change.describe()}: re-snapshotted now, as the stream's schema change asks"))
        unfinished = [] if backfill else half_done(p.state)
        renames = {} if backfill else renames_due(p.state, p.source_tables)
        carried = (set() if backfill else set(p.state.carried_tables())) | set(renames)
        # until the stream has read how a table it reads left the source, a new table may be that one renamed
        awaiting = set() if backfill else awaiting_drops(p.state, p.source_tables(), p.source_position)
        held = held_tables(p.state) if awaiting else set()

        # another run's snapshot under way (a continuous pipeline runs two at a time) is left to it, unless named
        # (by a run that is no backfill: a backfill's runs share its conf, and each would read a named table again,
        # their collects racing); looked up once, and only if such a table needs a snapshot
        under_way: dict[str, PlannedSnapshot] | None = None
        decided: dict[str, bool] = {}

        # a table taken out (airflow-cdc uncapture) and captured again: its sink holds the rows of before, so it is
        # snapshotted whatever the startup mode
        recaptured = set() if backfill else p.state.recaptured_tables()

        def needs_snapshot(schema) -> bool:
            nonlocal under_way
            name = str(schema.table)
            if name not in decided:
                wanted = name in resnapshot or name in resyncs or name in recaptured or name in carried or \
                    (snapshot_first and name not in finished)
                if wanted and awaiting and name not in held | carried | resnapshot:
                    notices.append(("warning", f"{name}: new to the pipeline while the stream has not read how "
                                    f"{', '.join(sorted(awaiting))} left the source: it waits for a run after the "
                                    "stream has (if it is that table renamed, its sink data moves to it then)"))
                    wanted = False
                named = name in resnapshot and not backfill
                if wanted and not named and under_way is None:
                    under_way = snapshots_under_way(context, p.state.planned_snapshots())
                decided[name] = wanted and (named or name not in (under_way or {}))
                if wanted and not decided[name]:
                    other = under_way[name]
                    notices.append(("info", f"{name}: its snapshot (epoch {other.epoch}) is under way in DAG run "
                                    f"{other.run_id}: left to that run"))
            return decided[name]

        plan = plan_chunks(p.source, p.config.source.tables, p.config.snapshot.split_options(),
                           p.config.source.chunk_key, max_tasks=max_tasks, should_split=needs_snapshot,
                           chunks_per_task=p.config.snapshot.chunks_per_task, captured_before=p.captured_before(),
                           schema_changes_per_table=p.config.stream.schema_changes_per_table)
        problems = check_sink_names(p, [str(s.table) for s in plan.schemas])
        if problems:
            from airflow.sdk.exceptions import AirflowFailException

            raise AirflowFailException("sink table names:\n- " + "\n- ".join(problems))
        applied = set(dropped_tables(p.state)) | set(p.state.renamed_tables()) if plan.validation.gone else set()
        for name in plan.validation.gone:
            notices.append(("warning", f"table {name} no longer exists on the source ({why_gone(p.state, name)}): "
                            "nothing of it is planned"
                            + ("" if name in applied else "; the stream applies its changes up to the drop")))
        unknown = resnapshot - {str(s.table) for s in plan.schemas}
        if unknown:
            from airflow.sdk.exceptions import AirflowFailException

            self._say(PlanDecision(finished, plan, [], [], [], [], notices))  # a table renamed or dropped, maybe
            raise AirflowFailException("dag_run.conf resnapshot names tables this pipeline does not capture: "
                                       f"{sorted(unknown)}")
        todo = [s for s in plan.schemas if needs_snapshot(s)]
        carried_now = [(renames[str(s.table)], s.key_columns) for s in todo if str(s.table) in renames]
        carried_before = [str(s.table) for s in todo if str(s.table) in carried and str(s.table) not in renames]
        return PlanDecision(finished, plan, todo, unfinished, carried_now, carried_before, notices)

    @contextlib.contextmanager
    def _stream_held(self, context: Any, p, carrying: bool):
        """When ``carrying`` renamed tables over (or finishing a carry-over a crash stopped, or snapshotting a table
        carried over before: ``PlanDecision.carrying``), the stream lease held (``CARRY_OVER_MODE``) from before the
        sink data moves until the new names' snapshots are planned: a stream launched in between would still read
        the old names (and write them to the sink again) and not yet wait for the new names' snapshots; another
        run's plan step would plan them too. A running continuous stream is stopped first (it does not read the new names,
        which are snapshotted now); another run's stream or carry-over refuses it; a stale lease (its holder gone,
        or an earlier try of this task) is taken over. Held long, the lease is renewed, so that no one takes it
        for stale."""
        if not carrying:
            yield threading.Event()
            return
        from airflow.sdk.exceptions import AirflowException

        from airflow_cdc_provider.hooks.spark_job import process_start
        from airflow_cdc_provider.operators.stream import holder_alive, lease_unleased_stream

        ti, timeout = context["ti"], float(p.stream.heartbeat_timeout)
        lease_unleased_stream(p, timeout)
        mine = StreamLease(uuid.uuid4().hex, f"{ti.dag_id}/{ti.run_id}/{ti.task_id}", int(ti.try_number or 1),
                           socket.gethostname(), os.getpid(), CARRY_OVER_MODE,
                           pid_start=process_start(os.getpid()))
        while (holder := p.state.try_lease(mine)) is not None:
            earlier_try = holder.holder == mine.holder and holder.try_number < mine.try_number
            if earlier_try or not holder_alive(p, holder, timeout):
                self.log.warning("the stream lease of %s (try %d) is stale: taken over to carry renamed tables over",
                                 holder.holder, holder.try_number)
            elif holder.mode == "continuous":
                self.log.warning("the running stream (%s) does not read the renamed tables' new names, about to be "
                                 "snapshotted: stopping it (after its current batch) while they are carried over; "
                                 "this run's stream task launches it again", holder.holder)
                stop_stream(p, holder, timeout)
            elif holder.mode == CARRY_OVER_MODE:
                raise AirflowException(f"{holder.holder} is carrying renamed tables over: run this task again once it "
                                       "has finished")
            else:
                raise AirflowException(f"the running stream ({holder.holder}) must stop before renamed tables are "
                                       "carried over; stop it (airflow-cdc stop) and run this task again")
            p.state.release_lease(holder.launch_id)
        done, lost = threading.Event(), threading.Event()

        def renew() -> None:
            renewed = time.monotonic()
            while not done.wait(max(1.0, timeout / 4)):
                try:
                    held = p.state.read_lease()
                    if held is None or held.launch_id != mine.launch_id:
                        lost.set()
                        return
                    p.state.write_lease(replace(mine, acquired_at=time.time()))
                    renewed = time.monotonic()
                except Exception as exc:  # the state store unreachable for a moment: tried again next time
                    self.log.warning("the carry-over lease could not be renewed (%s)", exc)
                    if time.monotonic() - renewed > timeout / 2:
                        lost.set()
                        return

        renewer = threading.Thread(target=renew, name="carry-over lease", daemon=True)
        renewer.start()
        try:
            yield lost
        finally:
            done.set()
            renewer.join(timeout)
            p.state.release_lease(mine.launch_id)

    def _carry_over(self, p, sink, renames: list, lost: threading.Event) -> None:
        """Move each renamed table's sink data to its new name before the new name's snapshot writes there
        (``pipeline.renames``); one that cannot be moved stays dropped, and its new name is a new table. The
        caller holds the stream lease (``_stream_held``), unless ``lost``."""
        for rename, key_columns in renames:
            if lost.is_set():
                raise_lost_lease()
            why = carry_over(rename, p.state, sink, key_columns)
            if why is None:
                self.log.warning("%s: its sink data moved to %s, which is snapshotted now; %s is no longer captured",
                                 rename.describe(), rename.new, rename.old)
            else:
                self.log.warning("%s: not carried over (%s): %s stays dropped with its sink data, and %s is snapshotted "
                                 "as a new table", rename.describe(), why, rename.old, rename.new)

    def _uncapture(self, context: Any, p, tables: Any) -> None:
        """``dag_run.conf["uncapture"]``: the tables to take out of the pipeline, as ``airflow-cdc uncapture`` does,
        before anything is planned. A table taken out already (this task's earlier try) is left as it is."""
        if not tables:
            return
        from airflow.sdk.exceptions import AirflowFailException

        from airflow_cdc_provider.pipeline.uncapture import DAG_RUN_CONF, UncaptureError, taken_out, uncapture

        if isinstance(tables, str):
            tables = [tables]
        if not isinstance(tables, list) or not all(isinstance(t, str) for t in tables):
            raise AirflowFailException(f"dag_run.conf uncapture: {tables!r} is not a list of tables; give "
                                       "{\"uncapture\": [\"db.table\", ...]}")
        planned = p.state.planned_snapshots()
        running = snapshots_under_way(context, planned) if planned else {}
        if running:  # the others were planned by runs that ended without finishing them: they count no more
            runs = sorted({f"{s.run_id} ({s.table})" for s in running.values()})
            raise AirflowFailException(f"dag_run.conf uncapture: snapshots of DAG run(s) {', '.join(runs)} are under "
                                       "way: let them finish, then trigger the DAG with this conf again")
        for table in tables:
            if taken_out(p.state, table):
                self.log.info("%s: taken out of the pipeline already", table)
                continue
            try:
                done = uncapture(p.config, p.state, table, asker=DAG_RUN_CONF, snapshots_checked=True)
            except UncaptureError as exc:
                raise AirflowFailException(str(exc)) from None
            self.log.warning("%s", done.describe())

    def _stop_a_stream_that_misses(self, p, tables: set[str], backfill: bool) -> None:
        """A running continuous stream that does not read a table about to be snapshotted (one the YAML added,
        or one created since that a pattern matches) is stopped first: it would pass the snapshot's high
        watermark without the table's changes, and resume past them. With the stream stopped the snapshot ends
        ahead of its checkpoint, and this run's stream task launches it again with the table. A backfill, which
        launches no stream, is refused instead."""
        from airflow_cdc_provider.operators.stream import lease_unleased_stream, tables_new_to_running_stream

        timeout = float(p.stream.heartbeat_timeout)
        lease_unleased_stream(p, timeout)
        holder, new = tables_new_to_running_stream(p, tables, timeout)
        if not new:
            return
        if backfill:  # whose stream task launches no stream: the stream would stay stopped
            from airflow.sdk.exceptions import AirflowFailException

            raise AirflowFailException(f"the running stream ({holder.holder}) does not read {sorted(new)}: a backfill "
                                       "cannot add tables to it; trigger a regular run of the DAG with the same conf")
        self.log.warning("the running stream (%s) does not read %s, about to be snapshotted: stopping it (after its "
                         "current batch) until the snapshot is done; this run's stream task launches it again, "
                         "reading them too", holder.holder, sorted(new))
        stop_stream(p, holder, timeout)
