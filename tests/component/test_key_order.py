"""Chunk keys located in Python as the server places them, for every string collation kind: a key's chunk by
``chunk_locator`` over ``DatabaseKeyOrder`` is the chunk whose SQL range holds its row, and a change of such a
row after a chunk's SELECT is in the chunk read. Expanding characters (``ß`` weighs as ``ss``, ``ä`` as ``ae``
under german2) and characters below the space (which PAD SPACE collations order before a shorter string) are
where a weight compared naively differs from the server's order; so are multi-level collations (``_as_cs``), whose
weight runs its levels together."""

from __future__ import annotations

import pytest

from airflow_cdc_provider.core.chunks import SplitOptions, TableId, chunk_locator
from airflow_cdc_provider.core.records import key_of
from airflow_cdc_provider.pipeline.chunk_window import ChunkReadHooks, read_chunk
from airflow_cdc_provider.source.chunk_queries import select_chunk_sql, split_schema
from airflow_cdc_provider.source.key_order import DatabaseKeyOrder
from airflow_cdc_provider.source.schema import load_schema
from airflow_cdc_provider.source.values import RowCanonicalizer

EXPANDING = ["a1", "a2", "a3", "ßabcd", "ßabce", "ßabcf", "z1"]
CASES = [
    ("VARCHAR(5) CHARACTER SET utf8mb4 COLLATE utf8mb4_unicode_ci", EXPANDING, "ßabcd"),
    ("VARCHAR(5) CHARACTER SET utf8mb4 COLLATE utf8mb4_uca1400_ai_ci", EXPANDING, "ßabcd"),
    ("CHAR(5) CHARACTER SET utf8mb4 COLLATE utf8mb4_unicode_ci", EXPANDING, "ßabcd"),
    ("VARCHAR(3) CHARACTER SET latin1 COLLATE latin1_german2_ci", ["a1", "a2", "a3", "äbc", "äbd", "äbe", "z1"],
     "äbc"),
    ("VARCHAR(4) CHARACTER SET utf8mb4 COLLATE utf8mb4_general_ci", ["a\t", "a", "a\x01", "a b", "a\tb", "b", "c"],
     "a\t"),
    ("VARCHAR(4) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin", ["a\t", "a", "a\x01", "a b", "a\tb", "b", "c"], "a\t"),
    ("VARCHAR(4) CHARACTER SET utf8mb4 COLLATE utf8mb4_unicode_nopad_ci", ["a\t", "a", "a ", "a b", "b", "c", "d"],
     "a"),
    # multi-level: base letters, then accents, then case, each level padded with the space's weight at that level
    ("VARCHAR(4) CHARACTER SET utf8mb4 COLLATE utf8mb4_uca1400_as_cs", ["a\t", "a", "A", "á", "a b", "aB", "b"], "a\t"),
    ("VARCHAR(4) CHARACTER SET utf8mb4 COLLATE utf8mb4_uca1400_as_ci", ["a\t", "a", "á", "á\t", "a b", "ab", "b"],
     "a\t"),
    ("VARCHAR(4) CHARACTER SET utf8mb4 COLLATE utf8mb4_uca1400_ai_cs", ["a\t", "a", "A", "A\t", "a b", "ab", "b"],
     "A"),
    ("VARCHAR(4) CHARACTER SET utf8mb4 COLLATE utf8mb4_uca1400_nopad_ai_cs", ["e", "e\t", "E", "éa", "eb", "Eb", "f"],
     "E"),
]


def rows_of(db, schema, chunk) -> dict:
    canon = RowCanonicalizer(schema)
    sql, params = select_chunk_sql(schema, chunk)
    with db.connection() as conn, conn.cursor() as cur:
        cur.execute(sql, params)
        return {key_of(row, schema.key_columns): row for row in map(canon.from_select, cur.fetchall())}


@pytest.mark.parametrize("column, keys, moved", CASES, ids=[c[0].split("COLLATE ")[1] + c[0][:2] for c in CASES])
def test_keys_are_located_in_the_chunk_the_server_puts_them_in(source_db, server_id, column, keys, moved):
    source_db.execute(f"CREATE TABLE t (k {column} PRIMARY KEY, v VARCHAR(20))")
    source_db.executemany("INSERT INTO t VALUES (%s, 'old')", [(k,) for k in keys])
    with source_db.connection() as conn:
        schema = load_schema(conn, TableId(source_db.name, "t"))
        for size in (2, 3, 4):  # every key at a chunk's start, end and inside
            chunks = split_schema(conn, schema, SplitOptions(size, even_split=False))
            locate = chunk_locator(chunks, DatabaseKeyOrder(conn, schema))
            placed = {key: chunk.index for chunk in chunks for key in rows_of(source_db, schema, chunk)}
            assert len(placed) == len(keys) and len(chunks) > 1
            assert {key: locate(key).index for key in placed} == placed, size
    chunk = chunks[placed[(moved,)]]

    def after_select():
        source_db.execute("UPDATE t SET v = 'late' WHERE k = %s", (moved,))

    result = read_chunk(source_db.settings, schema, chunk, server_id=server_id,
                        hooks=ChunkReadHooks(after_select=after_select))
    assert result.rows == rows_of(source_db, schema, chunk)
    assert result.rows[(moved,)]["v"] == "late"


