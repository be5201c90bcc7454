"""Maintenance of the delta sink (compaction, z-order, VACUUM) between real snapshot and stream jobs: by hand with
``airflow-cdc maintain``, then as the maintenance DAG the factory builds, run with ``dag.test()``.

After each, the table equals the source row by row read with delta-rs, pandas and Polars; its data files went
down; its application transactions are those it had; and a stream batch replayed after a compaction is skipped.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import deltalake
import polars as pl

from airflow_cdc_provider.testing.airflow_run import run_dag

from .cdc_helpers import Pipeline, normalize, source_rows, table_types, write_pipeline
from .test_delta_sink import app_transactions_at, assert_delta_equals_source, delta_sink, make_orders, table_uri


def live_rows_by_reader(uri: str, names: list[str], keys: list[str]) -> dict[str, dict[tuple, tuple]]:
    """The table's live rows (``NOT _cdc_deleted``) as {key: row}, once per reader users have."""
    dt = deltalake.DeltaTable(uri)
    reads = {
        "delta-rs": dt.to_pyarrow_table(columns=names, filters=[("_cdc_deleted", "=", False)]).to_pylist(),
        "pandas": dt.to_pandas(columns=names, filters=[("_cdc_deleted", "=", False)]).to_dict("records"),
        "polars": pl.read_delta(uri).filter(~pl.col("_cdc_deleted")).select(names).to_dicts(),
    }
    return {reader: {tuple(normalize(r[k]) for k in keys): tuple(normalize(r[n]) for n in names) for r in rows}
            for reader, rows in reads.items()}


def assert_readers_equal_source(p: Pipeline, source_db, table: str) -> None:
    types = table_types(source_db, table)
    want = source_rows(source_db, table)
    got = live_rows_by_reader(table_uri(p, source_db, table), list(types.schema.column_names),
                              list(types.schema.key_columns))
    for reader, rows in got.items():
        assert rows == want, f"{reader}: {len(rows)} live rows, the source has {len(want)}; first differing: " + str(
            sorted(k for k in want.keys() | rows.keys() if want.get(k) != rows.get(k))[:5])


def insert_batches(source_db, first: int, statements: int) -> None:
    """``statements`` inserts of 20 new keys each, from ``first`` on."""
    for i in range(statements):
        start = first + 20 * i
        source_db.executemany("INSERT INTO orders VALUES (%s, %s, 'new')", [(k, k) for k in range(start, start + 20)])


def data_files(uri: str) -> int:
    return len(deltalake.DeltaTable(uri).file_uris())


def parquet_files_on_disk(uri: str) -> int:
    return sum(1 for f in Path(uri).glob("*.parquet"))


