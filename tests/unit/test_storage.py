"""The state store on a local path, a file:// URI and a URI served by another fsspec filesystem (memory://,
standing in for s3a:// or hdfs://): same files, same answers; Spark gets each file's URI; a scheme this
machine cannot open is refused naming the YAML key and the package to install."""

import json
import os
import uuid

import pytest

from airflow_cdc_provider.core.chunks import Chunk, TableId
from airflow_cdc_provider.core.offsets import BinlogOffset
from airflow_cdc_provider.core.reports import ChunkReport
from airflow_cdc_provider.pipeline.config import StreamConfig
from airflow_cdc_provider.pipeline.jobspec import JobSpec
from airflow_cdc_provider.sinks.base import SinkConfig
from airflow_cdc_provider.source.settings import ConnectionSettings
from airflow_cdc_provider.state.records import FinishedSnapshot, StreamSeed, StreamStatus
from airflow_cdc_provider.state.storage import StorageError, read_text
from airflow_cdc_provider.state.store import StateStore


@pytest.fixture(params=["path", "file-uri", "memory"])
def store(request, tmp_path):
    root = {"path": str(tmp_path / "state"), "file-uri": f"file://{tmp_path}/state",
            "memory": f"memory://state-{uuid.uuid4().hex}"}[request.param]
    return StateStore(root)


def test_reports_seed_status_and_stop_round_trip(store):
    store.ensure_writable()
    assert store.read_seed() is None and not store.stop_requested()
    store.write_window_reports("db.t", 0, [report(3, 100)])
    store.write_finished_snapshot(FinishedSnapshot("db.t", 0, (report(0, 100, start=None, end=None),)))
    store.write_finished_snapshot(FinishedSnapshot("db.u", 1, (report(0, 100, "db.u", None, None),)))
    store.write_seed(StreamSeed(BinlogOffset("b.000001", 4), {}))
    store.write_status(StreamStatus("running", "continuous"))
    store.request_stop()
    assert store.read_chunk_report("db.t", 0, 3) == report(3, 100)
    assert sorted(store.finished_tables()) == ["db.t", "db.u"]
    assert store.finished_tables()["db.u"].chunks == (report(0, 100, "db.u", None, None),)
    assert store.read_seed().start.pos == 4 and store.read_status().state == "running"
    assert store.stop_requested()
    store.clear_stop()
    store.clear_chunk_reports("db.t", 0, [3])
    assert not store.stop_requested() and store.read_chunk_report("db.t", 0, 3) is None
    assert [n for n in store.storage.listdir("stream") if n.startswith(".tmp-")] == []  # no temp files left


def test_a_job_spec_is_read_back_from_the_location_the_operator_passes(store):
    spec = JobSpec(pipeline="p", source=ConnectionSettings("h"), tables={"db.t": None, "db.u": ["a", "b"]},
                   sink=SinkConfig("parquet", path="/x"), state_path=store.uri, server_id=7,
                   chunks=[Chunk(TableId("db", "t"), 2, ("id",), (5,), None, epoch=9)],
                   stream=StreamConfig(mode="continuous", startup={"gtid": "0-1-5"}), launch_id="abc")
    where = store.write_spec("x.json", spec.to_json())
    assert where.startswith(store.uri.rstrip("/")) and where.endswith("/specs/x.json")
    assert JobSpec.load(where) == spec
    assert json.loads(read_text(where))["pipeline"] == "p"


def test_spark_gets_the_uri_with_its_scheme_and_local_files_stay_on_this_machine(store, tmp_path):
    assert store.checkpoint_location == f"{store.uri}/stream/checkpoint"
    d = store.local_dir("dist")
    assert d.is_dir()
    archive = d / "pkg.jar"
    archive.write_bytes(b"zip")
    where = store.upload(archive, "dist/pkg.jar")
    assert where == f"{store.uri}/dist/pkg.jar" and store.storage.open("dist/pkg.jar").read() == b"zip"


def test_a_scheme_without_its_filesystem_package_is_refused_with_the_key_and_the_fix():
    with pytest.raises(StorageError) as exc:
        StateStore("gs://bucket/cdc/state")  # gcsfs is not installed here (s3fs is: see test_s3_storage)
    msg = str(exc.value)
    assert "state.path 'gs://bucket/cdc/state'" in msg and "install gcsfs" in msg
    with pytest.raises(StorageError, match=r"state.path 'nosuch://x'.*nosuch"):
        StateStore("nosuch://x")