def test_spark_chunk_predicates_hold_the_splitters_rows_under_no_backslash_escapes(source_db):
    """Spark's JDBC read inlines chunk bounds with backslash escapes; its session leaves NO_BACKSLASH_ESCAPES
    (here the server's global mode) so that they mean what the splitter's bound parameters mean."""
    from airflow_cdc_provider.source.sql import quote_table
    from airflow_cdc_provider.spark.jdbc_read import jdbc_properties, range_sql

    source_db.execute("CREATE TABLE t (k VARCHAR(10) COLLATE utf8mb4_bin NOT NULL PRIMARY KEY, v INT)")
    keys = ["a", "a\\", "a\\\\", "a\\\\b", "a\\b", "a\\c", "a'\n", "b"]
    source_db.executemany("INSERT INTO t VALUES (%s, 0)", [(k,) for k in keys])
    with source_db.connection() as conn:
        schema = load_schema(conn, TableId(source_db.name, "t"))
        chunks = split_schema(conn, schema, SplitOptions(2, even_split=False))
    with source_db.server.root_connection() as root, root.cursor() as cur:
        cur.execute("SET GLOBAL sql_mode = CONCAT(@@GLOBAL.sql_mode, ',NO_BACKSLASH_ESCAPES')")
    try:
        spark_like = source_db.server.app_connection(source_db.name)  # a new session: the global mode
        with spark_like.cursor() as cur:
            cur.execute("SELECT @@sql_mode")
            assert "NO_BACKSLASH_ESCAPES" in cur.fetchone()[0]
            cur.execute(jdbc_properties(source_db.settings)["sessionInitStatement"])
            for chunk in chunks:  # the text Connector/J sends, as is
                cur.execute(f"SELECT k FROM {quote_table(schema.table)} WHERE "
                            f"{range_sql(schema.key_columns, chunk.start, chunk.end)}")
                assert sorted(r[0] for r in cur.fetchall()) == sorted(k[0] for k in rows_of(source_db, schema, chunk))
        spark_like.close()
    finally:
        with source_db.server.root_connection() as root, root.cursor() as cur:
            cur.execute("SET GLOBAL sql_mode = REPLACE(@@GLOBAL.sql_mode, ',NO_BACKSLASH_ESCAPES', '')")
    assert sorted(k for chunk in chunks for k, in rows_of(source_db, schema, chunk)) == sorted(keys)


PAIRS = [("a ", "a"), ("a\t", "a"), ("é", "e"), ("A", "a"), ("á", "a"), ("  ", ""), ("Aé", "Ae"), ("a\x01", "a"),
         ("á ", "a"), ("ß", "ss"), ("aB", "ab ")]


@pytest.mark.parametrize("collation", ["utf8mb4_uca1400_as_cs", "utf8mb4_uca1400_as_ci", "utf8mb4_uca1400_ai_cs",
                                       "utf8mb4_uca1400_nopad_ai_cs", "utf8mb4_uca1400_nopad_as_cs",
                                       "utf8mb4_general_ci", "utf8mb4_unicode_nopad_ci"])
def test_keys_compare_as_the_server_compares_them(source_db, collation):
    """``<`` and ``=`` of two keys in Python, as the server says them: trailing spaces, characters below the space,
    accents and case, at every level of a multi-level collation (a key from the binlog with a trailing space is the
    chunk bound without it)."""
    source_db.execute(f"CREATE TABLE t (k VARCHAR(8) CHARACTER SET utf8mb4 COLLATE {collation} PRIMARY KEY)")
    with source_db.connection() as conn, conn.cursor() as cur:
        order = DatabaseKeyOrder(conn, load_schema(conn, TableId(source_db.name, "t")))
        for a, b in PAIRS:
            e = f"CONVERT(%s USING utf8mb4) COLLATE {collation}"
            cur.execute(f"SELECT {e} < {e}, {e} = {e}", (a, b, a, b))
            lt, eq = cur.fetchone()
            assert (order((a,)) < order((b,)), order((a,)) == order((b,))) == (bool(lt), bool(eq)), (a, b)