def test_maintenance_by_hand_and_by_its_dag_keeps_rows_and_transactions(airflow_home, source_db, tmp_path):
    env, dags, pipelines = airflow_home
    make_orders(source_db, 400)
    p = Pipeline(source_db, tmp_path, delta_sink(tmp_path), ["orders"], chunk_size=100)
    p.snapshot(p.plan())
    p.collect()
    uri = table_uri(p, source_db, "orders")
    # small batches of new keys: each MERGE's key range misses the table's files, so each batch adds a file
    insert_batches(source_db, 1000, 6)
    # killed once batch 1 is in the Delta table and before Spark committed it: the restart replays batch 1
    once = tmp_path / "fault-once"
    res = p.stream(fault={"point": "mid_batch", "action": "kill", "match": "batch 1", "once": str(once)},
                   check=False, max_bytes=1_000)
    assert res.returncode != 0 and once.exists(), "the injected kill did not happen"
    txns = app_transactions_at(uri)
    stream_app = next(a for a in txns if ":stream:" in a)
    assert txns[stream_app] == [0, 1], txns
    files_before = data_files(uri)
    assert files_before >= 3, f"only {files_before} data files: nothing for a compaction to do"
    types = table_types(source_db, "orders")
    names, keys = list(types.schema.column_names), list(types.schema.key_columns)
    committed = live_rows_by_reader(uri, names, keys)["delta-rs"]  # the stream was killed: not all of the source

    # by hand: compaction, then a VACUUM deleting every file no version references any more
    config = write_pipeline(pipelines, source_db, tmp_path, tables=("orders",), sink=(
        f"sink:\n  type: delta\n  path: {Path(p.sink.path)}\n  maintenance:\n    schedule: null\n"
        "    z_order: true\n    vacuum_retention_hours: 0\n    allow_short_retention: true\n"))
    hand = config.with_name("by_hand.yaml")
    hand.write_text(config.read_text().replace("dag_id: shop_cdc", "dag_id: by_hand")
                    .replace("    z_order: true\n", ""))
    out = subprocess.run([sys.executable, "-m", "airflow_cdc_provider.cli", "maintain", str(hand), "--json"],
                         env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    hand.unlink()  # the DAG folder's pipelines: only the one whose maintenance DAG runs below
    report = json.loads(out.stdout)
    (done,) = report["tables"]
    assert done["table"] == source_db.table("orders") and done["files_before"] == files_before
    assert done["files_after"] == data_files(uri) < files_before and done["compacted_files"] == files_before
    assert done["vacuumed_files"] >= files_before and parquet_files_on_disk(uri) == done["files_after"]
    assert app_transactions_at(uri) == txns, "maintenance wrote or lost application transactions"
    assert deltalake.DeltaTable(uri).transaction_version(stream_app) == 1
    assert live_rows_by_reader(uri, names, keys) == dict.fromkeys(("delta-rs", "pandas", "polars"), committed)

    # the restart replays batch 1 on the compacted table: found committed, skipped; then the rest
    p.stream(max_bytes=1_000)
    versions = app_transactions_at(uri)[stream_app]
    assert versions.count(1) == 1 and versions == sorted(versions) and len(versions) > 2, versions
    assert_delta_equals_source(p, source_db, "orders")
    assert_readers_equal_source(p, source_db, "orders")

    # the maintenance DAG the factory builds next to the pipeline's (z-order by the key this time)
    insert_batches(source_db, 2000, 3)
    source_db.execute("UPDATE orders SET note = 'late', v = -v WHERE id BETWEEN 2000 AND 2010")
    source_db.execute("DELETE FROM orders WHERE id BETWEEN 2030 AND 2035")
    p.stream(max_bytes=1_000)
    txns, files_before = app_transactions_at(uri), data_files(uri)
    out = run_dag(env, dags, "--import-only")
    assert out["dags"] == ["shop_cdc", "shop_cdc_maintenance"] and not out["import_errors"], out
    run = run_dag(env, dags, "shop_cdc_maintenance", log_file=tmp_path / "maintenance.log")
    assert run["state"] == "success", (tmp_path / "maintenance.log").read_text()[-4000:]
    assert [t["task_id"] for t in run["tis"]] == ["maintain_delta_tables"]
    (done,) = run["xcom"]["maintain_delta_tables[-1]"]["tables"]
    assert done["files_before"] == files_before > done["files_after"] == data_files(uri)
    assert app_transactions_at(uri) == txns
    assert_delta_equals_source(p, source_db, "orders")
    assert_readers_equal_source(p, source_db, "orders")
    # the change data feed still reads the stream's changes across the rewrites (their MERGEs wrote them to
    # _change_data/); the snapshot's appended version reads its own data files, which the compaction rewrote and
    # the VACUUM (retention 0) deleted: like any Delta table's, its feed reaches back as far as the retention
    dt = deltalake.DeltaTable(uri)
    first_merge = min(h["version"] for h in dt.history() if h.get("operation") == "MERGE")
    changes = dt.load_cdf(starting_version=first_merge).read_all()
    assert {"insert", "update_postimage"} <= set(changes.column("_change_type").to_pylist()), changes.num_rows
