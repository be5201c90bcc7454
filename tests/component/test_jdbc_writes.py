"""The jdbc sink's write path: Arrow batches COPYed as CSV into a staging table and merged by version, page by
page, in one transaction. Values CSV must quote or escape arrive as they were sent; NULL stays apart from ''."""

from __future__ import annotations

import datetime as dt
import re
from decimal import Decimal

import pyarrow as pa
import pytest

from airflow_cdc_provider.sinks.base import SinkConfig, SinkError
from airflow_cdc_provider.sinks.postgres import PostgresMirror

TABLE = "shop.t"
COLUMNS = [("id", "integer"), ("s", "text"), ("b", "bytea"), ("n", "numeric(30,10)"), ("ts", "timestamptz(6)"),
           ("f", "double precision")]
NAMES = [n for n, _ in COLUMNS]
AWKWARD = ['', 'a,b', 'say "hi"', 'two\nlines', 'cr\r\nlf', 'back\\slash', '\\.', '\\N', 'NULL', ' padded ',
           'émoji 🐬', '\t']


@pytest.fixture
def mirror(postgres, request) -> PostgresMirror:
    schema = "writes_" + re.sub(r"[^a-z0-9]+", "_", request.node.name.lower())[-40:]
    config = SinkConfig(type="jdbc", conn={"conn_id": "pg", "host": "127.0.0.1", "port": postgres.port,
                                           "login": postgres.user, "schema": postgres.database}, schema=schema)
    m = PostgresMirror(config, {"sink_password": postgres.password})
    m.ensure_table(TABLE, COLUMNS, ["id"])
    return m


def meta(pos: int, op: str = "c", chunk: str | None = None) -> tuple:
    return (op, 0, 1, pos, 0, op == "d", chunk)


def stored(mirror: PostgresMirror) -> dict[int, tuple]:
    with mirror.cursor() as cur:
        cur.execute(f"SELECT {', '.join(NAMES)}, _cdc_op, _cdc_pos, _cdc_deleted FROM {mirror.qualified(TABLE)}")
        return {r[0]: tuple(bytes(v) if isinstance(v, memoryview) else v for v in r) for r in cur.fetchall()}


def test_values_csv_must_quote_arrive_unchanged_and_null_is_not_empty(mirror):
    when = dt.datetime(2024, 2, 29, 23, 59, 59, 999999, tzinfo=dt.timezone.utc)
    rows = [(i, s, s.encode("utf-8") + b"\x00\n\"", Decimal("-12345678901234567890.0123456789"), when, 0.1, *meta(10))
            for i, s in enumerate(AWKWARD)]
    rows.append((len(AWKWARD), None, None, None, None, None, *meta(10)))
    assert mirror.upsert(TABLE, NAMES, ["id"], rows) == len(rows)
    got = stored(mirror)
    for i, s in enumerate(AWKWARD):
        assert got[i][:6] == (i, s, s.encode("utf-8") + b"\x00\n\"", Decimal("-12345678901234567890.0123456789"),
                              when, 0.1), (s, got[i])
    assert got[len(AWKWARD)][1:6] == (None,) * 5


