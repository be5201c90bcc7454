"""Reading a bounded binlog range packet by packet, without the library's per-event objects.

python-mysql-replication wraps every packet in a ``BinLogPacketWrapper`` and an event object before its
filters look at it; with the rows decoded by compiled plans (``row_decoder.py``) that framing was about two
thirds of the decode (cProfile, 60k sysbench changes: ten events per transaction, of which four carry rows).
Here the replication connection's packets are read directly, as bytes (``replication.packet_reader``, without
even PyMySQL's packet object): the 19-byte header says the type and place of each event; GTID, XID and known
TABLE_MAP events are passed by their header alone, and a row event of a captured table is decoded from its bytes
by the table's plan. A QUERY event's statement is read from its bytes and classified only when it names a
captured table (``TableChangeReader.statement_changes``).

The library still does what is rare or intricate: it opens the connection (checksum, MariaDB capabilities,
``COM_BINLOG_DUMP``), parses each FORMAT_DESCRIPTION and each new TABLE_MAP of a captured table (column
types and FULL metadata), and decodes any row event the plan cannot (``TableChangeReader``'s fallback). It gets
the bytes as PyMySQL's packet, unread, exactly as its own loop would. What of the library is not public is
reached through ``replication.py`` only.
"""

from __future__ import annotations

import struct
from dataclasses import replace
from typing import Any, Iterator

from pymysql.charset import charset_by_id
from pymysqlreplication import BinLogStreamReader
from pymysqlreplication.constants import BINLOG

from airflow_cdc_provider.compat import replication
from airflow_cdc_provider.core.chunks import TableId
from airflow_cdc_provider.core.offsets import EventPosition, split_binlog_file
from airflow_cdc_provider.core.records import ChangeRecord
from airflow_cdc_provider.core.schema_changes import SchemaChange
from airflow_cdc_provider.source.transactions import (
    COMMITTED, GROUP_STARTS, PREPARED_GROUP, TransactionMark, transaction_mark,
)
from airflow_cdc_provider.source.values import string_codec

_HEADER = struct.Struct("<IBIIIH")  # after the OK byte: timestamp, type, server id, size, next position, flags
_BODY = 20  # OK byte + 19-byte event header
_ROW_KINDS = {
    BINLOG.WRITE_ROWS_EVENT_V1: ("insert", 8), BINLOG.UPDATE_ROWS_EVENT_V1: ("update", 8),
    BINLOG.DELETE_ROWS_EVENT_V1: ("delete", 8), BINLOG.WRITE_ROWS_EVENT_V2: ("insert", 10),
    BINLOG.UPDATE_ROWS_EVENT_V2: ("update", 10), BINLOG.DELETE_ROWS_EVENT_V2: ("delete", 10),
}
_NOT_A_PLACE = {BINLOG.ROTATE_EVENT, BINLOG.FORMAT_DESCRIPTION_EVENT, BINLOG.HEARTBEAT_LOG_EVENT}
# Row events neither this reader nor the library can decode; skipping one would lose its rows silently.
_PARTIAL_UPDATE_ROWS = 39  # MySQL
_UNDECODABLE_ROWS = {**dict.fromkeys(range(166, 172), "MariaDB log_bin_compress=ON"),  # compressed, V1 and V2
                     _PARTIAL_UPDATE_ROWS: "MySQL binlog_row_value_options=PARTIAL_JSON"}
_TRANSACTION_PAYLOAD = 40  # MySQL binlog_transaction_compression=ON: a whole transaction, tables unknown


def _table_id(data: bytes) -> int:
    """The table id of a TABLE_MAP or row event packet (the first 6 bytes after the event header)."""
    return int.from_bytes(data[_BODY:_BODY + 6], "little")


# statements that open or close a transaction, passed without decoding (the prefix of the query's bytes)
_TRANSACTION_STATEMENTS = (b"BEGIN", b"COMMIT", b"ROLLBACK", b"SAVEPOINT", b"XA ", b"# Dummy")


