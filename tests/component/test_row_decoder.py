"""The compiled row decoder (``mysql/row_decoder.py``) gives exactly the library's canonical values.

Every change is decoded twice from the same binlog range of a real MariaDB: by the compiled plans and by
python-mysql-replication plus ``RowCanonicalizer.from_binlog`` (the reference). The records must be equal,
and the compiled path must really have decoded them (no silent fallback).
"""

from __future__ import annotations

import datetime as dt
import random
import zlib
from decimal import Decimal

import pytest

from airflow_cdc_provider.compat import replication
from airflow_cdc_provider.core.chunks import TableId
from airflow_cdc_provider.core.records import ChangeRecord
from airflow_cdc_provider.core.schema_changes import SchemaChange
from airflow_cdc_provider.source.binlog import TableChangeReader, read_changes_between
from airflow_cdc_provider.source.binlog_packets import PacketReader
from airflow_cdc_provider.source.schema import load_schema
from airflow_cdc_provider.source.server import SourceError, current_offset

from .test_type_fidelity import (
    ALL_TYPES_DDL,
    EMPTY_COLLECTION,
    EXTREMES,
    LINE,
    POINT_SRID,
    UPDATED,
    ZEROS,
    insert,
    random_inet6,
    random_uuid,
)
from .test_segments import purge_to_a_new_file
from .test_validation import global_setting

# Wire formats the all-types table does not reach: other charsets, 2-byte string lengths, other BLOB length
# sizes, every fractional-second width (negative TIME with a fraction of every fsp), DECIMAL group boundaries,
# BIT widths across bytes, 2-byte SET masks, INET6/UUID bytes with trailing zeros dropped, geometries,
# FLOAT(M,D)/DOUBLE(M,D) rounding, YEAR 0000.
WIDE_DDL = """CREATE TABLE wide (id INT PRIMARY KEY,
 l1 VARCHAR(20) CHARACTER SET latin1, l2 CHAR(5) CHARACTER SET latin1, a1 VARCHAR(10) CHARACTER SET ascii,
 u3 VARCHAR(10) CHARACTER SET utf8mb3, c200 CHAR(200), v300 VARCHAR(300), vbin VARBINARY(300),
 tb TINYBLOB, mb MEDIUMBLOB, lt LONGTEXT, tt TINYTEXT CHARACTER SET latin1,
 d1 DECIMAL(10,2), d2 DECIMAL(5,0), d3 DECIMAL(18,9), d4 DECIMAL(20,10), d5 DECIMAL(30,1), d6 DECIMAL(9,9),
 t1 TIME(1), t2 TIME(2), t3 TIME(3), t4 TIME(4), t5 TIME(5),
 dt1 DATETIME(1), dt2 DATETIME(2), dt4 DATETIME(4), dt5 DATETIME(5), ts0 TIMESTAMP NULL, ts3 TIMESTAMP(3) NULL,
 b7 BIT(7), b13 BIT(13), b33 BIT(33), e2 ENUM('a','b','c','d'), s10 SET('s0','s1','s2','s3','s4','s5','s6','s7','s8','s9'),
 mi MEDIUMINT, miu MEDIUMINT UNSIGNED, fl FLOAT, y YEAR,
 t0 TIME, t6 TIME(6), i6 INET6, u UUID, g GEOMETRY, s16 VARCHAR(20) CHARACTER SET utf16,
 s32 VARCHAR(20) CHARACTER SET utf32, w1250 VARCHAR(20) CHARACTER SET cp1250, dmd DOUBLE(12,3), fmd FLOAT(9,2))"""


def create(db, ddl: str, table: str, zone: str):
    """The table, its schema, and the binlog position its changes start from (in session time zone ``zone``)."""
    db.execute(ddl)
    db.execute(f"SET time_zone = '{zone}'")
    with db.connection() as conn:
        return load_schema(conn, TableId(db.name, table)), current_offset(conn)


def decode_both(db, start, end, schema, server_id):
    tables = {schema.table: schema}
    compiled, library = TableChangeReader(tables), TableChangeReader(tables, compiled=False)
    fast = list(read_changes_between(db.settings, server_id, start, end, tables, reader=compiled))
    reference = list(read_changes_between(db.settings, server_id, start, end, tables, reader=library))
    return fast, reference, compiled.events


