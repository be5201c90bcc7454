"""The plan step: validate the source, split every table that needs a snapshot into chunks, group the
chunks into mapped tasks."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any, Callable, Collection, Mapping, Sequence

from airflow_cdc_provider.core.chunks import Chunk, ChunkTask, SplitOptions, group_into_tasks
from airflow_cdc_provider.core.offsets import BinlogOffset
from airflow_cdc_provider.source.chunk_queries import split_schema
from airflow_cdc_provider.source.connection import connect
from airflow_cdc_provider.source.schema import TableSchema
from airflow_cdc_provider.source.settings import ConnectionSettings
from airflow_cdc_provider.source.startup import resolve_startup
from airflow_cdc_provider.source.validation import ValidationResult, validate_source
from airflow_cdc_provider.state.records import StreamSeed

DEFAULT_MAX_TASKS = 1024  # Airflow's [core] max_map_length default


@dataclass
class ChunkPlan:
    validation: ValidationResult
    chunks: list[Chunk]
    tasks: list[ChunkTask]

    @property
    def schemas(self) -> list[TableSchema]:
        return self.validation.schemas

    def to_dict(self) -> dict[str, Any]:
        return {
            "tables": [
                {
                    "table": str(s.table),
                    "key_columns": list(s.key_columns),
                    "chunks": [c.to_dict() for c in self.chunks if c.table == s.table],
                }
                for s in self.schemas
            ],
            "tasks": [t.to_dict() for t in self.tasks],
        }


def plan_chunks(
    settings: ConnectionSettings,
    tables: Sequence[str],
    options: SplitOptions,
    chunk_keys: Mapping[str, Any] | None = None,
    max_tasks: int = DEFAULT_MAX_TASKS,
    should_split: Callable[[TableSchema], bool] | None = None,
    chunks_per_task: int = 1,
    captured_before: Collection[str] = (),
    schema_changes_per_table: Mapping[str, Any] | None = None,
) -> ChunkPlan:
    """Validate every table; split those ``should_split`` accepts (all by default), so a later run does not
    pay the split queries of tables whose snapshot is already finished. ``captured_before``: tables a missing
    one of which was dropped or renamed away (``ValidationResult.gone``), not a typo.
    ``schema_changes_per_table``: ``stream.schema_changes_per_table``, checked against the captured tables."""
    with contextlib.closing(connect(settings)) as conn:
        validation = validate_source(conn, tables, chunk_keys, source=f"source {settings.describe()}",
                                     captured_before=captured_before,
                                     schema_changes_per_table=schema_changes_per_table)
        chunks: list[Chunk] = []
        for schema in validation.schemas:
            if should_split is None or should_split(schema):
                chunks += split_schema(conn, schema, options)
    return ChunkPlan(validation, chunks, group_into_tasks(chunks, max_tasks, chunks_per_task))


STREAM_SERVER_ID_SLOT = 10_000  # the stream's replica id slot, far from the chunk readers' slots


def startup_seed(pipeline) -> StreamSeed:
    """The stream seed of a pipeline that streams without a snapshot (``stream.startup`` other than
    ``initial``): its start resolved now, at the plan step, so the stream starts where the DAG run started and
    not where its job happens to launch later. No table has snapshot chunks: every change is emitted."""
    with contextlib.closing(connect(pipeline.source)) as conn:
        start = resolve_startup(pipeline.stream.startup, pipeline.source, conn,
                                pipeline.server_id(STREAM_SERVER_ID_SLOT), None, pipeline.state.uri)
    return StreamSeed(BinlogOffset(start["file"], start["pos"], start.get("gtid")), {})
