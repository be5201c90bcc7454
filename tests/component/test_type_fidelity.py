"""The same row state gives the same canonical values from SELECT and from the binlog, for every type.

"Every path" below is: the snapshot's SELECT (``read_chunk``: pymysql and ``RowCanonicalizer.from_select``), the
binlog through python-mysql-replication (``RowCanonicalizer.from_binlog``) and the binlog through the compiled
row decoder, and, where MySQL prints a text, that text (``CAST(c AS CHAR)``). The Spark JDBC read and the sinks
are compared with the source in tests/e2e/test_sink_fidelity.py.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import random
import struct
import uuid

import pytest

from airflow_cdc_provider.core.chunks import Chunk, TableId
from airflow_cdc_provider.core.records import OP_CREATE, OP_DELETE, OP_UPDATE, ChangeRecord
from airflow_cdc_provider.core.schema_changes import SchemaChange
from airflow_cdc_provider.pipeline.chunk_window import read_chunk
from airflow_cdc_provider.sinks.types import TableSinkTypes, format_time
from airflow_cdc_provider.source.binlog import TableChangeReader, read_changes_between
from airflow_cdc_provider.source.schema import load_schema
from airflow_cdc_provider.source.server import current_offset

ALL_TYPES_DDL = """CREATE TABLE all_types (id INT PRIMARY KEY,
 ti TINYINT, tiu TINYINT UNSIGNED, si SMALLINT, siu SMALLINT UNSIGNED, mi MEDIUMINT, miu MEDIUMINT UNSIGNED,
 i INT, iu INT UNSIGNED, bi BIGINT, biu BIGINT UNSIGNED, d DECIMAL(65,30), f FLOAT, db DOUBLE,
 b1 BIT(1), b64 BIT(64), c CHAR(10), vc VARCHAR(50), tx TEXT, bn BINARY(4), vb VARBINARY(10), bl BLOB,
 dt DATE, dt0 DATETIME, dt3 DATETIME(3), dt6 DATETIME(6), ts TIMESTAMP(6) NULL, tm TIME, tm6 TIME(6), y YEAR,
 e ENUM('x','y','z'), st SET('p','q','r'), j JSON,
 g GEOMETRY, pt POINT, i4 INET4, i6 INET6, u UUID, dmd DOUBLE(10,4), fmd FLOAT(7,3), tm3 TIME(3), dz DATE,
 dtz DATETIME(3), tsz TIMESTAMP(3) NULL, l1 VARCHAR(10) CHARACTER SET latin1, u16 VARCHAR(10) CHARACTER SET utf16)"""


def geometry(srid: int, wkb_type: int, body: bytes) -> bytes:
    """MySQL's internal geometry format, as SELECT and the binlog give it: SRID (4 bytes, little-endian) + WKB."""
    return struct.pack("<I", srid) + b"\x01" + struct.pack("<I", wkb_type) + body


POINT_SRID = geometry(4326, 1, struct.pack("<dd", -1.5, 2.25))
LINE = geometry(0, 2, struct.pack("<I", 2) + struct.pack("<4d", 0, 0, 1, 1.5))
EMPTY_COLLECTION = geometry(0, 7, struct.pack("<I", 0))

EXTREMES = (1, -128, 255, -32768, 65535, -8388608, 16777215, -2147483648, 4294967295, -(2**63), 2**64 - 1,
            "-12345678901234567890123456789012345.123456789012345678901234567890", 16777217, 0.1,
            1, 2**64 - 1, "ab", "héllo 😀", "long 😀 text", b"\x01\x02", b"\x00\xff", b"\x00blob\xff",
            "2024-02-29", "2024-01-02 03:04:05", "2024-01-02 03:04:05.123", "2024-01-02 03:04:05.123456",
            "2024-01-02 03:04:05.654321", "-838:59:59", "-00:00:01.5", 1901, "y", "p,r",
            '{"k": [1, 2.5, "😀"], "n": null}',
            LINE, POINT_SRID, "255.255.255.255", "::ffff:1.2.3.4", "6ccd780c-baba-1026-9564-5b8c656024db", -0.0001,
            1234.567, "-00:00:00.001", "0000-00-00", "0000-00-00 00:00:00.000", "0000-00-00 00:00:00.000",
            "é\x81x", "é😀")
