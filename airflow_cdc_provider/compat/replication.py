"""The one place that reaches into python-mysql-replication's (and PyMySQL's) internals.

The packet reader (``binlog_packets.py``) and the compiled row decoder (``row_decoder.py``) read binlog packets
themselves and hand the library only what is rare. Doing so needs what the library keeps private: its connect
steps, its checksum setting, the 17 positional arguments of ``BinLogPacketWrapper``, the replication
connection's socket file and packet sequence number (read here as PyMySQL reads them) and the read position inside
a packet. None of that is a promise of the library; a
release may rename or reorder any of it, and a wrongly ordered argument would decode silently wrong.

So every such name is used here and nowhere else, and ``check_supported`` refuses, before the first connection,
a library outside the versions this was written and tested against, or one that lacks any of these internals,
with one error that says what to install.

``check_supported`` also gives the library's row events the provider's readers where the library's own are
wrong (``install_readers``): the library is the fallback and the reference of the compiled row decoder, and
both must give the server's values.
"""

from __future__ import annotations

import inspect
import struct
from types import SimpleNamespace
from typing import Any, Callable

from pymysql import err
from pymysql.connections import MAX_PACKET_LEN, Connection
from pymysql.constants import CR
from pymysql.protocol import MysqlPacket
from pymysqlreplication import BinLogStreamReader
from pymysqlreplication.constants import CHARSET
from pymysqlreplication.packet import BinLogPacketWrapper
from pymysqlreplication.row_event import RowsEvent

from airflow_cdc_provider.compat import versions
from airflow_cdc_provider.source.server import SourceError

DISTRIBUTION = "mysql-replication"
SUPPORTED = ">=1.0.17,<1.1"  # as setup.cfg's install_requires
INSTALL = f"pip install '{DISTRIBUTION}{SUPPORTED}'"

# The reader's private attributes used here, set by its __init__ (hence checked on an instance).
_READER_ATTRIBUTES = tuple(f"_BinLogStreamReader__{name}" for name in (
    "connected_stream", "connected_ctl", "use_checksum", "allowed_events_in_packet", "only_tables",
    "ignored_tables", "only_schemas", "ignored_schemas", "freeze_schema", "ignore_decode_errors",
    "verify_checksum", "optional_meta_data", "enable_logging", "use_column_name_cache", "post_header_lengths",
)) + ("table_map", "mysql_version")
_READER_METHODS = ("_BinLogStreamReader__connect_to_stream", "_BinLogStreamReader__connect_to_ctl")
# BinLogPacketWrapper's parameters, in the order ``library_event`` passes them.
_WRAPPER_PARAMETERS = (
    "from_packet", "table_map", "ctl_connection", "mysql_version", "use_checksum", "allowed_events",
    "only_tables", "ignored_tables", "only_schemas", "ignored_schemas", "freeze_schema", "ignore_decode_errors",
    "verify_checksum", "optional_meta_data", "enable_logging", "use_column_name_cache", "post_header_lengths",
)
_WRAPPER_ATTRIBUTES = ("_BinLogPacketWrapper__data_buffer", "read_bytes", "packet")
_PACKET_ATTRIBUTES = ("_data", "_position", "raise_for_error")
_CONNECTIONS = ("_stream_connection", "_ctl_connection")  # set by the reader's connect steps
# The row event's column readers that ``install_readers`` replaces (called by the library as self.__read_time2, ...).
_ROWS_EVENT_READERS = ("_RowsEvent__read_time2", "_RowsEvent__read_date", "charset_to_encoding")

_supported = False  # check_supported passed once in this process


class UnsupportedLibrary(versions.UnsupportedLibrary, SourceError):
    """The installed python-mysql-replication is not one whose internals this provider was written against."""


def installed_version() -> str:
    return versions.installed_version(DISTRIBUTION)


def check_supported() -> None:
    """Refuse an unsupported python-mysql-replication before anything relies on its internals (once per
    process: the installed library does not change under a running process)."""
    global _supported
    if _supported:
        return
    check_library(installed_version())
    install_readers()
    _supported = True


