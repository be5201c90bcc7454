"""Packaging facts users and Airflow rely on: provider registration, server flavor, example pipelines, SQL."""

import importlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from airflow_cdc_provider.get_provider_info import get_provider_info
from airflow_cdc_provider.pipeline.config import load_config
from airflow_cdc_provider.source.server import ServerInfo
from airflow_cdc_provider.source.sql import compare, quote_ident, range_predicate

ROOT = Path(__file__).resolve().parents[2]


def test_provider_is_discovered_by_airflow():
    from importlib.metadata import entry_points

    (ep,) = [e for e in entry_points(group="apache_airflow_provider") if e.value.startswith("airflow_cdc_provider")]
    info = ep.load()()
    assert info == get_provider_info()
    assert info["package-name"] == "airflow-cdc-provider"  # must equal the canonical distribution name

    from airflow.providers_manager import ProvidersManager

    pm = ProvidersManager()
    assert "airflow-cdc-provider" in pm.providers
    assert "airflow_cdc_provider.operators.links.SparkUILink" in pm.extra_links_class_names
    assert "airflow_cdc_provider.triggers.stream" in [t.trigger_class_name for t in pm.trigger]
    for group in ("operators", "sensors", "hooks", "triggers"):
        for module in info[group][0]["python-modules"]:
            importlib.import_module(module)


def test_airflow_providers_list_shows_the_provider(tmp_path):
    env = {**os.environ, "AIRFLOW_HOME": str(tmp_path)}
    airflow = str(Path(sys.executable).with_name("airflow"))
    out = subprocess.run([airflow, "providers", "list", "-o", "json"], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    listed = {p["package_name"]: p for p in json.loads(out.stdout[out.stdout.index("["):])}
    assert listed["airflow-cdc-provider"]["version"] == get_provider_info()["versions"][0]


@pytest.mark.parametrize(
    "version, flavor, statement, row_metadata",
    [
        ("10.11.19-MariaDB-0+deb12u1-log", "MariaDB", "SHOW MASTER STATUS", True),
        ("10.4.34-MariaDB", "MariaDB", "SHOW MASTER STATUS", False),
        ("8.0.36", "MySQL", "SHOW MASTER STATUS", True),
        ("8.2.0", "MySQL", "SHOW BINARY LOG STATUS", True),
        ("8.4.3-commercial", "MySQL", "SHOW BINARY LOG STATUS", True),
        ("5.7.44-log", "MySQL", "SHOW MASTER STATUS", False),
    ],
)
def test_flavor_picks_the_binlog_status_statement(version, flavor, statement, row_metadata):
    info = ServerInfo.from_version(version)
    assert (info.flavor, info.binlog_status_statement, info.supports_row_metadata) == (flavor, statement, row_metadata)


def test_example_pipelines_are_valid():
    files = sorted((ROOT / "dags" / "pipelines").glob("*.yaml"))
    assert files
    for f in files:
        assert load_config(f).source.tables


def test_identifiers_are_quoted():
    assert quote_ident("we`ird name") == "`we``ird name`"


def test_composite_comparisons_are_spelled_out_for_the_range_optimizer():
    sql, params = compare(["a", "b"], ">=", (1, "x"))
    assert sql == "(`a` >= %s AND ((`a` > %s) OR (`a` = %s AND `b` >= %s)))"
    assert params == [1, 1, 1, "x"]
    sql, params = range_predicate(["id"], (5,), (9,))
    assert (sql, params) == ("`id` >= %s AND `id` < %s", [5, 9])
    assert range_predicate(["id"], None, None) == ("1=1", [])
def test_percent_is_doubled_for_pymysql_formatting():
    assert quote_ident("50% off") == "`50%% off`"


def test_the_source_connection_type_is_offered_with_its_fields():
    """The UI's connection form lists ``mysql_cdc`` with the extras the source reads (no MySQL provider needed)."""
    from airflow.providers_manager import ProvidersManager

    pm = ProvidersManager()
    assert pm.hooks["mysql_cdc"].hook_class_name == "airflow_cdc_provider.hooks.mysql_cdc.MySqlCdcHook"
    widgets = pm.connection_form_widgets
    for field in ("server_id_range", "ssl_ca", "charset", "connect_timeout"):
        assert f"extra__mysql_cdc__{field}" in widgets, sorted(w for w in widgets if "mysql_cdc" in w)