ZEROS = (3, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, "0", 0.0, 0.0, 0, 0, "", "", "", b"", b"", b"",
         "1970-01-01", "1000-01-01 00:00:00", "1000-01-01 00:00:00.000", "9999-12-31 23:59:59.999999",
         "1970-01-01 05:00:01", "838:59:59", "00:00:00", 0, "x", "", "[]",
         geometry(0, 1, struct.pack("<dd", 0, 0)), geometry(0, 1, struct.pack("<dd", 0, 0)), "0.0.0.0", "::",
         "00000000-0000-0000-0000-000000000000", 0, 0, "00:00:00", "0000-01-01", "0000-12-31 23:59:59.999",
         "1970-01-01 05:00:01.000", "", "")
UPDATED = (1, 127, 0, 32767, 0, 8388607, 0, 2147483647, 0, 2**63 - 1, 2**63, "0.000000000000000000000000000001",
           123456.7, -1.7976931348623157e308, 0, 1, "z  ", "ñ", "", b"\xff\xff\xff\xff", b"", b"x" * 1000,
           "9999-12-31", "2038-01-19 03:14:08", "2000-06-15 12:00:00.999", "2000-06-15 12:00:00.000001",
           "2038-01-19 03:14:07.999999", "00:00:00.5", "838:59:58.999999", 2155, "z", "p,q,r", '"text"',
           EMPTY_COLLECTION, geometry(0, 1, struct.pack("<dd", 1e308, -1e-308)), "1.0.0.0", "1:0:0:1::1",
           "01890a5d-ac96-774b-bcce-b302099a8057", 123456.7891, -9999.999, "-838:59:58.999", "2024-00-10",
           "2024-05-00 10:00:00.000", "2038-01-19 08:14:07.999", "ÿ ñ", "ж")


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
    assert row["biu"] == 2**63 and row["f"] == 123456.703125 and row["c"] == "z"
    assert at_insert[(1,)]["bn"] == b"\x01\x02\x00\x00" and at_insert[(1,)]["b64"] == 2**64 - 1
    assert at_insert[(1,)]["st"] == "p,r" and all(v is None for k, v in at_insert[(2,)].items() if k != "id")
    assert at_insert[(1,)]["pt"] == POINT_SRID and at_insert[(1,)]["i6"] == "::ffff:1.2.3.4"
    assert at_insert[(1,)]["dmd"] == -0.0001 and at_insert[(1,)]["tm3"] == -dt.timedelta(milliseconds=1)
    assert at_insert[(1,)]["dz"] is at_insert[(1,)]["tsz"] is at_insert[(3,)]["dz"] is None  # zero date, year 0
    assert at_insert[(3,)]["y"] == 0 and at_insert[(1,)]["l1"] == "é\x81x" and at_insert[(1,)]["u16"] == "é😀"


def test_timestamps_are_utc_whatever_the_session_zone(source_db, all_types, server_id):
    source_db.execute("INSERT INTO all_types (id, ts) VALUES (1, '2024-01-02 03:04:05.654321')")  # +05:00
    assert selected(source_db, all_types, server_id)[(1,)]["ts"] == dt.datetime(2024, 1, 1, 22, 4, 5, 654321)


def test_rows_of_a_new_definition_are_never_decoded_with_the_old_across_alter_and_binlog_files(source_db, server_id):
    """Table maps are parsed once per table id and file (``source/binlog.py``): after an ALTER, which gives the
    table a new id, and in a new binlog file, rows of the new definition are reported (a resync) and held, never
    decoded with the definition the reader knows."""
    source_db.execute("CREATE TABLE evolving (id INT PRIMARY KEY, a INT)")
    with source_db.connection() as conn:
        start = current_offset(conn)
        schema_then = load_schema(conn, TableId(source_db.name, "evolving"))
    source_db.execute("INSERT INTO evolving VALUES (1, 10), (2, 20)")
    source_db.execute("ALTER TABLE evolving DROP COLUMN a, ADD COLUMN a VARCHAR(10) DEFAULT 'x'")
    source_db.execute("INSERT INTO evolving VALUES (3, 'three')")
    source_db.execute("FLUSH BINARY LOGS")
    with source_db.connection() as conn:
        middle = current_offset(conn)
    source_db.execute("UPDATE evolving SET a = 'four' WHERE id = 3")
    source_db.execute("INSERT INTO evolving VALUES (4, 'five')")
    with source_db.connection() as conn:
        end = current_offset(conn)
    assert end.file != start.file
    got = list(read_changes_between(source_db.settings, server_id, start, end, {schema_then.table: schema_then}))
    assert [(r.op, dict(r.image)) for r in got if isinstance(r, ChangeRecord)] == [
        (OP_CREATE, {"id": 1, "a": 10}), (OP_CREATE, {"id": 2, "a": 20})]
    changes = [r for r in got if isinstance(r, SchemaChange)]  # the ALTER: from there on the table is held
    assert [c.kind for c in changes] == ["resync"] and "ALTER TABLE" in changes[0].statement
    # a read that starts after the statement (in the new file) sees the definition change in the table map
    late = list(read_changes_between(source_db.settings, server_id, middle, end, {schema_then.table: schema_then}))
    assert [c.kind for c in late] == ["resync"] and "column a: type changed (was int(11))" in late[0].detail


