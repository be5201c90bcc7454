"""The retention sensor against the real MariaDB: a stream that would resume past the server's binlog (reset by
RESET MASTER, restored, or another server behind the same connection) is refused before it runs, since neither
it nor a re-snapshot can converge on positions that are no longer comparable."""

from __future__ import annotations

import pytest

from airflow_cdc_provider.core.offsets import BinlogOffset, split_binlog_file
from airflow_cdc_provider.sensors.retention import BinlogRetentionSensor, went_back
from airflow_cdc_provider.source.server import current_offset, gtid_history
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
    domain, server, number = now.gtid.split(",")[0].split("-")
    reset_and_grown = BinlogOffset(now.file, max(now.pos - 100, 4), f"{domain}-{server}-{int(number) + 1000}")
    for resume in (BinlogOffset(now.file, now.pos + 10_000_000), BinlogOffset(f"{base}.{seq + 40:06d}", 4),
                   reset_and_grown):
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


MYSQL_A, MYSQL_B = "3e11fa47-71ca-11e1-9e33-c80aa9429562", "4e11fa47-71ca-11e1-9e33-c80aa9429562"


@pytest.mark.parametrize("resume, now, behind", [
    ("0-1-100", "0-1-50", True),  # MariaDB: the domain's sequence went back (RESET MASTER, then new writes)
    ("0-1-100", "0-1-100", False),
    ("0-1-100", "0-2-150", False),  # another server of the domain (a failover) went on from it
    ("0-1-100,1-1-5", "0-1-200", False),  # a domain deleted (FLUSH BINARY LOGS DELETE_DOMAIN_ID)
    ("0-1-100,1-1-5", "0-1-200,1-3-4", True),
    (None, "0-1-1", False), ("0-1-100", "", False), ("not a gtid", "0-1-1", False),
    (f"{MYSQL_A}:1-100", f"{MYSQL_A}:1-200", False),  # MySQL: the executed set holds resume's
    (f"{MYSQL_A}:1-100", f"{MYSQL_A}:1-50", True),
    (f"{MYSQL_A}:1-100", f"{MYSQL_B}:1-500", True),  # another server's history
    (f"{MYSQL_A}:1-100:200-300", f"{MYSQL_A}:1-150:151-400,{MYSQL_B}:1-5", False),
    (f"{MYSQL_A}:1-100", f"{MYSQL_A}:1-40:42-200", True),  # transaction 41 is not there
    (f"{MYSQL_A}:tag1:1-5", f"{MYSQL_A}:1-5", True),  # tagged GTIDs (8.3+) are their own sequence
    (f"{MYSQL_A}:tag1:1-5", f"{MYSQL_A}:1-5:tag1:1-9", False),
])
def test_went_back_by_gtid_where_the_position_grew_past_resume_again(resume, now, behind):
    at = BinlogOffset("mysql-bin.000042", 500, resume)
    assert went_back(at, BinlogOffset("mysql-bin.000050", 4, now)) is behind


def test_a_domains_sequence_number_going_down_without_strict_mode_is_not_a_binlog_that_went_back(source_db):
    """With ``gtid_strict_mode`` off, a replica's own writes beside its master's (or two masters of one domain)
    can log a lower sequence number last: ``@@gtid_binlog_pos`` goes down, ``@@gtid_binlog_state`` keeps each
    server's last."""
    at = BinlogOffset("mysql-bin.000042", 500, "0-1-457547")
    later = BinlogOffset("mysql-bin.000042", 900, "0-2-457546")
    assert not went_back(at, later, "0-1-457547,0-2-457546")
    assert went_back(at, later, "0-2-457546")  # RESET MASTER clears the state too: this is what it leaves
    with source_db.connection() as conn:
        state, now = gtid_history(conn), current_offset(conn)
    assert now.gtid in state.split(",") and not went_back(now, now, state)