def test_every_type_decodes_as_the_library_does(source_db, server_id):
    schema, start = create(source_db, ALL_TYPES_DDL, "all_types", "+05:00")
    insert(source_db, EXTREMES)
    source_db.execute("INSERT INTO all_types (id) VALUES (2)")
    insert(source_db, ZEROS)
    cols = schema.column_names
    source_db.execute("UPDATE all_types SET " + ", ".join(f"`{c}` = %s" for c in cols[1:]) + " WHERE id = 1", UPDATED[1:])
    source_db.execute("UPDATE all_types SET id = 20 WHERE id = 2")  # a key change: a delete and an insert
    source_db.execute("DELETE FROM all_types")
    with source_db.connection() as conn:
        end = current_offset(conn)

    fast, reference, events = decode_both(source_db, start, end, schema, server_id)
    assert len(reference) == 3 + 1 + 2 + 3
    assert fast == reference
    assert events == {"compiled": 6, "library": 0}
    assert reference[0].after["d"] == Decimal("-12345678901234567890123456789012345.123456789012345678901234567890")


def _wide_row(rng: random.Random, i: int) -> tuple:
    def maybe(v):
        return None if rng.random() < 0.1 else v

    def text(n, alphabet="abcxyz éü"):
        return "".join(rng.choice(alphabet) for _ in range(rng.randint(0, n)))

    def dec(p, s):
        digits = rng.randint(0, 10**p - 1)
        return Decimal(rng.choice((1, -1)) * digits).scaleb(-s)

    def time_value(fsp):
        us = rng.randint(0, 10**fsp - 1) * 10 ** (6 - fsp)
        sign = rng.choice(("", "-"))
        return f"{sign}{rng.randint(0, 838)}:{rng.randint(0, 59):02d}:{rng.randint(0, 59):02d}.{us:06d}"

    def datetime_value(fsp, lo=1000, hi=9999):
        t = dt.datetime(rng.randint(lo, hi), rng.randint(1, 12), rng.randint(1, 28), rng.randint(0, 23),
                        rng.randint(0, 59), rng.randint(0, 59), rng.randint(0, 10**fsp - 1) * 10 ** (6 - fsp))
        return t.isoformat(" ")

    return (i, maybe(text(20)), maybe(text(5).rstrip()), maybe(text(10, "abc xyz")), maybe(text(10, "ab€z")),
            maybe(text(200, "ab😀 z")), maybe(text(300, "abé😀")), maybe(rng.randbytes(rng.randint(0, 300))),
            maybe(rng.randbytes(rng.randint(0, 255))), maybe(rng.randbytes(rng.randint(0, 70_000))),
            maybe(text(2000)), maybe(text(100)),
            maybe(dec(10, 2)), maybe(dec(5, 0)), maybe(dec(18, 9)), maybe(dec(20, 10)), maybe(dec(30, 1)), maybe(dec(9, 9)),
            *(maybe(time_value(f)) for f in (1, 2, 3, 4, 5)),
            *(maybe(datetime_value(f)) for f in (1, 2, 4, 5)),
            maybe(datetime_value(0, 1971, 2037)), maybe(datetime_value(3, 1971, 2037)),
            maybe(rng.randint(0, 2**7 - 1)), maybe(rng.randint(0, 2**13 - 1)), maybe(rng.randint(0, 2**33 - 1)),
            maybe(rng.choice("abcd")), maybe(",".join(f"s{k}" for k in range(10) if rng.random() < 0.4)),
            maybe(rng.randint(-2**23, 2**23 - 1)), maybe(rng.randint(0, 2**24 - 1)), maybe(rng.uniform(-1e6, 1e6)),
            maybe(rng.choice([0, rng.randint(1901, 2155)])),
            maybe(time_value(0).split(".")[0]), maybe(time_value(6)), maybe(random_inet6(rng)), maybe(random_uuid(rng)),
            maybe(rng.choice([POINT_SRID, LINE, EMPTY_COLLECTION])), maybe(text(20, "aé😀ж")), maybe(text(20, "aé😀ж")),
            maybe(text(20, "aąčšŽ€")), maybe(rng.uniform(-1e8, 1e8)), maybe(rng.uniform(-1e6, 1e6)))


def test_random_values_of_every_wire_format_decode_as_the_library_does(source_db, server_id):
    schema, start = create(source_db, WIDE_DDL, "wide", "+00:00")
    rng = random.Random(20261123)
    rows = [_wide_row(rng, i) for i in range(150)]
    marks = ", ".join(["%s"] * len(rows[0]))
    source_db.executemany(f"INSERT INTO wide VALUES ({marks})", rows[:100])  # several rows per event
    cols = schema.column_names
    for row in rows[100:]:
        source_db.execute("UPDATE wide SET " + ", ".join(f"`{c}` = %s" for c in cols[1:]) + " WHERE id = %s",
                          (*row[1:], row[0] - 100))
    source_db.execute("DELETE FROM wide WHERE id % 3 = 0")
    with source_db.connection() as conn:
        end = current_offset(conn)

    fast, reference, events = decode_both(source_db, start, end, schema, server_id)
    assert len(reference) == 100 + 50 + 34
    assert fast == reference
    assert events["library"] == 0 and events["compiled"] >= 3
    values = [r.after for r in reference if r.after]
    assert any(isinstance(v["mb"], bytes) and len(v["mb"]) > 65_535 for v in values)  # a 3-byte length
    assert any(v["t3"] is not None and v["t3"] < dt.timedelta(0) for v in values)  # negative fractional TIME
    assert any(v["t6"] is not None and v["t6"] < dt.timedelta(0) and v["t6"].microseconds for v in values)
    assert any(v["i6"] is not None and "::" in v["i6"] for v in values) and any(v["y"] == 0 for v in values)


