"""Spark writers of the two sinks, behind one small interface.

``prepare`` (once per table and job), the snapshot window write, ``write_changes`` (one stream micro-batch,
idempotent per batch id; its row count, ``rows()``, may be known only once it is written) and ``current_state`` (the table as the sink holds it now, for ``verify`` and
``materialize``). Window rows are tagged with their chunk index in ``CHUNK_COLUMN``. A snapshot window is
written one of two ways, named by ``stages_in_window``: parquet stages the rows inside the window and
publishes them once the HW is known (``stage_window`` / ``publish_window``); jdbc gets the rows after the
HW with their metadata columns (``write_chunks``, idempotent per chunk).
"""

from __future__ import annotations

from typing import Callable

from airflow_cdc_provider.sinks import META_COLUMNS, META_NAMES, VERSION_COLUMNS, SinkConfig, SinkError
from airflow_cdc_provider.sinks.parquet import ParquetLayout
from airflow_cdc_provider.sinks.postgres import PostgresMirror, pg_ident
from airflow_cdc_provider.sinks.types import TableSinkTypes
from airflow_cdc_provider.spark.columns import col, cols

Hook = Callable[[], None]
CHUNK_COLUMN = "__cdc_chunk"


def with_meta(df, op: str, ts_ms: int, version: tuple[int, int, int]):
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


