"""One canonical Python value per column, whichever way the row was read.

The same row state must look the same whether it came from a SELECT (pymysql) or from the binlog
(python-mysql-replication), otherwise the snapshot and the stream disagree and the backfill cannot match
keys. The two drivers differ on a few types:

===============  =====================  ===========================  =====================================
type             SELECT (pymysql)       binlog                       canonical
===============  =====================  ===========================  =====================================
BIT(n)           bytes, big-endian      str of '0'/'1'               int
SET              'a,b'                  {'a', 'b'}                   'a,b' (definition order)
BINARY(n)        n bytes, zero-padded   trailing zero bytes dropped  n bytes, zero-padded
FLOAT            CAST AS DOUBLE: exact  float32 (0.10000000149...)   the float32 value, as a Python float
FLOAT(M,D),      text, D decimals       the stored float/double      the value as SELECT prints it (rounded
DOUBLE(M,D)                                                          to D decimals), float32 for FLOAT
TIMESTAMP        session time zone      UTC                          UTC (source sessions use +00:00)
zero TIMESTAMP   '0000-00-00 ...' str   1970-01-01 00:00:00          None
zero / invalid   '0000-00-00' str       None                         None (also year 0, which Python's
DATE, DATETIME                                                       datetime cannot hold)
YEAR 0000        0                      1900                         0
INET4, INET6     text                   4 / 16 bytes, trailing       text as MariaDB prints it
                                        zero bytes dropped
UUID             text                   16 bytes, trailing zero      text as MariaDB prints it
                                        bytes dropped
empty SET        ''                     None (none_source 'empty     ''
                                        set')
empty BLOB       b''                    '' (str)                     b''
===============  =====================  ===========================  =====================================

Everything else already agrees on MariaDB 10.11 (tests/component/test_type_fidelity.py checks every type):
TINYINT..BIGINT signed and unsigned (BIGINT UNSIGNED max included), DECIMAL(65,30) as ``Decimal``, DOUBLE,
CHAR/VARCHAR/TEXT (emoji) as ``str``, VARBINARY/BLOB and the spatial types (SRID + WKB, as stored) as
``bytes``, DATE, DATETIME(0..6) as naive ``datetime``, TIME (negative and fractional) as ``timedelta``, YEAR
as ``int``, ENUM as ``str``, JSON as its text (MariaDB stores JSON as LONGTEXT), NULL as ``None``.

Strings are decoded from the binlog by ``string_codec``: per character set, the codec that gives exactly
what the server's own conversion to utf8mb4 gives (checked byte by byte against the server in
tests/component/test_type_fidelity.py). Character sets for which Python has no such codec are not in
``CHARSET_CODECS``; validation refuses their columns.
"""

from __future__ import annotations

import codecs
import datetime as dt
import struct
import uuid
from typing import Any, Callable, Mapping, Sequence

from airflow_cdc_provider.source.schema import Column, TableSchema, enum_values

Converter = Callable[[Any], Any]


# -- character sets -----------------------------------------------------------------------------------------
def _single_byte_table(base: str, undecodable: Callable[[int], str]) -> str:
    """A 256-character decoding table: Python's codec ``base`` where it decodes a byte, ``undecodable(byte)``
    where it does not (what MariaDB's conversion gives for that byte)."""
    out = []
    for b in range(256):
        try:
            out.append(bytes([b]).decode(base))
        except UnicodeDecodeError:
            out.append(undecodable(b))
    return "".join(out)


# Codecs of our own for the character sets where Python's codec leaves bytes undefined that MariaDB stores
# and converts: latin1 is cp1252 with the C1 control characters in its five holes; in the others MariaDB
# converts such a byte to '?' (U+FFFD for tis620).
_OWN_CODECS = {
    "mariadb_latin1": lambda: _single_byte_table("cp1252", chr),
    "mariadb_ascii": lambda: _single_byte_table("ascii", lambda b: "?"),
    "mariadb_cp1250": lambda: _single_byte_table("cp1250", lambda b: "?"),
    "mariadb_cp1251": lambda: _single_byte_table("cp1251", lambda b: "?"),
    "mariadb_cp1257": lambda: _single_byte_table("cp1257", lambda b: "?"),
    "mariadb_tis620": lambda: _single_byte_table("tis-620", lambda b: "\ufffd"),
}


def _search_own_codec(name: str) -> codecs.CodecInfo | None:
    build = _OWN_CODECS.get(name)
    if build is None:
        return None
    table = build()
    encoding_table = codecs.charmap_build(table)
    return codecs.CodecInfo(
        name=name,
        encode=lambda text, errors="strict": codecs.charmap_encode(text, errors, encoding_table),
        decode=lambda data, errors="strict": codecs.charmap_decode(data, errors, table),
    )


