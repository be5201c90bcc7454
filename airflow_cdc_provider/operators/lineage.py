"""OpenLineage for the pipeline's tasks, through Airflow's OpenLineage provider: each captured MySQL table is an
input, its sink table an output, every sink column fed by the source column of the same name.

The provider asks an operator for ``get_openlineage_facets_on_complete(task_instance)`` once the task has
ended (``CdcLineageMixin``). Names follow the OpenLineage naming spec::

    input    mysql://host:port        db.table
    output   file                     /data/cdc/shop/db.table            parquet, delta on a local path
             s3://bucket              cdc/shop/db.table                  (s3a, gs, hdfs, abfss, ...: scheme://authority)
             postgres://host:port     database.schema.db__table          jdbc

An output is named from the same location as the table's Asset URI (``assets.table_asset_uri``), so a lineage
consumer and Airflow's Asset view agree on what the table is. The column definitions come from the state store:
every snapshot and stream job saves a table's definition there (``tables/<t>/schema.json``) before it reads a
row of it, so a task that wrote a table always finds it, without a query of the source. Facets hold hosts,
ports, names and types only: no login, no password, no connection extra.

Airflow and OpenLineage are imported inside the functions: this module imports without the provider, and the
mixin then reports nothing.
"""

from __future__ import annotations

import logging
from typing import Any, Iterable, Mapping
from urllib.parse import unquote, urlsplit

log = logging.getLogger("airflow_cdc.lineage")

TRANSFORMATION = "IDENTITY"  # a sink column holds the source column's value (in the sink's type for it)
OBJECT_STORE_SCHEMES = {"s3": "s3", "s3a": "s3", "s3n": "s3", "gs": "gs", "gcs": "gs"}
AZURE_SCHEMES = ("abfs", "abfss", "wasb", "wasbs", "az")  # their URI's user part is the container, not a login


# -- names ------------------------------------------------------------------------------------------------
def source_dataset_name(source, table: str) -> tuple[str, str]:
    """(namespace, name) of a captured table: ``mysql://host:port``, ``db.table``."""
    return f"mysql://{source.host}:{source.port}", table


def location_dataset_name(uri: str) -> tuple[str, str]:
    """(namespace, name) of the place an Asset URI names (``assets.table_asset_uri``), as the naming spec has it:
    a local file is namespace ``file`` with its path; S3 and GCS are ``s3://bucket`` / ``gs://bucket`` with the
    key; PostgreSQL is ``postgres://host:port`` with ``database.schema.table``; any other filesystem is
    ``scheme://authority`` with the path. A password in the URI's authority never gets into the name."""
    parts = urlsplit(uri)
    scheme = parts.scheme.lower()
    host = parts.hostname or ""
    authority = f"{host}:{parts.port}" if parts.port else host
    path = unquote(parts.path)
    if scheme == "file":
        return "file", path
    if scheme == "postgres":
        database, schema, table = (unquote(p) for p in parts.path.lstrip("/").split("/"))
        return f"postgres://{authority}", f"{database}.{schema}.{table}"
    if scheme in OBJECT_STORE_SCHEMES:
        return f"{OBJECT_STORE_SCHEMES[scheme]}://{authority}", path.lstrip("/")
    if scheme in AZURE_SCHEMES:
        container = parts.username
        return f"{scheme}://{container + '@' if container else ''}{authority}", path.lstrip("/")
    return f"{scheme}://{authority}", path


def sink_dataset_name(sink, table: str) -> tuple[str, str] | None:
    """(namespace, name) of ``table``'s sink table; None for a sink type without an Asset URI form."""
    from airflow_cdc_provider.operators.assets import table_asset_uri

    try:
        uri = table_asset_uri(sink, table)
    except ValueError as exc:
        log.warning("no OpenLineage output for %s: %s", table, exc)
        return None
    return location_dataset_name(uri)


# -- columns ----------------------------------------------------------------------------------------------
def metadata_columns(sink_type: str) -> list[tuple[str, str]]:
    """The columns a sink writes besides the source's, with their types there (as each sink's code defines them):
    all sinks: ``_cdc_op``, ``_cdc_ts_ms`` and the version ``_cdc_file_seq``, ``_cdc_pos``, ``_cdc_row``;
    jdbc and delta: ``_cdc_deleted`` (tombstone) and ``_cdc_chunk``; parquet: ``_cdc_chunk`` (snapshot files)."""
    from airflow_cdc_provider.sinks.base import META_COLUMNS

    if sink_type == "jdbc":
        from airflow_cdc_provider.sinks.postgres import META_PG_TYPES

        return [*((n, META_PG_TYPES[t]) for n, t in META_COLUMNS), ("_cdc_deleted", "boolean"), ("_cdc_chunk", "text")]
    if sink_type == "delta":
        from airflow_cdc_provider.sinks.delta import CHUNK, DELETED

        return [*META_COLUMNS, (DELETED, "boolean"), (CHUNK, "string")]
    if sink_type == "parquet":
        return [*META_COLUMNS, ("_cdc_chunk", "int")]
    return list(META_COLUMNS)


