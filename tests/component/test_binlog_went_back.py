"""The retention sensor against the real MariaDB: a stream that would resume past the server's binlog (reset by
RESET MASTER, restored, or another server behind the same connection) is refused before it runs, since neither
it nor a re-snapshot can converge on positions that are no longer comparable."""

from __future__ import annotations

import pytest

from airflow_cdc_provider.core.offsets import BinlogOffset, split_binlog_file
from airflow_cdc_provider.sensors.retention import BinlogRetentionSensor, went_back
from airflow_cdc_provider.source.server import current_offset
from airflow_cdc_provider.state.records import StreamSeed
from airflow_cdc_provider.state.store import StateStore


def sensor_for(tmp_path, mariadb, source_db, monkeypatch, resume: BinlogOffset) -> BinlogRetentionSensor:
    """A pipeline whose stream would start at ``resume`` (its seed, as the plan step of a stream without snapshot
    records it)."""
    state = StateStore(tmp_path / "state")
    state.write_seed(StreamSeed(resume, {}))
    config = tmp_path / "shop.yaml"
    config.write_text(f"dag_id: shop\nsource:\n  conn_id: src\n  tables: [{source_db.table('t')}]\n"
                      f"sink:\n  path: {tmp_path / 'sink'}\nstate:\n  path: {state.uri}\n")
    monkeypatch.setenv("AIRFLOW_CONN_SRC", mariadb.connection_uri())
    return BinlogRetentionSensor(task_id="binlog_retention", config=str(config))


def test_a_binlog_behind_the_resume_position_is_refused_with_how_to_start_over(tmp_path, mariadb, source_db,
                                                                                monkeypatch):
    from airflow.sdk.exceptions import AirflowFailException

    source_db.execute("CREATE TABLE t (id INT PRIMARY KEY)")
    with source_db.connection() as conn:
        now = current_offset(conn)
    assert sensor_for(tmp_path / "a", mariadb, source_db, monkeypatch, now).poke({}) is True
    base, seq = split_binlog_file(now.file)
    for resume in (BinlogOffset(now.file, now.pos + 10_000_000), BinlogOffset(f"{base}.{seq + 40:06d}", 4)):
        with pytest.raises(AirflowFailException) as exc:
            sensor_for(tmp_path / str(resume.pos), mariadb, source_db, monkeypatch, resume).poke({})
        message = str(exc.value)
        assert f"resume at {resume}" in message and "RESET MASTER" in message and "Start the pipeline over" in message


def test_went_back():
    at = BinlogOffset("mysql-bin.000042", 500)
    assert went_back(at, BinlogOffset("mysql-bin.000001", 4))
    assert went_back(at, BinlogOffset("mysql-bin.000042", 499))
    assert went_back(at, BinlogOffset("other-bin.000099", 4))
    assert not went_back(at, BinlogOffset("mysql-bin.000042", 500))
    assert not went_back(at, BinlogOffset("mysql-bin.000043", 4))
