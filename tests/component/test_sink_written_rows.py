"""A file that appears in the directory a file sink's Spark write goes to, beside those its committed tasks wrote
(a leftover of a task attempt that did not commit, as ``mapreduce.fileoutputcommitter.algorithm.version=2`` can
leave), is refused before anything is published: the parquet sink's snapshot windows and stream batches, and
the delta sink's staged rows. The write fails naming the directory and both counts, the directory is removed,
and writing the same rows again publishes each row once. A real Spark session; the leftover, a copy of a file
another task of the write committed, is put there by a task of the very write."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from airflow_cdc_provider.core.chunks import TableId
from airflow_cdc_provider.sinks.base import CHUNK_COLUMN, SinkConfig, SinkError
from airflow_cdc_provider.sinks.delta import DeltaSink
from airflow_cdc_provider.sinks.parquet import ParquetSink
from airflow_cdc_provider.sinks.parquet_arrow import read_current_state
from airflow_cdc_provider.sinks.types import TableSinkTypes
from airflow_cdc_provider.source.schema import Column, TableSchema
from airflow_cdc_provider.spark.frames import meta_ddl

T = "db.t"
LOW_WATERMARK = (1, 50, 0)
EPOCH_VERSION = (1, 100, -1)
LEFTOVER = "part-99999-of-an-attempt-that-did-not-commit.parquet"
TYPES = TableSinkTypes.of(TableSchema(
    TableId.parse(T), (Column("id", "int", "int", False, None, None, None, None, None, None),
                       Column("name", "varchar", "varchar(20)", True, None, None, None, None, None, None)),
    ("id",), ("id",)))


@pytest.fixture(scope="module")
def spark(local_spark):
    return local_spark


def leaving_a_file(root: Path, marker: Path):
    """Spark: the identity of an int column that, evaluated in the write's second task, waits for its first
    task to commit its file (Hadoop's committer keeps it under ``_temporary/0/task_*`` until the job commits)
    and copies that file into the directory being written, once: what a task attempt that did not commit
    leaves there. The wait makes it the same whether the session runs the two tasks one after the other or
    side by side (a session another test module created first, with more cores, is the one a module gets)."""
    from pyspark.sql import functions as F

    def leave(value):
        import shutil
        import time

        from pyspark import TaskContext

        if marker.exists() or TaskContext.get().partitionId() == 0:
            return value
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            for committed in root.rglob("_temporary/0/task_*/*.parquet"):
                shutil.copy(committed, committed.parents[3] / LEFTOVER)
                marker.touch()
                return value
            time.sleep(0.05)
        return value

    return F.udf(leave, "int")


def refused(write, root: Path, marker: Path, rows: int, what: str) -> Path:
    """``write(tamper)`` fails naming the directory (returned, gone), the ``rows`` written and more held;
    ``tamper`` makes a frame's write (in two tasks) leave a copy of its first task's file."""
    from pyspark.sql import functions as F

    with pytest.raises(SinkError) as failed:
        write(lambda df: df.repartition(2).withColumn("id", leaving_a_file(root, marker)(F.col("id"))))
    said = re.search(rf"{re.escape(what)}: (\S+): Spark wrote {rows:,} rows, but the Parquet files there hold "
                     rf"([\d,]+)", str(failed.value))
    assert said, str(failed.value)
    assert rows < int(said.group(2).replace(",", "")) < 2 * rows
    directory = Path(said.group(1).removeprefix("file:"))
    assert marker.exists() and directory.is_relative_to(root)
    assert not directory.exists(), "the refused write's directory was left behind"
    return directory


def names(n: int, start: int = 0) -> list[tuple]:
    return [(i, f"n{i}") for i in range(start, start + n)]


def test_parquet_windows_and_batches_refuse_files_their_write_did_not_commit(spark, tmp_path):
    from pyspark.sql.types import StructType

    root = tmp_path / "sink"
    sink = ParquetSink(SinkConfig(type="parquet", path=str(root)), {}, spark)
    sink.prepare(TYPES)
    window = spark.createDataFrame([(*r, 0) for r in names(100)],
                                   StructType.fromDDL(f"{TYPES.spark_ddl}, {CHUNK_COLUMN} int"))

    def open_window(tamper):
        return sink.open_window(tamper(window), TYPES, 1, [0], LOW_WATERMARK, set())

    refused(open_window, root, tmp_path / "window-tampered", 100, "db.t: a snapshot window's rows")
    open_window(lambda df: df).publish_rows(None, EPOCH_VERSION, lambda: None)  # the retry
    sink.finish_snapshot(T, 1, LOW_WATERMARK)
    assert sorted((r["id"], r["name"]) for r in read_current_state(str(root), T, ["id"]).to_pylist()) == names(100)

    changes = [(i, f"c{i}", "c", 2000 + i, 1, 200 + i, 0) for i in range(100, 130)]
    batch = spark.createDataFrame(changes, StructType.fromDDL(f"{TYPES.spark_ddl}, {meta_ddl()}"))

    def write_batch(tamper):
        sink.write_changes(tamper(batch), TYPES, 0, lambda: None, lambda: len(changes))

    refused(write_batch, root, tmp_path / "batch-tampered", 30, "db.t: stream batch 0")
    write_batch(lambda df: df)  # the retry
    assert sorted((r["id"], r["name"]) for r in read_current_state(str(root), T, ["id"]).to_pylist()) \
        == names(100) + [(i, f"c{i}") for i in range(100, 130)]
    assert not list(root.rglob(LEFTOVER))


def test_delta_staged_rows_refuse_files_their_write_did_not_commit(spark, tmp_path):
    import pyarrow.dataset as ds

    root = tmp_path / "delta"
    sink = DeltaSink(SinkConfig(type="delta", path=str(root)), {}, spark)
    rows = spark.createDataFrame(names(50), "id int, name string")
    refused(lambda tamper: sink.stage(tamper(rows), T), root, tmp_path / "staged-tampered", 50,
            "db.t: staged rows")
    staging = sink.stage(rows, T)  # the retry
    staged = ds.dataset(sink.layout.storage.path(staging), format="parquet").to_table().to_pylist()
    assert sorted((r["id"], r["name"]) for r in staged) == names(50)
