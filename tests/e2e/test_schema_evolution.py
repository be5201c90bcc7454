"""ALTERs applied in place (``stream.schema_changes: evolve``, the default) through the real jobs, into every
sink, compared column by column with MariaDB: a jdbc mirror read with plain SQL, the parquet sink read with
pyarrow alone, the Delta table with delta-rs alone, and each sink through its own reader.

Covered: an ALTER met by a stream that started after it (the pending changes before it are decoded with the
definition they were written under; recorded before the query's first batch, or when a later batch holding it
is planned), a kill right after a batch applied it (the re-run decodes the old rows again), and ALTERs while a
continuous stream runs beside a concurrent writer (met by the tasks reading them). Nothing is re-snapshotted: the
stream records an ``evolve`` change and no table is held.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from airflow_cdc_provider.pipeline.table_schemas import pending_resyncs
from airflow_cdc_provider.sinks.registry import open_sink
from airflow_cdc_provider.source.server import current_offset
from airflow_cdc_provider.spark.verify import verify_table
from airflow_cdc_provider.state.store import table_dir_name
from tests.e2e.cdc_helpers import ThreadedWriter, sink_rows, source_rows, table_types, wait_until
from tests.e2e.test_schema_changes import independent_rows, make_pipeline, snapshot_all


def make_tables(db, rows=200):
    db.execute("CREATE TABLE t (id INT PRIMARY KEY, name VARCHAR(20) NOT NULL, qty INT, price DECIMAL(6,2), "
               "note VARCHAR(10))")
    db.execute("CREATE TABLE other (id INT PRIMARY KEY, v INT)")
    db.executemany("INSERT INTO t VALUES (%s, %s, %s, %s, %s)",
                   [(i, f"n{i}", i, f"{i}.25", "old") for i in range(1, rows + 1)])
    db.executemany("INSERT INTO other VALUES (%s, %s)", [(i, i) for i in range(1, 21)])


def assert_sink_equals_source(p, spark, postgres, db, sink_type, table):
    """The sink through its own reader and independently of it, column by column, with the source's columns."""
    want = source_rows(db, table)
    assert sink_rows(spark, p.sink, p.secrets, table_types(db, table)) == want
    assert independent_rows(p, postgres, db, sink_type, table) == want


def evolved(p) -> list[tuple[str, str]]:
    return [(c.kind, c.table.table) for c in p.state.schema_changes()]


@pytest.mark.parametrize("sink_type", ["jdbc", "delta"])  # parquet's: the continuous test
def test_alter_between_runs_is_applied_in_place_with_pending_old_rows_and_a_kill_after_it(
        source_db, tmp_path, spark, postgres, sink_type):
    db = source_db
    make_tables(db)
    p = make_pipeline(db, tmp_path, postgres, sink_type)
    snapshot_all(p)

    db.execute("UPDATE t SET qty = qty + 1000 WHERE id <= 20")  # still pending when the ALTER comes
    db.execute("DELETE FROM t WHERE id = 30")
    db.execute("ALTER TABLE t ADD COLUMN c VARCHAR(5) NOT NULL DEFAULT 'x', CHANGE name title VARCHAR(20) NOT NULL, "
               "MODIFY qty BIGINT, MODIFY price DECIMAL(9,3)")
    db.execute("UPDATE t SET qty = 5000000000, c = 'big', price = 123456.789 WHERE id = 2")
    db.execute("INSERT INTO t VALUES (1000, 'new', 3000000000, 1.5, 'n', 'y')")
    db.execute("UPDATE other SET v = -5 WHERE id = 2")
    db.execute("ALTER TABLE t DROP COLUMN note, ADD COLUMN d INT NOT NULL AFTER id")  # a second version
    db.execute("UPDATE t SET d = 4 WHERE id = 3")

    # several small batches; killed right after the batch that applied the first ALTER, before it commits
    once = tmp_path / "fault-once"
    res = p.stream(max_bytes=2_000, check=False,
                   fault={"point": "after_schema_change", "action": "kill", "once": str(once)})
    assert res.returncode != 0 and once.exists(), "the injected kill did not happen\n" + p.last_log("binlog_stream")
    p.stream(max_bytes=3_000)
    assert p.state.read_status().state == "finished"
    assert evolved(p) == [("evolve", "t"), ("evolve", "t")]
    assert pending_resyncs(p.state) == {}
    for table in ("t", "other"):
        assert_sink_equals_source(p, spark, postgres, db, sink_type, table)
    want = source_rows(db, "t")
    assert want[(2,)][:4] == (2, 0, "n2", 5000000000) and want[(50,)][:4] == (50, 0, "n50", 50)
    verdict = verify_table(spark, db.settings, open_sink(p.sink, p.secrets, spark), table_types(db, "t"), [(None, None)],
                           stream_version=2)
    assert verdict.equal and verdict.sink_version == 2 and verdict.source_rows == len(want), verdict.to_dict()

    # a later run restarts from the checkpoint with the recorded versions and goes on. Its first batch holds no
    # ALTER (small transactions, a few per batch); a later batch's ALTER is recorded when that batch is planned,
    # before any task reads it
    db.executemany("UPDATE t SET qty = qty + 1 WHERE id = %s", [(i,) for i in range(100, 130)])
    db.execute("ALTER TABLE t ADD COLUMN e INT NOT NULL DEFAULT 9")
    db.execute("UPDATE t SET title = 'later', qty = 7000000000, e = 1 WHERE id = 5")
    p.stream(max_bytes=3_000)
    log = p.last_log("binlog_stream", tail=None)
    assert "version 3 from" in log and "first batch's ALTERs" not in log and "Exception in task" not in log, log[-6000:]
    assert evolved(p) == [("evolve", "t")] * 3
    assert_sink_equals_source(p, spark, postgres, db, sink_type, "t")


