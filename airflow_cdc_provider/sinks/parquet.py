"""The parquet sink (the embedded default), DMS-style: per table a ``snapshot/`` and a ``changes/`` directory.

::

    <path>/<db.table>/_schema.json                        Spark schema of the data columns (the newest version's)
    <path>/<db.table>/_schema_history.json                the table's versions, once its columns changed in place
    <path>/<db.table>/snapshot/epoch=<E>/chunks=<i>-<j>/_cdc_file_seq=<S>/_cdc_pos=<P>/_cdc_row=<R>/*.parquet
                                      rows of chunks i..j (one watermark window) as of their high watermark
    <path>/<db.table>/snapshot/_current.json              {"epoch": E, "min_low_watermark": [seq, pos, row]}
    <path>/<db.table>/changes/batch=<B>/*.parquet         the stream's micro-batch B (c/u/d rows; t/x/s records
                                                          of a truncate, drop or resync, without data)
    <path>/<db.table>/_superseded/changes-<id>/           changes written under an older definition of the table

The chunks a task reads in one watermark window share one version (the window's HW), so it is kept in the
path as Hive-style partition values: ``spark.read.parquet(".../snapshot/epoch=<E>")`` or pyarrow with
``partitioning="hive"`` gives every row its ``_cdc_file_seq``, ``_cdc_pos``, ``_cdc_row`` (and ``chunks``)
columns; ``_cdc_chunk`` in the files is the row's chunk index. This lets the snapshot job write each row
once, inside its watermark window, before the HW is known.

Each window and each batch directory is written to ``_staging/`` first and renamed into place, so a retry
replaces it and a killed writer leaves nothing half-visible (names starting with ``_`` are hidden from
Spark's file listing). ``path`` is a local path or any URI ``storage.Storage`` opens; on an object store a
directory rename is a copy, so there a reader may see a window or batch while it is being published.

Current state of a table (``materialize``): rows of the current snapshot epoch plus the changes newer than
that epoch's smallest low watermark; per key the highest version wins; keys whose winner is a delete are
gone; a truncate or drop record removes every row older than it. Changes older than the epoch's low watermark
are superseded by the re-snapshot (and may miss deletes the stream filtered as already contained in it), so
they are left out.

Columns changed in place (``evolve_in_place``: an ALTER that adds a column with a constant default, drops,
renames or widens columns) rewrite no file. ``_schema_history.json`` lists the table's versions (see
``source.table_versions``), each ``{"number", "schema": Spark schema JSON of its data columns, "renamed": {new:
old}, "added": {column: the value existing rows hold, JSON, tagged when not a plain JSON value}, "first_batch":
the first changes batch written under it, null until one is}``; ``_schema.json`` is the newest version's.
Every part was written under one version: the current epoch under version 0, a changes batch ``B`` under the
newest version whose ``first_batch <= B`` (the oldest version before every recorded one). A reader reads each
part with its version's columns and carries its rows up to the newest version (``table_versions.origins``):
renamed columns keep their values, added ones hold the recorded value, dropped ones go, widened ones are cast;
then the rule above applies. Without the file every part has the columns of ``_schema.json``. A reader of the
files themselves (plain pyarrow, DuckDB) must, once the file exists, read through ``read_current_state``
(``sinks.parquet_arrow``) or ``airflow-cdc materialize`` instead.

A re-snapshot under a new definition moves the changelog to ``_superseded/`` and removes the history (its epoch
is version 0 of a new one); one under the newest definition renumbers the history so the newest version is 0,
which the stream's versions of the new epoch start from, and keeps the changelog.
"""

from __future__ import annotations

