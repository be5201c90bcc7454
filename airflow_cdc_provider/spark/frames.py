"""DataFrame helpers every job and sink shares: columns by exact name, the metadata columns, the newest
version per key. pyspark is imported inside the functions, so importing this module costs nothing.

Spark parses a column name given as a string (dots, backticks), so source column names like ``a.b`` or
``we`ird`` are always quoted, with backticks doubled."""

from __future__ import annotations

import uuid
from typing import Any, Callable, Iterable

from airflow_cdc_provider.sinks.base import CHUNK_COLUMN, META_COLUMNS, VERSION_COLUMNS


def quoted(name: str) -> str:
    """``name`` as a Spark SQL identifier."""
    return "`" + name.replace("`", "``") + "`"


def col(name: str):
    from pyspark.sql import functions as F

    return F.col(quoted(name))


def cols(names: Iterable[str]) -> list:
    return [col(n) for n in names]


def counted_write(df, write: Callable[[Any], None]) -> int:
    """``write(df)``, and how many rows it wrote, as counted by the tasks whose output was committed (an
    observation of ``df``, no second pass): what the files written should hold (``sinks.base.check_written``)."""
    from pyspark.sql import functions as F

    from airflow_cdc_provider.spark.session import observation

    seen = observation(df.sparkSession, f"airflow_cdc_written_{uuid.uuid4().hex}")
    write(df.observe(seen, F.count(F.lit(1)).alias("rows")))
    return int(seen.get["rows"])


def with_meta(df, op: str, ts_ms: int, version: tuple[int, int, int]):
    """``df`` with the metadata columns of rows that share one change kind, time and version (snapshot rows)."""
    from pyspark.sql import functions as F

    return df.select(
        "*",
        F.lit(op).alias("_cdc_op"),
        F.lit(ts_ms).cast("bigint").alias("_cdc_ts_ms"),
        F.lit(version[0]).cast("bigint").alias("_cdc_file_seq"),
        F.lit(version[1]).cast("bigint").alias("_cdc_pos"),
        F.lit(version[2]).cast("int").alias("_cdc_row"),
    )


def meta_ddl() -> str:
    return ", ".join(f"{n} {t}" for n, t in META_COLUMNS)


def newer_than(version):
    """The condition: a row's version ``(_cdc_file_seq, _cdc_pos, _cdc_row)`` is after ``version``."""
    from pyspark.sql import functions as F

    seq, pos, row = version
    file_seq, p = F.col("_cdc_file_seq"), F.col("_cdc_pos")
    return (file_seq > seq) | ((file_seq == seq) & ((p > pos) | ((p == pos) & (F.col("_cdc_row") > row))))


def latest_per_key(df, key_columns):
    """Keep the newest version of every key (the row a mirror keeps)."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    w = Window.partitionBy(*cols(key_columns)).orderBy(*[F.col(c).desc() for c in VERSION_COLUMNS])
    return df.withColumn("__cdc_rank", F.row_number().over(w)).filter("__cdc_rank = 1").drop("__cdc_rank")


def chunk_counts(df) -> dict[int, int]:
    """Rows per chunk index (``CHUNK_COLUMN``) of a snapshot window's rows."""
    return {r[0]: r[1] for r in df.groupBy(CHUNK_COLUMN).count().collect()}
