"""The jdbc sink applies a table's versions in place: renames keep values, added columns hold the ALTER's value
in existing rows, drops go, widenings widen; one transaction per call, the version recorded in the schema."""

from __future__ import annotations

import re
from decimal import Decimal

import psycopg2
import pytest

from airflow_cdc_provider.core.chunks import TableId
from airflow_cdc_provider.sinks.base import SinkConfig, SinkError
from airflow_cdc_provider.sinks.postgres import PostgresSink, evolution
from airflow_cdc_provider.sinks.types import TableSinkTypes
from airflow_cdc_provider.source.schema import TableSchema
from airflow_cdc_provider.source.table_versions import TableVersion
from tests.component.evolution_cases import ADDED_VALUES, TABLE, column, one_version_of_every_kind, \
    swap_then_rename_onto_a_dropped_column, version

MIRROR = "shop__t"
EPOCH = 1_795_783_842_075  # epochs are the plan's time in milliseconds
NEXT_EPOCH = EPOCH + 60_000


@pytest.fixture
def sink(postgres, request) -> PostgresSink:
    schema = "evo_" + re.sub(r"[^a-z0-9]+", "_", request.node.name.lower())[-40:]
    config = SinkConfig(type="jdbc", conn={"conn_id": "pg", "host": "127.0.0.1", "port": postgres.port,
                                           "login": postgres.user, "schema": postgres.database}, schema=schema)
    return PostgresSink(config, {"sink_password": postgres.password})


def query(sink: PostgresSink, sql: str, params=None) -> list[tuple]:
    with sink.mirror.cursor() as cur:
        cur.execute(sql, params)
        return cur.fetchall()


def pg_columns(sink: PostgresSink) -> dict[str, str]:
    rows = query(sink, "SELECT attname, format_type(atttypid, atttypmod) FROM pg_attribute WHERE attrelid = "
                       "%s::regclass AND attnum > 0 AND NOT attisdropped", (sink.mirror.qualified(TABLE),))
    return {n: t for n, t in rows if not n.startswith("_cdc_")}


def marker(sink: PostgresSink) -> list[tuple]:
    return query(sink, f'SELECT version FROM "{sink.config.schema}"."_cdc_schema_versions" WHERE mirror = %s',
                 (MIRROR,))


def rows(sink: PostgresSink, *names: str) -> list[tuple]:
    cols = ", ".join('"' + n.replace('"', '""') + '"' for n in names)
    return query(sink, f'SELECT {cols} FROM {sink.mirror.qualified(TABLE)} ORDER BY id')


def write(sink: PostgresSink, v: TableVersion, data: list[tuple], pos: int = 100, op: str = "c") -> None:
    meta = [(*row, op, 0, 1, pos + i, 0, op == "d", None) for i, row in enumerate(data)]
    sink.mirror.upsert(TABLE, v.schema.column_names, list(v.schema.key_columns), meta)


def start(sink: PostgresSink, v0: TableVersion, data: list[tuple]) -> None:
    sink.prepare(TableSinkTypes.of(v0.schema))
    write(sink, v0, data)


def test_one_version_renames_drops_widens_and_adds(sink):
    v0, v1, data = one_version_of_every_kind('we"ird name')
    start(sink, v0, data)
    write(sink, v0, data[1:], pos=500, op="d")  # a tombstone gets the added values too

    sink.evolve_in_place([v0, v1], 0)

    assert pg_columns(sink) == {
        "id": "integer", "b": "bigint", 'we"ird name': "text", "c": "numeric(14,4)", "e": "integer", "f": "text",
        "g": "timestamp(3) without time zone", "h": "timestamp(0) with time zone", "u": "numeric(20,0)",
        "bl": "bytea", "n": "integer"}
    added = ADDED_VALUES
    got = [(*r[:-2], bytes(r[-2]), r[-1]) for r in
           rows(sink, "id", 'we"ird name', "b", "c", "_cdc_deleted", "e", "f", "g", "h", "u", "bl", "n")]
    assert got == [(1, "x", 5, Decimal("12.3400"), False, *added), (2, "y", None, None, True, *added)]
    assert marker(sink) == [(1,)]
    # the defaults are gone again; the widened columns take wider values; the upsert names every column
    assert query(sink, "SELECT count(*) FROM information_schema.columns WHERE table_schema = %s AND table_name = %s "
                       "AND column_default IS NOT NULL", (sink.config.schema, MIRROR)) == [(1,)]  # _cdc_deleted's
    write(sink, v1, [(3, 2**40, "z", Decimal("1234567890.1234"), 1, "f", None, None, None, None, None)], pos=900)
    assert rows(sink, "id", "b", "c")[-1] == (3, 2**40, Decimal("1234567890.1234"))

    sink.evolve_in_place([v0, v1], 0)  # again: nothing to do
    assert marker(sink) == [(1,)] and len(pg_columns(sink)) == 11
    assert rows(sink, "id", "e") == [(1, 7), (2, 7), (3, 1)]


