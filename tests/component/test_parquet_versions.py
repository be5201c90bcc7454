"""The parquet sink's columns changed in place (``ParquetSink.evolve_in_place``): the files written under each
version stay as they are, ``_schema_history.json`` says which version each part was written under, and both
readers (``current_state`` with Spark, ``read_current_state`` with pyarrow) carry every part up to the newest
version: added columns hold their default in older rows, renamed ones keep their values, dropped ones go,
widened ones take the wider type (and then hold values the old type could not)."""

from __future__ import annotations

import datetime as dt
import json
from decimal import Decimal

import pytest

from airflow_cdc_provider.core.chunks import TableId
from airflow_cdc_provider.sinks.base import CHUNK_COLUMN, SinkConfig, SinkError
from airflow_cdc_provider.sinks.parquet import ParquetSink, spark_schema
from airflow_cdc_provider.sinks.parquet_arrow import HISTORY_FILE, read_current_state
from airflow_cdc_provider.sinks.types import TableSinkTypes
from airflow_cdc_provider.source.schema import Column, TableSchema
from airflow_cdc_provider.source.table_versions import TableVersion
from airflow_cdc_provider.spark.frames import meta_ddl

T = "db.t"
UTC = dt.timezone.utc
EPOCH_VERSION = (1, 100, -1)
LOW_WATERMARK = (1, 50, 0)


def column(name: str, data_type: str, column_type: str | None = None, precision: int | None = None,
           scale: int | None = None) -> Column:
    return Column(name, data_type, column_type or data_type, True, None, None, None, precision, scale, None)


def schema(*columns: Column) -> TableSchema:
    return TableSchema(TableId.parse(T), columns, ("id",), ("id",))


ID = column("id", "int")
NAME = column("name", "varchar", "varchar(20)")
V0 = schema(ID, column("qty", "int"), NAME, column("price", "decimal", "decimal(10,2)", 10, 2),
            column("old_col", "varchar", "varchar(5)"), column("note", "varchar", "varchar(20)"))
# ALTER TABLE t MODIFY qty BIGINT, MODIFY price DECIMAL(14,2), DROP old_col, RENAME COLUMN note TO remark,
# ADD status VARCHAR(10) DEFAULT 'new', ADD fee BIGINT UNSIGNED DEFAULT 7, ADD tag VARBINARY(4) DEFAULT 0x00ff,
# ADD since DATE DEFAULT '2024-01-02', ADD gone INT (NULL)
V1 = schema(ID, column("qty", "bigint"), NAME, column("price", "decimal", "decimal(14,2)", 14, 2),
            column("remark", "varchar", "varchar(20)"), column("status", "varchar", "varchar(10)"),
            column("fee", "bigint", "bigint unsigned"), column("tag", "varbinary", "varbinary(4)"),
            column("since", "date"), column("gone", "int"))
# ALTER TABLE t RENAME COLUMN remark TO comment, MODIFY price DECIMAL(16,2), DROP gone,
# ADD created TIMESTAMP DEFAULT '2024-01-02 03:04:05'
V2 = schema(ID, column("qty", "bigint"), NAME, column("price", "decimal", "decimal(16,2)", 16, 2),
            column("comment", "varchar", "varchar(20)"), column("status", "varchar", "varchar(10)"),
            column("fee", "bigint", "bigint unsigned"), column("tag", "varbinary", "varbinary(4)"),
            column("since", "date"), column("created", "timestamp"))
CREATED = dt.datetime(2024, 1, 2, 3, 4, 5, tzinfo=UTC)
VERSIONS = [
    TableVersion(0, V0),
    TableVersion(1, V1, renamed={"remark": "note"},
                 added={"status": "new", "fee": 7, "tag": b"\x00\xff", "since": dt.date(2024, 1, 2), "gone": None}),
    TableVersion(2, V2, renamed={"comment": "remark"}, added={"created": CREATED}),
]
DEFAULTS_V1 = {"status": "new", "fee": Decimal(7), "tag": b"\x00\xff", "since": dt.date(2024, 1, 2), "gone": None}


@pytest.fixture(scope="module")
def spark(local_spark):
    return local_spark


@pytest.fixture
def sink(spark, tmp_path):
    return ParquetSink(SinkConfig(type="parquet", path=str(tmp_path / "sink")), {}, spark)


def types_of(version: int) -> TableSinkTypes:
    return TableSinkTypes.of(VERSIONS[version].schema, version=version)


