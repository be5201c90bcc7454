"""Table discovery and table metadata from ``information_schema``.

Table patterns, matched against ``database.table``:

* ``shop.orders``: one table (exact, case-sensitive as the server stores it);
* ``shop.*`` / ``shop.order_?``: shell-style globs; ``*`` and ``?`` do not cross the dot;
* ``re:shop\\.orders_\\d+``: a full-match regular expression.

The chunk key is the primary key (all its columns, in key order) unless the pipeline names a chunk key
column for the table.

System-versioned tables are discovered (a pattern matching one must not skip it silently) and refused by
``load_schema``: a DELETE there is an UPDATE in the binlog and the primary key holds the hidden ``row_end``.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from typing import Any, Iterable, Mapping, Sequence

from airflow_cdc_provider.core.chunks import TableId
from airflow_cdc_provider.source.server import SourceError

INTEGER_TYPES = {"tinyint", "smallint", "mediumint", "int", "integer", "bigint"}
STRING_TYPES = {"char", "varchar", "tinytext", "text", "mediumtext", "longtext", "enum", "set"}


class TableConfigError(SourceError):
    """A configured table cannot be captured: unknown, no key, bad chunk key column."""


@dataclass(frozen=True)
class Column:
    name: str
    data_type: str  # information_schema DATA_TYPE, lower case: int, varchar, decimal, ...
    column_type: str  # full type: 'bigint(20) unsigned', "enum('a','b')"
    nullable: bool
    charset: str | None
    collation: str | None
    char_length: int | None
    numeric_precision: int | None
    numeric_scale: int | None
    datetime_precision: int | None

    @property
    def unsigned(self) -> bool:
        return "unsigned" in self.column_type.lower()

    @property
    def is_integer(self) -> bool:
        return self.data_type in INTEGER_TYPES

    @property
    def is_collated_string(self) -> bool:
        return self.data_type in STRING_TYPES and bool(self.collation)

    @property
    def compressed(self) -> bool:
        """MariaDB's column compression (``VARCHAR(n) COMPRESSED``), shown in COLUMN_TYPE as a comment."""
        return "compressed" in self.column_type.lower()