codecs.register(_search_own_codec)

# MariaDB/MySQL character set -> the Python codec that decodes its bytes exactly as the server converts
# them to utf8mb4 (None: binary, the bytes are the value). A character set missing here has characters
# Python decodes differently, or not at all (sjis, big5, gbk, ujis, euckr, cp932, hebrew, greek, ...).
CHARSET_CODECS: dict[str, str | None] = {
    "utf8mb4": "utf-8", "utf8mb3": "utf-8", "utf8": "utf-8",
    "ucs2": "utf-16-be", "utf16": "utf-16-be", "utf16le": "utf-16-le", "utf32": "utf-32-be",
    "latin1": "mariadb_latin1", "ascii": "mariadb_ascii", "cp1250": "mariadb_cp1250",
    "cp1251": "mariadb_cp1251", "cp1257": "mariadb_cp1257", "tis620": "mariadb_tis620",
    "latin2": "iso8859-2", "latin5": "iso8859-9", "latin7": "iso8859-13", "koi8r": "koi8-r",
    "cp850": "cp850", "cp852": "cp852", "macroman": "mac-roman",
    "binary": None,
}
UNSUPPORTED_CHARSET = object()  # string_codec's answer for a character set not in CHARSET_CODECS


def string_codec(charset: str | None) -> Any:
    """The codec both binlog decoders decode a string column of ``charset`` with: a codec name, None to keep
    the bytes (binary), or ``UNSUPPORTED_CHARSET``. No charset (a binlog without row metadata) is utf-8."""
    if charset is None:
        return "utf-8"
    return CHARSET_CODECS.get(charset.lower(), UNSUPPORTED_CHARSET)


# -- values ---------------------------------------------------------------------------------------------------
def _identity(v: Any) -> Any:
    return v


def _bit_from_select(v: Any) -> Any:
    return int.from_bytes(v, "big") if isinstance(v, (bytes, bytearray)) else v


def _bit_from_binlog(v: Any) -> Any:
    return int(v, 2) if isinstance(v, str) else v


def _set_from_binlog(definition: Sequence[str]) -> Converter:
    def convert(v: Any) -> Any:
        if isinstance(v, (set, frozenset, list, tuple)):
            return ",".join(x for x in definition if x in v)
        return v

    return convert


def _float32(v: Any) -> Any:
    return struct.unpack("<f", struct.pack("<f", v))[0] if isinstance(v, float) else v


def rounded_float(decimals: int, single: bool) -> Converter:
    """FLOAT(M,D) / DOUBLE(M,D) as SELECT prints it: the stored value correctly rounded to ``decimals``
    decimals (MariaDB's ``my_fcvt``, as Python's ``format``), float32 again for FLOAT."""
    spec = f".{decimals}f"

    def convert(v: Any) -> Any:
        if not isinstance(v, float):
            return v
        value = float(format(v, spec))
        return struct.unpack("<f", struct.pack("<f", value))[0] if single else value

    return convert


def _pad_binary(length: int) -> Converter:
    def convert(v: Any) -> Any:
        return bytes(v).ljust(length, b"\x00") if isinstance(v, (bytes, bytearray)) else v

    return convert


def _bytes_from_binlog(v: Any) -> Any:
    return v.encode("utf-8") if isinstance(v, str) else v


def _temporal_from_select(v: Any) -> Any:
    """pymysql returns the text of a date it cannot make a ``date``/``datetime`` of (zero dates, zero parts,
    invalid days, year 0); the binlog decoders say None for them, and so does the Spark read."""
    return None if isinstance(v, str) else v


_ZERO_TIMESTAMP = dt.datetime(1970, 1, 1)


def _timestamp_from_binlog(v: Any) -> Any:
    """The zero TIMESTAMP is stored as 0 seconds, which the library reads as the epoch; no other TIMESTAMP
    is the epoch (the range starts at 00:00:01)."""
    return None if v == _ZERO_TIMESTAMP else v


def _year_from_binlog(v: Any) -> Any:
    """The library adds 1900 to the stored byte; 0 is the year 0000, not 1900 (out of YEAR's range)."""
    return 0 if v == 1900 else v


def inet4_text(data: bytes) -> str:
    """An INET4 value as MariaDB prints it."""
    return "%d.%d.%d.%d" % tuple(data.ljust(4, b"\x00"))


