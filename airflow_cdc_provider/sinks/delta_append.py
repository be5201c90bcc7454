"""A snapshot window appended to its Delta table: data files the executors wrote, committed by the driver as one
delta-rs commit of their add actions (no MERGE, no row through the driver), or of those and the remove actions
of the table's files they replace.

An append writes each key it holds without looking at the table, so it is correct only when the table holds no
row, live or tombstone, of any key of the window, and nothing can commit one between that check and the append.
The check: every file of the table version read must be disjoint from the window's key range by its statistics
(the smallest and largest value of a key column of an ``orderable_key`` type: an integer, string, date or
decimal without a fraction, strings in the order of their bytes; a file without them may hold anything), or
hold rows of other chunks of the window's epoch only (``OwnChunks``), or the table has no file at all. The commit is made on exactly that version (``max_commit_retries=0``): delta-rs
rebases a blind append over concurrent commits without looking at them, so with retries a stream batch or a
retried chunk committed meanwhile would be passed over; without, any commit after the checked version makes the
append fail, and the next attempt checks the new version. Parallel snapshot tasks (disjoint key ranges) thus
append one after the other. The other way round, a writer that read the table before the append and commits
after it must not pass it over either: the append's commit says it is no blind append (it depends on what it
read), so the conflict check of a MERGE that read the window's range (the stream's) fails it, and the MERGE runs
again on the table with the window in it, under the version guard.

A window whose key range files of the table may overlap (a re-snapshot's: the earlier epoch's files span the
table's keys; a first snapshot's over files the stream or a compaction wrote) replaces them instead
(``replace_files``): one commit removes those files and adds the window's, with the rows of the removed files
whose keys the window lacks carried over unchanged, when no row of theirs that the window holds the key of is
newer than the window's. What stays a MERGE (``DeltaSink``): windows with
retried chunks that a file of the table may hold rows of (an earlier attempt committed some of their keys, and
its rows the new one lacks must become tombstones; ``may_hold_values``), tables a TRUNCATE or DROP emptied (the
insert guard), a window holding a key the stream wrote after the window began, and every window of a table
without such a key column once the table has a file of others than the epoch's other chunks (a
re-snapshot's; one after the stream wrote). A re-snapshot's window over keys no file covers appends: nothing of
the table, and nothing committed meanwhile, holds them.

The files are the table's own: its columns in its order and types (``conform``), and statistics in the forms
delta-rs writes (``_stat_value``), which its readers prune files by and the next windows' checks read.

A replayed window (its application transaction committed already) commits nothing. Files written by an attempt
that does not commit are deleted when it falls back to the MERGE, or stay unreferenced (invisible to readers)
when the job dies first: a full VACUUM (``vacuum(full=True)``, the maintenance's) removes those once older than
its retention; delta-rs's default one removes only files a commit removed.
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from dataclasses import asdict, dataclass
from typing import Any, Callable, Iterable, Iterator, Literal

from airflow_cdc_provider.state.storage import Storage

log = logging.getLogger("airflow_cdc.delta")

WRITE_KEY = "airflow_cdc.write"  # commit metadata: how a snapshot window's files went in, "append" or "replace"
FILE_RECORD_DDL = "path string, size bigint, modification_time bigint, stats string"
APPEND_RETRIES = 20
CARRIES = 3  # times a replacement reads the files it replaces again, when commits keep changing them

Outcome = Literal["appended", "replaced", "committed before", "may overlap", "refused", "newer rows", "contended"]


@dataclass(frozen=True)
class DataFile:
    """A Parquet data file written under the table's directory, as its add action needs it."""

    path: str  # relative to the table's directory
    size: int
    modification_time: int  # ms since the epoch
    stats: str  # Delta's per-file statistics (JSON), as delta-rs writes them

    def add_action(self):
        from deltalake.transaction import AddAction

        return AddAction(self.path, self.size, {}, self.modification_time, True, self.stats)

    def key_range(self, column: str) -> tuple[Any, Any] | None:
        stats = json.loads(self.stats)
        lo, hi = stats.get("minValues", {}).get(column), stats.get("maxValues", {}).get(column)
        return None if lo is None or hi is None else (lo, hi)


def stats_columns(dt) -> list[str]:
    """The columns whose statistics a data file of ``dt`` carries (``stats_columns_of``)."""
    return stats_columns_of([f.name for f in dt.schema().fields], dt.metadata().configuration)


