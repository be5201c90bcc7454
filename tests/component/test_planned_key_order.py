"""A plan records how the source ordered each table's key (``order_signature``: collation and character set
of strings, an ENUM's values, the type otherwise, integers all alike) in every chunk; a snapshot task reading
chunks under another order refuses (``check_key_order``): an ALTER of a key column's collation between the plan
and the read makes the planned ranges overlap, so two chunks of one epoch would both hold a key. Real MariaDB."""

from __future__ import annotations

import pytest

from airflow_cdc_provider.core.chunks import Chunk, SplitOptions, TableId
from airflow_cdc_provider.pipeline.chunk_window import KeyOrderChanged, check_key_order
from airflow_cdc_provider.source.chunk_queries import select_chunk_sql, split_schema
from airflow_cdc_provider.source.schema import load_schema


def planned(db, table: str) -> tuple[list[Chunk], object]:
    with db.connection() as conn:
        schema = load_schema(conn, TableId(db.name, table))
        return split_schema(conn, schema, SplitOptions(2, even_split=False)), schema


def now(db, table: str):
    with db.connection() as conn:
        return load_schema(conn, TableId(db.name, table))


def keys_read(db, schema, chunks: list[Chunk]) -> list[list[str]]:
    """The keys each chunk's SELECT reads under the table's definition ``schema``."""
    out = []
    with db.connection() as conn, conn.cursor() as cur:
        for c in chunks:
            cur.execute(*select_chunk_sql(schema, c))
            out.append(sorted(r[0] for r in cur.fetchall()))
    return out


def test_a_key_collation_changed_after_the_plan_is_refused_naming_both_orders(source_db):
    db = source_db
    db.execute("CREATE TABLE codes (code VARCHAR(10) CHARACTER SET utf8mb4 COLLATE utf8mb4_general_ci NOT NULL "
               "PRIMARY KEY, v INT)")
    keys = ["a", "b", "c", "d", "E", "f", "g"]  # bounds "c" < "E" < "g" case-insensitively; "E" < "c" in bytes
    db.executemany("INSERT INTO codes VALUES (%s, 1)", [(k,) for k in keys])
    chunks, schema = planned(db, "codes")
    assert [c.start for c in chunks] == [None, ("c",), ("E",), ("g",)]
    assert {c.key_order for c in chunks} == {("varchar utf8mb4 utf8mb4_general_ci",)}
    check_key_order(chunks, now(db, "codes"))  # nothing changed: read as planned
    assert sorted(k for ks in keys_read(db, schema, chunks) for k in ks) == sorted(keys)

    db.execute("ALTER TABLE codes MODIFY code VARCHAR(10) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL")
    changed = now(db, "codes")
    read = keys_read(db, changed, chunks)
    assert sum(len(ks) for ks in read) > len(keys), f"the planned ranges do not overlap under the new order: {read}"
    with pytest.raises(KeyOrderChanged) as refused:
        check_key_order(chunks, changed)
    said = str(refused.value)
    assert said.startswith(f"{db.name}.codes: ") and "varchar utf8mb4 utf8mb4_general_ci" in said \
        and "varchar utf8mb4 utf8mb4_bin" in said and "Clear the plan step" in said, said
    # a plan of the new definition reads each key once
    again, schema = planned(db, "codes")
    check_key_order(again, now(db, "codes"))
    assert sorted(k for ks in keys_read(db, schema, again) for k in ks) == sorted(keys)


def test_a_widened_integer_key_keeps_its_order_and_old_plans_are_read_as_they_are(source_db):
    db = source_db
    db.execute("CREATE TABLE t (id INT NOT NULL PRIMARY KEY, u INT NOT NULL UNIQUE)")
    db.executemany("INSERT INTO t VALUES (%s, %s)", [(i, -i) for i in range(10)])
    chunks, _ = planned(db, "t")
    assert {c.key_order for c in chunks} == {("integer",)}
    db.execute("ALTER TABLE t MODIFY id BIGINT UNSIGNED NOT NULL")
    check_key_order(chunks, now(db, "t"))
    with db.connection() as conn:  # another key of the same order (an edited source.chunk_key)
        by_u = load_schema(conn, TableId(db.name, "t"), "u")
    with pytest.raises(KeyOrderChanged, match=r"planned with the key \(id\) .* its key is now \(u\)"):
        check_key_order(chunks, by_u)

    # the plan's chunks through XCom, and those of a plan that did not record the order
    assert [Chunk.from_dict(c.to_dict()).key_order for c in chunks] == [c.key_order for c in chunks]
    older = [Chunk.from_dict({k: v for k, v in c.to_dict().items() if k != "key_order"}) for c in chunks]
    assert older == chunks and {c.key_order for c in older} == {()}
    db.execute("ALTER TABLE t MODIFY id VARCHAR(20) NOT NULL")
    with pytest.raises(KeyOrderChanged):
        check_key_order(chunks, now(db, "t"))
    check_key_order(older, now(db, "t"))


def test_an_enum_key_s_collation_is_part_of_its_order(source_db):
    """ENUM chunk bounds compare as text in the column's collation: the same values under another collation
    order otherwise."""
    db = source_db
    db.execute("CREATE TABLE e (k ENUM('a', 'b', 'c') CHARACTER SET utf8mb4 COLLATE utf8mb4_general_ci NOT NULL, "
               "id INT NOT NULL, PRIMARY KEY (k, id))")
    db.executemany("INSERT INTO e VALUES (%s, %s)", [(k, i) for k in "abc" for i in range(3)])
    chunks, _ = planned(db, "e")
    assert {c.key_order for c in chunks} == {("enum('a','b','c') utf8mb4 utf8mb4_general_ci", "integer")}
    db.execute("ALTER TABLE e MODIFY k ENUM('a', 'b', 'c') CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL")
    with pytest.raises(KeyOrderChanged, match="utf8mb4_bin"):
        check_key_order(chunks, now(db, "e"))
