"""Table versions the sinks' in-place evolution tests share (``test_jdbc_evolution``, ``test_delta_evolution``):
the same chains of ALTERs, each sink checked with its own reader."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

from airflow_cdc_provider.core.chunks import TableId
from airflow_cdc_provider.source.schema import Column, TableSchema
from airflow_cdc_provider.source.table_versions import TableVersion

TABLE = "shop.t"


def column(name: str, column_type: str, precision: int | None = None, scale: int | None = None,
           fsp: int | None = None) -> Column:
    data_type = column_type.split("(")[0].split()[0]
    return Column(name, data_type, column_type, True, None, None, None, precision, scale, fsp)


ID = column("id", "int(11)", 10, 0)


def version(number: int, *columns: Column, renamed=None, added=None, key: Column = ID) -> TableVersion:
    schema = TableSchema(TableId.parse(TABLE), (key, *columns), (key.name,), (key.name,))
    return TableVersion(number, schema, renamed=renamed or {}, added=added or {}, statement=f"ALTER {number}")


def one_version_of_every_kind(renamed_to: str) -> tuple[TableVersion, TableVersion, list[tuple]]:
    """Version 0 (id, a, b, c, d), its two rows, and version 1, which renames ``a`` to ``renamed_to``, widens
    ``b`` and ``c``, drops ``d`` and adds a column of most kinds with a value (``n`` with NULL)."""
    v0 = version(0, column("a", "varchar(10)"), column("b", "int(11)", 10, 0),
                 column("c", "decimal(10,2)", 10, 2), column("d", "text"))
    v1 = version(1, column("b", "bigint(20)", 19, 0), column(renamed_to, "varchar(10)"),
                 column("c", "decimal(14,4)", 14, 4), column("e", "int(11)", 10, 0), column("f", "varchar(20)"),
                 column("g", "datetime(3)", fsp=3), column("h", "timestamp"), column("u", "bigint(20) unsigned", 20, 0),
                 column("bl", "blob"), column("n", "int(11)", 10, 0),
                 renamed={renamed_to: "a"},
                 added={"e": 7, "f": "it's 100%", "g": dt.datetime(2024, 1, 2, 3, 4, 5, 678000),
                        "h": dt.datetime(2024, 5, 6, 7, 8, 9), "u": 2**64 - 1, "bl": b"\x00'\x01", "n": None})
    return v0, v1, [(1, "x", 5, Decimal("12.34"), "gone"), (2, "y", None, None, "gone")]


# the values version 1's added columns hold in the rows that existed, in order e, f, g, h, u, bl, n
ADDED_VALUES = (7, "it's 100%", dt.datetime(2024, 1, 2, 3, 4, 5, 678000),
                dt.datetime(2024, 5, 6, 7, 8, 9, tzinfo=dt.timezone.utc), Decimal(2**64 - 1), b"\x00'\x01", None)


def swap_then_rename_onto_a_dropped_column() -> tuple[TableVersion, TableVersion, TableVersion]:
    """(id, a, b, c); then ``a`` and ``b`` swap names; then ``b`` is dropped and ``a`` renamed to ``b``."""
    v0 = version(0, column("a", "varchar(5)"), column("b", "varchar(5)"), column("c", "varchar(5)"))
    v1 = version(1, column("b", "varchar(5)"), column("a", "varchar(5)"), column("c", "varchar(5)"),
                 renamed={"a": "b", "b": "a"})
    v2 = version(2, column("b", "varchar(5)"), column("c", "varchar(5)"), renamed={"b": "a"})
    return v0, v1, v2