def stats_columns_of(names: list[str], config) -> list[str]:
    """The columns (of ``names``) whose statistics a data file carries, by the table's properties ``config`` as
    delta-rs reads them: ``delta.dataSkippingStatsColumns``, else the first ``delta.dataSkippingNumIndexedCols``
    (32)."""
    if config.get("delta.dataSkippingStatsColumns"):
        wanted = {c.strip() for c in config["delta.dataSkippingStatsColumns"].split(",")}
        return [n for n in names if n in wanted]
    count = int(config.get("delta.dataSkippingNumIndexedCols", "32"))
    return names if count < 0 else names[:count]


def _stat_value(value, arrow_type, upper: bool):
    """A min or max as delta-rs writes it in a file's statistics (None: not writable). delta-rs's readers take a
    column whose min/max is absent from statistics that count its nulls as all NULL (and skip the file for any
    other value), so a column with a value gets both, in the forms delta-rs itself writes, or no statistics."""
    import math

    import pyarrow as pa

    if value is None:
        return None
    if pa.types.is_integer(arrow_type) or pa.types.is_boolean(arrow_type) or pa.types.is_string(arrow_type):
        return value
    if pa.types.is_floating(arrow_type):
        return value if math.isfinite(value) else None
    if pa.types.is_decimal(arrow_type):  # exact as text: delta-rs reads large JSON numbers through a float
        return format(value, "f")
    if pa.types.is_date(arrow_type):
        return value.isoformat()
    if pa.types.is_timestamp(arrow_type):  # milliseconds, truncated (readers widen a max by one)
        stamp = (f"{value.year:04d}-{value.month:02d}-{value.day:02d}{'T' if arrow_type.tz else ' '}"
                 f"{value.hour:02d}:{value.minute:02d}:{value.second:02d}")
        ms = value.microsecond // 1000
        return f"{stamp}.{ms:03d}Z" if arrow_type.tz else (f"{stamp}.{ms:03d}" if ms else stamp)
    return None


class _Stats:
    """A data file's statistics as delta-rs writes them: numRecords, and min, max and nullCount of each
    statistics column (binary ones have none, as delta-rs's own files), accumulated batch by batch. A file with
    NaN or an infinity in a float column states its row count only: readers order NaN differently (DataFusion and
    Polars after every number, pyarrow nowhere), so no min or max is right for all of them, and delta-rs's
    reader skips a file for any filter on a column whose min or max its statistics lack; with no min, max or
    null count at all, every reader reads the file (and no window check takes its keys to be known)."""

    def __init__(self, schema, columns: list[str]) -> None:
        import pyarrow as pa

        self.types = {f.name: f.type for f in schema if f.name in columns and not pa.types.is_binary(f.type)}
        self.rows = 0
        self.low: dict[str, Any] = {}
        self.high: dict[str, Any] = {}
        self.nulls = dict.fromkeys(self.types, 0)
        self.unbounded: set[str] = set()  # columns with a value no min or max can state (NaN, infinity)

    def add(self, batch) -> None:
        import pyarrow as pa
        import pyarrow.compute as pc

        self.rows += batch.num_rows
        for name, t in self.types.items():
            column = batch.column(name)
            self.nulls[name] += column.null_count
            if pa.types.is_floating(t) and not pc.all(pc.is_finite(column)).as_py():
                self.unbounded.add(name)
            if name in self.unbounded:
                continue
            mm = pc.min_max(column).as_py()
            if mm["min"] is None:  # all NULL
                continue
            self.low[name] = mm["min"] if name not in self.low else min(self.low[name], mm["min"])
            self.high[name] = mm["max"] if name not in self.high else max(self.high[name], mm["max"])

    def add_row_group(self, group, positions: dict[str, int]) -> None:
        """A row group of a Parquet file another writer wrote (Spark's executors), from its footer: what ``add``
        of its rows would find, where the footer states it. A column whose values the footer does not bound (a
        writer leaves out a min or max it finds too long) makes the file state its row count only, and so does a
        float column: a writer may leave NaN out of its min and max."""
        import pyarrow as pa

        self.rows += group.num_rows
        for name, t in self.types.items():
            stats = group.column(positions[name]).statistics if name in positions else None
            if stats is None or not stats.has_null_count or pa.types.is_floating(t):
                self.unbounded.add(name)
                continue
            self.nulls[name] += stats.null_count
            if name in self.unbounded or stats.null_count >= group.num_rows:  # all NULL
                continue
            try:  # pyarrow before 23 cannot read the statistics of a decimal stored as an integer
                low, high = (stats.min, stats.max) if stats.has_min_max else (None, None)
            except NotImplementedError:
                low = high = None
            if low is None or high is None:
                self.unbounded.add(name)
                continue
            self.low[name] = low if name not in self.low else min(self.low[name], low)
            self.high[name] = high if name not in self.high else max(self.high[name], high)

    def json(self) -> str:
        low, high = {}, {}
        for name, t in self.types.items():
            lo, hi = _stat_value(self.low.get(name), t, False), _stat_value(self.high.get(name), t, True)
            if name in self.unbounded or (self.nulls[name] < self.rows and (lo is None or hi is None)):
                return json.dumps({"numRecords": self.rows})
            if lo is not None:
                low[name], high[name] = lo, hi
        return json.dumps({"numRecords": self.rows, "minValues": low, "maxValues": high, "nullCount": self.nulls})


