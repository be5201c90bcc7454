"""A small stream batch read by the stream job's driver (``BinlogReader.read_table``): the changes of the range
as Arrow, the source's own reader reused from batch to batch; an unreachable source leaves the batch to Spark."""

from __future__ import annotations

import contextlib
import dataclasses
import re

import pytest
from pyspark.sql.types import DateType, IntegerType, LongType, StringType, StructField, StructType

from airflow_cdc_provider.core.chunks import TableId
from airflow_cdc_provider.core.offsets import BinlogOffset, EventPosition
from airflow_cdc_provider.core.records import NullKeyError
from airflow_cdc_provider.core.reports import ChunkRange
from airflow_cdc_provider.pipeline.jobspec import JobSpec
from airflow_cdc_provider.sinks.base import SinkConfig
from airflow_cdc_provider.source.schema import load_schema
from airflow_cdc_provider.source.server import current_offset
from airflow_cdc_provider.source.table_versions import TableVersion
from airflow_cdc_provider.spark.binlog_source import BinlogReader
from airflow_cdc_provider.state.records import StreamSeed, TableSeed
from airflow_cdc_provider.state.store import StateStore
from airflow_cdc_provider.testing.mariadb import free_port

META = [StructField("table", StringType()), StructField("op", StringType()), StructField("ts_ms", LongType()),
        StructField("file_seq", LongType()), StructField("pos", LongType()), StructField("row", IntegerType()),
        StructField("statement", StringType())]
IMAGE = StructType([StructField("id", IntegerType()), StructField("name", StringType())])


def reader_of(source_db, tmp_path, server_id, settings=None, name="people",
              image=IMAGE, versions=None, chunk_order=None) -> tuple[BinlogReader, str]:
    """A stream job's reader of table ``name`` (created by the caller, or ``people`` here), with the query seed
    the state store holds when it is set up; ``versions``: the table's definitions (default: the one it has);
    ``chunk_order``: the definition its chunks were read with (default: the first version)."""
    if name == "people":
        source_db.execute("CREATE TABLE people (id INT PRIMARY KEY, name VARCHAR(20))")
    table = source_db.table(name)
    if versions is None:
        with source_db.connection() as conn:
            versions = [TableVersion(0, load_schema(conn, TableId.parse(table)))]
    settings = settings or source_db.settings
    spec = JobSpec(pipeline="p", source=settings, tables={table: None}, state_path=StateStore(tmp_path / "state").uri,
                   sink=SinkConfig(type="parquet", path=str(tmp_path / "sink")), server_id=server_id)
    chain = [v.to_dict() for v in versions]
    definitions = [{"table": table, "epoch": 0, "versions": chain, "sink_versions": chain}]
    if chunk_order is not None:
        definitions[0]["chunk_order"] = chunk_order.to_dict()
    schema = StructType(META + [StructField("image_0", image)])
    return BinlogReader(spec.to_json(), {"source_password": source_db.settings.password}, 1, definitions, schema), table


def here(source_db) -> BinlogOffset:
    with source_db.connection() as conn:
        at = current_offset(conn)
    return BinlogOffset(at.file, at.pos)


def test_batches_read_in_the_driver_hold_the_ranges_changes(source_db, tmp_path, server_id):
    reader, table = reader_of(source_db, tmp_path, server_id)
    try:
        start = here(source_db)
        source_db.execute("INSERT INTO people VALUES (1, 'ann'), (2, 'bo')")
        middle = here(source_db)
        source_db.execute("UPDATE people SET name = 'bob' WHERE id = 2")
        source_db.execute("DELETE FROM people WHERE id = 1")
        end = here(source_db)
        first, second = reader.read_table(start, middle), reader.read_table(middle, end)  # one reader, two batches
        assert [(r["table"], r["op"], r["image_0"]) for r in first.to_pylist()] == \
               [(table, "c", {"id": 1, "name": "ann"}), (table, "c", {"id": 2, "name": "bo"})]
        assert [(r["op"], r["image_0"]) for r in second.to_pylist()] == \
               [("u", {"id": 2, "name": "bob"}), ("d", {"id": 1, "name": "ann"})]
        assert first.schema.field("image_0").type.field("name").type == "string"
        assert reader.read_table(end, end).num_rows == 0
    finally:
        reader.close()


