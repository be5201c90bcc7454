"""Does a TABLE_MAP describe the table definition a reader decodes with?

A reader decodes a table's row events with the ``TableSchema`` it loaded when it started. After an ALTER
(or a table swapped in by RENAME) the binlog's row events carry another definition: decoding them with the
old one writes values under the wrong names or types, silently. With ``binlog_row_metadata=FULL`` every
TABLE_MAP names its columns and gives their types, signedness, precision and members, so the reader checks
each new table map against its schema before decoding a row of it, and treats a difference as a schema
change of the table (``core.schema_changes``).

Only what changes decoded values or sink types is compared; a NOT NULL or DEFAULT change is not.
"""

from __future__ import annotations

from typing import Any, Sequence

from pymysqlreplication.constants import FIELD_TYPE

from airflow_cdc_provider.source.schema import Column, TableSchema, enum_values

_STRINGS = {FIELD_TYPE.STRING, FIELD_TYPE.VAR_STRING, FIELD_TYPE.VARCHAR}
_BLOBS = {FIELD_TYPE.BLOB, FIELD_TYPE.TINY_BLOB, FIELD_TYPE.MEDIUM_BLOB, FIELD_TYPE.LONG_BLOB}
# the binlog types a column of each information_schema DATA_TYPE is logged as
_LOGGED_AS: dict[str, set[int]] = {
    "tinyint": {FIELD_TYPE.TINY}, "smallint": {FIELD_TYPE.SHORT}, "mediumint": {FIELD_TYPE.INT24},
    "int": {FIELD_TYPE.LONG}, "integer": {FIELD_TYPE.LONG}, "bigint": {FIELD_TYPE.LONGLONG},
    "float": {FIELD_TYPE.FLOAT}, "double": {FIELD_TYPE.DOUBLE}, "real": {FIELD_TYPE.DOUBLE},
    "decimal": {FIELD_TYPE.NEWDECIMAL, FIELD_TYPE.DECIMAL},
    "char": _STRINGS, "varchar": _STRINGS, "binary": _STRINGS, "varbinary": _STRINGS,
    "inet4": _STRINGS, "inet6": _STRINGS, "uuid": _STRINGS,
    "tinytext": _BLOBS, "text": _BLOBS, "mediumtext": _BLOBS, "longtext": _BLOBS, "json": _BLOBS | {FIELD_TYPE.JSON},
    "tinyblob": _BLOBS, "blob": _BLOBS, "mediumblob": _BLOBS, "longblob": _BLOBS,
    "enum": {FIELD_TYPE.ENUM} | _STRINGS, "set": {FIELD_TYPE.SET} | _STRINGS,
    "date": {FIELD_TYPE.DATE, FIELD_TYPE.NEWDATE}, "datetime": {FIELD_TYPE.DATETIME2, FIELD_TYPE.DATETIME},
    "timestamp": {FIELD_TYPE.TIMESTAMP2, FIELD_TYPE.TIMESTAMP}, "time": {FIELD_TYPE.TIME2, FIELD_TYPE.TIME},
    "year": {FIELD_TYPE.YEAR}, "bit": {FIELD_TYPE.BIT},
}
# types whose binlog form is the same for text and bytes: the character set tells them apart
_TEXT_OR_BINARY = {"char", "varchar", "binary", "varbinary", "tinytext", "text", "mediumtext", "longtext",
                   "tinyblob", "blob", "mediumblob", "longblob"}
_NUMERIC = {"tinyint", "smallint", "mediumint", "int", "integer", "bigint", "decimal", "float", "double", "real"}


def definition_difference(table_columns: Sequence[Any], schema: TableSchema) -> str | None:
    """What differs between a table map's columns (python-mysql-replication's) and ``schema``, in words, or
    None when rows of that table map decode into ``schema`` exactly."""
    names = [c.name for c in table_columns]
    known = schema.column_names
    if any(n is None for n in names):  # no FULL metadata: only the width can be compared
        return None if len(names) == len(known) else f"{len(names)} columns, not {len(known)}"
    if names != known:
        return f"columns ({', '.join(names)}), not ({', '.join(known)})"
    for column, known_column in zip(table_columns, schema.columns, strict=True):
        why = _column_difference(column, known_column)
        if why:
            return f"column {known_column.name}: {why}"
    if any(getattr(c, "is_primary", False) for c in table_columns):  # FULL metadata names the primary key
        key = [c.name for c in table_columns if c.is_primary]
        if schema.primary_key:
            if sorted(key) != sorted(schema.primary_key):
                return f"primary key ({', '.join(key)}), not ({', '.join(schema.primary_key)})"
        elif any(schema.column(name).nullable for name in key):
            # A table without a PRIMARY KEY: the server names its first unique key of NOT NULL columns as its
            # primary key, which no constraint records; a key over a column the definition has as nullable
            # cannot be that one, so a primary key was added since.
            return f"primary key ({', '.join(key)}), not none"
    return None


def _column_difference(column: Any, known: Column) -> str | None:
    logged = _LOGGED_AS.get(known.data_type)
    if logged is None:  # spatial and other types: the name decides
        return None
    if column.type not in logged:
        return f"type changed (was {known.column_type})"
    binary = column.type in _STRINGS | _BLOBS and getattr(column, "character_set_name", None) in (None, "binary")
    if known.data_type in _TEXT_OR_BINARY and binary != (known.charset is None):
        return f"text became binary or binary text (was {known.column_type})"
    if known.data_type in _NUMERIC and bool(getattr(column, "unsigned", known.unsigned)) != known.unsigned:
        return f"signedness changed (was {known.column_type})"
    if known.data_type == "decimal" and (getattr(column, "precision", None), getattr(column, "decimals", None)) != (
            known.numeric_precision, known.numeric_scale):
        return f"precision changed (was {known.column_type})"
    if known.datetime_precision is not None and known.data_type in ("datetime", "timestamp", "time"):
        fsp = getattr(column, "fsp", None)
        if fsp is not None and fsp != known.datetime_precision:
            return f"fractional seconds changed (was {known.column_type})"
    if known.data_type in ("enum", "set"):
        members = column.enum_values[1:] if column.enum_values else column.set_values  # enum's first: ''
        if members and list(members) != enum_values(known.column_type):
            return f"members changed (was {known.column_type})"
    return None
