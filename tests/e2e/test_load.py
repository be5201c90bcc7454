"""Load: sysbench oltp_write_only at a fixed rate during the whole snapshot phase and the first stream
batches of the real DAG (dag.test), over a sysbench table and a table with a composite string key. After the
load stops and the stream catches up: `airflow-cdc verify` says equal for every table, and each table's
parquet changelog holds every committed change exactly once, checked against the binlog itself."""

from __future__ import annotations

import contextlib
import random
import signal
import subprocess
import sys
import threading
from pathlib import Path

from airflow_cdc_provider.state.store import StateStore
from airflow_cdc_provider.testing.airflow_run import run_dag
from airflow_cdc_provider.testing.sysbench import sysbench

from .cdc_helpers import write_pipeline
from .conftest import scale
from .test_spark_jobs import changelog, expected_changelog

CLI = str(Path(sys.executable).parent / "airflow-cdc")


class RegionWriter(threading.Thread):
    """Updates, inserts and deletes rows of ``regions (region, code)`` at roughly ``rate`` per second."""

    def __init__(self, mariadb, db: str, rate: float) -> None:
        super().__init__(daemon=True)
        self.mariadb, self.db, self.rate = mariadb, db, rate
        self.stop = threading.Event()
        self.ops = 0
        self.rng = random.Random(11)

    def run(self) -> None:
        with contextlib.closing(self.mariadb.app_connection(self.db)) as conn, conn.cursor() as cur:
            while not self.stop.wait(1.0 / self.rate):
                region, code = self.rng.choice(REGIONS), f"c{self.rng.randrange(0, 3000):05d}"
                op = self.rng.random()
                if op < 0.5:
                    cur.execute("UPDATE regions SET qty = qty + 1 WHERE region = %s AND code = %s", (region, code))
                elif op < 0.8:
                    cur.execute("INSERT IGNORE INTO regions VALUES (%s, %s, 1)", (region, code))
                else:
                    cur.execute("DELETE FROM regions WHERE region = %s AND code = %s", (region, code))
                self.ops += 1


REGIONS = ["apac", "emea", "latam", "na"]


def test_sysbench_load_during_snapshot_and_stream(airflow_home, source_db, mariadb, tmp_path, spark, scenario):
    env, dags, pipelines = airflow_home
    n = scale(100_000, 1_000_000)
    sysbench(mariadb, source_db.name, "prepare", n)
    source_db.execute("CREATE TABLE regions (region VARCHAR(8), code VARCHAR(8), qty INT, PRIMARY KEY (region, code))")
    source_db.executemany("INSERT INTO regions VALUES (%s, %s, 0)", [(r, f"c{i:05d}") for r in REGIONS for i in range(0, 3000, 2)])
    config = write_pipeline(pipelines, source_db, tmp_path, tables=("sbtest1", "regions"), chunk_size=n // 4)

    load = sysbench(mariadb, source_db.name, "run", n, "--rate=100", "--threads=2", "--time=0", "--events=0",
                    "--report-interval=1", background=True)
    regions = RegionWriter(mariadb, source_db.name, rate=50)
    regions.start()
    try:
        run1 = run_dag(env, dags, "shop_cdc", log_file=tmp_path / "run1.log")
    finally:
        load.send_signal(signal.SIGINT)
        load_out = load.communicate(timeout=60)[0]
        regions.stop.set()
        regions.join(30)
    assert run1["state"] == "success", run1
    chunk_tasks = [t for t in run1["tis"] if t["task_id"] == "snapshot_chunk"]  # both tables fit one task
    assert len(chunk_tasks) == 1 and chunk_tasks[0]["label"].startswith(f"{source_db.table('sbtest1')} and 1 more table (")
    # "[ 12s ] thds: 2 tps: 99.97 ..." once a second (SIGINT skips sysbench's final summary)
    transactions = sum(float(line.split(" tps: ")[1].split()[0]) for line in load_out.splitlines() if " tps: " in line)
    assert transactions > 100 and regions.ops > 100, load_out[-2000:]
    run2 = run_dag(env, dags, "shop_cdc", log_file=tmp_path / "run2.log")
    assert run2["state"] == "success", run2

    verify = subprocess.run([CLI, "verify", str(config)], env=env, capture_output=True, text=True, timeout=900)
    assert verify.returncode == 0, verify.stdout + verify.stderr[-3000:]
    assert verify.stdout.count("EQUAL") == 2 and "source == sink" in verify.stdout

    seed = StateStore(tmp_path / "state").read_seed()
    changes = 0
    for table, key in (("sbtest1", ("id",)), ("regions", ("region", "code"))):
        name = source_db.table(table)
        got = changelog(spark, str(tmp_path / "sink"), name, key)
        assert len(got) == len(set(got)), f"{table}: a change was emitted twice"
        want = expected_changelog(source_db, seed, name, 9_999)
        assert sorted(got) == sorted(want), f"{table}: {len(got)} changes in the changelog, {len(want)} in the binlog"
        changes += len(got)
    assert changes > 500
    scenario.update(rows=n + 6000, changes=changes)
