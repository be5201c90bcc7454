"""``Sink.move_table``: a table the source renamed moves to its new name in the sink (``pipeline.renames``), with
its rows, tombstones, changelog and recorded table version; moved already counts as done, a name the sink holds
already is refused with nothing changed. Real sinks: the parquet sink on a local directory (and fsspec's
in-memory filesystem, which cannot rename a directory in one step), the delta sink with delta-rs, the jdbc sink on
the session's PostgreSQL. Each table is read back with the sink's own reader (Spark's ``current_state``; the
parquet sink's pyarrow reader too) and on its own (the files with pyarrow, the Delta table with deltalake, the
mirror with plain SQL)."""

from __future__ import annotations

import re
import uuid
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable

from airflow_cdc_provider.core.chunks import TableId
from airflow_cdc_provider.sinks.base import CHUNK_COLUMN, SinkConfig, SinkDefinition
from airflow_cdc_provider.sinks.delta import DeltaSink
from airflow_cdc_provider.sinks.parquet import ParquetSink
from airflow_cdc_provider.sinks.parquet_arrow import read_current_state
from airflow_cdc_provider.sinks.postgres import PostgresSink
from airflow_cdc_provider.sinks.types import TableSinkTypes
from airflow_cdc_provider.source.schema import Column, TableSchema
from airflow_cdc_provider.source.table_versions import TableVersion

OLD, NEW, OTHER = "shop.a", "shop.b", "shop.c"
EPOCH = 1_795_783_842_075  # the parquet snapshot's epoch (the plan's time in ms)
LOW_WATERMARK = (1, 50, 0)
EPOCH_VERSION = (1, 100, -1)

ID = Column("id", "int", "int(11)", False, None, None, None, 10, 0, None)
NAME = Column("name", "varchar", "varchar(20)", True, "utf8mb4", None, 20, None, None, None)
QTY = Column("qty", "int", "int(11)", True, None, None, None, 10, 0, None)
NOTE = Column("note", "varchar", "varchar(10)", True, "utf8mb4", None, 10, None, None, None)

FIRST = [(1, "one", 10), (2, "two", 20), (3, "three", 30)]
# the table's rows as of version 1 (ALTER TABLE ADD note VARCHAR(10) DEFAULT 'n/a'), after the stream deleted 2
# and set 3's qty to 33
STATE = [(1, "one", 10, "n/a"), (3, "three", 33, "n/a")]


def versions(table: str) -> list[TableVersion]:
    v0 = TableSchema(TableId.parse(table), (ID, NAME, QTY), ("id",), ("id",))
    v1 = TableSchema(TableId.parse(table), (ID, NAME, QTY, NOTE), ("id",), ("id",))
    return [TableVersion(0, v0), TableVersion(1, v1, added={"note": "n/a"}, statement="ALTER 1")]


def types_of(table: str, version: int) -> TableSinkTypes:
    return TableSinkTypes.of(versions(table)[version].schema, version)


def changes(data: list[tuple], op: str, pos: int) -> pa.Table:
    """A stream batch of version-0 rows with their metadata columns, as the driver hands a small one to a sink."""
    n = len(data)
    return pa.table({"id": pa.array([r[0] for r in data], pa.int32()), "name": [r[1] for r in data],
                     "qty": pa.array([r[2] for r in data], pa.int32()), "_cdc_op": [op] * n,
                     "_cdc_ts_ms": pa.array([0] * n, pa.int64()), "_cdc_file_seq": pa.array([1] * n, pa.int64()),
                     "_cdc_pos": pa.array([pos + i for i in range(n)], pa.int64()),
                     "_cdc_row": pa.array([0] * n, pa.int32())})


def noop() -> None:
    pass


@pytest.fixture(scope="module")
def spark(local_spark):
    # the delta sink names a stream batch's commit after the streaming query writing it, as in foreachBatch
    local_spark.sparkContext.setLocalProperty("sql.streaming.queryId", "move-table-test")
    yield local_spark
    local_spark.sparkContext.setLocalProperty("sql.streaming.queryId", None)


def own_rows(sink, table: str) -> list[tuple]:
    """The table at version 1 by the sink's own reader (Spark)."""
    return sorted(tuple(r) for r in sink.current_state(types_of(table, 1)).collect())