def test_a_longer_chain_continues_from_the_recorded_version(sink):
    v0 = version(0, column("c", "varchar(5)"), column("x", "int(11)", 10, 0))
    start(sink, v0, [(1, "one", 10), (2, "two", 20)])
    v1 = version(1, column("x", "int(11)", 10, 0))  # drop c
    assert sink.mirror.evolve_in_place([v0, v1]) == 0
    assert pg_columns(sink) == {"id": "integer", "x": "integer"} and marker(sink) == [(1,)]

    v2 = version(2, column("x", "int(11)", 10, 0), column("c", "varchar(5)"), added={"c": "back"})
    v3 = version(3, column("c", "varchar(5)"), column("y", "bigint(20)", 19, 0), column("x", "int(11)", 10, 0),
                 renamed={"y": "x"}, added={"x": 0})  # rename x -> y (widened), add x again
    assert sink.mirror.evolve_in_place([v0, v1, v2, v3]) == 1
    assert pg_columns(sink) == {"id": "integer", "c": "text", "y": "bigint", "x": "integer"}
    assert rows(sink, "id", "c", "y", "x") == [(1, "back", 10, 0), (2, "back", 20, 0)]
    assert marker(sink) == [(3,)]
    assert sink.mirror.evolve_in_place([v0, v1, v2, v3]) == 3


def test_a_chain_applied_at_once_ends_as_applied_step_by_step(sink):
    """Every step at once: a column dropped and added again under its name, a rename with a widening, an added
    column under the renamed one's old name, the values as the steps give them."""
    v0 = version(0, column("c", "varchar(5)"), column("x", "int(11)", 10, 0), column("w", "int(11)", 10, 0))
    start(sink, v0, [(1, "one", 10, 100), (2, "two", 20, 200)])
    v1 = version(1, column("x", "int(11)", 10, 0), column("w", "bigint(20)", 19, 0))  # drop c, widen w
    v2 = version(2, column("x", "int(11)", 10, 0), column("w", "bigint(20)", 19, 0), column("c", "varchar(5)"),
                 added={"c": "back"})
    v3 = version(3, column("c", "varchar(5)"), column("y", "bigint(20)", 19, 0), column("w", "bigint(20)", 19, 0),
                 column("x", "int(11)", 10, 0), renamed={"y": "x"}, added={"x": 0})
    statements = evolution([v0, v1, v2, v3], 0).sql('"s"."t"', repr)
    assert [st.count(" TYPE ") for st in statements if " TYPE " in st] == [2]  # both widenings: one rewrite

    assert sink.mirror.evolve_in_place([v0, v1, v2, v3]) == 0

    assert pg_columns(sink) == {"id": "integer", "c": "text", "y": "bigint", "w": "bigint", "x": "integer"}
    assert rows(sink, "id", "c", "y", "w", "x") == [(1, "back", 10, 100, 0), (2, "back", 20, 200, 0)]
    assert marker(sink) == [(3,)]
    write(sink, v3, [(3, "new", 2**40, 2**41, 5)], pos=900)
    assert rows(sink, "id", "y", "w")[-1] == (3, 2**40, 2**41)


def test_swapped_names_and_a_rename_onto_a_dropped_column(sink):
    v0, v1, v2 = swap_then_rename_onto_a_dropped_column()
    start(sink, v0, [(1, "A", "B", "C")])
    sink.evolve_in_place([v0, v1], 0)
    assert rows(sink, "id", "a", "b", "c") == [(1, "B", "A", "C")]
    sink.evolve_in_place([v0, v1, v2], 0)
    assert pg_columns(sink) == {"id": "integer", "b": "text", "c": "text"}
    assert rows(sink, "id", "b", "c") == [(1, "B", "C")] and marker(sink) == [(2,)]


def test_a_failing_step_leaves_the_mirror_at_its_version(sink):
    v0 = version(0, column("a", "int(11)", 10, 0))
    start(sink, v0, [(1, 1)])
    v1 = version(1, column("a", "bigint(20)", 19, 0), column("b", "int(11)", 10, 0), added={"b": 1})
    v2 = version(2, column("a", "bigint(20)", 19, 0), column("b", "int(11)", 10, 0), column("c", "int(11)", 10, 0),
                 added={"c": "not a number"})
    with pytest.raises(psycopg2.Error):
        sink.evolve_in_place([v0, v1, v2], 0)
    assert pg_columns(sink) == {"id": "integer", "a": "integer"} and marker(sink) == [(0,)]
    sink.evolve_in_place([v0, v1], 0)
    assert pg_columns(sink) == {"id": "integer", "a": "bigint", "b": "integer"} and rows(sink, "b") == [(1,)]