def inet6_text(data: bytes) -> str:
    """An INET6 value as MariaDB prints it (``Inet6::to_string``): lower-case groups without leading zeros,
    the first longest run of zero groups (even a single one) as ``::``, and the IPv4-compatible
    (``::1.2.3.4``) and IPv4-mapped (``::ffff:1.2.3.4``) forms. Not RFC 5952 (``ipaddress``,
    ``inet_ntop``), which leaves a single zero group and has no IPv4-compatible form."""
    data = data.ljust(16, b"\x00")
    words = struct.unpack(">8H", data)
    gap, gap_len, run, run_len = -1, 0, -1, 0
    for i, w in enumerate(words):
        if w:
            run = -1
            continue
        if run < 0:
            run, run_len = i, 0
        run_len += 1
        if run_len > gap_len:
            gap, gap_len = run, run_len
    if gap == 0 and (gap_len == 6 or (gap_len == 5 and words[5] == 0xFFFF)):
        return ("::" if gap_len == 6 else "::ffff:") + inet4_text(data[12:])
    text, i = "", 0
    while i < 8:
        if i == gap:
            text += "::" if i == 0 else ":"
            i += gap_len
            continue
        text += f"{words[i]:x}" + (":" if i < 7 else "")
        i += 1
    return text


def uuid_text(data: bytes) -> str:
    """A UUID value as MariaDB prints it; the binlog carries it in text order (MariaDB swaps the segments of
    version 1-5 UUIDs only in its record, not in the binlog)."""
    return str(uuid.UUID(bytes=data.ljust(16, b"\x00")))


def _text_from_binlog(to_text: Callable[[bytes], str]) -> Converter:
    def convert(v: Any) -> Any:
        return to_text(_bytes_from_binlog(v)) if isinstance(v, (bytes, bytearray, str)) else v

    return convert


BINARY_TYPES = {"binary", "varbinary", "tinyblob", "blob", "mediumblob", "longblob"}
SPATIAL_TYPES = {"geometry", "point", "linestring", "polygon", "multipoint", "multilinestring", "multipolygon",
                 "geometrycollection"}
EMPTY_SET_SOURCE = "empty set"  # pymysqlreplication.constants.NONE_SOURCE.EMPTY_SET


def _converters(col: Column) -> tuple[Converter, Converter]:
    t = col.data_type
    if t == "bit":
        return _bit_from_select, _bit_from_binlog
    if t == "set":
        return _identity, _set_from_binlog(enum_values(col.column_type))
    if t in ("float", "double") and col.numeric_scale is not None:
        single = t == "float"
        return (_float32 if single else _identity), rounded_float(col.numeric_scale, single)
    if t == "float":
        return _float32, _float32
    if t == "binary" and col.char_length:
        pad = _pad_binary(col.char_length)
        return _identity, lambda v: pad(_bytes_from_binlog(v))
    if t in BINARY_TYPES or t in SPATIAL_TYPES:
        return _identity, _bytes_from_binlog
    if t in ("date", "datetime"):
        return _temporal_from_select, _identity
    if t == "timestamp":
        return _temporal_from_select, _timestamp_from_binlog
    if t == "year":
        return _identity, _year_from_binlog
    if t == "inet4":
        return _identity, _text_from_binlog(inet4_text)
    if t == "inet6":
        return _identity, _text_from_binlog(inet6_text)
    if t == "uuid":
        return _identity, _text_from_binlog(uuid_text)
    return _identity, _identity


class RowCanonicalizer:
    """Turns SELECT tuples and binlog row dicts of one table into canonical ``{column: value}`` dicts."""

    def __init__(self, schema: TableSchema) -> None:
        self.schema = schema
        self.columns = schema.column_names
        pairs = [_converters(c) for c in schema.columns]
        self._from_select = [p[0] for p in pairs]
        self._from_binlog = {c.name: p[1] for c, p in zip(schema.columns, pairs, strict=True)}

    def from_select(self, row: Sequence[Any]) -> dict[str, Any]:
        return {name: (None if v is None else f(v)) for name, f, v in zip(self.columns, self._from_select, row, strict=True)}

    def binlog_converter(self, name: str) -> Converter | None:
        """The conversion of column ``name``'s binlog value to its canonical one; None when there is none."""
        f = self._from_binlog[name]
        return None if f is _identity else f

    def from_binlog(self, values: Mapping[str, Any], none_sources: Mapping[str, str] | None = None) -> dict[str, Any]:
        """``none_sources`` is the library's per-row reason for a None (an empty SET is not NULL)."""
        none_sources = none_sources or {}
        out: dict[str, Any] = {}
        for name in self.columns:
            if name not in values:
                raise KeyError(
                    f"binlog row of {self.schema.table} has no column {name!r}: the table changed since the "
                    "change was written, or binlog_row_metadata was not FULL then"
                )
            v = values[name]
            if v is None:
                out[name] = "" if none_sources.get(name) == EMPTY_SET_SOURCE else None
            else:
                out[name] = self._from_binlog[name](v)
        return out
