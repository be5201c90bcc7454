"""The one place that reaches into PySpark's internals.

Our jobs lean on a few things PySpark has no public API for: closing a driver's accumulator server without
waiting for its polling thread (a job's exit), the plan text of a Connect DataFrame (how many tasks a range
splits into, without running a job), Spark's converter of one Python value to Arrow (the binlog source's
Arrow batches), the driver JVM's gateway (a JVM shutdown hook for a graceful stop on SIGTERM; telling Spark
there are no other Python data sources to look up). These functions do it for the PySpark versions in
``SUPPORTED``; ``check_supported`` refuses any other version with the fix, instead of an ``AttributeError``
in the middle of a job. Each caller keeps a plain fallback where one exists.
"""

from __future__ import annotations

import inspect
from typing import Any, Callable

from airflow_cdc_provider.compat import versions

SUPPORTED = ">=4.2,<4.3"  # setup.cfg pins pyspark (and pyspark-client) inside this range
INSTALL = "pip install 'pyspark==4.2.0' 'pyspark-client==4.2.0' (the same version of both)"

_supported = False  # check_supported passed once in this process


class UnsupportedPySpark(versions.UnsupportedLibrary):
    """The installed PySpark is not one whose internals this provider was written against."""


def missing_internals() -> list[str]:
    """The internals this module uses that the installed PySpark lacks."""
    import pyspark.java_gateway
    from pyspark import SparkContext
    from pyspark.sql.connect.dataframe import DataFrame as ConnectDataFrame
    from pyspark.sql.conversion import LocalDataToArrowConversion

    missing = []
    if "self._accumulatorServer" not in inspect.getsource(SparkContext):
        missing.append("SparkContext._accumulatorServer")
    for owner, name in ((SparkContext, "_gateway"), (SparkContext, "_jvm"),
                        (LocalDataToArrowConversion, "_create_converter"), (ConnectDataFrame, "_explain_string"),
                        (pyspark.java_gateway, "ensure_callback_server_started")):
        if not hasattr(owner, name):
            missing.append(f"{getattr(owner, '__name__', owner)}.{name}")
    return missing


def check_library(version: str) -> None:
    """Raise ``UnsupportedPySpark`` unless ``version`` is in ``SUPPORTED`` and nothing used here is missing."""
    versions.require("pyspark", version, SUPPORTED, INSTALL, "runs its jobs with some of its internals",
                     missing_internals, UnsupportedPySpark)


def check_supported() -> None:
    """Refuse an unsupported PySpark before a job relies on its internals (once per process)."""
    global _supported
    if not _supported:
        import pyspark

        check_library(pyspark.__version__)
        _supported = True


def detach_accumulator_server(spark_context: Any) -> Any:
    """Take the driver's accumulator server out of the SparkContext (so ``stop`` does not wait for it) and
    return it, or None."""
    server = getattr(spark_context, "_accumulatorServer", None)
    if server is not None:
        spark_context._accumulatorServer = None
    return server


def close_accumulator_server(server: Any) -> None:
    """Tell a detached accumulator server to stop and close its socket; its daemon thread ends at its next
    poll."""
    server.server_shutdown = True
    server.server_close()


def plan_text(df: Any) -> str | None:
    """The physical plan of a Connect DataFrame as ``explain()`` prints it, or None if this PySpark cannot say."""
    explain = getattr(df, "_explain_string", None)
    return explain(extended=False) if explain else None


def arrow_converter(data_type: Any) -> Callable[[Any], Any]:
    """Spark's own conversion of one Python value of ``data_type`` into what Arrow takes."""
    from pyspark.sql.conversion import LocalDataToArrowConversion

    return LocalDataToArrowConversion._create_converter(data_type)


def driver_jvm(spark: Any) -> Any:
    """The py4j view of a classic session's driver JVM."""
    return spark.sparkContext._jvm


def jvm_with_callbacks(spark: Any) -> Any:
    """The driver JVM's py4j view, with the callback server running, so Java can call Python objects
    (a Python ``Runnable`` as a JVM shutdown hook)."""
    from pyspark.java_gateway import ensure_callback_server_started

    gateway = spark.sparkContext._gateway
    ensure_callback_server_started(gateway)
    return gateway.jvm


def skip_python_data_source_lookup(spark: Any) -> None:
    """Tell a classic session's Spark that there are no installed Python data sources to look up (their first
    lookup starts a Python process that imports every ``pyspark_*`` module it finds). Left alone when the
    lookup already ran; raises whatever py4j raises when the JVM side changed (the caller logs and goes on)."""
    jvm = driver_jvm(spark)
    manager = getattr(getattr(jvm, "org.apache.spark.sql.execution.datasources.DataSourceManager$"), "MODULE$")
    if manager.dataSourceBuilders().isEmpty():
        empty = getattr(getattr(jvm, "scala.collection.immutable.Map$"), "MODULE$").empty()
        getattr(manager, "dataSourceBuilders_$eq")(jvm.scala.Some(empty))
