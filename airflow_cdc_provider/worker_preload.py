"""What a Spark Connect mode task imports, imported once by the Airflow worker instead of once by every task.

Airflow 3 runs each task in a fork of its worker's process (LocalExecutor and CeleryExecutor on Linux), and a
fork starts with every module its parent had imported. With ``spark.connect_conn_id`` a chunk task and the
``available_now`` stream task run their job in the task's own process, as a client of the Connect server:
each imports the Connect client (pandas, pyarrow and grpc with it) and our job code, a noticeable part of a
chunk task (docs/performance.md). Imported by the worker, the tasks start with it.

Use it from ``$AIRFLOW_HOME/config/airflow_local_settings.py``, which every Airflow process imports at its
start (the scheduler, whose LocalExecutor workers fork from it, a Celery worker, the DAG processor, ...)::

    import airflow_cdc_provider.worker_preload  # noqa: F401

Each of those processes then starts a little later and holds the client's memory (shared with its forks until
they write to it). Tasks that spark-submit their job do not need it: their job runs in spark-submit's process.

Nothing here imports Airflow: the local settings are imported while Airflow's own settings initialise. A
missing Connect dependency is logged, not raised, so that Airflow still starts; a Connect task names it too.
"""

from __future__ import annotations

import logging

log = logging.getLogger(__name__)

try:
    import pyspark.sql.connect.session  # noqa: F401 - the Connect client, with pandas, pyarrow and grpc

    from airflow_cdc_provider.spark import session, snapshot, stream  # noqa: F401 - the chunk and stream jobs a Connect task runs
except ImportError as exc:
    log.warning("airflow_cdc_provider.worker_preload: cannot import the Spark Connect client (%s); tasks with "
                "spark.connect_conn_id will fail the same way: install pyspark-client's Connect dependencies "
                "(pandas, pyarrow, grpcio, grpcio-status, googleapis-common-protos) in the workers' environment",
                exc)
