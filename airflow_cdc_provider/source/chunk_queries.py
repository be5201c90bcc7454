"""The database side of chunks: the splitter's queries (``core.chunks.KeyRangeQueries``) for one table, and
the SELECT of a chunk's rows.

Every query walks the chunk key's index in key order and compares in the database, so string keys follow
the column collation and BIGINT UNSIGNED keys above 2**63 stay exact (bound as Python ints).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from airflow_cdc_provider.core.chunks import Chunk, SplitOptions, split_table
from airflow_cdc_provider.core.keys import Key
from airflow_cdc_provider.source.key_order import order_signature
from airflow_cdc_provider.source.schema import TableSchema
from airflow_cdc_provider.source.sql import compare, order_by, quote_ident, quote_table, range_predicate


class MySQLKeyRangeQueries:
    def __init__(self, conn: Any, schema: TableSchema) -> None:
        self.conn = conn
        self.schema = schema
        self._t = quote_table(schema.table)
        self._cols = schema.key_columns
        self._select_key = ", ".join(quote_ident(c) for c in self._cols)
        self._order = order_by(self._cols)

    def _one(self, sql: str, params: list[Any] | tuple = ()) -> tuple | None:
        with self.conn.cursor() as cur:
            cur.execute(sql, params)
            return cur.fetchone()

    def has_more_rows_than(self, n: int) -> bool:
        row = self._one(f"SELECT COUNT(*) FROM (SELECT 1 FROM {self._t} LIMIT %s) AS s", (n + 1,))
        return bool(row and row[0] > n)

    def min_max_single(self) -> tuple[Any, Any]:
        k = quote_ident(self._cols[0])
        row = self._one(f"SELECT MIN({k}), MAX({k}) FROM {self._t}")
        return (row[0], row[1]) if row else (None, None)

    def approximate_row_count(self) -> int:
        row = self._one(
            "SELECT TABLE_ROWS FROM information_schema.TABLES WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s",
            (self.schema.table.database, self.schema.table.table),
        )
        return int(row[0] or 0) if row else 0

    def min_key(self) -> Key | None:
        row = self._one(f"SELECT {self._select_key} FROM {self._t} ORDER BY {self._order} LIMIT 1")
        return tuple(row) if row else None

    def nth_key_from(self, start: Key, n: int) -> tuple[Key | None, bool]:
        where, params = compare(self._cols, ">=", start)
        same, same_params = compare(self._cols, "=", start)
        row = self._one(
            f"SELECT {self._select_key}, {same} FROM {self._t} WHERE {where} "
            f"ORDER BY {self._order} LIMIT 1 OFFSET %s",
            [*same_params, *params, n],
        )
        if row is None:
            return None, False
        return tuple(row[:-1]), bool(row[-1])

    def next_key_after(self, key: Key) -> Key | None:
        where, params = compare(self._cols, ">", key)
        row = self._one(f"SELECT {self._select_key} FROM {self._t} WHERE {where} ORDER BY {self._order} LIMIT 1", params)
        return tuple(row) if row else None


def selected_column(col) -> str:
    """How a chunk's SELECT reads a column: a FLOAT as a DOUBLE, its exact value (the server prints a FLOAT to 6
    significant digits, 16777216 as 16777200, while the binlog holds the value)."""
    if col.data_type == "float" and col.numeric_scale is None:
        return f"CAST({quote_ident(col.name)} AS DOUBLE)"
    return quote_ident(col.name)


def select_chunk_sql(schema: TableSchema, chunk: Chunk) -> tuple[str, list[Any]]:
    """The SELECT of a chunk's rows: every column, the key range as the WHERE clause, no lock, no ORDER BY."""
    where, params = range_predicate(schema.key_columns, chunk.start, chunk.end)
    cols = ", ".join(selected_column(c) for c in schema.columns)
    return f"SELECT {cols} FROM {quote_table(schema.table)} WHERE {where}", params


def split_schema(conn: Any, schema: TableSchema, options: SplitOptions) -> list[Chunk]:
    """The table's chunks, each with the key order they were planned under (``order_signature``)."""
    chunks = split_table(
        schema.table,
        schema.key_columns,
        MySQLKeyRangeQueries(conn, schema),
        options,
        single_integer_key=schema.single_integer_key,
    )
    signature = order_signature(schema)
    return [replace(c, key_order=signature) for c in chunks]
