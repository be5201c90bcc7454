"""One SparkSession recipe for every job: UTC, no CHAR padding, the JDBC drivers, quiet progress.

Under spark-submit the master, jars and resources come from the command line (the operator builds it from
the ``spark_default`` connection and YAML). In-process use (the ``verify`` CLI, tests) gets ``local[*]``
with the Debian JDBC driver jars. ``connect_session`` is the same recipe on a long-lived Spark Connect
server (opt-in, ``spark.connect_conn_id``): the job's driver code runs in the calling process and pays no
JVM start.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import socket
from typing import Any, Mapping
from urllib.parse import urlparse

from airflow_cdc_provider.compat import pyspark_internals

log = logging.getLogger("airflow_cdc.session")

MARIADB_JAR = "/usr/share/java/mariadb-java-client.jar"
POSTGRES_JAR = "/usr/share/java/postgresql.jar"

BASE_CONF = {
    # TIMESTAMP columns are read as UTC text and cast by Spark: the session zone must be UTC.
    "spark.sql.session.timeZone": "UTC",
    # Spark 4 pads CHAR(n) to n characters on read; MySQL does not (feasibility P6).
    "spark.sql.readSideCharPadding": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.shuffle.partitions": "8",
}

# Settings of the driver our jobs start (spark-submit, in-process sessions); a job's own ``spark.conf`` wins.
# Spark's mllib jar registers a session extension found on the class path (ServiceLoader), its internal ML
# functions, and registering them starts Scala reflection, most of a session's start (docs/performance.md).
# Our jobs call none of them; extensions named in ``spark.sql.extensions`` (Delta, Iceberg, ...) still load.
# A static setting: it cannot be set on a running server's session (Spark Connect).
DRIVER_CONF = {"spark.sql.extensions.test.loadFromCp": "false"}

DEFAULT_CONNECT_PORT = 15002
_CONNECT_ENV = ("SPARK_CONNECT_MODE_ENABLED", "SPARK_REMOTE")
# Spark Connect shows every statement's plan in the server's UI and event log, JDBC options included; this
# session conf redacts the values of ``password`` options there (their keys are what the regex matches).
SECRET_REDACTION_REGEX = r'(?i)(key: "[a-z._]*password"\s*value: )"(?:[^"\\]|\\.)*"'


def default_jars() -> list[str]:
    return [j for j in (MARIADB_JAR, POSTGRES_JAR) if os.path.exists(j)]


def with_driver_conf(conf: Mapping[str, Any] | None) -> dict[str, Any]:
    """``conf`` (a job's Spark settings) over ``DRIVER_CONF``: the job's own values win."""
    return {**DRIVER_CONF, **dict(conf or {})}


def spark_session(app_name: str, master: str | None = None, conf: Mapping[str, Any] | None = None):
    from pyspark.sql import SparkSession

    pyspark_internals.check_supported()
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    # Under spark-submit the driver is started by the JVM's PythonRunner, which hands it the gateway port;
    # SparkConf() cannot tell before the gateway is up (it would see no spark.master and we would run local).
    submitted = "PYSPARK_GATEWAY_PORT" in os.environ
    builder = SparkSession.builder.appName(app_name)
    if not submitted:
        builder = builder.master(master or "local[*]").config("spark.jars", ",".join(default_jars()))
        builder = builder.config("spark.driver.memory", "1g").config("spark.ui.enabled", "false")
    settings = {**BASE_CONF, **dict(conf or {})}
    # under spark-submit the operator put DRIVER_CONF on the command line, under the job's own spark.conf
    for k, v in (settings if submitted else with_driver_conf(settings)).items():
        builder = builder.config(k, str(v))
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    return spark


def stop_session(spark) -> None:
    """``spark.stop()`` without waiting for PySpark's accumulator server to notice it.

    ``SparkContext.stop()`` ends with ``shutdown()`` of the driver's accumulator server, which waits for its
    thread; that thread sits in a handler polling the JVM's connection with a one-second timeout, so every
    job's exit waited up to a second. After the JVM context is stopped no update can
    come; the server is told to stop and its socket closed, and its daemon thread ends at its next poll."""
    server = None if is_connect(spark) else pyspark_internals.detach_accumulator_server(spark.sparkContext)
    try:
        spark.stop()
    finally:
        if server is not None:
            pyspark_internals.close_accumulator_server(server)


def is_connect(spark) -> bool:
    """A Spark Connect session (no SparkContext, no JVM in this process)."""
    return type(spark).__module__.startswith("pyspark.sql.connect")


def observation(spark, name: str):
    """A named ``Observation`` of the session's kind (classic or Connect)."""
    if is_connect(spark):
        from pyspark.sql.connect.observation import Observation
    else:
        from pyspark.sql import Observation
    return Observation(name)


def local_cores(spark) -> int | None:
    """The cores of a ``local[...]`` master running in this process (its executors are this machine), else None
    (a cluster's executors, or a Spark Connect server's, are elsewhere)."""
    if is_connect(spark) or not spark.sparkContext.master.startswith("local"):
        return None
    return spark.sparkContext.defaultParallelism


def session_conf(conf: Mapping[str, Any] | None) -> dict[str, str]:
    """The settings a Spark Connect session may set for a job: ``BASE_CONF`` and ``conf``, SQL settings only
    (the others are the server's)."""
    return {k: str(v) for k, v in {**BASE_CONF, **dict(conf or {})}.items() if k.startswith("spark.sql.")}


def default_parallelism(spark) -> int:
    """How many tasks a read should be split into: the SparkContext's default parallelism. A Connect client
    cannot ask for it; Spark splits a ``range`` by it when it analyses the plan, so the plan says it (no job
    runs); if that text is not understood, a small job counts the partitions of such a range."""
    if not is_connect(spark):
        return spark.sparkContext.defaultParallelism
    from pyspark.sql import functions as F

    probe = spark.range(0, 1 << 16)
    plan = pyspark_internals.plan_text(probe)
    m = re.search(r"Range \(0, 65536, step=1, splits=(\d+)\)", plan) if plan else None
    if m:
        return int(m.group(1))
    return int(probe.select(F.spark_partition_id().alias("p")).agg(F.max("p")).first()[0]) + 1


def check_reachable(url: str, timeout: float = 10.0) -> None:
    """Raise ``ConnectionError`` at once if nothing accepts connections at the server of ``url``: the Connect
    client would retry an unreachable server with backoff for many minutes before it gives up."""
    parsed = urlparse(url)
    host, port = parsed.hostname or "localhost", parsed.port or DEFAULT_CONNECT_PORT
    try:
        socket.create_connection((host, port), timeout=timeout).close()
    except OSError as exc:
        raise ConnectionError(f"nothing accepts connections at {host}:{port} ({exc})") from None


@contextlib.contextmanager
def connect_session(url: str, conf: Mapping[str, Any] | None = None, artifacts: list[str] | None = None):
    """A new session on the Spark Connect server at ``url`` (``sc://host:port/;token=...``) with
    ``session_conf(conf)`` (the keys of ``conf`` a session cannot set are the server's: a warning names them);
    ``artifacts`` (Python archives) go to the session so that its executors can import them.

    pyspark marks the whole process as a Connect client in its environment (``SPARK_CONNECT_MODE_ENABLED``)
    and leaves the mark after ``stop()``; a spark-submit started later from this process (the stream task
    under ``dag.test()``) would inherit it and its driver would look for a Connect URL. So the environment is
    put back when the session ends."""
    from pyspark.sql import SparkSession

    pyspark_internals.check_supported()
    check_reachable(url)
    saved = {k: os.environ.get(k) for k in _CONNECT_ENV}
    try:
        spark = SparkSession.builder.remote(url).create()
        try:
            # first, before any plan carries a password
            spark.conf.set("spark.sql.redaction.string.regex", SECRET_REDACTION_REGEX)
            settable = session_conf(conf)
            static = {k for k in settable if not spark.conf.isModifiable(k)}  # the server's: setting one fails
            for k, v in settable.items():
                if k not in static:
                    spark.conf.set(k, v)
            ignored = sorted(k for k in (conf or {}) if k not in settable or k in static)
            if ignored:
                log.warning("spark.conf %s: the Spark Connect server's own settings apply, not these (only "
                            "runtime spark.sql.* keys become session settings)", ", ".join(ignored))
            if artifacts:
                spark.addArtifacts(*artifacts, pyfile=True)
            yield spark
        finally:
            spark.stop()
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
