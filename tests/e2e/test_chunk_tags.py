"""The chunk index Spark gives each row of a watermark window equals the chunk the pure-Python locator finds,
for evenly split bounds (one integer division) and for any other bounds (a comparison tree), at the edges
of the key types."""

from __future__ import annotations

import random
from decimal import Decimal

import pytest

from airflow_cdc_provider.core.chunks import Chunk, TableId, chunk_locator
from airflow_cdc_provider.spark.snapshot import chunk_tag_column, chunk_tag_sql

T = TableId("db", "t")
LONG_MAX, LONG_MIN = 2**63 - 1, -(2**63)


def chunks_of(bounds: list[int], first_index: int = 0, start=None, end=None) -> list[Chunk]:
    edges = [start, *[(b,) for b in bounds], end]
    return [Chunk(T, first_index + i, ("id",), a, b) for i, (a, b) in enumerate(zip(edges[:-1], edges[1:]))]


def keys_around(bounds: list[int], lo: int, hi: int) -> list[int]:
    keys = {lo, hi}
    for b in bounds:
        keys |= {b - 1, b, b + 1}
    rng = random.Random(7)
    keys |= {rng.randint(lo, hi) for _ in range(300)}
    return sorted(k for k in keys if lo <= k <= hi)


CASES = {
    "even int": ("int", [8208 + 8207 * i for i in range(121)], -(2**31), 2**31 - 1),
    "even int, negative bounds": ("int", [-2_000_000_000 + 500_000_000 * i for i in range(8)], -(2**31), 2**31 - 1),
    "even bigint across the whole range": ("bigint", [-(2**62) + 2**60 * i for i in range(7)], LONG_MIN, LONG_MAX),
    "uneven bigint": ("bigint", [5, 17, 18, 1000, 10**12, 10**15], LONG_MIN, LONG_MAX),
    "even unsigned bigint": ("decimal(20,0)", [2**63 + 10**17 * i for i in range(5)], 0, 2**64 - 1),
    "two chunks": ("int", [100], -(2**31), 2**31 - 1),
}


@pytest.mark.parametrize("name", CASES)
def test_spark_chunk_tags_match_the_locator(spark, name):
    spark_type, bounds, lo, hi = CASES[name]
    chunks = chunks_of(bounds, first_index=3)
    locate = chunk_locator(chunks)
    keys = keys_around(bounds, lo, hi)
    value = Decimal if spark_type.startswith("decimal") else int
    df = spark.createDataFrame([(value(k),) for k in keys], f"id {spark_type}")
    got = {int(r["id"]): r["tag"] for r in df.withColumn("tag", chunk_tag_column("id", spark_type, chunks)).collect()}
    assert got == {k: locate((k,)).index for k in keys}
    evenly = name.startswith("even") or name == "two chunks"
    assert (" div " in chunk_tag_sql("`id`", chunks, True)) == evenly, "even bounds take the arithmetic path"
