"""The stream's emit filter: a change is emitted only if it is newer than its chunk's high watermark."""

import pytest

from airflow_cdc_provider.core.chunks import TableId
from airflow_cdc_provider.core.emit_filter import ChunkOrderError, build_emit_filter, table_split_info
from airflow_cdc_provider.core.offsets import BinlogOffset, EventPosition
from airflow_cdc_provider.core.reports import ChunkRange, compact_ranges

F = "mariadb-bin.000001"
T = TableId("db", "t")


def report(index, start, end, hw_pos, table="db.t", hw_file=F):
    """The range one chunk report gives the filter."""
    return ChunkRange(TableId.parse(table), index, None if start is None else (start,),
                      None if end is None else (end,), BinlogOffset(hw_file, hw_pos))


REPORTS = [report(0, None, 100, 1000), report(1, 100, 200, 3000), report(2, 200, None, 2000)]


def at(pos, file=F):
    return EventPosition(file, pos, 0)


def test_event_before_its_chunks_high_watermark_is_dropped():
    f = build_emit_filter(REPORTS)
    assert not f.should_emit(T, (150,), at(2500))  # chunk 1 HW is 3000: already in the snapshot
    assert f.should_emit(T, (50,), at(2500))  # chunk 0 HW is 1000: a later change
    assert not f.should_emit(T, (250,), at(1999))
    assert f.should_emit(T, (250,), at(2000))  # an event starting at HW was written after it


def test_chunk_boundaries_are_half_open():
    f = build_emit_filter(REPORTS)
    assert f.should_emit(T, (99,), at(1500))  # chunk 0
    assert not f.should_emit(T, (100,), at(1500))  # chunk 1 starts at 100


def test_everything_after_the_tables_max_high_watermark_is_emitted():
    f = build_emit_filter(REPORTS)
    assert f.should_emit(T, (150,), at(3000))
    assert f.should_emit(T, (150,), EventPosition("mariadb-bin.000002", 4, 0))


def test_tables_without_snapshot_follow_the_setting():
    assert build_emit_filter(REPORTS).should_emit(TableId("db", "other"), (1,), at(5))
    assert not build_emit_filter(REPORTS, emit_tables_without_snapshot=False).should_emit(TableId("db", "other"), (1,), at(5))


def test_a_missing_chunk_report_is_an_error_not_a_shifted_minimum():
    with pytest.raises(ValueError, match="not contiguous"):
        build_emit_filter([REPORTS[0], REPORTS[2]])
    with pytest.raises(ValueError, match="last chunk"):
        build_emit_filter(REPORTS[:2])


def test_chunks_are_checked_in_their_order_not_in_pythons_order_of_their_string_bounds():
    """Under utf8mb4_general_ci ``"ap's" < "a\\b"`` (p weighs as P, 0x50, below the backslash's 0x5C), in Python
    it is the other way round: the chunks must still be found contiguous when the snapshot is collected, which
    compares no keys in the collation's order."""
    reports = [report(0, None, "ap's", 10), report(1, "ap's", "a\\b", 20), report(2, "a\\b", None, 30)]
    assert len(table_split_info(reports).starts) == 2
    with pytest.raises(ValueError, match="not contiguous"):
        table_split_info([reports[0], reports[2]])
    with pytest.raises(ValueError, match="exactly one first chunk"):
        table_split_info(reports[1:])


def test_the_stream_refuses_chunk_bounds_that_do_not_ascend_in_the_key_order_it_is_given():
    """Bounds planned under utf8mb4_general_ci (``"ap's" < "a\\b"``) looked up in another order (Python's here; a
    key column's new collation in a stream) would give changes the wrong chunk: refused, naming the table."""
    reports = [report(0, None, "ap's", 10), report(1, "ap's", "a\\b", 20), report(2, "a\\b", None, 30)]
    general_ci = lambda key: tuple(v.upper() for v in key)  # noqa: E731 - weighs p as P (0x50), below 0x5C
    f = build_emit_filter(reports, {"db.t": general_ci})
    assert [f.should_emit(T, (k,), at(15)) for k in ("ap", "apz", "a\\c")] == [True, False, False]
    with pytest.raises(ChunkOrderError, match=r"^db\.t: its snapshot's chunk bounds do not ascend .* --table db\.t"):
        build_emit_filter(reports)


def test_key_order_is_used_for_lookup():
    reports = [report(0, None, "m", 10), report(1, "m", None, 20)]
    casefold = lambda key: tuple(v.lower() for v in key)  # noqa: E731 - a case-insensitive "collation"
    f = build_emit_filter(reports, {"db.t": casefold})
    # 'Z' sorts before 'm' in Python but after it case-insensitively: chunk 1 (HW 20)
    assert not f.should_emit(T, ("Z",), at(15))
    assert f.should_emit(T, ("a",), at(15))


def test_chunks_of_one_watermark_window_are_one_entry_with_the_same_decisions():
    # chunks 1..3 were read in one window (same HW): the compacted infos decide exactly as the full reports
    reports = [report(0, None, 100, 1000), report(1, 100, 200, 3000), report(2, 200, 300, 3000),
               report(3, 300, 400, 3000), report(4, 400, None, 2000)]
    compact = compact_ranges(reports)
    assert [(c.start, c.end, c.chunks) for c in compact] == [(None, (100,), 1), ((100,), (400,), 3), ((400,), None, 1)]
    full, small = build_emit_filter(reports), build_emit_filter(compact)
    assert len(small._tables[T].starts) == len(full._tables[T].starts) == 2  # the filter merges runs too
    for key in (-1, 99, 100, 250, 399, 400, 10_000):
        for pos in (999, 1001, 2500, 2999, 3001):
            assert full.should_emit(T, (key,), at(pos)) == small.should_emit(T, (key,), at(pos)), (key, pos)
