"""Source vs sink comparison, chunk by chunk, inside Spark (nothing is collected but the summary).

The source is read with the snapshot job's JDBC path, one Spark partition per chunk of a fresh chunk plan
(so each source row knows its chunk); the sink's current state comes from the sink (``current_state``).
Every row gets a 64-bit hash of all its columns (and of which are NULL). A full outer join on the key then
gives, per chunk, the row counts and order-independent checksums (sum of row hashes) of both sides and the
rows that differ: missing in the sink, extra in the sink, or different values. Sink rows whose key the
source does not have belong to no source chunk and are reported as chunk "-".
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

from airflow_cdc_provider.core.keys import Key, encode_key
from airflow_cdc_provider.sinks.types import TableSinkTypes
from airflow_cdc_provider.source.settings import ConnectionSettings
from airflow_cdc_provider.spark.frames import cols
from airflow_cdc_provider.spark.jdbc_read import read_key_ranges


@dataclass
class ChunkSummary:
    chunk: str
    source_rows: int
    sink_rows: int
    source_checksum: int
    sink_checksum: int
    differing: int


@dataclass
class TableVerdict:
    """``missing_columns`` / ``extra_columns``: the source's columns the sink table lacks, and the sink's the
    source no longer has (rows are compared only when there are none); ``sink_version`` and
    ``stream_version``: the table version (``source.table_versions``) the sink's columns are at, and the newest
    the stream has met (None: not kept)."""

    table: str
    chunks: list[ChunkSummary]
    first_differences: list[dict[str, Any]] = field(default_factory=list)
    missing_columns: list[str] = field(default_factory=list)
    extra_columns: list[str] = field(default_factory=list)
    sink_version: int | None = None
    stream_version: int | None = None
    kept_apart: dict[str, list[str]] = field(default_factory=dict)  # columns left out, as the behaviour keeps them

    @property
    def equal(self) -> bool:
        return not self.missing_columns and not self.extra_columns and all(c.differing == 0 for c in self.chunks)

    @property
    def source_rows(self) -> int:
        return sum(c.source_rows for c in self.chunks)

    @property
    def sink_rows(self) -> int:
        return sum(c.sink_rows for c in self.chunks)

    def to_dict(self) -> dict[str, Any]:
        return {"table": self.table, "equal": self.equal, "source_rows": self.source_rows, "sink_rows": self.sink_rows,
                "missing_columns": self.missing_columns, "extra_columns": self.extra_columns,
                "sink_version": self.sink_version, "stream_version": self.stream_version,
                "columns_not_compared": self.kept_apart,
                "differing_chunks": [c.__dict__ for c in self.chunks if c.differing],
                "chunks": len(self.chunks), "first_differences": self.first_differences}


def _row_hash(df, columns: Sequence[str]):
    from pyspark.sql import functions as F

    refs = cols(columns)
    nulls = F.concat_ws("", *[F.when(c.isNull(), F.lit("1")).otherwise(F.lit("0")) for c in refs])
    return F.xxhash64(*refs, nulls)


def verify_table(spark, settings: ConnectionSettings, sink, types: TableSinkTypes,
                 ranges: Sequence[tuple[Key | None, Key | None]], max_differences: int = 10,
                 stream_version: int | None = None, behaviour: str = "evolve") -> TableVerdict:
    """Source vs sink. A sink table whose columns are not the source's is different without comparing rows: a
    column the sink lacks is a difference, whatever the rows hold. Unless the table's ``stream.schema_changes``
    keeps them so: ``lenient`` keeps columns the source dropped or renamed (extra columns), ``ignore`` the
    sink's columns as they were (extra and missing ones); the rows are then compared on the columns both have."""
    from dataclasses import replace

    schema = types.schema
    held = sink.definition(str(schema.table))
    missing = extra = []
    if held is not None:
        missing = [c for c in schema.column_names if c not in held.columns]
        extra = [c for c in held.columns if c not in schema.column_names]
        if (missing and behaviour != "ignore") or (extra and behaviour not in ("lenient", "ignore")):
            return TableVerdict(str(schema.table), [], missing_columns=missing, extra_columns=extra,
                                sink_version=held.version, stream_version=stream_version)
    if missing:
        kept = tuple(c for c in schema.columns if c.name not in missing)
        types = TableSinkTypes.of(replace(schema, columns=kept), types.version)
    verdict = _compare_rows(spark, settings, sink, types, ranges, max_differences)
    verdict.sink_version = held.version if held is not None else None
    verdict.stream_version = stream_version
    verdict.kept_apart = {"missing": missing, "extra": extra} if missing or extra else {}
    return verdict


def _compare_rows(spark, settings: ConnectionSettings, sink, types: TableSinkTypes,
                  ranges: Sequence[tuple[Key | None, Key | None]], max_differences: int) -> TableVerdict:
    from pyspark.sql import functions as F

    schema = types.schema
    keys = list(schema.key_columns)
    names = schema.column_names
    src = read_key_ranges(spark, settings, types, ranges, refuse_null_keys=False)  # a NULL key is a difference
    src = src.select(*cols(keys), F.spark_partition_id().alias("__chunk"),
                     _row_hash(src, names).alias("__hs"))
    snk = sink.current_state(types)
    snk = snk.select(*cols(keys), _row_hash(snk, names).alias("__hk"))
    joined = src.join(snk, on=keys, how="full_outer").withColumn(
        "__diff", F.when(F.col("__hs").isNull() | F.col("__hk").isNull() | (F.col("__hs") != F.col("__hk")), 1).otherwise(0)
    ).persist()
    try:
        rows = joined.groupBy("__chunk").agg(
            F.count("__hs").alias("source_rows"), F.count("__hk").alias("sink_rows"),
            F.coalesce(F.sum(F.col("__hs").cast("decimal(38,0)")), F.lit(0)).alias("cs"),
            F.coalesce(F.sum(F.col("__hk").cast("decimal(38,0)")), F.lit(0)).alias("ck"),
            F.sum("__diff").alias("differing"),
        ).collect()
        chunks = sorted(
            (ChunkSummary("-" if r["__chunk"] is None else str(r["__chunk"]), r["source_rows"], r["sink_rows"],
                          int(r["cs"]) % 2**64, int(r["ck"]) % 2**64, int(r["differing"])) for r in rows),
            key=lambda c: (c.chunk == "-", int(c.chunk) if c.chunk != "-" else 0),
        )
        diffs = []
        if any(c.differing for c in chunks):
            for r in joined.filter("__diff = 1").limit(max_differences).collect():
                kind = "missing in sink" if r["__hk"] is None else "extra in sink" if r["__hs"] is None else "values differ"
                diffs.append({"key": encode_key(tuple(r[k] for k in keys)), "chunk": r["__chunk"], "problem": kind})
    finally:
        joined.unpersist()
    return TableVerdict(str(schema.table), chunks, diffs)
