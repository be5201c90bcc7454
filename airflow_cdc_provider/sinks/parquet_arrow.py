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
"""

from __future__ import annotations

from typing import Any

from airflow_cdc_provider.sinks.base import EMPTYING_OPS, ROW_OPS, VERSION_COLUMNS
from airflow_cdc_provider.state.storage import Storage
from airflow_cdc_provider.state.store import table_dir_name

# what the sink writes beside the data: Spark's markers, a replaced directory on its way out
IGNORED_PREFIXES = [".", "_SUCCESS", "_committed", "_started", "_old-"]
_VERSION_TYPES = {"_cdc_file_seq": "int64", "_cdc_pos": "int64", "_cdc_row": "int32"}


def read_current_state(path: str, table: str, key_columns: list[str], include_meta: bool = False):
    """``table`` (``db.t``) of the parquet sink at ``path`` (``sink.path``: a local path or fsspec URI) as of
    now, a ``pyarrow.Table``. ``key_columns``: the table's key (its primary key)."""
    import json

    import pyarrow as pa
    import pyarrow.compute as pc

    storage = Storage(path, key="sink.path")
    base = table_dir_name(table)
    current = storage.read_text(f"{base}/snapshot/_current.json")
    parts = []
    low = None
    if current:
        state = json.loads(current)
        low = tuple(state["min_low_watermark"])
        parts.append(_read(storage, f"{base}/snapshot/epoch={state['epoch']}", drop=("chunks", "_cdc_chunk")))
    if any(n.startswith("batch=") for n in storage.listdir(f"{base}/changes")):
        changes = _read(storage, f"{base}/changes", drop=("batch",))
        parts.append(changes.filter(_newer_than(changes, low)) if low else changes)
    parts = [p for p in parts if p.num_rows]
    if not parts:
        return pa.table({})
    rows = pa.concat_tables(parts, promote_options="permissive")
    emptying = rows.filter(pc.is_in(rows["_cdc_op"], pa.array(EMPTYING_OPS)))
    if emptying.num_rows:
        newest = max(zip(*(emptying[c].to_pylist() for c in VERSION_COLUMNS)))
        rows = rows.filter(_newer_than(rows, newest))
    rows = rows.filter(pc.is_in(rows["_cdc_op"], pa.array(ROW_OPS)))
    rows = _newest_per_key(rows, key_columns)
    rows = rows.filter(pc.not_equal(rows["_cdc_op"], "d"))
    # the table's columns as the sink holds it (a schema change's record may carry a newer definition's)
    schema = storage.read_text(f"{base}/_schema.json")
    names = [f["name"] for f in json.loads(schema)["fields"]] if schema else [
        c for c in rows.column_names if c not in {"_cdc_op", "_cdc_ts_ms", *VERSION_COLUMNS}]
    return rows.select(names + (["_cdc_op", "_cdc_ts_ms", *VERSION_COLUMNS] if include_meta else []))


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


def _newest_per_key(rows: Any, key_columns: list[str]):
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
