"""Chunk splitting against a real MariaDB: both paths, composite, string and unsigned keys, edge tables.

Every test also checks the invariant that matters for correctness: the chunks' range predicates, evaluated
by the database, put every row in exactly one chunk.
"""

from __future__ import annotations

import pytest

from airflow_cdc_provider.core.chunks import SplitOptions, TableId
from airflow_cdc_provider.source.chunk_queries import select_chunk_sql, split_schema
from airflow_cdc_provider.source.schema import load_schema

NO_EVEN = dict(even_split=False)


def split(db, table, chunk_size, chunk_key=None, **bounds):
    with db.connection() as conn:
        schema = load_schema(conn, TableId(db.name, table), chunk_key)
        return schema, split_schema(conn, schema, SplitOptions(chunk_size, **bounds))


def assert_partition(db, schema, chunks):
    """Every row is in exactly one chunk, counted by the database with the chunks' own predicates."""
    total = db.execute(f"SELECT COUNT(*) FROM `{schema.table.table}`")[0][0]
    counts = []
    for c in chunks:
        sql, params = select_chunk_sql(schema, c)
        counts.append(len(db.execute(sql, params)))
    assert sum(counts) == total
    return counts


def test_even_split_101_to_110(source_db):
    source_db.execute("CREATE TABLE t (id INT PRIMARY KEY, v INT)")
    source_db.executemany("INSERT INTO t VALUES (%s, 0)", [(i,) for i in range(101, 111)])
    source_db.analyze("t")
    schema, chunks = split(source_db, "t", 4)
    assert [(c.start, c.end) for c in chunks] == [(None, (105,)), ((105,), (109,)), ((109,), None)]
    assert assert_partition(source_db, schema, chunks) == [4, 4, 2]
    assert [c.label for c in chunks] == [f"{source_db.name}.t (-inf, 105)", f"{source_db.name}.t [105, 109)",
                                         f"{source_db.name}.t [109, +inf)"]


def test_uneven_path_gives_the_same_split_for_101_to_110(source_db):
    source_db.execute("CREATE TABLE t (id INT PRIMARY KEY)")
    source_db.executemany("INSERT INTO t VALUES (%s)", [(i,) for i in range(101, 111)])
    _, chunks = split(source_db, "t", 4, **NO_EVEN)
    assert [(c.start, c.end) for c in chunks] == [(None, (105,)), ((105,), (109,)), ((109,), None)]


def test_uneven_split_of_sparse_keys(source_db):
    source_db.execute("CREATE TABLE t (id BIGINT PRIMARY KEY)")
    keys = [1, 2, 3, 1000, 1001, 50_000, 50_001, 9_000_000, 9_000_001, 2**40]
    source_db.executemany("INSERT INTO t VALUES (%s)", [(k,) for k in keys])
    source_db.analyze("t")
    schema, chunks = split(source_db, "t", 3)
    assert [(c.start, c.end) for c in chunks] == [(None, (1000,)), ((1000,), (50_001,)), ((50_001,), (2**40,)), ((2**40,), None)]
    assert assert_partition(source_db, schema, chunks) == [3, 3, 3, 1]


def test_composite_primary_key(source_db):
    source_db.execute("CREATE TABLE t (tenant INT, code VARCHAR(10), v INT, PRIMARY KEY (tenant, code))")
    source_db.executemany("INSERT INTO t VALUES (%s, %s, 0)", [(t, f"c{i:02d}") for t in (1, 2, 3) for i in range(7)])
    schema, chunks = split(source_db, "t", 5)
    assert schema.key_columns == ("tenant", "code")
    assert [(c.start, c.end) for c in chunks] == [
        (None, (1, "c05")), ((1, "c05"), (2, "c03")), ((2, "c03"), (3, "c01")), ((3, "c01"), (3, "c06")), ((3, "c06"), None)
    ]
    assert assert_partition(source_db, schema, chunks) == [5, 5, 5, 5, 1]