# -- every path, phase by phase ---------------------------------------------------------------------------------
def every_path(db, table: str, server_id: int, inserts, updates, deletes, setup=()) -> tuple:
    """Run the three phases on ``table`` (created already), snapshot after inserts and after updates, and check
    that every image of both binlog decoders equals the snapshot of its phase. Returns the schema, the snapshots
    and the server's text (``CAST(c AS CHAR)``, hex for binary columns) of each phase."""
    with db.connection() as conn:
        schema = load_schema(conn, TableId(db.name, table))
        start = current_offset(conn)
    snapshots, texts = [], []
    for statements in (inserts, updates, deletes):
        for sql in (*setup, *statements):
            if isinstance(sql, tuple):
                db.execute(*sql)
            else:
                db.execute(sql)
        if statements is deletes:
            break
        snapshots.append(selected(db, schema, server_id))
        texts.append(server_text(db, schema))
    with db.connection() as conn:
        end = current_offset(conn)
    tables = {schema.table: schema}
    for compiled in (False, True):
        reader = TableChangeReader(tables, compiled=compiled)
        changes = list(read_changes_between(db.settings, server_id, start, end, tables, reader=reader))
        assert reader.events["library" if compiled else "compiled"] == 0, reader.events
        assert changes and {c.op for c in changes} == {OP_CREATE, OP_UPDATE, OP_DELETE}
        state = {}  # key -> its row as the changes so far leave it
        for c in changes:
            if c.op == OP_CREATE:
                assert c.after == snapshots[0][c.key], (compiled, c.op, c.key)
                state[c.key] = c.after
            elif c.op == OP_UPDATE:
                assert c.before == state[c.key], (compiled, c.op, c.key)
                state[c.key] = c.after
            else:
                assert c.before == snapshots[1][c.key] == state.pop(c.key), (compiled, c.op, c.key)
        assert state == {k: v for k, v in snapshots[1].items() if k in state}, compiled
    return schema, snapshots, texts


def server_text(db, schema) -> dict[tuple, dict[str, str | None]]:
    exprs = [f"HEX(`{c.name}`)" if c.data_type in {"binary", "varbinary", "blob", "geometry", "point"} else
             f"CAST(`{c.name}` AS CHAR)" for c in schema.columns]
    rows = db.execute(f"SELECT {', '.join(exprs)} FROM `{schema.table.table}`")
    keys = [schema.column_names.index(k) for k in schema.key_columns]
    return {tuple(int(r[i]) for i in keys): dict(zip(schema.column_names, r)) for r in rows}


TIMES = ["-00:00:01.5", "-838:59:58.999999", "-00:00:00.000001", "-12:34:56.7", "-838:59:59", "838:59:59",
         "00:00:00", "-00:00:00.5", "-00:00:59.999999", "-01:00:00.1", "-00:00:00.01", "-23:59:59.999999",
         "-24:00:00.000001", "12:34:56.789012", "00:00:00.000001", "-00:00:00.99", "-00:00:01", "838:59:58.999999",
         "-00:00:00.000999", "-00:59:59.9", "-100:00:00.000001"]