def write_data_file(storage_uri: str, table_dir: str, schema, columns: list[str], batches: Iterable[Any],
                    finish: Callable[[Any], Any]) -> DataFile | None:
    """Write ``batches`` (made the table's columns by ``finish``) as one Parquet file directly under the table's
    directory; None when they hold no row. Runs on an executor (or wherever the rows are)."""
    import pyarrow.parquet as pq

    storage = Storage(storage_uri, key="sink.path")
    name = f"part-{uuid.uuid4().hex}-c000.snappy.parquet"
    rel = f"{table_dir}/{name}"
    stats = _Stats(schema, columns)
    writer = sink = None
    try:
        for raw in batches:
            if not raw.num_rows:
                continue
            batch = finish(raw)
            if writer is None:
                sink = storage.open(rel, "wb")
                writer = pq.ParquetWriter(sink, schema, compression="snappy")
            writer.write_batch(batch)
            stats.add(batch)
    finally:
        if writer is not None:
            writer.close()
        if sink is not None:
            sink.close()
    if writer is None:
        return None
    return DataFile(name, int(storage.fs.size(storage.path(rel))), int(time.time() * 1000), stats.json())


def footer_data_file(storage_uri: str, table_dir: str, rel: str, schema, columns: list[str]) -> DataFile | None:
    """A data file Spark's executors wrote under the table's directory (``rel``: its path there), with the
    statistics its footer states (``_Stats.add_row_group``): the rows are not read. None when it holds no row."""
    import pyarrow.parquet as pq

    storage = Storage(storage_uri, key="sink.path")
    path = f"{table_dir}/{rel}"
    with storage.open(path, "rb") as f:
        meta = pq.read_metadata(f)
    if not meta.num_rows:
        return None
    stats = _Stats(schema, columns)
    positions = {meta.schema.column(i).path: i for i in range(meta.num_columns)}
    for g in range(meta.num_row_groups):
        stats.add_row_group(meta.row_group(g), positions)
    return DataFile(rel, int(storage.fs.size(storage.path(path))), int(time.time() * 1000), stats.json())