class NamedColumnWriter(ThreadedWriter):
    """Updates, inserts and deletes rows of ``t`` naming only ``id`` and ``qty``, which every ALTER of the test
    leaves in place, until stopped."""

    def __init__(self, db, start_id: int = 10_000) -> None:
        super().__init__(db.server, db.name, pause=0.01)
        self.next_id = start_id

    def write(self, cur) -> None:
        cur.execute("UPDATE t SET qty = qty + 1 WHERE id = %s", (self.ops % 150 + 1,))
        if self.ops % 5 == 0:
            cur.execute("INSERT INTO t (id, qty) VALUES (%s, %s)", (self.next_id, self.ops))
            self.next_id += 1
        if self.ops % 11 == 0:
            cur.execute("DELETE FROM t WHERE id = %s", (self.next_id - 3,))


@pytest.mark.parametrize("sink_type", ["parquet", "delta"])  # the jdbc mirror's: the tests before and after
def test_alters_while_a_continuous_stream_runs_beside_a_writer(source_db, tmp_path, spark, postgres, sink_type):
    db = source_db
    db.execute("CREATE TABLE t (id INT PRIMARY KEY, name VARCHAR(20) NOT NULL DEFAULT 'w', qty INT)")
    db.executemany("INSERT INTO t VALUES (%s, %s, %s)", [(i, f"n{i}", i) for i in range(1, 201)])
    p = make_pipeline(db, tmp_path, postgres, sink_type, tables=("t",))
    snapshot_all(p)
    with p.continuous_stream():
        with NamedColumnWriter(db) as writer:
            # each ALTER once the stream applied the one before: an ALTER whose added column a later one dropped
            # before the stream got to it is re-snapshotted instead (its column's type is gone from the source)
            alters = ["ALTER TABLE t ADD COLUMN c VARCHAR(5) NOT NULL DEFAULT 'x'",
                      "ALTER TABLE t CHANGE name title VARCHAR(40) NOT NULL DEFAULT 'w', MODIFY qty BIGINT",
                      "ALTER TABLE t DROP COLUMN c"]
            for n, alter in enumerate(alters, 1):
                goal = writer.ops + 100
                wait_until(lambda: writer.ops > goal, "the writer to write")
                db.execute(alter)
                if n == 2:
                    db.execute("UPDATE t SET qty = 6000000000 WHERE id = 7")
                wait_until(lambda: len(evolved(p)) == n, f"the stream to apply ALTER {n}", timeout=180)
            goal = writer.ops + 100
            wait_until(lambda: writer.ops > goal, "the writer to write after the last ALTER")
        with db.connection() as conn:
            end = current_offset(conn)

        def caught_up():
            status = p.state.read_status()
            if status is not None and status.state == "failed":
                raise AssertionError(f"the stream failed: {status.error}")
            return status is not None and status.last_offset is not None and not end > status.last_offset

        wait_until(caught_up, "the stream to pass the writes", timeout=300)
    assert evolved(p) == [("evolve", "t")] * 3
    assert pending_resyncs(p.state) == {}
    assert_sink_equals_source(p, spark, postgres, db, sink_type, "t")
    assert source_rows(db, "t")[(7,)][2] >= 6000000000


