"""The next definition of a captured table after an ALTER TABLE the stream applies in place.

``source.ddl.column_changes`` reads the ALTER's column specifications as written; ``evolve_definition`` applies
them to the definition in force before the ALTER and says what every row that existed then holds after it
(``source.table_versions``). Only what keeps every stored value exactly, or gives existing rows a value the
statement alone determines, is applied in place:

* ADD of a column with a constant DEFAULT, DEFAULT NULL, or none (a NOT NULL column then holds MariaDB's
  implicit default: 0, '', the first ENUM member). A function, an expression, a temporal, binary or JSON
  value is not derived here: the server may compute it per row or in its own time zone. Nor is a constant
  whose value depends on the sql_mode of the statement's session, which the stream does not read: a string in
  double quotes (a column's name under ANSI_QUOTES), one with a backslash (NO_BACKSLASH_ESCAPES), '' for a
  nullable column (NULL under EMPTY_STRING_IS_NULL). The resync costs a re-snapshot; a guess would give every
  existing row a wrong value;
* DROP of a column outside the primary key and the chunk key;
* RENAME COLUMN, CHANGE a b, of a column outside the keys;
* a MODIFY/CHANGE that keeps the type or widens it: a wider integer, a decimal with at least as many digits on
  both sides of the point, FLOAT to DOUBLE, a longer CHAR/VARCHAR/TEXT in the same character set, ENUM/SET
  members appended; the sinks' type stays the same or widens the same way. One that makes a column NOT NULL
  is not: under a sql_mode that is not strict the server turns its NULLs into the implicit default, and the
  binlog does not say so.

Anything else is a reason, and the caller re-snapshots the table. The exact types of added and retyped
columns (character set, collation, lengths) are taken from the table's definition now, which must show what
the statement wrote: a definition that moved on since cannot describe this version and is a reason too. A
string type written without a character set or collation has the table's default character set (MariaDB
converts a column retyped so to it), read from the table now too: a change of that default is a resync
(``source.ddl``), so until one the default now is the one the statement met.

Column names compare case-insensitively, as the server compares them.
"""

from __future__ import annotations

import re
import struct
from dataclasses import dataclass, replace
from decimal import ROUND_HALF_UP, Decimal, InvalidOperation
from typing import Any, Sequence

import sqlglot
from sqlglot import exp
from sqlglot.dialects.mysql import MySQL
from sqlglot.errors import SqlglotError
from sqlglot.tokens import TokenType

from airflow_cdc_provider.core.offsets import EventPosition
from airflow_cdc_provider.sinks.types import UnsupportedColumnType, sink_type
from airflow_cdc_provider.source.schema import Column, TableSchema, enum_values
from airflow_cdc_provider.source.table_versions import (
    ADD_COLUMN, DROP_COLUMN, MODIFY_COLUMN, RENAME_COLUMN, ColumnChange, TableVersion,
)
from airflow_cdc_provider.source.values import UNSUPPORTED_CHARSET, rounded_float, string_codec

NOT_DERIVABLE = "the value existing rows get cannot be derived from the statement"