def _statement(data: bytes, checksum: int) -> tuple[str | None, str] | TransactionMark | None:
    """A QUERY event's ``(current database, statement)``; its ``TransactionMark`` for a statement about the
    transaction (BEGIN, COMMIT, ROLLBACK, SAVEPOINT, XA), None for another that changes nothing. After the
    header: thread id (4), time (4), database name length (1), error code (2), status block length (2), the
    status block, the database name and a NUL, then the statement."""
    at = _BODY + 8
    db_len = data[at]
    status_len = int.from_bytes(data[at + 3:at + 5], "little")
    status = data[at + 5:at + 5 + status_len]
    at += 5 + status_len
    database = data[at:at + db_len].decode("utf-8", "replace") or None
    query = data[at + db_len + 1:len(data) - checksum]
    if query.startswith(_TRANSACTION_STATEMENTS):
        return transaction_mark(query.decode("utf-8", "replace"))
    return database, query.decode(_client_codec(status), "replace")


# lengths of the QUERY event's status variables, by code (the server writes Q_CATALOG_NZ_CODE, 6, before
# Q_CHARSET_CODE, 4); those of variable length start with their length byte, and Q_CATALOG_CODE ends in a NUL
_STATUS_FIXED = {0: 4, 1: 8, 3: 4, 7: 2, 8: 2, 9: 8, 10: 4, 13: 3, 128: 3, 129: 8}
_STATUS_COUNTED = {2: 1, 5: 0, 6: 0}
_Q_CHARSET_CODE = 4


def _client_codec(status: bytes) -> str:
    """The codec of the session's character_set_client, in which the server logged the statement's text (the
    status variable ``Q_CHARSET_CODE``); utf-8 when it is not there or not known."""
    i = 0
    while i < len(status):
        code = status[i]
        if code == _Q_CHARSET_CODE:
            if i + 3 > len(status):
                break
            try:
                codec = string_codec(charset_by_id(int.from_bytes(status[i + 1:i + 3], "little")).name)
            except KeyError:  # a collation pymysql does not know
                break
            return codec if isinstance(codec, str) else "utf-8"  # binary, or a character set we do not read
        if code in _STATUS_FIXED:
            i += 1 + _STATUS_FIXED[code]
        elif code in _STATUS_COUNTED:
            i += 2 + status[i + 1] + _STATUS_COUNTED[code] if i + 1 < len(status) else len(status)
        else:  # a variable whose length is not known here
            break
    return "utf-8"


def _length_coded(data: bytes, pos: int) -> tuple[int, int]:
    first = data[pos]
    if first < 251:
        return first, pos + 1
    size = {252: 2, 253: 3, 254: 8}[first]
    return int.from_bytes(data[pos + 1:pos + 1 + size], "little"), pos + 1 + size


