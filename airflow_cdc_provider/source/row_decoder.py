"""Decoding the rows of a binlog row event straight into canonical values, compiled once per table map.

python-mysql-replication decodes a row column by column through a chain of type tests, a charset lookup
per string and one small read per field; that was about a third of the stream's decode (cProfile, 60k
sysbench changes). This module reads the same bytes with a plan built once per TABLE_MAP (per table id): one step
per column, fixed-width columns unpacked in place, strings decoded with an encoding chosen up front, and the
canonical conversions of ``values.py`` applied on the way (BIT as an int, SET as its text, BINARY(n)
padded). Its values must equal ``RowCanonicalizer.from_binlog`` of the library's values, byte for byte:
tests/component/test_row_decoder.py decodes every supported type both ways.

The library stays the reference and the fallback: a table map with a column type this plan does not cover
(MySQL's binary JSON, the pre-5.6 temporal formats, a character set without a codec), column names that are
not the table's (the table changed since), a row image that is not FULL, or a partial JSON update is decoded
by the library. Where the library decodes a column wrongly (negative TIME with a fraction) or fails on a value
the server stores (an invalid DATE, a character set it has no exact codec for), ``compat/replication.py``
gives it this module's readers (``read_time2``, ``read_date``) and ``values.string_codec``.
"""

from __future__ import annotations

import datetime as dt
import struct
from decimal import Decimal
from typing import Any, Callable, Sequence

from pymysqlreplication.constants import BINLOG, FIELD_TYPE

from airflow_cdc_provider.compat import replication
from airflow_cdc_provider.source.schema import TableSchema, enum_values
from airflow_cdc_provider.source.values import UNSUPPORTED_CHARSET, RowCanonicalizer, string_codec

Step = tuple  # (column name, kind, reader or codec, fixed size, canonical converter or None)
_EPOCH = dt.datetime(1970, 1, 1)
_DECIMAL_BYTES = (0, 1, 1, 2, 2, 3, 3, 4, 4, 4)  # bytes of a group of n < 9 decimal digits

# step kinds, most frequent first: the row loop tests them in this order
_FIXED, _STR1, _STR2, _CALL = 0, 1, 2, 3

_FIXED_INTS = {
    FIELD_TYPE.TINY: ("<b", "<B"),
    FIELD_TYPE.SHORT: ("<h", "<H"),
    FIELD_TYPE.LONG: ("<i", "<I"),
    FIELD_TYPE.LONGLONG: ("<q", "<Q"),
}


def _signed_be(data: bytes, pos: int, size: int) -> int:
    return int.from_bytes(data[pos:pos + size], "big", signed=True)


def _fsp_reader(fsp: int) -> tuple[int, Callable[[bytes, int], int]]:
    """The library's fractional seconds: ``(fsp + 1) // 2`` big-endian signed bytes, scaled to microseconds."""
    size = (fsp + 1) // 2
    scale = 10 ** (6 - fsp) if fsp else 0

    def read(data: bytes, pos: int) -> int:
        if not size:
            return 0
        value = _signed_be(data, pos, size)
        if fsp % 2:
            value = int(value / 10)
        return value * scale

    return size, read


def _with_fraction(width: int, whole: Callable[[bytes, int], Any], fsp: int) -> Callable:
    """A DATETIME2/TIMESTAMP2 reader: ``width`` bytes of whole seconds (``whole`` may say None), then the
    fraction, added as the library does (only when it is not zero)."""
    size, frac = _fsp_reader(fsp)

    def read(data: bytes, pos: int):
        t = whole(data, pos)
        if t is None:
            return None, pos + width + size
        us = frac(data, pos + width)
        return (t.replace(microsecond=us) if us > 0 else t), pos + width + size

    return read


