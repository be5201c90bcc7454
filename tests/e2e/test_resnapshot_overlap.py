"""A re-snapshot that a running stream overlaps: the stream of the old epoch writes changes of the table after
the new epoch's first window began, and the query that takes the new epoch up starts before a later window's
high watermark. A key the stream wrote, then deleted before that window read it, must not survive in the sink
(the new epoch's emit filter drops the delete: its window's high watermark covers it)."""

from __future__ import annotations

import pytest

from .cdc_helpers import Pipeline, delta_sink, jdbc_sink, parquet_sink, sink_rows, source_rows, table_types


def make_items(db, n: int) -> None:
    db.execute("CREATE TABLE items (id INT PRIMARY KEY, v INT NOT NULL)")
    db.execute(f"INSERT INTO items SELECT seq, seq FROM seq_1_to_{n}")


def windows(chunks):
    """The plan's first chunk and the rest: two snapshot jobs, two watermark windows."""
    return [chunks[:1], chunks[1:]]


@pytest.mark.parametrize("sink_type", ["parquet", "delta", "jdbc"])
def test_a_delete_the_new_epoch_covers_reaches_the_sink_the_old_stream_wrote(source_db, tmp_path, spark, postgres,
                                                                              sink_type):
    make_items(source_db, 200)
    sink = {"parquet": parquet_sink(tmp_path), "delta": delta_sink(tmp_path),
            "jdbc": jdbc_sink(postgres, f"o_{source_db.name}")}[sink_type]
    p = Pipeline(source_db, tmp_path, sink, ["items"], postgres=postgres, chunk_size=100)
    p.snapshot(p.plan())
    p.collect()

    first, rest = windows(p.plan())  # the re-snapshot: a new epoch, read in two windows
    p.snapshot(first)
    source_db.execute("UPDATE items SET v = -1 WHERE id = 150")  # after the first window, in the second's range
    source_db.execute("INSERT INTO items VALUES (1000, 1000)")
    p.stream()  # the old epoch's stream writes both (it runs beside the re-snapshot)
    source_db.execute("DELETE FROM items WHERE id IN (150, 1000)")
    p.snapshot(rest)  # reads neither row: its window starts after the deletes
    p.collect()
    p.stream()  # takes the new epoch up from where the old one stopped, before the second window's HW

    got = sink_rows(spark, p.sink, p.secrets, table_types(source_db, "items"))
    want = source_rows(source_db, "items")
    assert (150,) not in got and (1000,) not in got, "a row the source deleted survives in the sink"
    assert got == want
    assert {t: r.epoch for t, r in p.state.read_overlapped_epochs().items()} == {source_db.table("items"): rest[0].epoch}
