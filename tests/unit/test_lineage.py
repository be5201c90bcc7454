"""OpenLineage datasets of a pipeline's tasks: names by the naming spec, schemas, column lineage, no secrets."""

import json
import sys

import pytest
from openlineage.client.serde import Serde

from airflow_cdc_provider.core.chunks import Chunk, ChunkTask, TableId
from airflow_cdc_provider.operators.assets import table_asset
from airflow_cdc_provider.operators.collect import CollectWatermarksOperator
from airflow_cdc_provider.operators.lineage import CdcLineageMixin, location_dataset_name, table_lineage
from airflow_cdc_provider.operators.snapshot import SnapshotChunkOperator
from airflow_cdc_provider.operators.stream import BinlogStreamOperator
from airflow_cdc_provider.pipeline.config import load_config
from airflow_cdc_provider.pipeline.resolve import resolve_pipeline
from airflow_cdc_provider.source.schema import Column, TableSchema

SOURCE_PASSWORD = "src-pw-4f9a"
SINK_PASSWORD = "pg-pw-7c1e"
ORDERS = TableSchema(
    TableId("shop", "orders"),
    (
        Column("id", "bigint", "bigint(20) unsigned", False, None, None, None, 20, 0, None),
        Column("note", "varchar", "varchar(64)", True, "utf8mb4", "utf8mb4_general_ci", 64, None, None, None),
        Column("placed", "datetime", "datetime(3)", False, None, None, None, None, None, 3),
    ),
    ("id",),
    ("id",),
)
PARQUET_META = [("_cdc_op", "string"), ("_cdc_ts_ms", "bigint"), ("_cdc_file_seq", "bigint"),
                ("_cdc_pos", "bigint"), ("_cdc_row", "int"), ("_cdc_chunk", "int")]
DELTA_META = [("_cdc_op", "string"), ("_cdc_ts_ms", "bigint"), ("_cdc_file_seq", "bigint"), ("_cdc_pos", "bigint"),
              ("_cdc_row", "int"), ("_cdc_deleted", "boolean"), ("_cdc_chunk", "string")]
JDBC_META = [("_cdc_op", "text"), ("_cdc_ts_ms", "bigint"), ("_cdc_file_seq", "bigint"), ("_cdc_pos", "bigint"),
             ("_cdc_row", "integer"), ("_cdc_deleted", "boolean"), ("_cdc_chunk", "text")]


@pytest.fixture
def env(monkeypatch, tmp_path):
    monkeypatch.setenv("AIRFLOW_CONN_SRC", f"mysql://cdc:{SOURCE_PASSWORD}@db.example:3307?charset=utf8mb4")
    monkeypatch.setenv("AIRFLOW_CONN_PG", f"postgresql://writer:{SINK_PASSWORD}@pg.example:5433/warehouse")
    monkeypatch.setenv("AIRFLOW_CDC_DATA", str(tmp_path / "data"))
    return tmp_path


def config(tmp_path, sink: str) -> str:
    """Write the pipeline YAML (``sink``: its sink section); returns its path, what the operators take."""
    path = tmp_path / "shop.yaml"
    path.write_text("source:\n  conn_id: src\n  tables: [shop.orders, shop.items]\n" + sink)
    return str(path)


def written(tmp_path) -> str:
    """The pipeline YAML ``pipeline`` wrote last."""
    return str(tmp_path / "shop.yaml")


def pipeline(tmp_path, sink: str, schemas=(ORDERS,)):
    p = resolve_pipeline(load_config(config(tmp_path, sink)))
    for schema in schemas:  # what a snapshot or stream job saves before it reads the table
        p.state.write_table_schema(str(schema.table), schema.to_dict())
    return p


def fields(dataset, facet="schema"):
    return [(f.name, f.type) for f in dataset.facets[facet].fields]


def serialized(lineage) -> str:
    return json.dumps([json.loads(Serde.to_json(d)) for d in (*lineage.inputs, *lineage.outputs)])


def test_parquet_pipeline(env):
    p = pipeline(env, "")
    lineage = table_lineage(p, {"shop.orders": 12})
    [source], [sink] = lineage.inputs, lineage.outputs
    assert (source.namespace, source.name) == ("mysql://db.example:3307", "shop.orders")
    assert fields(source) == [("id", "bigint(20) unsigned"), ("note", "varchar(64)"), ("placed", "datetime(3)")]
    assert [f.ordinal_position for f in source.facets["schema"].fields] == [1, 2, 3]
    assert (sink.namespace, sink.name) == ("file", str(env / "data" / "shop" / "sink" / "shop.orders"))
    assert fields(sink) == [("id", "decimal(20,0)"), ("note", "string"), ("placed", "timestamp_ntz"), *PARQUET_META]
    assert sink.outputFacets["outputStatistics"].rowCount == 12
    lineage_fields = sink.facets["columnLineage"].fields
    assert sorted(lineage_fields) == ["id", "note", "placed"]  # metadata columns come from no source column
    for column, field in lineage_fields.items():
        [origin] = field.inputFields
        assert (origin.namespace, origin.name, origin.field) == (source.namespace, source.name, column)
        assert [(t.type, t.subtype) for t in origin.transformations] == [("DIRECT", "IDENTITY")]
        assert field.transformationType == "IDENTITY"
    assert SOURCE_PASSWORD not in serialized(lineage)


