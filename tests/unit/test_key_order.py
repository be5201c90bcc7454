"""Key orders that need no server: an ENUM key orders by its list, a name not in it is refused (its chunk would be
a guess); numbers and dates order as Python orders them, so the emit filter compares such keys as they are."""

from __future__ import annotations

import pytest

from airflow_cdc_provider.core.chunks import TableId
from airflow_cdc_provider.source.key_order import DatabaseKeyOrder
from airflow_cdc_provider.source.schema import Column, TableSchema

T = TableId("db", "regions")


def column(name, data_type, column_type, charset=None, collation=None):
    return Column(name, data_type, column_type, False, charset, collation, None, None, None, None)


def schema(*columns):
    names = tuple(c.name for c in columns)
    return TableSchema(T, columns, names, names)


REGION = column("region", "enum", "enum('apac','Emea','latam')", "utf8mb4", "utf8mb4_general_ci")


def test_an_enum_key_orders_by_its_list_and_a_name_not_in_it_is_refused_naming_table_column_and_fix():
    order = DatabaseKeyOrder(None, schema(REGION, column("id", "int", "int(11)")))
    assert not order.is_natural and not order.needs_database
    assert sorted([("latam", 1), ("Emea", 2), ("apac", 3), ("", 4)], key=order) == \
           [("", 4), ("apac", 3), ("Emea", 2), ("latam", 1)]  # '' is the server's error value, index 0
    with pytest.raises(ValueError, match=r"^db\.regions: key column region holds 'emea', which is not in its "
                                         r"definition enum\('apac','Emea','latam'\).*--table db\.regions\)$"):
        order(("emea", 1))


def test_keys_of_numbers_and_dates_are_compared_as_they_are():
    assert DatabaseKeyOrder(None, schema(column("d", "date", "date"), column("id", "bigint", "bigint(20)"))).is_natural
    text = column("name", "varchar", "varchar(10)", "utf8mb4", "utf8mb4_general_ci")
    assert not DatabaseKeyOrder(None, schema(text)).is_natural
