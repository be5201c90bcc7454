"""The pipeline YAML: loading and strict validation.

Every problem of a file is reported at once, one line each, naming the file and the key path and saying what
is allowed, e.g. ``shop.yaml: snapshot.chunk_sise: unknown key (did you mean 'chunk_size'? allowed: ...)``.
Unknown keys are errors, so a typo never silently falls back to a default; values are not coerced
(``'5'`` is not an integer, ``1`` is not true/false).

Each section is a dataclass below, holding its defaults, and pydantic validates them; pydantic is imported only
when a file is validated, as the Spark jobs use these classes without it. ``sink`` is validated by the settings
class of its ``type`` (``sinks.registry``). ``docs/pipeline.schema.json`` is the same schema as JSON Schema, for
editors (``pipeline_json_schema``).

Schema (sections other than ``source`` are optional)::

    dag_id: shop_cdc                 # default: the file name
    description: ...
    schedule: "@hourly"              # any Airflow schedule, or null
    tags: [cdc]
    default_args: {retries: 2}       # passed to the DAG
    source:   {conn_id: shop_mysql, tables: [shop.orders, "shop.order_*", "re:shop\\.events_\\d+"],
               chunk_key: {shop.events: event_id}, server_id: "5400-5408"}
    snapshot: {chunk_size: 8096, max_active_chunks: 1, rows_per_task: 10000000, even_split: true,
               even_distribution_lower_bound: 0.05, even_distribution_upper_bound: 1000.0}
    stream:   {mode: available_now | continuous,
               startup: initial | latest | earliest | {file, pos} | {gtid} | {timestamp},
               schema_changes: evolve | lenient | ignore | resnapshot | fail,
               schema_changes_per_table: {"shop.audit_*": ignore}, ...}
    sink:     {type: parquet | jdbc | delta, path: ..., conn_id: ..., schema: ...,
               maintenance: {schedule: "@daily", vacuum_retention_hours: 168, ...}}   # delta
    spark:    {conn_id: spark_default, connect_conn_id: ..., conf: {...}, jars: [...], class_archive: true, ...}
    state:    {path: ...}
"""

from __future__ import annotations

import datetime as dt
import difflib
import json
import functools
import re
import types
import typing
from dataclasses import MISSING, asdict, dataclass, field, fields, is_dataclass
from pathlib import Path
from typing import Annotated, Any, Callable, Literal, Mapping, Union

import annotated_types
import yaml

from airflow_cdc_provider.core.chunks import (
    DEFAULT_CHUNK_SIZE,
    DEFAULT_EVEN_LOWER_BOUND,
    DEFAULT_EVEN_UPPER_BOUND,
    SplitOptions,
)
from airflow_cdc_provider.source.schema import compile_pattern, is_exact

# A task pays a JVM start and a session before its Spark work; 10M rows keeps that a small part of the task.
DEFAULT_ROWS_PER_TASK = 10_000_000


class ConfigError(ValueError):
    """A pipeline file problem; the message names the file and key and says how to fix it."""


# -- field types --------------------------------------------------------------------------------------
# ``Annotated`` metadata pydantic understands: annotated_types constraints, and the classes below, whose
# ``__get_pydantic_core_schema__`` runs only when pydantic builds a validator.
class _Strict:
    """No coercion: pydantic's lax mode would take ``'5'`` as an integer and ``1`` as true."""

    def __get_pydantic_core_schema__(self, source: Any, handler: Any) -> Any:
        return {**handler(source), "strict": True}


class _OneOf:
    """A union's errors as one line saying what the value may be, instead of one line per member."""

    def __init__(self, expected: str) -> None:
        self.expected = expected

    def __get_pydantic_core_schema__(self, source: Any, handler: Any) -> Any:
        schema = handler(source)
        union = schema["schema"] if schema["type"] == "nullable" else schema
        union.update(custom_error_type="one_of", custom_error_message=f"must be {self.expected}")
        return schema


class _Check:
    """A rule pydantic has no constraint for: ``problem(value)`` says what is wrong, or returns None."""

    def __init__(self, problem: Callable[[Any], str | None]) -> None:
        self.problem = problem

    def __get_pydantic_core_schema__(self, source: Any, handler: Any) -> Any:
        from pydantic_core import PydanticCustomError, core_schema

        def check(value: Any) -> Any:
            problem = self.problem(value)
            if problem:
                raise PydanticCustomError("check", "{problem}", {"problem": problem})
            return value

        return core_schema.no_info_after_validator_function(check, handler(source))