def test_string_key_follows_the_case_insensitive_collation(source_db):
    source_db.execute("CREATE TABLE t (code VARCHAR(20) COLLATE utf8mb4_general_ci PRIMARY KEY)")
    codes = ["apple", "Banana", "cherry", "Date", "elder", "Fig", "grape", "Hazel", "iris", "Jujube", "kiwi"]
    source_db.executemany("INSERT INTO t VALUES (%s)", [(c,) for c in codes])
    schema, chunks = split(source_db, "t", 3)
    # case-insensitive order (Python's would put every capital first and make the ranges wrong)
    assert [(c.start, c.end) for c in chunks] == [
        (None, ("Date",)), (("Date",), ("grape",)), (("grape",), ("Jujube",)), (("Jujube",), None)
    ]
    assert assert_partition(source_db, schema, chunks) == [3, 3, 3, 2]


def test_unsigned_bigint_extremes(source_db):
    source_db.execute("CREATE TABLE t (id BIGINT UNSIGNED PRIMARY KEY)")
    keys = [0, 1, 2**31, 2**63 - 1, 2**63, 2**63 + 1, 2**64 - 2, 2**64 - 1]
    source_db.executemany("INSERT INTO t VALUES (%s)", [(k,) for k in keys])
    schema, chunks = split(source_db, "t", 2)
    assert [(c.start, c.end) for c in chunks] == [
        (None, (2**31,)), ((2**31,), (2**63,)), ((2**63,), (2**64 - 2,)), ((2**64 - 2,), None)
    ]
    assert assert_partition(source_db, schema, chunks) == [2, 2, 2, 2]


def test_dense_unsigned_bigint_near_the_top_splits_evenly(source_db):
    source_db.execute("CREATE TABLE t (id BIGINT UNSIGNED PRIMARY KEY)")
    base = 2**64 - 100
    source_db.executemany("INSERT INTO t VALUES (%s)", [(base + i,) for i in range(100)])
    source_db.analyze("t")
    schema, chunks = split(source_db, "t", 30)
    assert len(chunks) >= 3 and chunks[-1].end is None
    assert max(assert_partition(source_db, schema, chunks)) <= 35


def test_one_row_table(source_db):
    source_db.execute("CREATE TABLE t (id INT PRIMARY KEY)")
    source_db.execute("INSERT INTO t VALUES (42)")
    schema, chunks = split(source_db, "t", 1)
    assert [(c.start, c.end) for c in chunks] == [(None, None)]
    assert assert_partition(source_db, schema, chunks) == [1]


def test_empty_table(source_db):
    source_db.execute("CREATE TABLE t (id INT PRIMARY KEY)")
    schema, chunks = split(source_db, "t", 10)
    assert [(c.start, c.end) for c in chunks] == [(None, None)]
    assert assert_partition(source_db, schema, chunks) == [0]


def test_non_unique_chunk_key_with_many_duplicates(source_db):
    source_db.execute("CREATE TABLE t (id INT PRIMARY KEY, grp INT NOT NULL, KEY (grp))")
    rows = [(i, 1) for i in range(10)] + [(100 + i, 2) for i in range(3)] + [(200, 3)]
    source_db.executemany("INSERT INTO t VALUES (%s, %s)", rows)
    schema, chunks = split(source_db, "t", 4, chunk_key="grp", **NO_EVEN)
    assert schema.key_columns == ("grp",)
    assert [(c.start, c.end) for c in chunks] == [(None, (2,)), ((2,), None)]
    assert assert_partition(source_db, schema, chunks) == [10, 4]


def test_awkward_identifiers_are_quoted(source_db):
    source_db.execute("CREATE TABLE `order lines` (`select` INT PRIMARY KEY, `we``ird` VARCHAR(5), `naïve ☕` INT)")
    source_db.executemany("INSERT INTO `order lines` VALUES (%s, 'x', 1)", [(i,) for i in range(10)])
    schema, chunks = split(source_db, "order lines", 3, **NO_EVEN)
    assert len(chunks) == 4
    assert assert_partition(source_db, schema, chunks) == [3, 3, 3, 1]


