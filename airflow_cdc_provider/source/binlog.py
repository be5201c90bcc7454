"""Reading row changes from the binlog with python-mysql-replication.

Positions: ``packet.log_pos`` is where an event *ends*; it starts at ``log_pos - packet.event_size``. The
current file comes from the stream, which follows rotate events. Reads always start at a transaction
boundary (a watermark or checkpoint): starting inside a transaction makes the library skip the rows whose
TABLE_MAP it never saw, silently.

``is_mariadb`` stays False for file/position reads: with True, the library ignores ``log_file``/``log_pos``
and replays from the first binlog (feasibility pitfall P11). GTID and row events of MariaDB are still
decoded because the library announces MariaDB capabilities anyway.

TABLE_MAP events are parsed once per table id and binlog file (``freeze_schema``): with
``binlog_row_metadata=FULL`` parsing one costs more than decoding its rows, and one precedes every row
event. A table id names one table definition for the life of a server (an ALTER opens the table under a new
id); ids restart only with the server, which always starts a new binlog file, so the cache is dropped at
every file's FORMAT_DESCRIPTION event. Measured on 60k sysbench oltp_write_only changes: decoding took half
the time of the library's default.

Every reader connects as a replica and needs a server id no other replica uses at the same time; the
server disconnects the older of two replicas with the same id.
"""

from __future__ import annotations

import contextlib
import re
from functools import partial
from typing import Any, Iterable, Iterator, Mapping

from pymysqlreplication import BinLogStreamReader
from pymysqlreplication.event import (
    FormatDescriptionEvent, GtidEvent, MariadbGtidEvent, QueryEvent, XAPrepareEvent, XidEvent,
)
from pymysqlreplication.row_event import DeleteRowsEvent, UpdateRowsEvent, WriteRowsEvent

from airflow_cdc_provider.compat import replication
from airflow_cdc_provider.core.chunks import TableId
from airflow_cdc_provider.core.offsets import BinlogOffset, EventPosition, split_binlog_file
from airflow_cdc_provider.core.records import ChangeRecord, records_from_images, row_images
from airflow_cdc_provider.core.schema_changes import DROP, EVOLVE, RESYNC, TRUNCATE, SchemaChange
from airflow_cdc_provider.core.shadow_tables import EMPTIED, OTHER, ShadowStatement
from airflow_cdc_provider.source.row_decoder import RowDecoder
from airflow_cdc_provider.source.connection import SourceConnection, connect
from airflow_cdc_provider.source.schema import TableSchema
from airflow_cdc_provider.source.settings import ConnectionSettings
from airflow_cdc_provider.source.table_definition import definition_difference
from airflow_cdc_provider.source.table_versions import TableVersion, origins
from airflow_cdc_provider.source.transactions import (
    COMMITTED, GROUP_STARTS, PREPARED_COMMIT, PREPARED_GROUP, UNSURE, XA_END, TransactionMark, committed,
    transaction_mark, transactional_tables,
)
from airflow_cdc_provider.source.values import RowCanonicalizer

_DATABASE_WORDS = re.compile(r"\b(DATABASE|SCHEMA)\b", re.IGNORECASE)
_ROW_KINDS = {WriteRowsEvent: "insert", UpdateRowsEvent: "update", DeleteRowsEvent: "delete"}
# Transaction events are requested too, so that a bounded read notices it passed its stop position even
# when the captured tables see no change at all.
_EVENTS = [WriteRowsEvent, UpdateRowsEvent, DeleteRowsEvent, XidEvent, XAPrepareEvent, MariadbGtidEvent, QueryEvent,
           FormatDescriptionEvent]


def event_start(event: Any) -> int:
    return int(event.packet.log_pos) - int(event.packet.event_size)