def snapshot(sink, spark, rows: list[tuple]) -> None:
    """Version-0 rows as a finished snapshot epoch, through the sink's own window API."""
    from pyspark.sql.types import StructType

    types = types_of(0)
    sink.prepare(types)
    df = spark.createDataFrame([(*r, 0) for r in rows], StructType.fromDDL(f"{types.spark_ddl}, {CHUNK_COLUMN} int"))
    window = sink.open_window(df, types, 1, [0], LOW_WATERMARK, set())
    window.publish_rows(None, EPOCH_VERSION, lambda: None)
    sink.finish_snapshot(T, 1, LOW_WATERMARK)


def write(sink, spark, version: int | TableSinkTypes, batch_id: int, changes: list[tuple]) -> None:
    """A stream batch: each change ``(op, pos, data)``, data None for a schema change's record."""
    from pyspark.sql.types import StructType

    types = types_of(version) if isinstance(version, int) else version
    width = len(types.schema.columns)
    rows = [(*(data if data is not None else (None,) * width), op, 1000 + pos, 1, pos, 0)
            for op, pos, data in changes]
    df = spark.createDataFrame(rows, StructType.fromDDL(f"{types.spark_ddl}, {meta_ddl()}"))
    sink.write_changes(df, types, batch_id, lambda: None, lambda: len(rows))


def normal(value):
    if isinstance(value, (bytes, bytearray)):
        return bytes(value)
    if hasattr(value, "to_pydatetime"):
        value = value.to_pydatetime()
    if isinstance(value, dt.datetime) and value.tzinfo is not None:
        return value.astimezone(UTC).replace(tzinfo=None)
    return value


def states(sink, version: int) -> tuple[list[dict], list[dict]]:
    """The table by both readers, rows sorted by key, values made comparable."""
    spark_rows = [{k: normal(v) for k, v in r.asDict().items()} for r in sink.current_state(types_of(version)).collect()]
    arrow = read_current_state(sink.config.path, T, ["id"])
    arrow_rows = [{k: normal(v) for k, v in r.items()} for r in arrow.to_pylist()]
    return sorted(spark_rows, key=lambda r: r["id"]), sorted(arrow_rows, key=lambda r: r["id"])


def assert_state(sink, version: int, expected: list[dict]) -> None:
    spark_rows, arrow_rows = states(sink, version)
    names = VERSIONS[version].schema.column_names
    for rows in (spark_rows, arrow_rows):
        assert [list(r) for r in rows] == [names] * len(rows)
        assert rows == expected
    assert_types(sink, version)


def assert_types(sink, version: int) -> None:
    from pyspark.sql.types import StructType

    df = sink.current_state(types_of(version))
    assert [(f.name, f.dataType) for f in df.schema.fields] == [
        (f.name, f.dataType) for f in StructType.fromDDL(types_of(version).spark_ddl).fields]


def history(sink) -> list[dict]:
    return json.loads(sink.layout.storage.read_text(f"{sink.layout.table_dir(T)}/{HISTORY_FILE}"))


def v0_epoch(sink, spark) -> None:
    snapshot(sink, spark, [
        (1, 1, "a", Decimal("1.10"), "x1", "n1"),
        (2, 2, "b", Decimal("2.20"), "x2", "n2"),
        (3, 3, "c", Decimal("3.30"), "x3", "n3"),
        (4, 4, "d", Decimal("4.40"), "x4", "n4"),
    ])
    write(sink, spark, 0, 0, [
        ("u", 200, (2, 20, "b", Decimal("2.25"), "x2", "n2b")),
        ("c", 201, (5, 5, "e", Decimal("5.50"), "x5", "n5")),
        ("d", 202, (3, 3, "c", Decimal("3.30"), "x3", "n3")),
    ])


def row(id, qty, name, price, remark, **added):
    return {"id": id, "qty": qty, "name": name, "price": Decimal(price), "remark": remark, **DEFAULTS_V1, **added}


