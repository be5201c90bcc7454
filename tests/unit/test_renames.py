"""A captured table renamed on the source is carried over to its new name (``pipeline.renames``): the rename's
drop names the new name (``source.ddl``, ``SchemaChange.renamed_to``), the state store remembers the move
(``StateStore.forget_table`` with ``renamed_to``), and the plan step's ``renames_due`` / ``carry_over`` move the
sink data and the state. Run against a real (local) state store and a real parquet sink on a local directory;
the sinks' own moves are tests/component/test_sink_move_table.py."""

from __future__ import annotations

import json
import uuid
from dataclasses import replace

import pyarrow as pa
import pytest

from airflow_cdc_provider.core.chunks import Chunk, TableId
from airflow_cdc_provider.core.offsets import BinlogOffset, EventPosition
from airflow_cdc_provider.core.reports import ChunkReport
from airflow_cdc_provider.core.schema_changes import SchemaChange
from airflow_cdc_provider.pipeline.collect import build_seed
from airflow_cdc_provider.pipeline.renames import (Rename, awaiting_drops, carry_over, committed, finish_carried, half_done, renames_due,
                                                  why_gone)
from airflow_cdc_provider.pipeline.resolve import captured_tables_in
from airflow_cdc_provider.pipeline.table_schemas import dropped_tables
from airflow_cdc_provider.sinks.base import SinkConfig
from airflow_cdc_provider.sinks.parquet_arrow import read_current_state
from airflow_cdc_provider.sinks.registry import open_sink
from airflow_cdc_provider.sinks.types import TableSinkTypes
from airflow_cdc_provider.source.ddl import schema_changes
from airflow_cdc_provider.source.schema import Column, TableSchema
from airflow_cdc_provider.state.records import FinishedSnapshot
from airflow_cdc_provider.state.store import StateStore

RENAME = "RENAME TABLE t TO u"
DROP_AT = EventPosition("b.000002", 500)
NOW = 1_800_000_000.0  # when a carry-over or an uncapture happens, in seconds
BEFORE_NOW = int(NOW * 1000) - 60_000  # an epoch (the plan's time in ms) planned a minute before NOW
AFTER_NOW = int(NOW * 1000) + 60_000


# --- source.ddl: the rename's drop names the new name ---------------------------------------------------------


def changes(statement: str, database: str = "db", captured=("db.t",)) -> list[tuple]:
    """``(kind, table, renamed_to)`` of each change, in order."""
    tables = {TableId.parse(name) for name in captured}
    return [(c.kind, str(c.table), None if c.renamed_to is None else str(c.renamed_to))
            for c in schema_changes(statement, database, tables.__contains__)]


@pytest.mark.parametrize("statement, new", [
    ("RENAME TABLE t TO t_old", "db.t_old"),
    ("RENAME TABLE `db`.`t` TO `db`.`t_old`", "db.t_old"),
    ("RENAME TABLE a TO b, t TO t_old", "db.t_old"),  # another table's rename in the same statement
    ("RENAME TABLES t TO t_old", "db.t_old"),
])
def test_rename_table_names_the_new_name_on_the_drop(statement, new):
    assert changes(statement) == [("drop", "db.t", new)]
    (drop,) = schema_changes(statement, "db", {TableId.parse("db.t")}.__contains__)
    assert drop.renamed_to == TableId.parse(new) and drop.detail == f"renamed to {new}"
    assert drop.statement == statement


@pytest.mark.parametrize("statement, new", [
    ("ALTER TABLE t RENAME TO u", "db.u"),
    ("ALTER TABLE t RENAME u", "db.u"),
    ("ALTER TABLE t RENAME AS u", "db.u"),
    ("ALTER TABLE `db`.`t` RENAME TO `db`.`u`", "db.u"),
    ("ALTER TABLE t DROP COLUMN d, RENAME AS other.u", "other.u"),  # with other changes: the drop still
])
def test_alter_rename_names_the_new_name_on_the_drop(statement, new):
    assert changes(statement) == [("drop", "db.t", new)]