def sink_column_type(sink_type: str, column) -> str | None:
    """A source column's type in the sink: PostgreSQL's for jdbc, Spark's (the files' schema) otherwise."""
    from airflow_cdc_provider.sinks.types import UnsupportedColumnType, sink_type as column_sink_type

    try:
        t = column_sink_type(column)
    except UnsupportedColumnType:
        return None
    return t.postgres if sink_type == "jdbc" else t.spark


def saved_schemas(state, tables: Iterable[str]):
    """The definitions the jobs saved for ``tables`` (``TableSchema`` by name); a table without one is left out."""
    from airflow_cdc_provider.source.schema import TableSchema

    out = {}
    for table in tables:
        data = state.read_table_schema(table)
        if data:
            out[table] = TableSchema.from_dict(data)
        else:
            log.debug("no saved definition of %s: its OpenLineage datasets go without a schema", table)
    return out


# -- datasets ---------------------------------------------------------------------------------------------
def _schema_facet(columns: Iterable[tuple[str, str | None]]):
    from openlineage.client.facet_v2 import schema_dataset

    return schema_dataset.SchemaDatasetFacet(fields=[
        schema_dataset.SchemaDatasetFacetFields(name=name, type=type_, ordinal_position=i)
        for i, (name, type_) in enumerate(columns, start=1)])


def source_dataset(source, table: str, schema=None):
    """The input dataset of a captured table; its schema facet has the columns as the source reports them
    (``COLUMN_TYPE``: ``bigint(20) unsigned``, ``varchar(64)``, ``enum('a','b')``)."""
    from openlineage.client.event_v2 import InputDataset

    namespace, name = source_dataset_name(source, table)
    facets = {"schema": _schema_facet((c.name, c.column_type) for c in schema.columns)} if schema else {}
    return InputDataset(namespace=namespace, name=name, facets=facets)


def column_lineage_facet(source_namespace: str, source_name: str, columns: Iterable[str]):
    """Each of ``columns`` from the source column of the same name, unchanged."""
    from openlineage.client.facet_v2 import column_lineage_dataset as cl

    def origin(column: str):
        return cl.InputField(namespace=source_namespace, name=source_name, field=column,
                             transformations=[cl.Transformation(type="DIRECT", subtype=TRANSFORMATION, masking=False)])

    return cl.ColumnLineageDatasetFacet(fields={
        c: cl.Fields(inputFields=[origin(c)], transformationType=TRANSFORMATION, transformationDescription="")
        for c in columns})


def sink_dataset(sink, table: str, origin: tuple[str, str], schema=None, rows: int | None = None):
    """The output dataset of ``table`` in ``sink`` (None if the sink type has no name for it): its schema facet
    has the source's columns in the sink's types, then the sink's metadata columns; its column lineage maps
    each source column from ``origin`` (the input's namespace and name); ``rows`` (what the task wrote, where
    it counted) becomes its output statistics."""
    from openlineage.client.event_v2 import OutputDataset
    from openlineage.client.facet_v2 import output_statistics_output_dataset

    named = sink_dataset_name(sink, table)
    if named is None:
        return None
    facets: dict[str, Any] = {}
    if schema is not None:
        data = [(c.name, sink_column_type(sink.type, c)) for c in schema.columns]
        facets["schema"] = _schema_facet([*data, *metadata_columns(sink.type)])
        facets["columnLineage"] = column_lineage_facet(*origin, schema.column_names)
    output_facets = {}
    if rows is not None:
        output_facets["outputStatistics"] = output_statistics_output_dataset.OutputStatisticsOutputDatasetFacet(
            rowCount=int(rows))
    return OutputDataset(namespace=named[0], name=named[1], facets=facets, outputFacets=output_facets)