import base64
import datetime as dt
import json
import logging
import uuid
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, Callable, Literal

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
    write_checked,
)
from airflow_cdc_provider.sinks.parquet_arrow import (
    HISTORY_FILE,
    SPARK_JSON_TYPES,
    Carried,
    arrow_type,
    batch_ids,
    carry_plan,
    encode_sink_value,
    epoch_version,
    group_batches,
    read_history,
    schema_text,
)
from airflow_cdc_provider.sinks.registry import register_sink
from airflow_cdc_provider.sinks.types import TableSinkTypes
from airflow_cdc_provider.spark.frames import col, cols, latest_per_key, meta_ddl, newer_than
from airflow_cdc_provider.spark.window_fold import FoldedWindow
from airflow_cdc_provider.state.storage import Storage
from airflow_cdc_provider.state.store import table_dir_name

log = logging.getLogger("airflow_cdc.parquet")


SPARK_ROW_METADATA = "org.apache.spark.sql.parquet.row.metadata"  # Spark's schema, in the footer of its files


def _chunk_range(name: str) -> tuple[int, int] | None:
    """``chunks=3-7`` -> (3, 7); anything else (staging, trash) -> None."""
    if not name.startswith("chunks="):
        return None
    first, _, last = name[len("chunks="):].partition("-")
    return int(first), int(last)


class WindowSuperseded(SinkError):
    """Another attempt published a later read of the same chunks (its version is newer): this attempt's older rows
    must not replace them (two attempts of one chunk task at once: a job an earlier attempt left running)."""


def _version_of(name: str, key: str) -> int | None:
    prefix = f"{key}="
    return int(name[len(prefix):]) if name.startswith(prefix) and name[len(prefix):].lstrip("-").isdigit() else None