def test_a_chain_through_an_intermediate_name_names_the_last_name():
    assert changes("RENAME TABLE t TO tmp, tmp TO t_old") == [("drop", "db.t", "db.t_old")]
    assert changes("RENAME TABLE t TO tmp, tmp TO tmp2, tmp2 TO t_old") == [("drop", "db.t", "db.t_old")]


def test_a_rename_to_another_database_names_it():
    assert changes("RENAME TABLE `db`.`t` TO `archive`.`t`") == [("drop", "db.t", "archive.t")]
    assert changes("RENAME TABLE t TO archive.t2", database="db") == [("drop", "db.t", "archive.t2")]
    # the statement run in another database: the old name is qualified, the new one is in that database
    assert changes("RENAME TABLE db.t TO t", database="other") == [("drop", "db.t", "other.t")]


@pytest.mark.parametrize("statement", [
    "RENAME TABLE t TO _t_old, _t_new TO t",
    "RENAME TABLE `db`.`t` TO `db`.`_t_del`, `db`.`_t_gho` TO `db`.`t`",
])
def test_a_swap_gives_a_resync_and_no_drop_nor_new_name(statement):
    assert changes(statement) == [("resync", "db.t", None)]


def test_renamed_back_or_other_kinds_name_no_new_name():
    assert changes("RENAME TABLE t TO tmp, tmp TO t") == []
    assert changes("DROP TABLE t") == [("drop", "db.t", None)]
    assert changes("TRUNCATE TABLE t") == [("truncate", "db.t", None)]
    # both names captured: the old one's drop names the new one, the new one's resync names nothing
    assert changes("RENAME TABLE t TO u", captured=("db.t", "db.u")) == [("drop", "db.t", "db.u"),
                                                                         ("resync", "db.u", None)]
    # two captured tables swapped: both resynced, neither dropped
    assert changes("RENAME TABLE t TO tmp, u TO t, tmp TO u", captured=("db.t", "db.u")) == [
        ("resync", "db.t", None), ("resync", "db.u", None)]


# --- SchemaChange records ----------------------------------------------------------------------------------------


def test_a_record_with_renamed_to_round_trips():
    change = SchemaChange("drop", TableId.parse("db.t"), RENAME, "renamed to archive.u", DROP_AT,
                          TableId.parse("archive.u"))
    data = change.to_dict()
    assert data["renamed_to"] == "archive.u"
    assert SchemaChange.from_dict(json.loads(json.dumps(data))) == change


def test_a_record_without_renamed_to_has_no_key_and_round_trips():
    change = SchemaChange("drop", TableId.parse("db.t"), "DROP TABLE t", "", DROP_AT)
    data = change.to_dict()
    assert "renamed_to" not in data
    assert SchemaChange.from_dict(data) == change and SchemaChange.from_dict(data).renamed_to is None
    unplaced = SchemaChange("truncate", TableId.parse("db.t"), "TRUNCATE t")
    assert SchemaChange.from_dict(unplaced.to_dict()) == unplaced


def test_an_old_record_without_the_key_still_loads(tmp_path):
    old = {"kind": "drop", "table": "db.t", "statement": "RENAME TABLE t TO u", "detail": "renamed to db.u",
           "position": {"file": "b.000002", "pos": 500, "row": 0}}
    assert SchemaChange.from_dict(old) == SchemaChange("drop", TableId.parse("db.t"), "RENAME TABLE t TO u",
                                                       "renamed to db.u", DROP_AT)
    # a state store written by an earlier release: read, and a new rename's record added beside it
    state = StateStore(tmp_path / "state")
    state.write_json(state.SCHEMA_CHANGES, [old])
    state.record_schema_changes([drop_of("db.v", "db.w", 700)])
    assert [(str(c.table), c.renamed_to and str(c.renamed_to)) for c in state.schema_changes()] == [
        ("db.t", None), ("db.v", "db.w")]


def test_the_state_store_keeps_renamed_to(tmp_path):
    state = StateStore(tmp_path / "state")
    drop = drop_of("db.t", "db.u")
    state.record_schema_changes([drop])
    state.record_schema_changes([drop])  # a re-run of the batch adds nothing
    assert state.schema_changes() == [drop]
    assert state.read_json(state.SCHEMA_CHANGES)[0]["renamed_to"] == "db.u"


