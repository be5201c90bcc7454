"""A table without a primary key, captured by a unique NOT NULL column named in ``source.chunk_key``: snapshotted
and then streamed like any other, never held for a re-snapshot. The server names the table's first unique key of
NOT NULL columns as its primary key in every table map, which the definition the stream decodes with does not
record; that is not a changed definition."""

from __future__ import annotations

import pytest

from airflow_cdc_provider.pipeline.table_schemas import pending_resyncs

from .cdc_helpers import Pipeline, jdbc_sink, parquet_sink, sink_rows, source_rows, table_types

DRIVER = 4 * 2**20  # stream.driver_batch_bytes: every batch of this test is smaller


@pytest.mark.parametrize("sink_type", ["parquet", "jdbc"])
def test_a_table_keyed_by_its_chunk_key_streams_and_equals_the_source(source_db, tmp_path, spark, postgres, sink_type):
    db = source_db
    # two unique keys of NOT NULL columns: the server promotes the first (code), the chunk key is the second (id)
    db.execute("CREATE TABLE keyless (id INT NOT NULL, code CHAR(4) NOT NULL, v VARCHAR(20), "
               "UNIQUE KEY ucode (code), UNIQUE KEY uid (id))")
    db.executemany("INSERT INTO keyless VALUES (%s, %s, %s)", [(i, f"c{i:03d}", f"v{i}") for i in range(1, 201)])
    sink = parquet_sink(tmp_path) if sink_type == "parquet" else jdbc_sink(postgres, f"k_{db.name}")
    p = Pipeline(db, tmp_path, sink, ["keyless"], postgres=postgres, chunk_size=50, chunk_keys={"keyless": "id"})
    p.snapshot(p.plan())
    p.collect()

    db.execute("UPDATE keyless SET v = 'updated' WHERE id BETWEEN 10 AND 19")
    db.execute("DELETE FROM keyless WHERE id > 190")
    db.execute("INSERT INTO keyless VALUES (500, 'c500', 'new'), (501, 'c501', NULL)")
    db.execute("UPDATE keyless SET id = 1000 WHERE id = 5")  # the chunk key itself changes
    p.stream(max_bytes=4_000)  # several batches, each read by Spark's tasks
    db.execute("UPDATE keyless SET v = 'again', code = 'cXXX' WHERE id = 1000")
    db.execute("DELETE FROM keyless WHERE id = 1")
    p.stream(driver_batch_bytes=DRIVER)  # read by the driver

    log = p.last_log("binlog_stream", tail=None)
    assert "resync" not in log and "held until the table is re-snapshotted" not in log
    assert pending_resyncs(p.state) == {}
    want = source_rows(db, "keyless", "id")
    assert len(want) == 190 + 2 - 1 and (1000,) in want and (5,) not in want
    assert sink_rows(spark, p.sink, p.secrets, table_types(db, "keyless", "id")) == want
