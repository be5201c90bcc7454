"""A captured table renamed on the source to a name ``source.tables`` also matches continues under the new name
with its sink history, through real DAG runs into both sinks, compared with MariaDB row by row.

The run whose stream reads the RENAME leaves the new name waiting (it may be the old table renamed); the next
run moves the old name's sink data to the new name and snapshots it, and later runs stream it.

The same pipeline then has its other table taken out of ``source.tables`` and of the state (``airflow-cdc
uncapture``, or a DAG run's conf) and added back, snapshotted again.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from airflow_cdc_provider.sinks.parquet import ParquetLayout
from airflow_cdc_provider.sinks.postgres import mirror_table_name
from airflow_cdc_provider.state.store import StateStore, table_dir_name
from airflow_cdc_provider.testing.airflow_run import run_dag

from .cdc_helpers import jdbc_pipeline_sink, parquet_sink, sink_rows, source_rows, table_types, write_pipeline
from .test_generated_dag import make_shop

CLI = str(Path(sys.executable).parent / "airflow-cdc")


def history(spark, postgres, sink_type: str, sink, table: str) -> set:
    """What the sink keeps of ``table`` besides its current rows: the parquet changelog's ``(op, id, note)``
    (superseded changelogs included), or the ids of the jdbc mirror's tombstones."""
    if sink_type == "jdbc":
        with postgres.connect() as conn, conn.cursor() as cur:
            cur.execute("SELECT to_regclass(%s)", (f'"{sink.schema}"."{mirror_table_name(table)}"',))
            if cur.fetchone()[0] is None:
                return set()
            cur.execute(f'SELECT id FROM "{sink.schema}"."{mirror_table_name(table)}" WHERE _cdc_deleted')
            return {i for (i,) in cur.fetchall()}
    layout = ParquetLayout(sink.path)
    base = Path(sink.path) / table_dir_name(table)
    out = set()
    for folder in [base / "changes", *sorted((base / "_superseded").glob("changes-*"))]:
        if folder.exists():
            df = spark.read.parquet(layout.location(str(folder.relative_to(sink.path))))
            out |= {tuple(r) for r in df.select("_cdc_op", "id", "note").collect()}
    return out