# --- a pipeline's state ------------------------------------------------------------------------------------------


KEY = ("id",)  # the key of the tables the state captured


def drop_of(old: str, new: str | None, pos: int = 500) -> SchemaChange:
    """The drop the stream reads of ``old`` renamed to ``new`` (None: a DROP TABLE) at ``b.000002:<pos>``."""
    statement = f"RENAME TABLE {old} TO {new}" if new else f"DROP TABLE {old}"
    return SchemaChange("drop", TableId.parse(old), statement, f"renamed to {new}" if new else "",
                        EventPosition("b.000002", pos), TableId.parse(new) if new else None)


def finished(table: str, hw: int = 100, epoch: int = 1) -> FinishedSnapshot:
    chunk = Chunk(TableId.parse(table), 0, ("id",), None, None, epoch=epoch)
    return FinishedSnapshot(table, epoch, (ChunkReport(chunk, BinlogOffset("b.000002", hw - 10),
                                                       BinlogOffset("b.000002", hw), 5, 0, 0.1),))


def capture(state: StateStore, *tables: str) -> None:
    """``tables`` snapshotted, seeded and streamed, their definitions saved, as a pipeline leaves them."""
    for table in tables:
        state.write_finished_snapshot(finished(table))
        state.write_table_schema(table, rows_of(table).schema.to_dict())
    state.write_seed(build_seed(state.finished_tables()))
    state.add_streamed_tables(tables)


def checkpoint(state: StateStore, pos: int, batch: int = 0, committed: bool = True) -> None:
    """Spark's checkpoint of a stream batch ``batch`` ending at ``b.000002:<pos>``: ``offsets/<batch>`` (a
    version line, the batch's metadata, the source's offset) and, once committed, ``commits/<batch>``."""
    offset = json.dumps({"file": "b.000002", "pos": pos, "gtid": None, "ts_ms": 0, "behind": False})
    state.storage.write_text(f"{state.CHECKPOINT}/offsets/{batch}", f"v1\n{{\"batchWatermarkMs\":0}}\n{offset}\n")
    if committed:
        state.storage.write_text(f"{state.CHECKPOINT}/commits/{batch}", "v1\n{\"nextBatchWatermarkMs\":0}")


@pytest.fixture
def state(tmp_path) -> StateStore:
    """A pipeline that captured db.t and db.s; the stream read db.t's rename to db.u (and a truncate of db.s)."""
    store = StateStore(tmp_path / "state")
    capture(store, "db.t", "db.s")
    store.record_schema_changes([SchemaChange("truncate", TableId.parse("db.s"), "TRUNCATE s",
                                              position=EventPosition("b.000002", 300)),
                                 drop_of("db.t", "db.u")])
    checkpoint(store, 900)  # the batch that read them committed
    return store


def source(*tables: str):
    """The source's table list, as ``Pipeline.source_tables`` gives it."""
    return lambda: set(tables)


def no_source():
    raise AssertionError("the source's tables were asked for with no rename to carry over")


# --- StateStore: forget_table with renamed_to --------------------------------------------------------------------


def test_forget_table_with_renamed_to_marks_the_move(state):
    state.forget_table("db.t", "uncaptured/db.t-1", NOW, renamed_to="db.u")
    assert state.renamed_tables() == {"db.t": "db.u"}
    assert state.carried_tables() == {"db.u": "db.t"}
    assert state.uncaptured_tables() == {"db.t": NOW}
    mark = state.read_json("uncaptured/db.t-1/uncaptured.json")
    assert mark["renamed_to"] == "db.u" and mark["complete"] is True and mark["table"] == "db.t"
    assert [c["statement"] for c in mark["schema_changes"]] == ["RENAME TABLE db.t TO db.u"]
    # the old name is out of the pipeline: not captured, seeded, streamed, nor dropped any more
    assert captured_tables_in(state) == {"db.s"} and state.streamed_tables() == {"db.s"}
    assert list(state.read_seed().tables) == ["db.s"]
    assert [str(c.table) for c in state.schema_changes()] == ["db.s"] and dropped_tables(state) == {}
    assert state.read_json("uncaptured/db.t-1/state/snapshot.json")["table"] == "db.t"
    assert state.unfinished_uncapture("db.t") is None


