"""A table's versions: where the newest version's columns come from for rows of an older one, rows carried up,
the version in force at a position, and the state store's record of them (first writer wins)."""

from __future__ import annotations

from dataclasses import replace
from decimal import Decimal

import pytest

from airflow_cdc_provider.core.chunks import TableId
from airflow_cdc_provider.core.offsets import EventPosition
from airflow_cdc_provider.source.schema import Column, TableSchema
from airflow_cdc_provider.source.table_versions import TableVersion, origins, upcast, version_at
from airflow_cdc_provider.state.store import StateStore

T = TableId("db", "t")


def column(name, data_type="int", column_type=None):
    return Column(name, data_type, column_type or data_type, True, None, None, None, None, None, None)


def schema(*names):
    return TableSchema(T, tuple(column(n) for n in names), ("id",), ("id",))


def at(pos):
    return EventPosition("mysql-bin.000001", pos, 0)


VERSIONS = [
    TableVersion(0, schema("id", "name", "qty")),
    # ADD c DEFAULT 'x', CHANGE name title
    TableVersion(1, schema("id", "title", "qty", "c"), at(100), "alter 1", renamed={"title": "name"}, added={"c": "x"}),
    # DROP c, ADD c again (another default), RENAME qty TO amount, ADD d FIRST
    TableVersion(2, schema("d", "id", "title", "amount", "c"), at(200), "alter 2", renamed={"amount": "qty"},
                 added={"d": Decimal("1.50"), "c": None}),
]


def test_origins_follow_renames_and_added_values_through_every_version():
    assert origins(VERSIONS, 0) == {"d": ("value", Decimal("1.50")), "id": ("column", "id"),
                                    "title": ("column", "name"), "amount": ("column", "qty"), "c": ("value", None)}
    assert origins(VERSIONS, 1)["title"] == ("column", "title")
    assert origins(VERSIONS, 2) == {n: ("column", n) for n in ("d", "id", "title", "amount", "c")}


def test_a_row_of_an_old_version_is_carried_up_as_the_source_carried_its_rows():
    row = {"id": 7, "name": "seven", "qty": 70}
    assert upcast(row, VERSIONS, 0) == {"d": Decimal("1.50"), "id": 7, "title": "seven", "amount": 70, "c": None}
    assert upcast({"id": 7, "title": "s", "qty": 1, "c": "y"}, VERSIONS, 1) == {
        "d": Decimal("1.50"), "id": 7, "title": "s", "amount": 1, "c": None}
    newest = {"d": 1, "id": 7, "title": "s", "amount": 1, "c": "z"}
    assert upcast(newest, VERSIONS, 2) == newest


def test_the_version_in_force_starts_at_its_own_position():
    assert version_at(VERSIONS, (1, 99, 0)).number == 0
    assert version_at(VERSIONS, (1, 100, 0)).number == 1
    assert version_at(VERSIONS, (1, 150, -1)).number == 1
    assert version_at(VERSIONS, (2, 4, 0)).number == 2


def test_versions_round_trip_through_the_state_store_and_the_first_writer_wins(tmp_path):
    store = StateStore(tmp_path / "state")
    assert store.table_versions("db.t", 5) == []
    store.note_snapshot_definition("db.t", 5, VERSIONS[0].schema)
    assert not store.snapshot_definitions_mixed("db.t", 5)
    # recorded out of order: numbered by position when read
    assert store.record_table_version("db.t", 5, VERSIONS[2]) == VERSIONS[2]
    assert store.record_table_version("db.t", 5, VERSIONS[1]) == VERSIONS[1]
    other = TableVersion(1, schema("id", "x"), at(100), "another attempt")
    assert store.record_table_version("db.t", 5, other) == VERSIONS[1]
    assert store.table_versions("db.t", 5) == VERSIONS
    assert store.table_versions("db.t", 6) == []
    # a snapshot task of the epoch that read another definition: no base to trust
    store.note_snapshot_definition("db.t", 5, schema("id", "other"))
    assert store.snapshot_definitions_mixed("db.t", 5)


def test_the_stream_orders_keys_as_the_snapshot_that_read_the_chunks_did_even_with_mixed_definitions(tmp_path):
    """The emit filter's key order comes from the epoch's base (the definition the first snapshot task read the
    table with, checked against the chunks' planned order), not from the stream's chain: that is today's definition
    when the snapshot's tasks read mixed ones, and may give a key column another collation."""
    from airflow_cdc_provider.pipeline.table_schemas import chunk_order_schemas

    store = StateStore(tmp_path / "state")
    general = TableSchema(T, (Column("id", "varchar", "varchar(10)", False, "utf8mb4", "utf8mb4_general_ci",
                                     10, None, None, None),), ("id",), ("id",))
    binary = TableSchema(T, (replace(general.columns[0], collation="utf8mb4_bin"),), ("id",), ("id",))
    today = {"db.t": [TableVersion(0, binary)]}
    assert chunk_order_schemas(store, today, {"db.t": 3}) == {"db.t": binary}  # no snapshot: the chain's base
    store.note_snapshot_definition("db.t", 3, general)
    store.note_snapshot_definition("db.t", 3, binary)  # a later task read another definition
    assert store.snapshot_definitions_mixed("db.t", 3)
    assert chunk_order_schemas(store, today, {"db.t": 3}) == {"db.t": general}


def test_chunks_of_an_epoch_are_read_under_its_first_definition_only(tmp_path):
    """An ALTER between the chunk tasks of one snapshot epoch: the tasks reading the new definition refuse, naming
    the table and the re-snapshot; those reading the epoch's first one go on."""
    from airflow_cdc_provider.core.chunks import Chunk
    from airflow_cdc_provider.pipeline.chunk_window import EpochDefinitionChanged, check_epoch_definition

    store = StateStore(tmp_path / "state")
    first, altered = schema("id", "a"), schema("id", "a", "c")
    chunks = [Chunk(T, 0, ("id",), None, None, epoch=5)]
    store.note_snapshot_definition("db.t", 5, first)
    check_epoch_definition(store, chunks, first)
    store.note_snapshot_definition("db.t", 5, altered)
    with pytest.raises(EpochDefinitionChanged, match=r"^db\.t: its definition changed while snapshot epoch 5 was "
                       r"being read .* airflow-cdc resnapshot <pipeline.yaml> --table db\.t"):
        check_epoch_definition(store, chunks, altered)
    check_epoch_definition(store, chunks, first)
    store.note_snapshot_definition("db.t", 6, altered)  # a new epoch: its own first definition
    check_epoch_definition(store, [Chunk(T, 0, ("id",), None, None, epoch=6)], altered)
