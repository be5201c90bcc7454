"""How the stream's tasks apply an ALTER in place: the versions its query was set up with, and the recording of
the next one when a task meets an ALTER of columns (``source.schema_evolution`` builds it).

The task that meets the ALTER first records the table's next version in the state store and stops the batch
(``source.binlog.DefinitionsChanged``); the stream job starts its query again, and every task of the re-run
batch decodes with the recorded version. A version is built from the definition in force before the ALTER,
the statement, and the source's definition now (for the exact types of added or retyped columns), and is
checked against every later TABLE_MAP: a version that does not describe the rows is a resync, never a misread.
An online schema change tool's swap (RENAME of its altered shadow table into the table's name) is applied as the
shadow's ALTER (``source.online_schema_change``), from the shadow's statements the tasks kept as they passed.
"""

from __future__ import annotations

import logging
from typing import Any, Collection, Mapping

from airflow_cdc_provider.core.chunks import TableId
from airflow_cdc_provider.core.offsets import BinlogOffset, EventPosition
from airflow_cdc_provider.core.schema_changes import RESYNC, shorten
from airflow_cdc_provider.core.shadow_tables import ShadowStatement
from airflow_cdc_provider.source.binlog import DefinitionsChanged, Evolutions, TableChangeReader, read_changes_between
from airflow_cdc_provider.source.schema import (
    TableConfigError, column_type_of, column_types, load_schema, table_charset,
)
from airflow_cdc_provider.source.settings import ConnectionSettings
from airflow_cdc_provider.source.table_versions import TableVersion, sink_versions, version_at
from airflow_cdc_provider.state.store import StateStore

log = logging.getLogger("airflow_cdc.schema")
IN_PLACE_BEHAVIOURS = ("evolve", "lenient", "ignore")  # the behaviours that apply column changes in place