# the schedules Airflow takes as a string besides cron expressions (its timetables and croniter's presets)
SCHEDULE_PRESETS = frozenset(("@once", "@continuous", "@hourly", "@daily", "@weekly", "@monthly", "@quarterly",
                              "@yearly", "@annually", "@midnight"))
_DAG_ID = re.compile(r"[\w.-]{1,250}", re.ASCII)  # Airflow's rule for a DAG id


def schedule_problem(schedule: str | None) -> str | None:
    """What Airflow would refuse when it loads the DAG: a schedule that is no preset and no cron expression."""
    if schedule is None or schedule in SCHEDULE_PRESETS:
        return None
    from croniter import croniter

    if croniter.is_valid(schedule):
        return None
    return (f"{schedule!r} is not an Airflow schedule: a cron expression ('0 * * * *'), a preset "
            f"({', '.join(sorted(SCHEDULE_PRESETS))}) or null for runs only when triggered")


def _dag_id_problem(dag_id: str) -> str | None:
    if _DAG_ID.fullmatch(dag_id):
        return None
    return (f"{dag_id!r} is not an Airflow DAG id: letters, digits, '_', '-' and '.', at most 250 (e.g. "
            f"{re.sub(r'[^A-Za-z0-9_.-]+', '_', dag_id)[:250].strip('_') or 'shop_cdc'!r})")


def _table_name_problem(name: str) -> str | None:
    return None if "." in name else "must be a table name 'db.table'"


def _table_pattern_problem(pattern: str) -> str | None:
    """A key that ``source.schema.compile_pattern`` takes, as the patterns of ``source.tables``."""
    if pattern.startswith("re:"):
        try:
            re.compile(pattern[3:])
        except re.error as exc:
            return f"is not a valid regular expression: {exc}"
        return None
    if "." not in pattern:
        return "must be a table 'db.table', a glob 'db.order_*' or a regular expression 're:db\\.t_\\d+'"
    try:
        compile_pattern(pattern)
    except re.error as exc:  # a glob's [...] class
        return f"is not a valid glob: {exc}"
    return None


_STARTUP_FORMS = ("initial, latest, earliest, {file: <binlog file>, pos: <position>} (pos optional), "
                 "{gtid: <GTID>} or {timestamp: <epoch seconds or ISO 8601 time>}")


class _Startup:
    """``stream.startup``: a name, or a mapping naming a binlog position, a GTID or a time."""

    def __get_pydantic_core_schema__(self, source: Any, handler: Any) -> Any:
        from pydantic import AfterValidator
        from typing_extensions import Required, TypedDict

        def form(name: str, keys: dict[str, Any]) -> Any:
            mapping = TypedDict(name, keys, total=False)  # validates to a plain dict, as StreamConfig keeps it
            mapping.__pydantic_config__ = {"extra": "forbid"}
            return mapping

        # an unquoted YAML time is a datetime; kept as text, as the job spec is JSON
        iso_time = Annotated[dt.datetime, AfterValidator(dt.datetime.isoformat)]
        forms = Union[
            Literal["initial", "latest", "earliest"],
            form("BinlogPosition", {"file": Required[NonEmptyStr], "pos": PositiveInt}),
            form("GtidPosition", {"gtid": Required[NonEmptyStr]}),
            form("TimePosition", {"timestamp": Required[Union[Int, Number, NonEmptyStr, iso_time]]}),
        ]
        return handler.generate_schema(Annotated[forms, _OneOf(_STARTUP_FORMS)])


Str = Annotated[str, _Strict()]
NonEmptyStr = Annotated[str, _Strict(), annotated_types.MinLen(1)]
Int = Annotated[int, _Strict()]
PositiveInt = Annotated[int, _Strict(), annotated_types.Gt(0)]
NonNegativeInt = Annotated[int, _Strict(), annotated_types.Ge(0)]
Number = Annotated[float, _Strict()]  # an integer is a number too
Bool = Annotated[bool, _Strict()]
StrOrList = Annotated[Union[Str, list[Str]], _OneOf("a string or a list of strings")]
TableNames = Annotated[list[NonEmptyStr], annotated_types.MinLen(1)]
TableName = Annotated[str, _Strict(), _Check(_table_name_problem)]
TablePattern = Annotated[str, _Strict(), _Check(_table_pattern_problem)]  # as in source.tables
ChunkKeyColumns = Annotated[Union[NonEmptyStr, Annotated[list[NonEmptyStr], annotated_types.MinLen(1)]],
                            _OneOf("a column name or a non-empty list of column names")]