def test_a_plain_forget_table_is_no_rename(state):
    state.forget_table("db.s", "uncaptured/db.s-1", NOW)
    assert state.uncaptured_tables() == {"db.s": NOW}
    assert state.renamed_tables() == {} and state.carried_tables() == {}
    assert "renamed_to" not in state.read_json("uncaptured/db.s-1/uncaptured.json")


def test_the_new_name_stays_carried_until_a_snapshot_planned_after_the_move_finishes(state):
    state.forget_table("db.t", "uncaptured/db.t-1", NOW, renamed_to="db.u")
    # a snapshot of db.u planned before the move (a run that went on meanwhile) does not count
    state.write_finished_snapshot(finished("db.u", epoch=BEFORE_NOW))
    assert state.carried_tables() == {"db.u": "db.t"}
    state.write_finished_snapshot(finished("db.u", epoch=AFTER_NOW))
    assert state.carried_tables() == {}
    assert state.renamed_tables() == {"db.t": "db.u"}  # the old name's fate is still known


@pytest.mark.parametrize("then", ["renamed away", "uncaptured"])
def test_a_carried_name_snapshotted_since_is_not_carried_again_when_it_is_taken_out_later(state, then):
    state.forget_table("db.t", "uncaptured/db.t-1", NOW, renamed_to="db.u")
    state.write_finished_snapshot(finished("db.u", epoch=AFTER_NOW))
    state.write_table_schema("db.u", {"table": "db.u"})
    assert state.carried_tables() == {}
    state.forget_table("db.u", "uncaptured/db.u-1", NOW + 3600, renamed_to="db.z" if then == "renamed away" else None)
    assert "db.u" not in state.carried_tables()


def test_the_last_forget_of_a_table_says_whether_it_was_renamed(state):
    state.forget_table("db.t", "uncaptured/db.t-1", NOW, renamed_to="db.u")
    # db.t captured again later (a new table of the name), then taken out by airflow-cdc uncapture
    capture(state, "db.t")
    state.forget_table("db.t", "uncaptured/db.t-2", NOW + 10)
    assert state.uncaptured_tables() == {"db.t": NOW + 10}
    assert state.renamed_tables() == {}
    assert state.carried_tables() == {"db.u": "db.t"}  # db.u itself was not snapshotted since the move


def test_two_renames_in_a_row_each_carry_their_new_name(state):
    state.forget_table("db.t", "uncaptured/db.t-1", NOW, renamed_to="db.u")
    state.forget_table("db.s", "uncaptured/db.s-1", NOW + 1, renamed_to="db.s2")
    assert state.renamed_tables() == {"db.t": "db.u", "db.s": "db.s2"}
    assert state.carried_tables() == {"db.u": "db.t", "db.s2": "db.s"}
    assert state.uncaptured_tables() == {"db.t": NOW, "db.s": NOW + 1}


# --- renames_due -------------------------------------------------------------------------------------------------


def test_a_rename_to_a_name_the_source_has_is_due(state):
    due = renames_due(state, source("db.s", "db.u"))
    assert due == {"db.u": Rename("db.t", "db.u", drop_of("db.t", "db.u"))}
    assert due["db.u"].describe() == "db.t renamed to db.u at b.000002:500"


def test_the_source_is_not_asked_without_a_renamed_drop(tmp_path, state):
    empty = StateStore(tmp_path / "empty")
    assert renames_due(empty, no_source) == {}
    plain = StateStore(tmp_path / "plain")
    capture(plain, "db.t")
    plain.record_schema_changes([drop_of("db.t", None)])
    assert renames_due(plain, no_source) == {}