class ParquetLayout:
    """Names of the sink's directories, relative to ``path`` (``location`` gives what Spark reads and writes),
    and the renames that publish them."""

    def __init__(self, path: str | None) -> None:
        if not path:
            raise SinkError("sink.path is required for the parquet sink")
        self.uri = path
        self.storage = Storage(path, key="sink.path")

    def location(self, rel: str) -> str:
        return self.storage.location(rel)

    def table_dir(self, table: str) -> str:
        return table_dir_name(table)

    def epoch_dir(self, table: str, epoch: int) -> str:
        return f"{self.table_dir(table)}/snapshot/epoch={epoch}"

    def window_dir(self, table: str, epoch: int, first: int, last: int) -> str:
        return f"{self.epoch_dir(table, epoch)}/chunks={first}-{last}"

    def published_version(self, rel: str) -> tuple[int, int, int] | None:
        """The newest version (``version_path``) under the window directory ``rel``, None if it holds none."""
        found = []
        for seq in self.storage.listdir(rel):
            for pos in self.storage.listdir(f"{rel}/{seq}"):
                for row in self.storage.listdir(f"{rel}/{seq}/{pos}"):
                    parts = (_version_of(seq, "_cdc_file_seq"), _version_of(pos, "_cdc_pos"),
                             _version_of(row, "_cdc_row"))
                    if None not in parts:
                        found.append(parts)
        return max(found) if found else None

    def publish_window(self, staging: str, table: str, epoch: int, first: int, last: int,
                       version: tuple[int, int, int] | None = None) -> list[int]:
        """Make ``staging`` the directory of chunks ``first..last``, after removing every directory an earlier
        attempt wrote for an overlapping range. Returns the chunks *outside* ``first..last`` whose rows went
        with such a directory (an attempt that grouped the chunks differently, e.g. after an upgrade): the
        caller must drop their reports so they are read again, never silently missing. A directory of the same
        chunks holding a newer ``version`` than this one's stays, and ``staging`` goes (``WindowSuperseded``)."""
        final = self.window_dir(table, epoch, first, last)
        parent, name = final.rsplit("/", 1)
        published = self.published_version(final) if version is not None and self.storage.exists(final) else None
        if published is not None and published > tuple(version):
            self.storage.rmtree(staging)
            raise WindowSuperseded(
                f"{table}: chunks {first}-{last} of snapshot epoch {epoch}: another attempt published a later read "
                f"of them (high watermark {published}, this one's {tuple(version)}), which stays; this attempt's "
                "rows are discarded. Two attempts of one chunk task ran at once: stop any job an earlier attempt "
                "left running (a cluster driver) before retrying")
        lost: list[int] = []
        for other in self.storage.listdir(parent):
            rng = _chunk_range(other)
            if other != name and rng is not None and rng[0] <= last and first <= rng[1]:
                lost += [i for i in range(rng[0], rng[1] + 1) if not first <= i <= last]
                self._discard(f"{parent}/{other}")
        self.publish(staging, final)
        return lost

    @staticmethod
    def version_path(version: tuple[int, int, int]) -> str:
        """The directories holding a snapshot chunk's files: its version as Hive-style partition values."""
        seq, pos, row = version
        return f"_cdc_file_seq={seq}/_cdc_pos={pos}/_cdc_row={row}"

    def changes_dir(self, table: str) -> str:
        return f"{self.table_dir(table)}/changes"

    def batch_dir(self, table: str, batch_id: int) -> str:
        return f"{self.changes_dir(table)}/batch={batch_id}"

    def staging_root(self, table: str) -> str:
        return f"{self.table_dir(table)}/_staging"

    def staging_dir(self, table: str) -> str:
        return f"{self.staging_root(table)}/{uuid.uuid4().hex}"

    def publish(self, staging: str, final: str) -> None:
        """Replace ``final`` with ``staging``: remove the old copy, then one rename."""
        if self.storage.exists(final):
            self._discard(final)
        self.storage.rename(staging, final)

    def _discard(self, rel: str) -> None:
        """Take ``rel`` out of readers' sight with one rename (``_``-names are hidden), then delete it."""
        trash = f"{rel.rsplit('/', 1)[0]}/_old-{uuid.uuid4().hex}"
        self.storage.rename(rel, trash)
        self.storage.rmtree(trash)

    def _schema_file(self, table: str, staged: bool) -> str:
        return f"{self.table_dir(table)}/{'snapshot/_schema-next.json' if staged else '_schema.json'}"

    def write_schema(self, table: str, schema_json: str, staged: bool = False) -> None:
        if self.read_schema(table, staged) != schema_json:
            self.storage.write_text(self._schema_file(table, staged), schema_json)

    def read_schema(self, table: str, staged: bool = False) -> str | None:
        """The Spark schema (JSON) of the table's data columns; ``staged``: the one of a snapshot in progress
        under a new definition."""
        return self.storage.read_text(self._schema_file(table, staged))

    def delete_staged_schema(self, table: str) -> None:
        self.storage.delete(self._schema_file(table, True))

    def supersede_changes(self, table: str) -> None:
        """Move the table's changelog out of readers' sight, kept (one rename)."""
        self.storage.rename(self.changes_dir(table), f"{self.table_dir(table)}/_superseded/changes-{uuid.uuid4().hex}")

    def write_current(self, table: str, epoch: int, min_low_watermark: tuple) -> None:
        self.storage.write_text(f"{self.table_dir(table)}/snapshot/_current.json",
                                json.dumps({"epoch": epoch, "min_low_watermark": list(min_low_watermark)}))

    def read_current(self, table: str) -> dict[str, Any] | None:
        text = self.storage.read_text(f"{self.table_dir(table)}/snapshot/_current.json")
        return None if text is None else json.loads(text)

    def has_changes(self, table: str) -> bool:
        return any(n.startswith("batch=") for n in self.storage.listdir(self.changes_dir(table)))

    def batch_ids(self, table: str) -> list[int]:
        return batch_ids(self.storage.listdir(self.changes_dir(table)))

    def read_history(self, table: str) -> list[dict[str, Any]]:
        """The table's versions in ``_schema_history.json``; [] when its columns never changed in place."""
        return read_history(self.storage, self.table_dir(table))

    def write_history(self, table: str, history: list[dict[str, Any]]) -> None:
        self.storage.write_text(f"{self.table_dir(table)}/{HISTORY_FILE}", json.dumps(history))

    def delete_history(self, table: str) -> None:
        self.storage.delete(f"{self.table_dir(table)}/{HISTORY_FILE}")