def tag_counts(storage_uri: str, paths: list[str], column: str) -> dict[str, int]:
    """Rows per value of the string column ``column`` over Parquet files (``paths`` under ``storage_uri``), read
    as dictionary indices, one row group at a time."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    storage = Storage(storage_uri, key="sink.path")
    counts: dict[str, int] = {}
    for path in paths:
        with storage.open(path, "rb") as f:
            parquet = pq.ParquetFile(f, read_dictionary=[column])
            for g in range(parquet.num_row_groups):
                for part in parquet.read_row_group(g, columns=[column]).column(0).chunks:
                    for vc in pc.value_counts(part.indices).to_pylist():
                        tag = part.dictionary[vc["values"]].as_py()
                        counts[tag] = counts.get(tag, 0) + vc["counts"]
    return counts


def rewrite_staged_file(storage_uri: str, rel: str, table_dir: str, schema, columns: list[str],
                        finish: Callable[[Any], Any]) -> DataFile | None:
    """One Parquet file Spark staged (``rel``: its path under ``storage_uri``), read by pyarrow and written as one
    data file of the table (``write_data_file``)."""
    storage = Storage(storage_uri, key="sink.path")
    with storage.open(rel, "rb") as staged:
        return write_data_file(storage_uri, table_dir, schema, columns, staged_batches(staged), finish)


def staged_batches(staged) -> Iterator[Any]:
    """The rows of a staged Parquet file (an open binary file), one row group at a time with the next one read
    meanwhile: memory stays two row groups (``DeltaSink.stage`` keeps them small) however large the file.
    pyarrow's dataset scanner reads whole row groups ahead of a consumer slower than it, as a writer is."""
    from concurrent.futures import ThreadPoolExecutor

    import pyarrow.parquet as pq

    from airflow_cdc_provider.sinks.delta import BATCH_ROWS

    parquet = pq.ParquetFile(staged, coerce_int96_timestamp_unit="us")  # INT96 timestamps as Spark reads them
    groups = parquet.num_row_groups
    with ThreadPoolExecutor(1) as reader:
        ahead = reader.submit(parquet.read_row_group, 0) if groups else None
        for i in range(groups):
            group = ahead.result()
            if i + 1 < groups:
                ahead = reader.submit(parquet.read_row_group, i + 1)
            yield from group.to_batches(max_chunksize=BATCH_ROWS)


def write_data_files_from_staged(spark, staged: list[str], storage_uri: str, table_dir: str, schema,
                                 columns: list[str], finish: Callable[[Any], Any]) -> list[DataFile]:
    """Each Parquet file Spark staged (``staged``: paths under ``storage_uri``) rewritten by one executor's
    pyarrow as one data file of the table (``rewrite_staged_file``): the rows go through no Spark reader or row
    conversion again. Only the files' records (path, size, statistics) reach the driver."""
    import pyarrow as pa

    record_schema = pa.schema([("path", pa.string()), ("size", pa.int64()), ("modification_time", pa.int64()),
                               ("stats", pa.string())])

    def write(batches: Iterator[Any]) -> Iterator[Any]:
        for batch in batches:
            for rel in batch.column(0).to_pylist():
                written = rewrite_staged_file(storage_uri, rel, table_dir, schema, columns, finish)
                if written is not None:
                    yield pa.RecordBatch.from_pylist([asdict(written)], schema=record_schema)

    if not staged:
        return []
    paths = spark.createDataFrame([(p,) for p in staged], "path string").repartition(len(staged))
    return [DataFile(**r.asDict()) for r in paths.mapInArrow(write, FILE_RECORD_DDL).collect()]


def write_data_files_here(staged: list[str], storage_uri: str, table_dir: str, schema, columns: list[str],
                          finish: Callable[[Any], Any], workers: int) -> list[DataFile]:
    """``write_data_files_from_staged`` in this process, ``workers`` files at a time (pyarrow reads, encodes and
    writes without the GIL): where the executors are this machine (Spark's local mode), without starting
    Spark's Python workers."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max(1, workers)) as pool:
        written = pool.map(lambda rel: rewrite_staged_file(storage_uri, rel, table_dir, schema, columns, finish),
                           staged)
        return [f for f in written if f is not None]


def window_ranges(files: list[DataFile], key_columns: list[str], schema) -> dict[str, tuple[Any, Any]]:
    """The smallest and largest value of each key column of an ``orderable_key`` type over the window's files (of
    those the table keeps statistics of; none: ``may_overlap`` takes any file of the table to overlap), as the
    table's add actions state them (``stated_key``). Strings in the order of their bytes, whatever the source's
    collation: ranges disjoint in that order share no key of equal bytes, which is how the table's MERGEs match
    keys. Statistics delta-rs truncates (strings beyond 64 characters) still bound the column: a shorter minimum,
    a larger maximum."""
    from airflow_cdc_provider.sinks.delta import orderable_key, stated_key

    out: dict[str, tuple[Any, Any]] = {}
    for column in key_columns:
        kind = schema.field(column).type
        if not orderable_key(kind):
            continue
        ranges = [f.key_range(column) for f in files]
        if any(r is None for r in ranges):  # not a statistics column of the table: no range to tell apart by
            continue
        out[column] = (min(stated_key(r[0], kind) for r in ranges), max(stated_key(r[1], kind) for r in ranges))
    return out


@dataclass(frozen=True)
class TableFile:
    """A data file the table holds, as a remove action names it."""

    path: str  # relative to the table's directory, as its add action states it
    size: int


@dataclass(frozen=True)
class OwnChunks:
    """The chunks of a snapshot window, as the rows they write are tagged in ``column`` ("<epoch>:<index>"). The
    chunks of one epoch split the table's keys, each writing keys of its own range only, and a later change of a
    row keeps its key and its tag; so a file each row of which is tagged with another chunk of the same epoch
    holds no key of the window, whatever the keys' type and order (tombstones included)."""

    column: str
    epoch: int
    tags: tuple[str, ...]

    def others_only(self, rows, nulls: dict, low: dict, high: dict) -> bool:
        """Whether a file, by its statistics (row count; null count, min and max of each column), holds rows of
        other chunks of the epoch only: no row without a tag (the stream's), and none in the range of tags (in
        string order, which keeps an epoch's tags between its prefix's) that holds one of the window's."""
        lo, hi, prefix = low.get(self.column), high.get(self.column), f"{self.epoch}:"
        return (rows is not None and nulls.get(self.column) == 0 and isinstance(lo, str) and isinstance(hi, str)
                and lo.startswith(prefix) and hi.startswith(prefix) and not any(lo <= t <= hi for t in self.tags))