# --- each sink: a table written as the pipeline writes it, and read on its own -------------------------------------


class SinkCase:
    """A sink under test; ``own`` reads a table with the sink's own reader."""

    sink: object

    def own(self, table: str) -> list[tuple]:
        return own_rows(self.sink, table)


class ParquetCase(SinkCase):
    def __init__(self, spark, tmp_path: Path) -> None:
        self.spark, self.root = spark, tmp_path / "parquet"
        self.sink = ParquetSink(SinkConfig(type="parquet", path=str(self.root)), {}, spark)

    def fill(self, table: str) -> None:
        """A snapshot epoch (one window, through Spark), a stream batch of a delete and an update, then version 1
        applied in place."""
        from pyspark.sql.types import StructType

        types = types_of(table, 0)
        self.sink.prepare(types)
        df = self.spark.createDataFrame([(*r, 0) for r in FIRST], StructType.fromDDL(f"{types.spark_ddl}, "
                                                                                      f"{CHUNK_COLUMN} int"))
        self.sink.open_window(df, types, EPOCH, [0], LOW_WATERMARK, set()).publish_rows(None, EPOCH_VERSION, noop)
        self.sink.finish_snapshot(table, EPOCH, LOW_WATERMARK)
        self.sink.write_arrow_changes(changes([(2, "two", 20)], "d", 500), types, 0, noop)
        self.sink.write_arrow_changes(changes([(3, "three", 33)], "u", 600), types, 1, noop)
        self.sink.evolve_in_place(versions(table), EPOCH)

    def raw(self, table: str) -> dict | None:
        """Every file of the table's directory: its bytes, and a parquet file's rows as pyarrow reads them."""
        d = self.root / table
        if not d.exists():
            return None
        out = {}
        for path in sorted(p for p in d.rglob("*") if p.is_file()):
            rel = str(path.relative_to(d))
            out[rel] = (path.read_bytes(), pq.read_table(path).to_pylist() if path.suffix == ".parquet" else None)
        return out

    def own(self, table: str) -> list[tuple]:
        arrow = read_current_state(str(self.root), table, ["id"])
        arrow_rows = sorted(tuple(r.values()) for r in arrow.to_pylist())
        spark_rows = own_rows(self.sink, table)
        assert arrow_rows == spark_rows
        return spark_rows

    def holds_already(self, table: str) -> str:
        return f"parquet sink at {self.root} holds {table} already"

    def check_moved(self, before: dict) -> None:
        after = self.raw(NEW)
        assert after == before
        # every part is there: the snapshot window under its version, both batches, the schema and its history
        assert "snapshot/_current.json" in after and "_schema_history.json" in after
        assert any(rel.startswith("snapshot/epoch=") and rel.endswith(".parquet") for rel in after)
        assert sorted({rel.split("/")[1] for rel in after if rel.startswith("changes/")}) == ["batch=0", "batch=1"]
        stored = sorted((r["id"], r["_cdc_op"]) for _, rows in after.values() for r in rows or ())
        assert stored == [(1, "r"), (2, "d"), (2, "r"), (3, "r"), (3, "u")]
        assert read_current_state(str(self.root), OLD, ["id"]).num_rows == 0


class DeltaCase(SinkCase):
    def __init__(self, spark, tmp_path: Path) -> None:
        self.root = tmp_path / "delta"
        self.sink = DeltaSink(SinkConfig(type="delta", path=str(self.root)), {}, spark)

    def fill(self, table: str) -> None:
        """Two stream batches MERGEd by delta-rs (inserts, then a delete and an update), then version 1 applied in
        place (a rewrite: the added column holds a value)."""
        types = types_of(table, 0)
        self.sink.prepare(types)
        self.sink.write_arrow_changes(changes(FIRST, "c", 100), types, 0, noop)
        self.sink.write_arrow_changes(pa.concat_tables([changes([(2, "two", 20)], "d", 500),
                                                        changes([(3, "three", 33)], "u", 600)]), types, 1, noop)
        self.sink.evolve_in_place(versions(table), 0)

    def uri(self, table: str) -> str:
        return self.sink.layout.table_uri(table)

    def raw(self, table: str) -> list[dict] | None:
        """Every row of the Delta table, tombstones included, by deltalake."""
        if not DeltaTable.is_deltatable(self.uri(table)):
            return None
        return sorted(DeltaTable(self.uri(table)).to_pyarrow_table().to_pylist(), key=lambda r: r["id"])

    def holds_already(self, table: str) -> str:
        return f"delta sink at {self.root} holds {table} already"

    def check_moved(self, before: list[dict]) -> None:
        assert self.raw(NEW) == before
        assert [(r["id"], r["_cdc_deleted"]) for r in before] == [(1, False), (2, True), (3, False)]
        dt = DeltaTable(self.uri(NEW))
        assert dt.metadata().description == f"source table {OLD}, renamed to {NEW}"
        assert dt.metadata().name == NEW  # as a table created under the new name is named
        # three commits on top of the table's own: the recorded version taken over by the new name (a write of no
        # data), then the name, then the description
        assert [h["operation"] for h in dt.history(3)] == ["UPDATE TABLE METADATA", "UPDATE TABLE METADATA", "WRITE"]
        assert not (self.root / OLD).exists()


