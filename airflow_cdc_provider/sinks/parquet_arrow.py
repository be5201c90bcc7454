"""A parquet sink table's current state with pyarrow alone: for notebooks, pandas, DuckDB or Polars, no Spark.

The same rule as ``ParquetSink.current_state``: the rows of the current snapshot epoch plus the changes newer
than that epoch's smallest low watermark; rows older than the newest truncate or drop record are gone; per
key the newest version wins; keys whose newest version is a delete are gone.

Two details of the layout matter to a reader. A snapshot window's version lives in its path as Hive-style
partition values whose names start with an underscore (``_cdc_file_seq=...``), and pyarrow's dataset
discovery skips names starting with ``_`` or ``.`` unless told otherwise: ``ignore_prefixes`` below keeps
them (and still skips Spark's ``_SUCCESS`` files and the sink's ``_old-*`` leftovers), which is why a plain
``pyarrow.dataset(..., partitioning="hive")`` over the epoch finds no rows. Changes are read per batch
directory, ``changes/batch=<B>/``.

After the stream changed the table's columns in place (``_schema_history.json``, see ``sinks.parquet``), the
epoch and the changes batches of each version are read with the columns they were written with and carried up
to the newest version (renamed, filled with the added column's value, dropped, widened), as
``ParquetSink.current_state`` does; the helpers of the history below are shared by both readers. Once that file
exists, a plain ``pyarrow.dataset``/DuckDB read of the files mixes versions: read through this function (or
``airflow-cdc materialize``).
"""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from airflow_cdc_provider.sinks.base import EMPTYING_OPS, META_NAMES, ROW_OPS, VERSION_COLUMNS
from airflow_cdc_provider.source.table_versions import decode_value, encode_value, origins
from airflow_cdc_provider.state.storage import Storage
from airflow_cdc_provider.state.store import table_dir_name

# what the sink writes beside the data: Spark's markers, a replaced directory on its way out
IGNORED_PREFIXES = [".", "_SUCCESS", "_committed", "_started", "_old-"]
_VERSION_TYPES = {"_cdc_file_seq": "int64", "_cdc_pos": "int64", "_cdc_row": "int32"}


def read_current_state(path: str, table: str, key_columns: list[str], include_meta: bool = False):
    """``table`` (``db.t``) of the parquet sink at ``path`` (``sink.path``: a local path or fsspec URI) as of
    now, a ``pyarrow.Table``. ``key_columns``: the table's key (its primary key)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    storage = Storage(path, key="sink.path")
    base = table_dir_name(table)
    current = storage.read_text(f"{base}/snapshot/_current.json")
    state = json.loads(current) if current else None
    low = tuple(state["min_low_watermark"]) if state else None
    history = read_history(storage, base)
    parts = _versioned_parts(storage, base, state, low, history) if history else _parts(storage, base, state, low)
    parts = [p for p in parts if p.num_rows]
    if not parts:
        return pa.table({})
    rows = pa.concat_tables(parts, promote_options="permissive")
    emptying = rows.filter(pc.is_in(rows["_cdc_op"], pa.array(EMPTYING_OPS)))
    if emptying.num_rows:
        newest = max(zip(*(emptying[c].to_pylist() for c in VERSION_COLUMNS)))
        rows = rows.filter(_newer_than(rows, newest))
    rows = rows.filter(pc.is_in(rows["_cdc_op"], pa.array(ROW_OPS)))
    rows = newest_per_key(rows, key_columns)
    rows = rows.filter(pc.not_equal(rows["_cdc_op"], "d"))
    # the table's columns as the sink holds it (a schema change's record may carry a newer definition's)
    schema = history[-1]["schema"] if history else json.loads(storage.read_text(f"{base}/_schema.json") or "null")
    names = [f["name"] for f in schema["fields"]] if schema else [
        c for c in rows.column_names if c not in {"_cdc_op", "_cdc_ts_ms", *VERSION_COLUMNS}]
    return rows.select(names + (["_cdc_op", "_cdc_ts_ms", *VERSION_COLUMNS] if include_meta else []))


def _parts(storage: Storage, base: str, state: dict | None, low: tuple | None) -> list:
    """The epoch and the changes of a table whose columns never changed in place: one read each."""
    parts = []
    if state:
        parts.append(_read(storage, f"{base}/snapshot/epoch={state['epoch']}", drop=("chunks", "_cdc_chunk")))
    if any(n.startswith("batch=") for n in storage.listdir(f"{base}/changes")):
        changes = _read(storage, f"{base}/changes", drop=("batch",))
        parts.append(changes.filter(_newer_than(changes, low)) if low else changes)
    return parts


def _versioned_parts(storage: Storage, base: str, state: dict | None, low: tuple | None,
                     history: list[dict]) -> list:
    """The epoch and the changes batches, each read as written (under its version) and carried up to the
    newest version."""
    import pyarrow as pa

    raw = []  # (index of the version in the history, rows as written)
    if state:
        raw.append((epoch_version(history),
                    _read(storage, f"{base}/snapshot/epoch={state['epoch']}", drop=("chunks", "_cdc_chunk"))))
    for index, ids in group_batches(history, batch_ids(storage.listdir(f"{base}/changes"))).items():
        rows = pa.concat_tables([_read(storage, f"{base}/changes/batch={b}", drop=()) for b in ids],
                                promote_options="permissive")
        raw.append((index, rows.filter(_newer_than(rows, low)) if low else rows))
    plans = {index: carry_plan(history, index) for index, _ in raw}
    # the Arrow type of each newest column where a part holds it as written under its newest type: what the
    # others are cast to (Spark's timestamps read as pyarrow reads its INT96, whatever the mapping says)
    seen: dict[str, Any] = {}
    for index, rows in raw:
        for c in plans[index]:
            if c.kind == "column" and c.source_type == c.type and c.source in rows.column_names:
                seen.setdefault(c.name, rows.schema.field(c.source).type)
    return [_carry(rows, plans[index], seen) for index, rows in raw]


def _carry(rows: Any, plan: list["Carried"], seen: Mapping[str, Any]):
    """``rows`` with the newest version's columns (``plan``), then the metadata columns."""
    import pyarrow as pa

    arrays, names = [], []
    for c in plan:
        target = seen.get(c.name) or arrow_type(c.type)
        if c.kind == "column" and c.source in rows.column_names:
            array = rows[c.source]
            arrays.append(array if c.source_type == c.type else array.cast(target))
        else:
            arrays.append(arrow_literal(c.source if c.kind == "value" else None, target, rows.num_rows))
        names.append(c.name)
    return pa.table(arrays + [rows[m] for m in META_NAMES], names=names + list(META_NAMES))


