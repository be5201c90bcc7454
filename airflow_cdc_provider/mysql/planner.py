"""From configured tables to a chunk plan: validate the source, split every table, group into tasks."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

import pymysql

from ..core.chunks import Chunk, ChunkTask, SplitOptions, group_into_tasks
from .chunk_queries import split_schema
from .schema import TableSchema
from .server import SourceError
from .settings import ConnectionSettings
from .validation import ValidationResult, validate_source

DEFAULT_MAX_TASKS = 1024  # Airflow's [core] max_map_length default


class SourceConnectError(SourceError):
    pass


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


def connect(settings: ConnectionSettings) -> pymysql.connections.Connection:
    try:
        return pymysql.connect(**settings.pymysql_kwargs())
    except pymysql.err.OperationalError as exc:
        code, msg = (exc.args + ("",))[:2]
        if code == 1045:
            hint = "check the login and password of the connection"
        elif code in (2003, 2005, 2006, 2013):
            hint = "check the host and port of the connection and that the server is running"
        elif code == 1049:
            hint = "check the schema (database) of the connection"
        else:
            hint = "check the connection settings"
        raise SourceConnectError(f"cannot connect to {settings.describe()}: {msg} ({hint})") from None


def plan_chunks(
    settings: ConnectionSettings,
    tables: Sequence[str],
    options: SplitOptions,
    chunk_keys: Mapping[str, Any] | None = None,
    max_tasks: int = DEFAULT_MAX_TASKS,
    should_split: Callable[[TableSchema], bool] | None = None,
    chunks_per_task: int = 1,
) -> ChunkPlan:
    """Validate every table; split those ``should_split`` accepts (all by default), so a later run does not
    pay the split queries of tables whose snapshot is already finished."""
    with contextlib.closing(connect(settings)) as conn:
        validation = validate_source(conn, tables, chunk_keys, source=f"source {settings.describe()}")
        chunks: list[Chunk] = []
        for schema in validation.schemas:
            if should_split is None or should_split(schema):
                chunks += split_schema(conn, schema, options)
    return ChunkPlan(validation, chunks, group_into_tasks(chunks, max_tasks, chunks_per_task))
