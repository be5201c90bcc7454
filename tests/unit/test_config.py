import json
import subprocess
import sys
import typing
from pathlib import Path

import jsonschema
import pytest
import yaml

from airflow_cdc_provider.pipeline.config import (
    ConfigError,
    SchemaChanges,
    StreamConfig,
    load_config,
    pipeline_json_schema,
)
from airflow_cdc_provider.sinks.parquet import ParquetSinkSettings
from airflow_cdc_provider.sinks.postgres import JdbcSinkSettings
from airflow_cdc_provider.source.settings import ConnectionConfigError, ConnectionSettings
from airflow_cdc_provider.source.table_versions import SCHEMA_CHANGE_BEHAVIOURS
from airflow_cdc_provider.source.validation import check_table_keys

ROOT = Path(__file__).resolve().parents[2]
SCHEMA_FILE = ROOT / "docs" / "pipeline.schema.json"

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


@pytest.mark.parametrize(
    "text, expected",
    [
        (GOOD.replace("500", "'5'"), "pipe.yaml: snapshot.chunk_size: must be an integer, got str '5'"),
        (GOOD + "stream: {deferrable: 1}\n", "pipe.yaml: stream.deferrable: must be true/false, got int 1"),
        (GOOD + "sink: {type: jdbc}\n", "pipe.yaml: sink.conn_id: required key is missing"),
        (GOOD + "sink: {type: s3}\n", "pipe.yaml: sink.type: 's3' is not allowed (allowed: delta, jdbc, parquet)"),
        (GOOD + "sink: {type: jdbc, conn_id: pg, schem: x}\n",
         "pipe.yaml: sink.schem: unknown key (did you mean 'schema'? allowed: type, conn_id, schema)"),
        (GOOD + "sink: {type: parquet, conn_id: pg}\n", "pipe.yaml: sink.conn_id: unknown key (allowed: type, path)"),
        (GOOD + "stream: {startup: {file: mysql-bin.000042, gtid: 0-1-5}}\n",
         "pipe.yaml: stream.startup: must be initial, latest, earliest, {file: <binlog file>, pos: <position>} "
         "(pos optional), {gtid: <GTID>} or {timestamp: <epoch seconds or ISO 8601 time>}, got dict"),
        (GOOD + "stream: {startup: {file: mysql-bin.000042, pos: start}}\n",
         "pipe.yaml: stream.startup: must be initial"),
        (GOOD + "stream: {startup: sometimes}\n", "pipe.yaml: stream.startup: must be initial"),
        (GOOD + "spark: {deploy_mode: cluser}\n",
         "pipe.yaml: spark.deploy_mode: 'cluser' is not allowed (did you mean 'cluster'? allowed: client, cluster)"),
        (GOOD + "stream: {schema_changes: lenent}\n",
         "pipe.yaml: stream.schema_changes: 'lenent' is not allowed (did you mean 'lenient'? allowed: evolve, lenient, "
         "ignore, resnapshot, fail)"),
        (GOOD + "stream: {schema_changes_per_table: {shop.orders: ignor}}\n",
         "pipe.yaml: stream.schema_changes_per_table['shop.orders']: 'ignor' is not allowed (did you mean 'ignore'? "
         "allowed: evolve, lenient, ignore, resnapshot, fail)"),
        (GOOD + "stream: {schema_changes_per_table: {shop: ignore}}\n",
         "pipe.yaml: stream.schema_changes_per_table: key 'shop' must be a table 'db.table', a glob 'db.order_*' or a "
         "regular expression"),
        (GOOD + "stream: {schema_changes_per_table: {'re:shop_(': ignore}}\n",
         "pipe.yaml: stream.schema_changes_per_table: key 're:shop_(' is not a valid regular expression: missing )"),
        (GOOD + "stream: {schema_changes_per_table: {'shop.[z-a]': ignore}}\n",
         "pipe.yaml: stream.schema_changes_per_table: key 'shop.[z-a]' is not a valid glob: bad character range"),
        (GOOD + "stream: {schema_changes_per_table: [shop.orders]}\n",
         "pipe.yaml: stream.schema_changes_per_table: must be a mapping, got list ['shop.orders']"),
        (GOOD + "stream: {schema_change: ignore}\n",
         "pipe.yaml: stream.schema_change: unknown key (did you mean 'schema_changes'?"),
        (GOOD + "spark: {jars: [a.jar, 1]}\n",
         "pipe.yaml: spark.jars: must be a string or a list of strings, got list"),
        (GOOD.replace("[shop.orders]", "[shop.orders, '']"), "pipe.yaml: source.tables[1]: must be a non-empty string"),
        (GOOD.replace("tables:", "chunk_key: {shop: id}\n  tables:"),
         "pipe.yaml: source.chunk_key: key 'shop' must be a table name 'db.table'"),
        (GOOD.replace("tables:", "chunk_key: {shop.events: []}\n  tables:"),
         "pipe.yaml: source.chunk_key['shop.events']: must be a column name or a non-empty list of column names"),
        (GOOD.replace("chunk_size: 500", "even_distribution_lower_bound: 1.5"),
         "pipe.yaml: snapshot.even_distribution_lower_bound: must be at most 1"),
        (GOOD + "state: [x]\n", "pipe.yaml: state: must be a mapping, got list ['x']"),
        (GOOD + "tags: cdc\n", "pipe.yaml: tags: must be a list, got str 'cdc': write it as [\"cdc\"]"),
        (GOOD.replace("[shop.orders]", "shop.orders"), "pipe.yaml: source.tables: must be a list, got str "
         "'shop.orders': write it as [\"shop.orders\"], or one '- \"shop.orders\"' line per item below the key"),
    ],
)
def test_more_errors_name_file_and_key(tmp_path, text, expected):
    with pytest.raises(ConfigError) as exc:
        load_config(write(tmp_path, text))
    message = str(exc.value).replace(f"{tmp_path}/", "")
    assert message.startswith(expected), message
    assert "\n" not in message