ServerId = Annotated[Union[Str, Int], _OneOf("a server id or a range like '5400-5408'")]
Startup = Annotated[Union[str, dict[str, Any]], _Startup()]
SchemaChanges = Literal["evolve", "lenient", "ignore", "resnapshot", "fail"]  # table_versions.SCHEMA_CHANGE_BEHAVIOURS


# -- typed configuration ------------------------------------------------------------------------------
# One dataclass per section, with its defaults: the only place defaults live. The Spark jobs get the
# sections they need (``stream``) through the job spec, as these same classes.
@dataclass
class SourceConfig:
    __pydantic_config__ = {"extra": "forbid"}
    conn_id: Str
    tables: TableNames
    chunk_key: dict[TableName, ChunkKeyColumns] = field(default_factory=dict)
    server_id: ServerId | None = None


@dataclass
class SnapshotConfig:
    __pydantic_config__ = {"extra": "forbid"}
    chunk_size: PositiveInt = DEFAULT_CHUNK_SIZE
    max_active_chunks: PositiveInt = 1
    rows_per_task: PositiveInt = DEFAULT_ROWS_PER_TASK
    even_distribution_lower_bound: Annotated[Number, annotated_types.Interval(ge=0, le=1)] = DEFAULT_EVEN_LOWER_BOUND
    even_distribution_upper_bound: Annotated[Number, annotated_types.Ge(1)] = DEFAULT_EVEN_UPPER_BOUND
    even_split: Bool = True

    @property
    def chunks_per_task(self) -> int:
        """Chunks one mapped task (one Spark application, one JVM start) reads: ``rows_per_task`` worth."""
        return max(1, self.rows_per_task // self.chunk_size)

    def split_options(self) -> SplitOptions:
        return SplitOptions(
            self.chunk_size, self.even_distribution_lower_bound, self.even_distribution_upper_bound, self.even_split
        )


@dataclass
class StreamConfig:
    __pydantic_config__ = {"extra": "forbid"}
    mode: Literal["available_now", "continuous"] = "available_now"
    startup: Startup = "initial"  # initial | latest | earliest | {file, pos} | {gtid} | {timestamp}
    max_batch_bytes: PositiveInt = 64 * 2**20  # binlog bytes per micro-batch: what one batch holds in memory
    read_partitions: PositiveInt | None = None  # Spark tasks decoding one batch (None: the application's parallelism)
    # a batch is cut into segments no smaller than this: each costs a replica connection and a Python worker's setup
    min_segment_bytes: PositiveInt = 4 * 2**20
    # a batch of at most this much binlog is read and written by the driver: no Spark job, not one per table
    # with rows (0: every batch is read and written by Spark's executors)
    driver_batch_bytes: NonNegativeInt = 4 * 2**20
    trigger_interval: Str = "2 seconds"  # continuous mode
    heartbeat_timeout: PositiveInt = 120  # seconds without a heartbeat before the stream task fails
    deferrable: Bool = True  # continuous: watch from the triggerer
    reconnect_timeout: PositiveInt = 300  # seconds the stream keeps reconnecting to an unreachable source
    # a captured table's schema change: evolve (apply column adds, drops, renames and widenings in place, re-snapshot
    # the table for anything else), lenient (as evolve, but the sink never drops or renames a column: it keeps it,
    # NULL in later rows), ignore (the sink keeps its columns: new ones are not written, dropped or renamed ones are
    # NULL in later rows; widened ones are widened), resnapshot (hold its changes, re-snapshot it in the next run)
    # or fail
    schema_changes: SchemaChanges = "evolve"
    # table pattern (as in source.tables) -> its behaviour, instead of schema_changes; the first key matching wins
    schema_changes_per_table: dict[TablePattern, SchemaChanges] = field(default_factory=dict)

    def schema_changes_for(self, table: str) -> str:
        """The behaviour of table ``db.t``: that of the first key of ``schema_changes_per_table`` matching it."""
        for pattern, behaviour in self.schema_changes_per_table.items():
            if pattern == table if is_exact(pattern) else compile_pattern(pattern).fullmatch(table):
                return behaviour
        return self.schema_changes

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "StreamConfig":
        return cls(**data)


@dataclass
class SparkConfig:
    """SparkSubmitOperator arguments, same names; ``connect_conn_id`` and ``class_archive`` are ours."""

    __pydantic_config__ = {"extra": "forbid"}
    conn_id: Str | None = None
    connect_conn_id: Str | None = None
    conf: dict[Str, Any] = field(default_factory=dict)
    jars: StrOrList = field(default_factory=list)
    py_files: StrOrList | None = None
    executor_memory: Str | None = None
    driver_memory: Str | None = None
    executor_cores: PositiveInt | None = None
    total_executor_cores: PositiveInt | None = None
    num_executors: PositiveInt | None = None
    env_vars: dict[Str, Str] | None = None
    deploy_mode: Literal["client", "cluster"] | None = None
    class_archive: Bool = True

    SUBMIT_KEYS = ("conf", "py_files", "executor_memory", "driver_memory", "executor_cores", "total_executor_cores",
                   "num_executors", "env_vars", "deploy_mode")

    def submit_arguments(self) -> dict[str, Any]:
        """The keys set here, as ``SparkSubmitOperator`` arguments (jars apart: the operators add theirs)."""
        kw = {k: getattr(self, k) for k in self.SUBMIT_KEYS if getattr(self, k) not in (None, {}, [])}
        if self.conn_id:
            kw["conn_id"] = self.conn_id
        kw["class_archive"] = self.class_archive
        return kw


@dataclass
class StateConfig:
    __pydantic_config__ = {"extra": "forbid"}
    path: Str | None = None  # default: <data home>/<dag_id>/state


@dataclass
class PipelineConfig:
    path: Path | None
    dag_id: str
    source: SourceConfig
    snapshot: SnapshotConfig = field(default_factory=SnapshotConfig)
    stream: StreamConfig = field(default_factory=StreamConfig)
    sink: Any = None  # the settings dataclass of the sink type (``sinks.registry``)
    spark: SparkConfig = field(default_factory=SparkConfig)
    state: StateConfig = field(default_factory=StateConfig)
    description: str | None = None
    schedule: str | None = None
    tags: list[str] = field(default_factory=lambda: ["cdc"])
    default_args: dict[str, Any] = field(default_factory=dict)

    @property
    def where(self) -> str:
        """How error messages name this pipeline: its file, else its dag id."""
        return str(self.path or self.dag_id)


# -- validation ---------------------------------------------------------------------------------------
def _split_problem(snapshot: SnapshotConfig) -> str | None:
    try:
        snapshot.split_options()
    except ValueError as exc:
        return str(exc)
    return None


def _sink_type(value: Any) -> Any:
    """The tag of a ``sink`` section: its ``type``, parquet when not given."""
    kind = value.get("type", "parquet") if isinstance(value, Mapping) else getattr(value, "type", "parquet")
    return kind if isinstance(kind, str) else repr(kind)


def _sink_settings() -> tuple[tuple[str, type], ...]:
    from airflow_cdc_provider.sinks.registry import sink_class, sink_types

    return tuple((name, sink_class(name).settings) for name in sink_types())


@functools.lru_cache(maxsize=4)
def _document(sinks: tuple[tuple[str, type], ...]) -> tuple[Any, Any]:
    """The type of a whole pipeline file and its pydantic validator, for these sink types."""
    from pydantic import Discriminator, Tag, TypeAdapter
    from typing_extensions import Required, TypedDict

    sink = Annotated[Union[tuple(Annotated[s, Tag(name)] for name, s in sinks)], Discriminator(_sink_type)]
    document = TypedDict("Pipeline", {
        "dag_id": Annotated[Str, _Check(_dag_id_problem)],
        "description": Str,
        "schedule": Annotated[Str | None, _Check(schedule_problem)],
        "tags": list[Str],
        "default_args": dict[Str, Any],
        "source": Required[SourceConfig],
        "snapshot": Annotated[SnapshotConfig, _Check(_split_problem)],
        "stream": StreamConfig,
        "sink": sink,
        "spark": SparkConfig,
        "state": StateConfig,
    }, total=False)
    document.__pydantic_config__ = {"extra": "forbid"}
    return document, TypeAdapter(document)


# keys a pipeline may no longer use: what replaced them
_RETIRED = {
    "stream.max_rows_per_batch": (
        "replaced by stream.max_batch_bytes (binlog bytes per micro-batch, default 64 MiB): batches are planned "
        "from the binlog without decoding it, so their row count is not known in advance"),
}
_TYPE_NAMES = {
    "string_type": "a string", "int_type": "an integer", "int_parsing": "an integer", "int_from_float": "an integer",
    "float_type": "a number", "float_parsing": "a number", "bool_type": "true/false", "bool_parsing": "true/false",
    "list_type": "a list", "dict_type": "a mapping", "dataclass_type": "a mapping",
}


def _bare(tp: Any) -> Any:
    """``tp`` without ``Annotated``, ``Required`` and ``| None``."""
    while True:
        origin, args = typing.get_origin(tp), typing.get_args(tp)
        if origin in (Annotated, typing.Required, typing.NotRequired):
            tp = args[0]
        elif origin in (Union, types.UnionType) and len(args) == 2 and type(None) in args:
            tp = args[0] if args[1] is type(None) else args[1]
        else:
            return tp


def _keys(tp: Any) -> dict[str, Any]:
    """The keys of a section (a dataclass or a TypedDict) and their types, in declaration order."""
    hints = typing.get_type_hints(tp, include_extras=True)
    if is_dataclass(tp):
        return {f.name: hints[f.name] for f in fields(tp) if f.init}
    return hints


def _tagged(tp: Any) -> dict[str, Any]:
    """The members of a tagged union (the sink's) by tag; empty for any other type."""
    if typing.get_origin(tp) is not Union:
        return {}
    return {md.tag: arg for arg in typing.get_args(tp) for md in getattr(arg, "__metadata__", ()) if hasattr(md, "tag")}


def _locate(root: Any, loc: tuple[Any, ...]) -> tuple[str, Any, Any]:
    """The key path a pydantic error location stands for (``a.b``, list items ``[0]``, mapping keys ``['k']``,
    the sink's union tag dropped), the type declared there and the type holding it."""
    from typing_extensions import is_typeddict

    path, tp, parent = "", root, None
    for i, part in enumerate(loc):
        bare = _bare(tp)
        members = _tagged(bare)
        if members:  # ``part`` is the tag of the member that was validated
            tp = members.get(part)
            continue
        parent = tp
        origin = typing.get_origin(bare)
        if loc[i + 1:] == ("[key]",):  # the error is about the key itself: the path stays at the mapping
            return path, (typing.get_args(bare)[0] if origin is dict else None), parent
        if is_dataclass(bare) or is_typeddict(bare):
            tp = _keys(bare).get(part)
            path = f"{path}.{part}" if path else str(part)
        elif origin is list:
            tp, path = typing.get_args(bare)[0], f"{path}[{part}]"
        elif origin is dict:
            tp, path = typing.get_args(bare)[1], f"{path}[{part!r}]"
        else:
            tp, path = None, f"{path}.{part}" if path else str(part)
    return path, tp, parent


def _message(error: Mapping[str, Any], root: Any) -> str:
    """One pydantic error as ``key.path: what is wrong``, in the words of the pipeline docs."""
    kind, loc, value, ctx = error["type"], tuple(error["loc"]), error.get("input"), error.get("ctx") or {}
    if not loc:
        return f"the file must contain a mapping with a 'source' section, got {type(value).__name__}"
    path, tp, parent = _locate(root, loc)
    got = f"got {type(value).__name__} {value!r}"
    if kind in ("extra_forbidden", "unexpected_keyword_argument"):
        if path in _RETIRED:
            return f"{path}: {_RETIRED[path]}"
        allowed = list(_keys(_bare(parent)))
        hint = difflib.get_close_matches(str(loc[-1]), allowed, n=1)
        suggestion = f"did you mean {hint[0]!r}? " if hint else ""
        return f"{path}: unknown key ({suggestion}allowed: {', '.join(allowed)})"
    if kind in ("missing", "missing_argument"):
        section = _bare(tp)
        if is_dataclass(section):
            needs = [f.name for f in fields(section) if f.default is MISSING and f.default_factory is MISSING]
            return f"{path}: required section is missing (it needs {', '.join(needs)})"
        return f"{path}: required key is missing"
    if kind == "list_type" and isinstance(value, (str, int, float)):  # one item written without the brackets
        item = json.dumps(value)
        text = f"must be a list, {got}: write it as [{item}], or one '- {item}' line per item below the key"
    elif kind in _TYPE_NAMES:
        text = f"must be {_TYPE_NAMES[kind]}, {got}"
    elif kind == "greater_than":
        bound = "a positive integer" if ctx["gt"] == 0 else f"greater than {ctx['gt']}"
        text = f"must be {bound}, got {value!r}"
    elif kind == "greater_than_equal":
        text = f"must be at least {ctx['ge']}, got {value!r}"
    elif kind == "less_than_equal":
        text = f"must be at most {ctx['le']}, got {value!r}"
    elif kind in ("too_short", "string_too_short"):
        noun = "string" if kind == "string_too_short" else "list"
        size = f"a non-empty {noun}" if ctx["min_length"] == 1 else f"a {noun} of at least {ctx['min_length']}"
        text = f"must be {size}, got {value!r}"
    elif kind == "literal_error":
        allowed = [str(a) for a in typing.get_args(_bare(tp))]
        hint = difflib.get_close_matches(str(value), allowed, n=1)
        suggestion = f"did you mean {hint[0]!r}? " if hint else ""
        text = f"{value!r} is not allowed ({suggestion}allowed: {', '.join(allowed)})"
    elif kind == "union_tag_invalid":  # the sink's type picks its settings class
        path, value = f"{path}.type", value.get("type") if isinstance(value, Mapping) else ctx["tag"]
        text = f"{value!r} is not allowed (allowed: {', '.join(_tagged(_bare(tp)))})"
    elif kind == "one_of":
        text = f"{error['msg']}, {got}"
    elif kind == "check":
        text = ctx["problem"]
    else:
        text = error["msg"]
    if loc[-1] == "[key]":
        text = f"key {value!r} {text}"
    return f"{path}: {text}"


def parse_config(doc: Mapping[str, Any], path: Path | None = None) -> PipelineConfig:
    """The pipeline of a parsed YAML document; ConfigError lists every problem, one line each."""
    from pydantic import ValidationError

    where = f"{path}: " if path else ""
    sinks = _sink_settings()
    root, validator = _document(sinks)
    try:
        values = validator.validate_python(doc)
    except ValidationError as exc:
        lines = dict.fromkeys(where + _message(e, root) for e in exc.errors(include_url=False))
        raise ConfigError("\n".join(lines)) from None
    dag_id = values.pop("dag_id", None) or (path.stem if path else "cdc_pipeline")
    problem = _dag_id_problem(dag_id)
    if problem:  # a DAG id taken from the file's name
        raise ConfigError(f"{where}dag_id: {problem}; name the file so or set dag_id")
    values.setdefault("sink", dict(sinks)["parquet"]())
    return PipelineConfig(path, dag_id, **values)


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


# -- JSON Schema --------------------------------------------------------------------------------------
# One line per key, by the title pydantic gives each object of the schema.
_DESCRIPTIONS: dict[str, dict[str, str]] = {
    "Pipeline": {
        "dag_id": "The DAG id; default: the file name without .yaml.",
        "description": "The DAG's description.",
        "schedule": "A cron expression or an Airflow preset (@hourly, @daily, @continuous, ...), or null for manual runs.",
        "tags": "The DAG's tags; default: [cdc].",
        "default_args": "Passed to the DAG as default_args.",
        "source": "The MySQL/MariaDB source and the tables to capture.",
        "snapshot": "How the tables' initial snapshot is split into chunks and tasks.",
        "stream": "The binlog stream that follows the snapshot.",
        "sink": "Where rows are written; type picks the sink and its keys.",
        "spark": "SparkSubmitOperator arguments for the jobs.",
        "state": "Where chunk reports, the stream seed, the checkpoint and the status are kept.",
    },
    "SourceConfig": {
        "conn_id": "An Airflow mysql connection.",
        "tables": "Tables to capture: 'db.table', a glob 'db.order_*' or a regular expression 're:db\\.t_\\d+'.",
        "chunk_key": "Per table 'db.table': the column(s) to split chunks by, for tables without a usable primary key.",
        "server_id": "Replica server id(s) of the binlog readers, e.g. '5400-5408'.",
    },
    "SnapshotConfig": {
        "chunk_size": "Rows per chunk.",
        "max_active_chunks": "Chunk tasks running at once.",
        "rows_per_task": "Chunks share a task (one Spark application) up to this many rows.",
        "even_distribution_lower_bound": "Lowest key distribution factor for which chunks are split arithmetically.",
        "even_distribution_upper_bound": "Highest key distribution factor for which chunks are split arithmetically.",
        "even_split": "false: chunk boundaries always come from the database.",
    },
    "StreamConfig": {
        "mode": "available_now: each DAG run reads the binlog up to now; continuous: a stream that keeps running.",
        "startup": "Where a new stream starts: initial (after the snapshot), latest, earliest, or a mapping "
                   "{file, pos}, {gtid} or {timestamp}.",
        "max_batch_bytes": "Binlog bytes per micro-batch: what one batch holds in memory.",
        "read_partitions": "Spark tasks decoding one batch; default: the application's parallelism.",
        "min_segment_bytes": "A batch is cut into segments no smaller than this.",
        "driver_batch_bytes": "A batch of at most this many binlog bytes is read and written by the driver (no "
                              "Spark job, instead of one per table with rows); 0: never.",
        "trigger_interval": "Continuous mode: the micro-batch trigger interval.",
        "heartbeat_timeout": "Seconds without a heartbeat before the stream task fails.",
        "deferrable": "Continuous mode: watch the stream from the triggerer.",
        "reconnect_timeout": "Seconds the stream keeps reconnecting to an unreachable source.",
        "schema_changes": "What an ALTER of a captured table's columns does: evolve (applied in place in the sink), "
                          "lenient (as evolve, but dropped and renamed columns stay in the sink, NULL in later rows), "
                          "ignore (the sink keeps its columns; widened ones are widened), resnapshot (the table is "
                          "re-snapshotted) or fail (the stream stops).",
        "schema_changes_per_table": "Per table pattern (as in source.tables): its schema_changes; the first key "
                                    "matching a table wins.",
    },
    "SparkConfig": {
        "conn_id": "An Airflow spark connection.",
        "connect_conn_id": "Opt-in: run chunk tasks and available_now streams on this Spark Connect server.",
        "conf": "Spark configuration.",
        "jars": "Extra jars; the JDBC drivers are always added.",
        "py_files": "Extra Python files for the executors.",
        "executor_memory": "--executor-memory",
        "driver_memory": "--driver-memory",
        "executor_cores": "--executor-cores",
        "total_executor_cores": "--total-executor-cores (standalone)",
        "num_executors": "--num-executors (YARN, Kubernetes)",
        "env_vars": "Environment of spark-submit.",
        "deploy_mode": "client or cluster.",
        "class_archive": "Drivers started on this machine map a JVM class archive of their job.",
    },
    "StateConfig": {"path": "A local path or URI; default: <data home>/<dag_id>/state."},
    "DeltaSinkSettings": {
        "maintenance": "Delta only: compaction and VACUUM in a DAG <dag_id>_maintenance of its own schedule.",
    },
    "DeltaMaintenanceSettings": {
        "schedule": "The maintenance DAG's Airflow schedule; null: runs only when triggered.",
        "compact": "OPTIMIZE: rewrite small files into large ones.",
        "z_order": "Cluster each table's files by its key (z-order) instead of a plain compaction.",
        "target_file_size": "Bytes per compacted file; default: the table's delta.targetFileSize, else 100 MB.",
        "vacuum_retention_hours": "VACUUM files unreferenced for this long; null: no VACUUM. At least 168 unless "
                                  "allow_short_retention.",
        "allow_short_retention": "Accept a retention below 168 hours (only if no job or reader holds a table "
                                 "version that long).",
    },
}


def pipeline_json_schema() -> dict[str, Any]:
    """The pipeline file as JSON Schema, from the validators ``parse_config`` uses (``docs/pipeline.schema.json``,
    for editors); ``sink`` is one of the registered sinks' settings."""
    _, validator = _document(_sink_settings())
    schema = validator.json_schema()
    for obj in [schema, *schema.get("$defs", {}).values()]:
        for key, text in _DESCRIPTIONS.get(obj.get("title"), {}).items():
            obj["properties"][key]["description"] = text
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", **schema,
            "description": "An airflow-cdc-provider pipeline (one DAG)."}