def _datetime2_whole(data: bytes, pos: int):
    v = int.from_bytes(data[pos:pos + 5], "big")
    ym = (v >> 22) & 0x1FFFF
    try:
        return dt.datetime(ym // 13, ym % 13, (v >> 17) & 0x1F, (v >> 12) & 0x1F, (v >> 6) & 0x3F, v & 0x3F)
    except ValueError:  # a zero date: the library says None (out of range)
        return None


def _timestamp2_whole(data: bytes, pos: int):
    """utcfromtimestamp, without its deprecation; 0 is the zero TIMESTAMP (None)."""
    seconds = _signed_be(data, pos, 4)
    return _EPOCH + dt.timedelta(seconds=seconds) if seconds else None


def _time2(fsp: int) -> Callable:
    """MySQL's TIME2 (MariaDB writes the same): 3 big-endian bytes of sign, unused bit, 10-bit hour, 6-bit minute
    and 6-bit second, then ``(fsp + 1) // 2`` bytes of fraction (1/100 s, 1/10000 s or microseconds), the whole
    one integer offset by ``0x800000`` in its first three bytes. A negative time is the negated whole, so its
    fraction borrows from the seconds (-1.5 s is -2 s and +0.5 s in the bytes): the absolute value of the whole
    gives the fields, as ``TIME_from_longlong_time_packed`` reads them. The library reads the fraction apart
    from the seconds, which gives -(s + 1 - f) for -(s + f)."""
    size = (fsp + 1) // 2
    width, bits = 3 + size, 8 * size
    offset, mask, scale = 0x800000 << bits, (1 << bits) - 1, (0, 10_000, 100, 1)[size]

    def read(data: bytes, pos: int):
        v = int.from_bytes(data[pos:pos + width], "big") - offset
        negative = v < 0
        if negative:
            v = -v
        hms = v >> bits
        t = dt.timedelta(seconds=(hms >> 12 & 0x3FF) * 3600 + (hms >> 6 & 0x3F) * 60 + (hms & 0x3F),
                         microseconds=(v & mask) * scale)
        return (-t if negative else t), pos + width

    return read


_TIME2 = [_time2(fsp) for fsp in range(7)]


def read_time2(raw: bytes, fsp: int) -> dt.timedelta:
    """A TIME2 value of ``3 + (fsp + 1) // 2`` bytes (the library's reader, see ``compat/replication.py``)."""
    return _TIME2[fsp](raw, 0)[0]


def _date(data: bytes, pos: int):
    """None for a zero date, a zero part and an invalid day (stored under ALLOW_INVALID_DATES), as SELECT and
    the Spark read give them."""
    v = data[pos] | data[pos + 1] << 8 | data[pos + 2] << 16
    year, month, day = v >> 9, (v >> 5) & 0xF, v & 0x1F
    if not (year and month and day):
        return None, pos + 3
    try:
        return dt.date(year, month, day), pos + 3
    except ValueError:
        return None, pos + 3


def read_date(raw: bytes) -> dt.date | None:
    """A DATE value of 3 bytes (the library's reader, see ``compat/replication.py``)."""
    return _date(raw, 0)[0]


def _decimal(precision: int, scale: int) -> Callable:
    """MySQL's packed DECIMAL: groups of 9 digits in 4 bytes, the rest in fewer; negative values inverted."""
    lead_digits, full_int = (precision - scale) % 9, (precision - scale) // 9
    full_frac, tail_digits = scale // 9, scale % 9
    lead, tail = _DECIMAL_BYTES[lead_digits], _DECIMAL_BYTES[tail_digits]
    total = lead + 4 * (full_int + full_frac) + tail

    def read(data: bytes, pos: int):
        raw = bytearray(data[pos:pos + total])
        negative = not raw[0] & 0x80
        raw[0] ^= 0x80
        if negative:
            raw = bytearray(b ^ 0xFF for b in raw)
        parts = ["-"] if negative else []
        at = 0
        if lead:
            parts.append(str(int.from_bytes(raw[:lead], "big")))
            at = lead
        for _ in range(full_int):
            parts.append(f"{int.from_bytes(raw[at:at + 4], 'big'):09d}")
            at += 4
        parts.append(".")
        for _ in range(full_frac):
            parts.append(f"{int.from_bytes(raw[at:at + 4], 'big'):09d}")
            at += 4
        if tail:
            parts.append(f"{int.from_bytes(raw[at:at + tail], 'big'):0{tail_digits}d}")
        return Decimal("".join(parts)), pos + total

    return read


def _int24(unsigned: bool) -> Callable:
    def read(data: bytes, pos: int):
        return int.from_bytes(data[pos:pos + 3], "little", signed=not unsigned), pos + 3

    return read


def _blob(length_size: int, encoding: str | None) -> Callable:
    def read(data: bytes, pos: int):
        n = int.from_bytes(data[pos:pos + length_size], "little")
        start = pos + length_size
        raw = data[start:start + n]
        return (raw.decode(encoding) if encoding else raw), start + n

    return read


def _enum(size: int, values: Sequence[str]) -> Callable:
    def read(data: bytes, pos: int):
        return values[int.from_bytes(data[pos:pos + size], "little")], pos + size

    return read


def _set(size: int, definition: Sequence[str]) -> Callable:
    """Canonical already: the members in definition order, joined (the empty set is '')."""
    def read(data: bytes, pos: int):
        mask = int.from_bytes(data[pos:pos + size], "little")
        return ",".join(v for i, v in enumerate(definition) if mask >> i & 1), pos + size

    return read


def _bit(nbytes: int, bits: int) -> Callable:
    """Canonical already: the bits as an unsigned number."""
    mask = (1 << bits) - 1

    def read(data: bytes, pos: int):
        return int.from_bytes(data[pos:pos + nbytes], "big") & mask, pos + nbytes

    return read


def _year(data: bytes, pos: int):
    """Canonical already: 1901..2155, and 0 for the year 0000."""
    v = data[pos]
    return (v + 1900 if v else 0), pos + 1


def _step(column: Any, schema_column: Any, convert: Callable | None) -> Step | None:
    """How to read one column, or None when only the library can."""
    t, name = column.type, column.name
    if t in _FIXED_INTS:
        fmt = struct.Struct(_FIXED_INTS[t][1 if column.unsigned else 0])
        return name, _FIXED, fmt.unpack_from, fmt.size, convert
    if t == FIELD_TYPE.FLOAT:  # the float32 value itself is canonical, unless FLOAT(M,D) rounds it
        fmt = struct.Struct("<f")
        return name, _FIXED, fmt.unpack_from, fmt.size, convert if schema_column.numeric_scale is not None else None
    if t == FIELD_TYPE.DOUBLE:
        fmt = struct.Struct("<d")
        return name, _FIXED, fmt.unpack_from, fmt.size, convert
    if t in (FIELD_TYPE.VARCHAR, FIELD_TYPE.STRING, FIELD_TYPE.BLOB):
        encoding = string_codec(replication.library_charset(column.character_set_name))
        if encoding is UNSUPPORTED_CHARSET:
            return None
        if t == FIELD_TYPE.BLOB:
            return name, _CALL, _blob(column.length_size, encoding), None, convert
        return name, _STR2 if column.max_length > 255 else _STR1, encoding, None, convert
    if t == FIELD_TYPE.INT24:
        return name, _CALL, _int24(column.unsigned), None, convert
    if t == FIELD_TYPE.NEWDECIMAL:
        return name, _CALL, _decimal(column.precision, column.decimals), None, convert
    if t == FIELD_TYPE.DATETIME2:
        return name, _CALL, _with_fraction(5, _datetime2_whole, column.fsp), None, convert
    if t == FIELD_TYPE.TIMESTAMP2:  # canonical already (the zero TIMESTAMP is None)
        return name, _CALL, _with_fraction(4, _timestamp2_whole, column.fsp), None, None
    if t == FIELD_TYPE.TIME2:
        return name, _CALL, _TIME2[column.fsp], None, convert
    if t == FIELD_TYPE.DATE:
        return name, _CALL, _date, None, convert
    if t == FIELD_TYPE.YEAR:
        return name, _CALL, _year, None, None
    if t == FIELD_TYPE.ENUM and column.enum_values:
        return name, _CALL, _enum(column.size, list(column.enum_values)), None, convert
    if t == FIELD_TYPE.SET and schema_column.data_type == "set":
        return name, _CALL, _set(column.size, enum_values(schema_column.column_type)), None, None
    if t == FIELD_TYPE.BIT:
        return name, _CALL, _bit(column.bytes, column.bits), None, None
    if t == FIELD_TYPE.GEOMETRY:  # SRID + WKB, the bytes as stored
        return name, _CALL, _blob(column.length_size, None), None, None
    return None


class RowDecoder:
    """The compiled plan of one table map; ``None`` from ``compile`` means: let the library decode."""

    def __init__(self, steps: list[Step], width: int) -> None:
        self.steps = steps
        self.width = width
        self.null_bytes = (width + 7) // 8
        self.all_present = b"\xff" * (width // 8) + (bytes([(1 << (width % 8)) - 1]) if width % 8 else b"")

    @classmethod
    def compile(cls, table_columns: Sequence[Any], schema: TableSchema, canon: RowCanonicalizer) -> "RowDecoder | None":
        by_name = {c.name: c for c in schema.columns}
        if sorted(c.name or "" for c in table_columns) != sorted(by_name):
            return None  # not this definition of the table: the library path says why
        steps = []
        for column in table_columns:
            step = _step(column, by_name[column.name], canon.binlog_converter(column.name))
            if step is None:
                return None
            steps.append(step)
        return cls(steps, len(table_columns))

    def readable(self, event: Any) -> bool:
        """Full row images of a plain rows event, its body still unread by the library."""
        if event.event_type == BINLOG.PARTIAL_UPDATE_ROWS_EVENT:
            return False
        if event.columns_present_bitmap != self.all_present:
            return False
        if getattr(event, "columns_present_bitmap2", self.all_present) != self.all_present:
            return False
        return replication.row_body(event) is not None

    def images(self, event: Any) -> list[dict[str, Any]]:
        """Every row image of the event's body, in order (an update's before and after alternate); for an event
        ``readable`` accepted."""
        return self.images_between(*replication.row_body(event))

    def images_between(self, data: bytes, pos: int, end: int) -> list[dict[str, Any]]:
        out = []
        while pos < end:
            image, pos = self.image(data, pos)
            out.append(image)
        return out

    def image(self, data: bytes, pos: int) -> tuple[dict[str, Any], int]:
        nulls = int.from_bytes(data[pos:pos + self.null_bytes], "little")
        pos += self.null_bytes
        row: dict[str, Any] = {}
        bit = 1
        for name, kind, arg, size, convert in self.steps:
            if nulls & bit:
                row[name] = None
                bit <<= 1
                continue
            bit <<= 1
            if kind == _FIXED:
                value = arg(data, pos)[0]
                pos += size
            elif kind == _STR1:
                n = data[pos]
                value = data[pos + 1:pos + 1 + n]
                pos += 1 + n
                if arg:
                    value = value.decode(arg)
            elif kind == _STR2:
                n = data[pos] | data[pos + 1] << 8
                value = data[pos + 2:pos + 2 + n]
                pos += 2 + n
                if arg:
                    value = value.decode(arg)
            else:
                value, pos = arg(data, pos)
            row[name] = value if convert is None or value is None else convert(value)
        return row, pos