def test_a_widened_key_takes_wider_keys(sink):
    v0 = version(0, column("a", "int(11)", 10, 0))
    start(sink, v0, [(1, 1)])
    schema = TableSchema(TableId.parse(TABLE), (column("id", "bigint(20)", 19, 0), column("a", "int(11)", 10, 0)),
                         ("id",), ("id",))
    v1 = TableVersion(1, schema)
    sink.evolve_in_place([v0, v1], 0)
    write(sink, v1, [(2**40, 2), (1, 3)], pos=200)
    assert pg_columns(sink) == {"id": "bigint", "a": "integer"} and rows(sink, "id", "a") == [(1, 3), (2**40, 2)]


def test_key_changes_and_foreign_definitions_are_refused(sink):
    v0 = version(0, column("a", "int(11)", 10, 0))
    start(sink, v0, [(1, 1)])
    renamed_key = version(1, column("a", "int(11)", 10, 0), key=column("k", "int(11)", 10, 0), renamed={"k": "id"})
    with pytest.raises(SinkError, match="key"):
        sink.evolve_in_place([v0, renamed_key], 0)
    replaced_key = version(1, column("a", "int(11)", 10, 0), added={"id": 0})
    with pytest.raises(SinkError, match="key"):
        sink.evolve_in_place([v0, replaced_key], 0)
    other = version(0, column("z", "int(11)", 10, 0))
    with pytest.raises(SinkError, match="changed outside the pipeline"):
        sink.evolve_in_place([other, version(1, column("z", "int(11)", 10, 0), column("b", "text"))], 0)
    with pytest.raises(SinkError, match="numbered"):
        sink.evolve_in_place([v0, version(2, column("a", "int(11)", 10, 0))], 0)
    assert pg_columns(sink) == {"id": "integer", "a": "integer"} and marker(sink) == [(0,)]


def test_prepare_records_the_version_it_creates_and_a_resnapshot_resets_it(sink):
    v0 = version(0, column("a", "int(11)", 10, 0))
    v1 = version(1, column("a", "int(11)", 10, 0), column("b", "text"), added={"b": "x"})
    v2 = version(2, column("b", "text"), column("c", "text"), renamed={"c": "a"})
    sink.prepare(TableSinkTypes.of(v2.schema, 2))  # a brand-new mirror, at the stream's newest version
    assert marker(sink) == [(2,)]
    sink.evolve_in_place([v0, v1, v2], EPOCH)
    sink.prepare(TableSinkTypes.of(v2.schema, 2, EPOCH))
    assert pg_columns(sink) == {"id": "integer", "b": "text", "c": "text"} and marker(sink) == [(2,)]

    sink.prepare(TableSinkTypes.of(v0.schema, 0, NEXT_EPOCH), evolve=True)  # a re-snapshot: its version 0
    assert pg_columns(sink) == {"id": "integer", "a": "integer"} and marker(sink) == [(0,)]
    write(sink, v0, [(1, 5)])
    # the stream of the epoch before, restarted before it takes the new one up, leaves the mirror as it is
    sink.evolve_in_place([v0, v1, v2], EPOCH)
    assert pg_columns(sink) == {"id": "integer", "a": "integer"} and marker(sink) == [(0,)]
    sink.evolve_in_place([v0, v1], NEXT_EPOCH)
    assert rows(sink, "id", "a", "b") == [(1, 5, "x")] and marker(sink) == [(1,)]
    # a task of the new epoch run again (cleared) after the stream evolved the mirror keeps its version
    sink.prepare(TableSinkTypes.of(v0.schema, 0, NEXT_EPOCH), evolve=True)
    assert pg_columns(sink) == {"id": "integer", "a": "integer", "b": "text"} and marker(sink) == [(1,)]


def test_a_missing_mirror_is_created_at_the_newest_version(sink):
    v0 = version(0, column("a", "int(11)", 10, 0))
    v1 = version(1, column("b", "int(11)", 10, 0), renamed={"b": "a"})
    assert sink.mirror.evolve_in_place([v0, v1]) == 1
    assert pg_columns(sink) == {"id": "integer", "b": "integer"} and marker(sink) == [(1,)]


def test_names_holding_percent_signs_are_written_and_tombstoned(sink):
    """psycopg2 fills in ``%s``: a ``%`` of a schema, table or column name must not be read as a placeholder."""
    pct = column("50% off", "int(11)", 10, 0)
    sink.config.schema += "_50%"
    sink.mirror.sink.schema = sink.config.schema
    sink.prepare(TableSinkTypes.of(version(0, pct).schema))
    meta = ("c", 0, 1, 10, 0, False, None)
    assert sink.mirror.upsert(TABLE, ["id", "50% off"], ["id"], [(1, 5, *meta), (2, 6, *meta)]) == 2
    assert sink.mirror.tombstone_older(TABLE, (1, 10, 1), "t") == 2
    sink.mirror.comment(TABLE, "50% gone")
    assert query(sink, f'SELECT id, "50% off", _cdc_deleted FROM {sink.mirror.qualified(TABLE)} ORDER BY id') == [
        (1, 5, True), (2, 6, True)]
    assert sink.definition(TABLE).columns == ("id", "50% off") and sink.definition(TABLE).version == 0
