"""Transactions the server logged but rolled back, through the stream into the sinks: a transaction that also
changed a non-transactional table (a temporary table, MyISAM) is logged with its ROLLBACK, whole or to a
savepoint. The sinks must hold what the source holds, row by row, for the transactional table and for the
MyISAM table whose changes stayed."""

from __future__ import annotations

import pytest

from ..component.test_rolled_back_transactions import run
from .cdc_helpers import Pipeline, jdbc_sink, parquet_sink, sink_rows, source_rows, table_types


@pytest.mark.parametrize("sink_type", ["parquet", "jdbc"])
def test_rolled_back_rows_never_reach_the_sinks(source_db, tmp_path, spark, postgres, sink_type):
    db = source_db
    db.execute("CREATE TABLE orders (id INT PRIMARY KEY, v INT, note VARCHAR(20)) ENGINE=InnoDB")
    db.execute("CREATE TABLE audit (id INT PRIMARY KEY, v INT) ENGINE=MyISAM")
    db.executemany("INSERT INTO orders VALUES (%s, %s, %s)", [(i, i, "snap") for i in range(1, 21)])
    db.executemany("INSERT INTO audit VALUES (%s, %s)", [(i, i) for i in range(1, 6)])
    sink = parquet_sink(tmp_path) if sink_type == "parquet" else jdbc_sink(postgres, f"s_{db.name}")
    p = Pipeline(db, tmp_path, sink, ["orders", "audit"], postgres=postgres, chunk_size=7)
    p.snapshot(p.plan())
    p.collect()

    run(db, "BEGIN", "CREATE TEMPORARY TABLE scratch (id INT) ENGINE=MEMORY",
        "INSERT INTO orders VALUES (100, 1, 'rb')", "UPDATE orders SET note = 'rolled back' WHERE id <= 5",
        "DELETE FROM orders WHERE id = 6", "INSERT INTO scratch VALUES (1)", "ROLLBACK")
    run(db, "BEGIN", "UPDATE orders SET v = -1 WHERE id = 7", "INSERT INTO audit VALUES (10, 10)",
        "UPDATE audit SET v = 0 WHERE id = 1", "ROLLBACK")  # audit's changes stay
    run(db, "BEGIN", "INSERT INTO audit VALUES (11, 11)", "UPDATE orders SET note = 'kept' WHERE id = 8",
        "SAVEPOINT a", "UPDATE orders SET note = 'undone' WHERE id = 9", "INSERT INTO orders VALUES (101, 1, 'undone')",
        "INSERT INTO audit VALUES (12, 12)", "ROLLBACK TO SAVEPOINT a", "DELETE FROM orders WHERE id = 10",
        "SAVEPOINT b", "DELETE FROM orders WHERE id = 11", "ROLLBACK TO b", "COMMIT")
    run(db, "UPDATE orders SET note = 'after' WHERE id = 12")
    run(db, "XA START 'one'", "INSERT INTO orders VALUES (102, 2, 'xa')", "XA END 'one'", "XA COMMIT 'one' ONE PHASE")
    p.stream()

    for table in ("orders", "audit"):
        assert sink_rows(spark, sink, p.secrets, table_types(db, table)) == source_rows(db, table), table
    orders = source_rows(db, "orders")
    assert (100,) not in orders and (101,) not in orders and (6,) in orders and (10,) not in orders
    assert (10,) in source_rows(db, "audit") and (12,) in source_rows(db, "audit")
