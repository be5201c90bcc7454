"""A captured table renamed on the source to another name ``source.tables`` captures continues under that name,
with its sink history.

The stream reads the RENAME (``RENAME TABLE``, ``ALTER TABLE ... RENAME``) as the old name's drop, which names
the new name (``SchemaChange.renamed_to``); it does not read the new name, which it was not launched with. The
next run's plan step carries the table over, once the stream has committed the batch that read the rename and
no stream runs:

1. the sink moves the old name's data to the new name (``Sink.move_table``): its rows and tombstones, its
   changelog, the versions it recorded;
2. the state store takes the old name out of the pipeline (``StateStore.forget_table``, whose mark names the
   new name), as ``airflow-cdc uncapture`` would;
3. the new name is snapshotted under a new epoch whatever the startup mode (``StateStore.carried_tables``): the
   stream passed its changes since the rename, and the sink converges on the snapshot as after any re-snapshot.

Until the stream has read how a table it reads left the source, a table that appeared meanwhile may be that
table under its new name: such new tables wait (``awaiting_drops``), neither snapshotted nor streamed, and are
captured by the run after the stream read it, carried over or as new tables.

A crash between the steps is safe: a moved table counts as moved, and a half-done step 2 is finished by the next
plan step. The table is not carried over, and the old name stays dropped while the new name is captured as any
new table, when the sink cannot move a table in one step (an object store), when the pipeline holds the new name
already (captured before, or taken out with its sink data kept), when the source has the old name again or no
longer has the new one, or when ``source.tables`` does not match the new name.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from dataclasses import dataclass
from typing import Callable, Collection, Sequence

from airflow_cdc_provider.core.offsets import BinlogOffset
from airflow_cdc_provider.core.schema_changes import SchemaChange
from airflow_cdc_provider.pipeline.table_schemas import dropped_tables
from airflow_cdc_provider.sinks.base import Sink
from airflow_cdc_provider.source.schema import TableSchema
from airflow_cdc_provider.state.store import StateStore, table_dir_name

log = logging.getLogger("airflow_cdc.renames")


@dataclass(frozen=True)
class Rename:
    """Table ``old`` renamed to ``new`` on the source, by the statement of ``drop`` (the old name's drop)."""

    old: str
    new: str
    drop: SchemaChange

    def describe(self) -> str:
        where = f" at {self.drop.position.file}:{self.drop.position.pos}" if self.drop.position else ""
        return f"{self.old} renamed to {self.new}{where}"


def renames_due(state: StateStore, source_tables: Callable[[], Collection[str]]) -> dict[str, Rename]:
    """The renames the next plan step carries over, by new name: each dropped table whose drop is a rename,
    committed by the stream, to a name the source has (``source_tables()``, asked only when there is one) and the
    pipeline does not hold, while the source does not have the old name again. Two tables renamed to one name (it
    was renamed away in between, unread) carry neither over: which one the name holds is not known. Whether
    ``source.tables`` matches the new name is the plan's to say."""
    renamed = {old: drop for old, drop in dropped_tables(state).items()
               if drop.renamed_to is not None and committed(state, drop)}
    if not renamed:
        return {}
    from airflow_cdc_provider.pipeline.uncapture import held_tables

    present = set(source_tables())
    moved_away = set(state.renamed_tables())  # their sink data is elsewhere: the name holds nothing
    held = held_tables(state) | (set(state.uncaptured_tables()) - moved_away)
    targets = Counter(str(drop.renamed_to) for drop in renamed.values())
    return {new: Rename(old, new, drop) for old, drop in renamed.items() if (new := str(drop.renamed_to)) in present
            and old not in present and new not in held and targets[new] == 1}


def committed(state: StateStore, drop: SchemaChange) -> bool:
    """Whether the stream's checkpoint has committed the batch that read ``drop``: until then a restart runs the
    batch again, writing the old name's sink data."""
    offset = state.checkpoint_offset()
    return drop.position is not None and offset is not None and drop.position.sort_key < offset.sort_key


def awaiting_drops(state: StateStore, present: Collection[str], position_now: Callable[[], BinlogOffset]) -> set[str]:
    """The tables the stream reads that the source (``present``: its tables now) no longer has and whose drop the
    stream has not read yet, or read in a batch not committed yet. While there is one, a table new to the pipeline
    waits: it may be one of them renamed, to be carried over once the stream has committed the rename.

    A table found missing is noted with the source's position then (``position_now()``, asked once per table):
    its drop is before that position, so once the stream has committed past it without reading one (a DROP not
    logged, ``sql_log_bin=0``), the table is waited for no more."""
    seed = state.read_seed()
    read = set(seed.tables if seed else ()) | state.streamed_tables()
    dropped = {t for t, drop in dropped_tables(state).items() if drop.renamed_to is None or committed(state, drop)}
    missing = read - set(present) - dropped - set(state.renamed_tables())
    noted = state.read_json(state.MISSING, {})
    since = {t: noted[t] for t in missing if t in noted}
    if missing - set(since):
        now = position_now().to_dict()
        since.update({t: now for t in missing - set(since)})
    if since != noted:
        state.write_json(state.MISSING, since)
    offset = state.checkpoint_offset()
    return {t for t in missing if offset is None or not _passed(offset, BinlogOffset.from_dict(since[t]))}


def _passed(offset: BinlogOffset, position: BinlogOffset) -> bool:
    """Whether the stream's ``offset`` is at or past ``position`` (not comparable: another binlog base name, as
    after a server's log-bin changed, which re-snapshots the pipeline anyway)."""
    try:
        return offset >= position
    except ValueError:
        return True


def half_done(state: StateStore) -> list[tuple[str, str, str, dict]]:
    """The carry-overs a crash stopped half way: (new name, old name, the old name's archive, its mark)."""
    found = []
    for new, old in state.carried_tables().items():
        archive = state.unfinished_uncapture(old)
        mark = state.read_json(f"{archive}/uncaptured.json") if archive else None
        if mark and mark.get("renamed_to") == new:
            found.append((new, old, archive, mark))
    return found


def finish_carried(state: StateStore, sink: Sink) -> dict[str, str]:
    """The new names carried over and not snapshotted since (new -> old), after finishing any carry-over a crash
    stopped half way (``half_done``): the sink's move (again: a moved table counts as moved), then the state's
    step. One the sink refuses now is undone: the old name stays dropped."""
    for new, old, archive, mark in half_done(state):
        refused = sink.move_table(old, new)
        if refused is None:
            state.forget_table(old, archive, float(mark["uncaptured_at"]), renamed_to=new)
        else:
            log.warning("%s renamed to %s: not carried over (%s)", old, new, refused)
            state.storage.rmtree(archive)
    return state.carried_tables()


def carry_over(rename: Rename, state: StateStore, sink: Sink, key_columns: Sequence[str],
               now: float | None = None) -> str | None:
    """Carry ``rename``'s table over to its new name, whose key is ``key_columns`` on the source now: the state's
    mark first (so a crash after it finishes the move whatever the source is by then), the sink's data, then the
    rest of the state. None once done, else why not, with nothing changed. No stream may run meanwhile."""
    if not committed(state, rename.drop):
        return "the stream has not committed the batch that read the rename"
    saved = state.read_table_schema(rename.old)
    if saved is None:
        return "its definition is not in the state store"
    before = TableSchema.from_dict(saved).key_columns
    if tuple(before) != tuple(key_columns):  # the sinks key the rows by it: the new name is a new table
        return f"its key changed from {', '.join(before)} to {', '.join(key_columns)}"
    # a millisecond back: the new name's snapshot, planned right after, counts as planned after this
    now = (int(time.time() * 1000) - 1) / 1000 if now is None else now
    archive = state.unfinished_uncapture(rename.old) or f"uncaptured/{table_dir_name(rename.old)}-{int(now * 1000)}"
    state.mark_forget(rename.old, archive, now, renamed_to=rename.new)
    refused = sink.move_table(rename.old, rename.new)
    if refused is not None:
        state.storage.rmtree(archive)
        return refused
    state.forget_table(rename.old, archive, now, renamed_to=rename.new)
    return None


def why_gone(state: StateStore, table: str) -> str:
    """Why a table the pipeline captured is not on the source, for logs and ``verify``."""
    renamed = state.renamed_tables()
    if table in renamed:
        return f"renamed to {renamed[table]}, which holds its sink data now"
    drop = dropped_tables(state).get(table)
    return drop.describe() + "; its sink data is kept" if drop else "the stream has not reached its drop yet"