class TableChangeReader:
    """Decodes row events of the given tables into ``ChangeRecord``s (canonical values, split key changes), and
    the statements and definition changes that affect them into ``SchemaChange``s, both at their positions.

    Rows are decoded by a ``RowDecoder`` compiled per table map where it can; otherwise (``compiled=False``,
    or a table map it does not cover) by the library. A table map whose definition differs from the schema is
    reported once as a ``resync`` and its rows are not decoded: decoding them with the known schema would give
    wrong values. ``covered_through`` maps a table to the version through which its current snapshot holds
    every change (the smallest high watermark of its chunks): its events up to there are skipped unread.
    ``held``: tables whose resync is already known (waiting for their re-snapshot): their row events are
    skipped unread, whatever their definition; a table joins them at its first resync of the read.

    ``evolutions`` (the stream's ``Evolutions``; None: every column change is a resync): each table's versions
    (``source.table_versions``), which replace ``schemas``: a table starts with the version in force where the
    read starts; an ALTER the evolutions know switches its table to the next version at the ALTER's position (an
    ``evolve`` change), one they do not know is recorded (``recorded``), and rows decoded with an older version
    than the sink's newest are carried up to it (``origins``). ``window``: this is a chunk window's read
    (``unknown_rollback``)."""

    def __init__(self, schemas: Mapping[TableId, TableSchema], compiled: bool = True,
                 covered_through: Mapping[TableId, tuple[int, int, int]] | None = None,
                 held: Iterable[TableId] = (), evolutions: "Evolutions | None" = None,
                 confirmed: Iterable[TableId] | None = None, rows: bool = True, window: bool = False) -> None:
        self.schemas = dict(schemas)
        self.window = window  # a chunk window's read (``unknown_rollback``)
        self.evolutions = evolutions
        # tables whose version in force is known to be right: all where the read starts at a batch's start (every
        # version before it is recorded); elsewhere, once a TABLE_MAP matched it or the read switched it itself
        self.confirmed = set(self.schemas) if confirmed is None else set(confirmed)
        self.rows = rows  # False: statements only (a scan that records the versions before a segment)
        self.versions: dict[TableId, TableVersion] = {}  # the version each table is decoded with, when evolving
        self._origins: dict[tuple, list] = {}  # (table, version, chain length) -> origins of the newest columns
        # versions this read recorded: its rows cannot be written with the query's definitions, so from the first
        # on no row is decoded, only statements (each ALTER met is recorded), and the read ends in DefinitionsChanged
        self.recorded: list[DefinitionsChanged] = []
        self.newest: dict[TableId, list[TableVersion]] = {}  # tables decoded with an older version than the newest
        self._canon = {t: RowCanonicalizer(s) for t, s in self.schemas.items()}
        self.compiled = compiled
        self.covered_through = {t: k[:2] for t, k in (covered_through or {}).items()}
        self.held = set(held)
        self.xa_ended: set[str] = set()  # xids of the XA transactions whose group this read saw (XA END)
        self.xa_committed_unseen: set[str] = set()  # xids committed here, prepared before the read
        self.events = {"compiled": 0, "library": 0}  # row events decoded each way
        self._decoders: dict[int, tuple[Any, RowDecoder | None]] = {}  # table id -> (its table map, plan)
        self._definitions: dict[int, tuple[Any, str | None]] = {}  # table id -> (its table map, its difference)
        self._names = sorted({t.table for t in self.schemas})
        if evolutions is not None:
            for t in list(self.schemas):
                self._use_version(t, evolutions.starting_version(t))

    def covered(self, table: TableId, file: str, start: int) -> bool:
        """Whether the table's snapshot holds every change of an event starting at ``file:start``."""
        through = self.covered_through.get(table)
        return through is not None and (split_binlog_file(file)[1], start) < through

    def definition_change(self, table_id: int, table_map: Any, table: TableId, file: str,
                          start: int) -> tuple[bool, SchemaChange | None]:
        """``(decodable, change)``: whether rows of ``table_map`` decode into the table's schema, and the resync
        to report (the first time a table map's definition is seen to differ)."""
        known = self._definitions.get(table_id)
        if known is not None and known[0] is table_map:
            return known[1] is None, None
        difference = None if table_map is None else definition_difference(table_map.columns, self.schemas[table])
        self._definitions[table_id] = (table_map, difference)
        if difference is None:
            self.confirmed.add(table)
            return True, None
        if self._caught_up(table, table_map, EventPosition(file, start, 0)):
            return False, None
        self.held.add(table)
        return False, SchemaChange(RESYNC, table, "", f"its row events have another definition than the one read: {difference}"
                                   ).at(EventPosition(file, start, 0))

    def _use_version(self, table: TableId, version: TableVersion | None) -> None:
        """Decode ``table`` with ``version`` from here on."""
        if version is None:
            return
        self.versions[table] = version
        self.schemas[table] = version.schema
        sink = self.evolutions.sink_chain(table)
        if version.number < sink[-1].number or version.schema != sink[-1].schema:
            self.newest[table] = sink
        else:
            self.newest.pop(table, None)
        self._canon[table] = RowCanonicalizer(version.schema)
        self._decoders.clear()
        self._definitions.clear()

    def _caught_up(self, table: TableId, table_map: Any, here: EventPosition) -> bool:
        """A TABLE_MAP of another definition where the read started inside a batch: an ALTER of the batch's
        earlier part may explain it. Its versions are recorded (``Evolutions.settle``); when the version in force
        here then describes the TABLE_MAP, the read goes on with it (and, the query not knowing it, ends in
        ``DefinitionsChanged``). Otherwise the difference is a resync, as anywhere."""
        if self.evolutions is None or table in self.confirmed or table not in self.versions:
            return False
        self.evolutions.settle(table, here, self.covered_through)
        self.confirmed.add(table)
        version = self.evolutions.recorded_at(table, here)
        if version is None or version.number <= self.versions[table].number or definition_difference(
                table_map.columns, version.schema) is not None:
            return False
        change = SchemaChange(EVOLVE, table, version.statement, "recorded before this segment", version.position)
        self.recorded.append(DefinitionsChanged(table, change, version))
        self._use_version(table, version)
        return True

    @property
    def skips_rows(self) -> bool:
        """Whether row events are skipped unread: this read recorded a version (see ``recorded``)."""
        return bool(self.recorded) or not self.rows

    def _evolved(self, change: SchemaChange, database: str | None) -> SchemaChange:
        """A column change applied in place (the evolutions know its version: the table switches to it), or
        the resync as it was (the change cannot be applied in place). A version not known yet is recorded (see
        ``recorded``): the query starts again with it."""
        table = change.table
        known = self.evolutions.known(table, change.position)
        if known is not None:
            self._use_version(table, known)
            self.confirmed.add(table)
            return SchemaChange(EVOLVE, table, change.statement, change.detail, change.position)
        from airflow_cdc_provider.source.ddl import swapped_into

        if table not in self.confirmed or swapped_into(change.statement, database, table) is not None:
            # the read started inside a batch whose earlier part may hold ALTERs of the table no one recorded
            # yet: those are recorded first, in order, so this one is built on the version really before it (and
            # a swap's shadow statements there are kept before the swap is looked at)
            self.evolutions.settle(table, change.position, self.covered_through)
            self.confirmed.add(table)
        recorded = self.evolutions.record(table, change.statement, database, change.position, self.versions[table])
        if isinstance(recorded, TableVersion):
            evolved = SchemaChange(EVOLVE, table, change.statement, change.detail, change.position)
            self.recorded.append(DefinitionsChanged(table, evolved, recorded))
            self.versions[table] = recorded
            return evolved
        return SchemaChange(RESYNC, table, change.statement, f"{change.detail}; not applied in place: {recorded}",
                            change.position)

    def passed_on(self, mark: TransactionMark) -> list[SchemaChange]:
        """A mark ``committed`` passed on: an XA transaction's xid noted (``xa_ended``; the commit of one this
        read did not see end, in ``xa_committed_unseen``), or a rollback whose undone rows are not known."""
        if mark.kind == XA_END:
            self.xa_ended.add(mark.xid)
        elif mark.kind == PREPARED_COMMIT:
            if mark.xid not in self.xa_ended:
                self.xa_committed_unseen.add(mark.xid)
        else:
            return self.unknown_rollback(mark)
        return []

    def unknown_rollback(self, mark: TransactionMark) -> list[SchemaChange]:
        """A rollback whose undone rows are not known: a ROLLBACK or SAVEPOINT statement not read (its mark names
        the tables whose rows it may have undone), or the XA ROLLBACK of a transaction prepared before, whose rows
        were taken at its prepare. That group does not say which tables its rows were of: the tables of the XA
        transactions this read saw prepared, and, unless this is a chunk window's read, every captured table (the
        prepare may be in an earlier read; a window's SELECT does not see the rows of a transaction prepared
        before it). Each of those tables not covered or held is re-snapshotted."""
        at = mark.position
        if mark.kind == UNSURE:
            tables, detail = mark.tables, mark.detail or "a rollback that is not read"
        else:
            tables = mark.tables if self.window else self.schemas
            detail = "a prepared XA transaction rolled back after its rows were read"
        changes = [SchemaChange(RESYNC, t, "ROLLBACK", detail, at) for t in self.schemas
                   if t in tables and t not in self.held and not self.covered(t, at.file, at.pos)]
        self.held |= {c.table for c in changes}
        return changes

    def statement_changes(self, statement: str, database: str | None, file: str, start: int) -> list[SchemaChange]:
        """The schema changes a QUERY event's statement makes to the captured tables (not yet covered). The DDL
        parser is imported at the first such statement: a stream's Python processes start without it."""
        from airflow_cdc_provider.source.ddl import dropped_database, mentions_captured, schema_changes

        dropped = dropped_database(statement) if _DATABASE_WORDS.search(statement) else None
        if dropped is not None:
            changes = [SchemaChange(DROP, t, statement, f"database {dropped} dropped") for t in self.schemas
                       if t.database == dropped]
        elif mentions_captured(statement, self._names):
            changes = schema_changes(statement, database, lambda t: t in self.schemas)
            if self.evolutions is not None:
                self._note_shadows(statement, database, file, start)
        else:
            return []
        here = EventPosition(file, start, 0)
        changes = [c.at(here) for c in changes if not self.covered(c.table, file, start)
                   and not (c.kind == RESYNC and c.table in self.held)]
        if self.evolutions is not None:
            changes = [self._evolved(c, database) if c.kind == RESYNC and c.table in self.versions else c
                       for c in changes]
            for c in changes:  # a shadow copied from the table before this holds rows the table no longer has
                if c.kind in (TRUNCATE, DROP) and c.table in self.versions:
                    self.evolutions.note_shadow(ShadowStatement(c.table, c.table, EMPTIED, statement, database,
                                                                detail=c.detail or c.kind, position=here))
        self.held |= {c.table for c in changes if c.kind == RESYNC}  # one report a table: what follows is held
        return changes

    def _note_shadows(self, statement: str, database: str | None, file: str, start: int) -> None:
        """Keeps what the statement does to online schema change tools' shadow tables of the tables evolved in
        place (``source.online_schema_change``): their swap is applied as the shadow's ALTER. A shadow created
        where the table's snapshot does not hold every change yet may copy a definition the stream never had."""
        from airflow_cdc_provider.source.online_schema_change import shadow_statements

        for note in shadow_statements(statement, database, lambda t: t in self.versions):
            if note.kind != OTHER and self.covered(note.original, file, start):
                note = note.refused("created before the table's snapshot held every change")
            self.evolutions.note_shadow(note.at(EventPosition(file, start, 0)))

    def decoder_for(self, table_id: int, table_map: Any, table: TableId) -> RowDecoder | None:
        """The plan for the library's table map ``table_map`` of ``table_id`` (compiled at first use)."""
        if table_map is None:
            return None
        known = self._decoders.get(table_id)
        if known is None or known[0] is not table_map:  # ids are reused across binlog files: check identity
            plan = RowDecoder.compile(table_map.columns, self.schemas[table], self._canon[table]) if self.compiled else None
            known = self._decoders[table_id] = (table_map, plan)
        return known[1]

    def records_of_images(self, kind: str, table: TableId, images: list[dict[str, Any]], file: str, start: int,
                          ts_ms: int) -> Iterator[ChangeRecord]:
        """The records of a row event decoded by its plan (an update's images alternate before, after)."""
        self.events["compiled"] += 1
        if kind == "update" and len(images) % 2:
            raise ValueError(f"{file}:{start}: an update row event of {table} with an odd number of row images")
        return records_from_images(kind, table, self.schemas[table].key_columns, self._upcast(table, images), file,
                                   start, ts_ms)

    def _upcast(self, table: TableId, images: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Row images decoded with an older version than the stream's newest, as the newest holds them."""
        chain = self.newest.get(table)
        if chain is None:
            return images
        since = self.versions[table].number
        plan = self._origins.get((table, since, len(chain)))
        if plan is None:
            plan = self._origins[(table, since, len(chain))] = list(origins(chain, since).items())

        return [None if image is None else {n: image.get(s) if k == "column" else s for n, (k, s) in plan}
                for image in images]

    def _rows(self, kind: str, event: Any, table: TableId) -> list[dict[str, Any]]:
        canon = self._canon[table]
        self.events["library"] += 1
        rows = []
        for row in event.rows:
            if kind == "update":
                rows.append(
                    {
                        "before_values": canon.from_binlog(row["before_values"], row.get("before_none_sources")),
                        "after_values": canon.from_binlog(row["after_values"], row.get("after_none_sources")),
                    }
                )
            else:
                rows.append({"values": canon.from_binlog(row["values"], row.get("none_sources"))})
        return rows

    def records(self, event: Any, file: str) -> Iterator[ChangeRecord | SchemaChange]:
        if isinstance(event, QueryEvent):
            schema = event.schema.decode() if isinstance(event.schema, bytes) else event.schema
            yield from self.statement_changes(str(event.query), schema or None, file, event_start(event))
            return
        kind = _ROW_KINDS.get(type(event))
        if kind is None or self.skips_rows:
            return
        table = TableId(event.schema, event.table)
        schema = self.schemas.get(table)
        if schema is None or self.covered(table, file, event_start(event)):
            return
        if table in self.held:  # waiting for its re-snapshot: nothing of it is written meanwhile
            return
        table_map = event.table_map[event.table_id]
        decodable, change = self.definition_change(event.table_id, table_map, table, file, event_start(event))
        if change is not None:
            yield change
        if not decodable:
            return
        decoder = self.decoder_for(event.table_id, table_map, table)
        if decoder is not None and decoder.readable(event):
            yield from self.records_of_images(kind, table, decoder.images(event), file, event_start(event),
                                              int(event.timestamp) * 1000)
            return
        images = row_images(kind, self._rows(kind, event, table))
        yield from records_from_images(kind, table, schema.key_columns, self._upcast(table, images), file,
                                       event_start(event), int(event.timestamp) * 1000)


class DefinitionsChanged(RuntimeError):
    """An ALTER the stream applies in place was met and its table's next version recorded: the batch stops
    here, unwritten, and the query starts again from its checkpoint with the new version (the same batch is
    then read with it). ``MARKER`` is how the stream job tells this failure from any other."""

    MARKER = "airflow-cdc: table definition changed"

    def __init__(self, table: TableId, change: SchemaChange, version: TableVersion, more: int = 0) -> None:
        also = f" (and {more} more version(s) after it)" if more else ""
        super().__init__(f"{self.MARKER}: {table} version {version.number} from {change.describe()}{also}; the "
                         "query starts again from its checkpoint with it")
        self.table, self.change, self.version = table, change, version


class Evolutions:
    """What a reader needs to apply ALTERs in place (``pipeline.stream_evolutions.StreamEvolutions``)."""

    def chain(self, table: TableId) -> list[TableVersion]:
        """The versions of ``table`` the stream's query was set up with, numbered 0..n."""
        raise NotImplementedError

    def sink_chain(self, table: TableId) -> list[TableVersion]:
        """The versions the table's sink goes through, one per version of ``chain`` (rows are carried up to
        the newest of these)."""
        raise NotImplementedError

    def starting_version(self, table: TableId) -> TableVersion | None:
        """The version in force where the read starts; None: the table is not evolved in place."""
        raise NotImplementedError

    def known(self, table: TableId, position: EventPosition) -> TableVersion | None:
        """The query's version that starts at ``position`` exactly."""
        raise NotImplementedError

    def settle(self, table: TableId, until: EventPosition,
               covered: Mapping[TableId, tuple[int, ...]] | None = None) -> None:
        """Record the versions of ``table`` from the ALTERs between the batch's start and ``until`` (``covered``:
        the reader's ``covered_through``)."""
        raise NotImplementedError

    def recorded_at(self, table: TableId, position: EventPosition) -> TableVersion | None:
        """The version in force at ``position`` among those recorded now (the query may not know it)."""
        raise NotImplementedError

    def record(self, table: TableId, statement: str, database: str | None, position: EventPosition,
               current: TableVersion) -> TableVersion | str:
        """The next version after ``statement`` (recorded), or why it cannot be applied in place."""
        raise NotImplementedError

    def note_shadow(self, note: ShadowStatement) -> None:
        """Keep a statement about a shadow table of a table evolved in place, for its swap (``record``)."""
        raise NotImplementedError


class BinlogEvents:
    """The events of one replication stream; ``log_file`` is the file of the event last yielded.
    ``library_stream`` is the library's ``BinLogStreamReader`` (not started until iterated)."""

    def __init__(self, stream: BinLogStreamReader) -> None:
        self.library_stream = stream

    @property
    def log_file(self) -> str:
        return self.library_stream.log_file

    def __iter__(self) -> Iterator[Any]:
        for event in self.library_stream:
            if isinstance(event, FormatDescriptionEvent):
                self.library_stream.table_map.clear()  # a new file: table ids may name other tables from here on
                continue
            yield event


@contextlib.contextmanager
def open_stream(
    settings: ConnectionSettings,
    server_id: int,
    start: BinlogOffset,
    schemas: Mapping[TableId, TableSchema],
    blocking: bool = False,
) -> Iterator[BinlogEvents]:
    replication.check_supported()  # before the first connection, not deep inside a read
    stream = BinLogStreamReader(
        connection_settings=settings.replication_kwargs(),
        server_id=server_id,
        log_file=start.file,
        log_pos=start.pos,
        resume_stream=True,
        blocking=blocking,
        only_events=_EVENTS,
        only_schemas=sorted({t.database for t in schemas}),
        only_tables=sorted({t.table for t in schemas}),
        is_mariadb=False,
        enable_logging=False,
        freeze_schema=True,
        pymysql_wrapper=SourceConnection,
    )
    try:
        yield BinlogEvents(stream)
    finally:
        stream.close()


def read_changes_between(
    settings: ConnectionSettings,
    server_id: int,
    start: BinlogOffset,
    stop: BinlogOffset,
    schemas: Mapping[TableId, TableSchema],
    reader: TableChangeReader | None = None,
) -> Iterator[ChangeRecord | SchemaChange]:
    """Row changes of ``schemas``' tables written in ``[start, stop)``, and the schema changes of those tables,
    in binlog order (``reader``: the decoder, ``TableChangeReader(schemas)`` by default).

    ``start`` and ``stop`` are transaction boundaries (watermarks). Reading stops at the first event at or
    past ``stop``, so the cost is the size of the window, not of the binlog after it.
    """
    if not stop > start:
        return
    reader = reader or TableChangeReader(schemas)
    for item in committed(_events_read(settings, server_id, start, stop, schemas, reader),
                          transactional_tables(partial(connect, settings))):
        if isinstance(item, TransactionMark):
            yield from reader.passed_on(item)
        else:
            yield item


def _events_read(settings: ConnectionSettings, server_id: int, start: BinlogOffset, stop: BinlogOffset,
                 schemas: Mapping[TableId, TableSchema],
                 reader: TableChangeReader) -> Iterator[ChangeRecord | SchemaChange | TransactionMark]:
    """``read_changes_between`` with the transactions' marks, every row as logged."""
    stop_key = stop.sort_key[:2]
    if reader.compiled:
        from airflow_cdc_provider.source.binlog_packets import PacketReader

        with open_stream(settings, server_id, start, schemas) as stream:
            yield from PacketReader(stream.library_stream, reader, start.file).changes(stop_key)
        return
    with open_stream(settings, server_id, start, schemas) as stream:
        for event in stream:
            file = stream.log_file
            here = BinlogOffset(file, event_start(event)).sort_key[:2]
            if here >= stop_key:
                break
            mark = _library_mark(event, file)
            if mark is not None:
                yield mark
            else:
                yield from reader.records(event, file)


def _library_mark(event: Any, file: str) -> TransactionMark | None:
    """The transaction mark a library event is (as ``PacketReader`` reads them from the packets), else None."""
    if isinstance(event, XidEvent):
        return COMMITTED
    if isinstance(event, XAPrepareEvent):
        return PREPARED_GROUP
    if isinstance(event, (MariadbGtidEvent, GtidEvent)):
        return GROUP_STARTS
    if isinstance(event, QueryEvent):
        return transaction_mark(str(event.query), EventPosition(file, event_start(event), 0))
    return None
