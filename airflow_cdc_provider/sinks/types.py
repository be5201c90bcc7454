"""Sink types: how every MySQL column type is stored, whichever path (JDBC snapshot or binlog) read it.

``source/values.py`` makes the two readers agree on one canonical Python value. This module takes the next
step, shared by the snapshot job, the stream and both sinks:

* ``spark``: the Spark SQL type of the column in the sink (a DDL string, no Spark import here);
* ``jdbc_expr``: the SELECT expression the Spark JDBC read uses, for types whose JDBC mapping is lossy
  (Spark's MySQL dialect turns TINYINT(1) into boolean, YEAR into date, BIT(n) into a long of the wrong
  value and TIME into a timestamp; temporal values go through the JVM's time zone). Those are read as text
  or numbers and cast by Spark, so no JVM or driver setting can shift a value;
* ``to_sink``: canonical Python value -> the Python value of that Spark type (what the binlog path writes);
* ``postgres``: the column type of the JDBC mirror table.

==================  ==================  ====================  =================================================
MySQL               Spark               PostgreSQL            notes
==================  ==================  ====================  =================================================
TINYINT             tinyint/smallint    smallint              unsigned widens
SMALLINT            smallint/int        smallint/integer
MEDIUMINT           int                 integer
INT                 int/bigint          integer/bigint
BIGINT              bigint              bigint
BIGINT UNSIGNED     decimal(20,0)       numeric(20,0)         max 18446744073709551615 kept
DECIMAL(p,s) p<=38  decimal(p,s)        numeric(p,s)
DECIMAL(p,s) p>38   string              numeric(p,s)          exact text, all s digits (Spark caps at 38)
FLOAT / DOUBLE      float / double      real / double prec.
BIT(n<64) / BIT(64) bigint / dec(20,0)  bigint / numeric      the bits as an unsigned number
CHAR..LONGTEXT      string              text                  utf8mb4 incl. emoji
ENUM / SET / JSON   string              text                  SET as 'a,b' in definition order; JSON as text
BINARY..LONGBLOB    binary              bytea                 BINARY(n) zero-padded to n bytes
DATE                date                date
DATETIME(n)         timestamp_ntz       timestamp(n)          wall clock, no time zone
TIMESTAMP(n)        timestamp           timestamptz(n)        an instant; read in UTC on both paths
TIME(n)             string              text                  '[-]HH:MM:SS[.f*n]' as MySQL prints it
YEAR                smallint            smallint              0000 is 0
INET4/INET6/UUID    string              text                  as MariaDB prints them
GEOMETRY, POINT...  binary              bytea                 MySQL's internal format: 4-byte SRID + WKB
==================  ==================  ====================  =================================================

Every other type (VECTOR, MySQL's binary JSON, a type a newer server adds) raises ``UnsupportedColumnType``,
which validation reports with the table, before any Spark task starts.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, Callable

from airflow_cdc_provider.source.schema import Column, TableSchema
from airflow_cdc_provider.source.server import SourceError
from airflow_cdc_provider.source.sql import quote_ident
from airflow_cdc_provider.source.values import SPATIAL_TYPES

Converter = Callable[[Any], Any]

SPARK_DECIMAL_MAX_PRECISION = 38
TEXT_TYPES = {"char", "varchar", "tinytext", "text", "mediumtext", "longtext", "enum", "set"}
BINARY_TYPES = {"binary", "varbinary", "tinyblob", "blob", "mediumblob", "longblob"} | SPATIAL_TYPES
ADDRESS_TYPES = {"inet4", "inet6", "uuid"}  # MariaDB's fixed binary types, read as their text on both paths
# Temporal values SELECTed as text; a zero date, a zero part, an invalid day (ALLOW_INVALID_DATES) and year 0
# have no date value: the year-0 ones are NULL in the SELECT, the others in Spark's try_cast, as the binlog
# decoders give them.
TEMPORAL_SQL = "IF(YEAR({0}) = 0, NULL, CAST({0} AS CHAR))"
# Types refused by name: why they cannot be captured, and what to do.
REFUSED = {
    "vector": "VECTOR (MariaDB 11.7+, MySQL 9), whose binlog form is not decoded",
    "json": "MySQL's binary JSON, whose binlog form cannot be shown to give the text SELECT prints",
}


class UnsupportedColumnType(SourceError):
    """A column no sink can hold; ``problem`` says why and what to do."""

    def __init__(self, column: str, problem: str) -> None:
        self.column, self.problem = column, problem
        super().__init__(f"column {column!r} {problem}")

    def for_table(self, table: str) -> str:
        return f"column {self.column!r} of table {table!r} {self.problem}"


@dataclass(frozen=True)
class SinkType:
    spark: str
    postgres: str
    cast_sql: str | None = None  # e.g. "CAST({} AS CHAR)": how the JDBC read selects it; None = as is
    to_sink: Converter | None = None  # canonical -> Spark value; None = identity
    try_cast: bool = False  # Spark casts the selected text with try_cast: text it cannot parse becomes NULL

    def convert(self, value: Any) -> Any:
        if value is None or self.to_sink is None:
            return value
        return self.to_sink(value)


def _decimal_text(v: Any) -> str:
    return format(v if isinstance(v, Decimal) else Decimal(str(v)), "f")


def _to_decimal(v: Any) -> Decimal:
    return v if isinstance(v, Decimal) else Decimal(int(v))


def _utc_instant(v: Any) -> Any:
    return v.replace(tzinfo=dt.timezone.utc) if isinstance(v, dt.datetime) and v.tzinfo is None else v


def format_time(value: dt.timedelta, fsp: int) -> str:
    """A TIME value as MySQL prints it (``CAST(t AS CHAR)``): sign, hours of 2+ digits, ``fsp`` decimals."""
    micros = (value.days * 86400 + value.seconds) * 1_000_000 + value.microseconds
    sign = "-" if micros < 0 else ""
    micros = abs(micros)
    secs, frac = divmod(micros, 1_000_000)
    h, rem = divmod(secs, 3600)
    m, s = divmod(rem, 60)
    text = f"{sign}{h:02d}:{m:02d}:{s:02d}"
    if fsp:
        text += "." + f"{frac:06d}"[:fsp]
    return text


def _int_types(col: Column) -> tuple[str, str]:
    unsigned = col.unsigned
    return {
        "tinyint": ("smallint", "smallint") if unsigned else ("tinyint", "smallint"),
        "smallint": ("int", "integer") if unsigned else ("smallint", "smallint"),
        "mediumint": ("int", "integer"),
        "int": ("bigint", "bigint") if unsigned else ("int", "integer"),
        "integer": ("bigint", "bigint") if unsigned else ("int", "integer"),
        "bigint": ("decimal(20,0)", "numeric(20,0)") if unsigned else ("bigint", "bigint"),
    }[col.data_type]


def sink_type(col: Column) -> SinkType:
    t = col.data_type
    if t in REFUSED:
        raise UnsupportedColumnType(
            col.name, f"has type {col.column_type}: {REFUSED[t]}; it cannot be captured: leave the table out of "
            "source.tables, or move the column to a table that is not captured (a view is no way around it: views "
            "have no binlog)"
        )
    if col.is_integer:
        spark, pg = _int_types(col)
        convert = _to_decimal if spark.startswith("decimal") else None
        # CAST keeps TINYINT(1) (signed, UNSIGNED or ZEROFILL) from becoming a boolean in Spark's MySQL dialect.
        cast = f"CAST({{}} AS {'UNSIGNED' if col.unsigned else 'SIGNED'})" if t == "tinyint" else None
        return SinkType(spark, pg, cast, convert)
    if t == "decimal":
        p, s = col.numeric_precision or 10, col.numeric_scale or 0
        if p <= SPARK_DECIMAL_MAX_PRECISION:
            return SinkType(f"decimal({p},{s})", f"numeric({p},{s})")
        # through DECIMAL again: a ZEROFILL column's own text is padded with zeros
        return SinkType("string", f"numeric({p},{s})", f"CAST(CAST({{}} AS DECIMAL({p},{s})) AS CHAR)", _decimal_text)
    if t == "float":  # a DOUBLE's text is exact, a FLOAT's is rounded to 6 digits (source.chunk_queries)
        return SinkType("float", "real", "CAST({} AS DOUBLE)" if col.numeric_scale is None else None)
    if t == "double":
        return SinkType("double", "double precision")
    if t == "bit":
        bits = col.numeric_precision or 1
        if bits < 64:
            return SinkType("bigint", "bigint", "CAST({} AS UNSIGNED)", int)
        return SinkType("decimal(20,0)", "numeric(20,0)", "CAST({} AS UNSIGNED)", _to_decimal)
    if t == "year":
        return SinkType("smallint", "smallint", "CAST({} AS UNSIGNED)")
    if t == "date":
        return SinkType("date", "date", TEMPORAL_SQL, try_cast=True)
    if t == "datetime":
        fsp = col.datetime_precision or 0
        return SinkType("timestamp_ntz", f"timestamp({fsp})", TEMPORAL_SQL, try_cast=True)
    if t == "timestamp":
        fsp = col.datetime_precision or 0
        return SinkType("timestamp", f"timestamptz({fsp})", TEMPORAL_SQL, _utc_instant, try_cast=True)
    if t == "time":
        fsp = col.datetime_precision or 0
        return SinkType("string", "text", "CAST({} AS CHAR)", lambda v: format_time(v, fsp) if isinstance(v, dt.timedelta) else str(v))
    if t in BINARY_TYPES:
        return SinkType("binary", "bytea")
    if t in TEXT_TYPES:
        return SinkType("string", "text")
    if t in ADDRESS_TYPES:
        return SinkType("string", "text", "CAST({} AS CHAR)")
    raise UnsupportedColumnType(
        col.name, f"has type {col.column_type}, which cannot be captured (no tested mapping to the sinks): leave the "
        "table out of source.tables, or move the column to a table that is not captured"
    )


@dataclass(frozen=True)
class TableSinkTypes:
    """The sink types of one table's columns, in column order."""

    schema: TableSchema
    types: tuple[SinkType, ...]
    version: int = 0  # the number of the table's definition (``source.table_versions``) the stream writes with
    epoch: int = 0  # the snapshot epoch whose definitions ``version`` counts (version 0: the epoch's snapshot's)

    @classmethod
    def of(cls, schema: TableSchema, version: int = 0, epoch: int = 0) -> "TableSinkTypes":
        return cls(schema, tuple(sink_type(c) for c in schema.columns), version, epoch)

    @property
    def spark_ddl(self) -> str:
        """``name type, ...`` with backquoted names, for ``StructType.fromDDL``."""
        return ", ".join(f"`{c.name.replace('`', '``')}` {t.spark}" for c, t in zip(self.schema.columns, self.types, strict=True))

    def jdbc_select_list(self) -> list[str]:
        """SELECT list of the JDBC read: column i as ``__cdc_i``, plus the key columns under their own names
        so chunk predicates apply to the stored values (and use the primary key index)."""
        exprs = []
        for i, (c, t) in enumerate(zip(self.schema.columns, self.types, strict=True)):
            q = quote_ident(c.name)
            exprs.append(f"{(t.cast_sql or '{}').format(q)} AS __cdc_{i}")
        exprs += [quote_ident(k) for k in self.schema.key_columns]
        return exprs

    def row_to_sink(self, row: dict[str, Any]) -> tuple:
        """A canonical row dict -> tuple of Spark values in column order."""
        return tuple(t.convert(row[c.name]) for c, t in zip(self.schema.columns, self.types, strict=True))
