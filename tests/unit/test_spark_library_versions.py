"""The Spark provider and PySpark versions the operators and jobs support, and their refusal of any other.

The operators drive the Airflow Spark provider's hook through internals (``compat/spark_provider.py``) and the
jobs use a few PySpark internals (``compat/pyspark_internals.py``). A release that renamed one must be refused
up front with one error saying what to install, not fail in the middle of a task. Every such internal is
used in ``airflow_cdc_provider/compat/`` and nowhere else.
"""

import configparser
import importlib.metadata
import re
from pathlib import Path

import pytest
from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook
from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.version import Version

from airflow_cdc_provider.compat import pyspark_internals, spark_provider

ROOT = Path(__file__).resolve().parents[2]


def install_requires() -> dict[str, Requirement]:
    cfg = configparser.ConfigParser()
    cfg.read(ROOT / "setup.cfg")
    reqs = [Requirement(line) for line in cfg["options"]["install_requires"].splitlines()
            if line.strip() and not line.strip().startswith("#")]
    return {r.name: r for r in reqs}


def test_the_installed_versions_are_supported_and_the_package_requires_the_same_ranges():
    spark_provider.check_library(importlib.metadata.version(spark_provider.DISTRIBUTION))
    import pyspark

    pyspark_internals.check_library(pyspark.__version__)
    reqs = install_requires()
    assert reqs[spark_provider.DISTRIBUTION].specifier == SpecifierSet(spark_provider.SUPPORTED)
    for name in ("pyspark", "pyspark-client"):  # pinned to one version inside the supported range
        (pin,) = reqs[name].specifier
        assert Version(pin.version) in SpecifierSet(pyspark_internals.SUPPORTED)


@pytest.mark.parametrize("version", ["6.2.9", "7.0.0", "5.0", "not-a-version"])
def test_a_spark_provider_outside_the_range_is_refused_with_what_to_install(version):
    with pytest.raises(spark_provider.UnsupportedSparkProvider) as raised:
        spark_provider.check_library(version)
    assert f"{spark_provider.DISTRIBUTION} {version} is installed" in str(raised.value)
    assert spark_provider.INSTALL in str(raised.value)


def test_a_spark_provider_without_an_internal_is_refused_by_name():
    class RenamedHook(SparkSubmitHook):
        def __init__(self, **kwargs):  # a release that renamed the driver id
            self._submitted_driver = None

    class NoGetHook(SparkSubmitOperator):
        _get_hook = None

    with pytest.raises(spark_provider.UnsupportedSparkProvider, match=r"RenamedHook\._connection.*RenamedHook\._driver_id"):
        spark_provider.check_library("6.3.4", RenamedHook, SparkSubmitOperator)
    with pytest.raises(spark_provider.UnsupportedSparkProvider, match=r"NoGetHook\._get_hook\(\)"):
        spark_provider.check_library("6.3.4", SparkSubmitHook, NoGetHook)


@pytest.mark.parametrize("version", ["4.1.1", "4.3.0", "5.0.0", "dev"])
def test_a_pyspark_outside_the_range_is_refused_with_what_to_install(version):
    with pytest.raises(pyspark_internals.UnsupportedPySpark) as raised:
        pyspark_internals.check_library(version)
    assert f"pyspark {version} is installed" in str(raised.value) and pyspark_internals.INSTALL in str(raised.value)


def test_pyspark_internals_are_all_there():
    assert pyspark_internals.missing_internals() == []


def test_no_module_reaches_into_a_librarys_internals_outside_its_adapter():
    """The internals the adapters use appear nowhere else in the package."""
    package = ROOT / "airflow_cdc_provider"
    private = re.compile(r"\._get_hook\(|\._connection\b|\._driver_id|\._build_spark_submit_command|\._java_class"
                         r"|\._spark_binary|\._accumulatorServer|\._explain_string|\._create_converter|\._gateway"
                         r"|\._jvm\b|_BinLog\w*__|_stream_connection|_ctl_connection|_read_packet|\._data\b|\._position\b")
    offenders = [f"{path.relative_to(ROOT)}:{n}" for path in sorted(package.rglob("*.py")) if path.parent.name != "compat"
                 for n, line in enumerate(path.read_text().splitlines(), 1) if private.search(line)]
    assert offenders == []


def test_spark_output_lines_are_logged_at_their_own_level():
    calls = []

    class Recorder:
        def __getattr__(self, level):
            return lambda msg, *args, **kwargs: calls.append((level, msg))

    hook = SparkSubmitHook(conn_id="spark_default")
    hook._log = Recorder()
    spark_provider.log_output_at_its_level(hook)
    for line in ("26/11/25 14:32:00 WARN Utils: Your hostname resolves to a loopback address",
                 "26/11/25 14:32:01 ERROR Executor: Exception in task 0.0", "26/11/25 14:32:01 INFO SparkContext: x",
                 "2026-11-25 14:32:04,480 INFO airflow_cdc.job: Spark session ready", "[0.2s][warning][cds] skipped",
                 "Identified spark driver id: driver-1", "2026-11-25 14:32:05,001 WARNING airflow_cdc.stream: lag",
                 "WARNING: Using incubator modules: jdk.incubator.vector",
                 "26/11/25 14:32:00 WARN NativeCodeLoader: Unable to load native-hadoop library for your platform..."):
        hook.log.info(line)
    hook.log.warning("a warning of the hook's own")
    assert [level for level, _ in calls] == ["warning", "error", "debug", "info", "warning", "info", "warning",
                                             "debug", "debug", "warning"]
    # the task log stamps each line: the line's own time is left out
    assert [msg for _, msg in calls][:4] == [
        "WARN Utils: Your hostname resolves to a loopback address", "ERROR Executor: Exception in task 0.0",
        "INFO SparkContext: x", "INFO airflow_cdc.job: Spark session ready"]
