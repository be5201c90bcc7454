"""Snapshot windows written into a sink that holds rows already, with changes committed inside the window.

The jdbc mirror upserts a window's rows while they are read, under the window's low watermark, then the last
change of each key the binlog window touched on top, under that change's position; the delta sink writes a first
snapshot's window the same way, as data files of the table. Changes committed while a
window sits between its SELECT and its high watermark (updates, deletes, inserts; a TRUNCATE and what follows it)
must leave the mirror equal to MariaDB row by row, with the chunk reports counting the rows as of the HW. In a
re-snapshot (jdbc and delta) the sink holds every key already, from the old epoch's chunks."""

from __future__ import annotations

from pathlib import Path

import deltalake
import pytest

from airflow_cdc_provider.state.store import table_dir_name

from .cdc_helpers import Pipeline, delta_sink, jdbc_sink, paused_snapshot, sink_rows, source_rows, table_types


def make_tables(db, names, rows: int) -> None:
    for t in names:
        db.execute(f"CREATE TABLE {t} (id INT PRIMARY KEY, v INT NOT NULL, note VARCHAR(20))")
        db.execute(f"INSERT INTO {t} SELECT seq, seq, 'init' FROM seq_1_to_{rows}")


@pytest.mark.parametrize("sink_type", ["jdbc", "delta"])
def test_changes_and_a_truncate_inside_first_snapshot_windows_then_the_stream(source_db, tmp_path, spark, postgres,
                                                                              sink_type):
    """jdbc upserts the window while reading it; delta writes it as data files of the table: both under the low
    watermark, with the binlog window's last changes on top."""
    db = source_db
    make_tables(db, ("items", "tr"), 3000)
    schema = f"w_{db.name}"
    sink = jdbc_sink(postgres, schema) if sink_type == "jdbc" else delta_sink(tmp_path)
    p = Pipeline(db, tmp_path, sink, ["items", "tr"], postgres=postgres, chunk_size=1000)
    chunks = p.plan()
    by_table = {t: [c for c in chunks if str(c.table) == db.table(t)] for t in ("items", "tr")}

    def items_window():  # keys read, then changed or deleted; keys inserted after the SELECT, one deleted again
        db.execute("UPDATE items SET v = -v, note = 'in window' WHERE id IN (5, 1500, 2999)")
        db.execute("DELETE FROM items WHERE id IN (7, 1501)")
        db.execute("INSERT INTO items VALUES (5000, 5000, 'new'), (5001, 5001, 'new')")
        db.execute("DELETE FROM items WHERE id = 5001")
        db.execute("UPDATE items SET note = 'twice' WHERE id = 5")

    def tr_window():  # the rows read are void; only what follows the TRUNCATE remains
        db.execute("UPDATE tr SET note = 'before' WHERE id = 10")
        db.execute("TRUNCATE TABLE tr")
        db.execute("INSERT INTO tr VALUES (10, 10, 'after'), (20, 20, 'after'), (4000, 4000, 'after')")
        db.execute("UPDATE tr SET v = 21 WHERE id = 20")
        db.execute("DELETE FROM tr WHERE id = 4000")

    paused_snapshot(p, by_table["items"], tmp_path / "items-paused", items_window)
    paused_snapshot(p, by_table["tr"], tmp_path / "tr-paused", tr_window)
    p.collect()
    for t in ("items", "tr"):
        reports = p.state.finished_snapshot(db.table(t)).chunks
        assert sum(r.window_events_applied for r in reports) > 0, f"{t}: no change landed in its window"
        assert sum(r.rows for r in reports) == len(source_rows(db, t)), f"{t}: the reports do not count the HW's rows"
        assert sink_rows(spark, p.sink, p.secrets, table_types(db, t)) == source_rows(db, t), t

    db.execute("UPDATE items SET note = 'streamed' WHERE id IN (1, 5000)")
    db.execute("INSERT INTO tr VALUES (30, 30, 'streamed')")
    p.stream()
    for t in ("items", "tr"):
        assert sink_rows(spark, p.sink, p.secrets, table_types(db, t)) == source_rows(db, t), t
    if sink_type == "jdbc":
        with postgres.connect() as conn, conn.cursor() as cur:  # the mirror itself: live rows are the source's keys
            cur.execute(f'SELECT id FROM "{schema}"."{db.name}__tr" WHERE NOT _cdc_deleted ORDER BY id')
            assert [r[0] for r in cur.fetchall()] == [10, 20, 30]
        return
    for t in ("items", "tr"):  # the Delta table itself: the windows appended, their binlog windows on top
        uri = str(Path(p.sink.path) / table_dir_name(db.table(t)))
        history = [c.get("airflow_cdc", "") for c in reversed(deltalake.DeltaTable(uri).history())]
        appended = [c["airflow_cdc"] for c in deltalake.DeltaTable(uri).history() if c["operation"] == "WRITE"]
        assert appended and all(w.startswith("snapshot epoch ") and " chunks " in w for w in appended), history
        assert any("the last changes of its binlog window" in str(w) for w in history), history
    live = deltalake.DeltaTable(uri).to_pyarrow_table(columns=["id"], filters=[("_cdc_deleted", "=", False)])
    assert sorted(live.column("id").to_pylist()) == [10, 20, 30]


