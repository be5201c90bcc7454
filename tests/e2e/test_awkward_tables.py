"""Tables awkward to capture, through one pipeline's snapshot, binlog stream and either sink, each equal to the
source row by row afterwards:

* a table without a primary key, captured by a unique NOT NULL column named in ``source.chunk_key``: streamed like
  any other, never held for a re-snapshot. The server names the table's first unique key of NOT NULL columns as
  its primary key in every table map, which the definition the stream decodes with does not record; that is not a
  changed definition;
* identifiers that need quoting (spaces, backticks, reserved words, unicode) in table, column and schema names;
* transactions the server logged but rolled back: one that also changed a non-transactional table (a temporary
  table, MyISAM) is logged with its ROLLBACK, whole or to a savepoint; the MyISAM table's changes stay."""

from __future__ import annotations

from collections import Counter
from decimal import Decimal

import pytest

from airflow_cdc_provider.pipeline.table_schemas import pending_resyncs

from ..component.test_rolled_back_transactions import run
from .cdc_helpers import Pipeline, jdbc_sink, parquet_sink, sink_rows, source_rows, table_types

DRIVER = 4 * 2**20  # stream.driver_batch_bytes: every batch of this test is smaller
ITEMS = "order `items` ü"
QUOTED = "`order ``items`` ü`"
DDL = (f"CREATE TABLE {QUOTED} (`key part` INT, `select` VARCHAR(10), `größe ☕` INT, `we``ird` TEXT, "
       "`desc` DECIMAL(10,2), PRIMARY KEY (`key part`, `select`))")


def rolled_back_transactions(db) -> None:
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


@pytest.mark.parametrize("sink_type", ["parquet", "jdbc"])
def test_awkward_tables_stream_and_equal_the_source(source_db, tmp_path, spark, postgres, sink_type):
    db = source_db
    # two unique keys of NOT NULL columns: the server promotes the first (code), the chunk key is the second (id)
    db.execute("CREATE TABLE keyless (id INT NOT NULL, code CHAR(4) NOT NULL, v VARCHAR(20), "
               "UNIQUE KEY ucode (code), UNIQUE KEY uid (id))")
    db.executemany("INSERT INTO keyless VALUES (%s, %s, %s)", [(i, f"c{i:03d}", f"v{i}") for i in range(1, 201)])
    db.execute(DDL)
    db.executemany(f"INSERT INTO {QUOTED} VALUES (%s, %s, %s, 'x', 1.5)",
                   [(i % 50, f"s{i // 50}", i) for i in range(600)])
    db.execute("CREATE TABLE orders (id INT PRIMARY KEY, v INT, note VARCHAR(20)) ENGINE=InnoDB")
    db.execute("CREATE TABLE audit (id INT PRIMARY KEY, v INT) ENGINE=MyISAM")
    # orders: more rows than one chunk holds (the ids the transactions below insert stay free)
    db.executemany("INSERT INTO orders VALUES (%s, %s, %s)", [(i, i, "snap") for i in range(1, 61)])
    db.executemany("INSERT INTO audit VALUES (%s, %s)", [(i, i) for i in range(1, 6)])
    sink = parquet_sink(tmp_path) if sink_type == "parquet" else jdbc_sink(postgres, f"s {db.name} ü")
    p = Pipeline(db, tmp_path, sink, ["keyless", ITEMS, "orders", "audit"], postgres=postgres, chunk_size=50,
                 chunk_keys={"keyless": "id"})
    chunks = p.plan()
    per_table = Counter(str(c.table) for c in chunks)
    assert per_table[db.table(ITEMS)] >= 3 and per_table[db.table("orders")] >= 2, per_table
    p.snapshot(chunks)
    p.collect()

    db.execute("UPDATE keyless SET v = 'updated' WHERE id BETWEEN 10 AND 19")
    db.execute("DELETE FROM keyless WHERE id > 190")
    db.execute("INSERT INTO keyless VALUES (500, 'c500', 'new'), (501, 'c501', NULL)")
    db.execute("UPDATE keyless SET id = 1000 WHERE id = 5")  # the chunk key itself changes
    db.execute(f"UPDATE {QUOTED} SET `größe ☕` = -1, `we``ird` = 'y' WHERE `key part` < 5")
    db.execute(f"DELETE FROM {QUOTED} WHERE `select` = 's3'")
    db.execute(f"INSERT INTO {QUOTED} VALUES (99, 'neu', 1, 'z', 2.25)")
    rolled_back_transactions(db)
    p.stream(max_bytes=4_000)  # several batches, each read by Spark's tasks
    db.execute("UPDATE keyless SET v = 'again', code = 'cXXX' WHERE id = 1000")
    db.execute("DELETE FROM keyless WHERE id = 1")
    p.stream(driver_batch_bytes=DRIVER)  # read by the driver

    logs = [log.read_text(errors="replace") for log in (tmp_path / "jobs").glob("binlog_stream-*.log")]
    assert len(logs) == 2 and not any("resync" in log or "held until the table is re-snapshotted" in log
                                      for log in logs)
    assert pending_resyncs(p.state) == {}
    got = {}
    for table, key in (("keyless", "id"), (ITEMS, None), ("orders", None), ("audit", None)):
        got[table] = sink_rows(spark, p.sink, p.secrets, table_types(db, table, key))
        assert got[table] == source_rows(db, table, key), table
    keyless = source_rows(db, "keyless", "id")
    assert len(keyless) == 190 + 2 - 1 and (1000,) in keyless and (5,) not in keyless
    items = got[ITEMS]
    assert len(items) == 600 - 50 + 1 and items[(99, "neu")][2:] == (1, "z", Decimal("2.25"))
    orders = source_rows(db, "orders")
    assert (100,) not in orders and (101,) not in orders and (6,) in orders and (10,) not in orders
    assert (10,) in source_rows(db, "audit") and (12,) in source_rows(db, "audit")
