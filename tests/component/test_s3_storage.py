"""The state store and the parquet layout on an S3 URI (``s3a://``), against a local S3 server (moto): the
object-store code paths the Airflow side and the jobs' Python take there (one PUT per file, a directory is a
key prefix moved object by object, listings re-read because another process writes). Spark itself does not
write here (no hadoop-aws jars on this machine): that part of an S3 sink is Spark's own connector."""

import uuid

import fsspec.config
import pytest

from airflow_cdc_provider.core.chunks import Chunk, TableId
from airflow_cdc_provider.core.offsets import BinlogOffset
from airflow_cdc_provider.core.reports import ChunkReport
from airflow_cdc_provider.sinks.parquet import ParquetLayout
from airflow_cdc_provider.state.records import FinishedSnapshot, StreamStatus
from airflow_cdc_provider.state.store import StateStore

REPORT = ChunkReport(Chunk(TableId("db", "t"), 1, ("id",), None, None), BinlogOffset("b.000001", 4),
                     BinlogOffset("b.000001", 90), 3, 0, 0.1)


@pytest.fixture(scope="module")
def s3_endpoint():
    from moto.server import ThreadedMotoServer

    mp = pytest.MonkeyPatch()
    for k, v in {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1"}.items():
        mp.setenv(k, v)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    # what a user sets as FSSPEC_S3_ENDPOINT_URL (or ~/.config/fsspec/s3.json) for MinIO and the like
    mp.setitem(fsspec.config.conf, "s3", {"endpoint_url": f"http://{host}:{port}"})
    fs = fsspec.filesystem("s3", skip_instance_cache=True)
    fs.mkdir("cdc-test")
    yield
    server.stop()
    mp.undo()


def fresh(cls, uri):
    """What another process (the Spark job, the Airflow worker) sees: its own filesystem instance."""
    fsspec.filesystem("s3").invalidate_cache()
    return cls(uri)


def test_state_store_on_s3a(s3_endpoint):
    uri = f"s3a://cdc-test/state-{uuid.uuid4().hex}"
    store = StateStore(uri)
    store.ensure_writable()
    assert store.storage.listdir() == []  # the probe is gone
    store.write_window_reports("db.t", 0, [REPORT])
    assert fresh(StateStore, uri).read_chunk_report("db.t", 0, 1) == REPORT
    other = StateStore(uri)  # a second reader whose listing was cached before the write
    assert other.finished_tables() == {}
    store.write_finished_snapshot(FinishedSnapshot("db.t", 0, (REPORT,)))
    assert list(other.finished_tables()) == ["db.t"]
    store.write_status(StreamStatus("running", "continuous", rows_emitted=5))
    store.request_stop()
    assert other.read_status().rows_emitted == 5 and other.stop_requested()
    other.clear_stop()
    assert not store.stop_requested()
    assert store.checkpoint_location == f"{uri}/stream/checkpoint"
    where = store.write_spec("s.json", '{"x": 1}')
    assert where == f"{uri}/specs/s.json"


def test_parquet_layout_publishes_windows_and_batches_on_s3a(s3_endpoint):
    layout = ParquetLayout(f"s3a://cdc-test/sink-{uuid.uuid4().hex}")
    t = "db.t"

    def staged(tag):
        d = layout.staging_dir(t)
        layout.storage.write_text(f"{d}/part-0.parquet", tag)
        layout.storage.write_text(f"{d}/_SUCCESS", "")
        return d

    def published():
        root = layout.epoch_dir(t, 1)
        return {n: layout.storage.read_text(f"{root}/{n}/part-0.parquet") for n in layout.storage.listdir(root)}

    layout.publish_window(staged("a"), t, 1, 0, 3)
    layout.publish_window(staged("b"), t, 1, 4, 7)
    layout.publish_window(staged("retry"), t, 1, 0, 3)
    assert published() == {"chunks=0-3": "retry", "chunks=4-7": "b"}
    assert sorted(layout.publish_window(staged("regrouped"), t, 1, 2, 5)) == [0, 1, 6, 7]
    assert published() == {"chunks=2-5": "regrouped"}
    layout.publish(staged("batch"), layout.batch_dir(t, 0))
    layout.write_current(t, 1, (1, 4, 0))
    fresh_layout = fresh(ParquetLayout, layout.uri)
    assert fresh_layout.has_changes(t) and fresh_layout.read_current(t)["epoch"] == 1
    assert layout.storage.listdir(f"{layout.table_dir(t)}/_staging") == []  # staging moved, nothing left behind
