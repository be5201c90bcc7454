"""A pipeline YAML resolved into what the jobs get: sink through the registry, state store, replica ids."""

import pytest

from airflow_cdc_provider.pipeline.config import ConfigError, load_config
from airflow_cdc_provider.pipeline.jobspec import JobSpec
from airflow_cdc_provider.pipeline.resolve import claim_sink, resolve_pipeline, sink_moved
from airflow_cdc_provider.sinks import registry
from airflow_cdc_provider.sinks.base import Sink, SinkConfig
from airflow_cdc_provider.sinks.parquet import ParquetSink
from airflow_cdc_provider.sinks.postgres import PostgresSink
from airflow_cdc_provider.sinks.registry import open_sink, register_sink, sink_class, sink_types

SOURCE = "mysql://cdc:s3cret@db.example:3306?server_id_range=7000-7010"


@pytest.fixture
def env(monkeypatch, tmp_path):
    monkeypatch.setenv("AIRFLOW_CONN_SRC", SOURCE)
    monkeypatch.setenv("AIRFLOW_CONN_PG", "postgresql://writer:pgpass@pg.example:5433/warehouse")
    monkeypatch.setenv("AIRFLOW_CDC_DATA", str(tmp_path / "data"))
    return tmp_path


def pipeline(tmp_path, text):
    path = tmp_path / "shop.yaml"
    path.write_text("source:\n  conn_id: src\n  tables: [shop.orders]\n" + text)
    return resolve_pipeline(load_config(path))


def test_parquet_by_default_under_the_data_home(env):
    p = pipeline(env, "")
    assert p.sink == SinkConfig("parquet", path=str(env / "data" / "shop" / "sink"))
    assert p.state.uri == str(env / "data" / "shop" / "state")
    assert isinstance(p.open_sink(), ParquetSink) and p.secrets == {"source_password": "s3cret"}
    assert p.server_id(0) == 7000 and p.server_id(12) == 7001  # the connection's range, wrapped


def test_jdbc_sink_resolves_its_connection_and_keeps_the_password_in_the_secrets(env):
    p = pipeline(env, "sink: {type: jdbc, conn_id: pg, schema: cdc}\n")
    assert p.sink.type == "jdbc" and p.sink.schema == "cdc"
    assert p.sink.conn == {"conn_id": "pg", "host": "pg.example", "port": 5433, "login": "writer",
                           "schema": "warehouse", "extra": {}}
    assert p.secrets == {"source_password": "s3cret", "sink_password": "pgpass"}
    sink = p.open_sink()
    assert isinstance(sink, PostgresSink) and sink.writes_from_executors and "pgpass" not in sink.describe()


def test_the_pipelines_server_id_range_wins_over_the_connections(env):
    assert pipeline(env, "").source.server_id_range == (7000, 7010)
    assert pipeline(env, "  server_id: '5400-5402'\n").source.server_id_range == (5400, 5402)
    assert pipeline(env, "  server_id: 6000\n").source.server_id_range == (6000, 6000)
    with pytest.raises(ConfigError, match=r"shop.yaml: source.server_id: server id range 'x-y'"):
        pipeline(env, "  server_id: x-y\n")


def test_a_job_spec_carries_no_password_and_round_trips(env):
    p = pipeline(env, "sink: {type: jdbc, conn_id: pg}\nstream: {mode: continuous, max_batch_bytes: 1000}\n")
    spec = p.job_spec(server_id=p.server_id(3), tables=["shop.orders"], launch_id="l1")
    text = spec.to_json()
    assert "s3cret" not in text and "pgpass" not in text
    back = JobSpec.from_json(text)
    assert back == spec.__class__(**{**spec.__dict__, "source": back.source})  # equal but for the password
    assert back.source_settings(p.secrets) == p.source and back.stream.max_batch_bytes == 1000


def test_a_registered_sink_type_is_found_by_name_without_touching_any_other_module(monkeypatch):
    monkeypatch.setattr(registry, "_registered", dict(registry._registered))  # this test's type goes with it

    @register_sink
    class NullSink(Sink):
        type = "null-test"
        settings = object

        @classmethod
        def resolve(cls, settings, data_dir):
            return SinkConfig(cls.type), {}

        def describe(self):
            return "nowhere"

        def finish_snapshot(self, table, epoch, min_low_watermark):
            pass

        def open_window(self, rows, types, epoch, indexes, low_watermark, retried):
            raise NotImplementedError

        def write_changes(self, df, types, batch_id, mid_write, rows):
            pass

        def current_state(self, types, include_meta=False):
            raise NotImplementedError

    assert "null-test" in sink_types() and sink_class("null-test") is NullSink
    assert open_sink(SinkConfig("null-test"), {}).describe() == "nowhere"
    assert {"parquet", "jdbc"} <= set(sink_types())


def test_a_sink_moved_away_from_the_state_stores_is_refused_naming_both_and_the_ways_out(env, monkeypatch):
    """The stream would go on from its checkpoint into the new sink, which would never get the snapshot's rows."""
    first = pipeline(env, f"state: {{path: {env / 'state'}}}\nsink: {{path: {env / 'old'}}}\n")
    assert sink_moved(first) == []
    claim_sink(first)
    assert sink_moved(pipeline(env, f"state: {{path: {env / 'state'}}}\nsink: {{path: 'file://{env / 'old'}/'}}\n")) == []
    moved = pipeline(env, f"state: {{path: {env / 'state'}}}\nsink: {{path: {env / 'new'}}}\n")
    problem, = sink_moved(moved)
    assert "state.path" in problem and str(env / "old") in problem and str(env / "new") in problem
    assert "sink.json" in problem  # how to say the data was moved there on purpose
    claim_sink(moved)  # the first sink stays recorded
    assert sink_moved(moved) == [problem]
    for same in (f"file:{env / 'old'}", f"{env}//./old", f"file://{env / 'x'}/../old"):  # one place, other spellings
        assert sink_moved(pipeline(env, f"state: {{path: {env / 'state'}}}\nsink: {{path: '{same}'}}\n")) == [], same


def test_a_jdbc_sinks_login_or_connection_id_may_change_its_database_or_schema_may_not(env, monkeypatch):
    state = f"state: {{path: {env / 'state'}}}\n"
    claim_sink(pipeline(env, state + "sink: {type: jdbc, conn_id: pg, schema: cdc}\n"))
    monkeypatch.setenv("AIRFLOW_CONN_PG2", "postgresql://other:pw@PG.example:5433/warehouse")
    assert sink_moved(pipeline(env, state + "sink: {type: jdbc, conn_id: pg2, schema: cdc}\n")) == []
    assert sink_moved(pipeline(env, state + "sink: {type: jdbc, conn_id: pg2, schema: cdc2}\n"))
    monkeypatch.setenv("AIRFLOW_CONN_PG3", "postgresql://writer:pw@pg.example:5433/lake")
    assert sink_moved(pipeline(env, state + "sink: {type: jdbc, conn_id: pg3, schema: cdc}\n"))


def test_an_unknown_jdbc_sink_connection_is_named_under_sink_conn_id(env):
    with pytest.raises(ConfigError, match=r"shop\.yaml: sink\.conn_id: unknown connection 'nope'.*AIRFLOW_CONN_NOPE="
                                          r"'postgresql://"):
        pipeline(env, "sink: {type: jdbc, conn_id: nope}\n")