@dataclass(kw_only=True)
class ParquetSinkSettings:
    """``sink:`` of a parquet pipeline."""

    __pydantic_config__ = {"extra": "forbid"}
    type: Literal["parquet"] = "parquet"
    path: str | None = None  # default: <data home>/<dag_id>/sink


@register_sink
class ParquetSink(FileSink):
    """Snapshot windows are staged: the rows are written once, between the watermarks (the write is what
    forces the read), and published by a rename under their version; a window is rewritten only when its
    binlog window changed some of its keys. All chunks of a window share one version (the window's HW), so it
    lives in the path (Hive-style partition values ``_cdc_file_seq=/_cdc_pos=/_cdc_row=``), which Spark and
    pyarrow readers turn back into columns; ``_cdc_chunk`` in the files names each row's chunk."""

    type = "parquet"
    default_dir = "sink"
    settings = ParquetSinkSettings
    evolves_in_place = True

    def __init__(self, config: SinkConfig, secrets, spark=None) -> None:
        super().__init__(config, secrets, spark)
        self.layout = ParquetLayout(config.path)
        self._histories: dict[str, list[dict[str, Any]]] = {}  # per table, as last read or written

    def finish_snapshot(self, table: str, epoch: int, min_low_watermark: Version,
                        emptied_after: tuple = ()) -> None:
        """Make the epoch current. If it was read under a new definition of the table (``prepare`` staged it),
        the changes written under the old one move to ``_superseded/`` first: the new epoch supersedes them,
        and they cannot be read with the new columns' types; so do changes of versions applied in place, whose
        history starts again with the new epoch. An epoch read under the newest version applied in place makes
        it version 0 (``_rebase_history``). Truncate and drop records need nothing here: reading the state
        filters by their versions. An epoch older than the current one (two collects of one table racing) is
        never made current."""
        previous = self.layout.read_current(table)
        if previous is not None and previous["epoch"] > epoch:
            log.warning("%s: snapshot epoch %d is not made current: epoch %d, planned later, is current already",
                        table, epoch, previous["epoch"])
            return
        staged = self.layout.read_schema(table, staged=True)
        if staged is not None:
            history = self.layout.read_history(table)
            if (staged != self.layout.read_schema(table) or history) and self.layout.has_changes(table):
                self.layout.supersede_changes(table)
            if history:
                self.layout.delete_history(table)
            self.layout.write_schema(table, staged)
            self.layout.delete_staged_schema(table)
        elif previous is None or previous["epoch"] != epoch:
            self._rebase_history(table)
        self._histories.pop(table, None)
        self.layout.write_current(table, epoch, min_low_watermark)

    def _rebase_history(self, table: str) -> None:
        """A new epoch read under the newest version (its columns are ``_schema.json``): number the versions so
        that it is 0, as the stream numbers the epoch's versions; older ones go negative and keep telling which
        columns the batches written under them have."""
        history = self.layout.read_history(table)
        if history and history[-1]["number"] != 0:
            top = history[-1]["number"]
            self.layout.write_history(table, [{**e, "number": e["number"] - top} for e in history])

    def evolve_in_place(self, versions, epoch: int = 0) -> None:
        """Record ``versions`` in ``_schema_history.json`` (new ones appended; recorded ones and their first batch
        kept) and make the newest the table's ``_schema.json``. No file is rewritten: readers carry each part up
        from the version it was written under. A table whose columns never changed records nothing. The history
        is the epoch's whose state is current (a re-snapshot's definition waits in staging until it finishes),
        so ``epoch`` needs no check here."""
        table = versions[-1].table
        recorded = self.layout.read_history(table)
        if not recorded and len(versions) < 2:
            self._histories[table] = []
            return
        entries = {e["number"]: e for e in recorded}
        for version in versions:
            entry = history_entry(version)
            known = entries.setdefault(version.number, entry)
            if known["schema"] != entry["schema"]:
                raise SinkError(
                    f"{table}: the parquet sink records version {version.number} of its definition with other columns "
                    f"than the stream's ({', '.join(f['name'] + ' ' + f['type'] for f in known['schema']['fields'])}); "
                    f"its history is of another definition: re-snapshot the table")
        history = sorted(entries.values(), key=lambda e: e["number"])
        if history != recorded:
            self.layout.write_history(table, history)
        self._histories[table] = history
        self.layout.write_schema(table, schema_text(history[-1]["schema"]))

    def prepare(self, types, evolve: bool = False) -> None:
        """Record the table's columns the first time; a snapshot under another definition (``evolve``) stages
        it for ``finish_snapshot``, so the current state stays readable as it was until the new epoch is
        complete."""
        from pyspark.sql.types import StructType

        table = str(types.schema.table)
        self.remove_abandoned_staging(table)
        schema_json = StructType.fromDDL(types.spark_ddl).json()
        current = self.layout.read_schema(table)
        if current is None:
            self.layout.write_schema(table, schema_json)
        elif evolve and current != schema_json:
            self.layout.write_schema(table, schema_json, staged=True)

    def definition(self, table: str) -> SinkDefinition | None:
        schema = self.layout.read_schema(table)
        if schema is None:
            return None
        history = self.layout.read_history(table)
        return SinkDefinition(tuple(f["name"] for f in json.loads(schema)["fields"]),
                              max((int(h["number"]) for h in history), default=0))

    # -- snapshot windows ---------------------------------------------------------------------------------
    def open_window(self, rows, types, epoch: int, indexes: list[int], low_watermark: Version,
                    retried: set[int], split_keys: bool = False) -> "StagedWindow":
        return StagedWindow(self, rows, types, epoch, indexes)

    @staticmethod
    def _snapshot_rows(df):
        from pyspark.sql import functions as F

        return df.select(*[col(c) for c in df.columns if c != CHUNK_COLUMN], F.lit("r").alias("_cdc_op"),
                         F.lit(0).cast("bigint").alias("_cdc_ts_ms"), F.col(CHUNK_COLUMN).alias("_cdc_chunk"))

    def _write_rows(self, df, table: str) -> str:
        """Write a window's rows (data columns and ``CHUNK_COLUMN``) to a new staging directory (returned)."""
        staging = self.layout.staging_dir(table)
        write_checked(self._snapshot_rows(df), self.layout.storage, staging, f"{table}: a snapshot window's rows",
                      lambda d, at: d.write.mode("overwrite").parquet(at))
        return staging

    def _parquet_files(self, staging: str) -> list[str]:
        return [f"{staging}/{n}" for n in self.layout.storage.listdir(staging) if n.endswith(".parquet")]

    def _staged_counts(self, staging: str) -> dict[int, int]:
        """Rows per chunk, from the staged files' ``_cdc_chunk`` column alone (batch by batch: bounded memory)."""
        import pyarrow.compute as pc
        import pyarrow.parquet as pq

        counts: dict[int, int] = {}
        for rel in self._parquet_files(staging):
            with self.layout.storage.open(rel) as f:
                for batch in pq.ParquetFile(f).iter_batches(columns=["_cdc_chunk"], batch_size=1 << 20):
                    for vc in pc.value_counts(batch.column(0)).to_pylist():
                        counts[vc["values"]] = counts.get(vc["values"], 0) + vc["counts"]
        return counts

    def _read_staged(self, staging: str, types):
        """The staged rows as data columns and ``CHUNK_COLUMN`` (for folding the window's changes in)."""
        from pyspark.sql import functions as F
        from pyspark.sql.types import IntegerType, LongType, StringType, StructField, StructType

        schema = StructType([*StructType.fromDDL(types.spark_ddl).fields, StructField("_cdc_op", StringType()),
                             StructField("_cdc_ts_ms", LongType()), StructField("_cdc_chunk", IntegerType())])
        if not self._parquet_files(staging):
            empty = self.spark.createDataFrame([], schema)
            return empty.drop("_cdc_op", "_cdc_ts_ms").withColumnRenamed("_cdc_chunk", CHUNK_COLUMN)
        df = self.spark.read.schema(schema).parquet(self.layout.location(staging))
        return df.select(*[col(f.name) for f in schema.fields[:-3]], F.col("_cdc_chunk").alias(CHUNK_COLUMN))

    def _publish_window(self, staging: str, table: str, epoch: int, indexes: list[int], version: Version,
                        folded, mid_write: Hook) -> list[int]:
        """Rewrite the window from ``folded`` if its binlog window changed it, then rename it into
        ``chunks=<first>-<last>/<version path>``, replacing every directory an earlier attempt wrote for any of
        these chunks (``ParquetLayout.publish_window``)."""
        rewritten = self._write_rows(folded, table) if folded is not None else None
        mid_write()
        wrapper = self.layout.staging_dir(table)
        self.layout.storage.rename(rewritten or staging, f"{wrapper}/{self.layout.version_path(version)}")
        lost = self.layout.publish_window(wrapper, table, epoch, min(indexes), max(indexes), tuple(version))
        if rewritten is not None:
            self.layout.storage.rmtree(staging)
        return lost

    # -- stream batches ------------------------------------------------------------------------------------
    def write_changes(self, df, types, batch_id: int, mid_write: Hook, rows: Callable[[], int]) -> None:
        """A batch with no rows publishes nothing."""
        table = str(types.schema.table)
        staging = self.layout.staging_dir(table)
        write_checked(df, self.layout.storage, staging, f"{table}: stream batch {batch_id}",
                      lambda d, at: d.write.mode("overwrite").parquet(at))
        mid_write()
        if rows():
            self._note_first_batch(table, types.version, batch_id)
            self.layout.publish(staging, self.layout.batch_dir(table, batch_id))
        else:
            self.layout.storage.rmtree(staging)

    def writes_arrow_changes(self, types) -> bool:
        """Not for a table with both TIMESTAMP and DATETIME columns: Spark writes the first as INT96 and the
        second as INT64, pyarrow writes every timestamp column of a file one way. Nor for TIMESTAMP columns when
        the session has Spark write them otherwise (``spark.sql.parquet.outputTimestampType``)."""
        kinds = {t.spark for t in types.types}
        if "timestamp" in kinds and self.spark is not None and \
                self.spark.conf.get("spark.sql.parquet.outputTimestampType", "INT96").upper() != "INT96":
            return False
        return not {"timestamp", "timestamp_ntz"} <= kinds

    def write_arrow_changes(self, rows, types, batch_id: int, mid_write: Hook) -> None:
        """The file Spark would write, written by pyarrow: Spark's types (INT96 timestamps), its schema in the
        footer; staged and published as ``write_changes`` does."""
        import io

        import pyarrow as pa
        import pyarrow.parquet as pq

        table = str(types.schema.table)
        schema = spark_schema(types)
        schema["fields"] += [{"name": n, "type": SPARK_JSON_TYPES.get(t, t), "nullable": True, "metadata": {}}
                             for n, t in META_COLUMNS]
        arrow = pa.schema([pa.field(f["name"], arrow_type(f["type"])) for f in schema["fields"]],
                          metadata={SPARK_ROW_METADATA: json.dumps(schema, separators=(",", ":"))})
        data = pa.Table.from_arrays([rows[f.name].cast(f.type) for f in arrow], schema=arrow)
        out = io.BytesIO()
        pq.write_table(data, out, compression="snappy",
                       use_deprecated_int96_timestamps=any(t.spark == "timestamp" for t in types.types))
        staging = self.layout.staging_dir(table)
        self.layout.storage.write_bytes(f"{staging}/part-00000-{uuid.uuid4()}-c000.snappy.parquet", out.getvalue())
        mid_write()
        self._note_first_batch(table, types.version, batch_id)
        self.layout.publish(staging, self.layout.batch_dir(table, batch_id))

    def _note_first_batch(self, table: str, version: int, batch_id: int) -> None:
        """Record ``batch_id`` as the first batch of ``version`` if none is yet, before the batch is published: a
        reader never sees a batch without knowing which columns it has. The history is read once per table and
        kept; again only when a version it lacks is written."""
        history = self._histories.get(table)
        if history is None or (version > 0 and not any(e["number"] == version for e in history)):
            history = self._histories[table] = self.layout.read_history(table)
        entry = next((e for e in history if e["number"] == version), None)
        if entry is None:
            if version > 0 or history:
                raise SinkError(f"{table}: a batch written with version {version} of its definition, which the parquet "
                                "sink has not recorded (evolve_in_place was not called with it)")
            return
        if entry is history[0] or entry["first_batch"] is not None:
            return
        final = self.layout.batch_dir(table, batch_id)
        if self.layout.storage.exists(final):  # an earlier attempt of the batch, under an older version
            self.layout._discard(final)
        history = self.layout.read_history(table)  # as evolve_in_place may have left it since it was kept
        entry = next((e for e in history if e["number"] == version), None)
        if entry is not None and entry["first_batch"] is None:
            entry["first_batch"] = batch_id
            self.layout.write_history(table, history)
        self._histories[table] = history

    def current_state(self, types, include_meta: bool = False):
        """Rows of the current snapshot epoch + newer changes; newest version per key; deletes dropped."""
        from pyspark.sql import functions as F
        from pyspark.sql.types import StructType

        table = str(types.schema.table)
        schema = StructType.fromDDL(types.spark_ddl + ", " + meta_ddl())
        current = self.layout.read_current(table)
        history = self.layout.read_history(table)
        parts = (self._versioned_parts(table, schema, current, history) if history
                 else self._parts(table, schema, current))
        if not parts:
            names = schema.fieldNames() if include_meta else types.schema.column_names
            return self.spark.createDataFrame([], schema).select(*cols(names))
        df = parts[0]
        for p in parts[1:]:
            df = df.unionByName(p)
        emptied = df.filter(F.col("_cdc_op").isin(*EMPTYING_OPS)).select(
            F.max(F.struct(*[F.col(c) for c in VERSION_COLUMNS])).alias("v")).first()["v"]
        if emptied is not None:  # the newest truncate or drop: rows older than it are gone
            df = df.filter(newer_than(tuple(emptied)))
        df = df.filter(F.col("_cdc_op").isin(*ROW_OPS))
        df = latest_per_key(df, types.schema.key_columns).filter(F.col("_cdc_op") != "d")
        return df if include_meta else df.select(*cols(types.schema.column_names))

    def _parts(self, table: str, schema, current) -> list:
        """The epoch and the changes of a table whose columns never changed in place: one read each."""
        parts = []
        if current:
            d = self.layout.epoch_dir(table, current["epoch"])
            parts.append(self.spark.read.schema(schema).parquet(self.layout.location(d)).select(*cols(schema.fieldNames())))
        if self.layout.has_changes(table):
            ch = self.spark.read.schema(schema).parquet(self.layout.location(self.layout.changes_dir(table)))
            if current:
                ch = ch.filter(newer_than(current["min_low_watermark"]))
            parts.append(ch.select(*cols(schema.fieldNames())))
        return parts

    def _versioned_parts(self, table: str, schema, current, history: list[dict[str, Any]]) -> list:
        """The epoch and the changes batches of each version, each group read with its version's columns and
        carried up to ``schema``."""
        from pyspark.sql.types import StructType

        meta = StructType.fromDDL(meta_ddl()).fields

        def read(index: int, paths: list[str], low) -> Any:
            columns = StructType.fromJson(history[index]["schema"])
            df = self.spark.read.schema(StructType([*columns.fields, *meta])).parquet(
                *[self.layout.location(p) for p in paths])
            if low is not None:
                df = df.filter(newer_than(low))
            return _carried(df, columns, carry_plan(history, index), schema)

        parts = []
        if current:
            parts.append(read(epoch_version(history), [self.layout.epoch_dir(table, current["epoch"])], None))
        low = current["min_low_watermark"] if current else None
        for index, ids in group_batches(history, self.layout.batch_ids(table)).items():
            parts.append(read(index, [self.layout.batch_dir(table, b) for b in ids], low))
        return parts