@pytest.mark.parametrize("sink_type", ["jdbc", "delta"])
def test_a_resnapshot_s_retried_window_and_truncate_leave_no_row_of_the_old_epoch(source_db, tmp_path, spark,
                                                                                    postgres, sink_type):
    """In a re-snapshot the sink already holds every key, written by the old epoch's chunks, at the very version
    the new epoch's first window reads at (nothing is written in between). A window killed after its SELECT (jdbc:
    it wrote its rows already); a row deleted before the retry must still go. A TRUNCATE inside a window must take
    every older row with it, whichever epoch's chunk last wrote it."""
    db = source_db
    make_tables(db, ("ret", "tr"), 1500)
    schema = f"r_{db.name}"
    sink = jdbc_sink(postgres, schema) if sink_type == "jdbc" else delta_sink(tmp_path)
    p = Pipeline(db, tmp_path, sink, ["ret", "tr"], postgres=postgres, chunk_size=500)
    p.snapshot(p.plan())
    p.collect()

    again = p.plan()  # the re-snapshot: a new epoch of both tables
    ret = [c for c in again if str(c.table) == db.table("ret")]
    p.snapshot(ret[:1])
    kill = {"point": "after_select", "action": "kill", "once": str(tmp_path / "killed")}
    assert p.snapshot(ret[1:], fault=kill, check=False).returncode != 0, "the injected SIGKILL did not happen"
    db.execute("DELETE FROM ret WHERE id = 1200")  # between the attempts: the retry does not read it
    db.execute("UPDATE ret SET note = 'between' WHERE id = 1300")
    p.snapshot(ret[1:])

    def tr_window():
        db.execute("TRUNCATE TABLE tr")
        db.execute("INSERT INTO tr VALUES (10, 10, 'after'), (2000, 2000, 'after')")

    paused_snapshot(p, [c for c in again if str(c.table) == db.table("tr")], tmp_path / "tr-paused", tr_window)
    p.collect()
    p.stream()
    for t in ("ret", "tr"):
        assert sink_rows(spark, p.sink, p.secrets, table_types(db, t)) == source_rows(db, t), t
    if sink_type == "jdbc":  # the mirror itself
        with postgres.connect() as conn, conn.cursor() as cur:
            cur.execute(f'SELECT id FROM "{schema}"."{db.name}__tr" WHERE NOT _cdc_deleted ORDER BY id')
            assert [r[0] for r in cur.fetchall()] == [10, 2000]
            cur.execute(f'SELECT _cdc_deleted FROM "{schema}"."{db.name}__ret" WHERE id = 1200')
            assert cur.fetchone() == (True,)
    else:  # the Delta table read back with delta-rs
        from deltalake import DeltaTable

        live = DeltaTable(f"{sink.path}/{db.table('tr')}").to_pyarrow_table(filters=[("_cdc_deleted", "=", False)])
        assert sorted(live.column("id").to_pylist()) == [10, 2000]