def test_time_of_every_precision_is_the_source_text_on_every_path(source_db, server_id):
    """TIME(0)..TIME(6), negative fractions above all: MySQL stores a negative time as the negated whole, so its
    fraction borrows from the seconds; a reader taking the fraction apart gives -(s + 1 - f) for -(s + f)."""
    source_db.execute("CREATE TABLE times (id INT PRIMARY KEY, " + ", ".join(f"t{p} TIME({p})" for p in range(7)) + ")")
    rng = random.Random(20261124)
    values = TIMES + [f"{rng.choice(['-', ''])}{rng.randint(0, 838)}:{rng.randint(0, 59):02d}:{rng.randint(0, 59):02d}"
                      f".{rng.randint(0, 999999):06d}" for _ in range(60)]
    cols = ", ".join(f"t{p}" for p in range(7))
    inserts = [(f"INSERT INTO times (id, {cols}) VALUES (%s{', %s' * 7})", (i, *[v] * 7)) for i, v in enumerate(values)]
    updates = [(f"UPDATE times SET {', '.join(f't{p} = %s' for p in range(7))} WHERE id = %s", (*[v] * 7, i))
               for i, v in enumerate(reversed(values))]
    schema, snapshots, texts = every_path(source_db, "times", server_id, inserts, updates,
                                          ["DELETE FROM times WHERE id % 2 = 0"])
    negative_fractions = 0
    for snapshot, text in zip(snapshots, texts, strict=True):
        for key, row in snapshot.items():
            for p in range(7):
                assert format_time(row[f"t{p}"], p) == text[key][f"t{p}"], (key, p)
                negative_fractions += row[f"t{p}"] < dt.timedelta(0) and row[f"t{p}"].microseconds > 0
    assert negative_fractions > 200


def test_generated_and_invisible_columns_are_in_the_snapshot_and_the_binlog(source_db, server_id):
    """MariaDB's FULL row images hold VIRTUAL and STORED generated columns, and INVISIBLE ones, which ``SELECT *``
    leaves out: the snapshot names every column, so both give the same rows."""
    source_db.execute("CREATE TABLE gen (id INT PRIMARY KEY, a INT, v INT AS (a * 2) VIRTUAL, "
                      "s INT AS (a * 3) STORED, vs VARCHAR(20) AS (CONCAT('x', a)) VIRTUAL, "
                      "inv INT INVISIBLE DEFAULT 5, b VARCHAR(5))")
    schema, snapshots, _ = every_path(
        source_db, "gen", server_id,
        ["INSERT INTO gen (id, a, b) VALUES (1, 10, 'p'), (2, NULL, 'q')",
         "INSERT INTO gen (id, a, inv) VALUES (3, 7, 9)"],
        ["UPDATE gen SET a = a + 1 WHERE id <> 2", "UPDATE gen SET inv = 11 WHERE id = 2"],
        ["DELETE FROM gen WHERE id = 1"])
    assert schema.column_names == ["id", "a", "v", "s", "vs", "inv", "b"]
    assert snapshots[1][(1,)] == {"id": 1, "a": 11, "v": 22, "s": 33, "vs": "x11", "inv": 5, "b": "p"}
    assert snapshots[1][(2,)]["inv"] == 11 and snapshots[1][(3,)]["inv"] == 9
    star = source_db.execute("SELECT * FROM gen WHERE id = 3")
    assert len(star[0]) == len(schema.columns) - 1  # SELECT * leaves the INVISIBLE column out


def test_zero_and_invalid_dates_are_none_on_every_path(source_db, server_id):
    """Zero dates, zero parts, invalid days (ALLOW_INVALID_DATES) and year 0 have no Python date: None on every
    path (the Spark read: its SELECT makes year 0 NULL, its try_cast the others, see the e2e test)."""
    source_db.execute("CREATE TABLE dates (id INT PRIMARY KEY, d DATE, dt DATETIME, dt6 DATETIME(6), "
                      "ts TIMESTAMP NULL, ts3 TIMESTAMP(3) NULL)")
    allow = ["SET SESSION sql_mode = 'ALLOW_INVALID_DATES'", "SET time_zone = '+00:00'"]
    insert = "INSERT INTO dates VALUES (%s, %s, %s, %s, %s, %s)"
    schema, snapshots, texts = every_path(
        source_db, "dates", server_id,
        [(insert, (1, "0000-00-00", "0000-00-00 00:00:00", "0000-00-00 00:00:00", "0000-00-00 00:00:00",
                   "0000-00-00 00:00:00")),
         (insert, (2, "2024-02-31", "2024-02-30 10:00:00", "0000-01-01 00:00:00.5", "1970-01-01 00:00:01",
                   "2038-01-19 03:14:07.999")),
         (insert, (3, "2024-00-15", "2024-05-00 01:02:03", "2024-04-31 23:59:59.999999", None, None))],
        ["UPDATE dates SET d = '0000-12-31', dt = '2024-13-01 00:00:00' WHERE id = 3",
         "UPDATE dates SET ts = '0000-00-00 00:00:00' WHERE id = 2"],
        ["DELETE FROM dates WHERE id = 1"], setup=allow)
    assert texts[0][(2,)]["d"] == "2024-02-31" and texts[0][(3,)]["dt6"] == "2024-04-31 23:59:59.999999"
    first, last = dt.datetime(1970, 1, 1, 0, 0, 1), dt.datetime(2038, 1, 19, 3, 14, 7, 999000)
    for snapshot in snapshots:
        for row in snapshot.values():
            valid = {k: v for k, v in row.items() if v is not None and k != "id"}
            assert valid in ({}, {"ts": first, "ts3": last}, {"ts3": last}), row
    # the Spark read's SELECT list: year 0 is NULL there, the rest text for Spark's try_cast
    select = ", ".join(TableSinkTypes.of(schema).jdbc_select_list())
    rows = {r[-1]: r[1:6] for r in source_db.execute(f"SELECT {select} FROM dates")}
    assert rows[2] == ("2024-02-31", "2024-02-30 10:00:00", None, None, "2038-01-19 03:14:07.999")


