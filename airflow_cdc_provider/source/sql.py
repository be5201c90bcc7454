"""SQL text for MySQL/MariaDB: identifier quoting and key-range predicates.

Every identifier goes through ``quote_ident`` (backticks, embedded backticks doubled), so table and column
names with spaces, backticks, reserved words or unicode work. Values are always bound as parameters.

The SQL built here is for ``cursor.execute(sql, params)`` with ``params`` always given (an empty tuple if
there are none): pymysql then formats the text with ``%``, so ``quote_ident`` doubles any ``%`` in a name.

Key ranges are half-open ``[start, end)``. Composite keys compare as row values (lexicographically, each
column in its collation), but the SQL spells the comparison out: ``(a, b) >= (x, y)`` becomes
``a >= x AND (a > x OR (a = x AND b >= y))``. It means the same, and MariaDB 10.11 turns only the spelled-out
form into an index range scan; the row-constructor form scans the whole table (checked with EXPLAIN).
"""

from __future__ import annotations

from typing import Any, Sequence

from airflow_cdc_provider.core.chunks import TableId


def quote_ident(name: str) -> str:
    if not isinstance(name, str) or name == "":
        raise ValueError(f"invalid identifier {name!r}")
    return "`" + name.replace("`", "``").replace("%", "%%") + "`"


def unquote_ident(name: str) -> str:
    """A name as the server wrote it (in backticks, in double quotes under ANSI_QUOTES, or bare), unquoted."""
    return name[1:-1].replace(name[0] * 2, name[0]) if name[:1] in ("`", '"') else name


def quote_table(table: TableId) -> str:
    return f"{quote_ident(table.database)}.{quote_ident(table.table)}"


def display_table(table: TableId) -> str:
    """The quoted name as a user would type it in SQL (for messages; not %-escaped for pymysql)."""
    return ".".join("`" + part.replace("`", "``") + "`" for part in (table.database, table.table))


def compare(columns: Sequence[str], op: str, value: Sequence[Any]) -> tuple[str, list[Any]]:
    """``key <op> value`` for a single or composite key, with bound parameters."""
    if op not in ("<", "<=", ">", ">=", "="):
        raise ValueError(op)
    if len(value) != len(columns):
        raise ValueError(f"key {value!r} does not match key columns {list(columns)!r}")
    cols = [quote_ident(c) for c in columns]
    if len(cols) == 1:
        return f"{cols[0]} {op} %s", [value[0]]
    if op == "=":
        return "(" + " AND ".join(f"{c} = %s" for c in cols) + ")", list(value)
    strict = op[0]  # '<' or '>'
    alternatives: list[str] = []
    params: list[Any] = []
    for i in range(len(cols)):
        last = i == len(cols) - 1
        terms = [f"{c} = %s" for c in cols[:i]] + [f"{cols[i]} {op if last else strict} %s"]
        params += list(value[: i + 1])
        alternatives.append("(" + " AND ".join(terms) + ")")
    # the leading-column bound lets the optimizer start the range scan at the right place
    lead = f"{cols[0]} {strict}= %s"
    return f"({lead} AND ({' OR '.join(alternatives)}))", [value[0], *params]


def range_predicate(
    columns: Sequence[str], start: Sequence[Any] | None, end: Sequence[Any] | None
) -> tuple[str, list[Any]]:
    """WHERE clause (without ``WHERE``) for ``start <= key < end``; ``("1=1", [])`` for the whole table."""
    parts: list[str] = []
    params: list[Any] = []
    if start is not None:
        sql, p = compare(columns, ">=", start)
        parts.append(sql)
        params += p
    if end is not None:
        sql, p = compare(columns, "<", end)
        parts.append(sql)
        params += p
    return (" AND ".join(parts) or "1=1"), params


def order_by(columns: Sequence[str], descending: bool = False) -> str:
    suffix = " DESC" if descending else ""
    return ", ".join(quote_ident(c) + suffix for c in columns)
