"""Reading row changes from the binlog with python-mysql-replication.

Positions: ``packet.log_pos`` is where an event *ends*; it starts at ``log_pos - packet.event_size``. The
current file comes from the stream, which follows rotate events. Reads always start at a transaction
boundary (a watermark or checkpoint): starting inside a transaction makes the library skip the rows whose
TABLE_MAP it never saw, silently.

``is_mariadb`` stays False for file/position reads: with True, the library ignores ``log_file``/``log_pos``
and replays from the first binlog (feasibility pitfall P11). GTID and row events of MariaDB are still
decoded because the library announces MariaDB capabilities anyway.

Every reader connects as a replica and needs a server id no other replica uses at the same time; the
server disconnects the older of two replicas with the same id.
"""

from __future__ import annotations

import contextlib
from typing import Any, Iterator, Mapping

from pymysqlreplication import BinLogStreamReader
from pymysqlreplication.event import MariadbGtidEvent, QueryEvent, XidEvent
from pymysqlreplication.row_event import DeleteRowsEvent, UpdateRowsEvent, WriteRowsEvent

from ..core.chunks import TableId
from ..core.offsets import BinlogOffset
from ..core.records import ChangeRecord, records_from_row_event
from .schema import TableSchema
from .settings import ConnectionSettings
from .values import RowCanonicalizer

_ROW_KINDS = {WriteRowsEvent: "insert", UpdateRowsEvent: "update", DeleteRowsEvent: "delete"}
# Transaction events are requested too, so that a bounded read notices it passed its stop position even
# when the captured tables see no change at all.
_EVENTS = [WriteRowsEvent, UpdateRowsEvent, DeleteRowsEvent, XidEvent, MariadbGtidEvent, QueryEvent]


def event_start(event: Any) -> int:
    return int(event.packet.log_pos) - int(event.packet.event_size)


class TableChangeReader:
    """Decodes row events of the given tables into ``ChangeRecord``s (canonical values, split key changes)."""

    def __init__(self, schemas: Mapping[TableId, TableSchema]) -> None:
        self.schemas = dict(schemas)
        self._canon = {t: RowCanonicalizer(s) for t, s in self.schemas.items()}

    def records(self, event: Any, file: str) -> Iterator[ChangeRecord]:
        kind = _ROW_KINDS.get(type(event))
        if kind is None:
            return
        table = TableId(event.schema, event.table)
        schema = self.schemas.get(table)
        if schema is None:
            return
        canon = self._canon[table]
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
        yield from records_from_row_event(
            kind, table, schema.key_columns, rows, file, event_start(event), int(event.timestamp) * 1000
        )


@contextlib.contextmanager
def open_stream(
    settings: ConnectionSettings,
    server_id: int,
    start: BinlogOffset,
    schemas: Mapping[TableId, TableSchema],
    blocking: bool = False,
) -> Iterator[BinLogStreamReader]:
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
    )
    try:
        yield stream
    finally:
        stream.close()


def read_changes_between(
    settings: ConnectionSettings,
    server_id: int,
    start: BinlogOffset,
    stop: BinlogOffset,
    schemas: Mapping[TableId, TableSchema],
) -> Iterator[ChangeRecord]:
    """Row changes of ``schemas``' tables written in ``[start, stop)``, in binlog order.

    ``start`` and ``stop`` are transaction boundaries (watermarks). Reading stops at the first event at or
    past ``stop``, so the cost is the size of the window, not of the binlog after it.
    """
    if not stop > start:
        return
    reader = TableChangeReader(schemas)
    stop_key = stop.sort_key[:2]
    with open_stream(settings, server_id, start, schemas) as stream:
        for event in stream:
            file = stream.log_file
            here = BinlogOffset(file, event_start(event)).sort_key[:2]
            if here >= stop_key:
                break
            yield from reader.records(event, file)