def test_packet_reader_holds_a_new_definition_follows_files_and_skips_other_tables(source_db, server_id):
    """Rows written after an ALTER that the pipeline's schema does not know yet are never decoded with it: the
    read reports the ALTER as a resync and holds the table's later rows; the read follows FLUSH BINARY LOGS;
    changes of a table that is not captured are skipped."""
    schema, start = create(source_db, "CREATE TABLE grows (id INT PRIMARY KEY, a VARCHAR(10))", "grows", "+00:00")
    source_db.execute("CREATE TABLE ignored (id INT PRIMARY KEY, v INT)")
    source_db.execute("INSERT INTO grows VALUES (1, 'one'), (2, 'two')")
    source_db.execute("INSERT INTO ignored VALUES (1, 1)")
    source_db.execute("FLUSH BINARY LOGS")
    source_db.execute("UPDATE grows SET a = 'uno' WHERE id = 1")
    source_db.execute("ALTER TABLE grows ADD COLUMN b INT DEFAULT 7")
    source_db.execute("INSERT INTO grows VALUES (3, 'three', 3)")
    source_db.execute("UPDATE ignored SET v = 2")
    source_db.execute("DELETE FROM grows WHERE id = 2")
    with source_db.connection() as conn:
        end = current_offset(conn)
    assert end.file != start.file

    fast, reference, events = decode_both(source_db, start, end, schema, server_id)
    assert fast == reference
    assert [(r.op, r.key, dict(r.image)) for r in fast if isinstance(r, ChangeRecord)] == [
        ("c", (1,), {"id": 1, "a": "one"}), ("c", (2,), {"id": 2, "a": "two"}), ("u", (1,), {"id": 1, "a": "uno"})]
    resyncs = [r for r in fast if isinstance(r, SchemaChange)]  # the ALTER; the table is held from there on
    assert [r.kind for r in resyncs] == ["resync"] and "add column b" in resyncs[0].detail.lower()
    assert fast[2].position.file == end.file != fast[0].position.file
    assert events == {"compiled": 2, "library": 0}


def test_compressed_row_events_of_a_captured_table_fail_the_read(mariadb, source_db):
    """MariaDB's ``log_bin_compress`` writes row events neither decoder reads: a read must fail and name the
    setting, never skip their rows; compressed events of a table not captured pass."""
    source_db.execute("CREATE TABLE cap (id INT PRIMARY KEY, v VARCHAR(400))")
    source_db.execute("CREATE TABLE other (id INT PRIMARY KEY, v VARCHAR(400))")
    with source_db.connection() as conn:
        schema = load_schema(conn, TableId(source_db.name, "cap"))
        with global_setting(mariadb, "log_bin_compress", "ON"):
            start = current_offset(conn)
            source_db.execute("INSERT INTO other VALUES (1, %s)", ("x" * 300,))
            middle = current_offset(conn)
            source_db.execute("INSERT INTO cap VALUES (1, %s)", ("y" * 300,))
            end = current_offset(conn)
        with conn.cursor() as cur:
            cur.execute(f"SHOW BINLOG EVENTS IN '{start.file}' FROM {start.pos}")
            kinds = [r[2] for r in cur.fetchall() if r[1] < end.pos]
    assert kinds.count("Write_rows_compressed_v1") == 2, kinds
    schemas = {schema.table: schema}
    assert list(read_changes_between(source_db.settings, 9301, start, middle, schemas)) == []
    with pytest.raises(SourceError, match=r"cap.*log_bin_compress=ON.*SET GLOBAL log_bin_compress=OFF"):
        list(read_changes_between(source_db.settings, 9302, start, end, schemas))