def test_pages_of_batches_merge_by_version_in_one_transaction(mirror):
    def batch(keys, pos, text, op="u"):
        n = len(keys)
        cols = [pa.array(keys, pa.int32()), pa.array([text] * n), pa.array(["\\x00ff"] * n),
                pa.array([Decimal(1)] * n, pa.decimal128(30, 10)), pa.array([None] * n, pa.timestamp("us")),
                pa.array([1.5] * n), pa.array([op] * n), pa.array([0] * n, pa.int64()),
                pa.array([1] * n, pa.int64()), pa.array([pos] * n, pa.int64()), pa.array([0] * n, pa.int32()),
                pa.array([op == "d"] * n), pa.array([None] * n, pa.string())]
        return pa.RecordBatch.from_arrays(cols, names=[f"c{i}" for i in range(len(cols))])

    assert mirror.upsert_batches(TABLE, NAMES, ["id"], [batch(range(0, 7), 100, "first")]) == 7
    # pages of 3 rows over batches of 4 and 5: newer rows win, older ones (id 5, 6) leave the newer alone
    sent = mirror.upsert_batches(TABLE, NAMES, ["id"], [batch(range(0, 4), 200, "second"),
                                                       batch(range(4, 9), 50, "older"), batch([], 1, "none")],
                                 page_rows=3)
    assert sent == 9
    got = stored(mirror)
    assert {k: (r[1], r[2], r[7]) for k, r in got.items()} == {
        **{k: ("second", b"\x00\xff", 200) for k in range(0, 4)},
        **{k: ("first", b"\x00\xff", 100) for k in range(4, 7)},
        **{k: ("older", b"\x00\xff", 50) for k in range(7, 9)}}
    # a delete is a tombstone with its version; the older write replayed after it does not undo it
    mirror.upsert_batches(TABLE, NAMES, ["id"], [batch([1], 300, "gone", "d")])
    mirror.upsert_batches(TABLE, NAMES, ["id"], [batch([1], 200, "second")])
    assert stored(mirror)[1][6:] == ("d", 300, True)
    # a failing page leaves nothing of the call: the first page's rows are rolled back with it
    with pytest.raises(Exception, match="cannot affect row a second time"):
        mirror.upsert_batches(TABLE, NAMES, ["id"], [batch([20, 21], 400, "p1"), batch([22, 22], 400, "dup")],
                              page_rows=2)
    assert not {20, 21, 22} & stored(mirror).keys()


def test_insert_first_copies_new_keys_straight_in_and_merges_from_the_first_page_holding_a_known_key(mirror):
    def batch(keys, pos, text):
        n = len(keys)
        cols = [pa.array(keys, pa.int32()), pa.array([text] * n), pa.array([None] * n, pa.string()),
                pa.array([None] * n, pa.decimal128(30, 10)), pa.array([None] * n, pa.timestamp("us")),
                pa.array([None] * n, pa.float64()), pa.array(["r"] * n), pa.array([0] * n, pa.int64()),
                pa.array([1] * n, pa.int64()), pa.array([pos] * n, pa.int64()), pa.array([-1] * n, pa.int32()),
                pa.array([False] * n), pa.array(["1:0"] * n)]
        return pa.RecordBatch.from_arrays(cols, names=[f"c{i}" for i in range(len(cols))])

    mirror.upsert_batches(TABLE, NAMES, ["id"], [batch([5, 8], 900, "newer")])
    # pages of 3: [0 1 2] new keys, copied in; [3 4 5] holds 5 (newer in the mirror): merged, and so is the
    # rest, [6 7 8] (8 newer in the mirror, left alone) and [9]
    sent = mirror.upsert_batches(TABLE, NAMES, ["id"], [batch(range(0, 10), 100, "snapshot")], page_rows=3,
                                 insert_first=True)
    assert sent == 10
    got = {k: (r[1], r[7]) for k, r in stored(mirror).items()}
    assert got == {**{k: ("snapshot", 100) for k in range(0, 10)}, 5: ("newer", 900), 8: ("newer", 900)}
    # a page that fails for another reason than a known key fails the whole call, as without insert_first
    with pytest.raises(Exception, match="cannot affect row a second time"):
        mirror.upsert_batches(TABLE, NAMES, ["id"], [batch([20, 21], 400, "p1"), batch([22, 22], 400, "dup")],
                              page_rows=2, insert_first=True)
    assert not {20, 21, 22} & stored(mirror).keys()


def test_a_batch_of_other_columns_is_refused_before_anything_is_written(mirror):
    narrow = pa.RecordBatch.from_arrays([pa.array([1])], names=["c0"])
    with pytest.raises(SinkError, match="has 1 columns, not the 13"):
        mirror.upsert_batches(TABLE, NAMES, ["id"], [narrow])
    assert stored(mirror) == {}
