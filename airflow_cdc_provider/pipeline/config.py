"""The pipeline YAML: loading and strict validation.

Every error names the file and the key path and says what is allowed, e.g.
``shop.yaml: snapshot.chunk_sise: unknown key (did you mean 'chunk_size'?)``. Unknown keys are errors, so a
typo never silently falls back to a default.

Schema (sections other than ``source`` are optional)::

    dag_id: shop_cdc                 # default: the file name
    schedule: "@hourly"              # any Airflow schedule, or null
    default_args: {retries: 2}       # passed to the DAG
    source:
      conn_id: shop_mysql            # an Airflow mysql connection
      tables: [shop.orders, "shop.order_*", "re:shop\\.events_\\d+"]
      chunk_key: {shop.events: event_id}     # per table, for tables without a usable primary key
      server_id: "5400-5408"         # replica server ids for binlog readers
    snapshot:
      chunk_size: 8096               # rows per chunk
      max_active_chunks: 1           # chunk tasks running at once
      rows_per_task: 10000000        # chunks share a task (one Spark application) up to this: a table's
                                     # consecutive chunks, or several whole small tables
      even_distribution_lower_bound: 0.05
      even_distribution_upper_bound: 1000.0
      even_split: true               # false: boundaries always from the database
    stream:   {mode: available_now | continuous, startup: initial | latest | earliest}
    sink:     {type: parquet | jdbc, path: ..., conn_id: ..., schema: ...}
    spark:    {conn_id: spark_default, conf: {...}, jars: [...], ...}
              # connect_conn_id: spark_connect_default   # opt-in: chunk tasks and available_now streams on a Spark Connect server
              # class_archive: true   # drivers on this machine map a JVM class archive (~3 s less per job)
    state:    {path: ...}
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping

import yaml

from airflow_cdc_provider.core.chunks import (
    DEFAULT_CHUNK_SIZE,
    DEFAULT_EVEN_LOWER_BOUND,
    DEFAULT_EVEN_UPPER_BOUND,
    SplitOptions,
)

# A task pays a JVM start and session (~3.5 s here with the class archive, ~8 s without) before its Spark work;
# 10M rows keeps that under 10% of the task.
DEFAULT_ROWS_PER_TASK = 10_000_000


class ConfigError(ValueError):
    """A pipeline file problem; the message names the file and key and says how to fix it."""


# -- a tiny schema language --------------------------------------------------------------------------
@dataclass(frozen=True)
class Field:
    kinds: tuple[type, ...]
    required: bool = False
    choices: tuple[Any, ...] | None = None
    check: Callable[[Any], str | None] | None = None  # returns an error text or None


def _positive_int(v: Any) -> str | None:
    return None if isinstance(v, int) and not isinstance(v, bool) and v > 0 else "must be a positive integer"


def _non_empty_list_of_str(v: Any) -> str | None:
    if not isinstance(v, list) or not v or not all(isinstance(x, str) and x for x in v):
        return "must be a non-empty list of table names like 'db.table'"
    return None


def _chunk_keys(v: Any) -> str | None:
    for k, col in v.items():
        if not isinstance(k, str) or "." not in k:
            return f"key {k!r} must be a table name 'db.table'"
        if not (isinstance(col, str) or (isinstance(col, list) and col and all(isinstance(c, str) for c in col))):
            return f"value for {k!r} must be a column name or a list of column names"
    return None


STR, INT, FLOAT, BOOL, LIST, DICT, NONE = (str,), (int,), (int, float), (bool,), (list,), (dict,), (type(None),)

SCHEMA: dict[str, Any] = {
    "dag_id": Field(STR),
    "description": Field(STR),
    "schedule": Field(STR + NONE),
    "tags": Field(LIST),
    "default_args": Field(DICT),
    "source": (
        True,
        {
            "conn_id": Field(STR, required=True),
            "tables": Field(LIST, required=True, check=_non_empty_list_of_str),
            "chunk_key": Field(DICT, check=_chunk_keys),
            "server_id": Field(STR + INT),
        },
    ),
    "snapshot": (
        False,
        {
            "chunk_size": Field(INT, check=_positive_int),
            "max_active_chunks": Field(INT, check=_positive_int),
            "rows_per_task": Field(INT, check=_positive_int),
            "even_distribution_lower_bound": Field(FLOAT),
            "even_distribution_upper_bound": Field(FLOAT),
            "even_split": Field(BOOL),
        },
    ),
    "stream": (
        False,
        {
            "mode": Field(STR, choices=("available_now", "continuous")),
            "startup": Field(STR + DICT),
            "max_batch_bytes": Field(INT, check=_positive_int),
            "read_partitions": Field(INT, check=_positive_int),
            "max_rows_per_batch": Field(INT, check=lambda v: (
                "replaced by stream.max_batch_bytes (binlog bytes per micro-batch, default 64 MiB): batches are "
                "planned from the binlog without decoding it, so their row count is not known in advance")),
            "trigger_interval": Field(STR),
            "heartbeat_timeout": Field(INT, check=_positive_int),
            "deferrable": Field(BOOL),
            "reconnect_timeout": Field(INT, check=_positive_int),
        },
    ),
    "sink": (
        False,
        {
            "type": Field(STR, choices=("parquet", "jdbc")),
            "path": Field(STR),
            "conn_id": Field(STR),
            "schema": Field(STR),
        },
    ),
    "spark": (
        False,
        {
            "conn_id": Field(STR),
            "connect_conn_id": Field(STR),
            "conf": Field(DICT),
            "jars": Field(STR + LIST),
            "py_files": Field(STR + LIST),
            "executor_memory": Field(STR),
            "driver_memory": Field(STR),
            "executor_cores": Field(INT),
            "total_executor_cores": Field(INT),
            "num_executors": Field(INT),
            "env_vars": Field(DICT),
            "deploy_mode": Field(STR, choices=("client", "cluster")),
            "class_archive": Field(BOOL),
        },
    ),
    "state": (False, {"path": Field(STR)}),
}


def _type_name(kinds: tuple[type, ...]) -> str:
    names = {str: "a string", int: "an integer", float: "a number", bool: "true/false", list: "a list",
             dict: "a mapping", type(None): "null"}
    return " or ".join(dict.fromkeys(names[k] for k in kinds))


def _unknown(where: str, key: Any, allowed: list[str]) -> ConfigError:
    hint = difflib.get_close_matches(str(key), allowed, n=1)
    suggestion = f"did you mean {hint[0]!r}? " if hint else ""
    return ConfigError(f"{where}{key}: unknown key ({suggestion}allowed: {', '.join(allowed)})")


def _check_field(where: str, path: str, f: Field, value: Any) -> None:
    ok_type = isinstance(value, f.kinds) and not (isinstance(value, bool) and bool not in f.kinds)
    if not ok_type:
        raise ConfigError(f"{where}{path}: must be {_type_name(f.kinds)}, got {type(value).__name__} {value!r}")
    if f.choices and value not in f.choices:
        raise ConfigError(f"{where}{path}: {value!r} is not allowed (allowed: {', '.join(map(str, f.choices))})")
    if f.check:
        problem = f.check(value)
        if problem:
            raise ConfigError(f"{where}{path}: {problem}, got {value!r}")


def validate_document(doc: Any, where: str) -> None:
    if not isinstance(doc, dict):
        raise ConfigError(f"{where}the file must contain a mapping with a 'source' section, got {type(doc).__name__}")
    for key in doc:
        if key not in SCHEMA:
            raise _unknown(where, key, list(SCHEMA))
    for key, spec in SCHEMA.items():
        if isinstance(spec, Field):
            if key in doc:
                _check_field(where, key, spec, doc[key])
            continue
        required, fields = spec
        if key not in doc:
            if required:
                raise ConfigError(f"{where}{key}: required section is missing (it needs {', '.join(k for k, f in fields.items() if f.required)})")
            continue
        section = doc[key]
        if not isinstance(section, dict):
            raise ConfigError(f"{where}{key}: must be a mapping, got {type(section).__name__} {section!r}")
        for sub in section:
            if sub not in fields:
                raise _unknown(f"{where}{key}.", sub, list(fields))
        for sub, f in fields.items():
            if sub in section:
                _check_field(where, f"{key}.{sub}", f, section[sub])
            elif f.required:
                raise ConfigError(f"{where}{key}.{sub}: required key is missing")


# -- typed configuration ------------------------------------------------------------------------------
@dataclass
class SourceConfig:
    conn_id: str
    tables: list[str]
    chunk_key: dict[str, Any] = field(default_factory=dict)
    server_id: str | int | None = None


@dataclass
class SnapshotConfig:
    chunk_size: int = DEFAULT_CHUNK_SIZE
    max_active_chunks: int = 1
    rows_per_task: int = DEFAULT_ROWS_PER_TASK
    even_distribution_lower_bound: float = DEFAULT_EVEN_LOWER_BOUND
    even_distribution_upper_bound: float = DEFAULT_EVEN_UPPER_BOUND
    even_split: bool = True

    @property
    def chunks_per_task(self) -> int:
        """Chunks one mapped task (one Spark application, one JVM start) reads: ``rows_per_task`` worth."""
        return max(1, self.rows_per_task // self.chunk_size)

    def split_options(self) -> SplitOptions:
        return SplitOptions(
            self.chunk_size, self.even_distribution_lower_bound, self.even_distribution_upper_bound, self.even_split
        )


@dataclass
class PipelineConfig:
    path: Path | None
    dag_id: str
    source: SourceConfig
    snapshot: SnapshotConfig
    raw: dict[str, Any]

    def section(self, name: str) -> dict[str, Any]:
        return dict(self.raw.get(name) or {})


def parse_config(doc: Mapping[str, Any], path: Path | None = None) -> PipelineConfig:
    where = f"{path}: " if path else ""
    validate_document(doc, where)
    snap = SnapshotConfig(**(doc.get("snapshot") or {}))
    try:
        snap.split_options()
    except ValueError as exc:
        raise ConfigError(f"{where}snapshot: {exc}") from None
    dag_id = doc.get("dag_id") or (path.stem if path else "cdc_pipeline")
    return PipelineConfig(path, dag_id, SourceConfig(**doc["source"]), snap, dict(doc))


def load_config(path: str | Path) -> PipelineConfig:
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"{path}: file not found") from None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read ({exc.strerror})") from None
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        loc = f":{mark.line + 1}:{mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ConfigError(f"{path}{loc}: invalid YAML: {problem}") from None
    return parse_config(doc, path)
