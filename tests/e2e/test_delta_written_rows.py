"""Files Spark's output committer leaves beside the ones it committed (a failed task attempt's, as
``mapreduce.fileoutputcommitter.algorithm.version=2`` can leave) would be rows twice once appended to a Delta
table. The delta sink counts the rows Spark wrote (an observation of the written frame) and refuses files that
hold another number: the job fails naming the directory, nothing of the window is committed, and the retry
writes it again. Real MariaDB, real Spark jobs; the table read back with delta-rs and compared row by row.
"""

from __future__ import annotations

import re
import shutil
import threading
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from airflow_cdc_provider.sinks.base import SinkError, check_written
from airflow_cdc_provider.spark.frames import counted_write

from .cdc_helpers import Pipeline, delta_sink, wait_until
from .test_delta_sink import assert_delta_equals_source, logged_files, make_orders, table_uri


def test_a_window_whose_files_hold_rows_spark_did_not_write_is_not_committed_and_its_retry_is(source_db, tmp_path):
    """A file appears in the window's directory between Spark's write and the commit (a leftover of a task
    attempt that did not commit): the job fails, the table's log never names a file of that directory, and the
    chunk's retry, then the other chunks, leave the table equal to MariaDB with each key once."""
    n = 300
    make_orders(source_db, n)
    p = Pipeline(source_db, tmp_path, delta_sink(tmp_path), ["orders"], chunk_size=n // 3)
    chunks = p.plan()
    assert len(chunks) >= 3
    uri = table_uri(p, source_db, "orders")
    paused, release = tmp_path / "paused", tmp_path / "release"
    fault = {"point": "after_select", "action": "pause", "seconds": 300, "until": str(release), "once": str(paused)}
    result: dict = {}
    job = threading.Thread(target=lambda: result.update(res=p.snapshot(chunks[:1], fault=fault, check=False)),
                           daemon=True)
    job.start()
    try:
        wait_until(paused.exists, "the window to pause after its SELECT", 300)
        written = sorted(Path(uri).glob("snapshot-*/*.parquet"))
        assert written, "the window's data files were not written before its SELECT ended"
        window_dir = written[0].parent
        leftover = window_dir / "part-99999-of-an-attempt-that-did-not-commit.snappy.parquet"
        shutil.copy(written[0], leftover)
        extra = pq.ParquetFile(leftover).metadata.num_rows
        assert extra > 0
    finally:
        release.touch()
    job.join(300)
    assert not job.is_alive()
    assert result["res"].returncode != 0, "the window with a file Spark did not write was committed"
    log = p.last_log("snapshot_chunk", None)
    said = re.search(r"Spark wrote ([\d,]+) rows, but the Parquet files there hold ([\d,]+)", log)
    assert said, log[-3000:]
    spark_rows, held = (int(g.replace(",", "")) for g in said.groups())
    assert spark_rows > 0 and held == spark_rows + extra
    assert window_dir.name in log and "default committer" in log
    assert not [f for f in logged_files(uri) if f.startswith(window_dir.name)], "a file of the window was committed"
    assert not list(window_dir.glob("*.parquet")), "the refused window's files were left behind"

    p.snapshot(chunks[:1])  # the task's retry
    p.snapshot(chunks[1:])
    p.collect()
    assert len(assert_delta_equals_source(p, source_db, "orders")) == n


def test_the_rows_spark_wrote_are_counted_apart_from_what_its_files_hold(spark, tmp_path):
    """``counted_write`` counts the rows of the written frame, not the files: a file left beside them by the
    write shows as a difference, which ``check_written`` refuses, naming where."""
    out = tmp_path / "out"

    def write_and_leave_a_file(frame) -> None:
        frame.write.parquet(str(out))
        first = sorted(out.glob("part-*.parquet"))[0]
        shutil.copy(first, out / "part-99999-leftover.parquet")

    written = counted_write(spark.range(0, 1000, numPartitions=4), write_and_leave_a_file)
    held = sum(pq.ParquetFile(f).metadata.num_rows for f in out.glob("*.parquet"))
    assert written == 1000 and held > 1000
    with pytest.raises(SinkError, match=rf"{re.escape(str(out))}: Spark wrote 1,000 rows, but the Parquet files "
                                        rf"there hold {held:,}"):
        check_written(str(out), written, held)
    check_written(str(out), 1000, 1000)  # as many as written: nothing to refuse
    assert counted_write(spark.range(0, 0), lambda frame: frame.write.parquet(str(tmp_path / "empty"))) == 0