def test_every_problem_of_a_file_is_reported_at_once(tmp_path):
    text = GOOD.replace("chunk_size", "chunk_sise") + "stream: {mode: sometimes}\nspark: {connect_conn_id: 15002}\n"
    with pytest.raises(ConfigError) as exc:
        load_config(write(tmp_path, text))
    lines = str(exc.value).replace(f"{tmp_path}/", "").splitlines()
    assert len(lines) == 3, lines
    assert lines[0].startswith("pipe.yaml: snapshot.chunk_sise: unknown key (did you mean 'chunk_size'? allowed: ")
    assert lines[1] == "pipe.yaml: stream.mode: 'sometimes' is not allowed (allowed: available_now, continuous)"
    assert lines[2] == "pipe.yaml: spark.connect_conn_id: must be a string, got int 15002"


def test_sections_are_their_dataclasses(tmp_path):
    assert load_config(write(tmp_path, GOOD)).sink == ParquetSinkSettings()
    cfg = load_config(write(tmp_path, GOOD + "sink: {type: jdbc, conn_id: pg}\n"
                                              "stream: {startup: {timestamp: 2026-11-21 10:00:00Z}}\n"
                                              "spark: {jars: extra.jar}\n"))
    assert cfg.sink == JdbcSinkSettings(conn_id="pg")
    # an unquoted YAML time is a datetime: it is kept as text, as the job spec carrying it is JSON
    assert cfg.stream.startup == {"timestamp": "2026-11-21T10:00:00+00:00"}
    assert json.loads(json.dumps(cfg.stream.to_dict()))["startup"] == cfg.stream.startup
    assert cfg.spark.jars == "extra.jar" and cfg.tags == ["cdc"]


def test_published_json_schema_is_current():
    expected = json.dumps(pipeline_json_schema(), indent=2, sort_keys=True) + "\n"
    assert SCHEMA_FILE.read_text() == expected, (
        "docs/pipeline.schema.json is stale; regenerate it with: python -c 'import json; from "
        "airflow_cdc_provider.pipeline.config import pipeline_json_schema as s; "
        "print(json.dumps(s(), indent=2, sort_keys=True))' > docs/pipeline.schema.json")


@pytest.mark.parametrize("example", sorted((ROOT / "dags" / "pipelines").glob("*.yaml")), ids=lambda p: p.name)
def test_json_schema_accepts_the_example_pipelines(example):
    schema = pipeline_json_schema()
    doc = yaml.safe_load(example.read_text())
    assert set(doc) <= set(schema["properties"])
    jsonschema.Draft202012Validator(schema).validate(doc)
    load_config(example)


