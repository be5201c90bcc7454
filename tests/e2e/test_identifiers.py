"""Identifiers that need quoting (spaces, backticks, reserved words, unicode) in table and
column names go through the snapshot, the binlog stream and both sinks unharmed."""

from __future__ import annotations

from decimal import Decimal

import pytest

from .cdc_helpers import Pipeline, jdbc_sink, parquet_sink, sink_rows, source_rows, table_types

TABLE = "order `items` ü"
DDL = ("CREATE TABLE `order ``items`` ü` (`key part` INT, `select` VARCHAR(10), `größe ☕` INT, `we``ird` TEXT, "
       "`desc` DECIMAL(10,2), PRIMARY KEY (`key part`, `select`))")


@pytest.mark.parametrize("sink_type", ["parquet", "jdbc"])
def test_awkward_identifiers_end_to_end(source_db, tmp_path, spark, postgres, sink_type):
    source_db.execute(DDL)
    source_db.executemany("INSERT INTO `order ``items`` ü` VALUES (%s, %s, %s, 'x', 1.5)",
                          [(i % 50, f"s{i // 50}", i) for i in range(600)])
    sink = parquet_sink(tmp_path) if sink_type == "parquet" else jdbc_sink(postgres, f"s {source_db.name} ü")
    p = Pipeline(source_db, tmp_path, sink, [TABLE], postgres=postgres, chunk_size=200)
    chunks = p.plan()
    assert len(chunks) >= 3
    p.snapshot(chunks)
    p.collect()
    source_db.execute("UPDATE `order ``items`` ü` SET `größe ☕` = -1, `we``ird` = 'y' WHERE `key part` < 5")
    source_db.execute("DELETE FROM `order ``items`` ü` WHERE `select` = 's3'")
    source_db.execute("INSERT INTO `order ``items`` ü` VALUES (99, 'neu', 1, 'z', 2.25)")
    p.stream()
    types = table_types(source_db, TABLE)
    got = sink_rows(spark, p.sink, p.secrets, types)
    assert got == source_rows(source_db, TABLE)
    assert len(got) == 600 - 50 + 1 and got[(99, "neu")][2:] == (1, "z", Decimal("2.25"))