def test_an_event_larger_than_one_packet_is_read_whole(mariadb, source_db):
    """The server sends an event of 16 MiB or more in several packets; they are joined into the one event, and
    the events after it are read too."""
    source_db.execute("CREATE TABLE big (id INT PRIMARY KEY, b LONGBLOB, t VARCHAR(10))")
    blob = random.Random(7).randbytes(17 * 2**20 + 11)
    with source_db.connection() as conn:
        schema = load_schema(conn, TableId(source_db.name, "big"))
        start = current_offset(conn)
        with global_setting(mariadb, "max_allowed_packet", 64 * 2**20):
            with source_db.server.app_connection(source_db.name) as app, app.cursor() as cur:
                cur.execute("INSERT INTO big VALUES (1, %s, 'after'), (2, NULL, 'small')", (blob,))
                cur.execute("UPDATE big SET t = 'changed' WHERE id = 2")
        end = current_offset(conn)
    reader = TableChangeReader({schema.table: schema})
    records = list(read_changes_between(source_db.settings, 9303, start, end, {schema.table: schema}, reader=reader))
    assert [(r.op, r.key) for r in records] == [("c", (1,)), ("c", (2,)), ("u", (2,))]
    assert records[0].after == {"id": 1, "b": blob, "t": "after"}
    assert records[2].after == {"id": 2, "b": None, "t": "changed"}
    assert reader.events == {"compiled": 3, "library": 0}  # the big row in an event of its own
    purge_to_a_new_file(source_db)  # SHOW BINLOG EVENTS cannot list the event: later scans would stop at it


def as_mysql_v2(data: bytes, checksum: int) -> bytes:
    """A MariaDB V1 row event packet (OK byte + event) laid out as MySQL writes it, V2: the type + 7, and an
    extra-data block after the flags (its 2-byte length counts itself; a partition id here, as MySQL logs for
    a partitioned table), with the event's size and CRC32 made to match."""
    extra = (5).to_bytes(2, "little") + bytes([1]) + (3).to_bytes(2, "little")  # RW_V_EXTRAINFO_PART, partition 3
    at = 1 + 19 + 8  # OK byte, event header, table id + flags
    event = bytearray(data[1:at] + extra + data[at:len(data) - checksum])
    event[4] += 7  # WRITE/UPDATE/DELETE_ROWS_EVENT_V1 (23-25) -> _V2 (30-32)
    event[9:13] = (len(event) + checksum).to_bytes(4, "little")
    if checksum:
        event += zlib.crc32(event).to_bytes(4, "little")
    return bytes([0]) + bytes(event)


def test_mysql_v2_row_events_decode_by_the_compiled_plans(source_db, server_id, monkeypatch):
    """MySQL writes row events V2 (a 10-byte post-header and an extra-data block); MariaDB writes V1. The same
    binlog range read with each row event rewritten as V2 on the wire gives the same changes, every one decoded
    by the compiled plans from the packet's bytes (the extra data skipped by its length), none by the library."""
    schema, start = create(source_db, "CREATE TABLE v2 (id INT PRIMARY KEY, a VARCHAR(10), b BIGINT)", "v2", "+00:00")
    source_db.execute("INSERT INTO v2 VALUES (1, 'one', 10), (2, 'two', NULL), (3, 'three', -3)")
    source_db.execute("UPDATE v2 SET a = 'uno', b = b + 1 WHERE id <= 2")
    source_db.execute("DELETE FROM v2 WHERE id = 3")
    with source_db.connection() as conn:
        end = current_offset(conn)
    tables = {schema.table: schema}
    as_written = list(read_changes_between(source_db.settings, server_id, start, end, tables))

    rewritten = []
    read_packets = replication.packet_reader

    def packet_reader(stream):
        read, checksum = read_packets(stream), 4 if replication.uses_checksum(stream) else 0

        def read_as_v2():
            data = read()
            if data is not None and len(data) > 20 and data[0] == 0 and data[5] in (23, 24, 25):
                data = as_mysql_v2(data, checksum)
                rewritten.append(data[5])
            return data

        return read_as_v2

    monkeypatch.setattr(replication, "packet_reader", packet_reader)
    from_packet = []  # events the packet reader decoded from its own bytes, not from the library's event
    compiled = PacketReader._compiled

    def compiled_from_packet(self, *args):
        records = compiled(self, *args)
        from_packet.append(records is not None)
        return records

    monkeypatch.setattr(PacketReader, "_compiled", compiled_from_packet)
    reader = TableChangeReader(tables)
    as_v2 = list(read_changes_between(source_db.settings, server_id, start, end, tables, reader=reader))

    assert sorted(rewritten) == [30, 31, 32]  # one event of each kind, each now V2
    assert from_packet == [True] * 3 and reader.events == {"compiled": 3, "library": 0}
    assert [(r.op, r.key, r.before, r.after) for r in as_v2] == [(r.op, r.key, r.before, r.after) for r in as_written]
    assert [(r.op, r.key, dict(r.image)) for r in as_v2] == [
        ("c", (1,), {"id": 1, "a": "one", "b": 10}), ("c", (2,), {"id": 2, "a": "two", "b": None}),
        ("c", (3,), {"id": 3, "a": "three", "b": -3}), ("u", (1,), {"id": 1, "a": "uno", "b": 11}),
        ("u", (2,), {"id": 2, "a": "uno", "b": None}), ("d", (3,), {"id": 3, "a": "three", "b": -3})]