def overlapping_files(dt, ranges: dict[str, tuple[Any, Any]], own: OwnChunks | None = None) -> list[TableFile]:
    """The files of ``dt`` that may hold a key in ``ranges``: all but those lying outside the range of some
    key column by their statistics (keys are NOT NULL, so a key of the window equals no key of such a
    file), and those holding rows of other chunks of the window's epoch only (``own``). Without either, or
    without statistics, every file."""
    import pyarrow as pa

    actions = pa.table(dt.get_add_actions(flatten=False))
    files = [TableFile(p, s) for p, s in zip(actions.column("path").to_pylist(),
                                             actions.column("size_bytes").to_pylist(), strict=True)]
    names = actions.column_names
    if not (ranges or own) or "min" not in names or "max" not in names:
        return files

    def disjoint(low: dict, high: dict) -> bool:
        return any(low.get(c) is not None and high.get(c) is not None and (high[c] < lo or low[c] > hi)
                   for c, (lo, hi) in ranges.items())

    def clear(rows, nulls: dict, low: dict, high: dict) -> bool:
        """The file holds no key of the window."""
        return disjoint(low, high) or (own is not None and own.others_only(rows, nulls, low, high))

    def column(name: str) -> list:
        return actions.column(name).to_pylist() if name in names else [None] * len(files)

    return [f for f, rows, nulls, low, high in zip(files, column("num_records"), column("null_count"),
                                                   column("min"), column("max"), strict=True)
            if not clear(rows, nulls or {}, low or {}, high or {})]


def may_hold_values(dt, column: str, values: list[str]) -> bool:
    """Whether a file of ``dt`` may hold one of the strings ``values`` in ``column``: one whose statistics do
    not bound the column away from all of them (a file with no statistics of it may hold anything; one whose
    column is all NULL holds none)."""
    import pyarrow as pa

    actions = pa.table(dt.get_add_actions(flatten=True)).to_pylist()
    for a in actions:
        rows, nulls = a.get("num_records"), a.get(f"null_count.{column}")
        if rows is not None and nulls is not None and nulls >= rows:
            continue
        low, high = a.get(f"min.{column}"), a.get(f"max.{column}")
        if low is None or high is None or any(low <= v <= high for v in values):
            return True
    return False


def held_paths(dt) -> set[str]:
    """The paths (relative to the table's directory) of the data files version ``dt`` holds."""
    import pyarrow as pa

    return set(pa.table(dt.get_add_actions()).column("path").to_pylist())


def may_overlap(dt, ranges: dict[str, tuple[Any, Any]], own: OwnChunks | None = None) -> bool:
    """Whether a file of ``dt`` may hold a key in ``ranges`` (``overlapping_files``)."""
    return bool(overlapping_files(dt, ranges, own))