def latest_per_key(df, key_columns):
    """Keep the newest version of every key (the row a mirror keeps)."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    w = Window.partitionBy(*cols(key_columns)).orderBy(*[F.col(c).desc() for c in VERSION_COLUMNS])
    return df.withColumn("__cdc_rank", F.row_number().over(w)).filter("__cdc_rank = 1").drop("__cdc_rank")


class SparkParquetSink:
    def __init__(self, spark, config: SinkConfig) -> None:
        self.spark = spark
        self.layout = ParquetLayout(config.path)

    def prepare(self, types: TableSinkTypes) -> None:
        from pyspark.sql.types import StructType

        self.layout.write_schema(str(types.schema.table), StructType.fromDDL(types.spark_ddl).json())

    # Snapshot windows are staged: the rows are written once, between the watermarks (the write is what
    # forces the read), and published by a rename under their version; a window is rewritten only when its
    # binlog window changed some of its keys. All chunks of a window share one version (the window's HW),
    # so it lives in the path (Hive-style partition values ``_cdc_file_seq=/_cdc_pos=/_cdc_row=``), which
    # Spark and pyarrow readers turn back into columns; ``_cdc_chunk`` in the files names each row's chunk.
    stages_in_window = True

    @staticmethod
    def _snapshot_rows(df):
        from pyspark.sql import functions as F

        return df.select(*[col(c) for c in df.columns if c != CHUNK_COLUMN], F.lit("r").alias("_cdc_op"),
                         F.lit(0).cast("bigint").alias("_cdc_ts_ms"), F.col(CHUNK_COLUMN).alias("_cdc_chunk"))

    def stage_window(self, df, types: TableSinkTypes) -> str:
        """Write the window's rows (data columns and ``CHUNK_COLUMN``) to a staging directory (returned)."""
        staging = self.layout.staging_dir(str(types.schema.table))
        self._snapshot_rows(df).write.mode("overwrite").parquet(self.layout.location(staging))
        return staging

    def _parquet_files(self, staging: str) -> list[str]:
        return [f"{staging}/{n}" for n in self.layout.storage.listdir(staging) if n.endswith(".parquet")]

    def staged_counts(self, staging: str) -> dict[int, int]:
        """Rows per chunk, from the staged files' ``_cdc_chunk`` column alone (batch by batch: bounded memory)."""
        import pyarrow.compute as pc
        import pyarrow.parquet as pq

        counts: dict[int, int] = {}
        for rel in self._parquet_files(staging):
            with self.layout.storage.open(rel) as f:
                for batch in pq.ParquetFile(f).iter_batches(columns=["_cdc_chunk"], batch_size=1 << 20):
                    for vc in pc.value_counts(batch.column(0)).to_pylist():
                        counts[vc["values"]] = counts.get(vc["values"], 0) + vc["counts"]
        return counts

    def read_staged(self, staging: str, types: TableSinkTypes):
        """The staged rows as data columns and ``CHUNK_COLUMN`` (for folding the window's changes in)."""
        from pyspark.sql import functions as F
        from pyspark.sql.types import IntegerType, LongType, StringType, StructField, StructType

        schema = StructType([*StructType.fromDDL(types.spark_ddl).fields, StructField("_cdc_op", StringType()),
                             StructField("_cdc_ts_ms", LongType()), StructField("_cdc_chunk", IntegerType())])
        if not self._parquet_files(staging):
            return self.spark.createDataFrame([], schema).drop("_cdc_op", "_cdc_ts_ms").withColumnRenamed("_cdc_chunk", CHUNK_COLUMN)
        df = self.spark.read.schema(schema).parquet(self.layout.location(staging))
        return df.select(*[col(f.name) for f in schema.fields[:-3]], F.col("_cdc_chunk").alias(CHUNK_COLUMN))

    def publish_window(self, staging: str, types: TableSinkTypes, epoch: int, indexes: list[int],
                       version: tuple[int, int, int], folded, mid_write: Hook) -> list[int]:
        """Rewrite the window from ``folded`` (data columns and ``CHUNK_COLUMN``) if its binlog window changed
        it, then rename it into ``chunks=<first>-<last>/<version path>``, replacing every directory an earlier
        attempt wrote for any of these chunks. Returns the other chunks whose rows such a directory held
        (``ParquetLayout.publish_window``)."""
        table = str(types.schema.table)
        rewritten = None
        if folded is not None:
            rewritten = self.layout.staging_dir(table)
            self._snapshot_rows(folded).write.mode("overwrite").parquet(self.layout.location(rewritten))
        mid_write()
        wrapper = self.layout.staging_dir(table)
        self.layout.storage.rename(rewritten or staging, f"{wrapper}/{self.layout.version_path(version)}")
        lost = self.layout.publish_window(wrapper, table, epoch, min(indexes), max(indexes))
        if rewritten is not None:
            self.layout.storage.rmtree(staging)
        return lost

    def write_changes(self, df, types: TableSinkTypes, batch_id: int, mid_write: Hook, rows: Callable[[], int]) -> None:
        """``rows()``: how many rows ``df`` held, once it is written; a batch with none publishes nothing."""
        table = str(types.schema.table)
        staging = self.layout.staging_dir(table)
        df.write.mode("overwrite").parquet(self.layout.location(staging))
        mid_write()
        if rows():
            self.layout.publish(staging, self.layout.batch_dir(table, batch_id))
        else:
            self.layout.storage.rmtree(staging)

    def current_state(self, types: TableSinkTypes, include_meta: bool = False):
        """Rows of the current snapshot epoch + newer changes; newest version per key; deletes dropped."""
        from pyspark.sql import functions as F
        from pyspark.sql.types import StructType

        table = str(types.schema.table)
        schema = StructType.fromDDL(types.spark_ddl + ", " + meta_ddl())
        parts = []
        current = self.layout.read_current(table)
        if current:
            d = self.layout.epoch_dir(table, current["epoch"])
            parts.append(self.spark.read.schema(schema).parquet(self.layout.location(d)).select(*cols(schema.fieldNames())))
        if self.layout.has_changes(table):
            ch = self.spark.read.schema(schema).parquet(self.layout.location(self.layout.changes_dir(table)))
            if current:
                s, p, r = current["min_low_watermark"]
                ch = ch.filter(
                    (F.col("_cdc_file_seq") > s)
                    | ((F.col("_cdc_file_seq") == s) & ((F.col("_cdc_pos") > p) | ((F.col("_cdc_pos") == p) & (F.col("_cdc_row") > r))))
                )
            parts.append(ch.select(*cols(schema.fieldNames())))
        if not parts:
            return self.spark.createDataFrame([], schema).select(*cols(types.schema.column_names if not include_meta else schema.fieldNames()))
        df = parts[0]
        for p in parts[1:]:
            df = df.unionByName(p)
        df = latest_per_key(df, types.schema.key_columns).filter(F.col("_cdc_op") != "d")
        return df if include_meta else df.select(*cols(types.schema.column_names))