# Every character set with an exact codec (values.CHARSET_CODECS): single-byte ones hold all 256 bytes.
SINGLE_BYTE_CHARSETS = ("latin1", "ascii", "cp1250", "cp1251", "cp1257", "tis620", "latin2", "latin5", "latin7",
                        "koi8r", "cp850", "cp852", "macroman")
WIDE_CHARSETS = ("utf8mb3", "utf8mb4", "ucs2", "utf16", "utf16le", "utf32")
CHARSETS_DDL = ("CREATE TABLE charsets (id INT PRIMARY KEY, "
                + ", ".join(f"c_{cs} VARCHAR(300) CHARACTER SET {cs}" for cs in SINGLE_BYTE_CHARSETS + WIDE_CHARSETS)
                + ", t_latin1 TEXT CHARACTER SET latin1, e_latin1 ENUM('a', 'b c') CHARACTER SET latin1, "
                "b_bin VARCHAR(300) CHARACTER SET binary)")


def test_strings_of_every_character_set_are_what_the_server_converts_them_to(source_db, server_id):
    """Every byte of every single-byte character set (stored as is, as a binary string inserts it), and samples of
    the Unicode ones, BMP and beyond: the binlog decoders give what the server's conversion to utf8mb4 gives, also
    for the bytes Python's own codecs leave undefined (latin1's five C1 holes, '?' in ascii and cp125x)."""
    source_db.execute(CHARSETS_DDL)
    every_byte = bytes(range(256))
    samples = {"utf8mb3": "é€ж日本", "utf8mb4": "é😀ж𝄞", "ucs2": "é€ж日本", "utf16": "é😀ж𝄞", "utf16le": "é😀ж𝄞",
               "utf32": "é😀ж𝄞"}
    cols = [f"c_{cs}" for cs in SINGLE_BYTE_CHARSETS + WIDE_CHARSETS]
    marks = ", ".join(["%s"] * (len(cols) + 4))
    first = (1, *[every_byte] * len(SINGLE_BYTE_CHARSETS), *samples.values(), every_byte, "b c", every_byte)
    second = (2, *["abc ~"] * len(SINGLE_BYTE_CHARSETS), *[""] * len(WIDE_CHARSETS), "x\x81\x8d\x8f\x90\x9dÿ", "a",
              b"")
    schema, snapshots, _ = every_path(
        source_db, "charsets", server_id,
        [(f"INSERT INTO charsets VALUES ({marks})", first), (f"INSERT INTO charsets VALUES ({marks})", second)],
        ["UPDATE charsets SET c_latin1 = t_latin1, c_utf16 = 'Ωx', t_latin1 = 'z' WHERE id = 1",
         "UPDATE charsets SET c_utf32 = c_utf8mb4 WHERE id = 2"],
        ["DELETE FROM charsets WHERE id = 2"], setup=["SET SESSION sql_mode = ''"])
    row = snapshots[0][(1,)]
    stored = {r[0]: r[1:] for r in source_db.execute(
        "SELECT id, " + ", ".join(f"HEX(CAST(c_{cs} AS BINARY))" for cs in SINGLE_BYTE_CHARSETS) + " FROM charsets")}
    assert all(bytes.fromhex(h) == every_byte for h in stored[1])  # all 256 bytes are in every column
    latin1 = row["c_latin1"]  # cp1252, with the C1 control characters in the bytes cp1252 leaves undefined
    assert len(latin1) == 256 and latin1[0x80] == "€" and latin1[0xFF] == "ÿ"
    assert [latin1[b] for b in (0x81, 0x8D, 0x8F, 0x90, 0x9D)] == ["\x81", "\x8d", "\x8f", "\x90", "\x9d"]
    assert row["c_ascii"] == every_byte[:0x80].decode() + "?" * 128
    assert [row[f"c_{cs}"] for cs in WIDE_CHARSETS] == list(samples.values())
    assert row["b_bin"] == every_byte and snapshots[1][(1,)]["c_utf16"] == "Ωx"