def test_schema_changes_per_table_first_matching_pattern_wins(tmp_path):
    assert load_config(write(tmp_path, GOOD)).stream.schema_changes_for("shop.orders") == "evolve"
    cfg = load_config(write(tmp_path, GOOD + "stream:\n  schema_changes: resnapshot\n  schema_changes_per_table:\n"
                                              "    shop.orders: ignore\n    'shop.order*': fail\n"
                                              "    're:shop\\.(audit|log)_\\d+': lenient\n    'shop.*': evolve\n"))
    stream = cfg.stream
    assert list(stream.schema_changes_per_table) == ["shop.orders", "shop.order*", "re:shop\\.(audit|log)_\\d+",
                                                      "shop.*"]
    assert stream.schema_changes_for("shop.orders") == "ignore"
    assert stream.schema_changes_for("shop.order_lines") == "fail"
    assert stream.schema_changes_for("shop.audit_7") == "lenient"
    assert stream.schema_changes_for("shop.audit_x") == "evolve"
    assert stream.schema_changes_for("crm.orders") == "resnapshot"  # no key matches: stream.schema_changes
    # the Spark jobs get it through the job spec (JSON)
    assert StreamConfig.from_dict(json.loads(json.dumps(stream.to_dict()))) == stream
    assert typing.get_args(SchemaChanges) == SCHEMA_CHANGE_BEHAVIOURS  # what sink_versions knows


def test_schema_changes_per_table_keys_must_name_captured_tables():
    captured = ["shop.orders", "shop.order_lines", "shop.audit_1"]
    keys = ["shop.orders", "shop.ordrs", "shop.audit_*", "re:shop\\.order.*", "shop.log_*", "re:crm\\..*", "crm.users"]
    assert check_table_keys(keys, "stream.schema_changes_per_table", captured) == [
        "stream.schema_changes_per_table['shop.ordrs']: names table 'shop.ordrs', which is not among the captured "
        "tables (did you mean 'shop.orders'?); check source.tables",
        "stream.schema_changes_per_table['shop.log_*']: pattern 'shop.log_*' matches none of the captured tables; "
        "check source.tables",
        "stream.schema_changes_per_table['re:crm\\\\..*']: pattern 're:crm\\\\..*' matches none of the captured "
        "tables; check source.tables",
        "stream.schema_changes_per_table['crm.users']: names table 'crm.users', which is not among the captured "
        "tables; check source.tables",
    ]


def test_json_schema_is_as_strict_as_the_loader():
    validator = jsonschema.Draft202012Validator(pipeline_json_schema())
    source = {"conn_id": "shop", "tables": ["shop.orders"]}
    assert validator.is_valid({"source": source, "sink": {"path": "/data"}})
    assert validator.is_valid({"source": source, "sink": {"type": "jdbc", "conn_id": "pg"}})
    assert validator.is_valid({"source": source, "stream": {"startup": {"file": "mysql-bin.000042", "pos": 4}}})
    assert not validator.is_valid({"source": source, "sink": {"type": "jdbc"}})
    assert not validator.is_valid({"source": source, "snapshot": {"chunk_sise": 5}})
    assert not validator.is_valid({"source": source, "stream": {"startup": {"file": "x", "gtid": "0-1-5"}}})
    assert not validator.is_valid({"snapshot": {}})
    assert validator.is_valid({"source": source, "stream": {"schema_changes": "lenient",
                                                            "schema_changes_per_table": {"shop.*": "ignore"}}})
    assert not validator.is_valid({"source": source, "stream": {"schema_changes": "lenent"}})
    assert not validator.is_valid({"source": source, "stream": {"schema_changes_per_table": {"shop.*": "drop"}}})


def test_the_spark_side_does_not_import_pydantic():
    code = "import sys, airflow_cdc_provider.pipeline.jobspec; print('pydantic' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


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


DELTA = GOOD + "sink:\n  type: delta\n  path: /data/lake\n"


def test_delta_maintenance_section_has_safe_defaults(tmp_path):
    from airflow_cdc_provider.sinks.delta_settings import DeltaMaintenanceSettings

    assert load_config(write(tmp_path, DELTA)).sink.maintenance is None  # no maintenance DAG
    m = load_config(write(tmp_path, DELTA + "  maintenance: {}\n")).sink.maintenance
    assert m == DeltaMaintenanceSettings()
    assert (m.schedule, m.compact, m.z_order, m.vacuum_retention_hours, m.allow_short_retention) == (
        "@daily", True, False, 168, False)
    m = load_config(write(tmp_path, DELTA + "  maintenance: {schedule: '0 3 * * *', z_order: true, "
                                            "target_file_size: 67108864, vacuum_retention_hours: null}\n")).sink.maintenance
    assert (m.schedule, m.z_order, m.target_file_size, m.vacuum_retention_hours) == ("0 3 * * *", True, 2**26, None)


