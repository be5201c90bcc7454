"""Issue 4 acceptance: YAML -> DAG, DagBag import errors, and dag.test() runs against MariaDB + Spark."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from airflow_cdc_provider.testing.airflow_run import airflow_env, migrate, run_dag

from .cdc_helpers import parquet_sink, sink_rows, source_rows, table_types

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def airflow_home(tmp_path, source_db):
    dags, pipelines = tmp_path / "dags", tmp_path / "pipelines"
    dags.mkdir()
    pipelines.mkdir()
    shutil.copy(ROOT / "dags" / "cdc_pipelines.py", dags / "cdc_pipelines.py")
    env = airflow_env(tmp_path / "airflow", dags, pipelines,
                      {"AIRFLOW_CONN_SRC": source_db.server.connection_uri(), "AIRFLOW_CDC_DATA": str(tmp_path / "cdc")})
    migrate(env)
    return env, dags, pipelines


def write_pipeline(pipelines: Path, db, tmp_path: Path, extra: str = "") -> Path:
    p = pipelines / "shop.yaml"
    p.write_text(
        f"dag_id: shop_cdc\nsource:\n  conn_id: src\n  tables: [{db.table('orders')}, {db.table('customers')}]\n"
        f"snapshot:\n  chunk_size: 2000\n  max_active_chunks: 1\nsink:\n  type: parquet\n  path: {tmp_path / 'sink'}\n"
        f"state:\n  path: {tmp_path / 'state'}\ndefault_args:\n  retries: 1\n  retry_delay: 0\n{extra}"
    )
    return p


def test_dagbag_reports_a_broken_pipeline_without_hiding_the_others(airflow_home, source_db, tmp_path):
    env, dags, pipelines = airflow_home
    write_pipeline(pipelines, source_db, tmp_path)
    (pipelines / "typo.yaml").write_text("dag_id: typo_cdc\nsource:\n  conn_id: src\n  tabels: [a.b]\n")
    out = run_dag(env, dags, "--import-only")
    assert out["dags"] == ["shop_cdc"] and out["import_errors"] == {}
    warnings = [w for ws in out["warnings"].values() for w in ws]
    assert len(warnings) == 1 and "typo.yaml" in warnings[0] and "tabels" in warnings[0], warnings


def test_snapshot_then_stream_then_resume_then_resnapshot(airflow_home, source_db, tmp_path, spark):
    env, dags, pipelines = airflow_home
    source_db.execute("CREATE TABLE orders (id INT PRIMARY KEY, v INT NOT NULL, note VARCHAR(20))")
    source_db.executemany("INSERT INTO orders VALUES (%s, %s, 'init')", [(i, i) for i in range(1, 5001)])
    source_db.execute("CREATE TABLE customers (`customer id` VARCHAR(20) PRIMARY KEY, name VARCHAR(50))")
    source_db.executemany("INSERT INTO customers VALUES (%s, %s)", [(f"c{i:04d}", f"name {i}") for i in range(300)])
    write_pipeline(pipelines, source_db, tmp_path)
    fault = {"point": "after_select", "action": "fail", "match": "orders:1", "once": str(tmp_path / "fault-once")}
    env1 = {**env, "AIRFLOW_CDC_FAULT": __import__("json").dumps(fault)}

    run1 = run_dag(env1, dags, "shop_cdc", log_file=tmp_path / "run1.log")
    assert run1["state"] == "success", run1
    chunks = [t for t in run1["tis"] if t["task_id"] == "snapshot_chunk"]
    assert len(chunks) == 4  # orders: 3 chunks of 2000, customers: 1
    assert {t["label"] for t in chunks} >= {f"{source_db.table('orders')} [2001, 4001)"}
    retried = [t for t in chunks if t["label"].endswith("[2001, 4001)")][0]
    assert retried["try_number"] == 2 and (tmp_path / "fault-once").exists()
    reports = [r for k, v in run1["xcom"].items() if k.startswith("snapshot_chunk[") for r in v]
    assert sorted(r["split_id"] for r in reports) == sorted(
        [f"{source_db.table('orders')}:{i}" for i in range(3)] + [f"{source_db.table('customers')}:0"])
    assert all({"low_watermark", "high_watermark", "rows", "window_events_applied", "seconds"} <= set(r) for r in reports)

    sink = parquet_sink(tmp_path)
    for t in ("orders", "customers"):
        assert sink_rows(spark, sink, {}, table_types(source_db, t)) == source_rows(source_db, t)

    source_db.execute("UPDATE orders SET note = 'changed' WHERE id <= 100")
    source_db.execute("DELETE FROM orders WHERE id > 4900")
    source_db.execute("INSERT INTO customers VALUES ('new one', 'x')")
    run2 = run_dag(env, dags, "shop_cdc", log_file=tmp_path / "run2.log")
    assert run2["state"] == "success", run2
    assert [t["state"] for t in run2["tis"] if t["task_id"] == "snapshot_chunk"] in ([], ["skipped"])
    assert run2["xcom"]["stream[-1]"]["rows_emitted"] == 201
    for t in ("orders", "customers"):
        assert sink_rows(spark, sink, {}, table_types(source_db, t)) == source_rows(source_db, t)

    source_db.execute("DELETE FROM orders WHERE id <= 10")
    run3 = run_dag(env, dags, "shop_cdc", {"resnapshot": [source_db.table("orders")]}, log_file=tmp_path / "run3.log")
    assert run3["state"] == "success", run3
    labels = [t["label"] for t in run3["tis"] if t["task_id"] == "snapshot_chunk"]
    assert len(labels) == 3 and all(source_db.table("orders") in lbl for lbl in labels)
    for t in ("orders", "customers"):
        assert sink_rows(spark, sink, {}, table_types(source_db, t)) == source_rows(source_db, t)