def table_lineage(pipeline, tables: Mapping[str, int | None]):
    """The ``OperatorLineage`` of a task that carried ``tables`` (name -> rows written, None if not counted)
    from the pipeline's source into its sink."""
    from airflow.providers.openlineage.extractors import OperatorLineage

    schemas = saved_schemas(pipeline.state, sorted(tables))
    inputs, outputs = [], []
    for table in sorted(tables):
        schema = schemas.get(table)
        inputs.append(source_dataset(pipeline.source, table, schema))
        output = sink_dataset(pipeline.sink, table, source_dataset_name(pipeline.source, table), schema, tables[table])
        if output is not None:
            outputs.append(output)
    return OperatorLineage(inputs=inputs, outputs=outputs)


# -- what a task carried ----------------------------------------------------------------------------------
def chunk_task_tables(chunk: Mapping[str, Any] | None, reports: Any) -> dict[str, int | None]:
    """A snapshot chunk task's tables (its ``chunk``) with the rows its chunk reports (its return value) count."""
    from airflow_cdc_provider.core.chunks import ChunkTask

    tables: dict[str, int | None] = dict.fromkeys((str(t) for t in ChunkTask.from_dict(dict(chunk)).tables), None)
    for report in reports if isinstance(reports, list) else []:
        if isinstance(report, Mapping) and report.get("table") in tables:
            tables[report["table"]] = (tables[report["table"]] or 0) + int(report.get("rows") or 0)
    return tables


def collected_tables(result: Mapping[str, Any]) -> dict[str, int | None]:
    """collect_watermarks' tables: those whose snapshot it made current (its return value's ``snapshotted``)."""
    return dict.fromkeys(result.get("snapshotted") or [], None)


def streamed_tables(state, status: Mapping[str, Any]) -> dict[str, int | None]:
    """The stream task's tables: those its job captured (the job's spec in the state store, when it is this
    launch's: the launch ids match), else those it wrote rows of; with the rows its status counts."""
    from airflow_cdc_provider.pipeline.jobspec import JobSpec

    rows = {t: int(n) for t, n in (status.get("rows_by_table") or {}).items()}
    captured: Iterable[str] = rows
    text = state.read_spec(state.STREAM_SPEC) if status.get("launch_id") else None
    if text:
        spec = JobSpec.from_json(text, where=f"specs/{state.STREAM_SPEC}")
        if spec.launch_id == status["launch_id"]:
            captured = spec.tables
    return {t: rows.get(t, 0) for t in captured}


def carried_tables(operator: Any, state, result: Any) -> dict[str, int | None]:
    """The tables a pipeline task carried from source to sink, by what the task is: a snapshot chunk task (it has
    a ``chunk``), collect_watermarks (its return value says what it ``snapshotted``) or the stream (its return
    value is the job's final status). A skipped stream (a backfill, or another run's stream running) carried
    none."""
    if getattr(operator, "chunk", None):
        return chunk_task_tables(operator.chunk, result)
    if isinstance(result, Mapping) and "snapshotted" in result:
        return collected_tables(result)
    if isinstance(result, Mapping) and "rows_by_table" in result:
        return streamed_tables(state, result)
    return {}


class CdcLineageMixin:
    """OpenLineage for a snapshot chunk task, collect_watermarks and the stream task: list it before the
    operator's base class (``class SnapshotChunkOperator(CdcLineageMixin, CdcSparkSubmitOperator)``).

    Reads ``self.config``, ``self.chunk``, the task's return value (XCom) and what the jobs left in the state store
    (table definitions, the stream's spec); no query of the source. The provider asks this method on success, and
    (having no other) on failure and skip too: only a task that succeeded wrote its tables, the others report no
    datasets. Never raises: lineage must not fail a task, so a problem is a warning and an empty lineage. Without
    the OpenLineage provider it returns None.
    """

    def get_openlineage_facets_on_complete(self, task_instance: Any):
        try:
            from airflow.providers.openlineage.extractors import OperatorLineage
        except ImportError:
            return None
        try:
            from airflow_cdc_provider.pipeline.resolve import load_pipeline

            if getattr(task_instance, "state", None) not in (None, "success"):  # a failed or skipped task wrote nothing
                return OperatorLineage()
            result = task_instance.xcom_pull(task_ids=task_instance.task_id, map_indexes=task_instance.map_index)
            pipeline = load_pipeline(self.config)
            tables = carried_tables(self, pipeline.state, result)
            return table_lineage(pipeline, tables) if tables else OperatorLineage()
        except Exception as exc:  # noqa: BLE001 - lineage is a report on the task, never a reason to fail it
            getattr(self, "log", log).warning("OpenLineage: no lineage for this task: %s: %s", type(exc).__name__, exc)
            return OperatorLineage()
