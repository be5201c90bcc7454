"""Which definition each captured table is read with, and what the stream's schema changes ask of later runs.

A stream job reads every table's definition once, when it starts, and hands it to every Spark task: all
tasks decode with the same definition, and a TABLE_MAP that differs from it is a schema change
(``source.table_definition``), never a silent misread. The definition is saved in the state store, so a
table dropped before the stream reached its last changes is still decoded up to its drop.

What the stream met (``StateStore.schema_changes``) steers later runs: a table with a ``resync`` newer than
its current snapshot is re-snapshotted by the next plan step; a table whose last change is a ``drop`` and
that no longer exists on the source is left out of planning, with a warning, and its runs succeed. A table whose
drop was read but that the source has (renamed back, or another table renamed into its name later than the
stream has read, or a session's TEMPORARY table of its name renamed, which the binlog logs as the table's) is
re-snapshotted too (``resnapshots_due``).
"""

from __future__ import annotations

import logging
from typing import Any, Callable, Collection, Mapping

from airflow_cdc_provider.core.chunks import TableId
from airflow_cdc_provider.core.schema_changes import DROP, RESYNC, SchemaChange
from airflow_cdc_provider.source.schema import TableConfigError, TableSchema, list_tables, load_schema
from airflow_cdc_provider.source.table_versions import TableVersion
from airflow_cdc_provider.state.store import StateStore

log = logging.getLogger("airflow_cdc.schema")


def stream_schemas(conn: Any, store: StateStore, tables: Mapping[str, Any]) -> dict[str, TableSchema]:
    """Each table's definition as the source has it now (saved to the state store); for a table the source no
    longer has, the one saved last."""
    out = {}
    for name, chunk_key in tables.items():
        try:
            schema = load_schema(conn, TableId.parse(name), chunk_key)
        except TableConfigError:
            saved = store.read_table_schema(name)
            if saved is None or name in {str(t) for t in list_tables(conn)}:  # there, but not capturable now
                raise
            log.warning("table %s no longer exists on the source: its changes up to its drop are read with the "
                        "definition saved when it was last read", name)
            out[name] = TableSchema.from_dict(saved)
            continue
        store.write_table_schema(name, schema.to_dict())
        out[name] = schema
    return out


def _not_covered(change: SchemaChange, snapshot) -> bool:
    """Whether the table's current snapshot (a ``FinishedSnapshot`` or None) started before ``change``."""
    return snapshot is None or change.position is None or \
        change.position.sort_key > snapshot.min_low_watermark.sort_key


def pending_resyncs(store: StateStore) -> dict[str, SchemaChange]:
    """Per table, the first ``resync`` its current snapshot does not cover (the snapshot started before it)."""
    finished = store.finished_tables()
    out: dict[str, SchemaChange] = {}
    for change in store.schema_changes():
        name = str(change.table)
        if change.kind == RESYNC and name not in out and _not_covered(change, finished.get(name)):
            out[name] = change
    return out


def resnapshots_due(store: StateStore, source_tables: Callable[[], Collection[str]]) -> dict[str, SchemaChange]:
    """The tables the next plan step re-snapshots, with why: each pending resync, and each table whose drop the
    stream read though the source has a table of its name (``source_tables()``: the source's tables, asked only
    when a drop was read)."""
    due = pending_resyncs(store)
    dropped = dropped_tables(store)
    present = source_tables() if dropped else ()
    for name, drop in dropped.items():
        if name in present and name not in due:
            due[name] = SchemaChange(RESYNC, drop.table, drop.statement, f"{drop.detail}, yet the source has a table "
                                     "of its name (renamed back or into it, or the rename of a TEMPORARY table of "
                                     "its name, which the binlog logs as the table's)", drop.position)
    return due


def dropped_tables(store: StateStore) -> dict[str, SchemaChange]:
    """Tables whose last schema change is a drop that no later snapshot follows."""
    finished = store.finished_tables()
    last = {str(c.table): c for c in store.schema_changes()}
    return {name: c for name, c in last.items() if c.kind == DROP and _not_covered(c, finished.get(name))}


def stream_versions(conn: Any, store: StateStore, tables: Mapping[str, Any],
                    epochs: Mapping[str, int]) -> dict[str, list[TableVersion]]:
    """Each table's versions for the stream (``source.table_versions``), in its current snapshot epoch: the
    base (the definition the epoch's snapshot read the table with; without a snapshot, the source's definition
    when the stream first started, which becomes the base), then every version recorded since. A stream that
    starts after an ALTER, or restarts from a checkpoint before one, therefore decodes the old events with the
    definition they were written under, whatever the source's definition is now."""
    out = {}
    for name, chunk_key in tables.items():
        epoch = int(epochs.get(name, 0))
        versions = store.table_versions(name, epoch)
        if store.snapshot_definitions_mixed(name, epoch):  # no base to trust: today's definition, nothing in place
            out[name] = [TableVersion(0, stream_schemas(conn, store, {name: chunk_key})[name])]
            continue
        if not versions:
            schema = stream_schemas(conn, store, {name: chunk_key})[name]
            store.write_table_base(name, epoch, TableVersion(0, schema))
            versions = store.table_versions(name, epoch)
        else:
            store.write_table_schema(name, versions[-1].schema.to_dict())
        out[name] = versions
    return out


def chunk_order_schemas(store: StateStore, versions: Mapping[str, list[TableVersion]],
                        epochs: Mapping[str, int]) -> dict[str, TableSchema]:
    """Per table, the definition its snapshot epoch's chunks were read with: the epoch's base, which the first
    snapshot task wrote after checking it against the key order the chunks were planned in (a state store or plan
    older than that check holds the definition the stream first started with instead). The stream's emit filter
    tells a change its chunk in this order: an ALTER applied in place since may have given a key column another
    collation, and the chunk bounds split the keys only in the order they were planned in."""
    out = {}
    for name, chain in versions.items():
        base = store.table_base(name, int(epochs.get(name, 0)))
        out[name] = (base or chain[0]).schema
    return out