@pytest.mark.parametrize("tables, why", [
    (("db.s",), "the new name is not on the source (renamed again, or dropped)"),
    (("db.s", "db.t", "db.u"), "the source has the old name again"),
    ((), "the source has nothing"),
])
def test_not_due_when_the_source_says_otherwise(state, tables, why):
    assert renames_due(state, source(*tables)) == {}, why


@pytest.mark.parametrize("hold", ["snapshot", "seed", "streamed", "schema"])
def test_not_due_when_the_pipeline_holds_the_new_name(state, hold):
    if hold == "snapshot":
        state.write_finished_snapshot(finished("db.u"))
    elif hold == "seed":
        seed = state.read_seed()
        state.write_seed(replace(seed, tables={**seed.tables, "db.u": seed.tables["db.s"]}))
    elif hold == "streamed":
        state.add_streamed_tables(["db.u"])
    else:
        state.write_table_schema("db.u", {"table": "db.u"})
    assert renames_due(state, source("db.s", "db.u")) == {}


def test_not_due_when_the_new_name_was_taken_out_with_its_sink_data_kept(state):
    capture(state, "db.u")
    state.forget_table("db.u", "uncaptured/db.u-1", NOW - 100)  # airflow-cdc uncapture: its sink data stays
    assert "db.u" not in captured_tables_in(state)
    assert renames_due(state, source("db.s", "db.u")) == {}


def test_due_when_the_new_name_was_itself_renamed_away_before(state):
    """db.u was captured, renamed to db.z and carried over there: the name db.u holds no sink data any more."""
    capture(state, "db.u")
    state.forget_table("db.u", "uncaptured/db.u-1", NOW - 100, renamed_to="db.z")
    due = renames_due(state, source("db.s", "db.u", "db.z"))
    assert list(due) == ["db.u"] and due["db.u"].old == "db.t"


def test_not_due_once_a_snapshot_after_the_drop_covers_the_old_name(state):
    """A snapshot of db.t that started after the drop: the name holds a table again, nothing was renamed."""
    state.write_finished_snapshot(finished("db.t", hw=800, epoch=2))
    assert dropped_tables(state) == {}
    assert renames_due(state, source("db.s", "db.u")) == {}


def test_a_later_plain_drop_of_the_old_name_is_no_rename(state):
    """db.t renamed to db.u, renamed back, then dropped: its last drop names no new name."""
    state.record_schema_changes([SchemaChange("resync", TableId.parse("db.t"), "RENAME TABLE u TO t",
                                              position=EventPosition("b.000002", 600)),
                                 drop_of("db.t", None, 700)])
    assert renames_due(state, source("db.s", "db.u")) == {}


def test_two_tables_renamed_to_names_the_source_has_are_both_due(state):
    state.record_schema_changes([drop_of("db.s", "db.s2", 600)])
    due = renames_due(state, source("db.u", "db.s2"))
    assert {new: r.old for new, r in due.items()} == {"db.u": "db.t", "db.s2": "db.s"}


# --- carry_over ---------------------------------------------------------------------------------------------------


def rows_of(table: str) -> TableSinkTypes:
    columns = (Column("id", "int", "int(11)", False, None, None, None, 10, 0, None),
               Column("name", "varchar", "varchar(20)", True, "utf8mb4", None, 20, None, None, None))
    return TableSinkTypes.of(TableSchema(TableId.parse(table), columns, ("id",), ("id",)))


def write_rows(sink, table: str, batch_id: int, data: list[tuple], op: str = "c", pos: int = 100) -> None:
    """A stream batch of ``table`` written as the driver writes a small one (``write_arrow_changes``)."""
    n = len(data)
    rows = pa.table({"id": [r[0] for r in data], "name": [r[1] for r in data], "_cdc_op": [op] * n,
                     "_cdc_ts_ms": [0] * n, "_cdc_file_seq": [2] * n, "_cdc_pos": [pos + i for i in range(n)],
                     "_cdc_row": [0] * n})
    sink.write_arrow_changes(rows, rows_of(table), batch_id, lambda: None)


