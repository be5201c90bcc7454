"""A snapshot window's binlog changes onto its rows in Spark, for each way a sink writes a window.

Staged sinks (parquet, delta) write a window's rows once, under the window's high watermark: the last change
of every key the binlog window touched replaces the SELECTed row first (``fold_window``: a keyed anti-join
and a union; only the changed keys reach the driver), then the result is published (``FoldedWindow``).

The jdbc sink upserts the rows while they are read, under the window's low watermark, which is older than
every change of the window; the last change of each key then goes on top as an upsert under its own binlog
position (``last_changes_frame``), so nothing is cached between the read and the write. Both give the
chunks exactly as of the high watermark (``core.window``).
"""

from __future__ import annotations

from typing import Any

from airflow_cdc_provider.core.records import OP_DELETE
from airflow_cdc_provider.core.window import LastChanges
from airflow_cdc_provider.sinks.base import CHUNK_COLUMN, META_COLUMNS, Hook, Version
from airflow_cdc_provider.sinks.types import TableSinkTypes
from airflow_cdc_provider.spark.frames import chunk_counts


def fold_window(spark, rows_df, types: TableSinkTypes, last: LastChanges, truncated: bool = False):
    """Spark: rows without the changed keys (none after a TRUNCATE in the window), plus the last image of each
    changed key that still exists."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import IntegerType, StructField, StructType

    if truncated:
        rows_df = rows_df.limit(0)
    if not last:
        return rows_df
    schema = types.schema
    key_idx = [schema.column_names.index(k) for k in schema.key_columns]
    full = StructType.fromDDL(types.spark_ddl)
    key_struct = StructType([full.fields[i] for i in key_idx])
    key_rows = [tuple(types.types[i].convert(v) for i, v in zip(key_idx, key, strict=True)) for key in last]
    upserts = [(*types.row_to_sink(dict(rec.after)), index) for rec, index in last.values() if rec.op != OP_DELETE]
    changed = spark.createDataFrame(key_rows, key_struct)
    kept = rows_df.join(F.broadcast(changed), on=list(schema.key_columns), how="left_anti")
    tagged = StructType([*full.fields, StructField(CHUNK_COLUMN, IntegerType(), False)])
    return kept.unionByName(spark.createDataFrame(upserts, tagged))


def last_changes_frame(spark, types: TableSinkTypes, last: LastChanges):
    """Spark: the last change of each key as a row to upsert under its own binlog position, with its chunk index:
    the after image as a snapshot row (``r``), or the before image of a delete as a tombstone (``d``)."""
    from pyspark.sql.types import IntegerType, StructField, StructType

    full = StructType.fromDDL(types.spark_ddl)
    meta = StructType.fromDDL(", ".join(f"{name} {kind}" for name, kind in META_COLUMNS))
    schema = StructType([*full.fields, StructField(CHUNK_COLUMN, IntegerType(), False), *meta.fields])
    rows = [(*types.row_to_sink(dict(rec.image)), index, "d" if rec.op == OP_DELETE else "r", 0,
             *rec.position.sort_key) for rec, index in last.values()]
    return spark.createDataFrame(rows, schema)


class FoldedWindow:
    """A window published once its high watermark is known (parquet, delta): the changes are folded into the rows
    in Spark first, and the counts are taken from the folded rows. Subclasses set ``spark``, ``types`` and
    ``counts``, and provide ``rows`` (the window as read) and ``publish_rows``."""

    spark: Any
    types: TableSinkTypes
    counts: dict[int, int]

    def rows(self):
        raise NotImplementedError

    def publish_rows(self, folded, version: Version, mid_write: Hook) -> list[int]:
        raise NotImplementedError

    def discard(self) -> None:
        """Staged rows are left to the next write's removal of abandoned staging directories."""

    def publish(self, changes, mid_write: Hook) -> list[int]:
        from pyspark import StorageLevel

        folded = None
        if changes.touched or changes.truncated:
            # on disk only: a window may hold millions of rows
            folded = fold_window(self.spark, self.rows(), self.types, changes.last, changes.truncated
                                 ).persist(StorageLevel.DISK_ONLY)
            self.counts = chunk_counts(folded)
        try:
            return self.publish_rows(folded, changes.high.sort_key, mid_write)
        finally:
            if folded is not None:
                folded.unpersist()
