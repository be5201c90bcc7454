import os
import time

import pytest

from airflow_cdc_provider.testing.postgres import PrivatePostgres

# Spark hands TimestampType values to Python in the process's local zone; compare in UTC.
os.environ["TZ"] = "UTC"
time.tzset()


def pytest_collection_modifyitems(items):
    for item in items:
        if "/integration/" in str(item.fspath):
            item.add_marker(pytest.mark.integration)


@pytest.fixture(scope="session")
def postgres():
    pg = PrivatePostgres()
    pg.start()
    try:
        yield pg
    finally:
        pg.cleanup()


@pytest.fixture(scope="session")
def spark():
    """One in-process Spark session for the tests' own checks (jobs under test run with spark-submit)."""
    import logging

    from airflow_cdc_provider.spark.session import spark_session

    logging.getLogger("py4j").setLevel(logging.WARNING)  # its INFO lines at exit hit closed pytest streams
    s = spark_session("airflow-cdc tests", master="local[2]")
    yield s
    s.stop()
