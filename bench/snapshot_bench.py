"""Snapshot benchmark: our chunk snapshot job vs a plain Spark JDBC reload of the same sysbench table,
measured in the same run on the same private MariaDB (buffer pool warmed by a first untimed scan).

    python bench/snapshot_bench.py [--rows 1000000] [--chunk-size 250000]

Prints rows/s of both and the ratio (ours / baseline wall time). Both are whole spark-submit runs, JVM
start included, local[2]."""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from airflow_cdc_provider.core.chunks import SplitOptions  # noqa: E402
from airflow_cdc_provider.jobspec import JobSpec, connection_fields  # noqa: E402
from airflow_cdc_provider.mysql.planner import plan_chunks  # noqa: E402
from airflow_cdc_provider.mysql.settings import ConnectionSettings  # noqa: E402
from airflow_cdc_provider.spark.session import default_jars  # noqa: E402
from airflow_cdc_provider.testing.mariadb import PrivateMariaDB  # noqa: E402
from airflow_cdc_provider.testing.spark import spark_env, spark_submit_binary, submit  # noqa: E402


def sysbench_prepare(m: PrivateMariaDB, rows: int) -> None:
    m.create_database("sbtest")
    subprocess.run(["sysbench", "--db-driver=mysql", "--mysql-host=127.0.0.1", f"--mysql-port={m.port}",
                    f"--mysql-user={m.app.user}", f"--mysql-password={m.app.password}", "--mysql-db=sbtest",
                    "oltp_read_write", "--tables=1", f"--table-size={rows}", "prepare"],
                   check=True, stdout=subprocess.DEVNULL)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--chunk-size", type=int, default=250_000)
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="airflow-cdc-bench-"))
    with PrivateMariaDB(extra_args=["--innodb-buffer-pool-size=1G"]) as m:
        t = time.monotonic()
        sysbench_prepare(m, args.rows)
        print(f"sysbench prepare {args.rows} rows: {time.monotonic() - t:.1f}s")
        settings = ConnectionSettings.from_airflow_conn(m.connection_uri(), "bench")
        with m.app_connection("sbtest") as c, c.cursor() as cur:  # warm the buffer pool
            cur.execute("SELECT COUNT(*), SUM(LENGTH(c)) FROM sbtest1")

        t = time.monotonic()
        plain = subprocess.run(
            [spark_submit_binary(), "--master", "local[2]", "--conf", "spark.ui.enabled=false", "--driver-memory", "1g",
             "--jars", ",".join(default_jars()), str(ROOT / "bench" / "plain_jdbc_reload.py"),
             f"jdbc:mysql://127.0.0.1:{m.port}/?permitMysqlScheme", "sbtest.sbtest1", "1", str(args.rows),
             str(work / "plain")],
            env=spark_env({"BENCH_USER": settings.user, "BENCH_PASSWORD": settings.password}),
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        t_plain = time.monotonic() - t
        assert plain.returncode == 0, "baseline failed"

        t = time.monotonic()
        plan = plan_chunks(settings, ["sbtest.sbtest1"], SplitOptions(args.chunk_size))
        chunks = [{**c.to_dict(), "epoch": 1} for c in plan.chunks]
        spec = JobSpec("bench", connection_fields(settings), {"sbtest.sbtest1": {}},
                       {"type": "parquet", "path": str(work / "ours")}, str(work / "state"), 9901, chunks=chunks)
        res = submit("snapshot_chunk", spec, {"source_password": settings.password}, work / "jobs", timeout=1800)
        t_ours = time.monotonic() - t
        assert res.returncode == 0, f"snapshot job failed, see {work / 'jobs'}"

    print()
    print(f"{'scenario':<44}{'rows':>10}{'ours s':>9}{'base s':>9}{'ours r/s':>11}{'base r/s':>11}{'ratio':>7}")
    print(f"{'snapshot (' + str(len(chunks)) + ' chunks, 1 job) vs plain JDBC reload':<44}{args.rows:>10}"
          f"{t_ours:>9.1f}{t_plain:>9.1f}{args.rows / t_ours:>11.0f}{args.rows / t_plain:>11.0f}{t_ours / t_plain:>7.2f}")
    print("ratio = our wall time / baseline wall time (both full spark-submit runs, local[2], same machine and run)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
