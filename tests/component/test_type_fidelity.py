"""The same row state gives the same canonical values from SELECT and from the binlog, for every type."""

from __future__ import annotations

import pytest

from airflow_cdc_provider.core.chunks import Chunk, TableId
from airflow_cdc_provider.core.records import OP_CREATE, OP_DELETE, OP_UPDATE
from airflow_cdc_provider.pipeline.chunk_window import read_chunk
from airflow_cdc_provider.source.binlog import read_changes_between
from airflow_cdc_provider.source.schema import load_schema
from airflow_cdc_provider.source.server import current_offset

ALL_TYPES_DDL = """CREATE TABLE all_types (id INT PRIMARY KEY,
 ti TINYINT, tiu TINYINT UNSIGNED, si SMALLINT, siu SMALLINT UNSIGNED, mi MEDIUMINT, miu MEDIUMINT UNSIGNED,
 i INT, iu INT UNSIGNED, bi BIGINT, biu BIGINT UNSIGNED, d DECIMAL(65,30), f FLOAT, db DOUBLE,
 b1 BIT(1), b64 BIT(64), c CHAR(10), vc VARCHAR(50), tx TEXT, bn BINARY(4), vb VARBINARY(10), bl BLOB,
 dt DATE, dt0 DATETIME, dt3 DATETIME(3), dt6 DATETIME(6), ts TIMESTAMP(6) NULL, tm TIME, tm6 TIME(6), y YEAR,
 e ENUM('x','y','z'), st SET('p','q','r'), j JSON)"""

EXTREMES = (1, -128, 255, -32768, 65535, -8388608, 16777215, -2147483648, 4294967295, -(2**63), 2**64 - 1,
            "-12345678901234567890123456789012345.123456789012345678901234567890", 0.1, 0.1,
            1, 2**64 - 1, "ab", "héllo 😀", "long 😀 text", b"\x01\x02", b"\x00\xff", b"\x00blob\xff",
            "2024-02-29", "2024-01-02 03:04:05", "2024-01-02 03:04:05.123", "2024-01-02 03:04:05.123456",
            "2024-01-02 03:04:05.654321", "-838:59:59", "-00:00:01.5", 2024, "y", "p,r",
            '{"k": [1, 2.5, "😀"], "n": null}')
ZEROS = (3, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, "0", 0.0, 0.0, 0, 0, "", "", "", b"", b"", b"",
         "1970-01-01", "1000-01-01 00:00:00", "1000-01-01 00:00:00.000", "9999-12-31 23:59:59.999999",
         "1970-01-01 05:00:01", "838:59:59", "00:00:00", 1901, "x", "", "[]")
UPDATED = (1, 127, 0, 32767, 0, 8388607, 0, 2147483647, 0, 2**63 - 1, 2**63, "0.000000000000000000000000000001",
           -3.4e38, -1.7976931348623157e308, 0, 1, "z  ", "ñ", "", b"\xff\xff\xff\xff", b"", b"x" * 1000,
           "9999-12-31", "2038-01-19 03:14:08", "2000-06-15 12:00:00.999", "2000-06-15 12:00:00.000001",
           "2038-01-19 03:14:07.999999", "00:00:00.5", "838:59:58.999999", 2155, "z", "p,q,r", '"text"')


@pytest.fixture
def all_types(source_db):
    source_db.execute(ALL_TYPES_DDL)
    source_db.execute("SET time_zone = '+05:00'")  # the writer's zone must not matter
    with source_db.connection() as conn:
        schema = load_schema(conn, TableId(source_db.name, "all_types"))
    return schema


def insert(db, row):
    db.execute("INSERT INTO all_types VALUES (" + ", ".join(["%s"] * len(row)) + ")", row)


def selected(db, schema, server_id):
    return read_chunk(db.settings, schema, Chunk(schema.table, 0, schema.key_columns, None, None), server_id=server_id).rows


