"""The delta sink applies a table's versions in place, read back with delta-rs alone (no Spark): renames keep
values, added columns hold the ALTER's value in existing rows (tombstones included), drops go, widenings widen;
one commit per call, which records the version in the commit itself (an application transaction), so a call
that fails leaves the table at its version and a call repeated commits nothing."""

from __future__ import annotations

from dataclasses import replace
from decimal import Decimal
from functools import partial

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from airflow_cdc_provider.sinks.base import META_NAMES, SinkConfig, SinkError
from airflow_cdc_provider.sinks.delta import (
    DeltaSink,
    carry,
    conform,
    data_schema,
    is_conflict,
    schema_app,
    table_schema,
    version_commit,
)
from airflow_cdc_provider.sinks.evolution import column_moves
from airflow_cdc_provider.sinks.types import TableSinkTypes
from airflow_cdc_provider.source.table_versions import TableVersion
from tests.component.evolution_cases import ADDED_VALUES, TABLE, column, one_version_of_every_kind, \
    swap_then_rename_onto_a_dropped_column, version


EPOCH = 1_795_783_842_075  # epochs are the plan's time in milliseconds
NEXT_EPOCH = EPOCH + 60_000


@pytest.fixture
def sink(tmp_path) -> DeltaSink:
    return DeltaSink(SinkConfig(type="delta", path=str(tmp_path / "delta")), {})


def table(sink: DeltaSink) -> DeltaTable:
    return DeltaTable(sink.layout.table_uri(TABLE))


def write(sink: DeltaSink, v: TableVersion, data: list[tuple], pos: int = 100, op: str = "c") -> None:
    """Rows of version ``v`` MERGEd as a stream batch writes them (newer versions win)."""
    types = TableSinkTypes.of(v.schema, v.number)
    fields = list(data_schema(types))
    columns = [pa.array([r[i] for r in data], f.type) for i, f in enumerate(fields)]
    n = len(data)
    meta = [pa.array([op] * n), pa.array([0] * n, pa.int64()), pa.array([1] * n, pa.int64()),
            pa.array([pos + i for i in range(n)], pa.int64()), pa.array([0] * n, pa.int32())]
    batch = pa.RecordBatch.from_arrays([*columns, *meta, pa.array([op == "d"] * n), pa.nulls(n, pa.string())],
                                       names=[*(f.name for f in fields), *META_NAMES, "_cdc_deleted", "_cdc_chunk"])
    sink._merge(TABLE, list(v.schema.key_columns),
                lambda schema: pa.RecordBatchReader.from_batches(schema, [conform(batch, schema, TABLE)]),
                None, f"rows at {pos}")


def start(sink: DeltaSink, v0: TableVersion, data: list[tuple]) -> None:
    sink.prepare(TableSinkTypes.of(v0.schema))
    write(sink, v0, data)


def rows(sink: DeltaSink, *names: str) -> list[tuple]:
    got = table(sink).to_pyarrow_table(columns=list(names)).to_pylist()
    return sorted(tuple(r[n] for n in names) for r in got)


def data_types(sink: DeltaSink) -> dict[str, pa.DataType]:
    schema = pa.schema(table(sink).schema().to_arrow())
    return {f.name: f.type for f in schema if not f.name.startswith("_cdc_")}


def recorded(sink: DeltaSink) -> int | None:
    return sink.definition(TABLE).version


def test_one_version_renames_drops_widens_and_adds(sink):
    v0, v1, data = one_version_of_every_kind("we ird")
    start(sink, v0, data)
    write(sink, v0, data[1:], pos=500, op="d")  # a tombstone gets the added values too
    before = table(sink).version()

    sink.evolve_in_place([v0, v1], 0)

    assert data_types(sink) == {
        "id": pa.int32(), "b": pa.int64(), "we ird": pa.string(), "c": pa.decimal128(14, 4), "e": pa.int32(),
        "f": pa.string(), "g": pa.timestamp("us"), "h": pa.timestamp("us", tz="UTC"), "u": pa.decimal128(20, 0),
        "bl": pa.binary(), "n": pa.int32()}
    added = ADDED_VALUES
    got = rows(sink, "id", "we ird", "b", "c", "_cdc_deleted", "_cdc_pos", "e", "f", "g", "h", "u", "bl", "n")
    assert got == [(1, "x", 5, Decimal("12.3400"), False, 100, *added), (2, "y", None, None, True, 500, *added)]
    assert recorded(sink) == 1
    # the protocol takes DATETIME's feature (no data changes); one commit rewrote the table and recorded the
    # version; then the statistics columns of the files to come leave out u (too wide)
    commits = list(reversed(table(sink).history(table(sink).version() - before)))
    assert [c["operation"] for c in commits] == ["ADD FEATURE", "WRITE", "SET TBLPROPERTIES"], commits
    assert commits[1]["airflow_cdc"] == "schema version 1: ALTER 1"
    assert set(table(sink).protocol().writer_features) >= {"timestampNtz", "changeDataFeed"}
    # change data feed readers see the rewrite as every row deleted and inserted again, in its one commit
    rewrite = commits[1]["version"]
    feed = pa.table(table(sink).load_cdf(starting_version=rewrite, ending_version=rewrite).read_all())
    assert sorted(zip(feed["id"].to_pylist(), feed["_change_type"].to_pylist())) == [
        (1, "delete"), (1, "insert"), (2, "delete"), (2, "insert")]
    write(sink, v1, [(3, 2**40, "z", Decimal("1234567890.1234"), 1, "f", None, None, None, None, None)], pos=900)
    assert rows(sink, "id", "b", "c")[-1] == (3, 2**40, Decimal("1234567890.1234"))

    at = table(sink).version()
    sink.evolve_in_place([v0, v1], 0)  # again: nothing to do
    assert table(sink).version() == at and rows(sink, "id", "e") == [(1, 7), (2, 7), (3, 1)]


