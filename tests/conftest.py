"""Shared fixtures: one private MariaDB (and PostgreSQL) per test session, one fresh database per test.

The tiers are folders: ``unit`` needs no service (``make test-fast``), ``component`` starts MariaDB and
PostgreSQL, ``e2e`` runs Spark jobs and Airflow DAGs against them.
"""

from __future__ import annotations

import collections
import contextlib
import itertools
import os
import re
import time
from dataclasses import dataclass
from typing import Any, Iterator

import pymysql
import pytest

from airflow_cdc_provider.source.settings import ConnectionSettings
from airflow_cdc_provider.spark.launch.class_archive import ARCHIVE_DIR_ENV
from airflow_cdc_provider.testing.mariadb import PrivateMariaDB
from airflow_cdc_provider.testing.postgres import PrivatePostgres

# Spark hands TimestampType values to Python in the process's local zone; compare in UTC.
os.environ["TZ"] = "UTC"
time.tzset()
# The JVMs the tests start (spark-submit drivers, Connect servers, the in-process session) compile with C1 only:
# a job over test-sized data ends before C2's compilations pay for themselves, and on a small machine its
# compiler threads take the cores the job's start needs. Behaviour does not depend on the JIT.
os.environ.setdefault("SPARK_SUBMIT_OPTS", "-XX:TieredStopAtLevel=1")

TIERS = ("unit", "component", "e2e")
_db_counter = itertools.count(1)
_server_ids = itertools.count(7001)


@pytest.fixture(scope="session", autouse=True)
def class_archive_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The JVM class archives of this test run's spark-submits, one directory for all its workers: the first
    job of each kind dumps its archive, every later one maps it; the user's own cache is left alone."""
    old = os.environ.get(ARCHIVE_DIR_ENV)
    base = tmp_path_factory.getbasetemp()
    run = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base  # the run's folder holds each worker's
    (run / "jvm-class-archives").mkdir(exist_ok=True)
    os.environ[ARCHIVE_DIR_ENV] = str(run / "jvm-class-archives")
    try:
        yield os.environ[ARCHIVE_DIR_ENV]
    finally:
        if old is None:
            os.environ.pop(ARCHIVE_DIR_ENV, None)
        else:
            os.environ[ARCHIVE_DIR_ENV] = old


def _tier(item) -> str | None:
    return next((t for t in TIERS if f"/tests/{t}/" in str(item.fspath)), None)


def pytest_collection_modifyitems(items):
    """Marks each test with its tier, and orders the files slowest tier first (e2e, component, unit), the files
    of a tier by their number of tests, most first. pytest-xdist hands the files out in this order
    (``--dist loadfile --no-loadscope-reorder``), so the run ends on many short files that keep both workers
    busy, not on one worker's long e2e file while the other has nothing left."""
    per_file = collections.Counter(str(item.fspath) for item in items)
    slowest_first = {t: -i for i, t in enumerate(TIERS)}
    for item in items:
        if tier := _tier(item):
            item.add_marker(getattr(pytest.mark, tier))
    # stable: a file's tests keep their order
    items.sort(key=lambda item: (slowest_first.get(_tier(item), 1), -per_file[str(item.fspath)], str(item.fspath)))


@pytest.fixture(scope="module")
def local_spark(request: pytest.FixtureRequest):
    """An in-process ``local[1]`` Spark session for a module's checks, stopped after it. A worker process that
    ran an e2e file already holds that tier's session (``local[2]``, kept for the whole run): the module gets
    that one, and leaves it running."""
    import logging
    import sys

    from pyspark import SparkContext

    from airflow_cdc_provider.spark.session import spark_session, stop_session

    logging.getLogger("py4j").setLevel(logging.WARNING)  # its INFO lines at exit hit closed pytest streams
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # its Python workers: this venv's, as the jobs' are
    running = SparkContext._active_spark_context is not None
    s = spark_session(f"airflow-cdc {request.module.__name__}", master="local[1]")
    yield s
    if not running:
        stop_session(s)


@pytest.fixture(scope="session")
def postgres() -> Iterator[PrivatePostgres]:
    pg = PrivatePostgres()
    pg.start()
    try:
        yield pg
    finally:
        pg.cleanup()


@pytest.fixture(scope="session")
def mariadb() -> Iterator[PrivateMariaDB]:
    server = PrivateMariaDB()
    server.start()
    try:
        yield server
    finally:
        server.cleanup()


@dataclass
class SourceDB:
    """A database of its own on the private server, with an 'application' connection to write data and
    the settings of the least-privileged CDC user."""

    server: PrivateMariaDB
    name: str
    app: pymysql.connections.Connection
    settings: ConnectionSettings

    def execute(self, sql: str, params: Any = None) -> list[tuple]:
        with self.app.cursor() as cur:
            cur.execute(sql, params)
            return list(cur.fetchall())

    def executemany(self, sql: str, rows: list) -> None:
        with self.app.cursor() as cur:
            cur.executemany(sql, rows)

    def table(self, name: str) -> str:
        return f"{self.name}.{name}"

    def reconnect(self) -> None:
        """A new application connection (after a server restart)."""
        self.app.close()
        self.app = self.server.app_connection(self.name)

    def analyze(self, table: str) -> None:
        self.execute(f"ANALYZE TABLE `{table}`")

    @contextlib.contextmanager
    def connection(self) -> Iterator[pymysql.connections.Connection]:
        conn = pymysql.connect(**self.settings.pymysql_kwargs())
        try:
            yield conn
        finally:
            conn.close()


@pytest.fixture
def source_db(mariadb: PrivateMariaDB, request: pytest.FixtureRequest) -> Iterator[SourceDB]:
    slug = re.sub(r"[^a-z0-9]+", "_", request.node.name.lower())[:40]
    name = f"t{next(_db_counter)}_{slug}"
    mariadb.create_database(name)
    app = mariadb.app_connection(name)
    settings = ConnectionSettings.from_airflow_conn(mariadb.connection_uri(), conn_id="cdc_source")
    db = SourceDB(mariadb, name, app, settings)
    try:
        yield db
    finally:
        db.app.close()
        mariadb.drop_database(name)


@pytest.fixture
def server_id() -> int:
    """A replica server id no other reader of this session uses."""
    return next(_server_ids)
