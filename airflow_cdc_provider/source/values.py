"""One canonical Python value per column, whichever way the row was read.

The same row state must look the same whether it came from a SELECT (pymysql) or from the binlog
(python-mysql-replication), otherwise the snapshot and the stream disagree and the backfill cannot match
keys. The two drivers differ on a few types:

==========  =====================  ===========================  ==================================
type        SELECT (pymysql)       binlog                       canonical
==========  =====================  ===========================  ==================================
BIT(n)      bytes, big-endian      str of '0'/'1'               int
SET         'a,b'                  {'a', 'b'}                   'a,b' (definition order)
BINARY(n)   n bytes, zero-padded   trailing zero bytes dropped  n bytes, zero-padded
FLOAT       text -> float64 (0.1)  float32 (0.10000000149...)   the float32 value, as a Python float
TIMESTAMP   session time zone      UTC                          UTC (source sessions use +00:00)
empty SET   ''                     None (none_source 'empty     ''
                                   set')
empty BLOB  b''                    '' (str)                     b''
==========  =====================  ===========================  ==================================

Everything else already agrees on MariaDB 10.11 (tests/component/test_type_fidelity.py checks every type):
TINYINT..BIGINT signed and unsigned (BIGINT UNSIGNED max included), DECIMAL(65,30) as ``Decimal``, DOUBLE,
CHAR/VARCHAR/TEXT (utf8mb4, emoji) as ``str``, VARBINARY/BLOB as ``bytes``, DATE, DATETIME(0..6) as naive
``datetime``, TIME (negative and fractional) as ``timedelta``, YEAR as ``int``, ENUM as ``str``, JSON as its
text (MariaDB stores JSON as LONGTEXT), NULL as ``None``.
"""

from __future__ import annotations

import struct
from typing import Any, Callable, Mapping, Sequence

from airflow_cdc_provider.source.schema import Column, TableSchema, enum_values

Converter = Callable[[Any], Any]


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


def _pad_binary(length: int) -> Converter:
    def convert(v: Any) -> Any:
        return bytes(v).ljust(length, b"\x00") if isinstance(v, (bytes, bytearray)) else v

    return convert


def _bytes_from_binlog(v: Any) -> Any:
    return v.encode("utf-8") if isinstance(v, str) else v


BINARY_TYPES = {"binary", "varbinary", "tinyblob", "blob", "mediumblob", "longblob"}
EMPTY_SET_SOURCE = "empty set"  # pymysqlreplication.constants.NONE_SOURCE.EMPTY_SET


def _converters(col: Column) -> tuple[Converter, Converter]:
    if col.data_type == "bit":
        return _bit_from_select, _bit_from_binlog
    if col.data_type == "set":
        return _identity, _set_from_binlog(enum_values(col.column_type))
    if col.data_type == "float":
        return _float32, _float32
    if col.data_type == "binary" and col.char_length:
        pad = _pad_binary(col.char_length)
        return _identity, lambda v: pad(_bytes_from_binlog(v))
    if col.data_type in BINARY_TYPES:
        return _identity, _bytes_from_binlog
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