def test_columns_of_nulls_are_added_without_a_rewrite(sink):
    v0 = version(0, column("a", "int(11)", 10, 0))
    start(sink, v0, [(1, 1), (2, 2)])
    files = set(table(sink).file_uris())
    v1 = version(1, column("a", "int(11)", 10, 0), column("b", "varchar(5)"), added={"b": None})
    sink.evolve_in_place([v0, v1], 0)
    assert set(table(sink).file_uris()) == files and recorded(sink) == 1
    assert rows(sink, "id", "a", "b") == [(1, 1, None), (2, 2, None)]
    write(sink, v1, [(2, 20, "new")], pos=300, op="u")
    assert rows(sink, "id", "a", "b") == [(1, 1, None), (2, 20, "new")]


def test_a_longer_chain_continues_from_the_recorded_version(sink):
    v0 = version(0, column("c", "varchar(5)"), column("x", "int(11)", 10, 0), column("w", "int(11)", 10, 0))
    start(sink, v0, [(1, "one", 10, 100), (2, "two", 20, 200)])
    v1 = version(1, column("x", "int(11)", 10, 0), column("w", "bigint(20)", 19, 0))  # drop c, widen w
    sink.evolve_in_place([v0, v1], 0)
    assert set(data_types(sink)) == {"id", "x", "w"} and recorded(sink) == 1
    v2 = version(2, column("x", "int(11)", 10, 0), column("w", "bigint(20)", 19, 0), column("c", "varchar(5)"),
                 added={"c": "back"})
    v3 = version(3, column("c", "varchar(5)"), column("y", "bigint(20)", 19, 0), column("w", "bigint(20)", 19, 0),
                 column("x", "int(11)", 10, 0), renamed={"y": "x"}, added={"x": 0})  # x -> y widened, x again
    sink.evolve_in_place([v0, v1, v2, v3], 0)
    assert data_types(sink) == {"id": pa.int32(), "c": pa.string(), "y": pa.int64(), "w": pa.int64(),
                                "x": pa.int32()}
    assert rows(sink, "id", "c", "y", "w", "x") == [(1, "back", 10, 100, 0), (2, "back", 20, 200, 0)]
    assert recorded(sink) == 3


def test_swapped_names_and_a_rename_onto_a_dropped_column(sink):
    v0, v1, v2 = swap_then_rename_onto_a_dropped_column()
    start(sink, v0, [(1, "A", "B", "C")])
    sink.evolve_in_place([v0, v1], 0)
    assert rows(sink, "id", "a", "b", "c") == [(1, "B", "A", "C")]
    sink.evolve_in_place([v0, v1, v2], 0)
    assert set(data_types(sink)) == {"id", "b", "c"}
    assert rows(sink, "id", "b", "c") == [(1, "B", "C")] and recorded(sink) == 2


def test_a_failing_rewrite_leaves_the_table_at_its_version(sink):
    v0 = version(0, column("a", "int(11)", 10, 0))
    start(sink, v0, [(1, 1)])
    at = table(sink).version()
    v1 = version(1, column("a", "bigint(20)", 19, 0), column("b", "int(11)", 10, 0), column("c", "int(11)", 10, 0),
                 added={"b": 1, "c": "not a number"})
    with pytest.raises(Exception):
        sink.evolve_in_place([v0, v1], 0)
    assert table(sink).version() == at and recorded(sink) == 0
    assert data_types(sink) == {"id": pa.int32(), "a": pa.int32()} and rows(sink, "id", "a") == [(1, 1)]


def test_a_widened_key_takes_wider_keys(sink):
    v0 = version(0, column("a", "int(11)", 10, 0))
    start(sink, v0, [(1, 1)])
    v1 = version(1, column("a", "int(11)", 10, 0), key=column("id", "bigint(20)", 19, 0))
    sink.evolve_in_place([v0, v1], 0)
    write(sink, v1, [(2**40, 2), (1, 3)], pos=200)
    assert data_types(sink) == {"id": pa.int64(), "a": pa.int32()} and rows(sink, "id", "a") == [(1, 3), (2**40, 2)]