class JdbcCase(SinkCase):
    def __init__(self, spark, postgres, name: str) -> None:
        schema = "mv_" + re.sub(r"[^a-z0-9]+", "_", name.lower())[-40:]
        config = SinkConfig(type="jdbc", conn={"conn_id": "pg", "host": "127.0.0.1", "port": postgres.port,
                                               "login": postgres.user, "schema": postgres.database}, schema=schema)
        self.sink = PostgresSink(config, {"sink_password": postgres.password}, spark)

    def query(self, sql: str, params=None) -> list[tuple]:
        with self.sink.mirror.cursor() as cur:
            cur.execute(sql, params)
            return cur.fetchall()

    def fill(self, table: str) -> None:
        """The mirror created, two stream batches upserted, then version 1 applied in place."""
        types = types_of(table, 0)
        self.sink.prepare(types)
        self.sink.write_arrow_changes(changes(FIRST, "c", 100), types, 0, noop)
        self.sink.write_arrow_changes(pa.concat_tables([changes([(2, "two", 20)], "d", 500),
                                                        changes([(3, "three", 33)], "u", 600)]), types, 1, noop)
        self.sink.evolve_in_place(versions(table), 0)

    def regclass(self, table: str):
        return self.query("SELECT to_regclass(%s)", (self.sink.mirror.qualified(table),))[0][0]

    def raw(self, table: str) -> list[dict] | None:
        """Every row of the mirror, tombstones and metadata included, by plain SQL."""
        if self.regclass(table) is None:
            return None
        with self.sink.mirror.cursor() as cur:
            cur.execute(f"SELECT * FROM {self.sink.mirror.qualified(table)} ORDER BY id")
            names = [d[0] for d in cur.description]
            return [dict(zip(names, r)) for r in cur.fetchall()]

    def recorded(self) -> dict[str, int]:
        return dict(self.query(f"SELECT mirror, version FROM {self.sink.mirror.versions_table()}"))

    def holds_already(self, table: str) -> str:
        return f'"{self.sink.config.schema}"."shop__{table.split(".")[1]}" exists already'

    def check_moved(self, before: list[dict]) -> None:
        assert self.raw(NEW) == before
        assert [(r["id"], r["_cdc_deleted"], r["note"]) for r in before] == [(1, False, "n/a"), (2, True, "n/a"),
                                                                             (3, False, "n/a")]
        assert self.recorded() == {"shop__b": 1}
        assert self.query("SELECT obj_description(%s::regclass, 'pg_class')", (self.sink.mirror.qualified(NEW),)) == [
            (f"source table {OLD}, renamed to {NEW}",)]


@pytest.fixture(params=["parquet", "delta", "jdbc"])
def case(request, tmp_path):
    if request.param == "parquet":
        return ParquetCase(request.getfixturevalue("spark"), tmp_path)
    if request.param == "delta":
        return DeltaCase(request.getfixturevalue("spark"), tmp_path)
    return JdbcCase(request.getfixturevalue("spark"), request.getfixturevalue("postgres"), request.node.name)


# --- the tests ------------------------------------------------------------------------------------------------------


