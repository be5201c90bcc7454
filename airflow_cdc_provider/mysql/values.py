"""One canonical Python value per column, whichever way the row was read.

The same row state must look the same whether it came from a SELECT (pymysql) or from the binlog
(python-mysql-replication), otherwise the snapshot and the stream disagree and the backfill cannot match
keys. The two drivers differ on a few types:

=========  ======================  ==========================  ===============
type       SELECT (pymysql)        binlog                      canonical
=========  ======================  ==========================  ===============
BIT(n)     bytes, big-endian       str of '0'/'1'              int
SET        'a,b'                   {'a', 'b'}                  'a,b' (definition order)
=========  ======================  ==========================  ===============

Everything else already agrees (ints incl. unsigned, Decimal, str, bytes, date/datetime, timedelta).
"""

from __future__ import annotations

from typing import Any, Callable, Mapping, Sequence

from .schema import Column, TableSchema, enum_values

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


def _converters(col: Column) -> tuple[Converter, Converter]:
    if col.data_type == "bit":
        return _bit_from_select, _bit_from_binlog
    if col.data_type == "set":
        return _identity, _set_from_binlog(enum_values(col.column_type))
    return _identity, _identity


class RowCanonicalizer:
    """Turns SELECT tuples and binlog row dicts of one table into canonical ``{column: value}`` dicts."""

    def __init__(self, schema: TableSchema) -> None:
        self.schema = schema
        self.columns = schema.column_names
        pairs = [_converters(c) for c in schema.columns]
        self._from_select = [p[0] for p in pairs]
        self._from_binlog = {c.name: p[1] for c, p in zip(schema.columns, pairs)}

    def from_select(self, row: Sequence[Any]) -> dict[str, Any]:
        return {name: (None if v is None else f(v)) for name, f, v in zip(self.columns, self._from_select, row)}

    def from_binlog(self, values: Mapping[str, Any]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for name in self.columns:
            if name not in values:
                raise KeyError(
                    f"binlog row of {self.schema.table} has no column {name!r}: the table changed since the "
                    "change was written, or binlog_row_metadata was not FULL then"
                )
            v = values[name]
            out[name] = None if v is None else self._from_binlog[name](v)
        return out