def test_a_file_sink_table_is_named_as_airflow_names_its_asset(env):
    """Airflow's own Asset -> OpenLineage conversion (common.io, for file:// Assets) gives the same dataset; a path
    with characters the Asset URI escapes is named by the path itself (the converter keeps the escapes)."""
    from airflow.providers.common.io.assets.file import convert_asset_to_openlineage

    for directory, path in (("sink", str(env / "sink")), ("a dir/sink", str(env / "a dir" / "sink"))):
        sink_yaml = f"sink: {{path: '{env / directory}'}}\n"
        [sink] = table_lineage(pipeline(env, sink_yaml, schemas=()), {"shop.orders": None}).outputs
        assert (sink.namespace, sink.name) == ("file", f"{path}/shop.orders")
        converted = convert_asset_to_openlineage(table_asset(config(env, sink_yaml), "shop.orders"), None)
        assert (converted.namespace, converted.name) == ("file", f"{path}/shop.orders".replace(" ", "%20"))


def test_jdbc_pipeline(env):
    p = pipeline(env, "sink: {type: jdbc, conn_id: pg, schema: cdc}\n")
    lineage = table_lineage(p, {"shop.orders": None})
    [source], [sink] = lineage.inputs, lineage.outputs
    assert (sink.namespace, sink.name) == ("postgres://pg.example:5433", "warehouse.cdc.shop__orders")
    assert fields(sink) == [("id", "numeric(20,0)"), ("note", "text"), ("placed", "timestamp(3)"), *JDBC_META]
    assert "outputStatistics" not in sink.outputFacets  # rows not counted: no statistics rather than a wrong 0
    assert sink.facets["columnLineage"].fields["note"].inputFields[0].name == source.name == "shop.orders"
    text = serialized(lineage)
    assert SOURCE_PASSWORD not in text and SINK_PASSWORD not in text and "writer" not in text


def test_delta_pipeline_on_an_object_store(env):
    p = pipeline(env, "sink: {type: delta, path: 's3a://lake/cdc/shop'}\n")
    lineage = table_lineage(p, {"shop.orders": 3, "shop.items": 0})
    assert [(d.namespace, d.name) for d in lineage.inputs] == [("mysql://db.example:3307", "shop.items"),
                                                               ("mysql://db.example:3307", "shop.orders")]
    items, orders = lineage.outputs
    assert (orders.namespace, orders.name) == ("s3://lake", "cdc/shop/shop.orders")
    assert fields(orders) == [("id", "decimal(20,0)"), ("note", "string"), ("placed", "timestamp_ntz"), *DELTA_META]
    # shop.items has no saved definition: named, counted, but no schema and no column lineage invented
    assert (items.name, items.facets, items.outputFacets["outputStatistics"].rowCount) == ("cdc/shop/shop.items", {}, 0)
    assert lineage.inputs[0].facets == {}
    assert SOURCE_PASSWORD not in serialized(lineage)


@pytest.mark.parametrize("uri, expected", [
    ("file:///data/cdc/shop/shop.order%2520x", ("file", "/data/cdc/shop/shop.order%20x")),  # the directory's name
    ("s3a://AKIAXX:topsecret@lake/cdc/shop.t", ("s3://lake", "cdc/shop.t")),
    ("gs://bucket/cdc/shop.t", ("gs://bucket", "cdc/shop.t")),
    ("hdfs://namenode:8020/cdc/shop.t", ("hdfs://namenode:8020", "/cdc/shop.t")),
    ("abfss://box@acct.dfs.core.windows.net/cdc/shop.t", ("abfss://box@acct.dfs.core.windows.net", "cdc/shop.t")),
    ("postgres://pg:5432/ware%2Fhouse/cdc/shop__t", ("postgres://pg:5432", "ware/house.cdc.shop__t")),
])
def test_names_from_asset_uris(uri, expected):
    assert location_dataset_name(uri) == expected
    assert "topsecret" not in "".join(location_dataset_name(uri))


class TaskInstance:
    """What the OpenLineage provider hands ``get_openlineage_facets_on_complete``: the task's identity and its
    XCom (here the return value the task pushed)."""

    def __init__(self, task_id: str, returned, map_index: int = -1, state: str = "success") -> None:
        self.task_id, self.map_index, self.returned, self.state = task_id, map_index, returned, state

    def xcom_pull(self, task_ids, map_indexes, key="return_value"):
        assert (task_ids, map_indexes, key) == (self.task_id, self.map_index, "return_value")
        return self.returned