def table_rows(sink, table: str) -> list[tuple]:
    got = read_current_state(sink.config.path, table, ["id"])
    return sorted(tuple(r.values()) for r in got.to_pylist())


@pytest.fixture
def sink(tmp_path):
    """The parquet sink db.t and db.s were written to."""
    out = open_sink(SinkConfig(type="parquet", path=str(tmp_path / "sink")), {})
    write_rows(out, "db.t", 0, [(1, "one"), (2, "two"), (3, "three")])
    write_rows(out, "db.t", 1, [(2, None)], op="d", pos=200)
    write_rows(out, "db.s", 0, [(9, "nine")])
    return out


def assert_nothing_changed(state, sink) -> None:
    assert table_rows(sink, "db.t") == [(1, "one"), (3, "three")]
    assert not sink.layout.storage.exists("db.u")
    assert captured_tables_in(state) == {"db.s", "db.t"} and state.streamed_tables() == {"db.s", "db.t"}
    assert state.renamed_tables() == {} and state.uncaptured_tables() == {}
    assert list(renames_due(state, source("db.s", "db.u"))) == (["db.u"] if committed(state, drop_of("db.t", "db.u"))
                                                                 else [])


@pytest.mark.parametrize("batches", [
    [],  # no stream batch committed
    [(400, True)],  # the last committed batch ends before the rename
    [(500, True)],  # ... right where the rename starts: it is the next batch's
    [(400, True), (900, False)],  # the batch that read it is planned, not committed (a stopped stream)
])
def test_refused_until_the_stream_committed_the_batch_that_read_the_rename(state, sink, batches):
    state.storage.rmtree(state.CHECKPOINT)
    for n, (pos, done) in enumerate(batches):
        checkpoint(state, pos, n, done)
    # not due, and the new name waits: a restart would run the batch again, writing the old name's sink data
    assert renames_due(state, source("db.s", "db.u")) == {}
    assert awaiting_drops(state, {"db.s", "db.u"}, position(1000)) == {"db.t"}
    rename = Rename("db.t", "db.u", drop_of("db.t", "db.u"))
    assert carry_over(rename, state, sink, KEY, NOW) == "the stream has not committed the batch that read the rename"
    assert_nothing_changed(state, sink)


def test_refused_for_a_drop_without_a_position(state, sink):
    checkpoint(state, 900)
    rename = Rename("db.t", "db.u", replace(drop_of("db.t", "db.u"), position=None))
    assert carry_over(rename, state, sink, KEY, NOW) == "the stream has not committed the batch that read the rename"
    assert_nothing_changed(state, sink)


def test_carried_over_the_sink_data_moves_and_the_state_forgets_the_old_name(state, sink, tmp_path):
    checkpoint(state, 400, 0)
    checkpoint(state, 900, 1)
    rename = renames_due(state, source("db.s", "db.u"))["db.u"]
    assert carry_over(rename, state, sink, KEY, NOW) is None

    # the sink: db.t's directory is db.u's now, with its rows and its delete
    assert table_rows(sink, "db.u") == [(1, "one"), (3, "three")]
    assert not (tmp_path / "sink" / "db.t").exists() and (tmp_path / "sink" / "db.u" / "changes").is_dir()
    assert sorted(p.name for p in (tmp_path / "sink" / "db.u" / "changes").iterdir()) == ["batch=0", "batch=1"]
    assert read_current_state(sink.config.path, "db.t", ["id"]).num_rows == 0
    assert table_rows(sink, "db.s") == [(9, "nine")]
    # the state: db.t taken out, marked renamed to db.u, which is carried until snapshotted
    archive = f"uncaptured/db.t-{int(NOW * 1000)}"
    assert state.read_json(f"{archive}/uncaptured.json")["renamed_to"] == "db.u"
    assert state.renamed_tables() == {"db.t": "db.u"} and state.carried_tables() == {"db.u": "db.t"}
    assert captured_tables_in(state) == {"db.s"} and state.streamed_tables() == {"db.s"}
    assert dropped_tables(state) == {} and [str(c.table) for c in state.schema_changes()] == ["db.s"]
    assert renames_due(state, source("db.s", "db.u")) == {}  # done: nothing due again
    assert finish_carried(state, sink) == {"db.u": "db.t"}  # nothing half done to finish
    assert why_gone(state, "db.t") == "renamed to db.u, which holds its sink data now"