def arrow_literal(value: Any, arrow: Any, n: int):
    import pyarrow as pa

    if value is None:
        return pa.nulls(n, arrow)
    try:
        scalar = pa.scalar(value, type=arrow)
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError):  # e.g. a date column's default as text
        scalar = pa.scalar(value).cast(arrow)
    return pa.repeat(scalar, n)


def _read(storage: Storage, rel: str, drop: tuple[str, ...]):
    import pyarrow.dataset as ds
    from pyarrow.fs import FSSpecHandler, PyFileSystem

    dataset = ds.dataset(storage.path(rel), format="parquet", partitioning="hive", ignore_prefixes=IGNORED_PREFIXES,
                         filesystem=PyFileSystem(FSSpecHandler(storage.fs)))
    table = dataset.to_table()
    table = table.drop_columns([c for c in drop if c in table.column_names])
    for name, kind in _VERSION_TYPES.items():
        table = table.set_column(table.column_names.index(name), name, table[name].cast(kind))
    return table


def _newer_than(rows: Any, version: tuple):
    """A row mask: the row's version ``(_cdc_file_seq, _cdc_pos, _cdc_row)`` is after ``version``."""
    import pyarrow.compute as pc

    seq, pos, row = version
    s, p, r = (rows[c] for c in VERSION_COLUMNS)
    return pc.or_(pc.greater(s, seq), pc.and_(pc.equal(s, seq), pc.or_(
        pc.greater(p, pos), pc.and_(pc.equal(p, pos), pc.greater(r, row)))))


def newest_row_changes(rows: Any, key_columns: list[str]):
    """A batch's rows as a mirror takes them: the newest row change per key (schema changes' records left out),
    with ``_cdc_deleted`` (the change is a delete). Spark's counterpart: ``frames.latest_per_key``."""
    import pyarrow as pa
    import pyarrow.compute as pc

    rows = newest_per_key(rows.filter(pc.is_in(rows["_cdc_op"], value_set=pa.array(ROW_OPS))), key_columns)
    return rows.append_column("_cdc_deleted", pc.equal(rows["_cdc_op"], "d"))


def newest_per_key(rows: Any, key_columns: list[str]):
    """The row with the highest version of every key."""
    import pyarrow as pa
    import pyarrow.compute as pc

    order = [(k, "ascending") for k in key_columns] + [(c, "descending") for c in VERSION_COLUMNS]
    rows = rows.take(pc.sort_indices(rows, sort_keys=order))
    if rows.num_rows == 0:
        return rows
    first = None
    for k in key_columns:  # a row starts a key when any key column differs from the row before
        col = rows[k].combine_chunks()
        differs = pc.not_equal(col.slice(1), col.slice(0, len(col) - 1)).fill_null(True)
        first = differs if first is None else pc.or_(first, differs)
    return rows.filter(pa.concat_arrays([pa.array([True]), first]))