@pytest.mark.parametrize("sink_type", ["jdbc", "delta"])
def test_lenient_and_ignore_keep_the_sinks_columns_table_by_table(source_db, tmp_path, spark, postgres, sink_type):
    """One pipeline, one behaviour per table (``schema_changes_per_table``): ``t`` lenient, ``u`` ignore, ``v``
    the pipeline's evolve; the same ALTER on each. The mirrors are read with plain SQL, the Delta tables with
    delta-rs."""
    db = source_db
    for name in ("t", "u", "v"):
        db.execute(f"CREATE TABLE {name} (id INT PRIMARY KEY, name VARCHAR(20), qty INT, gone INT)")
        db.executemany(f"INSERT INTO {name} VALUES (%s, %s, %s, %s)", [(i, f"n{i}", i, i) for i in range(1, 51)])
    p = make_pipeline(db, tmp_path, postgres, sink_type, tables=("t", "u", "v"))
    snapshot_all(p)
    for name in ("t", "u", "v"):
        db.execute(f"ALTER TABLE {name} ADD COLUMN c INT NOT NULL DEFAULT 5, CHANGE name title VARCHAR(20), "
                   "DROP COLUMN gone, MODIFY qty BIGINT")
        db.execute(f"UPDATE {name} SET title = 'new', qty = 5000000000, c = 6 WHERE id = 1")
        db.execute(f"INSERT INTO {name} VALUES (100, 'x', 7, 8)")
    per_table = {db.table("t"): "lenient", db.table("u"): "ignore"}
    p.stream(schema_changes_per_table=per_table)
    assert evolved(p) == [("evolve", "t"), ("evolve", "u"), ("evolve", "v")]

    def mirror(name):
        """The sink table's data columns and its live rows by key, read without our code."""
        if sink_type == "delta":
            import deltalake

            live = deltalake.DeltaTable(str(Path(p.sink.path) / table_dir_name(db.table(name)))).to_pyarrow_table(
                filters=[("_cdc_deleted", "=", False)])
            names = [n for n in live.column_names if not n.startswith("_cdc_")]
            return names, {r["id"]: tuple(r[n] for n in names) for r in live.to_pylist()}
        with postgres.connect() as conn, conn.cursor() as cur:
            cur.execute(f'SELECT * FROM "s_{db.name}"."{db.name}__{name}" WHERE NOT _cdc_deleted ORDER BY id')
            names = [d[0] for d in cur.description]
            keep = [i for i, n in enumerate(names) if not n.startswith("_cdc_")]
            return [names[i] for i in keep], {r[0]: tuple(r[i] for i in keep) for r in cur.fetchall()}

    # lenient: the dropped and the renamed-away columns stay (NULL in rows written since), the new name is new
    columns, rows = mirror("t")
    assert sorted(columns) == sorted(["id", "name", "title", "qty", "gone", "c"])
    at = {n: columns.index(n) for n in columns}
    pick = lambda row: tuple(row[at[n]] for n in ("id", "name", "title", "qty", "gone", "c"))  # noqa: E731
    assert pick(rows[1]) == (1, None, "new", 5000000000, None, 6)
    assert pick(rows[2]) == (2, "n2", None, 2, 2, 5)
    assert pick(rows[100]) == (100, None, "x", 7, None, 8)
    # ignore: the mirror keeps its columns; the widening is applied, nothing is added or renamed
    columns, rows = mirror("u")
    assert sorted(columns) == sorted(["id", "name", "qty", "gone"])
    at = {n: columns.index(n) for n in columns}
    pick = lambda row: tuple(row[at[n]] for n in ("id", "name", "qty", "gone"))  # noqa: E731
    assert (pick(rows[1]), pick(rows[2]), pick(rows[100])) == (
        (1, None, 5000000000, None), (2, "n2", 2, 2), (100, None, 7, None))
    # evolve: the source's columns exactly
    assert_sink_equals_source(p, spark, postgres, db, sink_type, "v")
    # verify compares what each behaviour keeps comparable, and says what it left out
    sink = open_sink(p.sink, p.secrets, spark)
    lenient = verify_table(spark, db.settings, sink, table_types(db, "t"), [(None, None)], behaviour="lenient")
    ignored = verify_table(spark, db.settings, sink, table_types(db, "u"), [(None, None)], behaviour="ignore")
    assert not lenient.equal  # rows written before the rename have no title in the sink
    assert lenient.kept_apart == {"missing": [], "extra": ["name", "gone"]}
    assert ignored.equal and ignored.kept_apart == {"missing": ["title", "c"], "extra": ["name", "gone"]}
    assert not verify_table(spark, db.settings, sink, table_types(db, "u"), [(None, None)]).equal
