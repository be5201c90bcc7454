"""The delta sink's append path (``sinks/delta_append``) through delta-rs alone, no Spark: data files written by
the same writer the executors run (record batches built with pyarrow as they get them), committed by
``append_files``.

* every reader (delta-rs's pyarrow dataset, pandas, Polars, DataFusion) filtering an appended table on any
  column finds exactly what it finds in the same rows without statistics: no statistic makes it skip a file
  holding a match;
* an append commits on exactly the version it checked, whatever committed after it (MERGE, update, compaction);
  a MERGE or a tombstoning update that read the table before an append and commits after it conflicts when its
  range holds the appended keys;
* files of an append that does not commit are deleted, or stay invisible; a replayed window commits nothing.
"""

from __future__ import annotations

import datetime as dt
import json
import re
from dataclasses import replace
from decimal import Decimal
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake
from deltalake.exceptions import CommitFailedError
from deltalake.query import QueryBuilder
from deltalake.transaction import CommitProperties

from airflow_cdc_provider.sinks.delta import is_conflict, older_than
from airflow_cdc_provider.sinks.delta_append import (
    CARRIES,
    WRITE_KEY,
    OwnChunks,
    append_files,
    delete_unreferenced,
    stats_columns,
    window_ranges,
    write_data_file,
)
from airflow_cdc_provider.state.storage import Storage

try:
    import polars
except ImportError:  # Polars is optional: only its reader is left out
    polars = None

UTC = dt.timezone.utc
# the Arrow types the sink's columns take (sinks/types.py), and its own columns
KINDS = pa.schema([
    ("id", pa.int64()), ("i8", pa.int8()), ("i16", pa.int16()), ("i32", pa.int32()),
    ("u64", pa.decimal128(20, 0)), ("dec", pa.decimal128(10, 3)), ("f32", pa.float32()), ("f64", pa.float64()),
    ("s", pa.string()), ("bin", pa.binary()), ("d", pa.date32()), ("ts", pa.timestamp("us", tz="UTC")),
    ("ntz", pa.timestamp("us")), ("bo", pa.bool_()), ("_cdc_deleted", pa.bool_()),
])
# a window's three data files (three executors'): extremes of every type, values the statistics round
# (timestamps to milliseconds, float32), long and non-ASCII strings, NULLs in every column but the key; the third
# file holds NaN and infinities, which no statistics can bound
KIND_FILES = [
    [dict(id=1, i8=-128, i16=-32768, i32=-2**31, u64=Decimal("18446744073709551615"), dec=Decimal("-1234567.891"),
          f32=0.1, f64=-1e300, s="zeta ü😀", bin=b"\xff\x00", d=dt.date(1, 1, 1),
          ts=dt.datetime(1970, 1, 1, 0, 0, 0, 999999, tzinfo=UTC), ntz=dt.datetime(2024, 5, 6, 7, 8, 9, 999),
          bo=True, _cdc_deleted=False),
     dict(id=2, i8=5, i16=32767, i32=2**31 - 1, u64=Decimal("9223372036854775808"), dec=Decimal("0.001"),
          f32=-2.25, f64=1e-300, s="a" * 40 + "é", bin=b"", d=dt.date(9999, 12, 31),
          ts=dt.datetime(2038, 1, 19, 3, 14, 7, 1, tzinfo=UTC), ntz=dt.datetime(1969, 12, 31, 23, 59, 59, 999999),
          bo=False, _cdc_deleted=False)],
    [dict(id=10, i8=127, i16=None, i32=0, u64=Decimal(0), dec=None, f32=None, f64=2.5, s="é" * 40, bin=None,
          d=None, ts=None, ntz=None, bo=None, _cdc_deleted=True),
     dict(id=11, i8=None, i16=7, i32=None, u64=Decimal(12), dec=Decimal("99.5"), f32=3.0, f64=-0.0, s="",
          bin=b"\x00", d=dt.date(2000, 2, 29), ts=dt.datetime(1960, 6, 1, 12, 0, 0, 500, tzinfo=UTC),
          ntz=dt.datetime(2024, 5, 6, 7, 8, 9), bo=True, _cdc_deleted=False)],
    [dict(id=20, i8=1, i16=1, i32=1, u64=Decimal(1), dec=Decimal(1), f32=float("inf"), f64=float("nan"), s="m",
          bin=b"m", d=dt.date(2001, 1, 1), ts=dt.datetime(2001, 1, 1, tzinfo=UTC), ntz=dt.datetime(2001, 1, 1),
          bo=False, _cdc_deleted=False),
     dict(id=21, i8=2, i16=2, i32=2, u64=Decimal(2), dec=Decimal(2), f32=1.0, f64=float("-inf"), s="n",
          bin=b"n", d=dt.date(2001, 1, 2), ts=dt.datetime(2001, 1, 2, tzinfo=UTC), ntz=dt.datetime(2001, 1, 2),
          bo=True, _cdc_deleted=False)],
]


def new_table(root: Path, schema: pa.Schema, name: str = "t", configuration: dict | None = None) -> str:
    uri = str(root / name)
    DeltaTable.create(uri, schema, configuration=configuration)
    return uri


def window_files(root: Path, table: str, schema: pa.Schema, rows: list[dict]) -> list:
    """One data file of ``rows``, written as an executor writes it (the table's statistics columns)."""
    dt_ = DeltaTable(str(root / table))
    batch = pa.RecordBatch.from_pylist(rows, schema=schema)
    return [write_data_file(str(root), table, schema, stats_columns(dt_), [batch], lambda b: b)]


def append(root: Path, table: str, schema: pa.Schema, files: list, app: tuple[str, int], opened=None) -> str:
    """``append_files`` of ``files``; ``opened``: table handles to check before fresh ones (a stale one)."""
    uri = str(root / table)
    handles = iter(opened or [])
    return append_files(lambda: next(handles, None) or DeltaTable(uri), files,
                        window_ranges(files, ["id"], schema), app, f"window {app[0]}", refuse=lambda d: False)


def data_files(uri: str) -> set[str]:
    return {p.name for p in Path(uri).glob("*.parquet")}


def keys(uri: str) -> list[int]:
    return sorted(DeltaTable(uri).to_pyarrow_table(columns=["id"]).column("id").to_pylist())


def sql_literal(value, arrow_type: pa.DataType) -> str:
    """``value`` as a DataFusion SQL literal of ``arrow_type``."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        return "'" + value.replace("'", "''") + "'"
    if isinstance(value, bytes):
        return f"X'{value.hex()}'"
    if isinstance(value, Decimal):
        text, target = str(value), f"Decimal128({arrow_type.precision}, {arrow_type.scale})"
    elif isinstance(value, float):
        text, target = repr(value), "Float32" if arrow_type == pa.float32() else "Float64"
    elif isinstance(value, dt.datetime):
        zone = 'Some("UTC")' if value.tzinfo else "None"
        text, target = value.isoformat(), f"Timestamp(Microsecond, {zone})"
    else:
        text, target = value.isoformat(), "Date32"
    return f"arrow_cast('{text}', '{target}')"


def readers(uri: str, schema: pa.Schema = KINDS):
    """Each reader's ids of the rows meeting ``column op value``, by name."""
    table = DeltaTable(uri)

    def with_pyarrow(c, op, v):
        return table.to_pyarrow_table(filters=[(c, op, v)], columns=["id"]).column("id").to_pylist()

    def with_pandas(c, op, v):
        return table.to_pandas(filters=[(c, op, v)], columns=["id"])["id"].tolist()

    session = QueryBuilder().register("t", table)

    def with_datafusion(c, op, v):
        sql = f'SELECT id FROM t WHERE "{c}" {op} {sql_literal(v, schema.field(c).type)}'
        result = session.execute(sql)
        return pa.RecordBatchReader.from_stream(result).read_all().column("id").to_pylist()

    out = {"delta-rs pyarrow": with_pyarrow, "pandas": with_pandas, "datafusion": with_datafusion}
    if polars is not None:
        frame = polars.scan_delta(uri)
        dtypes = frame.collect_schema()

        def with_polars(c, op, v):
            lit = polars.lit(v, dtype=dtypes[c])
            test = {"=": polars.col(c) == lit, ">=": polars.col(c) >= lit, "<=": polars.col(c) <= lit}[op]
            return frame.filter(test).select("id").collect()["id"].to_list()

        out["polars"] = with_polars
    return out