def history_entry(version) -> dict[str, Any]:
    """A ``TableVersion`` as ``_schema_history.json`` records it: its sink columns, and added values as stored."""
    types = TableSinkTypes.of(version.schema)
    by_name = dict(zip(version.schema.column_names, types.types, strict=True))
    return {"number": version.number, "schema": spark_schema(types), "renamed": dict(version.renamed),
            "added": {c: encode_sink_value(by_name[c].convert(v)) for c, v in version.added.items()},
            "first_batch": None}


def spark_schema(types) -> dict[str, Any]:
    """``StructType.fromDDL(types.spark_ddl).jsonValue()``, without Spark."""
    return {"type": "struct", "fields": [
        {"name": c.name, "type": SPARK_JSON_TYPES.get(t.spark, t.spark), "nullable": True, "metadata": {}}
        for c, t in zip(types.schema.columns, types.types, strict=True)]}


def _carried(df, columns, plan: list[Carried], schema):
    """Rows read with ``columns`` (a version's) with the data columns of ``schema`` (``plan`` says where each
    is), then the metadata columns."""
    from pyspark.sql import functions as F

    source = {f.name: f.dataType for f in columns.fields}
    by_name = {c.name: c for c in plan}
    exprs = []
    for f in schema.fields:
        if f.name in META_NAMES:
            continue
        c = by_name.get(f.name)
        if c is None or (c.kind == "column" and c.source not in source):
            e = F.lit(None).cast(f.dataType)
        elif c.kind == "column":
            e = col(c.source) if source[c.source] == f.dataType else col(c.source).cast(f.dataType)
        else:
            e = _spark_literal(c.source, f.dataType)
        exprs.append(e.alias(f.name))
    return df.select(*exprs, *cols(META_NAMES))