def test_insert_update_delete_images_equal_select_values(source_db, all_types, server_id):
    schema = all_types
    with source_db.connection() as conn:
        start = current_offset(conn)
    insert(source_db, EXTREMES)
    source_db.execute("INSERT INTO all_types (id) VALUES (2)")  # NULL in every column
    insert(source_db, ZEROS)
    at_insert = selected(source_db, schema, server_id)
    cols = schema.column_names
    source_db.execute("UPDATE all_types SET " + ", ".join(f"`{c}` = %s" for c in cols[1:]) + " WHERE id = 1", UPDATED[1:])
    source_db.execute("UPDATE all_types SET " + ", ".join(f"`{c}` = %s" for c in cols[1:]) + " WHERE id = 2",
                      EXTREMES[1:])
    at_update = selected(source_db, schema, server_id)
    source_db.execute("DELETE FROM all_types WHERE id = 3")
    with source_db.connection() as conn:
        end = current_offset(conn)

    changes = list(read_changes_between(source_db.settings, server_id, start, end, {schema.table: schema}))
    assert [(c.op, c.key) for c in changes] == [
        (OP_CREATE, (1,)), (OP_CREATE, (2,)), (OP_CREATE, (3,)), (OP_UPDATE, (1,)), (OP_UPDATE, (2,)), (OP_DELETE, (3,))]
    creates, updates, delete = changes[:3], changes[3:5], changes[5]
    for c in creates:
        assert c.after == at_insert[c.key], c.key
    for c in updates:
        assert c.before == at_insert[c.key] and c.after == at_update[c.key], c.key
    assert delete.before == at_insert[(3,)]

    row = at_update[(1,)]
    assert row["biu"] == 2**63 and row["f"] == pytest.approx(-3.4e38, rel=1e-6) and row["c"] == "z"
    assert at_insert[(1,)]["bn"] == b"\x01\x02\x00\x00" and at_insert[(1,)]["b64"] == 2**64 - 1
    assert at_insert[(1,)]["st"] == "p,r" and all(v is None for k, v in at_insert[(2,)].items() if k != "id")


def test_timestamps_are_utc_whatever_the_session_zone(source_db, all_types, server_id):
    source_db.execute("INSERT INTO all_types (id, ts) VALUES (1, '2024-01-02 03:04:05.654321')")  # +05:00
    import datetime as dt

    assert selected(source_db, all_types, server_id)[(1,)]["ts"] == dt.datetime(2024, 1, 1, 22, 4, 5, 654321)


def test_rows_decode_with_the_definition_of_their_time_across_alter_and_binlog_files(source_db, server_id):
    """Table maps are parsed once per table id and file (``mysql/binlog.py``): an ALTER, which gives the table a
    new id, and a new binlog file must still decode each row with the columns it was written with."""
    source_db.execute("CREATE TABLE evolving (id INT PRIMARY KEY, a INT)")
    with source_db.connection() as conn:
        start = current_offset(conn)
        schema_then = load_schema(conn, TableId(source_db.name, "evolving"))
    source_db.execute("INSERT INTO evolving VALUES (1, 10), (2, 20)")
    source_db.execute("ALTER TABLE evolving DROP COLUMN a, ADD COLUMN a VARCHAR(10) DEFAULT 'x'")
    source_db.execute("INSERT INTO evolving VALUES (3, 'three')")
    source_db.execute("FLUSH BINARY LOGS")
    source_db.execute("UPDATE evolving SET a = 'four' WHERE id = 3")
    source_db.execute("INSERT INTO evolving VALUES (4, 'five')")
    with source_db.connection() as conn:
        end = current_offset(conn)
    assert end.file != start.file
    rows = [(r.op, dict(r.image)) for r in read_changes_between(
        source_db.settings, server_id, start, end, {schema_then.table: schema_then})]
    assert rows == [
        (OP_CREATE, {"id": 1, "a": 10}), (OP_CREATE, {"id": 2, "a": 20}), (OP_CREATE, {"id": 3, "a": "three"}),
        (OP_UPDATE, {"id": 3, "a": "four"}), (OP_CREATE, {"id": 4, "a": "five"}),
    ]