def random_inet6(rng: random.Random) -> str:
    words = [0 if rng.random() < 0.5 else rng.choice([1, 0xFFFF, rng.randrange(0x10000)]) for _ in range(8)]
    if rng.random() < 0.2:
        words[:6] = [0] * 6 if rng.random() < 0.5 else [0] * 5 + [0xFFFF]  # IPv4-compatible / -mapped forms
    return str(ipaddress.IPv6Address(b"".join(w.to_bytes(2, "big") for w in words)))


def random_uuid(rng: random.Random) -> str:
    raw = bytearray(rng.randbytes(16))
    raw[6] = (raw[6] & 0x0F) | rng.choice([0x00, 0x10, 0x40, 0x50, 0x60, 0x70])  # versions 1-5 are stored swapped
    raw[8] = (raw[8] & 0x3F) | rng.choice([0x00, 0x80, 0xC0])  # variants
    return str(uuid.UUID(bytes=bytes(raw)))


def test_addresses_uuids_rounded_floats_and_year_zero_are_what_select_gives_on_every_path(source_db, server_id):
    """The binlog carries INET4/INET6/UUID as bytes (trailing zero bytes dropped, UUID v1 unswapped),
    FLOAT(M,D)/DOUBLE(M,D) as the stored value that SELECT rounds to D decimals, YEAR 0000 as 0."""
    source_db.execute("CREATE TABLE mixed (id INT PRIMARY KEY, i4 INET4, i6 INET6, u UUID, f72 FLOAT(7,2), "
                      "f203 FLOAT(20,3), d104 DOUBLE(10,4), d3010 DOUBLE(30,10), dz DOUBLE(25,5) UNSIGNED ZEROFILL, "
                      "y YEAR, g GEOMETRY)")
    rng = random.Random(20261125)

    def row(i: int) -> tuple:
        return (i, str(ipaddress.IPv4Address(rng.choice([0, 1 << 24, rng.randrange(1 << 32)]))), random_inet6(rng),
                random_uuid(rng), rng.uniform(-99999, 99999), rng.uniform(-1e16, 1e16), rng.uniform(-1e5, 1e5),
                rng.uniform(-1e19, 1e19), rng.uniform(0, 1e19), rng.choice([0, 1901, 2155, 2000]),
                rng.choice([POINT_SRID, LINE, EMPTY_COLLECTION]))

    insert = "INSERT INTO mixed VALUES (" + ", ".join(["%s"] * 11) + ")"
    fixed = [(insert, (1000 + i, *v)) for i, v in enumerate([
        ("0.0.0.0", "::", "00000000-0000-0000-0000-000000000000", 0, 0, 0, 0, 0, 0, None),
        ("255.255.255.255", "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", "ffffffff-ffff-ffff-ffff-ffffffffffff",
         99999.99, -0.001, -0.0001, 1e-10, 0.00001, 2155, None),
        ("1.0.0.0", "1::", "6ccd780c-baba-1026-9564-5b8c656024db", -0.01, 0.5, 0.00005, 0.5, 1, 1901, None),
        ("0.0.0.1", "::1.2.3.4", "00000000-0000-1000-8000-000000000000", 0.005, 0.0005, -0.00005, 0, 0, 0, None),
        ("10.0.0.1", "1:0:1:1:1:1:1:1", "123e4567-e89b-42d3-a456-426614174000", 1, 1, 1, 1, 1, 0, None)])]
    inserts = fixed + [(insert, row(i)) for i in range(300)]
    updates = [("UPDATE mixed SET i4 = %s, i6 = %s, u = %s, f72 = %s, f203 = %s, d104 = %s, d3010 = %s, dz = %s, "
                "y = %s, g = %s WHERE id = %s", (*row(i)[1:], i)) for i in range(0, 300, 3)]
    updates.append("UPDATE mixed SET u = UUID() WHERE id < 100")  # version 1, stored swapped
    schema, snapshots, texts = every_path(source_db, "mixed", server_id, inserts, updates,
                                          ["DELETE FROM mixed WHERE id % 2 = 1"])
    for snapshot, text in zip(snapshots, texts, strict=True):
        for key, r in snapshot.items():
            assert (r["i4"], r["i6"], r["u"]) == (text[key]["i4"], text[key]["i6"], text[key]["u"]), key
            assert r["y"] == int(text[key]["y"]) and (r["g"] is None or r["g"].hex().upper() == text[key]["g"])
    assert snapshots[0][(1001,)]["d104"] == -0.0001 and snapshots[0][(1001,)]["f72"] == pytest.approx(99999.99)
    assert snapshots[0][(1000,)]["y"] == 0 and snapshots[0][(1000,)]["i6"] == "::"