def _spark_literal(value: Any, data_type):
    """A sink value as a Spark literal of ``data_type``; temporal and binary values go through exact forms
    (not the driver's time zone)."""
    from pyspark.sql import functions as F

    if value is None:
        lit = F.lit(None)
    elif isinstance(value, (bytes, bytearray)):
        lit = F.unbase64(F.lit(base64.b64encode(bytes(value)).decode("ascii")))
    elif isinstance(value, dt.datetime) and value.tzinfo is not None:
        micros = (value - dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)) // dt.timedelta(microseconds=1)
        lit = F.expr(f"timestamp_micros({micros})")
    elif isinstance(value, dt.datetime):
        lit = F.lit(value.isoformat()).cast("timestamp_ntz")
    elif isinstance(value, dt.date):
        lit = F.lit(value.isoformat()).cast("date")
    elif isinstance(value, Decimal):
        lit = F.lit(format(value, "f"))
    else:
        lit = F.lit(value)
    return lit.cast(data_type)


class StagedWindow(FoldedWindow):
    """A parquet window: staged (written once, which forces the read) when opened, published by a rename."""

    def __init__(self, sink: ParquetSink, rows, types, epoch: int, indexes: list[int]) -> None:
        self.sink, self.spark, self.types, self.epoch, self.indexes = sink, sink.spark, types, epoch, indexes
        self.table = str(types.schema.table)
        self.staging = sink._write_rows(rows, self.table)
        self.counts = sink._staged_counts(self.staging)

    def rows(self):
        return self.sink._read_staged(self.staging, self.types)

    def publish_rows(self, folded, version: Version, mid_write: Hook) -> list[int]:
        return self.sink._publish_window(self.staging, self.table, self.epoch, self.indexes, version, folded,
                                         mid_write)