def test_a_crash_after_the_sink_moved_is_finished_by_the_next_try(state, sink, tmp_path):
    checkpoint(state, 900)
    rename = renames_due(state, source("db.s", "db.u"))["db.u"]
    assert sink.move_table("db.t", "db.u") is None  # the first try got this far
    assert list(renames_due(state, source("db.s", "db.u"))) == ["db.u"]
    assert carry_over(rename, state, sink, KEY, NOW) is None
    assert table_rows(sink, "db.u") == [(1, "one"), (3, "three")]
    assert state.renamed_tables() == {"db.t": "db.u"} and captured_tables_in(state) == {"db.s"}


def test_a_carry_over_stopped_after_its_mark_is_finished_whatever_the_source_is_now(state, sink):
    """The mark is written first: the next plan step finds it incomplete and finishes the move and the state's
    step, without asking the source (the names may have changed again since)."""
    archive = f"uncaptured/db.t-{int(NOW * 1000)}"
    state.write_json(f"{archive}/uncaptured.json", {"table": "db.t", "uncaptured_at": NOW, "complete": False,
                                                     "schema_changes": [], "renamed_to": "db.u"})
    assert state.unfinished_uncapture("db.t") == archive
    assert "db.t" in captured_tables_in(state)
    assert [(new, old, where) for new, old, where, _ in half_done(state)] == [("db.u", "db.t", archive)]

    assert finish_carried(state, sink) == {"db.u": "db.t"}
    assert half_done(state) == []  # carried, its snapshot still to come: nothing left half way

    assert table_rows(sink, "db.u") == [(1, "one"), (3, "three")] and not sink.layout.storage.exists("db.t")
    assert state.unfinished_uncapture("db.t") is None
    assert state.read_json(f"{archive}/uncaptured.json")["complete"] is True
    assert state.read_json(f"{archive}/uncaptured.json")["renamed_to"] == "db.u"
    assert captured_tables_in(state) == {"db.s"} and state.streamed_tables() == {"db.s"}
    assert state.renamed_tables() == {"db.t": "db.u"}


def test_refused_by_a_sink_that_cannot_rename_a_directory_in_one_step(state):
    checkpoint(state, 900)
    memory = open_sink(SinkConfig(type="parquet", path=f"memory://renames-{uuid.uuid4().hex}"), {})
    write_rows(memory, "db.t", 0, [(1, "one")])
    rename = renames_due(state, source("db.s", "db.u"))["db.u"]
    assert carry_over(rename, state, memory, KEY, NOW) == "a directory rename on memory:// copies each file, so it is not done"
    assert table_rows(memory, "db.t") == [(1, "one")] and not memory.layout.storage.exists("db.u")
    assert captured_tables_in(state) == {"db.s", "db.t"} and state.renamed_tables() == {}


def test_refused_when_the_sink_holds_the_new_name_already(state, sink):
    checkpoint(state, 900)
    write_rows(sink, "db.u", 0, [(7, "other")])
    rename = renames_due(state, source("db.s", "db.u"))["db.u"]
    assert carry_over(rename, state, sink, KEY, NOW) == f"parquet sink at {sink.config.path} holds db.u already"
    assert table_rows(sink, "db.t") == [(1, "one"), (3, "three")] and table_rows(sink, "db.u") == [(7, "other")]
    assert captured_tables_in(state) == {"db.s", "db.t"} and state.renamed_tables() == {}


# --- why_gone -----------------------------------------------------------------------------------------------------


