"""The seed a streaming query takes up: a re-snapshot's epoch behind an older epoch's stream writes."""

from __future__ import annotations

from airflow_cdc_provider.core.chunks import Chunk, TableId
from airflow_cdc_provider.core.offsets import BinlogOffset
from airflow_cdc_provider.core.reports import ChunkReport
from airflow_cdc_provider.pipeline.query_seed import query_seed
from airflow_cdc_provider.state.records import FinishedSnapshot, StreamSeed, OverlappedEpoch

T = "db.t"


def at(pos: int) -> BinlogOffset:
    return BinlogOffset("mysql-bin.000002", pos)


def snapshot(epoch: int) -> FinishedSnapshot:
    """Two windows: [.., 100) read between 100 and 200, [100, ..) between 500 and 600."""
    table = TableId.parse(T)
    return FinishedSnapshot(T, epoch, (
        ChunkReport(Chunk(table, 0, ("id",), None, (100,), epoch), at(100), at(200), 10, 0, 0.1),
        ChunkReport(Chunk(table, 1, ("id",), (100,), None, epoch), at(500), at(600), 10, 0, 0.1)))


def seed_of(snap: FinishedSnapshot) -> StreamSeed:
    return StreamSeed.of({T: snap})


def high_watermarks(seed: StreamSeed) -> list[int]:
    return [c.high_watermark.pos for c in seed.tables[T].chunks] + [seed.tables[T].max_high_watermark.pos]


def test_an_older_epochs_stream_that_wrote_past_the_first_window_has_the_new_epoch_emit_all_after_it():
    snap = snapshot(2)
    seed, overlapped = query_seed(seed_of(snap), {T: snap}, {}, {T: 1}, at(300))
    assert overlapped == {T: OverlappedEpoch(2, at(300))}
    assert high_watermarks(seed) == [200, 300, 300]  # the first window's HW is before 300 already
    assert seed.start == seed_of(snap).start

    # the next query of the epoch (the status says epoch 2 now, the stream is further) keeps the record
    again, kept = query_seed(seed_of(snap), {T: snap}, overlapped, {T: 2}, at(450))
    assert kept == overlapped and high_watermarks(again) == [200, 300, 300]


def test_the_epochs_own_filter_when_no_older_stream_wrote_inside_it():
    snap = snapshot(2)
    exact = high_watermarks(seed_of(snap))
    for previous, resume in [({T: 1}, at(700)),  # it went past every window: it wrote the deletes itself
                             ({}, at(300)),  # no stream wrote the table (a table new to the stream)
                             ({T: 2}, at(300)),  # the previous query ran with this epoch, unclamped
                             ({T: 1}, None)]:  # no batch was ever committed
        seed, overlapped = query_seed(seed_of(snap), {T: snap}, {}, previous, resume)
        assert overlapped == {} and high_watermarks(seed) == exact, (previous, resume)


def test_an_older_epochs_stream_behind_the_first_window_has_the_new_epoch_emit_all_after_it():
    """It may write after the epoch's sweep (lagging behind the re-snapshot): a key it inserts then is in no
    window, and its delete, before the windows' HWs, must still be emitted."""
    snap = snapshot(2)
    seed, overlapped = query_seed(seed_of(snap), {T: snap}, {}, {T: 1}, at(90))
    assert overlapped == {T: OverlappedEpoch(2, at(90))} and high_watermarks(seed) == [90, 90, 90]


def test_a_record_of_an_older_epoch_is_dropped_when_the_table_is_snapshotted_again():
    snap = snapshot(3)
    seed, overlapped = query_seed(seed_of(snap), {T: snap}, {T: OverlappedEpoch(2, at(300))}, {T: 3}, at(300))
    assert overlapped == {} and high_watermarks(seed) == [200, 600, 600]


def test_no_seed_no_record():
    assert query_seed(None, {}, {T: OverlappedEpoch(2, at(300))}, {T: 1}, at(300)) == (None, {})
