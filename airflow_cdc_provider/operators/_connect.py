"""Spark Connect mode (opt-in, ``spark.connect_conn_id``): an operator runs its job in the task's own process
as a session of a long-lived Spark Connect server, instead of one spark-submit (JVM start and session) each."""

from __future__ import annotations

import contextlib
import sys
import time
from typing import Any, Iterator

from airflow_cdc_provider.operators.frozen_heap import frozen_heap


@contextlib.contextmanager
def job_session(task, pipeline, ship_package: bool, what: str) -> Iterator[Any]:
    """A new session of the server named by ``task.connect_conn_id``, with ``task.conf``, for one job attempt,
    set as ``task._connect_session`` while it lasts (``interrupt`` stops its Spark jobs). ``ship_package``:
    the server's Python workers run our code, so the package archive goes to the session. An unreachable
    server fails at once, naming the key. Logs how long the session lasted, from after the client's import
    to its stop: the task's time beyond it is Airflow's, this operator's and the client's import."""
    from airflow.providers.apache.spark.hooks.spark_connect import SparkConnectHook

    from airflow_cdc_provider.spark.launch.package import package_archive
    from airflow_cdc_provider.spark.session import connect_session

    conn_id, conf = task.connect_conn_id, task.conf
    artifacts = [str(package_archive(pipeline.state.local_dir("dist")))] if ship_package else []
    url = SparkConnectHook(conn_id).get_connection_url()
    where = url.split("/;", 1)[0]  # without the token
    with contextlib.ExitStack() as stack:
        # the operators' execute already runs frozen (with_frozen_heap); nested, this one only adds ``freeze``
        # for the client's modules below, and keeps job_session right for a caller that did not freeze
        freeze = stack.enter_context(frozen_heap())
        if "pyspark.sql.connect.session" not in sys.modules:  # not preloaded by the worker: say what that costs
            t0 = time.monotonic()
            import pyspark.sql.connect.session  # noqa: F401 - the client (pandas included), timed apart from the session
            task.log.info("%s: imported the Spark Connect client in %.2f s; an Airflow worker can import it once "
                          "for all its tasks (airflow_local_settings.py: import airflow_cdc_provider.worker_preload)",
                          what, time.monotonic() - t0)

        started, opened = time.monotonic(), False
        stack.callback(lambda: opened and task.log.info("%s: Spark Connect session ran %.2f s (open to stop)", what,
                                                        time.monotonic() - started))
        try:
            spark = stack.enter_context(connect_session(url, conf=conf, artifacts=artifacts))
        except Exception as exc:  # noqa: BLE001 - gRPC errors of every kind mean the same to the user
            raise RuntimeError(
                f"spark.connect_conn_id {conn_id!r}: cannot open a session on the Spark Connect server {where} "
                f"({type(exc).__name__}: {str(exc).splitlines()[0][:300]}); start the server (spark-submit --class "
                "org.apache.spark.sql.connect.service.SparkConnectServer) or remove spark.connect_conn_id to run "
                f"the {what} with spark-submit") from None
        opened = True
        freeze()  # the Connect client's modules, imported by the session, are the process's too
        task.log.info("%s on Spark Connect %s (session %s)", what, where, spark.session_id)
        task._connect_session = spark
        try:
            yield spark
        finally:
            task._connect_session = None


def interrupt(task) -> bool:
    """``on_kill`` on Connect: the server stops the session's running Spark jobs. False if no session is open."""
    spark = getattr(task, "_connect_session", None)
    if spark is None:
        return False
    spark.interruptAll()
    return True