@dataclass(frozen=True)
class TableSchema:
    table: TableId
    columns: tuple[Column, ...]
    primary_key: tuple[str, ...]
    key_columns: tuple[str, ...]  # the chunk key: primary key or the configured column

    def column(self, name: str) -> Column:
        for c in self.columns:
            if c.name == name:
                return c
        raise KeyError(name)

    @property
    def column_names(self) -> list[str]:
        return [c.name for c in self.columns]

    @property
    def key(self) -> tuple[Column, ...]:
        return tuple(self.column(n) for n in self.key_columns)

    @property
    def single_integer_key(self) -> bool:
        return len(self.key_columns) == 1 and self.key[0].is_integer

    def to_dict(self) -> dict[str, Any]:
        return {"table": str(self.table), "columns": [asdict(c) for c in self.columns],
                "primary_key": list(self.primary_key), "key_columns": list(self.key_columns)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "TableSchema":
        return cls(TableId.parse(data["table"]), tuple(Column(**c) for c in data["columns"]),
                   tuple(data["primary_key"]), tuple(data["key_columns"]))


def enum_values(column_type: str) -> list[str]:
    """The members of ``enum('a','b')`` / ``set('a','b')`` in definition order."""
    inner = column_type[column_type.index("(") + 1 : column_type.rindex(")")]
    return [m.group(1).replace("''", "'") for m in re.finditer(r"'((?:[^']|'')*)'", inner)]


def compile_pattern(pattern: str) -> re.Pattern[str]:
    if pattern.startswith("re:"):
        try:
            return re.compile(pattern[3:])
        except re.error as exc:
            raise TableConfigError(f"table pattern {pattern!r} is not a valid regular expression: {exc}") from None
    if "." not in pattern:
        raise TableConfigError(
            f"table pattern {pattern!r} must be 'database.table' (globs like 'shop.*' or 're:<regex>' work too)"
        )
    return re.compile(_glob_to_regex(pattern))


def _glob_to_regex(glob: str) -> str:
    """``*`` and ``?`` match within one name part (never across the dot); ``[...]`` classes pass through."""
    out, i = [], 0
    while i < len(glob):
        ch = glob[i]
        if ch == "*":
            out.append("[^.]*")
        elif ch == "?":
            out.append("[^.]")
        elif ch == "[" and "]" in glob[i + 1 :]:
            j = glob.index("]", i + 1)
            out.append(glob[i : j + 1])
            i = j
        else:
            out.append(re.escape(ch))
        i += 1
    return "".join(out)


def is_exact(pattern: str) -> bool:
    return not pattern.startswith("re:") and not any(ch in pattern for ch in "*?[")


def list_tables(conn: Any, table_types: Sequence[str] = ("BASE TABLE", "SYSTEM VERSIONED")) -> list[TableId]:
    with conn.cursor() as cur:
        cur.execute(
            "SELECT TABLE_SCHEMA, TABLE_NAME FROM information_schema.TABLES "
            f"WHERE TABLE_TYPE IN ({_placeholders(table_types)}) AND TABLE_SCHEMA NOT IN "
            "('mysql', 'information_schema', 'performance_schema', 'sys') ORDER BY 1, 2",
            tuple(table_types),
        )
        return [TableId(db, t) for db, t in cur.fetchall()]


def discover(conn: Any, patterns: Sequence[str]) -> list[TableId]:
    """Tables matching any pattern, in pattern order then name order. An exact name that does not exist,
    or a pattern matching nothing, is an error (a typo must not silently capture nothing)."""
    available = list_tables(conn)
    names = {str(t): t for t in available}
    found: list[TableId] = []
    for pattern in patterns:
        if is_exact(pattern):
            TableId.parse(pattern)
            if pattern not in names:
                if pattern in {str(t) for t in list_tables(conn, ("VIEW", "SEQUENCE"))}:
                    raise TableConfigError(
                        f"{pattern!r} is a view or a sequence, not a table: it has no binlog rows of its own to "
                        "capture; capture the tables it reads from instead (check source.tables)"
                    )
                raise TableConfigError(_unknown_table_message(pattern, available))
            matches = [names[pattern]]
        else:
            rx = compile_pattern(pattern)
            matches = [t for t in available if rx.fullmatch(str(t))]
            if not matches:
                raise TableConfigError(f"table pattern {pattern!r} matches no table on the source")
        found += [t for t in matches if t not in found]
    return found


def _unknown_table_message(name: str, available: Iterable[TableId]) -> str:
    import difflib

    from airflow_cdc_provider.core.hints import did_you_mean

    db = name.partition(".")[0]
    dbs = {t.database for t in available}
    if db not in dbs:
        hint = difflib.get_close_matches(db, sorted(dbs), n=1)
        return (
            f"unknown table {name!r}: database {db!r} does not exist or the user cannot see it"
            + (f" (did you mean database {hint[0]!r}?)" if hint else "")
        )
    table = TableId.parse(name)
    return (f"unknown table {name!r}" + did_you_mean(name, [str(t) for t in available]) + ": it does not exist, or "
            f"the connection's user cannot see it (GRANT SELECT ON `{table.database}`.`{table.table}` TO that user); "
            "check source.tables")


def load_schema(conn: Any, table: TableId, chunk_key: str | Sequence[str] | None = None) -> TableSchema:
    with conn.cursor() as cur:
        cur.execute(
            "SELECT COLUMN_NAME, DATA_TYPE, COLUMN_TYPE, IS_NULLABLE, CHARACTER_SET_NAME, COLLATION_NAME, "
            "CHARACTER_MAXIMUM_LENGTH, NUMERIC_PRECISION, NUMERIC_SCALE, DATETIME_PRECISION "
            "FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s "
            "ORDER BY ORDINAL_POSITION",
            (table.database, table.table),
        )
        rows = cur.fetchall()
        if not rows:
            raise TableConfigError(f"unknown table {str(table)!r}: it does not exist or the user cannot see it")
        columns = tuple(
            Column(
                name=r[0],
                data_type=str(r[1]).lower(),
                column_type=str(r[2]),
                nullable=r[3] == "YES",
                charset=r[4],
                collation=r[5],
                char_length=int(r[6]) if r[6] is not None else None,
                numeric_precision=int(r[7]) if r[7] is not None else None,
                numeric_scale=int(r[8]) if r[8] is not None else None,
                datetime_precision=int(r[9]) if r[9] is not None else None,
            )
            for r in rows
        )
        cur.execute(
            "SELECT COLUMN_NAME FROM information_schema.KEY_COLUMN_USAGE WHERE TABLE_SCHEMA = %s "
            "AND TABLE_NAME = %s AND CONSTRAINT_NAME = 'PRIMARY' ORDER BY ORDINAL_POSITION",
            (table.database, table.table),
        )
        pk = tuple(r[0] for r in cur.fetchall())
        cur.execute(
            "SELECT TABLE_TYPE FROM information_schema.TABLES WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s",
            (table.database, table.table),
        )
        if any(r[0] == "SYSTEM VERSIONED" for r in cur.fetchall()):
            raise TableConfigError(
                f"table {str(table)!r} is system-versioned (WITH SYSTEM VERSIONING), which cannot be captured: its "
                "binlog writes a DELETE as an UPDATE of the hidden row_end column and keeps history rows that SELECT "
                "does not show; leave it out of source.tables (narrow a pattern that matches it)"
            )
    names = [c.name for c in columns]
    if chunk_key:
        key = (chunk_key,) if isinstance(chunk_key, str) else tuple(chunk_key)
        missing = [k for k in key if k not in names]
        if missing:
            raise TableConfigError(
                f"chunk key column {missing[0]!r} does not exist in table {str(table)!r}; "
                f"its columns are {', '.join(names)}"
            )
    elif pk:
        key = pk
    else:
        raise TableConfigError(
            f"table {str(table)!r} has no primary key: set a chunk key column for it "
            f"(source.chunk_key: {{{str(table)}: <column>}}) or add a primary key"
        )
    return TableSchema(table, columns, pk, key)


def table_charset(conn: Any, table: TableId) -> str | None:
    """The table's default character set, which a column the table's statements type without one takes; None when
    the table is not there. A collation's name begins with its character set's."""
    collation = _table_option(conn, table, "TABLE_COLLATION")
    return collation.split("_", 1)[0] if collation else None


def table_engine(conn: Any, table: TableId) -> str | None:
    """The table's storage engine as the server names it (``InnoDB``); None when the table is not there."""
    return _table_option(conn, table, "ENGINE")


def _table_option(conn: Any, table: TableId, column: str) -> str | None:
    with conn.cursor() as cur:
        cur.execute(f"SELECT {column} FROM information_schema.TABLES WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s",
                    (table.database, table.table))
        row = cur.fetchone()
    return str(row[0]) if row and row[0] else None


def load_schemas(
    conn: Any, tables: Sequence[TableId], chunk_keys: Mapping[str, Any] | None = None
) -> list[TableSchema]:
    chunk_keys = chunk_keys or {}
    return [load_schema(conn, t, chunk_keys.get(str(t))) for t in tables]


ColumnFacts = tuple[str, str, bool, str | None, str | None]  # name, full type, nullable, charset, collation


def column_type_of(column: Column) -> ColumnFacts:
    """What ``column_types`` says of a column: name, full type, nullability, character set, collation."""
    return column.name, column.column_type, column.nullable, column.charset, column.collation


def column_types(conn: Any, tables: Iterable[TableId]) -> dict[TableId, list[ColumnFacts]]:
    """Each table's columns now (``column_type_of`` each), in order, in one query; a table that is gone is absent.
    Enough to tell whether a definition still describes the table, without loading every table's schema."""
    wanted = set(tables)
    if not wanted:
        return {}
    databases = sorted({t.database for t in wanted})
    names = sorted({t.table for t in wanted})
    out: dict[TableId, list[ColumnFacts]] = {}
    with conn.cursor() as cur:
        cur.execute(
            "SELECT TABLE_SCHEMA, TABLE_NAME, COLUMN_NAME, COLUMN_TYPE, IS_NULLABLE, CHARACTER_SET_NAME, "
            f"COLLATION_NAME FROM information_schema.COLUMNS WHERE TABLE_SCHEMA IN ({_placeholders(databases)}) "
            f"AND TABLE_NAME IN ({_placeholders(names)}) ORDER BY TABLE_SCHEMA, TABLE_NAME, ORDINAL_POSITION",
            databases + names)
        for database, name, column, column_type, nullable, charset, collation in cur.fetchall():
            table = TableId(database, name)
            if table in wanted:
                out.setdefault(table, []).append((column, str(column_type), nullable == "YES", charset, collation))
    return out


def _placeholders(values: Sequence[Any]) -> str:
    return ", ".join(["%s"] * len(values))
