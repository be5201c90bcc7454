"""The pipeline's metrics from chunk reports and stream statuses, and the Asset URI of each sink table."""

from dataclasses import replace

import pytest

from airflow_cdc_provider.core.offsets import BinlogOffset
from airflow_cdc_provider.pipeline.metrics import Metric, StreamMeter, binlog_bytes_behind
from airflow_cdc_provider.sinks.base import SinkConfig
from airflow_cdc_provider.state.records import StreamStatus

FILES = [("mariadb-bin.000003", 1000), ("mariadb-bin.000004", 500), ("mariadb-bin.000005", 256)]


def test_binlog_bytes_behind_counts_the_rest_of_its_file_and_every_later_one():
    assert binlog_bytes_behind(BinlogOffset("mariadb-bin.000003", 400), FILES) == 600 + 500 + 256
    assert binlog_bytes_behind(BinlogOffset("mariadb-bin.000005", 256), FILES) == 0
    assert binlog_bytes_behind(BinlogOffset("mariadb-bin.000002", 4), FILES) is None  # purged: not known
    assert binlog_bytes_behind(None, FILES) is None


def test_the_stream_meter_counts_what_grew_since_its_last_report_and_resumes_from_a_count():
    beat = StreamStatus("running", "continuous", rows_by_table={"s.a": 10, "s.b": 0}, batches=2, lag_seconds=1.5)
    meter = StreamMeter()
    assert meter.observe(beat, 77) == [Metric("incr", "stream.rows", 10, "s.a"), Metric("incr", "stream.batches", 2),
                                       Metric("gauge", "stream.lag_seconds", 1.5),
                                       Metric("gauge", "stream.binlog_bytes_behind", 77)]
    later = replace(beat, rows_by_table={"s.a": 10, "s.b": 5}, batches=3, lag_seconds=0.0)
    resumed = StreamMeter.from_dict(meter.to_dict())  # the trigger takes over from the task, the task back
    assert resumed.observe(later) == [Metric("incr", "stream.rows", 5, "s.b"), Metric("incr", "stream.batches", 1),
                                      Metric("gauge", "stream.lag_seconds", 0.0)]
    assert [m for m in resumed.observe(later) if m.kind == "incr"] == []


def test_each_sink_type_names_its_tables_by_a_uri_without_credentials():
    from airflow.sdk import Asset

    from airflow_cdc_provider.operators.assets import table_asset_uri

    assert table_asset_uri(SinkConfig("parquet", "/data/cdc"), "shop.orders") == "file:///data/cdc/shop.orders"
    assert table_asset_uri(SinkConfig("delta", "s3a://b/cdc/"), "shop.a b") == "s3a://b/cdc/shop.a%2520b"
    jdbc = SinkConfig("jdbc", conn={"host": "pg", "port": 5433, "schema": "dw", "login": "u"}, schema="cdc")
    assert table_asset_uri(jdbc, "shop.orders") == "postgres://pg:5433/dw/cdc/shop__orders"
    # a key pair written into the sink's URI stays out of the Asset (shown in the UI, sent to every consumer)
    assert table_asset_uri(SinkConfig("delta", "s3a://AKIAXX:top%2Fsecret@lake/cdc"), "shop.t") == "s3a://lake/cdc/shop.t"
    for sink in (SinkConfig("parquet", "/data/cdc"), jdbc):  # already in the form Airflow normalizes to
        uri = table_asset_uri(sink, "shop.orders")
        assert Asset(uri=uri).uri == uri
    with pytest.raises(ValueError, match="sink.type 'kafka'"):
        table_asset_uri(SinkConfig("kafka"), "shop.orders")