def test_enum_and_set_with_empty_members_and_the_error_value(source_db, server_id):
    """An ENUM's error value '' (index 0, stored in non-strict mode) and an empty-string member, and a SET with an
    empty member, are what SELECT gives on both binlog decoders."""
    source_db.execute("CREATE TABLE members (id INT PRIMARY KEY, e ENUM('', 'a', 'b b', 'ü'), "
                      "st SET('a', '', 'c'), big ENUM(" + ", ".join(f"'m{i}'" for i in range(300)) + "), "
                      "s64 SET(" + ", ".join(f"'s{i}'" for i in range(64)) + "))")
    _, snapshots, texts = every_path(
        source_db, "members", server_id,
        ["INSERT INTO members VALUES (1, '', 'a,,c', 'm299', 's0,s63'), (2, 'ü', '', 'm0', ''), "
         "(3, 'b b', ',', 'm255', 's1,s2')", "INSERT INTO members (id, e) VALUES (4, 'not a member')"],
        ["UPDATE members SET st = '', e = 'a' WHERE id = 1", "UPDATE members SET st = 'a,,c' WHERE id = 2"],
        ["DELETE FROM members WHERE id = 3"], setup=["SET SESSION sql_mode = ''"])
    for snapshot, text in zip(snapshots, texts, strict=True):
        for key, row in snapshot.items():
            assert {k: v for k, v in row.items() if k != "id"} == {
                k: v for k, v in text[key].items() if k != "id"}, key
    assert snapshots[0][(4,)]["e"] == "" and snapshots[0][(1,)]["st"] == "a,,c"


def test_char_under_a_global_pad_char_to_full_length_is_read_unpadded_as_the_binlog_has_it(source_db, server_id):
    """The reading session leaves PAD_CHAR_TO_FULL_LENGTH out of the server's sql_mode: the binlog holds a CHAR
    without its padding, whatever the mode."""
    source_db.execute("CREATE TABLE c (id INT PRIMARY KEY, c CHAR(5), cu CHAR(3) CHARACTER SET utf32)")
    with source_db.connection() as conn:
        schema = load_schema(conn, TableId(source_db.name, "c"))
        start = current_offset(conn)
    source_db.execute("INSERT INTO c VALUES (1, 'a', 'é'), (2, 'b\tc', '')")
    with source_db.server.root_connection() as root, root.cursor() as cur:
        cur.execute("SET GLOBAL sql_mode = CONCAT(@@GLOBAL.sql_mode, ',PAD_CHAR_TO_FULL_LENGTH')")
    try:
        rows = selected(source_db, schema, server_id)
    finally:
        with source_db.server.root_connection() as root, root.cursor() as cur:
            cur.execute("SET GLOBAL sql_mode = REPLACE(@@GLOBAL.sql_mode, ',PAD_CHAR_TO_FULL_LENGTH', '')")
    with source_db.connection() as conn:
        end = current_offset(conn)
    images = {c.key: c.after for c in read_changes_between(source_db.settings, server_id, start, end,
                                                           {schema.table: schema})}
    assert rows == images and rows[(1,)] == {"id": 1, "c": "a", "cu": "é"} and rows[(2,)]["c"] == "b\tc"