class PacketReader:
    """The row changes of one library stream (``stream``, not yet started) up to ``stop_key``; ``reader`` is
    the ``TableChangeReader`` that owns the compiled plans and the library fallback."""

    def __init__(self, stream: BinLogStreamReader, reader: Any, file: str) -> None:
        self.stream = stream
        self.reader = reader
        self.file = file
        self.tables: dict[int, TableId | None] = {}  # table id -> captured table, or None (skipped undecoded)
        self.post_header: bytes | list[int] = b""

    # -- the library, for what is rare ----------------------------------------------------------------
    def _new_file(self) -> None:
        """Table ids may name other tables from here on (a server restart starts a new file)."""
        self.tables.clear()
        self.stream.table_map.clear()

    def _table_map(self, data: bytes, table_id: int) -> TableId | None:
        """A table id seen for the first time in this file: the library parses its TABLE_MAP (once)."""
        event = replication.library_event(self.stream, replication.as_packet(self.stream, data))
        if event is None:  # a table the library's schema/table filters leave out
            return None
        table = TableId(event.schema, event.table)
        if table not in self.reader.schemas:
            return None
        self.stream.table_map[table_id] = event.get_table()
        return table

    # -- the loop ---------------------------------------------------------------------------------------
    def changes(self, stop_key: tuple[int, int]) -> Iterator[ChangeRecord | SchemaChange | TransactionMark]:
        s = self.stream
        replication.connect(s)
        checksum = 4 if replication.uses_checksum(s) else 0
        read = replication.packet_reader(s)
        seq = split_binlog_file(self.file)[1]
        while True:
            data = read()
            if data is None:
                return
            if data[0] != 0:
                continue
            timestamp, kind, _, size, next_pos, _ = _HEADER.unpack_from(data, 1)
            if kind == BINLOG.ROTATE_EVENT:
                self.file = data[_BODY + 8:len(data) - checksum].decode()
                seq = split_binlog_file(self.file)[1]
                if timestamp:
                    self._new_file()
                continue
            if kind == BINLOG.FORMAT_DESCRIPTION_EVENT:
                self._new_file()
                event = replication.library_event(s, replication.as_packet(s, data))
                if event is not None:
                    s.mysql_version = event.mysql_version
                    self.post_header = event.post_header_len
                    replication.set_post_header_lengths(s, self.post_header)
                continue
            if kind in _NOT_A_PLACE or not next_pos:
                continue
            if (seq, next_pos - size) >= stop_key:
                return
            if kind == BINLOG.TABLE_MAP_EVENT:
                table_id = _table_id(data)
                if table_id not in self.tables:
                    self.tables[table_id] = self._table_map(data, table_id)
                continue
            if kind == BINLOG.QUERY_EVENT:
                statement = _statement(data, checksum)
                if isinstance(statement, TransactionMark):
                    yield replace(statement, position=EventPosition(self.file, next_pos - size, 0))
                elif statement is not None:
                    yield from self.reader.statement_changes(statement[1], statement[0], self.file, next_pos - size)
                continue
            if kind == BINLOG.XID_EVENT:
                yield COMMITTED
                continue
            if kind == BINLOG.XA_PREPARE_EVENT:
                yield PREPARED_GROUP
                continue
            if kind in (BINLOG.MARIADB_GTID_EVENT, BINLOG.GTID_LOG_EVENT):
                yield GROUP_STARTS
                continue
            row_kind = _ROW_KINDS.get(kind)
            if row_kind is None:
                if kind in _UNDECODABLE_ROWS or kind == _TRANSACTION_PAYLOAD:
                    self._undecodable(data, kind, next_pos - size)
                continue
            table_id = _table_id(data)
            table = self.tables.get(table_id)
            if (table is None or table in self.reader.held or self.reader.skips_rows
                    or self.reader.covered(table, self.file, next_pos - size)):
                continue
            decodable, change = self.reader.definition_change(table_id, self.stream.table_map.get(table_id), table,
                                                              self.file, next_pos - size)
            if change is not None:
                yield change
            if not decodable:
                continue
            records = self._compiled(data, kind, row_kind, table_id, table, next_pos - size, timestamp, checksum)
            if records is None:  # the library decodes it
                event = replication.library_event(s, replication.as_packet(s, data))
                records = self.reader.records(event, self.file) if event is not None else ()
            yield from records

    def _undecodable(self, data: bytes, kind: int, start: int) -> None:
        """Raise for a compressed or partial row event of a captured table (or a compressed transaction, whose
        tables cannot be known): its rows cannot be read, and a CDC stream must not skip them."""
        from airflow_cdc_provider.source.server import SourceError

        if kind == _TRANSACTION_PAYLOAD:
            what, setting = "a compressed transaction", "MySQL binlog_transaction_compression=ON"
            fix = "SET GLOBAL binlog_transaction_compression=OFF"
        else:
            table = self.tables.get(_table_id(data))
            if table is None:
                return
            what, setting = f"a row event of {table} that cannot be decoded", _UNDECODABLE_ROWS[kind]
            fix = ("SET GLOBAL binlog_row_value_options=''" if kind == _PARTIAL_UPDATE_ROWS
                   else "SET GLOBAL log_bin_compress=OFF")
        raise SourceError(
            f"{self.file}:{start}: {what} ({setting}); skipping it would lose its rows: run {fix} and set it in "
            "the server config, then re-snapshot the captured tables (their changes written meanwhile are only in "
            "such events)")

    def _compiled(self, data: bytes, kind: int, row_kind: tuple[str, int], table_id: int, table: TableId,
                  start: int, timestamp: int, checksum: int):
        """The event's records by the table's plan, or None for the library (no plan, not a FULL image, a
        post-header of another length than the known one)."""
        name, post = row_kind
        if len(self.post_header) >= kind and self.post_header[kind - 1] != post:
            return None
        decoder = self.reader.decoder_for(table_id, self.stream.table_map.get(table_id), table)
        if decoder is None:
            return None
        at = _BODY + 8
        if post == 10:
            at += int.from_bytes(data[at:at + 2], "little")  # extra data, its length included
        width, at = _length_coded(data, at)
        present = decoder.all_present
        if width != decoder.width or data[at:at + len(present)] != present:
            return None
        at += len(present)
        if name == "update":
            if data[at:at + len(present)] != present:
                return None
            at += len(present)
        images = decoder.images_between(data, at, len(data) - checksum)
        return self.reader.records_of_images(name, table, images, self.file, start, timestamp * 1000)