def test_the_history_records_spark_s_own_schema_json(spark):
    from pyspark.sql.types import StructType

    every = schema(ID, *[column(f"c{i}", t, ct, p, s) for i, (t, ct, p, s) in enumerate([
        ("tinyint", "tinyint", None, None), ("tinyint", "tinyint unsigned", None, None), ("smallint", "smallint", None, None),
        ("int", "int unsigned", None, None), ("bigint", "bigint", None, None), ("bigint", "bigint unsigned", None, None),
        ("decimal", "decimal(12,3)", 12, 3), ("decimal", "decimal(50,2)", 50, 2), ("float", "float", None, None),
        ("double", "double", None, None), ("bit", "bit(64)", 64, None), ("varchar", "varchar(3)", None, None),
        ("blob", "blob", None, None), ("date", "date", None, None), ("datetime", "datetime(6)", None, None),
        ("timestamp", "timestamp", None, None), ("time", "time", None, None), ("year", "year", None, None)])])
    types = TableSinkTypes.of(every)
    assert json.dumps(spark_schema(types), separators=(",", ":"), sort_keys=True) == \
        StructType.fromDDL(types.spark_ddl).json()


def test_added_renamed_dropped_and_widened_columns_in_both_readers(sink, spark):
    v0_epoch(sink, spark)
    sink.evolve_in_place(VERSIONS[:2])
    from pyspark.sql.types import StructType

    assert sink.layout.read_schema(T) == StructType.fromDDL(types_of(1).spark_ddl).json()
    assert [e["first_batch"] for e in history(sink)] == [None, None]
    write(sink, spark, 1, 1, [
        ("e", 300, None),  # the ALTER's record: no data
        ("u", 301, (4, 2**40, "d", Decimal("123456789012.34"), "n4b", "custom", Decimal(9), b"\x01", dt.date(2025, 1, 1), 5)),
        ("c", 302, (6, -2**35, "f", Decimal("6.60"), "r6", None, None, None, None, None)),
    ])
    assert [e["first_batch"] for e in history(sink)] == [None, 1]
    write(sink, spark, 1, 2, [("u", 400, (5, 50, "e", Decimal("5.55"), "r5", "new", Decimal(7), b"\x00\xff",
                                          dt.date(2024, 1, 2), None))])
    assert_state(sink, 1, [
        row(1, 1, "a", "1.10", "n1"),
        row(2, 20, "b", "2.25", "n2b"),
        row(4, 2**40, "d", "123456789012.34", "n4b", status="custom", fee=Decimal(9), tag=b"\x01",
            since=dt.date(2025, 1, 1), gone=5),
        row(5, 50, "e", "5.55", "r5"),
        row(6, -2**35, "f", "6.60", "r6", status=None, fee=None, tag=None, since=None),
    ])


def test_two_evolutions_in_a_row(sink, spark):
    v0_epoch(sink, spark)
    sink.evolve_in_place(VERSIONS[:2])
    write(sink, spark, 1, 1, [("u", 300, (1, 2**33, "a", Decimal("1.11"), "n1b", "s1", None, None, None, 11))])
    sink.evolve_in_place(VERSIONS)
    assert [e["first_batch"] for e in history(sink)] == [None, 1, None]
    write(sink, spark, 2, 2, [
        ("u", 400, (2, 22, "b", Decimal("12345678901234.56"), "c2", "s2", None, None, None,
                    dt.datetime(2025, 5, 6, 7, 8, 9, 123456, tzinfo=UTC))),
    ])
    created = {"created": CREATED.replace(tzinfo=None)}
    defaults = {k: v for k, v in DEFAULTS_V1.items() if k != "gone"}
    assert_state(sink, 2, [
        {"id": 1, "qty": 2**33, "name": "a", "price": Decimal("1.11"), "comment": "n1b", **defaults, "status": "s1",
         "fee": None, "tag": None, "since": None, **created},
        {"id": 2, "qty": 22, "name": "b", "price": Decimal("12345678901234.56"), "comment": "c2", **defaults,
         "status": "s2", "fee": None, "tag": None, "since": None, "created": dt.datetime(2025, 5, 6, 7, 8, 9, 123456)},
        {"id": 4, "qty": 4, "name": "d", "price": Decimal("4.40"), "comment": "n4", **defaults, **created},
        {"id": 5, "qty": 5, "name": "e", "price": Decimal("5.50"), "comment": "n5", **defaults, **created},
    ])


def test_two_versions_at_once_the_skipped_one_wrote_no_batch(sink, spark):
    v0_epoch(sink, spark)
    sink.evolve_in_place(VERSIONS)
    write(sink, spark, 2, 1, [("d", 300, (1,) + (None,) * 9)])
    assert [e["first_batch"] for e in history(sink)] == [None, None, 1]
    rows = states(sink, 2)
    assert rows[0] == rows[1]
    assert [(r["id"], r["comment"], r["status"], r["fee"], r["created"]) for r in rows[0]] == [
        (2, "n2b", "new", Decimal(7), CREATED.replace(tzinfo=None)), (4, "n4", "new", Decimal(7), CREATED.replace(tzinfo=None)),
        (5, "n5", "new", Decimal(7), CREATED.replace(tzinfo=None))]


