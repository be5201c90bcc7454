import pytest

from airflow_cdc_provider.pipeline.config import ConfigError, load_config
from airflow_cdc_provider.source.settings import ConnectionConfigError, ConnectionSettings

GOOD = """
source:
  conn_id: shop
  tables: [shop.orders]
snapshot:
  chunk_size: 500
"""


def write(tmp_path, text, name="pipe.yaml"):
    p = tmp_path / name
    p.write_text(text)
    return p


def test_good_file_loads_with_defaults(tmp_path):
    cfg = load_config(write(tmp_path, GOOD))
    assert cfg.dag_id == "pipe" and cfg.source.tables == ["shop.orders"] and cfg.snapshot.chunk_size == 500
    assert cfg.snapshot.split_options().even_upper_bound == 1000.0


@pytest.mark.parametrize(
    "text, expected",
    [
        (GOOD.replace("chunk_size", "chunk_sise"), "pipe.yaml: snapshot.chunk_sise: unknown key (did you mean 'chunk_size'?"),
        (GOOD.replace("snapshot:", "snapshots:"), "pipe.yaml: snapshots: unknown key (did you mean 'snapshot'?"),
        (GOOD.replace("500", "-1"), "pipe.yaml: snapshot.chunk_size: must be a positive integer, got -1"),
        (GOOD.replace("500", "'many'"), "pipe.yaml: snapshot.chunk_size: must be an integer, got str 'many'"),
        (GOOD.replace("  conn_id: shop\n", ""), "pipe.yaml: source.conn_id: required key is missing"),
        ("snapshot: {chunk_size: 5}\n", "pipe.yaml: source: required section is missing"),
        (GOOD + "stream: {mode: sometimes}\n", "pipe.yaml: stream.mode: 'sometimes' is not allowed (allowed: available_now, continuous)"),
        (GOOD + "stream: {max_rows_per_batch: 5000}\n",
         "pipe.yaml: stream.max_rows_per_batch: replaced by stream.max_batch_bytes (binlog bytes per micro-batch"),
        (GOOD + "spark: {connect_conn_id: 15002}\n", "pipe.yaml: spark.connect_conn_id: must be a string, got int 15002"),
        (GOOD + "spark: {conect_conn_id: x}\n", "pipe.yaml: spark.conect_conn_id: unknown key (did you mean 'connect_conn_id'?"),
        (GOOD.replace("[shop.orders]", "[]"), "pipe.yaml: source.tables: must be a non-empty list"),
        ("source: [1, 2\n", "pipe.yaml:2:1: invalid YAML"),
        ("- just a list\n", "pipe.yaml: the file must contain a mapping"),
    ],
)
def test_errors_name_file_and_key(tmp_path, text, expected):
    with pytest.raises(ConfigError) as exc:
        load_config(write(tmp_path, text))
    message = str(exc.value).replace(f"{tmp_path}/", "")
    assert message.startswith(expected), message
    assert "\n" not in message


def test_missing_file(tmp_path):
    with pytest.raises(ConfigError, match="nope.yaml: file not found"):
        load_config(tmp_path / "nope.yaml")


def test_connection_uri_and_json_forms_agree_and_hide_the_password():
    uri = ConnectionSettings.from_airflow_conn("mysql://cdc:p%40ss@db.example:3307/shop?server_id_range=5400-5403", "src")
    js = ConnectionSettings.from_airflow_conn(
        '{"conn_type": "mysql", "host": "db.example", "port": 3307, "login": "cdc", "password": "p@ss",'
        ' "schema": "shop", "extra": {"server_id_range": "5400-5403"}}', "src")
    assert uri == js
    assert uri.password == "p@ss" and uri.server_id_range == (5400, 5403)
    assert "p@ss" not in repr(uri) and "p@ss" not in uri.describe()


def test_connection_errors_are_specific():
    with pytest.raises(ConnectionConfigError, match="connection type 'postgres' is not mysql"):
        ConnectionSettings.from_airflow_conn("postgres://u:p@h:5432/db", "src")
    with pytest.raises(ConnectionConfigError, match="server id range 'x-y'"):
        ConnectionSettings.from_airflow_conn("mysql://u:p@h/db?server_id=x-y", "src")


def test_driver_settings_yield_to_the_jobs_own_spark_conf():
    from airflow_cdc_provider.spark.session import DRIVER_CONF, with_driver_conf

    assert with_driver_conf(None) == DRIVER_CONF
    assert with_driver_conf({"spark.executor.memory": "2g"}) == {**DRIVER_CONF, "spark.executor.memory": "2g"}
    # the class-path session extensions (mllib's functions) come back when a pipeline's spark.conf asks
    assert with_driver_conf({"spark.sql.extensions.test.loadFromCp": "true"})["spark.sql.extensions.test.loadFromCp"] == "true"