def test_an_unreachable_source_leaves_the_batch_to_sparks_tasks(source_db, tmp_path, server_id):
    nowhere = dataclasses.replace(source_db.settings, port=free_port(), connect_timeout=2)
    reader, _ = reader_of(source_db, tmp_path, server_id, settings=nowhere)
    start = here(source_db)
    source_db.execute("INSERT INTO people VALUES (1, 'ann')")
    assert reader.read_table(start, here(source_db)) is None
    assert not reader._ready


def test_a_change_is_told_its_chunk_by_the_servers_order_of_an_enum_key(source_db, tmp_path, server_id):
    """An ENUM key orders by its list (``apac < Emea < latam``), in Python ``'Emea' < 'apac'``: the change of
    ``('apac', 5)``, after its chunk's high watermark and before the next chunk's, must be emitted, not taken
    for a row of that next chunk which its snapshot already held."""
    source_db.execute("CREATE TABLE regions (region ENUM('apac', 'Emea', 'latam') NOT NULL, id INT NOT NULL, "
                      "v INT, PRIMARY KEY (region, id))")
    source_db.execute("INSERT INTO regions VALUES ('apac', 5, 0), ('Emea', 5, 0)")
    table = source_db.table("regions")
    early = here(source_db)
    source_db.execute("UPDATE regions SET v = 1 WHERE id = 5")  # ('apac', 5), then ('Emea', 5)
    late = here(source_db)
    chunks = (ChunkRange(TableId.parse(table), 0, None, ("Emea", 1), early),
              ChunkRange(TableId.parse(table), 1, ("Emea", 1), ("latam", 1), late),
              ChunkRange(TableId.parse(table), 2, ("latam", 1), None, late))
    StateStore(tmp_path / "state").write_query_seed(StreamSeed(early, {table: TableSeed(1, chunks, late)}))
    image = StructType([StructField("region", StringType()), StructField("id", IntegerType()),
                        StructField("v", IntegerType())])
    reader, _ = reader_of(source_db, tmp_path, server_id, name="regions", image=image)
    try:
        rows = reader.read_table(early, late).to_pylist()
    finally:
        reader.close()
    assert [(r["op"], r["image_0"]) for r in rows] == [("u", {"region": "apac", "id": 5, "v": 1})]


def test_a_change_is_told_its_chunk_in_the_collation_its_chunks_were_planned_in(source_db, tmp_path, server_id):
    """The stream applies an ALTER that only changes a key column's collation in place; the chunk bounds still
    split the keys in the old one. Under utf8mb4_general_ci ``'C' > 'b'``, under utf8mb4_bin ``'C' < 'b'``: the
    update of ``'C'``, after its chunk's high watermark, must be emitted, not taken for a row of the chunk before,
    whose snapshot was read later."""
    source_db.execute("CREATE TABLE names (name VARCHAR(10) CHARACTER SET utf8mb4 COLLATE utf8mb4_general_ci "
                      "PRIMARY KEY, v INT)")
    source_db.execute("INSERT INTO names VALUES ('C', 0), ('a', 0)")
    table = source_db.table("names")
    with source_db.connection() as conn:
        planned = TableVersion(0, load_schema(conn, TableId.parse(table)))
    early = here(source_db)
    source_db.execute("UPDATE names SET v = 1 WHERE name = 'C'")
    late = here(source_db)
    source_db.execute("ALTER TABLE names MODIFY name VARCHAR(10) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL")
    with source_db.connection() as conn:
        binary = TableVersion(1, load_schema(conn, TableId.parse(table)), EventPosition(late.file, late.pos, 0),
                              "ALTER TABLE names MODIFY name ...")
    assert binary.schema.key[0].collation == "utf8mb4_bin"
    chunks = (ChunkRange(TableId.parse(table), 0, None, ("b",), late),
              ChunkRange(TableId.parse(table), 1, ("b",), None, early))
    StateStore(tmp_path / "state").write_query_seed(StreamSeed(early, {table: TableSeed(1, chunks, late)}))
    image = StructType([StructField("name", StringType()), StructField("v", IntegerType())])
    reader, _ = reader_of(source_db, tmp_path, server_id, name="names", image=image, versions=[planned, binary])
    try:
        rows = reader.read_table(early, late).to_pylist()
    finally:
        reader.close()
    assert [(r["op"], r["image_0"]) for r in rows] == [("u", {"name": "C", "v": 1})]