def test_why_a_captured_table_is_gone(state):
    assert why_gone(state, "db.s") == "the stream has not reached its drop yet"
    assert why_gone(state, "db.t") == ("drop of db.t (renamed to db.u) at b.000002:500: RENAME TABLE db.t TO db.u; "
                                       "its sink data is kept")
    state.record_schema_changes([drop_of("db.s", None, 600)])
    assert why_gone(state, "db.s") == "drop of db.s at b.000002:600: DROP TABLE db.s; its sink data is kept"
    state.forget_table("db.t", "uncaptured/db.t-1", NOW, renamed_to="db.u")
    assert why_gone(state, "db.t") == "renamed to db.u, which holds its sink data now"
    assert why_gone(state, "db.s") == "drop of db.s at b.000002:600: DROP TABLE db.s; its sink data is kept"


# --- awaiting_drops ----------------------------------------------------------------------------------------------


def position(pos: int):
    """The source's position now, as ``Pipeline.source_position`` gives it, counting the calls."""
    def now() -> BinlogOffset:
        now.calls += 1
        return BinlogOffset("b.000002", pos)
    now.calls = 0
    return now


def test_a_table_the_stream_reads_gone_without_a_drop_read_makes_new_tables_wait(state):
    asked = position(1000)
    assert awaiting_drops(state, {"db.s", "db.u"}, asked) == set()  # db.t's drop (its rename) is read, committed
    assert asked.calls == 0
    capture(state, "db.r")
    assert awaiting_drops(state, {"db.s", "db.u"}, asked) == {"db.r"}  # db.r left the source; no drop read
    assert awaiting_drops(state, {"db.s", "db.u"}, position(2000)) == {"db.r"}  # noted at 1000 once
    assert asked.calls == 1 and state.read_json(state.MISSING) == {"db.r": BinlogOffset("b.000002", 1000).to_dict()}
    assert awaiting_drops(state, {"db.s", "db.u", "db.r"}, asked) == set()  # back: the note goes
    assert state.read_json(state.MISSING) == {}
    state.forget_table("db.t", "uncaptured/db.t-1", NOW, renamed_to="db.u")
    assert awaiting_drops(state, {"db.s", "db.r"}, asked) == set()  # carried over: gone for good


def test_waiting_ends_once_the_stream_committed_past_where_the_table_was_found_missing(state):
    """A DROP TABLE run with sql_log_bin=0 leaves no drop to read: once the stream has committed past the
    source's position when the table was found missing, it would have read one."""
    capture(state, "db.r")
    assert awaiting_drops(state, {"db.s", "db.u"}, position(1000)) == {"db.r"}
    checkpoint(state, 1000, batch=1)
    assert awaiting_drops(state, {"db.s", "db.u"}, position(3000)) == set()


def test_a_renames_drop_not_committed_yet_makes_new_tables_wait(state):
    state.storage.rmtree(state.CHECKPOINT)
    checkpoint(state, 400)
    assert awaiting_drops(state, {"db.s", "db.u"}, position(1000)) == {"db.t"}


# --- refusals of the review's cases ------------------------------------------------------------------------------


def test_two_tables_renamed_to_one_name_carry_neither_over(state):
    """db.t -> db.u, db.u -> db.z (not read: db.u was not captured), db.q -> db.u: which table db.u holds is not
    known from the drops alone."""
    capture(state, "db.q")
    state.record_schema_changes([drop_of("db.q", "db.u", pos=700)])
    assert renames_due(state, source("db.s", "db.u")) == {}


def test_refused_when_the_new_names_key_differs(state, sink):
    rename = renames_due(state, source("db.s", "db.u"))["db.u"]
    assert carry_over(rename, state, sink, ("id", "region"), NOW) == "its key changed from id to id, region"
    assert_nothing_changed(state, sink)


def test_a_half_done_carry_over_the_sink_refuses_now_is_undone(state, sink):
    archive = f"uncaptured/db.t-{int(NOW * 1000)}"
    state.mark_forget("db.t", archive, NOW, renamed_to="db.u")
    write_rows(sink, "db.u", 0, [(7, "other")])  # the sink holds the new name: the move is refused
    assert finish_carried(state, sink) == {}
    assert not state.exists(f"{archive}/uncaptured.json") and state.renamed_tables() == {}
    assert table_rows(sink, "db.t") == [(1, "one"), (3, "three")]
    assert captured_tables_in(state) == {"db.s", "db.t"}