# -- the schema history: a table's column versions (``_schema_history.json``) -------------------------------
HISTORY_FILE = "_schema_history.json"
# Spark's DDL type names -> the names its schema JSON uses (the others are the same in both)
SPARK_JSON_TYPES = {"tinyint": "byte", "smallint": "short", "int": "integer", "bigint": "long"}


def schema_text(schema: Mapping[str, Any]) -> str:
    """A Spark schema (``StructType.jsonValue()`` form) as ``StructType.json()`` prints it."""
    return json.dumps(schema, separators=(",", ":"), sort_keys=True)


def read_history(storage: Storage, base: str) -> list[dict[str, Any]]:
    """The table's versions (entries of ``_schema_history.json``) in order; [] when its columns never changed
    in place."""
    text = storage.read_text(f"{base}/{HISTORY_FILE}")
    return sorted(json.loads(text), key=lambda e: e["number"]) if text else []


def batch_ids(names: Sequence[str]) -> list[int]:
    """The batch ids of a ``changes/`` listing."""
    return sorted(int(n[len("batch="):]) for n in names if n.startswith("batch="))


def batch_version(history: Sequence[Mapping[str, Any]], batch_id: int) -> int:
    """The index in ``history`` of the version batch ``batch_id`` was written under: the newest whose first
    batch is at or before it; the oldest for batches before every recorded first batch."""
    found = 0
    for i, entry in enumerate(history):
        if entry.get("first_batch") is not None and entry["first_batch"] <= batch_id:
            found = i
    return found


def group_batches(history: Sequence[Mapping[str, Any]], ids: Sequence[int]) -> dict[int, list[int]]:
    """Batch ids by the index of the version they were written under."""
    groups: dict[int, list[int]] = {}
    for b in ids:
        groups.setdefault(batch_version(history, b), []).append(b)
    return groups


def epoch_version(history: Sequence[Mapping[str, Any]]) -> int:
    """The index of the version the current snapshot epoch was read under: number 0."""
    return next((i for i, e in enumerate(history) if e["number"] == 0), 0)


def encode_sink_value(value: Any) -> Any:
    """A sink value as JSON: as ``table_versions.encode_value``, and dates and datetimes tagged too."""
    if isinstance(value, dt.datetime):
        return {"datetime": value.isoformat()}
    if isinstance(value, dt.date):
        return {"date": value.isoformat()}
    return encode_value(value)


def decode_sink_value(data: Any) -> Any:
    if isinstance(data, dict) and "datetime" in data:
        return dt.datetime.fromisoformat(data["datetime"])
    if isinstance(data, dict) and "date" in data:
        return dt.date.fromisoformat(data["date"])
    return decode_value(data)


@dataclass(frozen=True)
class _Recorded:
    """A history entry as ``table_versions.origins`` reads a version."""

    column_names: list[str]
    renamed: Mapping[str, str] = field(default_factory=dict)
    added: Mapping[str, Any] = field(default_factory=dict)

    @property
    def schema(self) -> "_Recorded":
        return self


@dataclass(frozen=True)
class Carried:
    """A newest column for rows written under an older version: ``kind`` ``column`` (``source``: its name
    there, of Spark type ``source_type``) or ``value`` (``source``: the sink value an ALTER gave them)."""

    name: str
    type: str  # Spark schema JSON type name: long, decimal(12,2), ...
    kind: str
    source: Any
    source_type: str | None


def field_types(entry: Mapping[str, Any]) -> dict[str, str]:
    return {f["name"]: f["type"] for f in entry["schema"]["fields"]}


def carry_plan(history: Sequence[Mapping[str, Any]], since: int) -> list[Carried]:
    """Where each newest column's values are in rows written under ``history[since]`` (``origins``)."""
    versions = [_Recorded([f["name"] for f in e["schema"]["fields"]], e.get("renamed") or {},
                          {k: decode_sink_value(v) for k, v in (e.get("added") or {}).items()}) for e in history]
    found = origins(versions, since)
    source_types = field_types(history[since])
    return [Carried(f["name"], f["type"], *found[f["name"]],
                    source_types.get(found[f["name"]][1]) if found[f["name"]][0] == "column" else None)
            for f in history[-1]["schema"]["fields"]]


def arrow_type(spark_type: str):
    """The Arrow type of a Spark schema JSON type name, as pyarrow reads Spark's parquet."""
    import pyarrow as pa

    if spark_type.startswith("decimal("):
        precision, scale = spark_type[len("decimal("):-1].split(",")
        return pa.decimal128(int(precision), int(scale))
    return {"boolean": pa.bool_(), "byte": pa.int8(), "short": pa.int16(), "integer": pa.int32(), "long": pa.int64(),
            "float": pa.float32(), "double": pa.float64(), "string": pa.string(), "binary": pa.binary(),
            "date": pa.date32(), "timestamp": pa.timestamp("us", tz="UTC"), "timestamp_ntz": pa.timestamp("us"),
            }[spark_type]
