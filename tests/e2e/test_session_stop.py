"""``stop_session``: a job's exit does not wait for PySpark's accumulator server, and leaves nothing behind
(a new session in the same process works, accumulators included). In a process of its own: the tests'
shared session lives in pytest's."""

from __future__ import annotations

import json
import subprocess
import sys

from airflow_cdc_provider.testing.spark import spark_env

SCRIPT = """
import json
from pyspark import SparkContext
from airflow_cdc_provider.spark.session import spark_session, stop_session

spark = spark_session("stop_session test", master="local[1]")
sc = spark.sparkContext
total = sc.accumulator(0)
sc.parallelize(range(5), 2).foreach(lambda x: total.add(x))  # the JVM now holds a connection to the server
server = sc._accumulatorServer
stop_session(spark)
first = {"total": total.value, "socket_closed": server.socket.fileno() == -1, "told": server.server_shutdown,
         "context_gone": SparkContext._active_spark_context is None, "detached": sc._accumulatorServer is None}
again = spark_session("stop_session test, again", master="local[1]")
ones = again.sparkContext.accumulator(0)
again.sparkContext.parallelize(range(3), 1).foreach(lambda x: ones.add(1))
count = again.range(10).count()
stop_session(again)
print("RESULT " + json.dumps({**first, "again_count": count, "again_accumulated": ones.value}))
"""


def test_stop_session_closes_the_accumulator_server_and_a_new_session_works(tmp_path):
    proc = subprocess.run([sys.executable, "-c", SCRIPT], env=spark_env(), cwd=tmp_path, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    line = next(x for x in proc.stdout.splitlines() if x.startswith("RESULT "))
    assert json.loads(line[len("RESULT "):]) == {
        "total": 10, "socket_closed": True, "told": True, "context_gone": True, "detached": True,
        "again_count": 10, "again_accumulated": 3}