def install_readers() -> None:
    """Replace the library's column readers that give wrong values or fail on values the server stores, class-wide
    (every decode in this process then agrees with the compiled row decoder):

    * TIME2: a negative time with a fraction comes out as -(s + 1 - f) instead of -(s + f) (the library reads the
      fraction apart from the seconds it borrowed from); ``row_decoder.read_time2`` reads the whole;
    * DATE: an invalid day (stored under ``ALLOW_INVALID_DATES``) raises; ``row_decoder.read_date`` says None;
    * the codec of a character set: pymysql's names decode utf16 and utf32 in the wrong byte order, keep ucs2
      and utf16le as bytes and raise on bytes latin1, ascii and cp125x columns hold; ``values.string_codec``
      names the exact codec (other character sets keep the library's choice; validation refuses them)."""
    if getattr(RowsEvent, "_cdc_readers", False):
        return
    from airflow_cdc_provider.source import row_decoder, values

    library_encoding = RowsEvent.__dict__["charset_to_encoding"].__func__

    def read_time2(self: Any, column: Any) -> Any:
        return row_decoder.read_time2(self.packet.read(3 + (column.fsp + 1) // 2), column.fsp)

    def read_date(self: Any) -> Any:
        return row_decoder.read_date(self.packet.read(3))

    def charset_to_encoding(name: str) -> Any:
        codec = values.string_codec(library_charset(name))
        return codec if isinstance(codec, str) else library_encoding(name)

    RowsEvent._RowsEvent__read_time2 = read_time2
    RowsEvent._RowsEvent__read_date = read_date
    RowsEvent.charset_to_encoding = staticmethod(charset_to_encoding)
    RowsEvent._cdc_readers = True


def check_library(version: str, reader_class: type = BinLogStreamReader,
                  wrapper_class: type = BinLogPacketWrapper) -> None:
    """Raise ``UnsupportedLibrary`` unless ``version`` is in ``SUPPORTED`` and the classes have every internal
    used here: a renamed attribute would otherwise surface as an AttributeError deep in a read, and a reordered
    ``BinLogPacketWrapper`` argument as silently wrong values."""
    versions.require("python-mysql-replication", version, SUPPORTED, INSTALL, "reads its internals",
                     lambda: missing_internals(reader_class, wrapper_class), UnsupportedLibrary)


def missing_internals(reader_class: type = BinLogStreamReader,
                      wrapper_class: type = BinLogPacketWrapper) -> list[str]:
    """What this module uses that the classes lack, checked on throwaway instances (no connection is opened):
    most of the names are instance attributes set by the constructors."""
    missing = [f"{reader_class.__name__}.{name}" for name in _READER_METHODS
               if not callable(getattr(reader_class, name, None))]
    if not callable(getattr(Connection, "_force_close", None)):
        missing.append("pymysql Connection._force_close")
    missing += [f"RowsEvent.{name}" for name in _ROWS_EVENT_READERS if name not in RowsEvent.__dict__]
    if not isinstance(getattr(getattr(CHARSET, "charsets", None), "_by_id", None), dict):
        missing.append("pymysqlreplication.constants.CHARSET.charsets._by_id")
    try:
        reader = reader_class(connection_settings={}, server_id=1, enable_logging=False)
    except Exception as e:  # noqa: BLE001 - any failure means the constructor is not the one known here
        missing.append(f"{reader_class.__name__}(connection_settings, server_id, enable_logging): {e!r}")
    else:
        missing += [f"{reader_class.__name__}().{name}" for name in _READER_ATTRIBUTES if not hasattr(reader, name)]
    try:
        parameters = tuple(inspect.signature(wrapper_class.__init__).parameters)[1:]
    except (TypeError, ValueError) as e:
        parameters = (repr(e),)
    if parameters != _WRAPPER_PARAMETERS:
        missing.append(f"{wrapper_class.__name__}.__init__ parameters ({', '.join(_WRAPPER_PARAMETERS)}), "
                       f"found ({', '.join(parameters)})")
        return missing
    # A header-only packet of an event type nobody asked for: the wrapper reads the header and stops.
    packet = MysqlPacket(b"\x00" + struct.pack("<IBIIIH", 0, 0, 1, 19, 0, 0), "utf8")
    try:
        wrapper = wrapper_class(packet, {}, SimpleNamespace(charset="utf8"), (0, 0, 0), False, frozenset(),
                                None, None, None, None, False, False, False, False, False, False, None)
    except Exception as e:  # noqa: BLE001 - as above
        missing.append(f"{wrapper_class.__name__} of a header-only packet: {e!r}")
    else:
        missing += [f"{wrapper_class.__name__}().{name}" for name in _WRAPPER_ATTRIBUTES if not hasattr(wrapper, name)]
    missing += [f"pymysql MysqlPacket().{name}" for name in _PACKET_ATTRIBUTES if not hasattr(packet, name)]
    return missing


# -- character sets ---------------------------------------------------------------------------------------------
# The library names a string column's character set by the Python encoding of its own charset table (a table map
# gives collation ids), which is the server's name but for these.
_LIBRARY_CHARSETS = {"cp1252": "latin1", "koi8_r": "koi8r", "koi8_u": "koi8u", "utf8": "utf8mb4"}


def library_charset(name: str | None) -> str | None:
    """The server's character set of a library table map column's ``character_set_name``."""
    return _LIBRARY_CHARSETS.get(name, name) if name is not None else None


def library_knows_collation(collation: str, mariadb: bool) -> bool:
    """Whether the library's charset table has ``collation``: a table map names a column's collation by id, and
    the library takes an id it does not know for utf8 (MariaDB 10.10+'s uca1400 collations, for one)."""
    dbms = "mariadb" if mariadb else "mysql"
    return any(c.collation == collation for c in CHARSET.charsets._by_id.get(dbms, {}).values())


# -- the stream ---------------------------------------------------------------------------------------------
def connect(stream: BinLogStreamReader) -> None:
    """Open the replication and control connections as the library's ``fetchone`` does before its first read,
    so that the packets read here follow the library's own handshake (checksum, MariaDB capabilities,
    ``COM_BINLOG_DUMP``)."""
    check_supported()
    if not stream._BinLogStreamReader__connected_stream:
        stream._BinLogStreamReader__connect_to_stream()
    if not stream._BinLogStreamReader__connected_ctl:  # (the stream's connect may have opened it already)
        stream._BinLogStreamReader__connect_to_ctl()
    missing = [name for name in _CONNECTIONS if not hasattr(stream, name)]
    if missing:
        raise UnsupportedLibrary(
            f"python-mysql-replication {installed_version()}: its connect steps no longer set {', '.join(missing)}; "
            f"supported: {DISTRIBUTION}{SUPPORTED}; reinstall a supported version: {INSTALL}")


def packet_reader(stream: BinLogStreamReader) -> Callable[[], bytes | None]:
    """The replication connection's packets (after ``connect``) as bytes, None at the end of the stream: what
    PyMySQL's own packet read does (the sequence check, packets of 16 MiB and more joined, an error packet
    raised as its error, a lost connection as ``OperationalError``), without a packet object per binlog event.
    To bind once before a packet loop; ``as_packet`` makes the library's packet of one when it is needed."""
    conn: Connection = stream._stream_connection
    conn._sock.settimeout(conn._read_timeout)
    conn._current_timeout = conn._read_timeout
    read_exactly = conn._rfile.read

    def received(size: int) -> bytes:
        try:
            data = read_exactly(size)
        except OSError as exc:
            conn._force_close()
            raise err.OperationalError(CR.CR_SERVER_LOST, f"Lost connection to MySQL server during query ({exc})")
        if len(data) < size:
            conn._force_close()
            raise err.OperationalError(CR.CR_SERVER_LOST, "Lost connection to MySQL server during query")
        return data

    def read() -> bytes | None:
        parts = []
        while True:
            header = received(4)
            size, seq = header[0] | header[1] << 8 | header[2] << 16, header[3]
            if seq != conn._next_seq_id:
                conn._force_close()
                if seq == 0:  # MariaDB's error packet when it shuts down
                    raise err.OperationalError(CR.CR_SERVER_LOST, "Lost connection to MySQL server during query")
                raise err.InternalError(f"Packet sequence number wrong - got {seq} expected {conn._next_seq_id}")
            conn._next_seq_id = (seq + 1) & 0xFF
            parts.append(received(size))
            if size < MAX_PACKET_LEN:
                break
        data = parts[0] if len(parts) == 1 else b"".join(parts)
        if data[0] == 0xFF:
            MysqlPacket(data, conn.encoding).raise_for_error()
        if data[0] == 0xFE and len(data) < 9:  # EOF: the end of a non-blocking dump
            return None
        return data

    return read


def as_packet(stream: BinLogStreamReader, data: bytes) -> MysqlPacket:
    """The PyMySQL packet of bytes ``packet_reader`` returned, unread, as the library's reader would get it."""
    return MysqlPacket(data, stream._stream_connection.encoding)


def uses_checksum(stream: BinLogStreamReader) -> bool:
    """Whether each event ends in a 4-byte CRC32 (the server's binlog_checksum, read by ``connect``)."""
    return stream._BinLogStreamReader__use_checksum


def set_post_header_lengths(stream: BinLogStreamReader, lengths: Any) -> None:
    """Keep the library's post-header lengths those of the last FORMAT_DESCRIPTION, as ``fetchone`` does: the
    library's row events read their post-header by them."""
    stream._BinLogStreamReader__post_header_lengths = lengths


def library_event(stream: BinLogStreamReader, packet: Any) -> Any:
    """The library's event of a packet (None for one its filters leave out), made exactly as ``fetchone``
    makes it: the same wrapper, with the stream's own settings."""
    s = stream
    return BinLogPacketWrapper(
        packet, s.table_map, s._ctl_connection, s.mysql_version, s._BinLogStreamReader__use_checksum,
        s._BinLogStreamReader__allowed_events_in_packet, s._BinLogStreamReader__only_tables,
        s._BinLogStreamReader__ignored_tables, s._BinLogStreamReader__only_schemas,
        s._BinLogStreamReader__ignored_schemas, s._BinLogStreamReader__freeze_schema,
        s._BinLogStreamReader__ignore_decode_errors, s._BinLogStreamReader__verify_checksum,
        s._BinLogStreamReader__optional_meta_data, s._BinLogStreamReader__enable_logging,
        s._BinLogStreamReader__use_column_name_cache, s._BinLogStreamReader__post_header_lengths,
    ).event


# -- a library row event --------------------------------------------------------------------------------------
def row_body(event: Any) -> tuple[bytes, int, int] | None:
    """The packet bytes of a library row event and the ``[start, end)`` of its row images (checksum excluded),
    still unread by the library; None once the library has pushed bytes back into its own buffer, for then the
    packet's position is no longer where the images start."""
    wrapper = event.packet
    if wrapper._BinLogPacketWrapper__data_buffer:
        return None
    packet = wrapper.packet
    pos = packet._position
    return packet._data, pos, pos + event.event_size - wrapper.read_bytes