@pytest.mark.parametrize("chunk_size", [1, 7, 64])
def test_large_composite_string_key_partition(source_db, chunk_size):
    source_db.execute("CREATE TABLE t (region VARCHAR(8) COLLATE utf8mb4_unicode_ci, id INT, PRIMARY KEY (region, id))")
    regions = ["eu", "EU-west", "us", "Us-east", "ap", "ö"]
    source_db.executemany("INSERT INTO t VALUES (%s, %s)", [(r, i) for r in regions for i in range(20)])
    schema, chunks = split(source_db, "t", chunk_size)
    counts = assert_partition(source_db, schema, chunks)
    assert all(n <= chunk_size for n in counts)


def test_percent_signs_in_identifiers(source_db, server_id):
    from airflow_cdc_provider.pipeline.chunk_window import read_chunk
    from airflow_cdc_provider.source.validation import validate_source

    source_db.execute("CREATE TABLE `50% off` (`id%` INT PRIMARY KEY, `v%s` INT)")
    source_db.executemany("INSERT INTO `50%% off` VALUES (%s, 1)", [(i,) for i in range(10)])
    with source_db.connection() as conn:
        validate_source(conn, [source_db.table("50% off")])
    schema, chunks = split(source_db, "50% off", 3, **NO_EVEN)
    assert assert_partition(source_db, schema, chunks) == [3, 3, 3, 1]
    assert len(read_chunk(source_db.settings, schema, chunks[1], server_id=server_id).rows) == 3


def test_a_large_window_reads_in_ranges_of_bounded_size(source_db):
    """A snapshot window of a single-integer key is read in ``read_partitions`` key ranges, or in more when a
    range would span more than ``MAX_KEYS_PER_RANGE`` keys, at most one per chunk; the ranges tile the
    window, each row in one. Sparse keys over the whole BIGINT range stay a few ranges."""
    from airflow_cdc_provider.spark.jdbc_read import range_sql
    from airflow_cdc_provider.spark.snapshot import MAX_KEYS_PER_RANGE, key_sub_ranges

    source_db.execute("CREATE TABLE t (id INT PRIMARY KEY, v INT)")
    top = 4 * MAX_KEYS_PER_RANGE
    source_db.executemany("INSERT INTO t VALUES (%s, 0)", [(i,) for i in (1, 2, top // 2, top - 1, top)])
    with source_db.connection() as conn:
        schema = load_schema(conn, TableId(source_db.name, "t"))
        ranges = key_sub_ranges(conn, schema, None, None, 2, chunks=10)
        assert len(key_sub_ranges(conn, schema, (1,), (3,), 2, chunks=10)) == 1  # a small window stays one read
        assert len(key_sub_ranges(conn, schema, None, None, 2, chunks=3)) == 3  # no more ranges than chunks
    source_db.execute("CREATE TABLE sparse (id BIGINT PRIMARY KEY)")
    source_db.executemany("INSERT INTO sparse VALUES (%s)", [(-(2**63),), (0,), (2**63 - 1,)])
    with source_db.connection() as conn:
        sparse = load_schema(conn, TableId(source_db.name, "sparse"))
        assert len(key_sub_ranges(conn, sparse, None, None, 2, chunks=1)) == 2
    assert len(ranges) == 4 and ranges[0][0] is None and ranges[-1][1] is None
    assert all(a[1] == b[0] for a, b in zip(ranges, ranges[1:]))
    assert all(hi[0] - lo[0] <= MAX_KEYS_PER_RANGE for lo, hi in ranges[1:-1])
    counts = [source_db.execute(f"SELECT COUNT(*) FROM t WHERE {range_sql(['id'], lo, hi)}")[0][0] for lo, hi in ranges]
    assert sum(counts) == 5  # the predicates the reads use
