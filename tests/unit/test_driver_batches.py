"""A small batch collected as Arrow: measuring its span, taking a table's rows and the schema changes' records."""

from __future__ import annotations

import pyarrow as pa

from airflow_cdc_provider.core.offsets import BinlogOffset
from airflow_cdc_provider.core.schema_changes import KIND_OF_OP
from airflow_cdc_provider.sinks.base import META_NAMES
from airflow_cdc_provider.spark.driver_batches import schema_change_records, span_bytes, table_changes
from airflow_cdc_provider.spark.stream import CHANGE_FIELDS

IMAGE_0 = pa.struct([("id", pa.int32()), ("v", pa.large_string())])
IMAGE_1 = pa.struct([("k", pa.int64())])


def batch(rows: list[dict]) -> pa.Table:
    """Rows of the source's schema (``binlog_source.source_schema``) for two tables, as Spark's toArrow gives them."""
    schema = pa.schema([("table", pa.large_string()), ("op", pa.large_string()), ("ts_ms", pa.int64()),
                        ("file_seq", pa.int64()), ("pos", pa.int64()), ("row", pa.int32()),
                        ("statement", pa.large_string()), ("image_0", IMAGE_0), ("image_1", IMAGE_1)])
    full = [{"statement": None, "image_0": None, "image_1": None, **r} for r in rows]
    return pa.Table.from_pylist(full, schema=schema)


ROWS = [
    {"table": "db.a", "op": "c", "ts_ms": 5, "file_seq": 1, "pos": 100, "row": 0, "image_0": {"id": 1, "v": "x"}},
    {"table": "db.b", "op": "u", "ts_ms": 6, "file_seq": 1, "pos": 200, "row": 0, "image_1": {"k": 9}},
    {"table": "db.a", "op": "t", "ts_ms": 0, "file_seq": 1, "pos": 300, "row": 0,
     "statement": '{"statement": "TRUNCATE a", "detail": "", "file": "mysql-bin.000001"}'},
    {"table": "db.a", "op": "d", "ts_ms": 7, "file_seq": 1, "pos": 400, "row": 1, "image_0": {"id": 2, "v": None}},
]


def test_a_span_is_measured_within_one_binlog_file_only():
    assert span_bytes(BinlogOffset("mysql-bin.000004", 1_000), BinlogOffset("mysql-bin.000004", 5_096)) == 4_096
    assert span_bytes(BinlogOffset("mysql-bin.000004", 1_000), BinlogOffset("mysql-bin.000005", 4)) is None
    assert span_bytes(None, BinlogOffset("mysql-bin.000004", 4)) is None


def test_a_tables_rows_get_its_image_columns_then_the_metadata_and_a_records_columns_are_null():
    changes = table_changes(batch(ROWS), "db.a", "image_0")
    assert changes.column_names == ["id", "v", *META_NAMES]
    assert changes.to_pylist() == [
        {"id": 1, "v": "x", "_cdc_op": "c", "_cdc_ts_ms": 5, "_cdc_file_seq": 1, "_cdc_pos": 100, "_cdc_row": 0},
        {"id": None, "v": None, "_cdc_op": "t", "_cdc_ts_ms": 0, "_cdc_file_seq": 1, "_cdc_pos": 300, "_cdc_row": 0},
        {"id": 2, "v": None, "_cdc_op": "d", "_cdc_ts_ms": 7, "_cdc_file_seq": 1, "_cdc_pos": 400, "_cdc_row": 1},
    ]
    assert changes.schema.field("_cdc_row").type == pa.int32() and changes.schema.field("_cdc_op").type == pa.string()


def test_a_table_without_rows_in_the_batch_gets_none_with_its_columns():
    changes = table_changes(batch(ROWS[:1]), "db.b", "image_1")
    assert changes.num_rows == 0 and changes.column_names == ["k", *META_NAMES]


def test_the_schema_changes_records_are_taken_as_the_spark_path_observes_them():
    assert schema_change_records(batch(ROWS), KIND_OF_OP, CHANGE_FIELDS) == [
        {"table": "db.a", "op": "t", "file_seq": 1, "pos": 300, "row": 0,
         "statement": '{"statement": "TRUNCATE a", "detail": "", "file": "mysql-bin.000001"}'}]