def test_evolve_in_place_is_idempotent_and_never_moves_a_first_batch(sink, spark):
    v0_epoch(sink, spark)
    sink.evolve_in_place(VERSIONS[:2])
    write(sink, spark, 1, 3, [("u", 300, (1, 7, "a", Decimal("1.00"), "r", "s", None, None, None, None))])
    before = history(sink)
    assert before[1]["first_batch"] == 3
    assert before[1]["added"] == {"status": "new", "fee": {"decimal": "7"}, "tag": {"bytes": "AP8="},
                                  "since": {"date": "2024-01-02"}, "gone": None}
    fresh = ParquetSink(sink.config, {}, spark)  # a restarted stream
    fresh.evolve_in_place(VERSIONS[:2])
    fresh.evolve_in_place(VERSIONS[:1])
    assert history(sink) == before
    fresh.evolve_in_place(VERSIONS)
    assert history(sink)[:2] == before and history(sink)[2]["first_batch"] is None
    write(fresh, spark, 1, 4, [("u", 400, (1, 8, "a", Decimal("1.00"), "r", "s", None, None, None, None))])
    assert [e["first_batch"] for e in history(sink)] == [None, 3, None]
    with pytest.raises(SinkError, match="other columns"):
        fresh.evolve_in_place([TableVersion(0, V1)] + VERSIONS[1:])


def test_a_batch_re_run_under_a_new_version_replaces_its_first_attempt(sink, spark):
    v0_epoch(sink, spark)
    # batch 1 published under version 0, then the stream restarts with version 1 and runs batch 1 again
    write(sink, spark, 0, 1, [("u", 300, (1, 10, "a", Decimal("1.10"), "x1", "n1b"))])
    sink.evolve_in_place(VERSIONS[:2])
    write(sink, spark, 1, 1, [("u", 300, (1, 10, "a", Decimal("1.10"), "n1b", "new", Decimal(7), b"\x00\xff",
                                          dt.date(2024, 1, 2), None))])
    assert [e["first_batch"] for e in history(sink)] == [None, 1]
    # and once more after a crash after its publish: the same version, nothing changes
    write(sink, spark, 1, 1, [("u", 300, (1, 10, "a", Decimal("1.10"), "n1b", "new", Decimal(7), b"\x00\xff",
                                          dt.date(2024, 1, 2), None))])
    assert [e["first_batch"] for e in history(sink)] == [None, 1]
    assert sink.layout.batch_ids(T) == [0, 1]
    assert_state(sink, 1, [
        row(1, 10, "a", "1.10", "n1b"),
        row(2, 20, "b", "2.25", "n2b"),
        row(4, 4, "d", "4.40", "n4"),
        row(5, 5, "e", "5.50", "n5"),
    ])


def test_a_version_the_sink_has_not_recorded_is_refused(sink, spark):
    v0_epoch(sink, spark)
    with pytest.raises(SinkError, match="not recorded"):
        write(sink, spark, 1, 1, [("u", 300, (1, 10, "a", Decimal("1.10"), "n1b", None, None, None, None, None))])
    assert sink.layout.batch_ids(T) == [0]


def test_without_history_nothing_changes(sink, spark):
    v0_epoch(sink, spark)
    sink.evolve_in_place(VERSIONS[:1])  # one version: nothing to record
    write(sink, spark, 0, 1, [("u", 300, (4, 40, "d", Decimal("4.44"), "x4", "n4b"))])
    assert not sink.layout.storage.exists(f"{sink.layout.table_dir(T)}/{HISTORY_FILE}")
    expected = [
        {"id": 1, "qty": 1, "name": "a", "price": Decimal("1.10"), "old_col": "x1", "note": "n1"},
        {"id": 2, "qty": 20, "name": "b", "price": Decimal("2.25"), "old_col": "x2", "note": "n2b"},
        {"id": 4, "qty": 40, "name": "d", "price": Decimal("4.44"), "old_col": "x4", "note": "n4b"},
        {"id": 5, "qty": 5, "name": "e", "price": Decimal("5.50"), "old_col": "x5", "note": "n5"},
    ]
    assert_state(sink, 0, expected)