def test_the_table_moves_with_its_rows_and_its_version(case):
    case.fill(OLD)
    before = case.raw(OLD)
    assert before is not None and case.own(OLD) == STATE

    assert case.sink.move_table(OLD, NEW) is None

    case.check_moved(before)
    assert case.raw(OLD) is None
    assert case.own(NEW) == STATE
    assert case.sink.definition(OLD) is None
    assert case.sink.definition(NEW).columns == ("id", "name", "qty", "note")
    assert case.sink.definition(NEW).version == 1


def test_a_second_move_is_done_already_and_changes_nothing(case):
    case.fill(OLD)
    assert case.sink.move_table(OLD, NEW) is None
    moved = case.raw(NEW)
    assert case.sink.move_table(OLD, NEW) is None
    assert case.raw(NEW) == moved and case.raw(OLD) is None
    assert case.own(NEW) == STATE


def test_refused_with_nothing_changed_when_the_sink_holds_both_names(case):
    case.fill(OLD)
    case.fill(OTHER)
    old, other = case.raw(OLD), case.raw(OTHER)
    delta_versions = [DeltaTable(case.uri(t)).version() for t in (OLD, OTHER)] if isinstance(case, DeltaCase) else []

    assert case.sink.move_table(OLD, OTHER) == case.holds_already(OTHER)

    assert case.raw(OLD) == old and case.raw(OTHER) == other
    assert case.sink.definition(OLD) == case.sink.definition(OTHER) == SinkDefinition(("id", "name", "qty", "note"), 1)
    if isinstance(case, DeltaCase):  # not even the description committed
        assert [DeltaTable(case.uri(t)).version() for t in (OLD, OTHER)] == delta_versions
        assert DeltaTable(case.uri(OTHER)).metadata().description is None
    if isinstance(case, JdbcCase):
        assert case.recorded() == {"shop__a": 1, "shop__c": 1}


def test_a_table_the_sink_never_had_moves_as_nothing(case):
    assert case.sink.move_table("shop.x", "shop.y") is None
    assert case.raw("shop.x") is None and case.raw("shop.y") is None
    assert case.sink.definition("shop.y") is None


def test_the_old_name_takes_a_new_table_after_the_move(case):
    """The source creates the old name again: the sink makes a new table of it beside the moved one."""
    case.fill(OLD)
    assert case.sink.move_table(OLD, NEW) is None
    case.fill(OLD)
    assert case.own(OLD) == STATE and case.own(NEW) == STATE
    assert case.raw(OLD) is not None


def test_the_delta_sinks_recorded_version_moves_with_the_table(spark, tmp_path):
    case = DeltaCase(spark, tmp_path)
    case.fill(OLD)
    assert case.sink.definition(OLD) == SinkDefinition(("id", "name", "qty", "note"), 1)
    assert case.sink.move_table(OLD, NEW) is None
    assert case.sink.definition(NEW) == SinkDefinition(("id", "name", "qty", "note"), 1)


def test_the_parquet_sink_on_a_filesystem_without_one_step_renames_refuses(tmp_path):
    path = f"memory://move-table-{uuid.uuid4().hex}"
    sink = ParquetSink(SinkConfig(type="parquet", path=path), {})
    sink.write_arrow_changes(changes(FIRST, "c", 100), types_of(OLD, 0), 0, noop)
    files = sink.layout.storage.fs.find(sink.layout.storage.path(OLD))
    assert files

    assert sink.move_table(OLD, NEW) == "a directory rename on memory:// copies each file, so it is not done"

    assert sink.layout.storage.fs.find(sink.layout.storage.path(OLD)) == files
    assert not sink.layout.storage.exists(NEW)
    assert sorted(tuple(r.values()) for r in read_current_state(path, OLD, ["id"]).to_pylist()) == FIRST


def test_the_jdbc_sink_moves_over_a_version_record_whose_mirror_was_dropped_by_hand(spark, postgres):
    """A versions record of the new name whose mirror is gone records nothing: the move replaces it."""
    case = JdbcCase(spark, postgres, "stale version record")
    case.fill(OTHER)
    case.query(f"DROP TABLE {case.sink.mirror.qualified(OTHER)}; SELECT 1")
    case.fill(OLD)

    assert case.sink.move_table(OLD, OTHER) is None

    assert case.raw(OLD) is None and case.own(OTHER) == STATE
    assert case.recorded() == {"shop__c": 1}
