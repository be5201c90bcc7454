"""Fixtures of the end-to-end tier: Spark sessions, Airflow homes, the soak scenario report."""

import os
import shutil
import sys
import time
from pathlib import Path

import pytest

from airflow_cdc_provider.testing.airflow_run import airflow_env, install_dag_files, migrate


@pytest.fixture(scope="session")
def migrated_airflow_db(tmp_path_factory) -> Path:
    """An Airflow metadata DB (SQLite) as ``airflow db migrate`` leaves it, made once per worker; each Airflow
    home starts from a copy of it. Only the DB: ``airflow.cfg`` names its home's paths, so each home writes
    its own."""
    base = tmp_path_factory.mktemp("airflow-db")
    (base / "dags").mkdir()
    (base / "pipelines").mkdir()
    migrate(airflow_env(base / "home", base / "dags", base / "pipelines"))
    return base / "home" / "airflow.db"


@pytest.fixture
def airflow_home(tmp_path, source_db, migrated_airflow_db):
    """An Airflow home with the pipeline loader DAG file, a pipelines folder and a migrated SQLite DB."""
    dags, pipelines = tmp_path / "dags", tmp_path / "pipelines"
    dags.mkdir()
    pipelines.mkdir()
    install_dag_files(dags)
    env = airflow_env(tmp_path / "airflow", dags, pipelines,
                      {"AIRFLOW_CONN_SRC": source_db.server.connection_uri(), "AIRFLOW_CDC_DATA": str(tmp_path / "cdc")})
    (tmp_path / "airflow").mkdir()
    shutil.copyfile(migrated_airflow_db, tmp_path / "airflow" / "airflow.db")
    return env, dags, pipelines


@pytest.fixture(scope="session")
def spark():
    """One in-process Spark session for the tests' own checks (jobs under test run with spark-submit)."""
    import logging

    from airflow_cdc_provider.spark.session import spark_session

    logging.getLogger("py4j").setLevel(logging.WARNING)  # its INFO lines at exit hit closed pytest streams
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # its Python workers: this venv's, as the jobs' are
    s = spark_session("airflow-cdc tests", master="local[2]")
    yield s
    s.stop()


# -- scenarios: one test, two sizes ---------------------------------------------------------------
# `make test` runs every load/fault scenario small; `make soak` (AIRFLOW_CDC_SOAK=1) runs the same tests with
# the long sizes and prints a table of what each did.
SOAK = os.environ.get("AIRFLOW_CDC_SOAK") == "1"
_scenarios: list[dict] = []


def scale(short, soak):
    return soak if SOAK else short


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    if rep.when == "call":
        item.call_passed = rep.passed


@pytest.fixture
def scenario(request):
    """What a scenario did (rows, changes applied, faults injected), for the soak table."""
    rec = {"scenario": request.node.name.removeprefix("test_"), "rows": 0, "changes": 0, "faults": 0}
    started = time.monotonic()
    yield rec
    rec["wall_s"] = round(time.monotonic() - started, 1)
    rec["result"] = "equal" if getattr(request.node, "call_passed", False) else "DIFFERENCES/FAILED"
    _scenarios.append(rec)


def pytest_terminal_summary(terminalreporter):
    if not _scenarios:
        return
    head = f"{'scenario':<58} {'rows':>9} {'changes':>9} {'faults':>6}  {'result':<18} {'wall s':>7}"
    lines = [head, "-" * len(head)] + [
        f"{r['scenario'][:58]:<58} {r['rows']:>9} {r['changes']:>9} {r['faults']:>6}  {r['result']:<18} {r['wall_s']:>7}"
        for r in _scenarios
    ]
    terminalreporter.write_sep("=", "scenarios" + (" (soak sizes)" if SOAK else " (short sizes)"))
    for line in lines:
        terminalreporter.write_line(line)
    out = os.environ.get("AIRFLOW_CDC_SCENARIO_REPORT")
    if out:
        with open(out, "w") as f:
            f.write("\n".join(lines) + "\n")