class StreamEvolutions(Evolutions):
    """The stream's versions of each table (what its query was set up with), and the recording of the next one
    when a task meets an ALTER that can be applied in place. Picklable: every Spark task gets a copy and opens
    its own connection and state store when it has to record."""

    def __init__(self, versions: Mapping[str, list[TableVersion]], epochs: Mapping[str, int], state_path: str,
                 connect, behaviours: Mapping[str, str], in_place: bool = True,
                 sinks: Mapping[str, list[TableVersion]] | None = None) -> None:
        """``behaviours``: each table's ``stream.schema_changes``; ``in_place``: whether the sink can change its
        tables in place; ``sinks``: the versions each table's sink goes through (``sink_versions``), by default
        the source's."""
        self.behaviours = {TableId.parse(t): b for t, b in behaviours.items()}
        self.in_place = in_place
        self.chains = {TableId.parse(t): list(v) for t, v in versions.items()}
        self.sink_chains = {TableId.parse(t): list(v) for t, v in (sinks or versions).items()}
        self.epochs = {TableId.parse(t): int(epochs.get(t, 0)) for t in versions}
        self.state_path = state_path
        self.connect = connect  # () -> a pymysql connection to the source
        self.start: tuple[int, int, int] | None = None
        self.batch: tuple[BinlogOffset, ConnectionSettings, int] | None = None  # see ``reading_from``

    def reading_from(self, start: BinlogOffset, batch_start: BinlogOffset | None = None,
                     settings: ConnectionSettings | None = None, server_id: int = 0) -> "StreamEvolutions":
        """This, for a read that starts at ``start``, inside a batch that starts at ``batch_start``: ``settle``
        then reads the batch's earlier part with ``settings`` as replica ``server_id``."""
        view = StreamEvolutions.__new__(StreamEvolutions)
        view.__dict__.update(self.__dict__)
        view.start = start.sort_key
        view.batch = (batch_start, settings, server_id) if batch_start is not None and settings else None
        return view

    def settle(self, table: TableId, until: EventPosition,
               covered: Mapping[TableId, tuple[int, ...]] | None = None) -> None:
        """Reads the statements of the batch from its start to ``until``, recording the versions of the ALTERs
        of ``table`` there, in order (a read from the batch's start knows every version before it), and keeping
        the statements about its shadow tables; ``covered``: the reader's ``covered_through``."""
        if self.batch is None:
            return
        first, settings, server_id = self.batch
        stop = BinlogOffset(until.file, until.pos)
        if not stop > first:
            return
        schemas = {table: version_at(self.chains[table], first.sort_key).schema}
        scanner = TableChangeReader(schemas, covered_through=covered, evolutions=self.reading_from(first), rows=False)
        for _ in read_changes_between(settings, server_id, first, stop, schemas, scanner):
            pass

    def definitions_changed(self, conn: Any, held: Collection[TableId] = ()) -> bool:
        """Whether a table applied in place has another definition on the source now than its newest version: the
        binlog ahead then holds an ALTER of it that can be recorded (one query; ``conn``: a connection to the
        source). Tables ``held`` for a re-snapshot, and tables gone from the source, have nothing to record."""
        tables = [t for t, behaviour in self.behaviours.items()
                  if behaviour in IN_PLACE_BEHAVIOURS and t in self.chains and t not in held]
        if not self.in_place or not tables:
            return False
        now = column_types(conn, tables)
        return any(t in now and now[t] != [column_type_of(c) for c in self.chains[t][-1].schema.columns]
                   for t in tables)

    def record_between(self, settings: ConnectionSettings, server_id: int, start: BinlogOffset, stop: BinlogOffset,
                       covered_through: Mapping[TableId, tuple[int, int, int]],
                       held: Collection[TableId]) -> list[DefinitionsChanged]:
        """Records the versions of the ALTERs in ``[start, stop)`` (a batch, ``start`` its start) before the
        batch is read, so that no attempt of it fails on them: its statements are read as a segment reads
        them, by replica ``server_id``. What it recorded, as the segments would report it."""
        schemas = {t: version_at(chain, start.sort_key).schema for t, chain in self.chains.items()}
        scanner = TableChangeReader(schemas, covered_through=covered_through, held=held,
                                    evolutions=self.reading_from(start), rows=False)
        for _ in read_changes_between(settings, server_id, start, stop, schemas, scanner):
            pass
        return scanner.recorded

    def recorded_at(self, table: TableId, position: EventPosition) -> TableVersion | None:
        recorded = StateStore(self.state_path).table_versions(str(table), self.epochs[table])
        return version_at(recorded, position.sort_key) if recorded else None

    def note_shadow(self, note: ShadowStatement) -> None:
        if note.original in self.epochs:
            StateStore(self.state_path).record_shadow_statement(self.epochs[note.original], note)

    def chain(self, table: TableId) -> list[TableVersion]:
        return self.chains[table]

    def sink_chain(self, table: TableId) -> list[TableVersion]:
        return self.sink_chains[table]

    def starting_version(self, table: TableId) -> TableVersion | None:
        chain = self.chains.get(table)
        if not chain:
            return None
        return version_at(chain, self.start) if self.start is not None else chain[-1]

    def known(self, table: TableId, position: EventPosition) -> TableVersion | None:
        for version in self.chains.get(table, ())[1:]:
            if version.position is not None and version.position.sort_key[:2] == position.sort_key[:2]:
                return version
        return None

    def record(self, table: TableId, statement: str, database: str | None, position: EventPosition,
               current: TableVersion) -> TableVersion | str:
        from airflow_cdc_provider.source.ddl import column_changes, swapped_into  # the DDL parser, when needed
        from airflow_cdc_provider.source.online_schema_change import swapped_in_changes
        from airflow_cdc_provider.source.schema_evolution import evolve_definition

        behaviour = self.behaviours.get(table, "resnapshot")
        if behaviour not in IN_PLACE_BEHAVIOURS:
            return f"stream.schema_changes is {behaviour} for the table"
        if not self.in_place:
            return "the sink cannot change its tables in place"
        parsed = column_changes(statement, database)
        shadow = swapped_into(statement, database, table) if parsed is None else None
        if shadow is None and (parsed is None or parsed[0] != table):
            return "the statement does more than add, drop, rename or retype columns"
        store = StateStore(self.state_path)
        if store.snapshot_definitions_mixed(str(table), self.epochs[table]):
            return "the table's snapshot was read under more than one definition"
        recorded = store.table_versions(str(table), self.epochs[table]) or [current]
        here = position.sort_key[:2]
        same = [v for v in recorded if v.position is not None and v.position.sort_key[:2] == here]
        if same:  # another read (a scan of the batch's earlier part, a retried task) recorded it already
            return same[0]
        if any(v.position is not None and v.position.sort_key[:2] > here for v in recorded):
            return "a later change of the table was recorded first"
        before = version_at(recorded, position.sort_key)
        if shadow is not None:
            epoch = self.epochs[table]
            swapped = swapped_in_changes(
                store.shadow_statements(str(table), epoch, str(shadow)), shadow, position,
                lambda p: version_at(recorded, p.sort_key).number, before.number, before.schema.column_names,
                store.shadow_statements(str(table), epoch, str(table)))
            if isinstance(swapped, str):
                return f"an online schema change swapped {shadow} in: {swapped}"
            alter, changes = swapped
            parsed, statement = (table, changes), f"{shorten(statement)} (the table swapped in: {shorten(alter)})"
        conn = self.connect()
        try:
            try:
                now = load_schema(conn, table, before.schema.key_columns)
            except TableConfigError:
                now = None
            charset = table_charset(conn, table)
        finally:
            conn.close()
        result = evolve_definition(before.schema, parsed[1], now, before.number + 1, position, statement, charset)
        if isinstance(result, str):
            return result
        if shadow is not None and (now is None or result.schema.column_names != now.column_names):
            # an ALTER's version need only name what it changed; a swap's must be the whole table now
            return (f"the table swapped in would have the columns {', '.join(result.schema.column_names)}, but the "
                    f"source has {', '.join(now.column_names) if now else 'no such table'} now")
        followed = sink_versions([*recorded[:before.number + 1], result], behaviour)
        if isinstance(followed, str):
            return followed
        log.info("%s: applied in place as version %d of the table", table, result.number)
        return store.record_table_version(str(table), self.epochs[table], result)


def covered_through(seed: Any, tables: Collection[TableId]) -> dict[TableId, tuple[int, int, int]]:
    """The position through which each table's current snapshot holds every change (``seed``, the stream
    seed): the smallest high watermark of its chunks. A read skips the table's events before it."""
    out = {}
    for name, table_seed in (seed.tables if seed else {}).items():
        table = TableId.parse(name)
        if table in tables and table_seed.chunks:
            out[table] = min(r.high_watermark.sort_key for r in table_seed.chunks)
    return out


def held_tables(store: StateStore, tables: Collection[TableId],
                covered: Mapping[TableId, tuple[int, int, int]]) -> set[TableId]:
    """Tables with a resync their current snapshot does not cover: their changes wait for their re-snapshot."""
    return {c.table for c in store.schema_changes() if c.kind == RESYNC and c.position is not None
            and c.table in tables and not covered.get(c.table, (0, 0, 0)) > c.position.sort_key}
