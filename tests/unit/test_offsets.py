import json

import pytest

from airflow_cdc_provider.core.offsets import BinlogOffset, EventPosition, max_offset, min_offset, split_binlog_file


def test_order_within_a_file():
    assert BinlogOffset("mariadb-bin.000001", 100) < BinlogOffset("mariadb-bin.000001", 200)
    assert BinlogOffset("mariadb-bin.000001", 200) > BinlogOffset("mariadb-bin.000001", 100)


def test_order_across_rotation_uses_file_sequence_not_position():
    before_rotation = BinlogOffset("mariadb-bin.000001", 987_654)
    after_rotation = BinlogOffset("mariadb-bin.000002", 4)
    assert before_rotation < after_rotation
    assert max_offset([after_rotation, before_rotation]) == after_rotation
    assert min_offset([after_rotation, before_rotation]) == before_rotation


def test_sequence_compares_numerically_past_six_digits():
    assert BinlogOffset("bin.999999", 10) < BinlogOffset("bin.1000000", 4)


def test_equality_ignores_gtid_and_json_round_trip_keeps_it():
    a = BinlogOffset("mariadb-bin.000003", 1234, "0-1-42")
    assert a == BinlogOffset("mariadb-bin.000003", 1234)
    back = BinlogOffset.from_dict(json.loads(json.dumps(a.to_dict())))
    assert back == a and back.gtid == "0-1-42"
    assert a.to_dict() == {"file": "mariadb-bin.000003", "pos": 1234, "gtid": "0-1-42"}


def test_event_at_the_watermark_position_is_after_it():
    hw = BinlogOffset("mariadb-bin.000002", 500)
    assert EventPosition("mariadb-bin.000002", 500, 0).is_after(hw)
    assert not EventPosition("mariadb-bin.000002", 499, 7).is_after(hw)
    assert EventPosition("mariadb-bin.000003", 4, 0).is_after(hw)
    assert not EventPosition("mariadb-bin.000001", 9_999_999, 0).is_after(hw)


def test_rows_of_one_event_are_ordered_by_row_index():
    assert EventPosition("b.000001", 10, 0) < EventPosition("b.000001", 10, 1)


def test_different_binlog_base_names_refuse_to_compare():
    with pytest.raises(ValueError, match="different binlog base names"):
        assert BinlogOffset("a-bin.000001", 4) < BinlogOffset("b-bin.000001", 4)


@pytest.mark.parametrize("bad", ["", "nodot", "bin.", "bin.x1"])
def test_bad_file_names_are_rejected(bad):
    with pytest.raises(ValueError):
        split_binlog_file(bad)


def test_from_dict_names_missing_fields():
    with pytest.raises(ValueError, match="needs 'file' and 'pos'"):
        BinlogOffset.from_dict({"file": "b.000001"})
