"""The splitter arithmetic, and the uneven path against an in-memory key list standing in for an index."""

import bisect
from decimal import Decimal

import pytest

from airflow_cdc_provider.core.chunks import (
    Chunk,
    ChunkTask,
    SplitOptions,
    TableId,
    chunk_locator,
    distribution_factor,
    group_into_tasks,
    split_even,
    split_table,
    split_uneven,
)
from airflow_cdc_provider.core.keys import decode_key, encode_key, format_key

T = TableId("db", "t")


def test_even_split_matches_flink_documentation_example():
    # Flink CDC docs: BIGINT id 0..100, chunk 25 -> (-inf,25) [25,50) [50,75) [75,100) [100,+inf)
    assert split_even(0, 100, 25) == [
        (None, (25,)), ((25,), (50,)), ((50,), (75,)), ((75,), (100,)), ((100,), None)
    ]


def test_even_split_of_101_to_110_by_4():
    assert split_even(101, 110, 4) == [(None, (105,)), ((105,), (109,)), ((109,), None)]


def test_even_split_handles_unsigned_bigint_extremes():
    top = 2**64 - 1
    ranges = split_even(2**63, top, 2**62)
    assert ranges == [(None, (2**63 + 2**62,)), ((2**63 + 2**62,), None)]


def test_distribution_factor_rounds_up_to_four_decimals():
    assert distribution_factor(1, 10, 10) == Decimal("1.0000")
    assert distribution_factor(1, 10, 3) == Decimal("3.3334")
    assert distribution_factor(1, 10, 0) is None


class SortedKeys:
    """An in-memory ordered key list with the KeyRangeQueries interface (keys compare with Python order)."""

    def __init__(self, keys, approx=None):
        self.keys = sorted(keys)
        self.approx = len(self.keys) if approx is None else approx
        self.queries = 0

    def has_more_rows_than(self, n):
        return len(self.keys) > n

    def min_max_single(self):
        return (self.keys[0][0], self.keys[-1][0]) if self.keys else (None, None)

    def approximate_row_count(self):
        return self.approx

    def min_key(self):
        return self.keys[0] if self.keys else None

    def nth_key_from(self, start, n):
        self.queries += 1
        i = bisect.bisect_left(self.keys, start) + n
        if i >= len(self.keys):
            return None, False
        return self.keys[i], self.keys[i] == start

    def next_key_after(self, key):
        i = bisect.bisect_right(self.keys, key)
        return self.keys[i] if i < len(self.keys) else None


def rows_per_chunk(keys, ranges):
    return [sum(1 for k in keys if (s is None or k >= s) and (e is None or k < e)) for s, e in ranges]


def test_uneven_split_gives_chunk_size_rows_per_chunk():
    keys = [(k,) for k in (1, 2, 5, 9, 100, 101, 4000, 4001, 4002, 9999)]
    ranges = split_uneven(SortedKeys(keys), 3)
    assert ranges == [(None, (9,)), ((9,), (4000,)), ((4000,), (9999,)), ((9999,), None)]
    assert rows_per_chunk(keys, ranges) == [3, 3, 3, 1]


def test_uneven_split_of_101_to_110_matches_the_even_path():
    keys = [(k,) for k in range(101, 111)]
    assert split_uneven(SortedKeys(keys), 4) == split_even(101, 110, 4)


def test_duplicate_chunk_key_values_never_make_an_empty_or_endless_chunk():
    keys = [(1,)] * 10 + [(2,)] * 3 + [(3,)]
    ranges = split_uneven(SortedKeys(keys), 4)
    assert ranges == [(None, (2,)), ((2,), None)]  # from 2 only 4 rows remain: one last chunk
    assert sum(rows_per_chunk(keys, ranges)) == len(keys)


def test_duplicates_at_the_end_make_the_last_chunk():
    keys = [(1,)] + [(2,)] * 10
    assert split_uneven(SortedKeys(keys), 3) == [(None, (2,)), ((2,), None)]