def test_a_stream_whose_key_is_not_the_one_the_chunks_split_is_refused_naming_the_table(source_db, tmp_path,
                                                                                         server_id):
    """Chunks split by a ``source.chunk_key`` since edited: their bounds are values of other columns than the keys
    the stream reads, so no change could be told its chunk."""
    source_db.execute("CREATE TABLE coded (id INT PRIMARY KEY, code INT NOT NULL UNIQUE, v INT)")
    table = source_db.table("coded")
    with source_db.connection() as conn:
        by_code = load_schema(conn, TableId.parse(table), ("code",))
    start = here(source_db)
    chunks = (ChunkRange(TableId.parse(table), 0, None, (10,), start),
              ChunkRange(TableId.parse(table), 1, (10,), None, start))
    StateStore(tmp_path / "state").write_query_seed(StreamSeed(start, {table: TableSeed(1, chunks, start)}))
    image = StructType([StructField("id", IntegerType()), StructField("code", IntegerType()),
                        StructField("v", IntegerType())])
    reader, _ = reader_of(source_db, tmp_path, server_id, name="coded", image=image, chunk_order=by_code)
    try:
        with pytest.raises(ValueError, match=rf"^{re.escape(table)}: its snapshot's chunks split the key \(code\), "
                                             rf"the stream reads its key as \(id\) .* --table {re.escape(table)}\)$"):
            reader.read_table(start, here(source_db))
    finally:
        reader.close()


def test_a_change_of_a_row_keyed_by_a_zero_date_stops_the_stream_naming_table_and_column(source_db, tmp_path,
                                                                                          server_id):
    """A zero date has no value: decoded as NULL, two rows of it would be one in the sinks. The stream stops."""
    source_db.execute("CREATE TABLE days (d DATE NOT NULL, id INT NOT NULL, v INT, PRIMARY KEY (d, id))")
    image = StructType([StructField("d", DateType()), StructField("id", IntegerType()),
                        StructField("v", IntegerType())])
    reader, table = reader_of(source_db, tmp_path, server_id, name="days", image=image)
    try:
        start = here(source_db)
        source_db.execute("INSERT INTO days VALUES ('2024-02-29', 1, 0)")
        middle = here(source_db)
        assert [r["image_0"]["id"] for r in reader.read_table(start, middle).to_pylist()] == [1]
        with contextlib.closing(source_db.server.app_connection(source_db.name)) as conn, conn.cursor() as cur:
            cur.execute("SET SESSION sql_mode = ''")  # a writer that lets zero dates in
            cur.execute("INSERT INTO days VALUES ('0000-00-00', 2, 0)")
            conn.commit()
        expected = rf"^{re.escape(table)}: a change of a row \(key \(None, 2\)\) whose key column\(s\) d read as NULL: "
        with pytest.raises(NullKeyError, match=expected + ".* A zero or invalid date"):
            reader.read_table(middle, here(source_db))
    finally:
        reader.close()
