"""Taking a table out of a pipeline: the stream stops reading it, its sink data stays as the stream left it.

A table once snapshotted or streamed stays in the stream even when ``source.tables`` no longer names it:
captured again later, it would have lost the changes in between without a word. ``uncapture`` is the way
out for one table, with the pipeline's other tables left as they are: its state (snapshot, chunk reports,
definitions) moves to ``uncaptured/<db.t>-<ms>/`` of the state store, and the seed, the list of streamed tables
and the schema changes forget it. Captured again later, it is a new table to the pipeline: the next run
snapshots it under a new epoch, which the sinks converge on (rows the old capture left that the source no
longer has are swept, as after any re-snapshot).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from airflow_cdc_provider.core.hints import did_you_mean
from airflow_cdc_provider.core.offsets import BinlogOffset
from airflow_cdc_provider.pipeline.config import PipelineConfig
from airflow_cdc_provider.pipeline.stream_watch import lease_alive
from airflow_cdc_provider.state.records import CARRY_OVER_MODE, RUNNING_STATES
from airflow_cdc_provider.state.store import StateStore, table_dir_name


class UncaptureError(ValueError):
    pass


@dataclass(frozen=True)
class Uncaptured:
    """What ``uncapture`` did: the table, and where its state now lies."""

    table: str
    archive: str
    interrupted: BinlogOffset | None = None  # the end of the stream's last batch, planned and not committed

    def describe(self) -> str:
        cut = (f" (the stream's last batch, through {self.interrupted}, was stopped before it committed: the sink may "
               "hold some of its changes of the table)" if self.interrupted else "")
        return (f"{self.table}: no longer captured. The stream stops reading it from its next launch; its sink data "
                f"stays as it is{cut}. Its state moved to {self.archive}. Added to source.tables again, it is "
                "snapshotted again by the next run")


def matching_patterns(config: PipelineConfig, table: str) -> list[str]:
    """The ``source.tables`` entries that name or match ``table``."""
    from airflow_cdc_provider.source.schema import compile_pattern, is_exact

    return [p for p in config.source.tables
            if (p == table if is_exact(p) else compile_pattern(p).fullmatch(table) is not None)]


@dataclass(frozen=True)
class Asker:
    """Who asks, for the errors: how the table was named and how to ask again (the CLI, or a DAG run's conf)."""

    named: str = "--table {table}"
    again: str = "run this again"
    after_stop: str = "run this again, then trigger the DAG"
    forced: str = "run this again with --force"


DAG_RUN_CONF = Asker("dag_run.conf uncapture {table}", "trigger the DAG with this conf again",
                     "trigger the DAG with this conf again",
                     "run airflow-cdc uncapture <pipeline yaml> --table {table} --force")


def held_tables(state: StateStore) -> set[str]:
    """The tables the pipeline's state holds: captured (snapshotted, seeded, with a saved definition) or streamed."""
    from airflow_cdc_provider.pipeline.resolve import captured_tables_in

    return captured_tables_in(state) | state.streamed_tables()


def taken_out(state: StateStore, table: str) -> bool:
    """Whether an uncapture of ``table`` finished and nothing holds the table since (asked again, nothing to do)."""
    return table in state.uncaptured_tables() and table not in held_tables(state) \
        and state.unfinished_uncapture(table) is None


def uncapture(config: PipelineConfig, state: StateStore, table: str, now: float | None = None,
              force: bool = False, asker: Asker = Asker(), snapshots_checked: bool = False) -> Uncaptured:
    """Take ``table`` out of the pipeline's state, once nothing could still read it: ``source.tables`` no longer
    matches it, no stream runs or launches, no snapshot is planned (``force``: those
    runs failed; ``snapshots_checked``: the caller knows none of them runs), and the stream keeps another table to
    read. A table an earlier uncapture took out half way is taken out again."""
    where = config.where
    captured = held_tables(state)
    unfinished = state.unfinished_uncapture(table)
    if table not in captured and unfinished is None:
        raise UncaptureError(f"{where}: {asker.named.format(table=table)}: not a table this pipeline has captured"
                             f"{did_you_mean(table, sorted(captured))}; it has "
                             f"captured: {', '.join(sorted(captured)) or 'none'}")
    if patterns := matching_patterns(config, table):
        raise UncaptureError(
            f"{where}: source.tables still captures {table} (through {', '.join(repr(p) for p in patterns)}): take "
            "it out of source.tables first (a pattern can exclude it: 're:...' with a negative lookahead), then "
            f"{asker.again}")
    now = time.time() if now is None else now
    status, lease = state.read_status(), state.read_lease()
    timeout = config.stream.heartbeat_timeout
    beating = status is not None and status.state in RUNNING_STATES and now - status.updated_at < timeout
    if lease is not None and lease.mode == CARRY_OVER_MODE and lease_alive(lease, status, now=now,
                                                                          heartbeat_timeout=timeout, alive=None):
        raise UncaptureError(f"{where}: {lease.holder} is carrying renamed tables over to their new names: "
                             f"{asker.again} once it has finished")
    if beating or (lease is not None and lease_alive(lease, status, now=now, heartbeat_timeout=timeout, alive=None)):
        raise UncaptureError(
            f"{where}: the stream of {config.dag_id} is running or launching and reads {table}: stop it first "
            f"(airflow-cdc stop {where} --wait 120; a running DAG run's stream task then ends), {asker.after_stop}")
    planned = {} if snapshots_checked else state.planned_snapshots()
    if planned and not force:  # a run that finishes one writes the seed and the lists this rewrites
        runs = sorted({f"{s.run_id} ({s.table}, epoch {s.epoch})" for s in planned.values()})
        raise UncaptureError(
            f"{where}: snapshots planned by DAG run(s) {', '.join(runs)} have not finished: let those runs finish, "
            f"or, if they failed or were abandoned, {asker.forced.format(table=table)}")
    seed = state.read_seed()
    others = (set(seed.tables) if seed else set()) | state.streamed_tables() | set(state.finished_tables())
    if not others - {table}:
        raise UncaptureError(
            f"{where}: {table} is the only table the stream reads; a pipeline without it starts over: give it a new "
            "state.path instead (every table in source.tables is snapshotted again)")
    # a stopped or killed stream's last batch, planned and not committed, is re-run without the table: what it
    # wrote of the table's changes before it stopped stays in the sink
    interrupted = state.planned_batch_end()
    archive = unfinished or f"uncaptured/{table_dir_name(table)}-{int(now * 1000)}"
    state.forget_table(table, archive, now)
    return Uncaptured(table, state.location(archive), interrupted)
