"""All types through both sinks (snapshot, then binlog updates), and the PostgreSQL mirror's versioning."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pytest

from airflow_cdc_provider.sinks.postgres import PostgresMirror
from airflow_cdc_provider.sinks.registry import open_sink
from airflow_cdc_provider.spark.verify import verify_table

from ..component.test_type_fidelity import (
    ALL_TYPES_DDL,
    CHARSETS_DDL,
    EMPTY_COLLECTION,
    EXTREMES,
    POINT_SRID,
    SINGLE_BYTE_CHARSETS,
    UPDATED,
    WIDE_CHARSETS,
    ZEROS,
)
from .cdc_helpers import Pipeline, jdbc_sink, parquet_sink, sink_rows, source_rows, table_types


def insert(db, row):
    db.execute("INSERT INTO all_types VALUES (" + ", ".join(["%s"] * len(row)) + ")", row)


@pytest.mark.parametrize("sink_type", ["parquet", "jdbc"])
def test_all_types_snapshot_then_binlog_updates_verify_equal(source_db, tmp_path, spark, postgres, sink_type):
    source_db.execute(ALL_TYPES_DDL)
    source_db.execute("SET time_zone = '+05:00'")
    insert(source_db, EXTREMES)
    source_db.execute("INSERT INTO all_types (id) VALUES (2)")
    insert(source_db, ZEROS)
    sink = parquet_sink(tmp_path) if sink_type == "parquet" else jdbc_sink(postgres, f"s_{source_db.name}")
    p = Pipeline(source_db, tmp_path, sink, ["all_types"], postgres=postgres, chunk_size=2)
    p.snapshot(p.plan())
    p.collect()
    types = table_types(source_db, "all_types")
    assert sink_rows(spark, sink, p.secrets, types) == source_rows(source_db, "all_types")

    cols = types.schema.column_names
    set_all = "UPDATE all_types SET " + ", ".join(f"`{c}` = %s" for c in cols[1:]) + " WHERE id = %s"
    source_db.execute(set_all, (*UPDATED[1:], 1))
    source_db.execute(set_all, (*EXTREMES[1:], 2))
    source_db.execute(set_all, (*[None] * (len(cols) - 1), 3))
    source_db.execute("UPDATE all_types SET id = 10 WHERE id = 1")  # key change: delete + insert
    insert(source_db, (4, *UPDATED[1:]))
    p.stream()

    got, want = sink_rows(spark, sink, p.secrets, types), source_rows(source_db, "all_types")
    assert got == want
    row = got[(10,)]
    assert row[cols.index("biu")] == Decimal(2**63) and row[cols.index("b64")] == Decimal(1)
    assert row[cols.index("d")] == "0.000000000000000000000000000001"
    assert row[cols.index("tm6")] == "838:59:58.999999" and row[cols.index("vc")] == "ñ"
    assert got[(2,)][cols.index("ts")] == dt.datetime(2024, 1, 1, 22, 4, 5, 654321)  # written at +05:00
    # the types added to the table: spatial (SRID + WKB), addresses and UUIDs as MariaDB prints them, DOUBLE(M,D)
    # as SELECT rounds it, negative fractional TIME, zero dates and zero parts as NULL, latin1 and utf16 text
    assert row[cols.index("g")] == EMPTY_COLLECTION and got[(2,)][cols.index("pt")] == POINT_SRID
    assert [row[cols.index(c)] for c in ("i4", "i6", "u")] == ["1.0.0.0", "1:0:0:1::1",
                                                              "01890a5d-ac96-774b-bcce-b302099a8057"]
    assert got[(2,)][cols.index("i6")] == "::ffff:1.2.3.4" and got[(2,)][cols.index("dmd")] == -0.0001
    assert row[cols.index("tm3")] == "-838:59:58.999" and got[(2,)][cols.index("tm3")] == "-00:00:00.001"
    assert row[cols.index("dz")] is row[cols.index("dtz")] is got[(2,)][cols.index("dz")] is None
    assert got[(2,)][cols.index("l1")] == "é\x81x" and got[(2,)][cols.index("u16")] == "é😀"

    verdict = verify_table(spark, source_db.settings, open_sink(sink, p.secrets, spark), types, [(None, None)])
    assert verdict.equal and verdict.source_rows == verdict.sink_rows == 4, verdict.to_dict()


@pytest.mark.parametrize("sink_type", ["parquet", "jdbc"])
def test_generated_invisible_columns_invalid_dates_and_every_charset_through_both_sinks(
        source_db, tmp_path, spark, postgres, sink_type):
    """What the all-types table cannot hold: generated and INVISIBLE columns (the Spark read names every column),
    invalid dates stored under ALLOW_INVALID_DATES (NULL through Spark's try_cast as on the binlog), and every
    byte of every single-byte character set with an exact codec (Connector/J's conversion on the snapshot side) but
    NUL, which PostgreSQL's text cannot hold (the binary column has it). Also what Connector/J or a server's
    sql_mode would change on the snapshot side only: TINYINT(1) UNSIGNED/ZEROFILL (read as booleans), a wide
    DECIMAL ZEROFILL's text (padded), and CHAR under a global PAD_CHAR_TO_FULL_LENGTH (padded)."""
    source_db.execute(CHARSETS_DDL)
    source_db.execute("CREATE TABLE gen (id INT PRIMARY KEY, a INT, v INT AS (a * 2) VIRTUAL, "
                      "s VARCHAR(20) AS (CONCAT('x', a)) STORED, inv INT INVISIBLE DEFAULT 5, d DATE, "
                      "dt DATETIME(3), ts TIMESTAMP NULL, t1u TINYINT(1) UNSIGNED DEFAULT 255, "
                      "t1z TINYINT(1) ZEROFILL DEFAULT 3, dz DECIMAL(50,5) ZEROFILL DEFAULT 123.45, "
                      "cp CHAR(5) DEFAULT 'a')")
    with source_db.server.root_connection() as root, root.cursor() as cur:
        cur.execute("SET GLOBAL sql_mode = CONCAT(@@GLOBAL.sql_mode, ',PAD_CHAR_TO_FULL_LENGTH')")
    try:
        snapshot_then_stream_generated_columns_and_charsets(source_db, tmp_path, spark, postgres, sink_type)
    finally:
        with source_db.server.root_connection() as root, root.cursor() as cur:
            cur.execute("SET GLOBAL sql_mode = REPLACE(@@GLOBAL.sql_mode, ',PAD_CHAR_TO_FULL_LENGTH', '')")


def snapshot_then_stream_generated_columns_and_charsets(source_db, tmp_path, spark, postgres, sink_type):
    source_db.execute("SET SESSION sql_mode = 'ALLOW_INVALID_DATES'")
    every_byte, text_bytes = bytes(range(256)), bytes(range(1, 256))
    wide = ["é€ж日本", "é😀ж𝄞", "é€ж日本", "é😀ж𝄞", "é😀ж𝄞", "é😀ж𝄞"]
    marks = ", ".join(["%s"] * (len(SINGLE_BYTE_CHARSETS) + len(WIDE_CHARSETS) + 4))
    source_db.execute(f"INSERT INTO charsets VALUES ({marks})",
                      (1, *[text_bytes] * len(SINGLE_BYTE_CHARSETS), *wide, text_bytes, "b c", every_byte))
    source_db.execute(f"INSERT INTO charsets VALUES ({marks})",
                      (2, *["abc"] * len(SINGLE_BYTE_CHARSETS), *[""] * len(WIDE_CHARSETS), "", "a", b""))
    source_db.execute("INSERT INTO gen (id, a, inv, d, dt, ts) VALUES (1, 10, 7, '2024-02-31', "
                      "'2024-02-30 10:00:00.5', '0000-00-00 00:00:00'), (2, NULL, 8, '2024-02-29', "
                      "'0000-01-01 00:00:00.000', '1970-01-01 05:00:01')")
    sink = parquet_sink(tmp_path) if sink_type == "parquet" else jdbc_sink(postgres, f"g_{source_db.name}")
    p = Pipeline(source_db, tmp_path, sink, ["charsets", "gen"], postgres=postgres, chunk_size=1)
    p.snapshot(p.plan())
    p.collect()
    types = {t: table_types(source_db, t) for t in ("charsets", "gen")}
    for t in types:
        assert sink_rows(spark, sink, p.secrets, types[t]) == source_rows(source_db, t), t

    source_db.execute("UPDATE charsets SET c_latin1 = t_latin1, c_utf16 = c_utf8mb4, t_latin1 = 'z' WHERE id = 1")
    source_db.execute(f"INSERT INTO charsets VALUES ({marks})",
                      (3, *[text_bytes[::-1]] * len(SINGLE_BYTE_CHARSETS), *wide[::-1], text_bytes, "", b"\x00"))
    source_db.execute("UPDATE gen SET a = a + 1, inv = inv + 1, d = '2024-04-31', ts = '2038-01-19 03:14:07'")
    source_db.execute("INSERT INTO gen (id, a, d, dt) VALUES (3, 3, '0000-00-00', '2024-00-01 00:00:00')")
    p.stream()
    for t in types:
        got, want = sink_rows(spark, sink, p.secrets, types[t]), source_rows(source_db, t)
        assert got == want, t
        verdict = verify_table(spark, source_db.settings, open_sink(sink, p.secrets, spark), types[t], [(None, None)])
        assert verdict.equal and verdict.source_rows == verdict.sink_rows == 3, verdict.to_dict()
    cols = types["gen"].schema.column_names
    gen = sink_rows(spark, sink, p.secrets, types["gen"])
    assert [gen[(1,)][cols.index(c)] for c in ("a", "v", "s", "inv", "d", "dt")] == [11, 22, "x11", 8, None, None]
    assert [gen[(2,)][cols.index(c)] for c in ("t1u", "t1z", "dz", "cp")] == [255, 3, "123.45000", "a"]
    latin1 = sink_rows(spark, sink, p.secrets, types["charsets"])[(3,)][types["charsets"].schema.column_names.index(
        "c_latin1")]
    assert len(latin1) == 255 and latin1[255 - 0x81] == "\x81" and latin1[-1] == "\x01"  # the bytes reversed


def test_postgres_mirror_converges_under_replays_and_reordering(postgres, request):
    schema = "mirror_" + request.node.name[-20:].lower().replace("[", "_").replace("]", "")
    mirror = PostgresMirror(jdbc_sink(postgres, schema), {"sink_password": postgres.password})
    table = "db.t"
    mirror.ensure_table(table, [("id", "integer"), ("v", "text")], ["id"])
    cols = ["id", "v"]

    def row(k, v, op, seq, pos, r=0, chunk=None):
        return (k, v, op, 0, seq, pos, r, op == "d", chunk)

    batch = [row(1, "a", "c", 1, 100), row(2, "b", "c", 1, 110)]
    mirror.upsert(table, cols, ["id"], batch)
    mirror.upsert(table, cols, ["id"], batch)  # replay of the same batch
    mirror.upsert(table, cols, ["id"], [row(1, "new", "u", 1, 300)])
    mirror.upsert(table, cols, ["id"], [row(1, "old", "u", 1, 200)])  # older version after the newer one
    mirror.upsert(table, cols, ["id"], [row(2, "b", "d", 2, 4)])  # delete (next binlog file)
    mirror.upsert(table, cols, ["id"], [row(2, "late", "r", 1, 900, -1, "1:0")])  # late snapshot row
    mirror.upsert(table, cols, ["id"], [row(3, "x", "r", 1, 900, -1, "1:0")])
    with postgres.connect() as conn, conn.cursor() as cur:
        cur.execute(f'SELECT id, v, _cdc_op, _cdc_deleted FROM "{schema}"."db__t" ORDER BY id')
        assert cur.fetchall() == [(1, "new", "u", False), (2, "b", "d", True), (3, "x", "r", False)]
    # a chunk retry (lw after the first attempt's rows) tombstones what the retry no longer saw
    assert mirror.sweep_chunk(table, "1:0", (1, 1000, -1)) == 1
    # a finished re-snapshot tombstones rows last written before it started
    assert mirror.sweep_stale(table, (1, 250, -1)) == 0
    assert mirror.sweep_stale(table, (3, 4, -1)) == 1


def test_binlog_rows_become_the_arrow_batches_spark_would_build(source_db, spark, server_id):
    """The stream source hands Spark Arrow batches it builds column by column (``arrow_batches``); they must
    equal what Spark's own row-by-row conversion makes of the same rows, for every type, NULLs, and the
    null image columns of the other tables."""
    from pyspark.sql.types import StructType
    from pyspark.sql.worker.plan_data_source_read import records_to_arrow_batches

    from airflow_cdc_provider.source.binlog import read_changes_between
    from airflow_cdc_provider.source.server import current_offset
    from airflow_cdc_provider.spark.binlog_source import (
        META_WIDTH,
        BinlogSource,
        arrow_batches,
        source_row,
        source_schema,
    )

    source_db.execute(ALL_TYPES_DDL)
    source_db.execute("CREATE TABLE other (id INT PRIMARY KEY, v VARCHAR(5))")
    source_db.execute("SET time_zone = '+05:00'")
    types = {"all_types": table_types(source_db, "all_types"), "other": table_types(source_db, "other")}
    with source_db.connection() as conn:
        start = current_offset(conn)
    insert(source_db, EXTREMES)
    source_db.execute("INSERT INTO all_types (id) VALUES (2)")
    insert(source_db, ZEROS)
    source_db.execute("INSERT INTO other VALUES (1, 'a'), (2, NULL)")
    source_db.execute("DELETE FROM all_types WHERE id = 3")
    with source_db.connection() as conn:
        end = current_offset(conn)
    order = sorted(types)
    columns = {str(types[t].schema.table): META_WIDTH + i for i, t in enumerate(order)}
    by_table = {t.schema.table: t for t in types.values()}
    records = list(read_changes_between(source_db.settings, server_id, start, end,
                                        {t: types.schema for t, types in by_table.items()}))
    rows = [source_row(r, by_table[r.table], columns) for r in records]
    schema = StructType.fromDDL(source_schema([types[t].spark_ddl for t in order]))

    ours = arrow_batches(rows, schema, batch_rows=4)
    sparks = list(records_to_arrow_batches(iter(rows), 4, schema, BinlogSource({})))
    assert ours is not None and len(rows) == 6 and len(ours) == len(sparks) == 2
    for a, b in zip(ours, sparks):
        assert a.schema.equals(b.schema) and a.equals(b)


def test_registering_the_source_skips_spark_s_python_data_source_lookup(spark):
    """``register_source`` tells Spark's DataSourceManager (an internal of the pinned Spark) that there are no
    other Python data sources to look up, unless a lookup already ran: this checks that the internal is still
    there and is left holding what a lookup would have found here (nothing), and that the source is found."""
    from airflow_cdc_provider.spark.binlog_source import BinlogSource, register_source

    jvm = spark.sparkContext._jvm
    manager = getattr(getattr(jvm, "org.apache.spark.sql.execution.datasources.DataSourceManager$"), "MODULE$")
    looked_up = manager.dataSourceBuilders().isDefined()
    register_source(spark, {})
    builders = manager.dataSourceBuilders()
    assert builders.isDefined()
    if not looked_up:
        assert builders.get().size() == 0
    assert spark._jsparkSession.sessionState().dataSourceManager().dataSourceExists(BinlogSource.name())
