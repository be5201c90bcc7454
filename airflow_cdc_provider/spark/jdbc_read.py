"""Reading key ranges of a MySQL/MariaDB table with Spark's JDBC source, values typed by ``sinks/types.py``.

URL ``jdbc:mysql://`` with the MariaDB Connector/J driver class (a ``jdbc:mariadb:`` URL makes Spark pick a
dialect that returns wrong values, feasibility P5). Each Spark partition is one key range; the range
predicate is applied to the table's own key columns, so MariaDB range-scans the primary key. Lossy types
are selected as text/numbers (``sinks/types.py``) and cast back in Spark.
"""

from __future__ import annotations

from typing import Any, Sequence

from pymysql.converters import escape_item

from airflow_cdc_provider.core.chunks import TableId
from airflow_cdc_provider.core.keys import Key
from airflow_cdc_provider.core.records import null_key_message
from airflow_cdc_provider.sinks.types import TableSinkTypes
from airflow_cdc_provider.source.settings import ConnectionSettings, sql_mode_without
from airflow_cdc_provider.source.sql import quote_table, range_predicate

DRIVER = "org.mariadb.jdbc.Driver"


def jdbc_url(settings: ConnectionSettings) -> str:
    params = ["permitMysqlScheme", f"connectTimeout={settings.connect_timeout * 1000}"]
    ssl = settings.ssl or {}
    if ssl.get("ca"):
        params += ["sslMode=verify-full" if ssl.get("check_hostname", True) else "sslMode=verify-ca",
                   f"serverSslCert={ssl['ca']}"]
    return f"jdbc:mysql://{settings.host}:{settings.port}/?" + "&".join(params)


def jdbc_properties(settings: ConnectionSettings) -> dict[str, str]:
    return {
        "user": settings.user,
        "password": settings.password,
        "driver": DRIVER,
        # and bounds inlined with backslash escapes (``literal_sql``), which NO_BACKSLASH_ESCAPES would read otherwise
        "sessionInitStatement": f"SET time_zone = '+00:00', "
                                f"{sql_mode_without('PAD_CHAR_TO_FULL_LENGTH', 'NO_BACKSLASH_ESCAPES')}",
        "fetchsize": "10000",  # Connector/J streams the result in batches of this many rows (bounded memory)
    }


def literal_sql(sql: str, params: Sequence[Any]) -> str:
    """Inline bound values as SQL literals (JDBC predicates are plain text); also undoes ``%%``."""
    return sql % tuple(escape_item(p, "utf8mb4") for p in params)


def range_sql(key_columns: Sequence[str], start: Key | None, end: Key | None) -> str:
    where, params = range_predicate(key_columns, start, end)
    return literal_sql(where, params)


def read_key_ranges(spark, settings: ConnectionSettings, types: TableSinkTypes,
                    ranges: Sequence[tuple[Key | None, Key | None]], refuse_null_keys: bool = True):
    """A DataFrame of the rows in the given key ranges (one Spark partition per range), sink-typed. A key column
    that reads as NULL (a zero or invalid date) fails the read, unless ``refuse_null_keys`` is false."""
    from pyspark.sql import functions as F

    schema = types.schema
    table: TableId = schema.table
    select = literal_sql(f"(SELECT {', '.join(types.jdbc_select_list())} FROM {quote_table(table)}) AS __cdc_src", ())
    predicates = [range_sql(schema.key_columns, s, e) for s, e in ranges]
    df = spark.read.jdbc(jdbc_url(settings), select, predicates=predicates, properties=jdbc_properties(settings))
    cols = []
    for i, (c, t) in enumerate(zip(schema.columns, types.types, strict=True)):
        src = F.col(f"__cdc_{i}")
        # temporal text that Spark cannot cast (invalid dates) becomes NULL, as the binlog decoders give
        cast = src.try_cast(t.spark) if t.try_cast else src.cast(t.spark)
        # a key the sinks could not tell apart
        if refuse_null_keys and t.try_cast and c.name in schema.key_columns and not c.nullable:
            cast = F.when(cast.isNull(), F.raise_error(F.lit(null_key_message(
                table, [c.name], "a row the snapshot reads")))).otherwise(cast)
        cols.append(cast.alias(c.name))
    return df.select(*cols)