class SparkPostgresSink:
    stages_in_window = False  # versioned upserts need the HW: rows are cached in the window, then written

    def __init__(self, spark, config: SinkConfig, secrets: dict[str, str]) -> None:
        self.spark = spark
        self.config = config
        self.mirror = PostgresMirror(config, secrets)

    def prepare(self, types: TableSinkTypes) -> None:
        columns = [(c.name, t.postgres) for c, t in zip(types.schema.columns, types.types, strict=True)]
        self.mirror.ensure_table(str(types.schema.table), columns, types.schema.key_columns)

    def _upsert(self, df, types: TableSinkTypes, chunk_tag) -> None:
        """``chunk_tag``: a Spark column naming each row's snapshot chunk (``epoch:index``), or None."""
        from pyspark.sql import functions as F

        table = str(types.schema.table)
        data_cols = types.schema.column_names
        keys = list(types.schema.key_columns)
        # Spark hands TimestampType to Python as local wall clock; as timestamp_ntz in the UTC session zone
        # it is the UTC wall clock, which PostgreSQL (session zone UTC) stores as the right instant.
        data = []
        for c, t in zip(types.schema.columns, types.types, strict=True):
            ref = col(c.name)
            data.append((ref.cast("timestamp_ntz") if t.spark == "timestamp" else ref).alias(c.name))
        out = df.select(
            *data, *[F.col(n) for n in META_NAMES],
            (F.col("_cdc_op") == "d").alias("_cdc_deleted"),
            (F.lit(None) if chunk_tag is None else chunk_tag).cast("string").alias("_cdc_chunk"),
        )
        mirror = self.mirror

        def write_partition(batches):
            import pyarrow as pa

            rows = (row for b in batches for row in zip(*(c.to_pylist() for c in b.columns)))
            yield pa.RecordBatch.from_pydict({"rows": [mirror.upsert(table, data_cols, keys, rows)]})

        # a DataFrame action (not foreachPartition, an RDD's), so an observation of ``df`` sees it; rows reach
        # Python as Arrow columns, by position (mapInArrow refers to columns by name, unquoted)
        out.toDF(*[f"c{i}" for i in range(len(out.columns))]).mapInArrow(write_partition, "rows bigint").collect()

    def write_chunks(self, df, types: TableSinkTypes, epoch: int, indexes: list[int], low_watermark: tuple,
                     retried: set[int], mid_write: Hook) -> None:
        from pyspark.sql import functions as F

        self._upsert(df, types, F.concat(F.lit(f"{epoch}:"), F.col(CHUNK_COLUMN).cast("string")))
        mid_write()
        for index in sorted(retried):
            self.mirror.sweep_chunk(str(types.schema.table), f"{epoch}:{index}", low_watermark)

    def write_changes(self, df, types: TableSinkTypes, batch_id: int, mid_write: Hook, rows: Callable[[], int]) -> None:
        """``rows`` is not needed: an upsert of no rows changes nothing."""
        self._upsert(latest_per_key(df, types.schema.key_columns), types, None)
        mid_write()

    def jdbc_url(self) -> str:
        c = self.config.conn
        return f"jdbc:postgresql://{c.get('host')}:{int(c.get('port') or 5432)}/{c.get('schema') or 'postgres'}"

    def current_state(self, types: TableSinkTypes, include_meta: bool = False):
        from pyspark.sql import functions as F

        exprs = []
        for c, t in zip(types.schema.columns, types.types, strict=True):
            q = pg_ident(c.name)
            if t.postgres.startswith("timestamptz"):
                e = f"({q} AT TIME ZONE 'UTC')::text"
            elif t.postgres.startswith(("timestamp", "date")) or (t.postgres.startswith("numeric") and t.spark == "string"):
                e = f"{q}::text"
            else:
                e = q
            exprs.append(f"{e} AS {pg_ident(c.name)}")
        if include_meta:
            exprs += [pg_ident(n) for n in META_NAMES]
        query = f"(SELECT {', '.join(exprs)} FROM {self.mirror.qualified(str(types.schema.table))} WHERE NOT \"_cdc_deleted\") AS m"
        df = self.spark.read.jdbc(self.jdbc_url(), query, properties={
            "user": self.config.conn.get("login") or "", "password": self.mirror.password, "driver": "org.postgresql.Driver"})
        out = [col(c.name).cast(t.spark).alias(c.name) for c, t in zip(types.schema.columns, types.types, strict=True)]
        if include_meta:
            out += [F.col(n) for n in META_NAMES]
        return df.select(*out)


def spark_sink(spark, config: SinkConfig, secrets: dict[str, str]):
    if config.type == "parquet":
        return SparkParquetSink(spark, config)
    if config.type == "jdbc":
        return SparkPostgresSink(spark, config, secrets)
    raise SinkError(f"unknown sink type {config.type!r}; use parquet or jdbc")