def test_delta_maintenance_refuses_a_vacuum_retention_below_deltas_minimum(tmp_path):
    with pytest.raises(ConfigError) as exc:
        load_config(write(tmp_path, DELTA + "  maintenance: {vacuum_retention_hours: 24}\n"))
    message = str(exc.value).replace(f"{tmp_path}/", "")
    assert message.startswith("pipe.yaml: sink.maintenance: vacuum_retention_hours 24 is below Delta's minimum of "
                              "168 hours"), message
    assert "allow_short_retention: true" in message and "\n" not in message
    cfg = load_config(write(tmp_path, DELTA + "  maintenance: {vacuum_retention_hours: 24, allow_short_retention: true}\n"))
    assert cfg.sink.maintenance.vacuum_retention_hours == 24 and cfg.sink.maintenance.allow_short_retention


@pytest.mark.parametrize(
    "text, expected",
    [
        (DELTA + "  maintenance: {vacuum_retention_hours: -1, allow_short_retention: true}\n",
         "pipe.yaml: sink.maintenance.vacuum_retention_hours: must be at least 0, got -1"),
        (DELTA + "  maintenance: {vacuum_retention_hours: 0}\n",
         "pipe.yaml: sink.maintenance: vacuum_retention_hours 0 is below Delta's minimum of 168 hours"),
        (DELTA + "  maintenance: {vacuum_retention_hours: '7 days'}\n",
         "pipe.yaml: sink.maintenance.vacuum_retention_hours: must be an integer, got str '7 days'"),
        (DELTA + "  maintenance: {compact: yes please}\n",
         "pipe.yaml: sink.maintenance.compact: must be true/false, got str 'yes please'"),
        (DELTA + "  maintenance: {shedule: '@daily'}\n",
         "pipe.yaml: sink.maintenance.shedule: unknown key (did you mean 'schedule'? allowed: schedule, compact, "),
        (DELTA + "  maintenance: daily\n", "pipe.yaml: sink.maintenance: must be a mapping, got str 'daily'"),
        (GOOD + "sink: {type: parquet, maintenance: {}}\n",
         "pipe.yaml: sink.maintenance: unknown key (allowed: type, path)"),
    ],
)
def test_delta_maintenance_errors_name_file_and_key(tmp_path, text, expected):
    test_errors_name_file_and_key(tmp_path, text, expected)


def test_json_schema_knows_the_delta_maintenance_section():
    validator = jsonschema.Draft202012Validator(pipeline_json_schema())
    source = {"conn_id": "shop", "tables": ["shop.orders"]}
    sink = {"type": "delta", "maintenance": {"schedule": "@daily", "vacuum_retention_hours": 336}}
    assert validator.is_valid({"source": source, "sink": sink})
    assert not validator.is_valid({"source": source, "sink": {**sink, "maintenance": {"vacum": 1}}})
    assert not validator.is_valid({"source": source, "sink": {"type": "parquet", "maintenance": {}}})


@pytest.mark.parametrize("text, problem", [
    ("dag_id: 'bad id!'\n", "dag_id: 'bad id!' is not an Airflow DAG id: letters, digits, '_', '-' and '.', at most "
                            "250 (e.g. 'bad_id')"),
    ('schedule: "every hour"\n', "schedule: 'every hour' is not an Airflow schedule: a cron expression ('0 * * * *'), "
                                 "a preset (@annually, @continuous, @daily, @hourly, @midnight, @monthly, @once, "
                                 "@quarterly, @weekly, @yearly) or null for runs only when triggered"),
    ('sink: {type: delta, maintenance: {schedule: "61 * * * *"}}\n', "sink.maintenance.schedule: '61 * * * *' "
                                                               "is not an Airflow schedule"),
])
def test_what_airflow_would_refuse_when_it_loads_the_dag_is_refused_here(tmp_path, text, problem):
    with pytest.raises(ConfigError) as err:
        load_config(write(tmp_path, GOOD + text))
    assert problem in str(err.value)


@pytest.mark.parametrize("schedule", ["@hourly", "@continuous", "@once", "*/5 * * * *", "0 3 * * 1-5", None])
def test_airflow_schedules_pass(tmp_path, schedule):
    text = GOOD + ("schedule: null\n" if schedule is None else f"schedule: '{schedule}'\n")
    assert load_config(write(tmp_path, text)).schedule == schedule


def test_a_dag_id_from_a_file_name_airflow_refuses_says_so(tmp_path):
    path = tmp_path / "my shop.yaml"
    path.write_text(GOOD)
    with pytest.raises(ConfigError, match=r"my shop.yaml: dag_id: 'my shop' is not an Airflow DAG id.*set dag_id"):
        load_config(path)
