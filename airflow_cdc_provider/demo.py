"""``make demo``: the whole product on the embedded defaults, in a few minutes on 2 cores.
``make demo SINK=delta`` (``--sink delta``) runs the same demo into the delta sink instead of the parquet one;
``--orders N`` sizes the orders table (default 200,000).

1. a private MariaDB with a ROW/FULL binlog and a demo database (orders: 200k rows; customers: a string key);
2. the example pipeline YAML -> Airflow DAG (SQLite metadata DB under .demo/airflow), run with dag.test():
   mapped snapshot chunk tasks (spark-submit, local[2]) -> collect watermarks -> binlog stream (available_now)
   into the parquet sink (or the delta sink);
3. inserts, updates and deletes on the source, then the DAG again: no re-snapshot, the stream resumes;
4. ``airflow-cdc verify``: source == sink.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from airflow_cdc_provider.testing.airflow_run import airflow_env, install_dag_files, migrate, run_dag
from airflow_cdc_provider.testing.mariadb import PrivateMariaDB

ROOT = Path(__file__).resolve().parent.parent
DEMO = Path(os.environ.get("AIRFLOW_CDC_DEMO_DIR", ROOT / ".demo"))
ORDERS = 200_000
# what each sink keeps under the demo's sink directory
SINK_LAYOUTS = {"parquet": "per table snapshot/ and changes/", "delta": "one Delta table per source table"}


def step(text: str) -> None:
    print(f"\n==> {text}", flush=True)


def show_run(result: dict, seconds: float) -> None:
    print(f"    DAG run {result['run_id']}: {result['state']} in {seconds:.0f}s")
    for ti in sorted(result["tis"], key=lambda t: (t["task_id"] != "validate_source", t["task_id"], t["map_index"])):
        label = f" {ti['label']}" if ti["map_index"] >= 0 else ""
        print(f"      {ti['task_id']:<20}{label:<40} {ti['state']}")
    for key, value in sorted(result["xcom"].items()):
        if key.startswith("snapshot_chunk["):
            for r in value:
                print(f"      chunk {r['split_id']:<24} rows {r['rows']:>7}  window changes {r['window_events_applied']:>3}  "
                      f"HW {r['high_watermark']['file']}:{r['high_watermark']['pos']}")
    s = result["xcom"].get("stream[-1]")
    if s:
        print(f"      stream: {s['rows_emitted']} change(s) in {s['batches']} batch(es), now at "
              f"{s['last_offset']['file']}:{s['last_offset']['pos']}" if s.get("last_offset") else f"      stream: {s}")


def run_and_show(env: dict, n: int) -> bool:
    t = time.monotonic()
    result = run_dag(env, DEMO / "dags", "demo_cdc", log_file=DEMO / f"run{n}.log")
    show_run(result, time.monotonic() - t)
    if result["state"] != "success":
        print(f"    see {DEMO / f'run{n}.log'}")
    return result["state"] == "success"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m airflow_cdc_provider.demo", description=__doc__.splitlines()[0])
    ap.add_argument("--sink", choices=sorted(SINK_LAYOUTS), default="parquet", help="the sink type (default parquet)")
    ap.add_argument("--orders", type=int, default=ORDERS, help=f"rows in demo.orders (default {ORDERS})")
    args = ap.parse_args(argv)
    sink, orders = args.sink, args.orders
    if orders < 1000:
        ap.error("--orders: at least 1000 rows (the demo updates and deletes a share of them)")
    shutil.rmtree(DEMO, ignore_errors=True)
    (DEMO / "dags").mkdir(parents=True)
    (DEMO / "pipelines").mkdir()
    with PrivateMariaDB(base_dir=DEMO / "mariadb") as db:
        step(f"private MariaDB on 127.0.0.1:{db.port} (binlog ROW, row image FULL, row metadata FULL)")
        db.create_database("demo")
        with contextlib.closing(db.app_connection("demo")) as app, app.cursor() as cur:
            cur.execute("CREATE TABLE customers (code VARCHAR(20) PRIMARY KEY, name VARCHAR(60), country CHAR(2))")
            cur.executemany("INSERT INTO customers VALUES (%s, %s, %s)",
                            [(f"C{i:05d}", f"Customer {i} 😀", ["DE", "FR", "US"][i % 3]) for i in range(1, 2001)])
            cur.execute("CREATE TABLE orders (id BIGINT PRIMARY KEY, customer VARCHAR(20), amount DECIMAL(12,2), "
                        "status ENUM('new','paid','shipped'), created TIMESTAMP(3) DEFAULT CURRENT_TIMESTAMP(3))")
            for lo in range(1, orders + 1, 20_000):
                cur.executemany("INSERT INTO orders (id, customer, amount, status) VALUES (%s, %s, %s, %s)",
                                [(i, f"C{i % 2000 + 1:05d}", round(i * 0.37, 2), "new")
                                 for i in range(lo, min(lo + 20_000, orders + 1))])
            print(f"    demo.orders: {orders} rows, demo.customers: 2000 rows")

            pipeline = DEMO / "pipelines" / "demo.yaml"
            pipeline.write_text(
                f"dag_id: demo_cdc\ndescription: demo orders and customers into the {sink} sink\n"
                "source:\n  conn_id: demo_source\n  tables: [demo.orders, demo.customers]\n"
                "snapshot:\n  chunk_size: 50000\n  max_active_chunks: 1\n"
                f"stream:\n  mode: available_now\nsink:\n  type: {sink}\n  path: {DEMO / 'sink'}\n"
                f"state:\n  path: {DEMO / 'state'}\ndefault_args:\n  retries: 1\n"
            )
            install_dag_files(DEMO / "dags")
            env = airflow_env(DEMO / "airflow", DEMO / "dags", DEMO / "pipelines",
                              {"AIRFLOW_CONN_DEMO_SOURCE": db.connection_uri()})
            step("airflow db migrate (SQLite under .demo/airflow)")
            migrate(env)

            step("run 1: validate -> plan -> snapshot chunks (Spark) -> collect watermarks -> stream")
            if not run_and_show(env, 1):
                return 1

            step(f"changes on the source: {orders // 200} updates, {(orders + 399) // 400} deletes, 250 inserts, "
                 "a customer renamed")
            cur.execute("UPDATE orders SET status = 'paid', amount = amount + 1 WHERE id % 200 = 0")
            cur.execute("DELETE FROM orders WHERE id % 400 = 1")
            cur.executemany("INSERT INTO orders (id, customer, amount, status) VALUES (%s, 'C00001', 9.99, 'new')",
                            [(orders + i,) for i in range(1, 251)])
            cur.execute("UPDATE customers SET name = 'Renamed' WHERE code = 'C00042'")

            step("run 2: nothing to snapshot; the stream resumes from its checkpoint")
            if not run_and_show(env, 2):
                return 1

            step("airflow-cdc verify: source vs sink, chunk by chunk")
            res = subprocess.run([sys.executable, "-m", "airflow_cdc_provider.cli", "verify", str(pipeline)],
                                 env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
            print(res.stdout)
            print(f"Sink: {DEMO / 'sink'} ({SINK_LAYOUTS[sink]}); state: {DEMO / 'state'}")
            return res.returncode


if __name__ == "__main__":
    sys.exit(main())