def test_composite_keys_split_on_the_whole_key():
    keys = [(a, b) for a in (1, 2) for b in ("x", "y", "z")]
    ranges = split_uneven(SortedKeys(keys), 2)
    assert ranges == [(None, (1, "z")), ((1, "z"), (2, "y")), ((2, "y"), None)]


def test_small_table_is_one_whole_table_chunk():
    chunks = split_table(T, ["id"], SortedKeys([(1,), (2,)]), SplitOptions(chunk_size=2), single_integer_key=True)
    assert [(c.start, c.end) for c in chunks] == [(None, None)]


def test_empty_table_is_one_chunk():
    chunks = split_table(T, ["id"], SortedKeys([]), SplitOptions(chunk_size=5), single_integer_key=True)
    assert [(c.start, c.end) for c in chunks] == [(None, None)]


def test_sparse_integer_keys_take_the_uneven_path():
    keys = [(k * 1_000_000,) for k in range(20)]
    src = SortedKeys(keys)
    chunks = split_table(T, ["id"], src, SplitOptions(chunk_size=5), single_integer_key=True)
    assert src.queries > 0
    assert rows_per_chunk(keys, [(c.start, c.end) for c in chunks]) == [5, 5, 5, 5]


def test_dense_integer_keys_take_the_even_path_without_queries():
    keys = [(k,) for k in range(1000)]
    src = SortedKeys(keys)
    chunks = split_table(T, ["id"], src, SplitOptions(chunk_size=100), single_integer_key=True)
    assert src.queries == 0 and len(chunks) == 10


def test_stale_zero_row_estimate_still_splits():
    keys = [(k,) for k in range(1000)]
    chunks = split_table(T, ["id"], SortedKeys(keys, approx=0), SplitOptions(chunk_size=100), single_integer_key=True)
    assert len(chunks) == 10


@pytest.mark.parametrize("bad", [dict(chunk_size=0), dict(chunk_size=-3), dict(even_lower_bound=2.0), dict(even_upper_bound=0.5)])
def test_split_options_reject_bad_values(bad):
    with pytest.raises(ValueError):
        SplitOptions(**bad)


def _chunks(n, table="db.t"):
    return [Chunk(TableId.parse(table), i, ("id",), None if i == 0 else (i,), None if i == n - 1 else (i + 1,)) for i in range(n)]


def test_one_task_per_chunk_below_the_cap():
    tasks = group_into_tasks(_chunks(5), 10)
    assert [len(t.chunks) for t in tasks] == [1, 1, 1, 1, 1]


def test_chunks_are_grouped_to_respect_max_map_length():
    chunks = _chunks(10) + _chunks(3, "db.u")
    tasks = group_into_tasks(chunks, 4)
    assert len(tasks) <= 4
    assert [c for t in tasks for c in t.chunks] == chunks  # order and coverage kept
    assert all(len({c.table for c in t.chunks}) == 1 for t in tasks)


def test_chunks_per_task_groups_consecutive_chunks_of_one_table():
    chunks = _chunks(10) + _chunks(3, "db.u")
    tasks = group_into_tasks(chunks, 1024, chunks_per_task=4)
    assert [len(t.chunks) for t in tasks] == [4, 3, 3, 3]  # db.t: 10 chunks in 3 even tasks; db.u: one task
    assert [c for t in tasks for c in t.chunks] == chunks
    assert len(group_into_tasks(chunks, 2, chunks_per_task=4)) == 2  # max_map_length still wins


def test_chunk_locator_finds_the_chunk_of_a_key_inside_consecutive_chunks():
    chunks = _chunks(4)  # (-inf, 1), [1, 2), [2, 3), [3, +inf)
    locate = chunk_locator(chunks)
    assert [locate((k,)).index for k in (-5, 0, 1, 2, 3, 99)] == [0, 0, 1, 2, 3, 3]
    middle = chunk_locator(chunks[1:3])
    assert middle((0,)) is None and middle((3,)) is None and middle((2,)).index == 2
    with pytest.raises(ValueError, match="not consecutive"):
        chunk_locator([chunks[0], chunks[2]])