def test_an_unwritable_state_path_names_the_key(tmp_path):
    ro = tmp_path / "ro"
    ro.mkdir()
    os.chmod(ro, 0o500)
    try:
        if os.access(ro, os.W_OK):  # root ignores modes: use a path under a regular file instead
            ro = tmp_path / "file"
            ro.write_text("x")
        with pytest.raises(StorageError, match=r"state path .* is not writable.*set state.path"):
            StateStore(str(ro / "state")).ensure_writable()
    finally:
        os.chmod(tmp_path / "ro", 0o700)


def report(index: int, pos: int, table: str = "db.t", start=(0,), end=(1,)) -> ChunkReport:
    chunk = Chunk(TableId.parse(table), index, ("id",), start, end)
    return ChunkReport(chunk, BinlogOffset("mysql-bin.000002", 4), BinlogOffset("mysql-bin.000002", pos), 5, 0, 0.1)


def test_window_reports_regrouped_by_a_retry_keep_one_report_per_chunk(store):
    store.write_window_reports("db.t", 1, [report(i, 100) for i in range(0, 4)])  # an attempt grouped 0-3
    store.write_window_reports("db.t", 1, [report(i, 100) for i in range(4, 8)])
    assert sorted(store.chunk_reports("db.t", 1)) == list(range(8))
    assert store.chunk_reports("db.t", 2) == {}  # another epoch
    # a retry regroups 2-5: it takes them out of both files first (each file keeps its other chunks)
    store.clear_chunk_reports("db.t", 1, [2, 3, 4, 5])
    assert sorted(store.chunk_reports("db.t", 1)) == [0, 1, 6, 7]
    store.write_window_reports("db.t", 1, [report(i, 200) for i in range(2, 6)])
    got = store.chunk_reports("db.t", 1)
    assert sorted(got) == list(range(8)) and [got[i].high_watermark.pos for i in range(8)] == [100] * 2 + [200] * 4 + [100] * 2
    # a chunk in two files (two regrouped attempts racing): the later high watermark is the report
    store.write_window_reports("db.t", 1, [report(i, 300) for i in range(5, 7)])
    assert [store.chunk_reports("db.t", 1)[i].high_watermark.pos for i in (4, 5, 6, 7)] == [200, 300, 300, 100]
    store.clear_chunk_reports("db.t", 1, list(range(8)))
    assert store.chunk_reports("db.t", 1) == {}
    assert store.storage.listdir(store.epoch_rel("db.t", 1)) == []  # emptied files are gone


def test_a_started_window_tells_a_retry_which_chunks_an_earlier_attempt_began(store):
    assert store.mark_window_started("db.t", 0, [0, 1, 2]) == set()
    assert store.mark_window_started("db.t", 0, [3, 4]) == set()
    assert store.mark_window_started("db.t", 0, [0, 1, 2]) == {0, 1, 2}  # the same window, retried
    assert store.mark_window_started("db.t", 0, [2, 3, 4, 5]) == {2, 3, 4}  # regrouped: 5 is new
    assert store.mark_window_started("db.t", 1, [0]) == set()  # a re-snapshot starts afresh


def test_where_a_restarted_stream_reads_from_and_where_its_first_batch_ends_come_from_sparks_checkpoint(store):
    def offsets(batch, file, pos):  # Spark's offsets/<batch>: a version line, the batch's metadata, the source's offset
        store.storage.write_text(f"{store.CHECKPOINT}/offsets/{batch}",
                                 "v1\n{\"batchWatermarkMs\":0}\n" + json.dumps({"file": file, "pos": pos, "gtid": None,
                                                                                "ts_ms": 0, "behind": False}))

    assert store.checkpoint_offset() is None and store.planned_batch_end() is None
    offsets(0, "b.000001", 400)
    # planned, not committed: a restart re-runs it from the start, to the end it recorded
    assert store.checkpoint_offset() is None and store.planned_batch_end() == BinlogOffset("b.000001", 400)
    store.storage.write_text(f"{store.CHECKPOINT}/commits/0", "v1\n{}")
    assert store.checkpoint_offset() == BinlogOffset("b.000001", 400) and store.planned_batch_end() is None
    offsets(1, "b.000002", 4)
    assert store.checkpoint_offset() == BinlogOffset("b.000001", 400)
    assert store.planned_batch_end() == BinlogOffset("b.000002", 4)
