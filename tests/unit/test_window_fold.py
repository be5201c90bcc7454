"""Folding a binlog window onto a chunk's rows: the newest change of each key inside the chunk wins."""

from airflow_cdc_provider.core.chunks import Chunk, TableId, chunk_locator
from airflow_cdc_provider.core.records import OP_CREATE, OP_DELETE, OP_UPDATE, records_from_row_event
from airflow_cdc_provider.core.window import fold_rows, window_changes

T = TableId("db", "t")
F = "mariadb-bin.000001"


CHUNK = Chunk(T, 0, ("id",), None, (10,))


def normalize(rows, window):
    last, applied = window_changes(window, chunk_locator([CHUNK]))
    return fold_rows(rows, last), applied[CHUNK.index]


def ev(kind, rows, pos):
    return list(records_from_row_event(kind, T, ["id"], rows, F, pos, 0))


def test_window_changes_are_applied_in_order_inside_the_chunk_only():
    rows = {(1,): {"id": 1, "v": "a"}, (2,): {"id": 2, "v": "b"}}
    window = (
        ev("update", [{"before_values": {"id": 1, "v": "a"}, "after_values": {"id": 1, "v": "a2"}}], 10)
        + ev("delete", [{"values": {"id": 2, "v": "b"}}], 20)
        + ev("insert", [{"values": {"id": 3, "v": "c"}}, {"values": {"id": 99, "v": "other chunk"}}], 30)
        + ev("insert", [{"values": {"id": 2, "v": "b again"}}], 40)
    )
    result, applied = normalize(rows, window)
    assert result == {(1,): {"id": 1, "v": "a2"}, (2,): {"id": 2, "v": "b again"}, (3,): {"id": 3, "v": "c"}}
    assert applied == 4


def test_key_changing_update_becomes_delete_and_insert():
    recs = ev("update", [{"before_values": {"id": 1, "v": "x"}, "after_values": {"id": 50, "v": "x"}}], 10)
    assert [(r.op, r.key) for r in recs] == [(OP_DELETE, (1,)), (OP_CREATE, (50,))]
    same = ev("update", [{"before_values": {"id": 1, "v": "x"}, "after_values": {"id": 1, "v": "y"}}], 10)
    assert [(r.op, r.key, r.position.row) for r in same] == [(OP_UPDATE, (1,), 0)]


def test_moving_a_key_out_of_the_chunk_removes_it():
    rows = {(1,): {"id": 1, "v": "x"}}
    window = ev("update", [{"before_values": {"id": 1, "v": "x"}, "after_values": {"id": 50, "v": "x"}}], 10)
    result, _ = normalize(rows, window)
    assert result == {}