def test_small_tables_share_a_task_while_their_chunks_fit():
    """Whole tables of up to ``chunks_per_task`` chunks are packed in order into shared tasks (one Spark
    application for several small tables); a bigger table keeps tasks of its own."""
    chunks = (_chunks(2, "db.a") + _chunks(1, "db.b") + _chunks(10, "db.big") + _chunks(3, "db.c")
              + _chunks(2, "db.d"))
    tasks = group_into_tasks(chunks, 1024, chunks_per_task=4)
    assert [[str(t) for t in task.tables] for task in tasks] == [
        ["db.a", "db.b"], ["db.big"], ["db.big"], ["db.big"], ["db.c"], ["db.d"]]
    assert sorted(c.split_id for t in tasks for c in t.chunks) == sorted(c.split_id for c in chunks)
    assert tasks[0].label == "db.a and 1 more table (3 chunks)"
    assert group_into_tasks(_chunks(1, "db.x") + _chunks(1, "db.y") + _chunks(1, "db.z"), 9, 3)[0].label == \
        "db.x and 2 more tables (3 chunks)"
    # one task per chunk (rows_per_task = chunk_size): no sharing
    assert len(group_into_tasks(chunks, 1024, chunks_per_task=1)) == len(chunks)


def test_many_small_tables_fit_max_map_length_by_sharing_tasks():
    chunks = [c for i in range(30) for c in _chunks(1 + i % 3, f"db.t{i}")] + _chunks(20, "db.big")
    tasks = group_into_tasks(chunks, 5, chunks_per_task=1)
    assert len(tasks) <= 5
    assert sorted(c.split_id for t in tasks for c in t.chunks) == sorted(c.split_id for c in chunks)
    for t in tasks:  # a task holds whole tables, or consecutive chunks of one table
        for table in t.tables:
            mine = [c.index for c in t.chunks if c.table == table]
            whole = [c.index for c in chunks if c.table == table]
            assert mine == whole or (len(t.tables) == 1 and mine == list(range(mine[0], mine[-1] + 1)))
    assert any(len(t.tables) > 1 for t in tasks) and any(str(t.tables[0]) == "db.big" for t in tasks)


def test_max_map_length_below_the_table_count_puts_tables_together():
    tasks = group_into_tasks(_chunks(3, "db.a") + _chunks(3, "db.b") + _chunks(1, "db.c"), 1, chunks_per_task=2)
    assert len(tasks) == 1 and [str(t) for t in tasks[0].tables] == ["db.a", "db.b", "db.c"]
    assert len(group_into_tasks(_chunks(1, "db.a") + _chunks(1, "db.b"), 1)) == 1


def test_labels_and_round_trip():
    c = Chunk(TableId("shop", "orders"), 1, ("id",), (1000,), (2000,))
    assert c.label == "shop.orders [1000, 2000)"
    assert Chunk.from_dict(c.to_dict()) == c
    task = ChunkTask([c, Chunk(c.table, 2, ("id",), (2000,), None)])
    assert task.label == "shop.orders [1000, +inf) (2 chunks)"
    assert ChunkTask.from_dict(task.to_dict()).chunks == task.chunks


def test_key_codec_round_trips_every_key_type():
    import datetime as dt

    key = (2**64 - 1, "käse ☕", Decimal("1.50"), dt.date(2024, 2, 29), dt.datetime(2024, 1, 1, 12, 0, 0, 5),
           dt.timedelta(hours=-1, microseconds=3), b"\x00\xff", 1.5)
    assert decode_key(encode_key(key)) == key
    assert format_key(("a", 1)) == "(a, 1)"