def test_every_reader_finds_every_value_of_appended_files(tmp_path):
    """Filtering on each column by its smallest, largest and a middle value (and NaN), with =, >= and <=, every
    reader gives the appended table exactly the rows it gives a table of the same rows without statistics (with
    a NaN to compare with, at least those)."""
    uri = new_table(tmp_path, KINDS)
    files = [f for rows in KIND_FILES for f in window_files(tmp_path, "t", KINDS, rows)]
    assert [sorted(json.loads(f.stats)) for f in files[1:]] == [
        ["maxValues", "minValues", "nullCount", "numRecords"], ["numRecords"]]
    assert append(tmp_path, "t", KINDS, files, ("w", 1)) == "appended"
    plain = new_table(tmp_path, KINDS, "plain", {"delta.dataSkippingNumIndexedCols": "0"})
    write_deltalake(plain, pa.Table.from_pylist([r for rows in KIND_FILES for r in rows], schema=KINDS),
                    mode="append")
    assert not any(json.loads(a["add"]["stats"] or "{}").get("minValues")
                   for f in (Path(plain) / "_delta_log").glob("*.json") for a in map(json.loads, f.open())
                   if "add" in a), "the table to compare with has statistics"
    every = [r for rows in KIND_FILES for r in rows]
    stored = [DeltaTable(u).to_pyarrow_table().sort_by("id").to_pylist() for u in (uri, plain)]
    assert repr(stored[0]) == repr(stored[1]) and len(stored[0]) == len(every)  # repr: NaN equals NaN
    appended, without_stats = readers(uri), readers(plain)
    checked = 0
    for column in KINDS.names:
        values = sorted({r[column] for r in every if r[column] is not None and r[column] == r[column]})
        probes = {values[0], values[-1], values[len(values) // 2]}
        if pa.types.is_floating(KINDS.field(column).type):
            probes.add(float("nan"))
        for value in probes:
            for op in ("=", ">=", "<="):
                for name, read in appended.items():
                    want = sorted(without_stats[name](column, op, value))
                    got = sorted(read(column, op, value))
                    skipped = [r for r in every if r["id"] in set(want) - set(got)]
                    # DataFusion orders NaN after every number, but prunes by the Parquet footer's min and max,
                    # which leave NaN out (the Parquet format's rule, pyarrow's and delta-rs's writers alike)
                    assert not skipped or (name == "datafusion" and all(r[column] != r[column] for r in skipped)), \
                        f"{name}: {column} {op} {value!r} skipped {[r['id'] for r in skipped]}"
                    # pyarrow compares with a NaN as true where a file's statistics bound the column (delta-rs's
                    # own files alike): the rows it reads are a reader's matter, not the statistics'
                    assert got == want or value != value or skipped, \
                        f"{name}: {column} {op} {value!r} gave {got}, without statistics {want}"
                    checked += 1
                if op == "=" and value == value:
                    assert want, f"{column} = {value!r} found nothing at all"
    assert checked >= len(KINDS.names) * 3 * 3


def test_footer_statistics_are_those_of_the_rows(tmp_path):
    """A data file another writer wrote (Spark's executors, for a written window) states, from its Parquet
    footer, the statistics the rows themselves give: row groups combined, NULL-only and oversized values left
    unbounded as the rows' own statistics leave them; a float column makes it state its row count only."""
    import pyarrow.parquet as pq

    from airflow_cdc_provider.sinks.delta_append import footer_data_file

    no_floats = pa.schema([f for f in KINDS if not pa.types.is_floating(f.type)])
    uri = new_table(tmp_path, no_floats, "t")
    columns = stats_columns(DeltaTable(uri))
    rows = [{k: v for k, v in r.items() if k in no_floats.names} for r in KIND_FILES[0] + KIND_FILES[1]]
    (tmp_path / "t" / "w").mkdir()
    pq.write_table(pa.Table.from_pylist(rows, schema=no_floats), tmp_path / "t" / "w" / "a.parquet",
                   row_group_size=1)  # four row groups
    from_footer = footer_data_file(str(tmp_path), "t", "w/a.parquet", no_floats, columns)
    from_rows = window_files(tmp_path, "t", no_floats, rows)[0]
    assert from_footer.path == "w/a.parquet"
    assert from_footer.size == (tmp_path / "t" / "w" / "a.parquet").stat().st_size
    assert json.loads(from_footer.stats) == json.loads(from_rows.stats)
    stated = json.loads(from_footer.stats)
    assert (stated["minValues"]["s"], stated["maxValues"]["s"]) == ("", "é" * 40)

    pq.write_table(pa.Table.from_pylist(rows[:1], schema=no_floats), tmp_path / "t" / "w" / "long.parquet",
                   write_statistics=["id"])  # only the key has a min and max in the footer
    assert json.loads(footer_data_file(str(tmp_path), "t", "w/long.parquet", no_floats, columns).stats) == \
        {"numRecords": 1}
    pq.write_table(pa.Table.from_pylist([], schema=no_floats), tmp_path / "t" / "w" / "empty.parquet")
    assert footer_data_file(str(tmp_path), "t", "w/empty.parquet", no_floats, columns) is None

    floats = new_table(tmp_path, KINDS, "f")
    (tmp_path / "f" / "w").mkdir()
    pq.write_table(pa.Table.from_pylist(KIND_FILES[0], schema=KINDS), tmp_path / "f" / "w" / "a.parquet")
    assert json.loads(footer_data_file(str(tmp_path), "f", "w/a.parquet", KINDS,
                                       stats_columns(DeltaTable(floats))).stats) == {"numRecords": 2}


def kv_table(root: Path) -> tuple[str, pa.Schema]:
    schema = pa.schema([("id", pa.int64()), ("v", pa.string()), ("_cdc_deleted", pa.bool_())])
    return new_table(root, schema), schema


def kv_rows(ids, v: str = "w") -> list[dict]:
    return [{"id": i, "v": v, "_cdc_deleted": False} for i in ids]


def merge_one(table: DeltaTable, key: int, schema: pa.Schema):
    """A MERGE of one row as the sink runs it (key range in the condition, newer rows update, new keys insert)."""
    source = pa.Table.from_pylist(kv_rows([key], "merged"), schema=schema)
    return table.merge(source, f"t.id = s.id AND t.id >= {key} AND t.id <= {key}", source_alias="s",
                       target_alias="t").when_matched_update_all().when_not_matched_insert_all().execute()


def test_readers_before_an_append_conflict_with_it_and_it_with_any_newer_commit(tmp_path):
    """MERGE, tombstoning update and compaction that read the table before an append commit after it only where
    they cannot miss its rows; an append checked on an older version than the newest never commits on it."""
    uri, schema = kv_table(tmp_path)
    assert append(tmp_path, "t", schema, window_files(tmp_path, "t", schema, kv_rows(range(10))), ("w0", 1)) \
        == "appended"
    merge_before, update_before, disjoint_before, compact_before = (DeltaTable(uri) for _ in range(4))
    assert append(tmp_path, "t", schema, window_files(tmp_path, "t", schema, kv_rows(range(100, 110))),
                  ("w1", 1)) == "appended"

    # a MERGE of an appended key, read before the append: would insert the key a second time
    with pytest.raises(CommitFailedError):
        merge_one(merge_before, 105, schema)
    # tombstoning every live row (a truncate), read before the append: would leave the appended rows live
    with pytest.raises(CommitFailedError):
        update_before.update(updates={"_cdc_deleted": "true"}, predicate="NOT _cdc_deleted AND id >= 0")
    # a MERGE of a key outside the appended range has nothing to miss: it commits
    merge_one(disjoint_before, 5, schema)
    # compaction rewrites what it read (no data change) and leaves the appended files alone
    compact_before.optimize.compact()
    assert keys(uri) == [*range(10), *range(100, 110)]

    # an append checked on a version older than the newest is refused whatever committed meanwhile (a MERGE,
    # an update, a compaction), and checked again on the newest
    other = iter(range(300, 400, 10))
    writers = {"append": lambda t: append(tmp_path, "t", schema, window_files(tmp_path, "t", schema, kv_rows(
                   range(low := next(other), low + 5))), (f"other {low}", 1)),
               "merge": lambda t: merge_one(t, 7, schema),
               "update": lambda t: t.update(updates={"v": "'u'"}, predicate="id = 3"),
               "compact": lambda t: (merge_one(t, 8, schema), DeltaTable(uri).optimize.compact())}
    for n, (name, write) in enumerate(writers.items()):
        low = 1000 + 10 * n  # above every key: a compacted file spans all keys below it
        files = window_files(tmp_path, "t", schema, kv_rows(range(low, low + 5)))
        checked = DeltaTable(uri)
        write(DeltaTable(uri))
        with pytest.raises(Exception) as refused:  # noqa: PT011 - delta-rs's own error, asserted next
            checked.create_write_transaction([f.add_action() for f in files], "append", checked.schema(),
                                             commit_properties=CommitProperties(max_commit_retries=0))
        assert is_conflict(refused.value), f"after a {name}: {refused.value!r}"
        stale, opened = DeltaTable(uri), []
        write(DeltaTable(uri))

        def open_table(stale=stale, opened=opened):
            opened.append(1)
            return stale if len(opened) == 1 else DeltaTable(uri)

        outcome = append_files(open_table, files, window_ranges(files, ["id"], schema), (f"c{n}", 1), name,
                               refuse=lambda d: False)
        assert (outcome, len(opened)) == ("appended", 2), f"after a {name}"
    table = DeltaTable(uri).to_pyarrow_table()
    ids = table.column("id").to_pylist()
    assert len(ids) == len(set(ids)), "a key has two rows"
    assert set(ids) == {*range(10), *range(100, 110), *range(300, 305), *range(310, 315),
                        *(k for low in range(1000, 1040, 10) for k in range(low, low + 5))}

    # a file without statistics (a NaN or infinity in it) is appended only to a table without files; a MERGE that
    # read the empty table conflicts with it, as delta-rs cannot tell which keys the file holds
    empty = new_table(tmp_path, schema, "e")
    merge_before = DeltaTable(empty)
    unknown = [replace(f, stats=json.dumps({"numRecords": 10}))
               for f in window_files(tmp_path, "e", schema, kv_rows(range(10)))]
    assert append(tmp_path, "e", schema, unknown, ("w", 1)) == "appended"
    with pytest.raises(CommitFailedError):
        merge_one(merge_before, 5, schema)
    assert keys(empty) == list(range(10))


def test_refused_and_replayed_appends_leave_nothing(tmp_path):
    """An append a newer commit makes overlap falls back without a trace (its files deleted); a replayed window
    commits nothing; files of an append that never committed are invisible, and a full VACUUM removes them."""
    uri, schema = kv_table(tmp_path)
    files = window_files(tmp_path, "t", schema, kv_rows(range(10)))
    assert append(tmp_path, "t", schema, files, ("w0", 3)) == "appended"
    version, on_disk = DeltaTable(uri).version(), data_files(uri)
    again = window_files(tmp_path, "t", schema, kv_rows(range(10)))
    assert append(tmp_path, "t", schema, again, ("w0", 3)) == "committed before"
    delete_unreferenced(Storage(str(tmp_path)), "t", DeltaTable(uri), again)
    assert DeltaTable(uri).version() == version and data_files(uri) == on_disk

    # checked on a version without key 15, which a MERGE commits before the append: the append must not commit
    checked = DeltaTable(uri)
    merge_one(DeltaTable(uri), 15, schema)
    overlapping = window_files(tmp_path, "t", schema, kv_rows(range(10, 20)))
    assert append(tmp_path, "t", schema, overlapping, ("w1", 3), opened=[checked]) == "may overlap"
    delete_unreferenced(Storage(str(tmp_path)), "t", DeltaTable(uri), overlapping)
    assert not {f.path for f in overlapping} & data_files(uri)
    assert keys(uri) == [*range(10), 15]

    # an attempt that died between its files and its commit: readers never see the file
    orphan = window_files(tmp_path, "t", schema, kv_rows(range(50, 60)))
    assert keys(uri) == [*range(10), 15]
    assert DeltaTable(uri).vacuum(retention_hours=0, enforce_retention_duration=False, dry_run=True) == [], \
        "a default (lite) VACUUM is not what removes a dead attempt's files"
    assert DeltaTable(uri).vacuum(retention_hours=0, enforce_retention_duration=False, dry_run=True,
                                  full=True) == [orphan[0].path]
    txns = [json.loads(line)["txn"] for f in sorted((Path(uri) / "_delta_log").glob("*.json"))
            for line in f.open() if '"txn"' in line]
    assert [t["appId"] for t in txns] == ["w0"], f"application transactions committed: {txns}"


def test_key_column_without_statistics_falls_back_instead_of_failing(tmp_path):
    """A table whose statistics leave out the key column (``delta.dataSkippingStatsColumns``, or a key past the
    32nd column): its first window appends (the table has no file), every later one MERGEs, none fails."""
    schema = pa.schema([("id", pa.int64()), ("v", pa.string()), ("_cdc_deleted", pa.bool_())])
    uri = new_table(tmp_path, schema, configuration={"delta.dataSkippingStatsColumns": "v"})
    first = window_files(tmp_path, "t", schema, kv_rows(range(10)))
    assert "id" not in json.loads(first[0].stats)["minValues"]
    assert window_ranges(first, ["id"], schema) == {}
    assert append(tmp_path, "t", schema, first, ("w0", 1)) == "appended"
    second = window_files(tmp_path, "t", schema, kv_rows(range(100, 110)))
    assert append(tmp_path, "t", schema, second, ("w1", 1)) == "may overlap"
    assert keys(uri) == list(range(10))


def test_string_keys_tell_windows_apart_in_byte_order_through_truncated_statistics(tmp_path):
    """A table keyed by a string: a window appends when every file of the table lies outside its keys in the order
    of their bytes (non-ASCII after ASCII, as UTF-8 orders them), whatever a collation would say; a file delta-rs
    wrote itself (a MERGE's) states keys beyond 64 characters by a shorter minimum and a larger maximum, so a
    window holding such a key, or one between it and that maximum, is taken to overlap, and one beyond is not."""
    schema = pa.schema([("id", pa.string()), ("v", pa.string()), ("_cdc_deleted", pa.bool_())])
    uri = new_table(tmp_path, schema)
    long_key = "x" * 100

    def rows(ids) -> list[dict]:
        return [{"id": i, "v": "w", "_cdc_deleted": False} for i in ids]

    first = window_files(tmp_path, "t", schema, rows(["B", "a", "m"]))  # upper case first in byte order
    assert window_ranges(first, ["id"], schema) == {"id": ("B", "m")}
    assert append(tmp_path, "t", schema, first, ("w0", 1)) == "appended"
    # "C" lies between "B" and "m" in byte order (not in a case-insensitive collation's): it may overlap
    assert append(tmp_path, "t", schema, window_files(tmp_path, "t", schema, rows(["C"])), ("w1", 1)) \
        == "may overlap"
    beyond = window_files(tmp_path, "t", schema, rows(["z", "é", "😀"]))
    assert window_ranges(beyond, ["id"], schema) == {"id": ("z", "😀")}
    assert append(tmp_path, "t", schema, beyond, ("w2", 1)) == "appended"

    # a MERGE's file, its statistics written by delta-rs: the long key's truncated to 64 characters
    DeltaTable(uri).merge(pa.Table.from_pylist(rows([long_key]), schema=schema), "t.id = s.id", source_alias="s",
                          target_alias="t").when_not_matched_insert_all().execute()
    stats = [a for a in pa.table(DeltaTable(uri).get_add_actions(flatten=True)).to_pylist()
             if a["min.id"].startswith("x")]
    assert [(len(a["min.id"]), a["max.id"]) for a in stats] == [(64, "x" * 63 + "y")], stats
    for held in ([long_key], [long_key + "a"], ["x" * 63 + "y"]):
        window = window_files(tmp_path, "t", schema, rows(held))
        assert append(tmp_path, "t", schema, window, (f"w-{len(held[0])}", 1)) == "may overlap", held
        delete_unreferenced(Storage(str(tmp_path)), "t", DeltaTable(uri), window)
    assert append(tmp_path, "t", schema, window_files(tmp_path, "t", schema, rows(["x" * 63 + "z"])),
                  ("w3", 1)) == "appended"
    live = DeltaTable(uri).to_pyarrow_table(columns=["id"]).column("id").to_pylist()
    assert sorted(live) == sorted(["B", "a", "m", "z", "é", "😀", long_key, "x" * 63 + "z"])


def test_files_of_the_epoch_s_other_chunks_only_hold_no_key_of_a_window(tmp_path):
    """A key no statistics order (a BIGINT UNSIGNED here, which no file states): a window still appends onto files
    whose every row another chunk of its epoch wrote (by the statistics of ``_cdc_chunk``, in string order), and
    not onto a file that may hold a row of its own chunks, of another epoch, or of the stream (no tag)."""
    schema = pa.schema([("id", pa.decimal128(20, 0)), ("v", pa.string()), ("_cdc_deleted", pa.bool_()),
                        ("_cdc_chunk", pa.string())])
    uri = new_table(tmp_path, schema, configuration={"delta.dataSkippingStatsColumns": "v,_cdc_deleted,_cdc_chunk"})
    top = Decimal(2**64 - 1)

    def window(tags: list, own: list[str], n: int) -> str:
        rows = [{"id": top - 100 * n - i, "v": "w", "_cdc_deleted": False, "_cdc_chunk": t}
                for i, t in enumerate(tags)]
        files = window_files(tmp_path, "t", schema, rows)
        outcome = append_files(lambda: DeltaTable(uri), files, window_ranges(files, ["id"], schema), (f"w{n}", 1),
                               f"window {n}", refuse=lambda d: False, own=OwnChunks("_cdc_chunk", 5, tuple(own)))
        if outcome != "appended":
            delete_unreferenced(Storage(str(tmp_path)), "t", DeltaTable(uri), files)
        return outcome

    assert window(["5:0", "5:1"], ["5:0", "5:1"], 0) == "appended"  # no file yet
    assert window(["5:2"], ["5:2"], 1) == "appended"
    assert window(["5:1"], ["5:1"], 2) == "may overlap"  # an earlier attempt of its chunk may have written it
    assert window(["5:10", "5:3"], ["5:10", "5:3"], 3) == "appended"
    # "5:2" lies between "5:10" and "5:3" in string order: that file may hold it
    assert window(["5:2"], ["5:2"], 4) == "may overlap"
    assert window(["5:4"], ["5:4"], 5) == "appended"
    write_deltalake(uri, pa.Table.from_pylist([{"id": top, "v": "s", "_cdc_deleted": False, "_cdc_chunk": None}],
                                              schema=schema), mode="append")
    assert window(["5:5"], ["5:5"], 6) == "may overlap"  # the stream's row may hold any key
    tags = DeltaTable(uri).to_pyarrow_table(columns=["_cdc_chunk"]).column(0).to_pylist()
    assert sorted(tags, key=lambda t: (t is None, t or "")) == ["5:0", "5:1", "5:10", "5:2", "5:3", "5:4", None]


def test_a_truncate_read_before_an_append_conflicts_with_it(tmp_path):
    """The sink's tombstoning of a TRUNCATE (rows older than it, by their version columns), read before an append
    of a window read earlier than the truncate: committing after the append would leave the window's rows live."""
    schema = pa.schema([("id", pa.int64()), ("_cdc_file_seq", pa.int64()), ("_cdc_pos", pa.int64()),
                        ("_cdc_row", pa.int32()), ("_cdc_deleted", pa.bool_())])
    uri = new_table(tmp_path, schema)
    rows = [{"id": i, "_cdc_file_seq": 1, "_cdc_pos": 390, "_cdc_row": -1, "_cdc_deleted": False} for i in range(5)]
    assert append(tmp_path, "t", schema, window_files(tmp_path, "t", schema, rows), ("w0", 1)) == "appended"
    truncate_before = DeltaTable(uri)
    later = [{**r, "id": r["id"] + 100} for r in rows]
    assert append(tmp_path, "t", schema, window_files(tmp_path, "t", schema, later), ("w1", 1)) == "appended"
    tombstone = {"_cdc_deleted": "true"}
    with pytest.raises(CommitFailedError):
        truncate_before.update(updates=tombstone, predicate=f"NOT _cdc_deleted AND {older_than(None, (1, 500, 0))}")
    DeltaTable(uri).update(updates=tombstone, predicate=f"NOT _cdc_deleted AND {older_than(None, (1, 500, 0))}")
    assert not DeltaTable(uri).to_pyarrow_table(filters=[("_cdc_deleted", "=", False)]).num_rows


@pytest.mark.parametrize("created", ["by the sink", "before the sink set statistics columns"])
def test_sink_tables_leave_columns_delta_rs_misstates_out_of_statistics(tmp_path, created):
    """delta-rs's own writer (a MERGE, a compaction) states a decimal's min and max through a float or an int64,
    which misses a row of a decimal wider than that (BIGINT UNSIGNED's max above all), and one below 1e-5 in
    exponent form, which its pyarrow reads take as no statistics: the sink's tables leave such columns out of
    statistics, from their creation, or from the next prepare of an older table (whose files'
    statistics of them readers then ignore), so every reader finds every row of them, before and after a
    compaction."""
    import pyarrow.parquet as pq

    from airflow_cdc_provider.core.chunks import TableId
    from airflow_cdc_provider.sinks.base import SinkConfig
    from airflow_cdc_provider.sinks.delta import DeltaSink, stats_property, table_schema, unsafe_stats_columns
    from airflow_cdc_provider.sinks.types import TableSinkTypes
    from airflow_cdc_provider.source.schema import Column, TableSchema

    def column(name, kind, column_type=None, precision=None, scale=None):
        return Column(name, kind, column_type or kind, True, None, None, None, precision, scale, None)

    types = TableSinkTypes.of(TableSchema(TableId.parse("db.t"), (
        column("id", "int"), column("u", "bigint", "bigint(20) unsigned"),
        column("wide", "decimal", "decimal(30,10)", 30, 10), column("money", "decimal", "decimal(12,2)", 12, 2),
        column("rate", "decimal", "decimal(12,5)", 12, 5), column("tiny", "decimal", "decimal(12,6)", 12, 6),
        column("name", "varchar")), ("id",), ("id",)))
    sink = DeltaSink(SinkConfig(type="delta", path=str(tmp_path / "delta")), {})
    uri = sink.layout.table_uri("db.t")
    assert unsafe_stats_columns(table_schema(types)) == ["u", "wide", "tiny"]
    assert unsafe_stats_columns(pa.schema([("x", pa.float32()), ("n", pa.int64()), ("y", pa.float64())])) == \
        ["x", "y"], "a float's NaN a Parquet footer may leave out of its min and max"
    wide = pa.schema([*(pa.field(f"c{i}", pa.int32()) for i in range(40)), pa.field("f", pa.float64()),
                      pa.field("_cdc_deleted", pa.bool_()), pa.field("_cdc_chunk", pa.string())])
    named = stats_property(wide).split(",")  # past Delta's first 32: the sink's own columns keep statistics
    assert "f" not in named and {"c39", "_cdc_deleted", "_cdc_chunk"} <= set(named)
    wide_safe = pa.schema([f for f in wide if f.name != "f"])  # no unsafe column, but more than 32 columns
    assert stats_property(wide_safe).split(",") == wide_safe.names
    narrow = pa.schema([f for f in wide_safe if f.name not in {f"c{i}" for i in range(10, 40)}])
    assert len(narrow) == 12 and stats_property(narrow) is None  # Delta's default covers every column
    assert stats_property(narrow, "c0").split(",") == narrow.names  # set before: kept naming them all
    if created == "by the sink":
        sink.prepare(types)
    else:
        DeltaTable.create(uri, table_schema(types), configuration={"delta.enableChangeDataFeed": "true"})

    top, wide = Decimal("18446744073709551615"), Decimal("12345678901234567890.1234567891")
    rows = [{"id": i, "u": Decimal(i), "wide": Decimal(i), "money": Decimal(i), "rate": Decimal(i),
             "tiny": Decimal(i), "name": f"n{i}"} for i in range(4)]
    rows[1].update(u=top, wide=wide, money=Decimal("9999999999.99"), rate=Decimal("0.00001"),
                   tiny=Decimal("-0.000001"))
    rows[2].update(u=Decimal("9223372036854775808"), wide=-wide, tiny=Decimal("0.000009"))
    data = pa.schema([("id", pa.int32()), ("u", pa.decimal128(20, 0)), ("wide", pa.decimal128(30, 10)),
                      ("money", pa.decimal128(12, 2)), ("rate", pa.decimal128(12, 5)), ("tiny", pa.decimal128(12, 6)),
                      ("name", pa.string())])
    meta = [("_cdc_op", pa.string()), ("_cdc_ts_ms", pa.int64()), ("_cdc_file_seq", pa.int64()),
            ("_cdc_pos", pa.int64()), ("_cdc_row", pa.int32()), ("_cdc_deleted", pa.bool_()),
            ("_cdc_chunk", pa.string())]
    for batch_id, part in enumerate((rows[:2], rows[2:])):  # two stream batches: two MERGE-written files
        staged = sink.layout.staging_dir("db.t")
        sink.layout.storage.fs.makedirs(sink.layout.storage.path(staged), exist_ok=True)
        changes = [{**r, "_cdc_op": "c", "_cdc_ts_ms": 1, "_cdc_file_seq": 1, "_cdc_pos": 10 + r["id"],
                    "_cdc_row": 0, "_cdc_deleted": False, "_cdc_chunk": None} for r in part]
        pq.write_table(pa.Table.from_pylist(changes, schema=pa.schema([*data, *meta])),
                       sink.layout.storage.path(staged) + "/part-0.parquet")
        sink.commit_changes(types, staged, ("airflow-cdc:db.t:stream:q", batch_id))

    sink.prepare(types, evolve=True)  # a later snapshot's (the first one's, for an older table)
    assert {"u", "tiny"}.isdisjoint(stats_columns(DeltaTable(uri))) and \
        {"money", "rate"} <= set(stats_columns(DeltaTable(uri)))
    version = DeltaTable(uri).version()
    sink.prepare(types)
    assert DeltaTable(uri).version() == version, "a prepare of a table as wanted commits nothing"
    for when in ("merged", "compacted"):
        if when == "compacted":
            DeltaTable(uri).optimize.compact()
        # readers take a file's statistics of the table's statistics columns only (an older file's too)
        live = pa.table(DeltaTable(uri).get_add_actions(flatten=True)).to_pylist()
        assert live and all("max.u" not in a and "max.wide" not in a and "max.tiny" not in a
                            and a["max.money"] is not None and a["min.rate"] is not None for a in live)
        every = readers(uri, table_schema_of(uri))
        for c, value in (("u", top), ("u", Decimal("9223372036854775808")), ("wide", wide), ("wide", -wide),
                         ("money", Decimal("9999999999.99")), ("rate", Decimal("0.00001")),
                         ("tiny", Decimal("-0.000001")), ("tiny", Decimal("0.000009"))):
            want = sorted(r["id"] for r in rows if r[c] == value)
            for name, read in every.items():
                assert sorted(read(c, "=", value)) == want, f"{when}: {name}: {c} = {value} missed a row"


def table_schema_of(uri: str) -> pa.Schema:
    return pa.schema(DeltaTable(uri).schema().to_arrow())


def test_key_ranges_of_different_columns_span_no_bound():
    """A range names the column its bounds are of: ranges of one column span their union, ranges of different
    columns no bound at all (a MERGE over the whole table: slow, never wrong), not one column's values applied to
    another's."""
    from airflow_cdc_provider.sinks.delta import KeyRange, span

    assert span(KeyRange("id", 5, 9), None, KeyRange("id", 1, 6)) == KeyRange("id", 1, 9)
    assert span(KeyRange("id", 5, 9), KeyRange("at", 1, 6)) is None
    assert span(None, None) is None


def test_a_window_s_files_merge_in_pieces_of_neighbouring_key_ranges():
    """A written window MERGEd (its append refused) goes in pieces of at most ``MERGE_PIECE_ROWS`` rows, files of
    neighbouring key ranges together, each piece bounded by its keys; without a range for every file, one piece."""
    from airflow_cdc_provider.sinks.delta import MERGE_PIECE_ROWS, KeyRange, merge_pieces
    from airflow_cdc_provider.sinks.delta_append import DataFile

    def data_file(name, lo, hi, rows):
        stats = {"numRecords": rows, "minValues": {"id": lo}, "maxValues": {"id": hi}} if lo is not None else \
            {"numRecords": rows}
        return DataFile(name, 1, 1, json.dumps(stats))

    half = MERGE_PIECE_ROWS // 2
    files = [data_file("c", 200, 299, half), data_file("a", 0, 99, half), data_file("b", 100, 199, half),
             data_file("d", 300, 399, 10)]
    pieces = merge_pieces(files, "id")
    assert [([f.path for f in group], bounds) for group, bounds in pieces] == [
        (["a", "b"], KeyRange("id", 0, 199)), (["c", "d"], KeyRange("id", 200, 399))]
    unbounded = data_file("e", None, None, 5)
    assert merge_pieces(files + [unbounded], "id") == [(files + [unbounded], None)]
    assert merge_pieces(files, None) == [(files, None)]


def test_a_replacement_takes_the_place_of_the_files_that_may_hold_its_keys_in_one_commit(tmp_path):
    """``replace_files``: one commit removes the files whose statistics may overlap the window's keys and adds the
    window's, with what ``carry`` kept of the removed rows; a reader that read the table before conflicts; a
    newer commit makes it check again (carrying again only if the files to replace changed); a replay or a
    refused carry commits nothing."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    from airflow_cdc_provider.sinks.delta_append import replace_files

    uri, schema = kv_table(tmp_path)
    for r in (range(10), range(10, 20), range(100, 110)):  # the earlier epoch's windows
        files = window_files(tmp_path, "t", schema, kv_rows(r, "old"))
        assert append(tmp_path, "t", schema, files, (f"e1 {r.start}", 1)) == "appended"
    def window_of(v: str) -> list:  # a window's files: keys 0-14, key 3 deleted since the earlier epoch
        return window_files(tmp_path, "t", schema, kv_rows([k for k in range(15) if k != 3], v))

    ranges = window_ranges(window_of("new"), ["id"], schema)
    mine = pa.array(sorted(k for k in range(15) if k != 3), pa.int64())
    taken_seen: list[list[str]] = []

    def carry(taken):
        taken_seen.append(sorted(f.path for f in taken))
        rows = pa.concat_tables(pq.read_table(f"{uri}/{f.path}").cast(schema) for f in taken)
        kept = rows.filter(pc.invert(pc.is_in(rows.column("id"), value_set=mine)))
        return [write_data_file(str(tmp_path), "t", schema, stats_columns(DeltaTable(uri)), kept.to_batches(),
                                lambda b: b)]

    def replace_window(open_table, app, carrying=carry, v="new"):
        return replace_files(open_table, window_of(v), ranges, app, "re-snapshot", refuse=lambda d: False,
                             carry=carrying)

    before = DeltaTable(uri)
    version = before.version()
    assert replace_window(lambda: DeltaTable(uri), ("e2 0-14", 5)) == "replaced"
    assert len(taken_seen) == 1 and len(taken_seen[0]) == 2, f"not the two files of keys 0-19: {taken_seen}"
    table = DeltaTable(uri)
    assert table.version() == version + 1
    assert table.history(1)[0][WRITE_KEY] == "replace" and table.transaction_version("e2 0-14") == 5
    rows = {r["id"]: r["v"] for r in table.to_pyarrow_table().to_pylist()}
    want = {**{k: "old" for k in (3, *range(15, 20), *range(100, 110))}, **{k: "new" for k in range(15) if k != 3}}
    assert rows == want, "a key lost, doubled or not replaced"
    with pytest.raises(CommitFailedError):  # a MERGE of a replaced key, read before: would write a removed file
        merge_one(before, 5, schema)
    assert replace_window(lambda: DeltaTable(uri), ("e2 0-14", 5)) == "committed before"
    assert DeltaTable(uri).version() == version + 1

    # checked on a stale version: after a commit outside the window's range the same files are replaced, without
    # carrying again; after one inside it (a file of the range rewritten), the carry runs on the new files
    for key, carries in ((105, 1), (7, 2)):
        taken_seen.clear()
        stale = DeltaTable(uri)
        merge_one(DeltaTable(uri), key, schema)
        want[key] = "merged"
        handles = iter([stale])
        app = (f"again {carries}", 1)
        assert replace_window(lambda handles=handles: next(handles, None) or DeltaTable(uri), app,
                              v=f"new {carries}") == "replaced"
        assert len(taken_seen) == carries, taken_seen
        rows = {r["id"]: r["v"] for r in DeltaTable(uri).to_pyarrow_table().to_pylist()}
        assert DeltaTable(uri).to_pyarrow_table().num_rows == len(want), "a key doubled"
        assert rows == {**want, **{k: f"new {carries}" for k in range(15) if k != 3}}, "a key lost or not replaced"

    version = DeltaTable(uri).version()
    assert replace_window(lambda: DeltaTable(uri), ("refused", 1), carrying=lambda taken: None) == "newer rows"
    assert DeltaTable(uri).version() == version

    # commits that keep rewriting files of the window's range: carried CARRIES times, then left to a MERGE
    def moving():
        stale = DeltaTable(uri)
        merge_one(DeltaTable(uri), 9, schema)
        return stale

    taken_seen.clear()
    assert replace_window(moving, ("moving", 1), v="moving") == "contended"
    values = {r["v"] for r in DeltaTable(uri).to_pyarrow_table().to_pylist()}
    assert len(taken_seen) == CARRIES and "moving" not in values


def test_a_retried_chunk_s_rows_are_found_by_the_files_chunk_statistics(tmp_path):
    """Whether a file may hold a row of given chunks, by its statistics of the chunk column: files of other
    chunks (by their min and max, "1:10" sorting before "1:2"), all-NULL ones (the stream's rows) and an
    emptied table hold none; a file without statistics of the column may hold any."""
    from airflow_cdc_provider.sinks.delta import may_hold_chunks

    schema = pa.schema([("id", pa.int64()), ("_cdc_chunk", pa.string())])
    uri = str(tmp_path / "t")
    write_deltalake(uri, pa.table({"id": [1, 2], "_cdc_chunk": ["1:0", "1:10"]}, schema=schema))
    write_deltalake(uri, pa.table({"id": [3], "_cdc_chunk": pa.array([None], pa.string())}, schema=schema),
                    mode="append")
    dt = DeltaTable(uri)
    assert may_hold_chunks(dt, 1, {0}) and may_hold_chunks(dt, 1, {1}) and may_hold_chunks(dt, 1, {10})
    assert not may_hold_chunks(dt, 1, {2}) and not may_hold_chunks(dt, 2, {0}) and not may_hold_chunks(dt, 1, {3, 4})
    dt.delete()
    assert not may_hold_chunks(DeltaTable(uri), 1, {0})
    bare = new_table(tmp_path, schema, "bare", configuration={"delta.dataSkippingStatsColumns": "id"})
    write_deltalake(bare, pa.table({"id": [1], "_cdc_chunk": ["1:0"]}, schema=schema), mode="append")
    assert may_hold_chunks(DeltaTable(bare), 7, {7}), "a file without statistics of the column may hold any chunk"


class StreamTable:
    """A delta sink table ``db.t`` of the given source columns and key, and stream batches committed into it as
    the stream commits them (staged rows, then ``commit_changes`` under the batch's application transaction)."""

    META = [("_cdc_op", pa.string()), ("_cdc_ts_ms", pa.int64()), ("_cdc_file_seq", pa.int64()),
            ("_cdc_pos", pa.int64()), ("_cdc_row", pa.int32()), ("_cdc_deleted", pa.bool_()),
            ("_cdc_chunk", pa.string())]

    def __init__(self, tmp_path, columns: list[tuple[str, str, pa.DataType]], key: tuple[str, ...]) -> None:
        from airflow_cdc_provider.core.chunks import TableId
        from airflow_cdc_provider.sinks.base import SinkConfig
        from airflow_cdc_provider.sinks.delta import DeltaSink
        from airflow_cdc_provider.sinks.types import TableSinkTypes
        from airflow_cdc_provider.source.schema import Column, TableSchema

        def column(name: str, kind: str, arrow: pa.DataType) -> Column:
            digits = (arrow.precision, arrow.scale) if pa.types.is_decimal(arrow) else (None, None)
            return Column(name, kind.split("(")[0], kind, True, None, None, None, *digits, None)

        source = tuple(column(*c) for c in columns)
        self.types = TableSinkTypes.of(TableSchema(TableId.parse("db.t"), source, key, key))
        self.sink = DeltaSink(SinkConfig(type="delta", path=str(tmp_path / "delta")), {})
        self.sink.prepare(self.types)
        self.uri = self.sink.layout.table_uri("db.t")
        self.schema = pa.schema([*((name, arrow) for name, _, arrow in columns), *self.META])
        self.key = key

    def batch(self, batch_id: int, changes: list[tuple[dict, bool]], app: str = "airflow-cdc:db.t:stream:q") -> None:
        """``changes``: (row, deleted) each, in binlog order."""
        import pyarrow.parquet as pq

        staged = self.sink.layout.staging_dir("db.t")
        self.sink.layout.storage.fs.makedirs(self.sink.layout.storage.path(staged), exist_ok=True)
        rows = [{**row, "_cdc_op": "d" if deleted else "u", "_cdc_ts_ms": 1, "_cdc_file_seq": 1,
                 "_cdc_pos": 1000 * batch_id + i, "_cdc_row": 0, "_cdc_deleted": deleted, "_cdc_chunk": None}
                for i, (row, deleted) in enumerate(changes)]
        pq.write_table(pa.Table.from_pylist(rows, schema=self.schema),
                       self.sink.layout.storage.path(staged) + "/part-0.parquet")
        self.sink.commit_changes(self.types, staged, (app, batch_id))

    def commits_since(self, version: int) -> list[dict]:
        return [c for c in reversed(DeltaTable(self.uri).history()) if c["version"] > version]

    def txns_since(self, version: int) -> list[int]:
        return [json.loads(line)["txn"]["version"] for c in self.commits_since(version)
                for line in (Path(self.uri) / "_delta_log" / f"{c['version']:020d}.json").read_text().splitlines()
                if '"txn"' in line]

    def state(self) -> dict:
        """Every row by its key (a key held twice would shrink it: compare its size with the table's)."""
        table = DeltaTable(self.uri).to_pyarrow_table().to_pylist()
        return {tuple(r[k] for k in self.key): {n: r[n] for n in self.schema.names if n not in self.key
                                                and n in ("v", "_cdc_deleted")} for r in table}

    def rows(self) -> int:
        return DeltaTable(self.uri).to_pyarrow_table().num_rows

    def assert_applied_once(self, held: dict, changes: list[tuple[dict, bool]], batch_id: int) -> None:
        """The table is ``held`` (``state``'s form) with ``changes``, batch ``batch_id``'s, on top; and stays so
        after the same changes again under another application id (a replay the version guard alone stops)."""
        want = dict(held)
        for row, deleted in changes:
            want[tuple(row[k] for k in self.key)] = {"v": row["v"], "_cdc_deleted": deleted}
        assert self.state() == want
        self.batch(batch_id, changes, app="airflow-cdc:db.t:stream:replayed")
        assert self.state() == want
        assert self.rows() == len(want), "a key doubled"


def test_a_merge_over_many_rows_of_the_table_goes_in_pieces_of_its_files_key_ranges(tmp_path, monkeypatch):
    """delta-rs reads every row of the files a MERGE may touch, so a stream batch whose keys spread over a table
    larger than ``MERGE_TARGET_ROWS`` is MERGEd once per range of the table's files (by their key statistics)
    that holds one of its keys, only the last commit carrying the batch's transaction; the result is the single
    MERGE's, and the same changes applied again (a replay after a kill between the pieces) change nothing."""
    import airflow_cdc_provider.sinks.delta as delta
    from airflow_cdc_provider.sinks.delta import KeyRange, target_cuts

    t = StreamTable(tmp_path, [("id", "int", pa.int32()), ("v", "varchar", pa.string())], ("id",))
    uri = t.uri

    def batch(batch_id: int, changes: list[tuple[int, str | None]], app: str = "airflow-cdc:db.t:stream:q"):
        t.batch(batch_id, [({"id": k, "v": v}, v is None) for k, v in changes], app)

    for b in range(4):  # four files of 100 keys each: [0, 99], [100, 199], ...
        batch(b, [(k, "a") for k in range(100 * b, 100 * b + 100)])
    assert target_cuts(DeltaTable(uri), KeyRange("id", 0, 399), 150) == [100, 200, 300]
    assert target_cuts(DeltaTable(uri), KeyRange("id", 0, 399), 400) == []
    assert target_cuts(DeltaTable(uri), KeyRange("id", 150, 260), 150) == [200]

    monkeypatch.setattr(delta, "MERGE_TARGET_ROWS", 150)
    before = DeltaTable(uri).version()
    changes = [(5, "b"), (150, "b"), (399, "b"), (250, None), (1000, "new")]  # none in [300, 399] but 399
    batch(4, changes)
    assert [c["airflow_cdc"] for c in t.commits_since(before)] == [f"stream batch 4 (part {n} of 4)"
                                                                  for n in range(1, 5)]
    assert t.txns_since(before) == [4], "only the last piece carries the batch's transaction"

    want = {(k,): {"v": "a", "_cdc_deleted": False} for k in range(400)}
    want |= {(k,): {"v": "b", "_cdc_deleted": False} for k in (5, 150, 399)}
    want |= {(250,): {"v": None, "_cdc_deleted": True}, (1000,): {"v": "new", "_cdc_deleted": False}}
    assert t.state() == want
    version = DeltaTable(uri).version()
    batch(4, changes)  # the batch replayed: committed, so no piece runs again
    assert DeltaTable(uri).version() == version
    batch(4, changes, app="airflow-cdc:db.t:stream:replayed")  # the same changes again, under another app id
    assert t.state() == want
    assert t.rows() == len(want), "a key doubled"

    # a file stating no range of the key may hold any: every MERGE reads it, so there is nothing to cut
    DeltaTable(uri).alter.set_table_properties({"delta.dataSkippingStatsColumns": "v"})
    batch(5, [(2000, "c")])
    assert target_cuts(DeltaTable(uri), KeyRange("id", 0, 2000), 150) == []


def test_a_composite_key_led_by_a_string_merges_in_pieces_of_its_first_column(tmp_path, monkeypatch):
    """A table keyed by (a string, an integer) is cut the same way, by its first key column: rows of one key
    share it, the files' statistics, pyarrow and delta-rs's SQL all order strings by their bytes, and quotes,
    backslashes and letters beyond ASCII in the bounds reach delta-rs's SQL intact. Each piece's MERGE reads
    only the files its rows' keys may be in."""
    import airflow_cdc_provider.sinks.delta as delta
    from airflow_cdc_provider.sinks.delta import KeyRange, target_cuts

    t = StreamTable(tmp_path, [("name", "varchar", pa.string()), ("n", "int", pa.int32()),
                               ("v", "varchar", pa.string())], ("name", "n"))
    groups = [["a", "a'b", "a\\b"], ["b", "b'", "bz"], ["m", "m\n", "mü"], ["zz", "ä", "😀"]]  # byte order
    for b, names in enumerate(groups):  # one file each, of 3 names x 30 numbers
        t.batch(b, [({"name": s, "n": n, "v": "a"}, False) for s in names for n in range(30)])
    assert target_cuts(DeltaTable(t.uri), KeyRange("name", "a", "😀"), 100) == ["b", "m", "zz"]

    monkeypatch.setattr(delta, "MERGE_TARGET_ROWS", 100)
    before = DeltaTable(t.uri).version()
    changes = [({"name": "a'b", "n": 3, "v": "b"}, False), ({"name": "a\\b", "n": 4, "v": None}, True),
               ({"name": "mü", "n": 5, "v": "b"}, False), ({"name": "mü", "n": 99, "v": "new"}, False),
               ({"name": "😀", "n": 0, "v": "b"}, False), ({"name": "ä", "n": 7, "v": "b"}, False),
               ({"name": "c'", "n": 1, "v": "new"}, False)]  # nothing of ["b", "m") but a new key
    t.batch(4, changes)
    commits = t.commits_since(before)
    assert [c["airflow_cdc"] for c in commits] == [f"stream batch 4 (part {n} of 4)" for n in range(1, 5)]
    assert t.txns_since(before) == [4], "only the last piece carries the batch's transaction"
    scanned = [int(c["operationMetrics"]["num_target_files_scanned"]) for c in commits]
    # each piece is bounded by its own rows' keys: its file of the four, and none for the new key alone
    assert scanned == [1, 0, 1, 1], commits

    t.assert_applied_once({(s, n): {"v": "a", "_cdc_deleted": False} for names in groups for s in names
                           for n in range(30)}, changes, 4)


def test_a_key_led_by_a_datetime_merges_in_pieces_of_its_integer_column(tmp_path, monkeypatch):
    """A table keyed by (a DATETIME, an integer), the usual key of an event table: a DATETIME bounds no MERGE
    (``orderable_key``), but rows of one key share the integer too, so the integer bounds each MERGE and cuts it
    in pieces of the files' ranges, as a key it led would. Without it every MERGE would read the whole table.
    Where the files hold no ranges of it, there are no pieces: one would read every file anyway."""
    import airflow_cdc_provider.sinks.delta as delta
    from airflow_cdc_provider.sinks.delta import KeyRange, target_cuts

    t = StreamTable(tmp_path, [("at", "datetime", pa.timestamp("us")), ("n", "int", pa.int32()),
                               ("v", "varchar", pa.string())], ("at", "n"))
    moments = [dt.datetime(2024, 1, 1, h) for h in (9, 0, 23)]  # every file holds all three: no range of its own
    for b in range(4):  # one file each, of 3 moments x 30 numbers: n in [0, 29], [30, 59], ...
        t.batch(b, [({"at": at, "n": n, "v": "a"}, False) for at in moments for n in range(30 * b, 30 * b + 30)])
    assert target_cuts(DeltaTable(t.uri), KeyRange("n", 0, 119), 100) == [30, 60, 90]

    monkeypatch.setattr(delta, "MERGE_TARGET_ROWS", 100)
    before = DeltaTable(t.uri).version()
    changes = [({"at": moments[0], "n": 3, "v": "b"}, False), ({"at": moments[2], "n": 65, "v": None}, True),
               ({"at": moments[1], "n": 100, "v": "b"}, False),
               ({"at": dt.datetime(2025, 1, 1), "n": 1000, "v": "new"}, False)]  # nothing of [30, 59]
    t.batch(4, changes)
    commits = t.commits_since(before)
    assert [c["airflow_cdc"] for c in commits] == [f"stream batch 4 (part {n} of 3)" for n in range(1, 4)]
    assert t.txns_since(before) == [4], "only the last piece carries the batch's transaction"
    predicates = [c["operationParameters"]["mergePredicate"] for c in commits]
    assert all(re.search(r"t\.n >= \d+ AND t\.n <= \d+$", on) for on in predicates), predicates
    # each piece reads only the file its rows' numbers may be in
    assert [int(c["operationMetrics"]["num_target_files_scanned"]) for c in commits] == [1, 1, 1], commits

    t.assert_applied_once({(at, n): {"v": "a", "_cdc_deleted": False} for at in moments for n in range(120)},
                          changes, 4)

    # numbers the files do not hold in ranges (file b holds those equal to b modulo 4): the last piece would read
    # every file, so there is no cut
    spread = StreamTable(tmp_path / "spread", [("at", "datetime", pa.timestamp("us")), ("n", "int", pa.int32()),
                                               ("v", "varchar", pa.string())], ("at", "n"))
    for b in range(4):
        spread.batch(b, [({"at": at, "n": n, "v": "a"}, False) for at in moments for n in range(b, 120, 4)])
    assert target_cuts(DeltaTable(spread.uri), KeyRange("n", 0, 119), 100) == []


def test_only_key_types_whose_statistics_and_bounds_every_writer_reads_alike_bound_a_merge():
    """Integers, strings, dates and decimals without a fraction of up to 18 digits; not BIGINT UNSIGNED nor wider
    decimals (no writer states them exactly), decimals with a fraction (delta-rs's conflict check misreads their
    bound), floats, timestamps, binary."""
    from airflow_cdc_provider.sinks.delta import orderable_key

    bounding = [pa.int8(), pa.int64(), pa.string(), pa.date32(), pa.decimal128(18, 0), pa.decimal128(1, 0)]
    other = [pa.decimal128(19, 0), pa.decimal128(20, 0), pa.decimal128(12, 2), pa.decimal128(15, 1), pa.float64(),
             pa.timestamp("us"), pa.timestamp("us", tz="UTC"), pa.binary(), pa.bool_()]
    assert [t for t in bounding if not orderable_key(t)] == []
    assert [t for t in other if orderable_key(t)] == []


@pytest.mark.parametrize("kind", ["date", "decimal"])
def test_a_key_led_by_a_date_or_a_decimal_bounds_windows_and_merges_like_an_integer(tmp_path, monkeypatch, kind):
    """A table keyed by (a DATE or a DECIMAL without a fraction, an integer): its windows' files state the first
    column's range (text in the statistics, compared as dates and decimals, not as strings: 9 lies below 10), so
    a window appends beside files outside it and not over one inside; stream batches MERGE in pieces of its files'
    ranges, each bounded by a literal of the column's type that delta-rs prunes files by, and a MERGE that read
    the table before an append of its key conflicts with it. The result is the single MERGE's, and replayed
    changes double no key."""
    import airflow_cdc_provider.sinks.delta as delta
    from airflow_cdc_provider.sinks.delta import KeyRange, key_literal, target_cuts

    if kind == "date":
        column = ("k", "date", pa.date32())
        first = [dt.date(1000, 1, 1), dt.date(2024, 1, 1), dt.date(2024, 1, 10), dt.date(2024, 4, 9),
                 dt.date(2024, 4, 10), dt.date(2024, 12, 31), dt.date(2025, 1, 1), dt.date(9999, 12, 30)]
        beyond = dt.date(9999, 12, 31)
    else:
        column = ("k", "decimal(18,0)", pa.decimal128(18, 0))
        first = [Decimal(v) for v in ("-999999999999999999", "-9", "9", "10", "99", "100", "1000",
                                      "999999999999999998")]
        beyond = Decimal("999999999999999999")
    key_type = column[2]
    t = StreamTable(tmp_path, [column, ("n", "int", pa.int32()), ("v", "varchar", pa.string())], ("k", "n"))
    for b in range(4):  # one file each, of two first-column values x 30 numbers, in the values' order
        t.batch(b, [({"k": k, "n": n, "v": "a"}, False) for k in first[2 * b: 2 * b + 2] for n in range(30)])
    assert target_cuts(DeltaTable(t.uri), KeyRange("k", first[0], first[-1]), 100) == [first[2], first[4], first[6]]

    schema = t.schema
    rows = [{"k": k, "n": 0, "v": "w", "_cdc_op": "r", "_cdc_ts_ms": 0, "_cdc_file_seq": 0, "_cdc_pos": 0,
             "_cdc_row": 0, "_cdc_deleted": False, "_cdc_chunk": "1:0"} for k in (first[3], first[2])]
    inside = window_files(tmp_path / "delta", "db.t", schema, rows)
    assert window_ranges(inside, ["k", "n"], schema) == {"k": (first[2], first[3]), "n": (0, 0)}

    def appended(files, app: str) -> str:
        return append_files(lambda: DeltaTable(t.uri), files, window_ranges(files, ["k", "n"], schema), (app, 1),
                            app, refuse=lambda d: False)

    assert appended(inside, "w0") == "may overlap"
    delete_unreferenced(Storage(str(tmp_path / "delta")), "db.t", DeltaTable(t.uri), inside)
    read_before = DeltaTable(t.uri)
    outside = window_files(tmp_path / "delta", "db.t", schema, [{**rows[0], "k": beyond}])
    assert appended(outside, "w1") == "appended"
    # a MERGE of the appended key bounded as the sink bounds it, from a table read before the append
    bound = f"t.k >= {key_literal(beyond, key_type)} AND t.k <= {key_literal(beyond, key_type)}"
    with pytest.raises(CommitFailedError):
        read_before.merge(pa.Table.from_pylist([{**rows[0], "k": beyond, "_cdc_file_seq": 9}], schema=schema),
                          f"t.k = s.k AND t.n = s.n AND {bound}", source_alias="s", target_alias="t") \
            .when_not_matched_insert_all().execute()

    monkeypatch.setattr(delta, "MERGE_TARGET_ROWS", 100)
    before = DeltaTable(t.uri).version()
    changes = [({"k": first[1], "n": 3, "v": "b"}, False), ({"k": first[4], "n": 4, "v": None}, True),
               ({"k": first[5], "n": 99, "v": "new"}, False), ({"k": first[7], "n": 0, "v": "b"}, False),
               ({"k": beyond, "n": 0, "v": "b"}, False)]
    t.batch(4, changes)
    commits = t.commits_since(before)
    assert [c["airflow_cdc"] for c in commits] == [f"stream batch 4 (part {n} of 3)" for n in range(1, 4)]
    assert t.txns_since(before) == [4], "only the last piece carries the batch's transaction"
    typed = r"date" if kind == "date" else r"decimal\(18, 0\)"  # as delta-rs records the literals it parsed
    assert all(re.search(rf"t\.k >= '[^']+'::{typed} AND t\.k <= '[^']+'::{typed}$",
                         c["operationParameters"]["mergePredicate"]) for c in commits), commits
    # each piece reads only the files its rows' keys may be in: one of the four; the last also the appended one
    assert [int(c["operationMetrics"]["num_target_files_scanned"]) for c in commits] == [1, 1, 2], commits

    held = {(k, n): {"v": "a", "_cdc_deleted": False} for k in first for n in range(30)}
    t.assert_applied_once({**held, (beyond, 0): {"v": "w", "_cdc_deleted": False}}, changes, 4)


def test_a_retried_window_s_tombstones_are_the_rows_of_its_chunks_an_earlier_attempt_wrote_and_it_lacks(tmp_path):
    """The rows a retried window's MERGE makes tombstones: its retried chunks' rows as an earlier attempt read
    them (not those the stream changed since, nor tombstones, nor rows newer than the retry's low watermark) whose
    keys the retry did not read, each marked deleted at that watermark with its other columns kept; found
    without opening a file whose statistics of ``_cdc_chunk`` hold no retried chunk."""
    from airflow_cdc_provider.sinks.delta import retried_tombstones

    t = StreamTable(tmp_path, [("id", "int", pa.int32()), ("v", "varchar", pa.string())], ("id",))
    # chunk 0 of epoch 1, as its earlier attempt wrote it, then: 3 changed by the stream, 4 deleted by it, 5 read
    # again by a newer attempt
    write_deltalake(t.uri, snapshot_rows(t, range(10), "1:0", {3: ("u", 20, False), 4: ("d", 20, True),
                                                              5: ("r", 900, False)}), mode="append")
    write_deltalake(t.uri, snapshot_rows(t, range(10, 20), "1:1"), mode="append")
    write_deltalake(t.uri, snapshot_rows(t, range(20, 30), "1:2"), mode="append")  # not retried
    not_retried = [a["path"] for a in pa.table(DeltaTable(t.uri).get_add_actions(flatten=True)).to_pylist()
                   if a["min._cdc_chunk"] == "1:2"]
    (Path(t.uri) / not_retried[0]).unlink()  # opening it would fail

    read = pa.table({"id": pa.array([i for i in [0, 1, 2, *range(10, 20)] if i != 12], pa.int32())})
    tombstones = retried_tombstones(DeltaTable(t.uri), ["id"], read, ["1:0", "1:1"], (1, 500, 0))
    got = sorted(tombstones.to_pylist(), key=lambda r: r["id"])
    assert [r["id"] for r in got] == [6, 7, 8, 9, 12]
    assert all(r["_cdc_deleted"] and r["_cdc_op"] == "d" and (r["_cdc_file_seq"], r["_cdc_pos"], r["_cdc_row"]) ==
               (1, 500, 0) and r["v"] == f"v{r['id']}" and r["_cdc_chunk"] == ("1:1" if r["id"] == 12 else "1:0")
               for r in got), got
    assert tombstones.schema == pa.schema(DeltaTable(t.uri).schema().to_arrow())
    assert retried_tombstones(DeltaTable(t.uri), ["id"], read, ["1:5"], (1, 500, 0)).num_rows == 0


def snapshot_rows(t: StreamTable, ids, chunk: str, special=None, v: str = "v", pos: int = 10) -> pa.Table:
    """Rows of ``t`` as a snapshot chunk wrote them (``special``: id -> (op, position, deleted))."""
    out = []
    for i in ids:
        op, at, deleted = (special or {}).get(i, ("r", pos, False))
        out.append({"id": i, "v": f"{v}{i}", "_cdc_op": op, "_cdc_ts_ms": 1, "_cdc_file_seq": 1, "_cdc_pos": at,
                    "_cdc_row": -1, "_cdc_deleted": deleted, "_cdc_chunk": chunk})
    return pa.Table.from_pylist(out, schema=t.schema)


def test_a_retried_window_s_tombstones_take_only_rows_still_as_the_earlier_attempt_read_them(tmp_path, monkeypatch):
    """Between the search for a retried window's tombstones and its MERGE, the stream changes and deletes rows
    of the chunk (at positions before the retry's low watermark) and an attempt thought dead commits another
    row: the stream's rows stay as it wrote them, the others become tombstones at the low watermark, the dead
    attempt's row too (found again after the MERGE), and the rows the retry read are its own."""
    import airflow_cdc_provider.sinks.delta as delta

    t = StreamTable(tmp_path, [("id", "int", pa.int32()), ("v", "varchar", pa.string())], ("id",))
    write_deltalake(t.uri, snapshot_rows(t, range(10), "1:0"), mode="append")  # the earlier attempt's
    found = delta.retried_tombstones
    calls = []

    def racing(dt, keys, read, tags, low_watermark):
        tombstones = found(dt, keys, read, tags, low_watermark)
        if not calls:  # the stream's batch, and a zombie's commit of a key the retry did not read
            t.batch(1, [({"id": 5, "v": "stream"}, False), ({"id": 6, "v": None}, True)])
            write_deltalake(t.uri, snapshot_rows(t, [50], "1:0", v="zombie"), mode="append")
        calls.append(tombstones.column("id").to_pylist())
        return tombstones

    monkeypatch.setattr(delta, "retried_tombstones", racing)
    retry = snapshot_rows(t, [0, 1, 2], "1:0", v="retry", pos=5000)

    def source(schema):
        return pa.RecordBatchReader.from_batches(schema, retry.cast(schema).to_batches())

    t.sink._merge_retried("db.t", ["id"], source, ("airflow-cdc:db.t:snapshot:1:0-0", 7), "snapshot epoch 1 chunks 0-0",
                          1, {0}, (1, 5000, -1))
    assert sorted(calls[0]) == [3, 4, 5, 6, 7, 8, 9] and calls[1] == [50]
    rows = {r["id"]: r for r in DeltaTable(t.uri).to_pyarrow_table().to_pylist()}
    assert len(rows) == DeltaTable(t.uri).to_pyarrow_table().num_rows == 11, "a key doubled"
    for i in (0, 1, 2):
        assert (rows[i]["v"], rows[i]["_cdc_deleted"], rows[i]["_cdc_pos"]) == (f"retry{i}", False, 5000)
    assert (rows[5]["v"], rows[5]["_cdc_op"], rows[5]["_cdc_deleted"]) == ("stream", "u", False)
    assert (rows[6]["_cdc_op"], rows[6]["_cdc_deleted"], rows[6]["_cdc_pos"]) == ("d", True, 1001)
    for i in (3, 4, 7, 8, 9, 50):
        assert (rows[i]["_cdc_op"], rows[i]["_cdc_deleted"], rows[i]["_cdc_pos"], rows[i]["_cdc_row"]) == \
            ("d", True, 5000, -1), rows[i]
        assert rows[i]["v"] == ("zombie50" if i == 50 else f"v{i}")
    assert DeltaTable(t.uri).transaction_version("airflow-cdc:db.t:snapshot:1:0-0") == 7