def _commit_checked(open_table: Callable[[], Any], files: list[DataFile], app: tuple[str, int] | None, what: str,
                    how: Literal["append", "replace"], refuse: Callable[[Any], bool],
                    actions_for: Callable[[Any], list | Outcome]) -> Outcome:
    """One commit adding ``files`` with the file actions ``actions_for(dt)`` gives for the table version ``dt``
    read (or, instead, the outcome it names), carrying ``app`` (if any), on exactly that version (see the
    module's docstring): a commit after it makes the next attempt read the new version. ``refuse(dt)``: another
    reason the commit would be wrong on that version. A version already holding ``files`` is an attempt that
    committed though it reported a conflict."""
    from deltalake.transaction import CommitProperties, Transaction

    from airflow_cdc_provider.sinks.delta import is_conflict

    landed: Outcome = "appended" if how == "append" else "replaced"
    for n in range(APPEND_RETRIES):
        dt = open_table()
        done = dt.transaction_version(app[0]) if app is not None else None
        if done is not None and done >= app[1]:
            return "committed before"
        if n and files and files[0].path in held_paths(dt):
            return landed
        if refuse(dt):
            return "refused"
        actions = actions_for(dt)
        if isinstance(actions, str):
            return actions
        props = CommitProperties(custom_metadata={"airflow_cdc": what, WRITE_KEY: how, "isBlindAppend": False},
                                 max_commit_retries=0,
                                 app_transactions=[Transaction(app[0], app[1])] if app is not None else None)
        try:
            dt.create_write_transaction(actions, "append", dt.schema(), commit_properties=props)
            return landed
        except Exception as exc:
            if not is_conflict(exc):
                raise
            log.info("%s: a commit landed after version %d; checking the %s again", what, dt.version(), how)
            time.sleep(min(5.0, 0.2 * (n + 1)))
    return "contended"


def append_files(open_table: Callable[[], Any], files: list[DataFile], ranges: dict[str, tuple[Any, Any]],
                 app: tuple[str, int] | None, what: str, refuse: Callable[[Any], bool],
                 own: OwnChunks | None = None) -> Outcome:
    """Commit ``files`` as one append carrying ``app`` (if any), on exactly the table version checked, if no file
    of that version may hold a key in ``ranges`` (or is of other chunks of ``own``'s epoch only);
    ``refuse(dt)``: another reason the append would be wrong."""
    def actions_for(dt) -> list | Outcome:
        return "may overlap" if may_overlap(dt, ranges, own) else [f.add_action() for f in files]

    return _commit_checked(open_table, files, app, what, "append", refuse, actions_for)


def replace_files(open_table: Callable[[], Any], files: list[DataFile], ranges: dict[str, tuple[Any, Any]],
                  app: tuple[str, int] | None, what: str, refuse: Callable[[Any], bool],
                  carry: Callable[[list[TableFile]], list[DataFile] | None], own: OwnChunks | None = None) -> Outcome:
    """Commit ``files`` in place of every file of the table that may hold a key in ``ranges`` (``taken``, by
    ``overlapping_files`` with ``own``), as one
    commit of their remove and add actions carrying ``app``, on exactly the version read (as ``append_files``).
    ``carry(taken)`` returns data files holding the rows of ``taken`` whose keys ``files`` lack, unchanged (added
    in the same commit), or None when a row of ``taken`` that ``files`` would replace is newer than theirs: then
    a MERGE must decide row by row. Carried files are written again only when ``taken`` changed, at most
    ``CARRIES`` times (then "contended": commits keep landing in the window's range)."""
    from deltalake.transaction import RemoveAction

    carried: tuple[frozenset[str], list[DataFile]] | None = None
    carries = 0

    def actions_for(dt) -> list | Outcome:
        nonlocal carried, carries
        taken = overlapping_files(dt, ranges, own)
        if carried is None or carried[0] != frozenset(f.path for f in taken):
            if carries == CARRIES:
                return "contended"
            carries += 1
            kept = carry(taken)
            if kept is None:
                return "newer rows"
            carried = (frozenset(f.path for f in taken), kept)
        now = int(time.time() * 1000)
        return ([RemoveAction(f.path, True, now, f.size) for f in taken]
                + [f.add_action() for f in files + carried[1]])

    return _commit_checked(open_table, files, app, what, "replace", refuse, actions_for)


def delete_unreferenced(storage: Storage, table_dir: str, dt, files: list[DataFile]) -> None:
    """Delete the files of an append that did not commit (never one the table references)."""
    referenced = held_paths(dt) if dt is not None else set()
    for f in files:
        if f.path not in referenced:
            storage.delete(f"{table_dir}/{f.path}")
