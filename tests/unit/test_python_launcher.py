"""The Python launcher, run by this machine's sh: it drops exactly SPARK_HOME's zips from PYTHONPATH when
SPARK_HOME is the installed pyspark, and nothing else; a real spark-submit through it imports PySpark from
the package in its driver and its workers."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from airflow_cdc_provider.operators.stream import BinlogStreamOperator
from airflow_cdc_provider.spark.launch.python_launcher import installed_pyspark, python_launcher
from airflow_cdc_provider.spark.launch.target import SparkTarget
from airflow_cdc_provider.testing.spark import spark_env, spark_submit_binary

PACKAGE = installed_pyspark()  # requirements/ install pyspark with pip: the embedded default this serves

_REPORT = "import json, os, sys, pyspark; print(json.dumps([os.environ.get('PYTHONPATH'), pyspark.__file__, sys.argv[1:]]))"


def _run(launcher: str, env: dict[str, str]) -> tuple[str | None, str, list[str]]:
    base = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "SPARK_HOME")}
    out = subprocess.run([launcher, "-c", _REPORT, "a b", "c"], env={**base, **env}, capture_output=True,
                         text=True, check=True, timeout=60).stdout
    pythonpath, module, argv = json.loads(out)
    return pythonpath, module, argv


def test_drops_only_the_zips_of_the_installed_pyspark(tmp_path: Path):
    assert PACKAGE is not None and (PACKAGE / "python" / "lib" / "pyspark.zip").is_file()
    launcher = python_launcher(directory=tmp_path)
    assert launcher is not None and os.access(launcher, os.X_OK)
    assert python_launcher(directory=tmp_path) == launcher, "one script per interpreter and package"
    lib = PACKAGE / "python" / "lib"
    py4j = next(lib.glob("py4j-*-src.zip"))
    jar = PACKAGE / "jars" / "spark-core.jar"
    # what Spark builds for its Python processes: the zips first, then the job's own entries
    given = f"{lib / 'pyspark.zip'}:{py4j}:/tmp/with space:{jar}"
    pythonpath, module, argv = _run(launcher, {"SPARK_HOME": str(PACKAGE), "PYTHONPATH": given})
    assert pythonpath == f"/tmp/with space:{jar}"
    assert Path(module).parent == PACKAGE, "pyspark comes from the package, with its cached bytecode"
    assert argv == ["a b", "c"]

    link = tmp_path / "spark-home"  # SPARK_HOME spelled through a symlink: the same directory
    link.symlink_to(PACKAGE)
    pythonpath, _, _ = _run(launcher, {"SPARK_HOME": str(link),
                                       "PYTHONPATH": f"{link}/python/lib/pyspark.zip:{link}/python/lib/{py4j.name}"})
    assert pythonpath is None


def test_another_spark_home_is_left_alone(tmp_path: Path):
    launcher = python_launcher(directory=tmp_path)
    other = tmp_path / "spark-3.5"
    (other / "python" / "lib").mkdir(parents=True)
    given = f"{other}/python/lib/pyspark.zip:/tmp/x"
    pythonpath, module, _ = _run(launcher, {"SPARK_HOME": str(other), "PYTHONPATH": given})
    assert pythonpath == given
    _, module, _ = _run(launcher, {"PYTHONPATH": f"{PACKAGE}/python/lib/pyspark.zip"})  # no SPARK_HOME
    assert ".zip" in module


def test_an_unwritable_directory_means_no_launcher(tmp_path: Path):
    blocked = tmp_path / "file"
    blocked.write_text("")
    assert python_launcher(directory=blocked / "sub") is None


def test_operators_use_it_unless_the_dag_chose_a_python(tmp_path: Path, monkeypatch):
    monkeypatch.setenv("AIRFLOW_CDC_CLASS_ARCHIVE_DIR", str(tmp_path))
    op = BinlogStreamOperator(task_id="stream", config=str(tmp_path / "p.yaml"))
    op._use_python_launcher(SparkTarget("local[2]"))
    launcher = python_launcher(directory=tmp_path)
    assert op.env_vars["PYSPARK_DRIVER_PYTHON"] == launcher and op.env_vars["PYSPARK_PYTHON"] == launcher

    op = BinlogStreamOperator(task_id="stream", config=str(tmp_path / "p.yaml"))
    op._use_python_launcher(SparkTarget("spark://spark-master:7077"))  # client mode: executors elsewhere
    assert op.env_vars["PYSPARK_DRIVER_PYTHON"] == launcher and op.env_vars["PYSPARK_PYTHON"] == sys.executable

    op = BinlogStreamOperator(task_id="stream", config=str(tmp_path / "p.yaml"),
                        env_vars={"PYSPARK_PYTHON": "/opt/python/bin/python3"})
    op._use_python_launcher(SparkTarget("local[2]"))
    assert op.env_vars["PYSPARK_PYTHON"] == "/opt/python/bin/python3" and "PYSPARK_DRIVER_PYTHON" not in op.env_vars


_JOB = """
import json, sys
import pyspark
from pyspark.sql import SparkSession
from pyspark.sql.functions import udf

spark = SparkSession.builder.getOrCreate()
worker = udf(lambda _: __import__("pyspark").__file__)
files = {r[0] for r in spark.range(2).select(worker("id")).collect()}
print("REPORT " + json.dumps({"driver": pyspark.__file__, "workers": sorted(files)}))
spark.stop()
"""


def test_a_spark_submit_through_it_imports_pyspark_from_the_package(tmp_path: Path):
    launcher = python_launcher(directory=tmp_path)
    job = tmp_path / "job.py"
    job.write_text(_JOB)
    run = subprocess.run([spark_submit_binary(), "--master", "local[1]", "--conf", "spark.ui.enabled=false", str(job)],
                         env=spark_env({"PYSPARK_PYTHON": launcher, "PYSPARK_DRIVER_PYTHON": launcher}),
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    report = json.loads(next(line for line in run.stdout.splitlines() if line.startswith("REPORT "))[7:])
    assert Path(report["driver"]).parent == PACKAGE
    assert [Path(f).parent for f in report["workers"]] == [PACKAGE]
