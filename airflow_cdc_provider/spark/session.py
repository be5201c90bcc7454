"""One SparkSession recipe for every job: UTC, no CHAR padding, the JDBC drivers, quiet progress.

Under spark-submit the master, jars and resources come from the command line (the operator builds it from
the ``spark_default`` connection and YAML). In-process use (the ``verify`` CLI, tests) gets ``local[*]``
with the Debian JDBC driver jars.
"""

from __future__ import annotations

import os
from typing import Any, Mapping

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


def default_jars() -> list[str]:
    return [j for j in (MARIADB_JAR, POSTGRES_JAR) if os.path.exists(j)]


def spark_session(app_name: str, master: str | None = None, conf: Mapping[str, Any] | None = None):
    from pyspark.sql import SparkSession

    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    # Under spark-submit the driver is started by the JVM's PythonRunner, which hands it the gateway port;
    # SparkConf() cannot tell before the gateway is up (it would see no spark.master and we would run local).
    submitted = "PYSPARK_GATEWAY_PORT" in os.environ
    builder = SparkSession.builder.appName(app_name)
    if not submitted:
        builder = builder.master(master or "local[*]").config("spark.jars", ",".join(default_jars()))
        builder = builder.config("spark.driver.memory", "1g").config("spark.ui.enabled", "false")
    for k, v in {**BASE_CONF, **dict(conf or {})}.items():
        builder = builder.config(k, str(v))
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    return spark
