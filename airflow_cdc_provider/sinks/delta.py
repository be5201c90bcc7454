"""The delta sink: one Delta Lake table per source table holding its current state, written with delta-rs.

::

    <path>/<db.table>/_delta_log/, *.parquet      the Delta table: the source's columns, the metadata columns,
                                                  ``_cdc_deleted`` and ``_cdc_chunk``; change data feed on
    <path>/<db.table>/snapshot-<epoch>-<first>-<last>-<id>/*.parquet
                                                  data files a snapshot window's executors wrote
    <path>/_staging/<db.table>/<id>/*.parquet     rows Spark's executors wrote, on their way into one commit

One row per key: the newest version of it. Every write is a MERGE on the key that applies a row only when its
version ``(_cdc_file_seq, _cdc_pos, _cdc_row)`` is newer than the stored one, so replays, retried snapshot
windows and a re-snapshot running beside the stream converge whatever order their commits land in. A delete
(and every row a TRUNCATE, a DROP or a finished re-snapshot removes) stays as a tombstone, ``_cdc_deleted =
true`` with its version: a real delete would let an older write that lands later (a snapshot window read
before the delete, published after it) bring the row back. Readers filter ``NOT _cdc_deleted``.

Exactly once: each commit carries a Delta application transaction (``txn``). A stream batch's is
``airflow-cdc:<db.table>:stream:<query id>`` at version ``batch id``; the query id is Spark's, kept in the
stream's checkpoint, so a fresh checkpoint (whose batch ids start at 0 again) is a new application. A replay
of a committed batch after a kill finds its version committed and writes nothing. A snapshot window's is
``airflow-cdc:<db.table>:snapshot:<epoch>:<first>-<last>`` at its high watermark packed into one integer.
Concurrent writers (parallel snapshot tasks, the stream) conflict in Delta's optimistic concurrency; the
loser reloads the table and runs its MERGE again, which the version guard makes safe.

Rows reach delta-rs as Parquet files the executors staged (Spark writes them; delta-rs streams them into its
MERGE on the driver, batch by batch), never as Python objects on the driver. A snapshot window is written by
the executors straight as data files of the table while it is read, under its low watermark
(``WrittenDeltaWindow``); the driver commits their add actions when no row of the table may share a key with
them (``delta_append``, which says when that is correct), and MERGEs the binlog window's last changes on top.

An ALTER the stream applies in place (``evolve_in_place``) changes the table in one commit that also records the
snapshot epoch and table version its columns are at (``schema_record``), so a crash leaves the two in step.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import logging
import re
import time
import uuid
from dataclasses import dataclass
from functools import partial
from typing import Any, Callable, Iterator

from airflow_cdc_provider.sinks.base import (
    CHUNK_COLUMN,
    EMPTYING_OPS,
    META_COLUMNS,
    META_NAMES,
    ROW_OPS,
    VERSION_COLUMNS,
    FileSink,
    Hook,
    SinkConfig,
    SinkDefinition,
    SinkError,
    Version,
    check_written,
    write_checked,
)
from airflow_cdc_provider.sinks.delta_settings import DeltaSinkSettings
from airflow_cdc_provider.sinks.evolution import check_numbering, column_moves
from airflow_cdc_provider.sinks.parquet_arrow import arrow_literal, newest_row_changes
from airflow_cdc_provider.sinks.registry import register_sink
from airflow_cdc_provider.sinks.types import TableSinkTypes
from airflow_cdc_provider.spark.frames import col, cols, counted_write, latest_per_key
from airflow_cdc_provider.spark.window_fold import FoldedWindow
from airflow_cdc_provider.state.storage import Storage
from airflow_cdc_provider.state.store import table_dir_name

log = logging.getLogger("airflow_cdc.delta")


@dataclass(frozen=True)
class KeyRange:
    """The smallest and largest value (both included) of one key column (a table's ``bounding_key``) among some
    rows. The column travels with its bounds, so a MERGE's ON clause, its pieces and its filters bound the column
    the values were taken from."""

    column: str
    low: Any
    high: Any

DELETED = "_cdc_deleted"  # a tombstone: the key is gone as of the row's version
CHUNK = "_cdc_chunk"  # "<epoch>:<index>" of the snapshot chunk that last wrote the row; NULL for stream rows
IN_WINDOW = "_cdc_in_window"  # a replaced row's key is the window's (``WrittenDeltaWindow._carry``)
KEY_PROPERTY = "airflow_cdc.key"  # the table's key (JSON list), checked at every prepare
EMPTIED_PROPERTY = "airflow_cdc.emptied_at"  # version of the newest truncate or drop ("seq,pos,row")
STATS_PROPERTY = "delta.dataSkippingStatsColumns"  # the columns whose min, max and null count files state
COMMIT_RETRIES = 20
SCHEMA_VERSIONS = 1 << 20  # table versions of one epoch a schema record can hold (``version_commit``)
REWRITE_FILE_ROWS = 1 << 20  # rows per data file of a table rewritten by the stream
BATCH_ROWS = 1 << 16
MERGE_PIECE_ROWS = 1 << 20  # rows of a written window's files one MERGE takes at most (delta-rs holds them)
# rows of the table's files one MERGE reads at most where their key ranges let it: delta-rs holds every row of
# the files it scans for a MERGE (~0.6 GiB per million sysbench rows), whatever few keys it changes
MERGE_TARGET_ROWS = 1 << 20
# a written window's data files (``WrittenDeltaWindow``): microsecond timestamps (INT96 is no Delta type), dates
# as written (no Julian rebase), snappy, row groups an in-place rewrite reads ahead by two of, and string
# statistics truncated to valid bounds (a value longer than 4 KiB would otherwise leave its file with none)
DATA_FILE_CONF = {"spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS",
                  "spark.sql.parquet.datetimeRebaseModeInWrite": "CORRECTED",
                  "spark.sql.parquet.datetimeRebaseModeInRead": "CORRECTED",  # the table's files (delta-rs's too)
                  "spark.sql.parquet.int96RebaseModeInRead": "CORRECTED"}
DATA_FILE_OPTIONS = {"compression": "snappy", "parquet.block.size": str(32 << 20),
                     "parquet.statistics.truncate.length": "64"}
DELTA_DEFAULT_STATS_COLUMNS = 32  # the first columns of a table whose files keep statistics by default
STAGED_ROW_GROUP_BYTES = 16 << 20  # a staged window file's row groups (Spark's default: 128 MiB)
# batches an in-place rewrite reads ahead of its writer; the table's own files have row groups of BATCH_ROWS rows
# (``write_data_file``), so pyarrow's reading ahead by whole row groups stays small too
READ_AHEAD = 2

_META_ARROW = {"string": "string", "bigint": "int64", "int": "int32"}
_SIMPLE_TYPES = {"tinyint": "int8", "smallint": "int16", "int": "int32", "bigint": "int64", "float": "float32",
                 "double": "float64", "string": "string", "binary": "binary", "date": "date32",
                 "boolean": "bool"}


def arrow_type(spark_type: str):
    """The Arrow type of a sink column's Spark type (``sinks.types``), as delta-rs stores it."""
    import pyarrow as pa

    if spark_type in _SIMPLE_TYPES:
        return getattr(pa, _SIMPLE_TYPES[spark_type])()
    if spark_type == "timestamp":
        return pa.timestamp("us", tz="UTC")
    if spark_type == "timestamp_ntz":
        return pa.timestamp("us")
    m = re.fullmatch(r"decimal\((\d+),\s*(\d+)\)", spark_type)
    if m:
        return pa.decimal128(int(m.group(1)), int(m.group(2)))
    raise SinkError(f"the delta sink has no Arrow type for Spark type {spark_type!r}")


def data_schema(types):
    """The source's columns as Arrow fields (what a table's definition is compared by)."""
    import pyarrow as pa

    for c in types.schema.column_names:
        if '"' in c or "`" in c:
            raise SinkError(f"column {c!r} of {types.schema.table}: the delta sink cannot name a column holding a "
                            "quote or backtick in its MERGE; leave the table out of source.tables or use the parquet "
                            "sink")
    return pa.schema([pa.field(c.name, arrow_type(t.spark)) for c, t in zip(types.schema.columns, types.types,
                                                                              strict=True)])


def unsafe_stats_columns(schema) -> list[str]:
    """Columns whose min and max some writer of the table's files states wrongly, so a filter on them may skip a
    file holding a match: decimals delta-rs's own writer (MERGE, update, compaction) bounds through a float
    (scale > 0, more than 15 digits) or an int64 (scale 0, more than 18 digits: BIGINT UNSIGNED, wide DECIMALs),
    decimals of more than 5 decimal places, whose values below 1e-5 that writer states in exponent form
    (``1e-6``), which delta-rs's pyarrow reads take as no statistics and so as all NULL, and floats, whose NaN a
    Parquet writer may leave out of a footer's min and max (readers order NaN differently, so no min or max is
    right for all of them)."""
    return [f.name for f in schema if not states_exactly(f.type)]


def states_exactly(arrow_type) -> bool:
    """Whether every writer of the table's files states a column of ``arrow_type``'s min and max exactly
    (``unsafe_stats_columns``)."""
    import pyarrow as pa

    return not (pa.types.is_floating(arrow_type) or (pa.types.is_decimal(arrow_type) and (
        arrow_type.precision > (18 if arrow_type.scale == 0 else 15) or arrow_type.scale > 5)))


def stats_property(schema, current: str | None = None) -> str | None:
    """``delta.dataSkippingStatsColumns`` of a table of ``schema`` (``current``: its value now): every column but
    ``unsafe_stats_columns`` (the sink's own and the key past Delta's default first 32 columns included: the
    windows' checks and the MERGEs' pieces read them); None (Delta's default) when there are none, the table has
    no more than those 32 columns, and it is unset."""
    unsafe = set(unsafe_stats_columns(schema))
    if not unsafe and len(schema) <= DELTA_DEFAULT_STATS_COLUMNS and current is None:
        return None
    names = [f.name for f in schema if f.name not in unsafe]
    if any("," in n for n in names):
        raise SinkError(f"columns {[n for n in names if ',' in n]}: the delta sink must name the columns that keep "
                        f"statistics (all but {sorted(unsafe)}) in {STATS_PROPERTY}, a comma-separated list; rename "
                        "them or leave the table out of source.tables")
    return ",".join(names)


def table_schema(types):
    """The Delta table's columns: the source's, then the sink's own."""
    import pyarrow as pa

    own = [pa.field(n, getattr(pa, _META_ARROW[t])()) for n, t in META_COLUMNS]
    return pa.schema([*data_schema(types), *own, pa.field(DELETED, pa.bool_()), pa.field(CHUNK, pa.string())])


def data_columns(dt) -> list[str]:
    """The table's source columns, in its order (not the sink's own)."""
    own = {*META_NAMES, DELETED, CHUNK}
    return [f.name for f in dt.schema().fields if f.name not in own]


def schema_app(table: str) -> str:
    """The application transaction id whose version records the table version the table's columns are at."""
    return f"airflow-cdc:{table}:schema"


def schema_record(dt, table: str) -> tuple[int, int]:
    """(snapshot epoch, table version of it) the table's columns are at (``source.table_versions``); (0, 0) when
    none is recorded (a table's first snapshot's definition)."""
    recorded = dt.transaction_version(schema_app(table))
    return (0, 0) if recorded is None else divmod(int(recorded), SCHEMA_VERSIONS)


def schema_version(dt, table: str) -> int:
    return schema_record(dt, table)[1]


def version_commit(table: str, epoch: int, version: int, what: str, exclusive: bool = False):
    """Commit properties recording (``epoch``, ``version``) as the table's schema in the commit itself: the
    transaction's version is ``epoch * SCHEMA_VERSIONS + version``, so it only grows. ``exclusive``: the commit
    fails rather than land after a concurrent one (``committing`` then runs it again on the new table version)."""
    from deltalake.transaction import CommitProperties, Transaction

    if not 0 <= version < SCHEMA_VERSIONS or not 0 <= epoch < (1 << 63) // SCHEMA_VERSIONS:
        raise SinkError(f"{table}: table version {version} of epoch {epoch} is out of the range the delta sink "
                        "records")
    return CommitProperties(custom_metadata={"airflow_cdc": what},
                            app_transactions=[Transaction(schema_app(table), epoch * SCHEMA_VERSIONS + version)],
                            max_commit_retries=0 if exclusive else None)


def record_schema(dt, table: str, epoch: int, version: int, what: str) -> None:
    """A commit of no data recording the table's schema (``version_commit``); unlike a change of the table's
    properties, it adds no protocol feature to the table."""
    dt.create_write_transaction([], "append", dt.schema(), commit_properties=version_commit(table, epoch, version, what))


def carry(batch, wanted, moves):
    """A batch of the table's rows as ``wanted``'s columns: each from the column ``moves`` (``ColumnMoves``) says
    it comes from, cast up, or the value an ALTER gave it; the sink's own columns as they are."""
    import pyarrow as pa

    arrays = []
    for f in wanted:
        if f.name in moves.values:
            arrays.append(arrow_literal(moves.values[f.name], f.type, batch.num_rows))
        else:
            arrays.append(batch.column(moves.sources.get(f.name, f.name)).cast(f.type))
    return pa.RecordBatch.from_arrays(arrays, schema=wanted)


def spark_ddl(types) -> str:
    """The Delta table's columns as Spark DDL (for reading its files with Spark)."""
    meta = ", ".join(f"{n} {t}" for n, t in META_COLUMNS)
    return f"{types.spark_ddl}, {meta}, {DELETED} boolean, {CHUNK} string"


def ident(name: str) -> str:
    """``name`` as an identifier of delta-rs's SQL (DataFusion: double quotes)."""
    return '"' + name.replace('"', '""') + '"'


def literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def literals(texts) -> str:
    """``texts`` as a delta-rs SQL list's items."""
    return ", ".join(literal(t) for t in texts)


def _version_sql(alias: str | None, version: tuple[int, int, int] | str | None = None) -> tuple[str, ...]:
    if isinstance(version, str):
        return tuple(f"{version}.{c}" for c in VERSION_COLUMNS)
    if version is not None:
        return tuple(str(int(v)) for v in version)
    return tuple(f"{alias}.{c}" if alias else c for c in VERSION_COLUMNS)


def older_than(alias: str | None, version: tuple[int, int, int] | str) -> str:
    """SQL: the version of row ``alias`` (None: the table's own columns) is before ``version`` (a tuple, or
    the alias of another row)."""
    s, p, r = _version_sql(alias)
    seq, pos, row = _version_sql(None, version)
    return f"({s} < {seq} OR ({s} = {seq} AND ({p} < {pos} OR ({p} = {pos} AND {r} < {row}))))"


def same_version(alias: str | None, version: tuple[int, int, int] | str) -> str:
    """SQL: the version of row ``alias`` is ``version``."""
    return "(" + " AND ".join(f"{a} = {b}" for a, b in zip(_version_sql(alias), _version_sql(None, version))) + ")"


def newer_than(alias: str | None, version: tuple[int, int, int]) -> str:
    """SQL: the version of row ``alias`` is after ``version``."""
    s, p, r = _version_sql(alias)
    seq, pos, row = _version_sql(None, version)
    return f"({s} > {seq} OR ({s} = {seq} AND ({p} > {pos} OR ({p} = {pos} AND {r} > {row}))))"


def packed(version: Version) -> int:
    """A binlog position as one increasing integer (a Delta transaction version): file sequence, offset."""
    seq, pos, _ = version
    return (int(seq) << 32) | int(pos)


def merge_pieces(files: list, key: str | None) -> list[tuple[list, KeyRange | None]]:
    """Data files grouped into MERGE pieces of at most ``MERGE_PIECE_ROWS`` rows, each with its smallest and largest
    ``key`` (a single integer key whose statistics every file states; else one piece of all, unbounded)."""
    ranges = [f.key_range(key) if key is not None else None for f in files]
    if not files or any(r is None for r in ranges):
        return [(files, None)]
    pieces: list[tuple[list, KeyRange | None]] = []
    rows = 0
    for f, (lo, hi) in sorted(zip(files, ranges), key=lambda fr: fr[1]):
        count = json.loads(f.stats).get("numRecords", 0)
        if pieces and rows + count <= MERGE_PIECE_ROWS:
            group, held = pieces[-1]
            pieces[-1] = (group + [f], span(held, KeyRange(key, lo, hi)))
            rows += count
        else:
            pieces.append(([f], KeyRange(key, lo, hi)))
            rows = count
    return pieces


def within(source: Callable[[Any], Any], key_range: KeyRange) -> Callable[[Any], Any]:
    """``source`` (a function of the table's Arrow schema giving a reader of rows) with only the rows whose
    bounded column lies in ``key_range``."""
    def filtered(schema):
        import pyarrow as pa
        import pyarrow.compute as pc

        lo, hi = key_range.low, key_range.high

        def batches():
            for b in source(schema):
                k = b.column(key_range.column)
                kept = b.filter(pc.and_(pc.greater_equal(k, lo), pc.less_equal(k, hi)))
                if kept.num_rows:
                    yield kept

        return pa.RecordBatchReader.from_batches(schema, batches())

    return filtered


def target_cuts(dt, key_range: KeyRange, max_rows: int) -> list:
    """Where to cut ``key_range`` (ascending values: a piece starts at each) so that the files of ``dt`` whose
    smallest value of its column (a table's ``bounding_key``) in the range falls in a piece, by their statistics,
    hold about ``max_rows`` rows at most (a file holding more makes a piece alone; a file spanning a cut is read
    by each piece it meets, though counted in one). A cut falls only where a file starts, so one value of the
    column held by the rows of several keys stays in one piece. No cut when the files hold fewer rows in all,
    when a file states no range of ``key`` (every MERGE would read it anyway), or when a piece would meet nearly
    all the files anyway. The statistics only place the cuts: a truncated string statistic makes a piece
    larger, never wrong."""
    import pyarrow as pa

    key, lo, hi = key_range.column, key_range.low, key_range.high
    spans = []
    for a in pa.table(dt.get_add_actions(flatten=True)).to_pylist():
        low, high, rows = a.get(f"min.{key}"), a.get(f"max.{key}"), a.get("num_records")
        if low is None or high is None:
            if rows is None or a.get(f"null_count.{key}") != rows:  # no statistics of the key: it may hold any
                return []
            continue
        if high >= lo and low <= hi:
            spans.append((max(low, lo), min(high, hi), rows))
    total = sum(r for _, _, r in spans)
    if total <= max_rows:
        return []
    cuts: list = []
    held = 0
    for start, _, rows in sorted(spans):
        if held and held + rows > max_rows and start > (cuts[-1] if cuts else lo):
            cuts.append(start)
            held = 0
        held += rows

    def read(start, end) -> int:  # the rows of the files a piece from ``start`` to before ``end`` meets
        return sum(r for low, high, r in spans if (end is None or low < end) and high >= start)

    # where a piece would meet nearly all the files anyway (a column they do not hold in ranges), pieces hold no
    # less in memory than one MERGE, and read the files again and again
    if cuts and max(read(a, b) for a, b in zip([lo, *cuts], [*cuts, None])) >= 0.9 * total:
        return []
    return cuts


def chunk_tags(epoch: int, indexes) -> list[str]:
    """The ``CHUNK`` values of the rows chunks ``indexes`` of snapshot ``epoch`` write."""
    return [f"{epoch}:{i}" for i in sorted(indexes)]


def own_chunks(epoch: int, indexes, split_keys: bool):
    """A window's chunks, by which ``delta_append`` tells the files of the epoch's other chunks apart; None
    unless the epoch's chunks are known to split the keys as the window reads them (``split_keys``)."""
    from airflow_cdc_provider.sinks.delta_append import OwnChunks

    return OwnChunks(CHUNK, epoch, tuple(chunk_tags(epoch, indexes))) if split_keys else None


def unordered_key_refusal(dt, schema, key_columns, own) -> str | None:
    """Why a window of a table whose key has no column of an ``orderable_key`` type (no statistics range to tell
    windows apart by) is not appended: the table holds a file other than of the epoch's other chunks (``own``)."""
    from airflow_cdc_provider.sinks.delta_append import may_overlap

    if any(orderable_key(schema.field(k).type) for k in key_columns) or not may_overlap(dt, {}, own):
        return None
    return ("the table has rows of others than the epoch's other chunks, and no integer, string, date or "
            "decimal (without a fraction) key column to tell their ranges apart")


def may_hold_chunks(dt, epoch: int, indexes) -> bool:
    """Whether a file of ``dt`` may hold a row chunks ``indexes`` of snapshot ``epoch`` wrote (by the files'
    statistics of ``CHUNK``)."""
    from airflow_cdc_provider.sinks.delta_append import may_hold_values

    return may_hold_values(dt, CHUNK, chunk_tags(epoch, indexes))


def window_keys(source: Callable[[Any], Any], schema, keys: list[str]):
    """The distinct keys of the rows ``source(schema)`` gives, in the table's types (a pyarrow Table)."""
    import pyarrow as pa

    read = pa.Table.from_batches([b.select(keys) for b in source(schema)], pa.schema([schema.field(k) for k in keys]))
    return read.group_by(keys).aggregate([])


def retried_tombstones(dt, keys: list[str], read, tags: list[str], low_watermark: Version):
    """For the MERGE of a window whose chunks ``tags`` were retried (``read``: the keys it read, ``window_keys``):
    the rows an earlier attempt of those chunks wrote that the window lacks (deleted before the retry read them)
    as tombstones at the retry's low watermark, so that an older change written later cannot bring them back; a
    pyarrow Table of the table's schema. Only the files whose statistics of ``_cdc_chunk`` may hold those chunks
    are read, so the MERGE can go in pieces of the table's key ranges like any other. Rows the stream changed
    since, tombstones, and rows not older than that watermark are not the earlier attempt's as read."""
    import pyarrow as pa
    from deltalake.query import QueryBuilder

    schema = pa.schema(dt.schema().to_arrow())
    earlier = QueryBuilder().register("t", dt).execute(  # delta-rs skips the files by their statistics
        f"SELECT * FROM t WHERE {ident(CHUNK)} IN ({literals(tags)}) AND NOT {ident(DELETED)} AND _cdc_op = 'r' "
        f"AND {older_than(None, tuple(low_watermark))}")
    gone = []
    for batch in pa.RecordBatchReader.from_stream(earlier):
        rows = pa.Table.from_batches([batch]).select(schema.names).cast(schema)  # DataFusion's types: the table's
        if rows.num_rows:  # joined by key and position only: a join carries fewer types than a table holds
            at = pa.table({**{k: rows.column(k) for k in keys}, "_cdc_at": pa.array(range(rows.num_rows))})
            lacked = at.join(read, keys, join_type="left anti").column("_cdc_at")
            if len(lacked):
                gone.append(rows.take(lacked))
    tombstones = pa.concat_tables(gone) if gone else schema.empty_table()
    n = tombstones.num_rows
    marks = {DELETED: pa.repeat(pa.scalar(True), n), "_cdc_op": pa.repeat(pa.scalar("d"), n),
             **{c: pa.repeat(pa.scalar(int(v), schema.field(c).type), n) for c, v in zip(VERSION_COLUMNS, low_watermark)}}
    for name, values in marks.items():
        tombstones = tombstones.set_column(schema.get_field_index(name), schema.field(name), values)
    return tombstones


def swept_clause(tags: list[str]) -> str:
    """Which rows a retried window's tombstone (a deleted source row at its low watermark) may take: a row its
    chunks' earlier attempt wrote as read, as the row is at the commit (the stream may have changed it since the
    tombstones were found), and older than the tombstone."""
    return (f"s.{ident(DELETED)} AND NOT t.{ident(DELETED)} AND t._cdc_op = 'r' "
            f"AND t.{ident(CHUNK)} IN ({literals(tags)}) AND {older_than('t', 's')}")


def orderable_key(arrow_type) -> bool:
    """Whether a key column of ``arrow_type`` bounds a MERGE's keys (its ON clause and pieces): integers,
    strings, dates and decimals without a fraction that every writer states exactly (``states_exactly``), which
    the files' statistics, pyarrow and delta-rs's SQL order alike (strings by their bytes). Not decimals with a
    fraction: delta-rs 1.6.6's conflict check reads such a bound as its unscaled integer (5.00 as 500), so a
    MERGE bounded by one commits over a file another writer added meanwhile holding its key, and doubles it."""
    import pyarrow as pa

    return (pa.types.is_integer(arrow_type) or pa.types.is_string(arrow_type) or pa.types.is_large_string(arrow_type)
            or pa.types.is_date32(arrow_type)
            or (pa.types.is_decimal(arrow_type) and arrow_type.scale == 0 and states_exactly(arrow_type)))


def bounding_key(schema, keys: list[str]) -> str | None:
    """The key column that bounds a MERGE's keys (its ON clause, its pieces, delta-rs's file pruning and conflict
    check): the first of ``keys`` of an ``orderable_key`` type in ``schema`` (Arrow), None if none is. Rows of one
    key are equal in every key column, so any of them bounds the rows a MERGE may match: a key led by a DATETIME
    (``(created_at, id)``) is bounded by its integer, which the table's files mostly hold in ranges too."""
    return next((k for k in keys if orderable_key(schema.field(k).type)), None)


def key_literal(value, arrow_type) -> str:
    """A key bound (a value of an ``orderable_key`` column of ``arrow_type``) as a delta-rs SQL literal of the
    column's type: a decimal is no float, a date no string."""
    import pyarrow as pa

    if pa.types.is_decimal(arrow_type):
        return f"CAST('{format(value, 'f')}' AS DECIMAL({arrow_type.precision}, {arrow_type.scale}))"
    if pa.types.is_date32(arrow_type):
        return f"DATE '{value.isoformat()}'"
    return str(int(value)) if isinstance(value, int) else literal(value)


def stated_key(value, arrow_type):
    """A min or max of an ``orderable_key`` column as a file's statistics (JSON) state it, as the value pyarrow
    and delta-rs's add actions give for it: dates and decimals are text there."""
    import datetime
    import decimal

    import pyarrow as pa

    if value is None:
        return None
    if pa.types.is_date32(arrow_type):
        return datetime.date.fromisoformat(value) if isinstance(value, str) else value
    if pa.types.is_decimal(arrow_type):
        return decimal.Decimal(str(value))
    return value


def first_key_range(rows, keys: list[str]) -> KeyRange | None:
    """The smallest and largest value of ``rows``'s (a pyarrow Table) ``bounding_key`` column; None when no key
    column bounds."""
    import pyarrow.compute as pc

    key = bounding_key(rows.schema, keys) if keys and rows.num_rows else None
    if key is None:
        return None
    bounds = pc.min_max(rows[key]).as_py()
    return None if bounds["min"] is None else KeyRange(key, bounds["min"], bounds["max"])


def rows_source(rows, table: str) -> Callable[[Any], Any]:
    """A MERGE source (a function of the table's Arrow schema giving a reader) of ``rows``, a pyarrow Table."""
    import pyarrow as pa

    def source(schema):
        return pa.RecordBatchReader.from_batches(schema, (conform(b, schema, table) for b in rows.to_batches()))

    return source


def committed_before(dt, app: tuple[str, int] | None) -> int | None:
    """The table's version of ``app``'s application id when it is ``app``'s version or later (None otherwise)."""
    done = dt.transaction_version(app[0]) if app is not None else None
    return done if done is not None and done >= app[1] else None


def span(*ranges: KeyRange | None) -> KeyRange | None:
    """The smallest range holding each given one (a None is none given); None when none is given, or when they
    bound different columns (no bound: a MERGE then reads the whole table, which is slow but never wrong)."""
    given = [r for r in ranges if r is not None]
    if not given or len({r.column for r in given}) > 1:
        return None
    return KeyRange(given[0].column, min(r.low for r in given), max(r.high for r in given))


def dataset_key_range(dataset, keys: list[str]) -> KeyRange | None:
    """``first_key_range`` of a pyarrow dataset's rows, reading only the bounding key column."""
    import pyarrow as pa

    key = bounding_key(dataset.schema, keys)
    if key is None:
        return None
    return span(*(first_key_range(pa.Table.from_batches([b]), [key])
                  for b in dataset.to_batches(columns=[key], batch_size=1 << 20)))


class DeltaLayout:
    """Where each table and staging directory is: ``uri`` for delta-rs, ``storage`` for the staged files."""

    def __init__(self, path: str | None) -> None:
        if not path:
            raise SinkError("sink.path is required for the delta sink")
        self.storage = Storage(path, key="sink.path")

    def table_uri(self, table: str) -> str:
        return self.storage.location(table_dir_name(table))

    def staging_root(self, table: str) -> str:
        return f"_staging/{table_dir_name(table)}"

    def staging_dir(self, table: str) -> str:
        return f"{self.staging_root(table)}/{uuid.uuid4().hex}"

    def parquet_files(self, rel: str) -> list[str]:
        return [f"{rel}/{n}" for n in self.storage.listdir(rel) if n.endswith(".parquet")]

    def dataset(self, rel: str):
        """The Parquet files Spark staged at ``rel``."""
        return self.files([self.storage.path(f) for f in self.parquet_files(rel)])

    def files(self, paths: list[str], schema=None):
        """Parquet files as one pyarrow dataset (INT96 timestamps read as microseconds, like Spark; columns
        ``schema`` has and a file lacks are NULL)."""
        import pyarrow.dataset as ds
        from pyarrow.fs import FSSpecHandler, PyFileSystem

        fmt = ds.ParquetFileFormat(read_options=ds.ParquetReadOptions(coerce_int96_timestamp_unit="us"))
        paths = [self.storage.fs._strip_protocol(p) for p in paths]
        return ds.dataset(paths, schema=schema, format=fmt, filesystem=PyFileSystem(FSSpecHandler(self.storage.fs)))


def conform(batch, schema, table: str):
    """``batch`` with exactly ``schema``'s columns and types (Spark's Parquet types differ in details)."""
    import pyarrow as pa

    missing = [f.name for f in schema if f.name not in batch.schema.names]
    if missing:
        raise SinkError(f"{table}: the Delta table has columns {missing} the rows to write lack: it was evolved "
                        "to a newer definition of the source table than this job's; restart the job")
    return pa.RecordBatch.from_arrays([batch.column(f.name).cast(f.type) for f in schema], schema=schema)


def is_conflict(exc: BaseException) -> bool:
    from deltalake.exceptions import CommitFailedError

    return isinstance(exc, CommitFailedError) or "concurrent" in str(exc).lower()


def committing(what: str, attempt: Callable[[], Any]) -> Any:
    """Run ``attempt`` (which reloads the table) until it commits: a concurrent writer's commit makes it run
    again on the new version."""
    for n in range(COMMIT_RETRIES):
        try:
            return attempt()
        except Exception as exc:
            if not is_conflict(exc) or n == COMMIT_RETRIES - 1:
                raise
            log.info("%s: a concurrent commit won (%s); running it again", what, str(exc).splitlines()[0])
            time.sleep(min(5.0, 0.2 * (n + 1)))
    raise AssertionError("unreachable")


@register_sink
class DeltaSink(FileSink):
    """Stream batches are staged by Spark as Parquet, then MERGEd by key with delta-rs under their application
    transaction; snapshot windows are written by the executors as the table's data files and appended where no
    row of the table may share a key with them (else MERGEd); truncates, drops and finished re-snapshots turn
    rows into tombstones."""

    type = "delta"
    default_dir = "delta"
    settings = DeltaSinkSettings
    writes_from_executors = True  # snapshot windows' data files are written by the executors' Python
    evolves_in_place = True

    def __init__(self, config: SinkConfig, secrets, spark=None) -> None:
        super().__init__(config, secrets, spark)
        self.layout = DeltaLayout(config.path)

    # -- the table --------------------------------------------------------------------------------------
    def open_table(self, table: str):
        """The table's Delta table as of now, or None before its first ``prepare``."""
        from deltalake import DeltaTable

        uri = self.layout.table_uri(table)
        return DeltaTable(uri) if DeltaTable.is_deltatable(uri) else None

    def definition(self, table: str) -> SinkDefinition | None:
        dt = self.open_table(table)
        if dt is None:
            return None
        return SinkDefinition(tuple(data_columns(dt)), schema_version(dt, table))

    def prepare(self, types, evolve: bool = False) -> None:
        """Create the table (change data feed on). ``evolve`` (a snapshot): an existing table takes the
        source's current columns, added ones added (NULL until the snapshot writes them), and when a column
        went or changed type the table is rewritten without that column's values. The stream leaves an
        existing table as it is. Either way the table's statistics columns leave out ``unsafe_stats_columns``.
        Several jobs may prepare at once: whoever loses a commit looks again."""
        table = str(types.schema.table)
        self.remove_abandoned_staging(table)
        committing(f"{table}: prepare", lambda: self._prepare(types, evolve))

    def _prepare(self, types, evolve: bool) -> None:
        from deltalake import DeltaTable

        table, keys = str(types.schema.table), list(types.schema.key_columns)
        wanted = table_schema(types)
        dt = self.open_table(table)
        if dt is None:
            config = {"delta.enableChangeDataFeed": "true", KEY_PROPERTY: json.dumps(keys)}
            stats = stats_property(wanted)
            DeltaTable.create(self.layout.table_uri(table), wanted, mode="ignore", name=table,
                              configuration=config if stats is None else {**config, STATS_PROPERTY: stats},
                              raise_if_key_not_exists=False,
                              commit_properties=version_commit(table, types.epoch, types.version, "created"))
            dt = self.open_table(table)
        if evolve:
            at_epoch, at = schema_record(dt, table)
            if at_epoch > types.epoch or (at_epoch == types.epoch and at > types.version):
                log.warning("%s: the table is at version %d of epoch %d: left as it is for epoch %d's snapshot",
                            table, at, at_epoch, types.epoch)
                return
            self._evolve(dt, types, wanted)
            dt = self.open_table(table)
            if schema_record(dt, table) != (types.epoch, types.version):
                record_schema(dt, table, types.epoch, types.version, f"snapshot epoch {types.epoch}'s definition")
                dt = self.open_table(table)
        self._fix_stats(dt, table)

    def _fix_stats(self, dt, table: str) -> None:
        """The statistics columns of the files written from now on: every column but ``unsafe_stats_columns``."""
        current = dt.metadata().configuration.get(STATS_PROPERTY)
        stats = stats_property(self._arrow_schema(dt), current)
        if stats != current:
            log.info("%s: statistics of files written from now on: %s", table, stats)
            dt.alter.set_table_properties({STATS_PROPERTY: stats}, raise_if_not_exists=False)

    def _evolve(self, dt, types, wanted) -> None:
        """An existing table's key checked, its columns made ``wanted``'s, in a commit recording the snapshot's
        definition (``types.epoch``, ``types.version``) as the table's schema."""
        from deltalake import Schema

        table, keys = str(types.schema.table), list(types.schema.key_columns)
        config = dt.metadata().configuration
        if KEY_PROPERTY not in config:
            dt.alter.set_table_properties({KEY_PROPERTY: json.dumps(keys)}, raise_if_not_exists=False)
            dt = self.open_table(table)
        elif json.loads(config[KEY_PROPERTY]) != keys:
            raise SinkError(
                f"the key of {table} changed from ({', '.join(json.loads(config[KEY_PROPERTY]))}) to "
                f"({', '.join(keys)}); a Delta table's key cannot change in place: delete {dt.table_uri} and "
                "re-snapshot the table")
        have = {f.name: f.type for f in dt.schema().fields}
        want = {f.name: f.type for f in Schema.from_arrow(wanted).fields}
        if have == want:
            return
        props = version_commit(table, types.epoch, types.version, f"snapshot epoch {types.epoch}'s definition",
                               exclusive=True)
        if all(have.get(n) == t for n, t in want.items() if n in have) and set(have) <= set(want):
            from deltalake import Field

            log.info("%s: adding columns %s to %s", table, sorted(set(want) - set(have)), dt.table_uri)
            dt.alter.add_columns([Field(f.name, f.type, nullable=True) for f in Schema.from_arrow(wanted).fields
                                  if f.name not in have], commit_properties=props)
            return
        import pyarrow as pa

        kept = {n for n, t in want.items() if have.get(n) == t}
        log.warning("%s: columns dropped or retyped; rewriting %s with the new definition (the changed columns are "
                    "NULL until the table's re-snapshot)", table, dt.table_uri)

        def carried(b):
            return pa.RecordBatch.from_arrays(
                [b.column(f.name) if f.name in kept else pa.nulls(b.num_rows, f.type) for f in wanted], schema=wanted)

        self._rewrite(dt, table, wanted, carried, props)

    def evolve_in_place(self, versions, epoch: int) -> None:
        """Bring the table from the version it records (``schema_record``) to the newest of ``versions`` (of
        snapshot epoch ``epoch``) in one commit that also records the new version, so a crash leaves it at the
        version it records: columns that only add NULLs are added to the table's schema (no file is rewritten);
        any other change (a rename, a drop, a widening, an added column's value) rewrites the table's files with
        the newest columns (``sinks.evolution.column_moves``), every row keeping its version and tombstone. A
        table a newer epoch's snapshot prepared is left as it is."""
        check_numbering(versions)
        newest = versions[-1]
        committing(f"{newest.table}: schema version {newest.number}",
                   lambda: self._evolve_in_place(versions, epoch))

    def _evolve_in_place(self, versions, epoch: int) -> None:
        from deltalake import Field, Schema

        newest = versions[-1]
        table, n = newest.table, newest.number
        dt = self.open_table(table)
        if dt is None:
            raise SinkError(f"{table}: no Delta table at {self.layout.table_uri(table)} to evolve; the stream's "
                            "prepare step creates it")
        at_epoch, at = schema_record(dt, table)
        if at_epoch > epoch:
            log.info("%s: the table was prepared by epoch %d's snapshot: left as it is by epoch %d's stream", table,
                     at_epoch, epoch)
            return
        if at == n:
            if at_epoch != epoch:
                record_schema(dt, table, epoch, n, f"schema version {n}")
            return
        if at > n:
            raise SinkError(
                f"the Delta table {dt.table_uri} is at version {at} of {table}'s definition, newer than the newest "
                f"the stream knows ({n}); it was evolved by another epoch's stream: delete it and re-snapshot the "
                "table")
        have, want = data_columns(dt), versions[at].schema.column_names
        if sorted(have) != sorted(want):
            raise SinkError(
                f"the Delta table {dt.table_uri} has the columns ({', '.join(have)}), not those of version {at} of "
                f"{table} it records ({', '.join(want)}); it was changed outside the pipeline: delete it and "
                "re-snapshot the table")
        moves = column_moves(versions, at)
        wanted = table_schema(TableSinkTypes.of(newest.schema, n))
        props = version_commit(table, epoch, n, f"schema version {n}: {newest.statement}"[:500], exclusive=True)
        if moves.adds_only_nulls:
            added = [f for f in Schema.from_arrow(wanted).fields if f.name in moves.values]
            dt.alter.add_columns([Field(f.name, f.type, nullable=True) for f in added], commit_properties=props)
            log.info("%s: at schema version %d: columns %s added", table, n, [f.name for f in added])
        else:
            t0 = time.monotonic()
            rows = self._rewrite(dt, table, wanted, partial(carry, wanted=wanted, moves=moves), props)
            log.info("%s: at schema version %d: %d rows rewritten in %.2fs (renamed %s, dropped %s, retyped %s, "
                     "added %s)", table, n, rows, time.monotonic() - t0, dict(moves.renames), list(moves.drops),
                     list(moves.retyped()), list(moves.values))
        self._fix_stats(self.open_table(table), table)

    def _rewrite(self, dt, table: str, wanted, carried: Callable[[Any], Any], props) -> int:
        """Rewrite the table as ``wanted`` columns in one overwrite commit (``props``: its properties) that also
        sets the new schema: each batch of its rows made ``wanted``'s by ``carried``, written by the append's
        writer (statistics of the columns the new definition keeps them of) into data files of up to
        ``REWRITE_FILE_ROWS`` rows; files of a commit that fails are deleted. Returns the rows."""
        import itertools

        from airflow_cdc_provider.sinks.delta_append import stats_columns_of, write_data_file

        if self._add_features_of(dt, wanted):
            dt = self.open_table(table)
        config = dt.metadata().configuration
        stats = stats_property(wanted, config.get(STATS_PROPERTY))
        columns = stats_columns_of(wanted.names, {**config, STATS_PROPERTY: stats} if stats else config)
        table_dir = table_dir_name(table)
        # the table's files read by pyarrow, not delta-rs
        current = self.layout.files(dt.file_uris(), self._arrow_schema(dt)).to_batches(
            batch_size=BATCH_ROWS, batch_readahead=READ_AHEAD, fragment_readahead=1)
        rows = (b for b in current if b.num_rows)
        files = []
        try:
            for first in rows:
                group = itertools.chain([first], itertools.islice(rows, REWRITE_FILE_ROWS // BATCH_ROWS - 1))
                files.append(write_data_file(self.config.path, table_dir, wanted, columns, group, carried))
            dt.create_write_transaction([f.add_action() for f in files], "overwrite", wanted, commit_properties=props)
        except BaseException:
            for f in files:
                self.layout.storage.delete(f"{table_dir}/{f.path}")
            raise
        return sum(json.loads(f.stats)["numRecords"] for f in files)

    @staticmethod
    def _add_features_of(dt, schema) -> bool:
        """Add the protocol features a table of ``schema`` needs and ``dt`` lacks, in a commit of their own that
        changes no data (a commit of files cannot add them, unlike delta-rs's own writer); whether it did."""
        import pyarrow as pa
        from deltalake import TableFeatures

        if not any(pa.types.is_timestamp(f.type) and f.type.tz is None for f in schema) or \
                "timestampNtz" in (dt.protocol().reader_features or ()):
            return False
        features = [TableFeatures.TimestampWithoutTimezone]
        if dt.metadata().configuration.get("delta.enableChangeDataFeed") == "true":
            features.append(TableFeatures.ChangeDataFeed)  # kept in the table-features protocol it moves to
        dt.alter.add_feature(features, allow_protocol_versions_increase=True)
        return True

    def _merge(self, table: str, keys: list[str], source: Callable[[Any], Any], app: tuple[str, int] | None,
               what: str, snapshot: bool = False, key_range: KeyRange | None = None,
               take_over: bool = True, swept: list[str] | None = None) -> dict[str, Any] | None:
        """MERGE the rows ``source(schema)`` gives (a RecordBatchReader of the table's columns) by key, each
        applied only if newer than the stored row (inserted only if newer than the last truncate or drop), in
        one commit carrying the application transaction ``app`` = (id, version). None if ``app`` was committed
        already. ``snapshot``: the rows also take over ``_cdc_chunk`` (a stream change leaves it, so a retried
        chunk's tombstones never take a row the stream wrote). ``key_range``: the smallest and largest bounding key
        column of the rows (``first_key_range``), which lets delta-rs read only the files that may hold them, and
        lets commits of disjoint ranges (parallel snapshot windows) pass each other without a conflict.
        ``take_over``: a snapshot row of a live row's very version takes it over (its chunk); False for changes
        under their own positions, which the stream may have written already. ``swept``: the tags of a retried
        window's chunks, whose tombstones among the rows (``retried_tombstones``) take only what
        ``swept_clause`` lets them, and insert nothing. Where the table's files in
        ``key_range`` hold more than ``MERGE_TARGET_ROWS`` rows, the rows go in one MERGE per piece of that range
        (``target_cuts``) holding some of them (delta-rs reads every row of the files a MERGE may touch), only the
        last carrying ``app``: a replay after a kill between them finds the earlier ones' rows not older and
        leaves them."""
        pieces = self._merge_pieces(table, keys, source, key_range, app)
        if not pieces:
            log.info("%s: %s already committed (%s); skipped", table, what, app[0])
            return None
        if len(pieces) == 1:
            return self._merge_one(table, keys, source, app, what, snapshot, key_range, take_over, swept)
        metrics = None
        for n, piece in enumerate(pieces, 1):
            metrics = self._merge_one(table, keys, within(source, piece), app if n == len(pieces) else None,
                                      f"{what} (part {n} of {len(pieces)})", snapshot, piece, take_over, swept)
        return metrics

    def _merge_one(self, table: str, keys: list[str], source: Callable[[Any], Any], app: tuple[str, int] | None,
                   what: str, snapshot: bool, key_range: KeyRange | None, take_over: bool,
                   swept: list[str] | None = None) -> dict[str, Any] | None:
        """One MERGE of ``_merge``'s, in one commit (retried on a conflict)."""
        from deltalake.transaction import CommitProperties, Transaction

        def attempt():
            dt = self._existing_table(table)
            done = committed_before(dt, app)
            if done is not None:
                log.info("%s: %s already committed (%s at %d); skipped", table, what, app[0], done)
                return None
            names = [f.name for f in dt.schema().fields]
            updates = {ident(n): f"s.{ident(n)}" for n in names if n not in keys and n != CHUNK}
            if snapshot:
                updates[ident(CHUNK)] = f"s.{ident(CHUNK)}"
            emptied = dt.metadata().configuration.get(EMPTIED_PROPERTY)
            insert_if = newer_than("s", tuple(int(x) for x in emptied.split(","))) if emptied else None
            props = CommitProperties(
                custom_metadata={"airflow_cdc": what},
                app_transactions=[Transaction(app[0], app[1])] if app is not None else None)
            on = [f"t.{ident(k)} = s.{ident(k)}" for k in keys]
            schema = self._arrow_schema(dt)
            if key_range is not None:
                key = key_range.column
                if key not in keys or not orderable_key(schema.field(key).type):
                    raise SinkError(f"{table}: {what}: its rows were bounded by {key}, which is no orderable key "
                                    f"column of the Delta table ({', '.join(keys)})")
                key_type = schema.field(key).type
                on += [f"t.{ident(key)} >= {key_literal(key_range.low, key_type)}",
                       f"t.{ident(key)} <= {key_literal(key_range.high, key_type)}"]
            merger = dt.merge(source(schema), " AND ".join(on), source_alias="s", target_alias="t",
                              commit_properties=props)
            newer = older_than("t", "s")
            if snapshot and take_over:  # a snapshot row of the live row's version (the same state) takes it over
                newer = f"({newer} OR ({same_version('t', 's')} AND NOT t.{ident(DELETED)}))"
            if swept:  # the retried window's tombstones: the first clause a source row meets is the one applied
                gone = [ident(DELETED), ident("_cdc_op"), *map(ident, VERSION_COLUMNS)]
                merger = merger.when_matched_update(updates={c: f"s.{c}" for c in gone}, predicate=swept_clause(swept))
                newer = f"NOT s.{ident(DELETED)} AND {newer}"
                insert_if = f"NOT s.{ident(DELETED)}" + (f" AND {insert_if}" if insert_if else "")
            merger = merger.when_matched_update(updates=updates, predicate=newer)
            merger = merger.when_not_matched_insert_all(predicate=insert_if)
            metrics = merger.execute()
            log.info("%s: %s: %d rows in, %d inserted, %d updated (the others were older than the table's)",
                     table, what, metrics["num_source_rows"], metrics["num_target_rows_inserted"],
                     metrics["num_target_rows_updated"])
            return metrics

        return committing(f"{table}: {what}", attempt)

    def _merge_pieces(self, table: str, keys: list[str], source: Callable[[Any], Any],
                      key_range: KeyRange | None, app: tuple[str, int] | None) -> list[KeyRange | None]:
        """The key ranges of ``_merge``'s MERGEs: for each piece of ``key_range`` between ``target_cuts`` that
        holds some of the rows, the smallest and largest value of its column among those (together, every row
        once); or just ``key_range``; none when ``app`` is committed already (a replay, whose pieces before the
        last would otherwise run again for nothing)."""
        import pyarrow as pa
        import pyarrow.compute as pc

        dt = self.open_table(table) if key_range is not None else None
        if dt is None:
            return [key_range]
        if committed_before(dt, app) is not None:
            return []
        schema = self._arrow_schema(dt)
        cuts = target_cuts(dt, key_range, MERGE_TARGET_ROWS)
        if not cuts:
            return [key_range]
        key = key_range.column
        values = pa.chunked_array([b.column(key) for b in source(schema)], schema.field(key).type)
        pieces = []
        for low, high in zip([None, *cuts], [*cuts, None]):
            held = values
            if low is not None:
                held = held.filter(pc.greater_equal(held, low))
            if high is not None:
                held = held.filter(pc.less(held, high))
            bounds = pc.min_max(held).as_py()
            if bounds["min"] is not None:
                pieces.append(KeyRange(key, bounds["min"], bounds["max"]))
        return pieces or [key_range]

    def _merge_retried(self, table: str, keys: list[str], source: Callable[[Any], Any],
                       app: tuple[str, int] | None, what: str, epoch: int, retried: set[int],
                       low_watermark: Version) -> None:
        """``_merge`` of a window with ``retried`` chunks (its rows as snapshot rows): the rows of those chunks an
        earlier attempt wrote and the window lacks become tombstones in the same MERGE (``retried_tombstones``),
        bounded by the bounding key column of the rows and the tombstones together. Then the same search once more:
        an attempt thought dead may have committed such rows meanwhile, which a further MERGE makes tombstones."""
        import pyarrow as pa

        dt = self._existing_table(table)
        done = committed_before(dt, app)
        if done is not None:
            log.info("%s: %s already committed (%s at %d); skipped", table, what, app[0], done)
            return
        read = window_keys(source, self._arrow_schema(dt), keys)
        tags = chunk_tags(epoch, retried)
        tombstones = retried_tombstones(dt, keys, read, tags, low_watermark)
        log.info("%s: %s: %d rows of retried chunks %s the window lacks become tombstones", table, what,
                 tombstones.num_rows, sorted(retried))

        def with_tombstones(schema):
            return pa.RecordBatchReader.from_batches(schema, itertools.chain(
                source(schema), rows_source(tombstones, table)(schema)))

        self._merge(table, keys, with_tombstones, app, what, snapshot=True,
                    key_range=span(first_key_range(read, keys), first_key_range(tombstones, keys)), swept=tags)
        late = retried_tombstones(self.open_table(table), keys, read, tags, low_watermark)
        if late.num_rows:
            log.warning("%s: %s: %d more rows of retried chunks %s were committed meanwhile; made tombstones",
                        table, what, late.num_rows, sorted(retried))
            self._merge(table, keys, rows_source(late, table), None, f"{what}, rows of its chunks committed meanwhile",
                        snapshot=True, key_range=first_key_range(late, keys), swept=tags)

    def _existing_table(self, table: str):
        dt = self.open_table(table)
        if dt is None:
            raise SinkError(f"{table}: no Delta table at {self.layout.table_uri(table)}; the job's prepare step "
                            "creates it: run the table's snapshot first")
        return dt

    @staticmethod
    def _arrow_schema(dt):
        import pyarrow as pa

        return pa.schema(dt.schema().to_arrow())

    def _key_range(self, staged: str, types) -> KeyRange | None:
        """The smallest and largest bounding key column of the staged rows (``first_key_range``)."""
        if not self.layout.parquet_files(staged):
            return None
        return dataset_key_range(self.layout.dataset(staged), list(types.schema.key_columns))

    def _staged_source(self, staged: str, table: str, add: Callable[[Any], Any] | None = None):
        """A function of the table's Arrow schema giving a reader of the staged rows (``add`` completes each
        batch with the columns Spark did not write)."""
        import pyarrow as pa

        def source(schema):
            dataset = self.layout.dataset(staged) if self.layout.parquet_files(staged) else None

            def batches() -> Iterator[Any]:
                if dataset is None:
                    return
                for b in dataset.to_batches(batch_size=BATCH_ROWS):
                    yield conform(add(b) if add else b, schema, table)

            return pa.RecordBatchReader.from_batches(schema, batches())

        return source

    def _tombstone(self, table: str, condition: str, op: str, version: Version | None, what: str,
                   app: tuple[str, int] | None = None) -> None:
        """Make the live rows meeting ``condition`` tombstones with ``op`` (and ``version`` when given), in a commit
        carrying the application transaction ``app`` if given."""
        from deltalake.transaction import CommitProperties, Transaction

        updates = {ident(DELETED): "true", ident("_cdc_op"): literal(op)}
        if version is not None:
            updates.update({ident(c): str(int(v)) for c, v in zip(VERSION_COLUMNS, version)})

        def attempt():
            dt = self.open_table(table)
            if dt is None:
                return None
            return dt.update(updates=updates, predicate=f"NOT {ident(DELETED)} AND {condition}",
                             commit_properties=CommitProperties(
                                 custom_metadata={"airflow_cdc": what},
                                 app_transactions=[Transaction(app[0], app[1])] if app is not None else None))

        metrics = committing(f"{table}: {what}", attempt)
        if metrics:
            log.info("%s: %s: %s rows became tombstones", table, what, metrics.get("num_updated_rows"))

    # -- the Airflow side --------------------------------------------------------------------------------
    def finish_snapshot(self, table: str, epoch: int, min_low_watermark: Version,
                        emptied_after: tuple = ()) -> None:
        """Rows last written before the epoch started (at its first low watermark or earlier) and not rewritten by
        it are gone from the source. A row a chunk of the epoch wrote is not, whatever its version: a written
        window's rows carry their window's low watermark, and a window retried on an unchanged binlog keeps
        them, committed before, while its report states the retry's later one. The truncates and drops the
        stream applied since the epoch started (``emptied_after``) are applied once more: the insert guard
        already kept older window rows out, this makes sure of it."""
        first = tuple(min_low_watermark)
        stale = (f"(({older_than(None, first)} OR {same_version(None, first)}) AND ({ident(CHUNK)} IS NULL OR "
                 f"{ident(CHUNK)} NOT LIKE {literal(f'{epoch}:%')}))")
        # gone as of that low watermark: an older change a lagging stream writes later cannot bring them back
        self._tombstone(table, stale, "d", first, f"snapshot epoch {epoch} finished")
        for change in emptied_after:
            self.apply_schema_change(change, None)

    # -- stream batches ------------------------------------------------------------------------------------
    def stream_app_id(self, spark, table: str) -> str:
        """``airflow-cdc:<db.table>:stream:<query id>``: the running streaming query's id, which Spark keeps in
        its checkpoint (the same across restarts, new with a new checkpoint)."""
        try:
            query_id = spark.sparkContext.getLocalProperty("sql.streaming.queryId")
        except Exception:  # a Spark Connect session has no SparkContext
            query_id = None
        if not query_id:
            active = spark.streams.active
            if len(active) == 1:
                query_id = str(active[0].id)
        if not query_id:
            raise SinkError(f"{table}: the delta sink writes stream batches from inside one streaming query's "
                            "foreachBatch, whose id names its application transactions; none (or several) found")
        return f"airflow-cdc:{table}:stream:{query_id}"

    def write_changes(self, df, types, batch_id: int, mid_write: Hook, rows: Callable[[], int]) -> None:
        """The batch's newest change per key, staged by Spark, then MERGEd in one commit at ``batch_id``. A
        batch committed before (a replay after a kill) is only read (the caller counts its rows) and skipped.
        Schema changes' records are not rows of the table (``apply_schema_change``)."""
        from pyspark.sql import functions as F

        table = str(types.schema.table)
        app = (self.stream_app_id(df.sparkSession, table), batch_id)
        dt = self.open_table(table)
        done = dt.transaction_version(app[0]) if dt is not None else None
        if done is not None and done >= batch_id:
            df.write.format("noop").mode("overwrite").save()
            mid_write()
            log.info("%s: batch %d was committed before (%s); skipped", table, batch_id, app[0])
            return
        changes = latest_per_key(df.filter(F.col("_cdc_op").isin(*ROW_OPS)), types.schema.key_columns)
        out = changes.select(*cols(types.schema.column_names), *[F.col(n) for n in META_NAMES],
                             (F.col("_cdc_op") == "d").alias(DELETED), F.lit(None).cast("string").alias(CHUNK))
        staging = self.stage(out, table)
        mid_write()
        self.commit_changes(types, staging, app)

    def writes_arrow_changes(self, types) -> bool:
        return True

    def write_arrow_changes(self, rows, types, batch_id: int, mid_write: Hook) -> None:
        """As ``write_changes``, from the driver: the newest change per key MERGEd from memory, no staging."""
        import pyarrow as pa

        table = str(types.schema.table)
        keys = list(types.schema.key_columns)
        app = (self.stream_app_id(self.spark, table), batch_id)
        rows = newest_row_changes(rows, keys)
        rows = rows.append_column(CHUNK, pa.nulls(rows.num_rows, pa.string()))
        mid_write()
        if not rows.num_rows:
            return
        self._merge(table, keys, rows_source(rows, table), app, f"stream batch {batch_id}",
                    key_range=first_key_range(rows, keys))

    def commit_changes(self, types, staging: str, app: tuple[str, int]) -> None:
        """MERGE the staged changes (the table's columns, one row per key) under ``app`` = (app id, batch id),
        then remove them; no rows, no commit."""
        table = str(types.schema.table)
        try:
            if self.layout.parquet_files(staging) and self.layout.dataset(staging).count_rows():
                self._merge(table, list(types.schema.key_columns), self._staged_source(staging, table), app,
                            f"stream batch {app[1]}", key_range=self._key_range(staging, types))
        finally:
            self.layout.storage.rmtree(staging)

    def apply_schema_change(self, change, types) -> None:
        """A truncate or drop makes every live row older than it a tombstone with its version, and records its
        version in the table's properties, so no older write landing later inserts a row again; a dropped
        table's description says when."""
        if change.op not in EMPTYING_OPS:
            return
        table = str(change.table)
        version = tuple(change.position.sort_key)
        self._tombstone(table, older_than(None, version), change.op, version, change.describe())

        def mark():
            dt = self.open_table(table)
            if dt is None:
                return
            current = dt.metadata().configuration.get(EMPTIED_PROPERTY)
            if current is None or tuple(int(x) for x in current.split(",")) < version:
                dt.alter.set_table_properties({EMPTIED_PROPERTY: ",".join(str(v) for v in version)},
                                              raise_if_not_exists=False)
            if change.op == "x":
                dt.alter.set_table_description(
                    f"source table dropped at {change.position.file}:{change.position.pos}")

        committing(f"{table}: {change.kind}", mark)

    def move_table(self, old: str, new: str) -> str | None:
        """The table's directory moved (``FileSink.move_table``), then the table version it records taken over
        by the new name (it is kept per name), its Delta name made the new one and its description saying where
        it came from."""
        refused = super().move_table(old, new)
        if refused is not None or self.open_table(new) is None:
            return refused
        described = f"source table {old}, renamed to {new}"

        def relabel():
            dt = self.open_table(new)
            recorded = schema_record(dt, old)
            if schema_record(dt, new) < recorded:
                record_schema(dt, new, *recorded, f"moved from {old}")
                dt = self.open_table(new)
            if dt.metadata().name != new:
                dt.alter.set_table_name(new)
                dt = self.open_table(new)
            if dt.metadata().description != described:
                dt.alter.set_table_description(described)

        committing(f"{new}: moved from {old}", relabel)
        return refused

    # -- snapshot windows ---------------------------------------------------------------------------------
    def open_window(self, rows, types, epoch: int, indexes: list[int], low_watermark: Version,
                    retried: set[int], split_keys: bool = False) -> "WrittenDeltaWindow | StagedDeltaWindow":
        """The window written by the executors as data files of the table while it is read
        (``WrittenDeltaWindow``), or, where that is not known to be right, staged and written at its high
        watermark (``StagedDeltaWindow``). ``split_keys``: files of the epoch's other chunks hold none of the
        window's keys (``own_chunks``)."""
        table = str(types.schema.table)
        dt = self.open_table(table)
        own = own_chunks(epoch, indexes, split_keys)
        reason = self.written_window_refusal(dt, types, epoch, retried, own)
        if reason is None:
            return WrittenDeltaWindow(self, rows, types, epoch, indexes, low_watermark, self._arrow_schema(dt),
                                      retried, own)
        log.info("%s: snapshot epoch %d chunks %d-%d staged (%s)", table, epoch, min(indexes), max(indexes), reason)
        return StagedDeltaWindow(self, self.stage(rows, table), types, epoch, indexes, low_watermark, retried, own)

    def written_window_refusal(self, dt, types, epoch: int, retried: set[int], own=None) -> str | None:
        """Why a window is not written straight as data files of the table (``WrittenDeltaWindow``): that needs
        the data files' own statistics to be trusted and the append to be likely; None: it is."""
        import pyarrow as pa

        from airflow_cdc_provider.sinks.delta_append import stats_columns

        if self.spark is None or dt is None:
            return "no Spark session" if dt is not None else "no table"
        if retried and may_hold_chunks(dt, epoch, retried):
            return f"retried chunks {sorted(retried)} an earlier attempt may have written"
        if EMPTIED_PROPERTY in dt.metadata().configuration:
            return "a truncate or drop emptied the table"
        schema = self._arrow_schema(dt)
        if [(f.name, f.type) for f in schema] != [(f.name, f.type) for f in table_schema(types)]:
            return "the table's columns are not the source's"
        floats = [c for c in stats_columns(dt) if pa.types.is_floating(schema.field(c).type)]
        if floats:
            return f"float columns {floats} keep statistics, which a Parquet writer may leave NaN out of"
        return unordered_key_refusal(dt, schema, types.schema.key_columns, own)

    def stage(self, df, table: str) -> str:
        """Write ``df`` with Spark to a new staging directory of ``table`` (returned). Uncompressed: the files
        are read once, right away, and compressing them costs more than the bytes it saves. In small row groups:
        they are rewritten one row group at a time (``delta_append.staged_batches``)."""
        staging = self.layout.staging_dir(table)
        write_checked(df, self.layout.storage, staging, f"{table}: staged rows",
                      lambda d, at: d.write.mode("overwrite").option("compression", "none")
                      .option("parquet.block.size", STAGED_ROW_GROUP_BYTES).parquet(at))
        return staging

    # -- reading ---------------------------------------------------------------------------------------
    def current_state(self, types, include_meta: bool = False):
        """The live rows. Spark reads the current version's Parquet files itself when the table uses no reader
        feature it would need Delta to understand (deletion vectors, column mapping: delta-rs writes neither);
        otherwise delta-rs reads them and they pass through the driver."""
        from pyspark.sql import functions as F
        from pyspark.sql.types import StructType

        table = str(types.schema.table)
        schema = StructType.fromDDL(spark_ddl(types))
        names = [*types.schema.column_names, *(META_NAMES if include_meta else ())]
        dt = self.open_table(table)
        if dt is None:
            return self.spark.createDataFrame([], schema).select(*cols(names))
        features = set(dt.protocol().reader_features or ())
        if features & {"deletionVectors", "columnMapping"}:
            live = dt.to_pyarrow_table(filters=[(DELETED, "=", False)])
            df = self.spark.createDataFrame(live.to_pandas(), schema) if live.num_rows else \
                self.spark.createDataFrame([], schema)
            return df.select(*cols(names))
        files = dt.file_uris()
        if not files:
            return self.spark.createDataFrame([], schema).select(*cols(names))
        df = self.spark.read.schema(schema).parquet(*files)
        return df.filter(~F.col(DELETED)).select(*cols(names))


class StagedDeltaWindow(FoldedWindow):
    """A snapshot window ``WrittenDeltaWindow`` does not take (``DeltaSink.written_window_refusal``): staged by
    Spark when opened (which forces the read), written at the window's high watermark when published: appended
    as data files the executors rewrite from the staged ones when no row of the table can share a key with it
    (``delta_append``), else MERGEd. Rows of retried chunks that an earlier attempt wrote and this one did not
    (deleted meanwhile) become tombstones in the MERGE's commit."""

    def __init__(self, sink: DeltaSink, staging: str, types, epoch: int, indexes: list[int],
                 low_watermark: Version, retried: set[int], own=None) -> None:
        """``staging``: the window's rows as read (data columns and ``CHUNK_COLUMN``), staged; ``own``:
        ``own_chunks``."""
        self.sink, self.spark, self.types, self.epoch, self.indexes = sink, sink.spark, types, epoch, indexes
        self.low_watermark, self.retried, self.own = low_watermark, retried, own
        self.table = str(types.schema.table)
        self.staging = staging
        self.counts = self._counts(self.staging)

    def _counts(self, staging: str) -> dict[int, int]:
        """Rows per chunk, from the staged files' chunk column alone (batch by batch)."""
        import pyarrow.compute as pc

        counts: dict[int, int] = {}
        if not self.sink.layout.parquet_files(staging):
            return counts
        for batch in self.sink.layout.dataset(staging).to_batches(columns=[CHUNK_COLUMN], batch_size=1 << 20):
            for vc in pc.value_counts(batch.column(0)).to_pylist():
                counts[vc["values"]] = counts.get(vc["values"], 0) + vc["counts"]
        return counts

    def rows(self):
        return self._read(self.staging)

    def _read(self, staged: str):
        """Spark: staged rows (data columns and ``CHUNK_COLUMN``)."""
        from pyspark.sql.types import IntegerType, StructField, StructType

        schema = StructType([*StructType.fromDDL(self.types.spark_ddl).fields,
                             StructField(CHUNK_COLUMN, IntegerType(), False)])
        if not self.sink.layout.parquet_files(staged):
            return self.sink.spark.createDataFrame([], schema)
        return self.sink.spark.read.schema(schema).parquet(self.sink.layout.storage.location(staged))

    def publish_rows(self, folded, version: Version, mid_write: Hook) -> list[int]:
        staged = self.sink.stage(folded.select(*cols(self.types.schema.column_names), col(CHUNK_COLUMN)),
                                 self.table) if folded is not None else self.staging
        first, last = min(self.indexes), max(self.indexes)
        app = (f"airflow-cdc:{self.table}:snapshot:{self.epoch}:{first}-{last}", packed(version))
        what = f"snapshot epoch {self.epoch} chunks {first}-{last}"
        hook = _Once(mid_write)
        try:
            appended = self._append(staged, version, app, what, hook)
            hook()  # an append ran it between its files and its commit
            if not appended:
                self._merge(staged, version, app, what)
        finally:
            for d in {staged, self.staging}:
                self.sink.layout.storage.rmtree(d)
        return []

    def _merge_reason(self, dt, app: tuple[str, int]) -> str | None:
        """Why the window must be MERGEd rather than appended (``delta_append``), known before writing files."""
        if dt is None:
            return "no table"
        done = dt.transaction_version(app[0])
        if done is not None and done >= app[1]:
            return "committed before"
        if self.retried:
            return f"retried chunks {sorted(self.retried)}"
        if EMPTIED_PROPERTY in dt.metadata().configuration:
            return "a truncate or drop emptied the table"
        return unordered_key_refusal(dt, self.sink._arrow_schema(dt), self.types.schema.key_columns, self.own)

    def _append(self, staged: str, version: Version, app: tuple[str, int], what: str, mid_write: Hook) -> bool:
        """Append the window as data files written where its rows are (the executors), if that is correct
        (``delta_append``); False: the window is to be MERGEd. A window committed before writes nothing."""
        from airflow_cdc_provider.sinks.delta_append import (
            append_files,
            delete_unreferenced,
            stats_columns,
            window_ranges,
            write_data_files_from_staged,
            write_data_files_here,
        )
        from airflow_cdc_provider.spark.session import local_cores

        sink, table = self.sink, self.table
        dt = sink.open_table(table)
        reason = self._merge_reason(dt, app)
        if reason == "committed before":
            log.info("%s: %s: committed before (%s); nothing written", table, what, app[0])
            return True
        if reason is not None:
            log.info("%s: %s: MERGE (%s)", table, what, reason)
            return False
        schema = sink._arrow_schema(dt)
        finish = partial(snapshot_batch, schema=schema, epoch=self.epoch, version=tuple(version), table=table)
        table_dir, columns = table_dir_name(table), stats_columns(dt)
        staged_files = sink.layout.parquet_files(staged)
        cores = 1 if sink.spark is None else local_cores(sink.spark)
        if cores is None:  # a cluster's executors
            files = write_data_files_from_staged(sink.spark, staged_files, sink.config.path, table_dir, schema,
                                                 columns, finish)
        else:  # the executors are this machine: the same writer in this process
            files = write_data_files_here(staged_files, sink.config.path, table_dir, schema, columns, finish, cores)
        if not files:
            log.info("%s: %s: MERGE (no rows to append)", table, what)
            return False
        mid_write()
        keys = list(self.types.schema.key_columns)
        outcome = append_files(lambda: sink.open_table(table), files, window_ranges(files, keys, schema), app,
                               what, refuse=lambda d: EMPTIED_PROPERTY in d.metadata().configuration,
                               own=self.own)
        if outcome == "appended":
            rows = sum(json.loads(f.stats)["numRecords"] for f in files)
            log.info("%s: %s: appended %d rows in %d data files", table, what, rows, len(files))
            return True
        delete_unreferenced(sink.layout.storage, table_dir, sink.open_table(table), files)
        if outcome == "committed before":
            log.info("%s: %s: committed before (%s); nothing written", table, what, app[0])
            return True
        log.info("%s: %s: MERGE (the append was refused: %s)", table, what, outcome)
        return False

    def _merge(self, staged: str, version: Version, app: tuple[str, int], what: str) -> None:
        add = partial(snapshot_rows, epoch=self.epoch, version=tuple(version))
        keys, source = list(self.types.schema.key_columns), self.sink._staged_source(staged, self.table, add)
        if self.retried:
            self.sink._merge_retried(self.table, keys, source, app, what, self.epoch, self.retried, self.low_watermark)
        else:
            self.sink._merge(self.table, keys, source, app, what, snapshot=True,
                             key_range=self.sink._key_range(staged, self.types))


class WrittenDeltaWindow:
    """A snapshot window written by Spark's executors straight as data files of its Delta table while it is read
    (which forces the read), under the window's low watermark: older than every change of the window, as in the
    jdbc sink (``spark.window_fold``). The rows go through no staging and no second pass. Publishing reads the
    files' footers for their statistics and commits them as one append carrying the window's application
    transaction, if no row of the table may share a key with them (``delta_append``); else in place of the
    table's files that may, with those files' other rows carried over by Spark (``_carry``), if none the window
    would replace is newer than it; otherwise their rows are MERGEd and the files deleted. Then the binlog
    window goes on top as the stream would apply it: a TRUNCATE in it makes every older row of the table a
    tombstone, and the last change of each key it touched is MERGEd under that change's own position. Between
    the commits readers see the window as read; a kill between them leaves the window unreported, and its retry
    (``StagedDeltaWindow``) rewrites it. The files sit in a directory of their own under the table's
    (``snapshot-<epoch>-<first>-<last>-<id>/``)."""

    def __init__(self, sink: DeltaSink, rows, types, epoch: int, indexes: list[int], low_watermark: Version,
                 schema, retried: set[int] = frozenset(), own=None) -> None:
        """``rows``: the window as read (data columns and ``CHUNK_COLUMN``); ``schema``: the table's (Arrow);
        ``retried``: chunks an earlier attempt began, none of whose rows the table held as the window opened;
        ``own``: ``own_chunks``."""
        self.sink, self.types, self.epoch, self.indexes, self.retried = sink, types, epoch, indexes, set(retried)
        self.own = own
        self.low_watermark = tuple(low_watermark)
        self.table = str(types.schema.table)
        self.schema = schema
        self.table_dir = table_dir_name(self.table)
        self.dir = f"snapshot-{epoch}-{min(indexes)}-{max(indexes)}-{uuid.uuid4().hex[:12]}"
        self.counts: dict[int, int] = {}
        self._carried_rows = 0  # rows of the table's files a replacement carried over unchanged
        self._committed = False  # the window's files are in the table's log
        self._written = self._write(rows)  # rows Spark wrote: what the files must hold

    def _write(self, rows) -> int:
        """Spark: the rows as the table's columns, in its order and types, as Parquet files in the window's
        directory (``DATA_FILE_CONF``, ``DATA_FILE_OPTIONS``); Spark's other files removed. How many it wrote."""
        from pyspark.sql import functions as F

        seq, pos, row = self.low_watermark
        meta = {"_cdc_op": F.lit("r"), "_cdc_ts_ms": F.lit(0).cast("bigint"),
                "_cdc_file_seq": F.lit(seq).cast("bigint"), "_cdc_pos": F.lit(pos).cast("bigint"),
                "_cdc_row": F.lit(row).cast("int"), DELETED: F.lit(False),
                CHUNK: F.concat(F.lit(f"{self.epoch}:"), col(CHUNK_COLUMN).cast("string"))}
        return self._write_files(rows.select(*self._columns(meta)), self.dir)

    def _columns(self, given: dict[str, Any]) -> list:
        """The table's columns in its order: ``given`` ones as given, the source's cast to their Spark types, the
        others as they are."""
        kinds = {c: t.spark for c, t in zip(self.types.schema.column_names, self.types.types, strict=True)}
        return [(given[f.name] if f.name in given else col(f.name).cast(kinds[f.name]) if f.name in kinds
                 else col(f.name)).alias(f.name) for f in self.schema]

    @contextlib.contextmanager
    def _data_file_conf(self) -> Iterator[None]:
        """The session under ``DATA_FILE_CONF`` while Spark reads or writes the table's data files."""
        spark = self.sink.spark
        before = {k: spark.conf.get(k, None) for k in DATA_FILE_CONF}
        for k, v in DATA_FILE_CONF.items():
            spark.conf.set(k, v)
        try:
            yield
        finally:
            for k, v in before.items():
                if v is None:
                    spark.conf.unset(k)
                else:
                    spark.conf.set(k, v)

    def _write_files(self, frame, rel: str) -> int:
        """Spark: ``frame`` (the table's columns) as Parquet data files in ``rel`` under the table's directory
        (``DATA_FILE_CONF``, ``DATA_FILE_OPTIONS``); Spark's other files removed. How many rows it wrote."""
        storage = self.sink.layout.storage
        rel = f"{self.table_dir}/{rel}"
        with self._data_file_conf():
            written = counted_write(frame, lambda f: f.write.mode("overwrite").options(**DATA_FILE_OPTIONS)
                                    .parquet(storage.location(rel)))
        for name in storage.listdir(rel):
            if name.startswith((".", "_")) or not name.endswith(".parquet"):
                storage.rmtree(f"{rel}/{name}")
        return written

    def publish(self, changes, mid_write: Hook) -> list[int]:
        from airflow_cdc_provider.sinks.delta_append import append_files, replace_files, tag_counts, window_ranges

        sink, table = self.sink, self.table
        files = self._data_files(self.dir)
        tags = tag_counts(sink.config.path, [f"{self.table_dir}/{f.path}" for f in files], CHUNK)
        self.counts = {int(tag.split(":")[1]): n for tag, n in tags.items()}
        first, last = min(self.indexes), max(self.indexes)
        app = (f"airflow-cdc:{table}:snapshot:{self.epoch}:{first}-{last}", packed(changes.high.sort_key))
        what = f"snapshot epoch {self.epoch} chunks {first}-{last}"
        check_written(f"{table}: {what}: {self.sink.layout.storage.location(f'{self.table_dir}/{self.dir}')}",
                      self._written, sum(self.counts.values()))
        keys = list(self.types.schema.key_columns)
        ranges = window_ranges(files, keys, self.schema)
        window_range = KeyRange(keys[0], *ranges[keys[0]]) if len(keys) == 1 and keys[0] in ranges else None
        # the application transaction goes on the window's last commit: a retry on an unchanged binlog (same
        # high watermark) skips the window as committed only once all of it is
        changed = changes.truncate is not None or bool(changes.last)
        rows_app = None if changed else app
        mid_write()
        outcome = "no rows"
        if files and not self._conforms(files[0]):
            outcome = "the files' types are not the table's"
        elif files:
            outcome = append_files(lambda: sink.open_table(table), files, ranges, rows_app, what, refuse=self._refuse,
                                   own=self.own)
        if outcome == "may overlap" and ranges:
            outcome = replace_files(lambda: sink.open_table(table), files, ranges, rows_app, what,
                                    refuse=self._refuse, carry=partial(self._carry, files), own=self.own)
        self._committed = outcome in ("appended", "replaced")
        if outcome == "appended":
            log.info("%s: %s: appended %d rows in %d data files written by the executors", table, what,
                     sum(self.counts.values()), len(files))
        elif outcome == "replaced":
            log.info("%s: %s: %d rows in %d data files written by the executors replaced the table's files that "
                     "may hold their keys (%d rows of those carried over)", table, what, sum(self.counts.values()),
                     len(files), self._carried_rows)
        elif outcome == "committed before":
            log.info("%s: %s: committed before (%s); nothing written", table, what, app[0])
        elif files:
            log.info("%s: %s: MERGE (the append was refused: %s)", table, what, outcome)
            self._merge_files(files, rows_app, what)
        if not self._committed:  # the files are no data files of the table
            self.discard()
        self._apply_window_changes(changes, app, what, window_range)
        return []

    def _refuse(self, dt) -> bool:
        """Whether the window's files may not be committed as they are on the version ``dt``: a TRUNCATE or DROP
        emptied the table (the MERGE's insert guard keeps older rows out), its columns changed since the window
        opened (the MERGE stops the job), or rows of its retried chunks an earlier attempt wrote may be in it
        (the MERGE makes those it lacks tombstones)."""
        return EMPTIED_PROPERTY in dt.metadata().configuration or \
            [(f.name, f.type) for f in self.sink._arrow_schema(dt)] != [(f.name, f.type) for f in self.schema] or \
            (bool(self.retried) and may_hold_chunks(dt, self.epoch, self.retried))

    def _data_files(self, rel: str) -> list:
        """The Parquet files Spark wrote in ``rel`` under the table's directory, with their footers' statistics
        (``footer_data_file``); files without a row deleted."""
        from airflow_cdc_provider.sinks.delta_append import footer_data_file, stats_columns

        storage = self.sink.layout.storage
        columns = stats_columns(self.sink.open_table(self.table))
        files = []
        for name in storage.listdir(f"{self.table_dir}/{rel}"):
            written = footer_data_file(self.sink.config.path, self.table_dir, f"{rel}/{name}", self.schema, columns)
            if written is None:
                storage.delete(f"{self.table_dir}/{rel}/{name}")
            else:
                files.append(written)
        return files

    def _carry(self, files: list, taken: list) -> list | None:
        """Spark: for a replacement of the table's files ``taken`` by the window's ``files`` (``replace_files``),
        the rows of ``taken`` whose keys the window lacks, unchanged, as data files in the window's directory. None
        when a row of ``taken`` the window holds the key of is one a MERGE would keep (newer than the low
        watermark: the stream wrote it after it; or a tombstone of that very version), or Spark cannot read
        ``taken`` as the table's columns and types."""
        from urllib.parse import unquote

        from pyspark.sql import functions as F

        from airflow_cdc_provider.spark.session import observation

        storage, keys = self.sink.layout.storage, list(self.types.schema.key_columns)
        carried = f"{self.dir}/carried"
        storage.rmtree(f"{self.table_dir}/{carried}")  # an earlier attempt's, for other files
        self._carried_rows = 0
        if not taken:
            return []
        lw = self.low_watermark
        try:
            old = self.sink.spark.read.option("mergeSchema", "true").parquet(
                *[storage.location(f"{self.table_dir}/{unquote(f.path)}") for f in taken])
            window = self.sink.spark.read.parquet(
                *[storage.location(f"{self.table_dir}/{f.path}") for f in files]).select(*keys) \
                .withColumn(IN_WINDOW, F.lit(True))
            replaced = f"({older_than(None, lw)} OR ({same_version(None, lw)} AND NOT {DELETED}))"
            # one pass over the replaced files: the rows the window lacks written, those it holds counted when
            # newer than it (then the carried files are discarded with the window's, and the window MERGEd)
            counted = observation(self.sink.spark, f"airflow_cdc_carry_{uuid.uuid4().hex}")
            joined = old.join(window, keys, "left").observe(
                counted, F.count_if(F.col(IN_WINDOW).isNotNull() & ~F.expr(replaced)).alias("newer"))
            written = self._write_files(joined.where(F.col(IN_WINDOW).isNull()).select(*self._columns({})), carried)
            if counted.get["newer"]:
                log.info("%s: a row the window would replace is newer than it", self.table)
                return None
        except Exception as exc:  # a MERGE does it row by row whatever the files hold
            log.warning("%s: the files the window would replace are not read as the table's (%s)", self.table,
                        str(exc).splitlines()[0])
            return None
        kept = self._data_files(carried)
        if kept and not self._conforms(kept[0]):
            log.info("%s: the carried rows' files do not have the table's types", self.table)
            return None
        self._carried_rows = sum(json.loads(f.stats)["numRecords"] for f in kept)
        check_written(f"{self.table}: the rows a replacement carries over: "
                      f"{self.sink.layout.storage.location(f'{self.table_dir}/{carried}')}", written,
                      self._carried_rows)
        return kept

    def discard(self) -> None:
        """The window's files, unless they were committed (not appended or replaced, or the job failed after the
        read): once committed, a later commit may remove them, and older versions still name them."""
        from airflow_cdc_provider.sinks.delta_append import DataFile, delete_unreferenced

        if self._committed:
            return
        storage, table = self.sink.layout.storage, self.sink.open_table(self.table)
        for sub in ("carried", ""):  # the rows a replacement carries over, then the window's own
            where = f"{self.dir}/{sub}".rstrip("/")
            written = [DataFile(f"{where}/{n}", 0, 0, "{}") for n in storage.listdir(f"{self.table_dir}/{where}")
                       if n.endswith(".parquet")]
            delete_unreferenced(storage, self.table_dir, table, written)
            if not storage.listdir(f"{self.table_dir}/{where}"):
                storage.rmtree(f"{self.table_dir}/{where}")

    def _conforms(self, data_file) -> bool:
        """Whether a written file's columns have exactly the table's types (what its readers take them as)."""
        import pyarrow.parquet as pq

        with self.sink.layout.storage.open(f"{self.table_dir}/{data_file.path}", "rb") as f:
            written = pq.read_schema(f)
        return [(f.name, f.type) for f in written] == [(f.name, f.type) for f in self.schema]

    def _merge_files(self, files, app: tuple[str, int] | None, what: str) -> None:
        """MERGE the rows of the window's ``files``, in pieces of at most ``MERGE_PIECE_ROWS`` rows (files of
        neighbouring key ranges, for a single integer key): delta-rs holds a MERGE's source rows in memory. Only
        the last piece's commit carries ``app``. Each MERGE is bounded by its rows' range of the bounding key column
        (by the files' statistics of an integer key, else read from the rows: ``first_key_range``), which
        ``DeltaSink._merge`` cuts further by the table's files. Retried chunks: all the files in one
        ``DeltaSink._merge_retried``, whose tombstones are the earlier attempt's rows none of them holds."""
        import pyarrow as pa

        storage, table = self.sink.layout.storage, self.table
        keys = list(self.types.schema.key_columns)

        def source_of(piece):
            paths = [storage.path(f"{self.table_dir}/{f.path}") for f in piece]

            def source(schema):
                batches = self.sink.layout.files(paths).to_batches(batch_size=BATCH_ROWS, batch_readahead=READ_AHEAD,
                                                                   fragment_readahead=1)
                return pa.RecordBatchReader.from_batches(schema, (conform(b, schema, table) for b in batches))

            return paths, source

        if self.retried:
            self.sink._merge_retried(table, keys, source_of(files)[1], app, what, self.epoch, self.retried,
                                     self.low_watermark)
            return
        by = keys[0] if len(keys) == 1 and pa.types.is_integer(self.schema.field(keys[0]).type) else None
        pieces = merge_pieces(files, by)
        for n, (piece, key_range) in enumerate(pieces, 1):
            paths, source = source_of(piece)
            if key_range is None:  # no integer key statistics: the range read from the rows
                key_range = dataset_key_range(self.sink.layout.files(paths), keys)
            self.sink._merge(table, keys, source, app if n == len(pieces) else None,
                             what if len(pieces) == 1 else f"{what} (part {n} of {len(pieces)})", snapshot=True,
                             key_range=key_range)

    def _apply_window_changes(self, changes, app: tuple[str, int], what: str,
                              key_range: KeyRange | None) -> None:
        """The binlog window onto the window's rows, as the stream would apply it: its TRUNCATE, then each
        touched key's last change under its own position (a delete as a tombstone), the last of these commits
        carrying the window's application transaction ``app``; the counts then are the window's live rows per
        chunk (in a re-snapshot, as of the stream's commits so far). ``key_range``: the smallest and largest key of
        the window's files (a single key), within which, or the last changes' keys, all the window's rows are."""
        import pyarrow as pa
        import pyarrow.compute as pc
        from pyspark.sql import functions as F

        from airflow_cdc_provider.spark.window_fold import last_changes_frame

        sink, table, keys = self.sink, self.table, list(self.types.schema.key_columns)
        tags = [f"{self.epoch}:{i}" for i in self.indexes]
        if changes.truncate is not None:
            at = changes.truncate.sort_key
            sink._tombstone(table, older_than(None, at), "t", at, f"{what}, the TRUNCATE in its binlog window",
                            app=None if changes.last else app)
        if changes.last:
            frame = last_changes_frame(sink.spark, self.types, changes.last)
            last = frame.select(*cols(self.types.schema.column_names), *cols(META_NAMES),
                                (col("_cdc_op") == "d").alias(DELETED),
                                F.concat(F.lit(f"{self.epoch}:"), col(CHUNK_COLUMN).cast("string")).alias(CHUNK)
                                ).toArrow()
            last_range = first_key_range(last, keys)

            sink._merge(table, keys, rows_source(last, table), app, f"{what}, the last changes of its binlog window",
                        snapshot=True, key_range=last_range, take_over=False)
            key_range = None if key_range is None or last_range is None else span(key_range, last_range)
        if changes.touched or changes.truncated:
            in_range = [] if key_range is None else [(key_range.column, ">=", key_range.low),
                                                     (key_range.column, "<=", key_range.high)]
            live = sink.open_table(table).to_pyarrow_table(columns=[CHUNK],
                                                           filters=[(DELETED, "=", False), *in_range])
            tagged = live.column(0).cast(pa.string())
            tagged = tagged.filter(pc.is_in(tagged, value_set=pa.array(tags)))
            counts = {vc["values"]: vc["counts"] for vc in pc.value_counts(tagged).to_pylist()}
            self.counts = {i: counts.get(f"{self.epoch}:{i}", 0) for i in self.indexes}


class _Once:
    """A hook that runs at most once."""

    def __init__(self, hook: Hook) -> None:
        self.hook, self.done = hook, False

    def __call__(self) -> None:
        if not self.done:
            self.done = True
            self.hook()


def snapshot_rows(batch, epoch: int, version: Version):
    """A window's rows (data columns and ``CHUNK_COLUMN``) with the sink's columns of snapshot rows at
    ``version``."""
    import pyarrow as pa
    import pyarrow.compute as pc

    seq, pos, row = version
    n = batch.num_rows
    chunk = pc.binary_join_element_wise(pa.scalar(f"{epoch}"), batch.column(CHUNK_COLUMN).cast(pa.string()), ":")
    extra = {"_cdc_op": pa.repeat(pa.scalar("r"), n), "_cdc_ts_ms": pa.repeat(pa.scalar(0, pa.int64()), n),
             "_cdc_file_seq": pa.repeat(pa.scalar(seq, pa.int64()), n),
             "_cdc_pos": pa.repeat(pa.scalar(pos, pa.int64()), n),
             "_cdc_row": pa.repeat(pa.scalar(row, pa.int32()), n), DELETED: pa.repeat(pa.scalar(False), n),
             CHUNK: chunk}
    return pa.RecordBatch.from_arrays([*batch.columns, *extra.values()], names=[*batch.schema.names, *extra])


def snapshot_batch(batch, schema, epoch: int, version: Version, table: str):
    """``snapshot_rows`` as the table's columns, in its order and types (what a data file of it holds)."""
    return conform(snapshot_rows(batch, epoch, version), schema, table)