_INT_BYTES = {"tinyint": 1, "smallint": 2, "mediumint": 3, "int": 4, "integer": 4, "bigint": 8}
_TEXT_BYTES = {"tinytext": 255, "text": 65535, "mediumtext": 16777215, "longtext": 4294967295}
_CHAR_TYPES = {"char", "varchar", *_TEXT_BYTES}
_STRING_TYPES = _CHAR_TYPES | {"enum", "set"}
# MariaDB's other names of types, as information_schema shows them
_TYPE_ALIASES = {
    "integer": "int", "int1": "tinyint", "int2": "smallint", "int3": "mediumint", "middleint": "mediumint",
    "int4": "int", "int8": "bigint", "bool": "tinyint", "boolean": "tinyint",
    "dec": "decimal", "numeric": "decimal", "fixed": "decimal", "double precision": "double", "real": "double",
    "character": "char", "nchar": "char", "national char": "char", "national character": "char",
    "character varying": "varchar", "char varying": "varchar", "nvarchar": "varchar",
    "national varchar": "varchar", "national char varying": "varchar", "national character varying": "varchar",
    "long": "mediumtext", "long varchar": "mediumtext", "long varbinary": "mediumblob",
}
_TYPE_ATTRIBUTES = {"UNSIGNED", "SIGNED", "ZEROFILL", "BINARY", "ASCII", "UNICODE", "BYTE"}
_IMPLIED_CHARSETS = {"ASCII": "latin1", "UNICODE": "ucs2"}  # NATIONAL, NCHAR and NVARCHAR: utf8mb3
_INTEGER_TEXT = re.compile(r"[+-]?\d+")
_DECIMAL_TEXT = re.compile(r"[+-]?(?:\d+\.?\d*|\.\d+)")
_FLOAT_TEXT = re.compile(r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?")
_SPARK_INTEGERS = ["tinyint", "smallint", "int", "bigint"]
_SPARK_DECIMAL = re.compile(r"decimal\((\d+),(\d+)\)")


class _Refused(Exception):
    """The ALTER cannot be applied in place; the message says why."""


@dataclass
class _Slot:
    """A column of the table as the statement's changes go: its name so far, its name in the old definition
    (None for a column the statement adds), and the specification that defines it now."""

    name: str
    origin: str | None
    change: ColumnChange | None = None


def evolve_definition(old: TableSchema, changes: Sequence[ColumnChange], now: TableSchema | None, number: int,
                      position: EventPosition | None, statement: str,
                      default_charset: str | None = None) -> TableVersion | str:
    """The table's version ``number`` after an ALTER whose ``changes`` (``source.ddl.column_changes``) apply to
    ``old``; ``now`` is the table's definition as the source shows it now (None when it cannot be read), and
    ``default_charset`` its default character set now (``source.schema.table_charset``). A string says why the
    ALTER cannot be applied in place."""
    try:
        slots = _apply(old, changes)
        columns, renamed, added = [], {}, {}
        for slot in slots:
            columns.append(_column(slot, old, now, default_charset))
            if slot.origin is None:
                added[slot.name] = _existing_value(columns[-1], slot.change)
            elif slot.name != slot.origin:
                renamed[slot.name] = slot.origin
    except _Refused as refusal:
        return str(refusal)
    names = [c.name for c in columns]
    if now is not None and set(names) == set(now.column_names) and names != now.column_names:
        return (f"the columns would be in the order {', '.join(names)}, but the table has them in the order "
                f"{', '.join(now.column_names)}")
    schema = TableSchema(old.table, tuple(columns), old.primary_key, old.key_columns)
    return TableVersion(number, schema, position, statement, renamed, added)


def _apply(old: TableSchema, changes: Sequence[ColumnChange]) -> list[_Slot]:
    """The columns after the changes, placed as the server places them (``mysql_prepare_alter_table``): the old
    columns in their order, less the dropped ones, renamed or redefined where they are; then, in statement order,
    each added column at the end and each column with FIRST or AFTER moved there (AFTER names a column of the new
    definition, whatever the order of the specifications)."""
    keys = set(old.primary_key) | set(old.key_columns)
    known = {c.name.lower() for c in old.columns}
    for change in changes:
        if change.kind not in (ADD_COLUMN, DROP_COLUMN, RENAME_COLUMN, MODIFY_COLUMN):
            raise _Refused(f"unknown column change {change.kind!r}")
        if change.kind != ADD_COLUMN and change.name.lower() not in known:
            raise _Refused(f"column {change.name!r} is not in the known definition (the statement's IF EXISTS "
                           "skipped it, or the known definition is not the table's)")
    dropped = {c.name.lower() for c in changes if c.kind == DROP_COLUMN}
    renames = {c.name.lower(): c for c in changes if c.kind == RENAME_COLUMN}
    pending = [c for c in changes if c.kind in (ADD_COLUMN, MODIFY_COLUMN)]
    slots = []
    for column in old.columns:
        name = column.name.lower()
        change = next((c for c in pending if c.kind == MODIFY_COLUMN and c.name.lower() == name), None)
        if name in dropped:
            if column.name in keys:
                raise _Refused(f"column {column.name!r} is dropped, and the sinks key the rows by it")
            continue
        if change is not None and name in renames:
            raise _Refused(f"column {column.name!r} is renamed and redefined by the same statement")
        if change is not None or name in renames:
            target = change.final_name if change is not None else renames[name].final_name
            if column.name in keys and target != column.name:
                raise _Refused(f"column {column.name!r} is renamed, and the sinks key the rows by it")
            slots.append(_Slot(target, column.name, change))
            if change is not None and change.placement is None:
                pending.remove(change)
        else:
            slots.append(_Slot(column.name, column.name))
    for change in pending:
        if change.kind == ADD_COLUMN:
            slot = _Slot(change.name, None, change)
        else:
            slot = next((s for s in slots if s.change is change), None)
            if slot is None:  # the column is dropped or redefined already by the statement
                raise _Refused(f"column {change.name!r} is changed twice by the same statement")
            slots.remove(slot)
        _place(slots, slot, change.placement)
    names = [slot.name.lower() for slot in slots]
    if len(set(names)) != len(names):
        raise _Refused("two columns would have one name (the statement's IF NOT EXISTS skipped one, or the known "
                       "definition is not the table's)")
    return slots


def _find(slots: list[_Slot], name: str) -> int | None:
    name = name.lower()
    return next((i for i, slot in enumerate(slots) if slot.name.lower() == name), None)


def _place(slots: list[_Slot], slot: _Slot, placement: str | None) -> None:
    if placement is None:
        slots.append(slot)
    elif placement.upper() == "FIRST":
        slots.insert(0, slot)
    elif placement[:6].upper() == "AFTER ":
        i = _find(slots, placement[6:])
        if i is None:
            raise _Refused(f"column {placement[6:]!r} of {placement} is not in the new definition")
        slots.insert(i + 1, slot)
    else:
        raise _Refused(f"unknown column placement {placement!r}")


def _column(slot: _Slot, old: TableSchema, now: TableSchema | None, default_charset: str | None) -> Column:
    """The column's definition in the new version: the old one under its new name, or, for a column the statement
    added or redefined, the definition the table shows now, checked against the statement."""
    if slot.origin is not None and slot.change is None:
        return replace(old.column(slot.origin), name=slot.name)
    change = slot.change
    if change.generated:
        raise _Refused(f"column {slot.name!r} is generated: its values are computed by the server")
    if change.auto_increment:
        raise _Refused(f"column {slot.name!r} is AUTO_INCREMENT, which numbers the rows that hold 0 or NULL")
    if now is None:
        raise _Refused("the table's definition now cannot be read")
    try:
        col = now.column(slot.name)
    except KeyError:
        raise _Refused(f"column {slot.name!r} is not in the table now: a later statement changed it") from None
    try:
        problem = _type_difference(change.type_sql or "", col, default_charset)
    except ValueError:  # a parameter that is no number
        problem = "the type is not read"
    if problem is not None:
        raise _Refused(f"column {slot.name!r} is {col.column_type} now, not {change.type_sql} as the statement "
                       f"defined it ({problem}): a later statement changed it")
    nullable = change.nullable and slot.origin not in old.primary_key
    if col.nullable != nullable:
        raise _Refused(f"column {slot.name!r} is {'' if col.nullable else 'NOT '}NULL now, not as the statement "
                       "defined it: a later statement changed it")
    if slot.origin is not None:
        _check_retype(old.column(slot.origin), col, slot.origin in set(old.primary_key) | set(old.key_columns))
    _check_capturable(col, old)
    return col


def _check_capturable(col: Column, old: TableSchema) -> None:
    """A new or redefined column the sinks can hold and the binlog reader decodes as SELECT gives it (as
    ``source.validation`` checks the columns the stream starts with)."""
    try:
        sink_type(col)
    except UnsupportedColumnType as exc:
        raise _Refused(str(exc)) from None
    if col.compressed:
        raise _Refused(f"column {col.name!r} is COMPRESSED, which the binlog reader cannot parse")
    if not col.charset:
        return
    codec = string_codec(col.charset)
    if codec is UNSUPPORTED_CHARSET:
        raise _Refused(f"column {col.name!r} has character set {col.charset}, which the binlog reader cannot decode")
    if codec != "utf-8" and col.collation not in {c.collation for c in old.columns}:
        raise _Refused(f"column {col.name!r} has collation {col.collation}, which no column had when the table's "
                       "capture was validated")
    if col.data_type in ("enum", "set") and codec != "utf-8":
        if any(m.encode(codec or "utf-8") != m.encode("utf-8") for m in enum_values(col.column_type)):
            raise _Refused(f"column {col.name!r} has members the binlog names otherwise than the server does")


# -- types -------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _WrittenType:
    base: str  # information_schema's DATA_TYPE for it
    params: tuple[str, ...] | None
    unsigned: bool
    charset: str | None  # as written, or as NATIONAL, ASCII or UNICODE imply it
    collation: str | None


def _written_type(type_sql: str) -> _WrittenType | None:
    """The parts of a column type as an ALTER wrote it (``VARCHAR(40) CHARACTER SET latin1``); None when it is
    not read."""
    try:
        tokens = MySQL().tokenize(type_sql)
    except SqlglotError:
        return None
    words = [t.text.upper() if t.token_type not in (TokenType.STRING, TokenType.IDENTIFIER) else t.text
             for t in tokens]
    i, base = 0, []
    while i < len(tokens) and tokens[i].token_type is not TokenType.L_PAREN:
        if base and (words[i] in _TYPE_ATTRIBUTES or words[i] in ("CHARSET", "COLLATE") or (
                words[i] in ("CHARACTER", "CHAR") and i + 1 < len(words) and words[i + 1] == "SET")):
            break
        base.append(words[i])
        i += 1
    params = None
    if i < len(tokens) and tokens[i].token_type is TokenType.L_PAREN:
        params = []
        i += 1
        while i < len(tokens) and tokens[i].token_type is not TokenType.R_PAREN:
            if tokens[i].token_type is not TokenType.COMMA:
                params.append(tokens[i].text)
            i += 1
        i += 1
    unsigned, charset, collation, implied = False, None, None, None
    while i < len(tokens):
        word = words[i]
        if word in ("UNSIGNED", "ZEROFILL"):
            unsigned = True
        elif word in _IMPLIED_CHARSETS:
            implied = _IMPLIED_CHARSETS[word]
        elif word in ("CHARSET", "COLLATE") or (word in ("CHARACTER", "CHAR") and i + 1 < len(words)
                                                and words[i + 1] == "SET"):
            i += 1 if word in ("CHARSET", "COLLATE") else 2
            if i >= len(tokens):
                return None
            if word == "COLLATE":
                collation = tokens[i].text
            else:
                charset = tokens[i].text
        elif word not in _TYPE_ATTRIBUTES:
            return None
        i += 1
    name = " ".join(base).lower()
    if name.startswith(("national ", "nchar", "nvarchar")):
        implied = "utf8mb3"
    name = _TYPE_ALIASES.get(name, name)
    if name == "float" and params is not None and len(params) == 1 and params[0].isdigit():
        name, params = ("float" if int(params[0]) <= 24 else "double"), None
    return _WrittenType(name, None if params is None else tuple(params), unsigned, charset or implied, collation)


def _type_difference(type_sql: str, col: Column, default_charset: str | None) -> str | None:
    """How ``col`` differs from the type the statement wrote, in base type, parameters, sign, character set and
    collation; None when it is that type (display widths of integers and TEXT(n) lengths aside).

    A string type that names neither a character set nor a collation has the table's default character set: the
    server converts a column retyped so to it, whatever it had. A collation names its own."""
    written = _written_type(type_sql)
    if written is None:
        return "the type is not read"
    t = col.data_type
    if written.base != t:
        return f"{written.base} is not {t}"
    params = written.params or ()
    if col.is_integer or t in ("decimal", "float", "double"):
        if written.unsigned != col.unsigned:
            return "the sign differs"
    if t == "decimal":
        p = int(params[0]) if params else 10
        s = int(params[1]) if len(params) > 1 else 0
        if (p, s) != (col.numeric_precision, col.numeric_scale):
            return f"decimal({p},{s}) is not decimal({col.numeric_precision},{col.numeric_scale})"
    elif t in ("float", "double"):
        want = (int(params[0]), int(params[1])) if len(params) == 2 else None
        have = None if col.numeric_scale is None else (col.numeric_precision, col.numeric_scale)
        if want != have:
            return "the precision differs"
    elif t in ("char", "varchar", "binary", "varbinary"):
        if (int(params[0]) if params else 1) != col.char_length:
            return "the length differs"
    elif t in ("enum", "set"):
        if list(params) != enum_values(col.column_type):
            return "the members differ"
    elif t in ("datetime", "timestamp", "time"):
        if (int(params[0]) if params else 0) != (col.datetime_precision or 0):
            return "the fractional digits differ"
    elif t == "bit":
        if (int(params[0]) if params else 1) != col.numeric_precision:
            return "the number of bits differs"
    elif params and not col.is_integer and t not in _TEXT_BYTES and not t.endswith("blob") and t != "year":
        shown = re.search(r"\((.*)\)", col.column_type)
        if shown is None or shown.group(1).replace(" ", "").lower() != ",".join(params).lower():
            return "the parameters differ"
    charset = written.charset
    if charset is None and written.collation is None and t in _STRING_TYPES:
        if default_charset is None:
            raise _Refused(f"column {col.name!r} takes the table's default character set, which is not known")
        charset = default_charset
    if charset is not None and _charset(charset) != _charset(col.charset):
        return f"character set {charset} is not {col.charset}"
    if written.collation is not None and _collation(written.collation) != _collation(col.collation):
        return f"collation {written.collation} is not {col.collation}"
    return None


def _charset(name: str | None) -> str | None:
    name = name.lower() if name else name
    return "utf8mb3" if name == "utf8" else name


def _collation(name: str | None) -> str | None:
    name = name.lower() if name else name
    return "utf8mb3_" + name[5:] if name and name.startswith("utf8_") else name


def _check_retype(old: Column, new: Column, key: bool) -> None:
    """A redefined column keeps every value it holds exactly, and the sinks' type stays or widens."""
    if old.nullable and not new.nullable:
        raise _Refused(f"column {new.name!r} becomes NOT NULL: a NULL it holds turns into the type's implicit default "
                       "under a sql_mode that is not strict, which the binlog does not show")
    if (old.data_type, old.column_type.lower(), _charset(old.charset)) == (
            new.data_type, new.column_type.lower(), _charset(new.charset)):
        return
    if key:
        raise _Refused(f"the type of column {new.name!r} changes, and the sinks key the rows by it")
    if not _widens(old, new):
        before, after = old.column_type, new.column_type
        if old.charset and new.charset and _charset(old.charset) != _charset(new.charset):
            before, after = f"{before} character set {old.charset}", f"{after} character set {new.charset}"
        raise _Refused(f"column {new.name!r} changes from {before} to {after}, which may change values it holds")
    try:
        before, after = sink_type(old).spark, sink_type(new).spark
    except UnsupportedColumnType as exc:
        raise _Refused(str(exc)) from None
    if not _spark_widens(before, after):
        raise _Refused(f"column {new.name!r} changes from {old.column_type} to {new.column_type}, whose type in the "
                       f"sinks changes from {before} to {after}")


def _widens(old: Column, new: Column) -> bool:
    """Whether every value of ``old`` is the same value of ``new``."""
    if old.compressed or new.compressed:
        return False
    a, b = old.data_type, new.data_type
    if old.is_integer and new.is_integer:
        wider = _INT_BYTES[b] - _INT_BYTES[a]
        return (old.unsigned == new.unsigned and wider >= 0) or (old.unsigned and not new.unsigned and wider > 0)
    if a in ("decimal", "float", "double") and new.unsigned and not old.unsigned:
        return False
    if a == b == "decimal":
        p, s, p2, s2 = old.numeric_precision, old.numeric_scale, new.numeric_precision, new.numeric_scale
        return None not in (p, s, p2, s2) and s2 >= s and p2 - s2 >= p - s
    if a == "float" and b == "double":
        return old.numeric_scale is None and new.numeric_scale is None
    if a in _CHAR_TYPES and b in _CHAR_TYPES:
        if _charset(old.charset) != _charset(new.charset):
            return False
        if a in _TEXT_BYTES:
            return b in _TEXT_BYTES and _TEXT_BYTES[b] >= _TEXT_BYTES[a]
        if b in ("char", "varchar"):  # VARCHAR to CHAR would lose trailing spaces
            return (a == "char" or b == "varchar") and (new.char_length or 0) >= (old.char_length or 0)
        return b != "tinytext"
    if a == b and a in ("enum", "set"):
        members = enum_values(old.column_type)
        return _charset(old.charset) == _charset(new.charset) and enum_values(new.column_type)[:len(members)] == members
    return False


def _spark_widens(before: str, after: str) -> bool:
    """The sinks' type stays, or widens so that every value is kept (no change of representation)."""
    if before == after:
        return True
    if before in _SPARK_INTEGERS and after in _SPARK_INTEGERS:
        return _SPARK_INTEGERS.index(after) > _SPARK_INTEGERS.index(before)
    if (before, after) == ("float", "double"):
        return True
    old, new = _SPARK_DECIMAL.fullmatch(before), _SPARK_DECIMAL.fullmatch(after)
    if old and new:
        (p, s), (p2, s2) = map(int, old.groups()), map(int, new.groups())
        return s2 >= s and p2 - s2 >= p - s
    return False


# -- the value of an added column --------------------------------------------------------------------------


def _existing_value(col: Column, change: ColumnChange) -> Any:
    """What every row that existed before the ALTER holds in the added column, as the row decoder gives it."""
    if change.default_sql is None:
        return None if col.nullable else _implicit_default(col)
    kind, text = _literal(change.default_sql)
    if kind == "string" and text == "" and col.nullable:  # under that mode NOT NULL DEFAULT '' is an error
        raise _Refused(f"the DEFAULT {change.default_sql} is NULL under the sql_mode EMPTY_STRING_IS_NULL")
    if kind == "null":
        if not col.nullable:
            raise _Refused(NOT_DERIVABLE)
        return None
    return _value_of(kind, text, col)


def _literal(sql: str) -> tuple[str, str | None]:
    """A DEFAULT expression as ("null", None), ("number", text) or ("string", value); a reason for anything else
    (functions, expressions, hexadecimal and bit strings, strings with a character set introducer), and for a
    string whose value depends on the sql_mode of the statement's session, which the stream does not read."""
    try:
        expr = sqlglot.parse_one(sql, read="mysql")
    except Exception:  # sqlglot raises more than ParseError on input it does not expect
        raise _Refused(NOT_DERIVABLE) from None
    while isinstance(expr, exp.Paren):
        expr = expr.this
    negative = isinstance(expr, exp.Neg)
    if negative:
        expr = expr.this
    if isinstance(expr, exp.Null) and not negative:
        return "null", None
    if isinstance(expr, exp.Boolean) and not negative:
        return "number", "1" if expr.this else "0"
    if type(expr) is exp.Literal and not expr.is_string:
        return "number", ("-" if negative else "") + expr.this
    if type(expr) is exp.Literal and not negative:
        if sql[expr.meta.get("start", 0):].startswith('"'):
            raise _Refused(f"the DEFAULT {sql} names a column under the sql_mode ANSI_QUOTES (or ORACLE)")
        if "\\" in sql:
            raise _Refused(f"the DEFAULT {sql} has a backslash, which means another string under the sql_mode "
                           "NO_BACKSLASH_ESCAPES")
        return "string", expr.this
    raise _Refused(NOT_DERIVABLE)


def _implicit_default(col: Column) -> Any:
    """MariaDB's value for a NOT NULL column added without a DEFAULT."""
    t = col.data_type
    if col.is_integer:
        return 0
    if t == "decimal":
        return _quantized(Decimal(0), col)
    if t in ("float", "double"):
        return 0.0
    if t in _CHAR_TYPES or t == "set":
        return ""
    if t == "enum":
        return enum_values(col.column_type)[0]
    raise _Refused(NOT_DERIVABLE)


def _value_of(kind: str, text: str, col: Column) -> Any:
    """A constant DEFAULT as the column stores it, as the row decoder gives it."""
    t = col.data_type
    if col.is_integer:
        if not _INTEGER_TEXT.fullmatch(text):
            raise _Refused(NOT_DERIVABLE)
        value = int(text)
        bits = 8 * _INT_BYTES[t]
        low, high = (0, 2 ** bits - 1) if col.unsigned else (-(2 ** (bits - 1)), 2 ** (bits - 1) - 1)
        if not low <= value <= high:
            raise _Refused(f"the DEFAULT {text} is out of the range of {col.column_type}")
        return value
    if t == "decimal":
        if not _DECIMAL_TEXT.fullmatch(text):
            raise _Refused(NOT_DERIVABLE)
        value = _quantized(Decimal(text), col)
        if value < 0 and col.unsigned:
            raise _Refused(f"the DEFAULT {text} is out of the range of {col.column_type}")
        return value
    if t in ("float", "double"):
        return _float_value(text, col)
    if kind != "string":
        raise _Refused(NOT_DERIVABLE)
    if t in _CHAR_TYPES:
        return _string_value(text, col)
    members = enum_values(col.column_type) if t in ("enum", "set") else []
    if t == "enum":
        if text not in members:
            raise _Refused(f"the DEFAULT {text!r} is no member of {col.column_type}")
        return text
    if t == "set":
        chosen = text.split(",") if text else []
        if any(m not in members for m in chosen):
            raise _Refused(f"the DEFAULT {text!r} is no set of members of {col.column_type}")
        return ",".join(m for m in members if m in chosen)
    raise _Refused(NOT_DERIVABLE)


def _quantized(value: Decimal, col: Column) -> Decimal:
    """A decimal rounded to the column's scale as the server rounds it (half away from zero), in its range."""
    p, s = col.numeric_precision or 10, col.numeric_scale or 0
    try:
        value = value.quantize(Decimal(1).scaleb(-s), rounding=ROUND_HALF_UP)
    except InvalidOperation:
        raise _Refused(f"the DEFAULT is out of the range of {col.column_type}") from None
    if abs(value) >= Decimal(10) ** (p - s):
        raise _Refused(f"the DEFAULT {value} is out of the range of {col.column_type}")
    return value


def _float_value(text: str, col: Column) -> float:
    """The stored FLOAT/DOUBLE of a number's text. For FLOAT(M,D)/DOUBLE(M,D) only a number the column holds
    without rounding: the server rounds the binary value, which may round otherwise than the text."""
    if not _FLOAT_TEXT.fullmatch(text):
        raise _Refused(NOT_DERIVABLE)
    value = float(text)
    if value < 0 and col.unsigned:
        raise _Refused(f"the DEFAULT {text} is out of the range of {col.column_type}")
    single = col.data_type == "float"
    if col.numeric_scale is not None:
        digits = _DECIMAL_TEXT.fullmatch(text) and text.lstrip("+-").split(".")
        if not digits or (len(digits) > 1 and len(digits[1].rstrip("0")) > col.numeric_scale) or (
                len(digits[0].lstrip("0")) > (col.numeric_precision or 0) - col.numeric_scale):
            raise _Refused(f"the DEFAULT {text} is rounded or out of range in {col.column_type}")
        return rounded_float(col.numeric_scale, single)(value)
    if single:
        try:
            return struct.unpack("<f", struct.pack("<f", value))[0]
        except (OverflowError, struct.error):
            raise _Refused(f"the DEFAULT {text} is out of the range of {col.column_type}") from None
    return value


def _string_value(text: str, col: Column) -> str:
    """A string DEFAULT as the column gives it back: CHAR without trailing spaces; the value must fit and be
    representable in the column's character set."""
    value = text.rstrip(" ") if col.data_type == "char" else text
    if col.data_type in ("char", "varchar") and len(value) > (col.char_length or 0):
        raise _Refused(f"the DEFAULT {text!r} is longer than {col.column_type}")
    codec = string_codec(col.charset)
    if codec is None or codec is UNSUPPORTED_CHARSET:
        raise _Refused(NOT_DERIVABLE)
    narrow = _charset(col.charset) in ("utf8mb3", "ucs2")  # no characters beyond the BMP
    try:
        kept = value.encode(codec).decode(codec) == value and not (narrow and any(ord(ch) > 0xFFFF for ch in value))
    except UnicodeError:
        kept = False
    if not kept:
        raise _Refused(f"the DEFAULT {text!r} has characters that character set {col.charset} does not hold")
    return value