# each startup mode, sink and uncapture route once (the route does not touch the sink; each sink's re-snapshot is
# its own)
@pytest.mark.parametrize(("sink_type", "startup", "route"), [("parquet", "initial", "cli"), ("jdbc", "latest", "conf")])
def test_a_renamed_table_keeps_its_history_and_a_table_taken_out_comes_back_snapshotted(
        airflow_home, source_db, postgres, tmp_path, spark, sink_type, startup, route):
    """Under ``stream.startup: latest`` nothing is snapshotted at first: the sink holds only what was streamed
    before the rename, and the new name is snapshotted all the same.

    Then customers, left out of source.tables, is streamed still, until ``airflow-cdc uncapture`` (or a DAG run
    with conf ``{"uncapture": [...]}``) takes it out of the state: that run streams the renamed table alone and
    leaves customers' sink as it was, with no re-snapshot of anything. Added back, it is snapshotted again and
    its sink converges (rows deleted meanwhile are gone), also under a startup mode that snapshots nothing by
    itself."""
    env, dags, pipelines = airflow_home
    make_shop(source_db, orders=300, customers=40)
    secrets, sink_yaml, sink = {}, None, parquet_sink(tmp_path)
    if sink_type == "jdbc":
        env, sink_yaml, sink, secrets = jdbc_pipeline_sink(env, postgres, source_db)

    def write(tables=("orders*", "customers")):
        return write_pipeline(pipelines, source_db, tmp_path, f"stream:\n  startup: {startup}\n", tables=tables,
                              sink=sink_yaml)

    config = write()
    state = StateStore(tmp_path / "state")
    orders, renamed = source_db.table("orders"), source_db.table("orders_v2")

    def rows(table: str) -> dict:
        return sink_rows(spark, sink, secrets, table_types(source_db, table))

    def converged(table: str) -> bool:
        return rows(table) == source_rows(source_db, table)

    def run(name: str) -> str:
        result = run_dag(env, dags, "shop_cdc", log_file=tmp_path / f"{name}.log")
        assert result["state"] == "success", result
        return (tmp_path / f"{name}.log").read_text(errors="replace")

    run("run1")
    assert rows("orders") == (source_rows(source_db, "orders") if startup == "initial" else {})

    # changes before the rename, still pending when it comes, and after it under the new name
    source_db.execute("UPDATE orders SET note = 'before' WHERE id <= 10")
    source_db.execute("DELETE FROM orders WHERE id BETWEEN 291 AND 300")
    source_db.execute("RENAME TABLE orders TO orders_v2")
    source_db.execute("UPDATE orders_v2 SET note = 'after' WHERE id BETWEEN 5 AND 15")
    source_db.execute("INSERT INTO orders_v2 VALUES (1000, 1000, 'new')")
    # customers' changes for the sink to hold when it is taken out below, under startup latest too
    source_db.execute("UPDATE customers SET name = 'streamed' WHERE `customer id` <= 'c0035'")

    # the stream reads the rename as the old name's drop; the new name waits for it
    log2 = run("run2")
    if startup == "initial":
        assert f"{renamed}: new to the pipeline while the stream has not read how {orders} left the source" in log2
    assert renamed not in state.streamed_tables() and renamed not in state.read_status().tables
    drop = next(c for c in state.schema_changes() if str(c.table) == orders)
    assert (drop.kind, str(drop.renamed_to)) == ("drop", renamed), drop
    assert renamed not in state.finished_tables()
    if startup == "initial":
        assert rows("customers") == source_rows(source_db, "customers")
    before = history(spark, postgres, sink_type, sink, orders)
    if sink_type == "jdbc":  # the drop made every row the sink had of the old name a tombstone
        held = range(1, 301) if startup == "initial" else [*range(1, 11), *range(291, 301)]
        assert before == set(held), sorted(before)
    else:
        assert {("u", i, "before") for i in range(1, 11)} | {("d", i, "init") for i in range(291, 301)} | \
            {("x", None, None)} <= before, sorted(before, key=str)

    # the next run moves the sink data and snapshots the new name, whatever it held before
    log3 = run("run3")
    assert f"{orders} renamed to {renamed} at " in log3 and f"its sink data moved to {renamed}" in log3, log3
    assert rows("orders_v2") == source_rows(source_db, "orders_v2")
    assert len(source_rows(source_db, "orders_v2")) == 291
    # its history came with it: the old name's changelog, or the tombstones of the rows deleted before the rename
    # (a table new to the sink has none)
    after = history(spark, postgres, sink_type, sink, renamed)
    assert after == set(range(291, 301)) if sink_type == "jdbc" else after >= before, sorted(after, key=str)
    assert history(spark, postgres, sink_type, sink, orders) == set()
    assert orders in state.renamed_tables() and orders not in state.finished_tables()
    assert renamed in state.finished_tables() and renamed not in state.carried_tables()
    if sink_type == "jdbc":
        with postgres.connect() as conn, conn.cursor() as cur:
            cur.execute("SELECT to_regclass(%s), obj_description(to_regclass(%s))",
                        (f'"{sink.schema}"."{mirror_table_name(orders)}"', f'"{sink.schema}"."{mirror_table_name(renamed)}"'))
            old_mirror, comment = cur.fetchone()
        assert old_mirror is None and comment == f"source table {orders}, renamed to {renamed}", comment
    else:
        assert not (Path(sink.path) / table_dir_name(orders)).exists()

    # later changes of the new name stream in; verify compares it and does not list the old name
    source_db.execute("UPDATE orders_v2 SET v = -1 WHERE id <= 3")
    source_db.execute("DELETE FROM orders_v2 WHERE id = 1000")
    run("run4")
    assert rows("orders_v2") == source_rows(source_db, "orders_v2")
    if startup == "initial":
        assert rows("customers") == source_rows(source_db, "customers")
    res = subprocess.run([CLI, "verify", str(config), "--table", renamed], capture_output=True, text=True,
                         timeout=600, env={**os.environ, **env})
    assert res.returncode == 0, res.stdout + res.stderr
    assert f"{renamed} " in res.stdout and "DROPPED" not in res.stdout, res.stdout

    # customers taken out: first of source.tables (refused until then), then of the state
    customers = source_db.table("customers")

    def uncapture():
        return subprocess.run([CLI, "uncapture", str(config), "--table", customers], capture_output=True,
                              text=True, timeout=120, env={**os.environ, **env})

    held = rows("customers")
    assert {("c0001",), ("c0030",)} <= set(held)  # rows the changes below rename and delete
    source_db.execute("UPDATE orders_v2 SET note = 'while out' WHERE id <= 5")
    source_db.execute("DELETE FROM customers WHERE `customer id` >= 'c0030'")
    source_db.execute("UPDATE customers SET name = 'while out' WHERE `customer id` <= 'c0004'")
    if route == "cli":
        res = uncapture()
        assert res.returncode == 2 and res.stderr.strip() == (
            f"airflow-cdc: error: {config}: source.tables still captures {customers} (through '{customers}'): take "
            "it out of source.tables first (a pattern can exclude it: 're:...' with a negative lookahead), then run "
            "this again"), res.stderr
        write(tables=("orders*",))
        res = uncapture()
        assert res.returncode == 0 and res.stdout.startswith(f"{customers}: no longer captured."), \
            res.stdout + res.stderr
        assert customers not in state.read_seed().tables and customers not in state.streamed_tables()
        assert customers not in state.read_status().tables
        assert uncapture().stderr.startswith(f"airflow-cdc: error: {config}: --table {customers}: not a table this "
                                             "pipeline has captured")
        run5 = run_dag(env, dags, "shop_cdc", log_file=tmp_path / "run5.log")
    else:  # from the Airflow UI: a DAG run's conf, refused (the run fails at its plan step) while the YAML has it
        refused = run_dag(env, dags, "shop_cdc", conf={"uncapture": [customers]}, log_file=tmp_path / "refused.log")
        assert refused["state"] == "failed", refused
        assert [t["state"] for t in refused["tis"] if t["task_id"] == "plan_chunks"] == ["failed"], refused
        assert (f"{config}: source.tables still captures {customers} (through '{customers}'): take it out of "
                "source.tables first (a pattern can exclude it: 're:...' with a negative lookahead), then trigger the "
                "DAG with this conf again") in (tmp_path / "refused.log").read_text()
        assert customers in state.streamed_tables()
        write(tables=("orders*",))
        run5 = run_dag(env, dags, "shop_cdc", conf={"uncapture": [customers]}, log_file=tmp_path / "run5.log")
        assert f"{customers}: no longer captured." in (tmp_path / "run5.log").read_text()
        assert customers not in state.read_seed().tables and customers not in state.streamed_tables()
    assert run5["state"] == "success", run5
    assert [t for t in run5["tis"] if t["task_id"] == "snapshot_chunk" and t["state"] == "success"] == []
    assert state.read_status().tables == [renamed]
    assert converged("orders_v2")  # snapshotted under its new name, under startup latest too
    assert rows("customers") == held
    assert held != source_rows(source_db, "customers")  # the sink did not follow the changes, as asked

    # added back: snapshotted again, then streamed
    write()
    source_db.execute("DELETE FROM customers WHERE `customer id` = 'c0000'")
    run("run6")
    for t in ("orders_v2", "customers"):
        assert converged(t), t
    source_db.execute("UPDATE customers SET name = 'streamed again' WHERE `customer id` = 'c0001'")
    run("run7")
    assert converged("customers")
    assert rows("customers")[("c0001",)][1] == "streamed again"