def test_the_pipelines_operators_report_lineage():
    for operator in (SnapshotChunkOperator, CollectWatermarksOperator, BinlogStreamOperator):
        assert issubclass(operator, CdcLineageMixin)


def test_snapshot_chunk_task_reports_its_chunks_tables(env):
    pipeline(env, "")
    chunks = [Chunk(TableId("shop", "orders"), i, ("id",), None if i == 0 else (100,), (100,) if i == 0 else None)
              for i in (0, 1)]
    task = SnapshotChunkOperator(task_id="snapshot_chunk", config=written(env),
                                        chunk=ChunkTask(chunks).to_dict())
    reports = [{"table": "shop.orders", "index": 0, "rows": 100}, {"table": "shop.orders", "index": 1, "rows": 7}]
    lineage = task.get_openlineage_facets_on_complete(TaskInstance("snapshot_chunk", reports, map_index=3))
    assert [d.name for d in lineage.inputs] == ["shop.orders"]
    assert lineage.outputs[0].outputFacets["outputStatistics"].rowCount == 107
    # asked on failure and on skip too (a chunk of a superseded epoch): such a task wrote nothing
    for state in ("failed", "up_for_retry", "skipped"):
        nothing = task.get_openlineage_facets_on_complete(TaskInstance("snapshot_chunk", None, map_index=3, state=state))
        assert (nothing.inputs, nothing.outputs) == ([], [])


def test_collect_reports_the_tables_it_made_current(env):
    p = pipeline(env, "sink: {type: jdbc, conn_id: pg}\n")
    task = CollectWatermarksOperator(task_id="collect_watermarks", config=written(env))
    result = {"start": {"file": "mysql-bin.000001", "pos": 4}, "tables": ["shop.items", "shop.orders"],
              "snapshotted": ["shop.orders"]}
    lineage = task.get_openlineage_facets_on_complete(TaskInstance("collect_watermarks", result))
    assert [(d.namespace, d.name) for d in lineage.outputs] == [("postgres://pg.example:5433",
                                                                 "warehouse.public.shop__orders")]
    assert p.sink.type == "jdbc" and SINK_PASSWORD not in serialized(lineage)
    nothing = task.get_openlineage_facets_on_complete(TaskInstance("collect_watermarks", {"snapshotted": []}))
    assert (nothing.inputs, nothing.outputs) == ([], [])


def test_stream_reports_the_tables_its_job_captured(env):
    p = pipeline(env, "sink: {type: delta}\n")
    # as BinlogStreamOperator stores its job's spec
    p.state.write_spec(p.state.STREAM_SPEC, p.job_spec(server_id=1, tables=["shop.items", "shop.orders"],
                                                        launch_id="launch-1").to_json())
    task = BinlogStreamOperator(task_id="stream", config=written(env))
    status = {"state": "finished", "mode": "available_now", "launch_id": "launch-1",
              "rows_by_table": {"shop.orders": 5}, "batches": 2}
    lineage = task.get_openlineage_facets_on_complete(TaskInstance("stream", status))
    sink = env / "data" / "shop" / "delta"  # the delta sink's default path
    assert {(d.namespace, d.name): d.outputFacets["outputStatistics"].rowCount for d in lineage.outputs} == {
        ("file", f"{sink}/shop.items"): 0, ("file", f"{sink}/shop.orders"): 5}
    assert [name for name, _ in fields(lineage.outputs[1])][-2:] == ["_cdc_deleted", "_cdc_chunk"]  # delta's
    # a status of another launch than the stored spec's: only the tables it wrote rows of
    other = task.get_openlineage_facets_on_complete(TaskInstance("stream", {**status, "launch_id": "launch-2"}))
    assert [d.name for d in other.inputs] == ["shop.orders"]
    skipped = task.get_openlineage_facets_on_complete(TaskInstance("stream", {"skipped": "backfill"}))
    assert (skipped.inputs, skipped.outputs) == ([], [])


def test_lineage_never_fails_the_task(env, capsys):
    task = CollectWatermarksOperator(task_id="collect_watermarks", config=str(env / "missing.yaml"))
    lineage = task.get_openlineage_facets_on_complete(TaskInstance("collect_watermarks", {"snapshotted": ["a.b"]}))
    assert (lineage.inputs, lineage.outputs) == ([], [])
    assert "OpenLineage: no lineage for this task: ConfigError" in capsys.readouterr().out  # the task's log


def test_without_the_openlineage_provider_the_mixin_reports_nothing(env, monkeypatch):
    monkeypatch.setitem(sys.modules, "airflow.providers.openlineage.extractors", None)  # import fails
    task = CollectWatermarksOperator(task_id="collect_watermarks", config=config(env, ""))
    assert task.get_openlineage_facets_on_complete(TaskInstance("collect_watermarks", {"snapshotted": []})) is None