def resnapshot(sink, spark, types, rows, low_watermark, version) -> None:
    """Epoch 2 of the table, one window of ``rows`` (data columns and the chunk index) read under ``types``."""
    from pyspark.sql.types import StructType

    sink.prepare(types, evolve=True)
    df = spark.createDataFrame(rows, StructType.fromDDL(f"{types.spark_ddl}, {CHUNK_COLUMN} int"))
    sink.open_window(df, types, 2, [0], low_watermark, set()).publish_rows(None, version, lambda: None)
    sink.finish_snapshot(T, 2, low_watermark)


def test_a_re_snapshot_under_a_new_definition_starts_a_new_history(sink, spark):
    from pyspark.sql.types import StructType

    v0_epoch(sink, spark)
    sink.evolve_in_place(VERSIONS[:2])
    write(sink, spark, 1, 1, [("u", 300, (1, 10, "a", Decimal("1.10"), "n1b", "s", None, None, None, None))])
    # the snapshot job reads the table under V2 (not applied in place): epoch 2 of version 0 = V2
    types = TableSinkTypes.of(V2)
    resnapshot(sink, spark, types, [(1, 1, "a", Decimal("1.00"), "c", "s", None, None, None, None, 0)],
               (2, 0, 0), (2, 10, -1))
    assert not sink.layout.storage.exists(f"{sink.layout.table_dir(T)}/{HISTORY_FILE}")
    assert not sink.layout.has_changes(T)
    assert sink.layout.read_schema(T) == StructType.fromDDL(types.spark_ddl).json()
    spark_rows = sink.current_state(types).collect()
    assert [(r["id"], r["comment"]) for r in spark_rows] == [(1, "c")]
    assert read_current_state(sink.config.path, T, ["id"]).select(["id", "comment"]).to_pylist() == [
        {"id": 1, "comment": "c"}]


def test_a_re_snapshot_under_the_newest_version_makes_it_version_0(sink, spark):
    v0_epoch(sink, spark)
    sink.evolve_in_place(VERSIONS[:2])
    write(sink, spark, 1, 1, [("u", 300, (1, 10, "a", Decimal("1.10"), "n1b", "s", None, None, None, None))])
    # epoch 2, read under V1 (the definition the sink has now); its low watermark keeps the changes after it
    types = TableSinkTypes.of(V1)
    resnapshot(sink, spark, types, [(1, 2**40, "a", Decimal("1.00"), "r1", "s1", None, None, None, None, 0),
                                    (7, 7, "g", Decimal("7.00"), "r7", "s7", None, None, None, None, 0)],
               (1, 150, 0), (1, 250, -1))
    sink.finish_snapshot(T, 2, (1, 150, 0))  # a retry of the collect step
    assert [(e["number"], e["first_batch"]) for e in history(sink)] == [(-1, None), (0, 1)]
    # the new epoch's stream: version 0 is V1; it writes batch 2, then applies V2 as its version 1
    fresh = ParquetSink(sink.config, {}, spark)
    write(fresh, spark, TableSinkTypes.of(V1, version=0), 2, [("c", 500, (8, 8, "h", Decimal("8.00"), "r8", "s8", None, None, None, None))])
    rebased = [TableVersion(0, V1), TableVersion(1, V2, renamed={"comment": "remark"}, added={"created": CREATED})]
    fresh.evolve_in_place(rebased)
    assert [(e["number"], e["first_batch"]) for e in history(sink)] == [(-1, None), (0, 1), (1, None)]
    write(fresh, spark, TableSinkTypes.of(V2, version=1), 3, [
        ("u", 600, (2, 22, "b", Decimal("2.00"), "c2", "s2", None, None, None, None))])
    assert [(e["number"], e["first_batch"]) for e in history(sink)] == [(-1, None), (0, 1), (1, 3)]
    spark_rows, arrow_rows = states(fresh, 2)
    assert spark_rows == arrow_rows
    assert [(r["id"], r["qty"], r["comment"], r["status"]) for r in spark_rows] == [
        (1, 10, "n1b", "s"),  # batch 1 (pos 300) is newer than the epoch's row (pos 250)
        (2, 22, "c2", "s2"),  # batch 3
        (5, 5, "n5", "new"),  # batch 0, after the low watermark, written under what is now version -1
        (7, 7, "r7", "s7"),
        (8, 8, "r8", "s8"),  # batch 2, under the new epoch's version 0
    ]
    assert all(r["created"] == CREATED.replace(tzinfo=None) for r in spark_rows if r["id"] != 2)