def test_key_changes_and_foreign_definitions_are_refused(sink):
    v0 = version(0, column("a", "int(11)", 10, 0))
    start(sink, v0, [(1, 1)])
    renamed_key = version(1, column("a", "int(11)", 10, 0), key=column("k", "int(11)", 10, 0), renamed={"k": "id"})
    with pytest.raises(SinkError, match="key"):
        sink.evolve_in_place([v0, renamed_key], 0)
    other = version(0, column("z", "int(11)", 10, 0))
    with pytest.raises(SinkError, match="changed outside the pipeline"):
        sink.evolve_in_place([other, version(1, column("z", "int(11)", 10, 0), column("q", "int(11)", 10, 0))], 0)
    assert recorded(sink) == 0 and rows(sink, "id", "a") == [(1, 1)]


def test_a_new_snapshot_starts_the_versions_again_and_an_older_epoch_leaves_it(sink):
    """A re-snapshot's definition is its epoch's version 0, recorded in a transaction version that grows; the
    stream of the epoch before, restarted before it takes the new one up, leaves the table as it is; a task of
    the epoch run again after the stream evolved the table keeps the stream's version."""
    v0, v1, v2 = swap_then_rename_onto_a_dropped_column()
    start(sink, v0, [(1, "A", "B", "C")])
    sink.evolve_in_place([v0, v1], EPOCH)
    first = table(sink).transaction_version(schema_app(TABLE))
    sink.prepare(TableSinkTypes.of(v1.schema, 0, NEXT_EPOCH), evolve=True)  # the next epoch's version 0: v1's columns
    assert recorded(sink) == 0 and table(sink).transaction_version(schema_app(TABLE)) > first
    write(sink, v1, [(1, "b-new", "a-new", "C")], pos=700)
    sink.evolve_in_place([v0, v1], EPOCH)  # the swap of epoch 0 again: not applied to epoch 1's table
    assert rows(sink, "id", "a", "b") == [(1, "a-new", "b-new")] and recorded(sink) == 0
    e1v1 = version(1, column("b", "varchar(5)"), column("a", "varchar(5)"), column("c", "varchar(5)"),
                   column("d", "int(11)", 10, 0), added={"d": 42})
    sink.evolve_in_place([replace(v1, number=0), e1v1], NEXT_EPOCH)
    assert rows(sink, "id", "a", "b", "d") == [(1, "a-new", "b-new", 42)] and recorded(sink) == 1
    sink.prepare(TableSinkTypes.of(v1.schema, 0, NEXT_EPOCH), evolve=True)
    assert "d" in data_types(sink) and recorded(sink) == 1


def test_a_rewrite_states_no_statistics_of_a_wide_decimal_it_adds(sink):
    """delta-rs states a decimal of more than 18 digits through an int64; the rewrite leaves it out of the new
    files' statistics from its own commit on, and delta-rs's reader finds its rows."""
    v0 = version(0, column("a", "int(11)", 10, 0))
    start(sink, v0, [(1, 1), (2, 2)])
    v1 = version(1, column("a", "bigint(20)", 19, 0), column("u", "bigint(20) unsigned", 20, 0),
                 added={"u": 2**64 - 1})
    sink.evolve_in_place([v0, v1], 0)
    adds = table(sink).get_add_actions(flatten=True).to_pylist() if hasattr(
        table(sink).get_add_actions(flatten=True), "to_pylist") else pa.table(
        table(sink).get_add_actions(flatten=True)).to_pylist()
    assert adds and all("min.u" not in a or a["min.u"] is None for a in adds), adds
    assert all(a["min.id"] == 1 and a["max.id"] == 2 for a in adds), adds
    assert table(sink).to_pyarrow_table(filters=[("u", "=", Decimal(2**64 - 1))]).num_rows == 2


def test_a_rewrite_that_loses_its_commit_leaves_no_file(sink, tmp_path):
    v0 = version(0, column("a", "int(11)", 10, 0))
    start(sink, v0, [(1, 1), (2, 2)])
    stale = table(sink)
    write(sink, v0, [(3, 3)], pos=300)  # a commit after the version the rewrite read
    v1 = version(1, column("b", "int(11)", 10, 0), renamed={"b": "a"})
    files = sorted(p.name for p in (tmp_path / "delta" / TABLE).glob("*.parquet"))
    wanted = table_schema(TableSinkTypes.of(v1.schema, 1))
    with pytest.raises(Exception) as lost:
        sink._rewrite(stale, TABLE, wanted, partial(carry, wanted=wanted, moves=column_moves([v0, v1], 0)),
                      version_commit(TABLE, 0, 1, "test", exclusive=True))
    assert is_conflict(lost.value)
    assert sorted(p.name for p in (tmp_path / "delta" / TABLE).glob("*.parquet")) == files
    sink.evolve_in_place([v0, v1], 0)  # run again on the new version, as ``committing`` does
    assert rows(sink, "id", "b") == [(1, 1), (2, 2), (3, 3)]
