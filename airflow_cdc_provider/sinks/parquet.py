"""The parquet sink (the embedded default), DMS-style: per table a ``snapshot/`` and a ``changes/`` directory.

::

    <path>/<db.table>/_schema.json                        Spark schema of the data columns
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
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from typing import Any, Callable, Literal

from airflow_cdc_provider.sinks.base import (
    CHUNK_COLUMN,
    EMPTYING_OPS,
    ROW_OPS,
    VERSION_COLUMNS,
    FileSink,
    Hook,
    SinkConfig,
    SinkError,
    Version,
)
from airflow_cdc_provider.sinks.registry import register_sink
from airflow_cdc_provider.spark.frames import col, cols, latest_per_key, meta_ddl, newer_than
from airflow_cdc_provider.state.storage import Storage
from airflow_cdc_provider.state.store import table_dir_name


def _chunk_range(name: str) -> tuple[int, int] | None:
    """``chunks=3-7`` -> (3, 7); anything else (staging, trash) -> None."""
    if not name.startswith("chunks="):
        return None
    first, _, last = name[len("chunks="):].partition("-")
    return int(first), int(last)


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

    def publish_window(self, staging: str, table: str, epoch: int, first: int, last: int) -> list[int]:
        """Make ``staging`` the directory of chunks ``first..last``, after removing every directory an earlier
        attempt wrote for an overlapping range. Returns the chunks *outside* ``first..last`` whose rows went
        with such a directory (an attempt that grouped the chunks differently, e.g. after an upgrade): the
        caller must drop their reports so they are read again, never silently missing."""
        final = self.window_dir(table, epoch, first, last)
        parent, name = final.rsplit("/", 1)
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

    def staging_dir(self, table: str) -> str:
        return f"{self.table_dir(table)}/_staging/{uuid.uuid4().hex}"

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

    def __init__(self, config: SinkConfig, secrets, spark=None) -> None:
        super().__init__(config, secrets, spark)
        self.layout = ParquetLayout(config.path)

    def finish_snapshot(self, table: str, epoch: int, min_low_watermark: Version,
                        emptied_after: tuple = ()) -> None:
        """Make the epoch current. If it was read under a new definition of the table (``prepare`` staged it),
        the changes written under the old one move to ``_superseded/`` first: the new epoch supersedes them,
        and they cannot be read with the new columns' types. Truncate and drop records need nothing here:
        reading the state filters by their versions."""
        staged = self.layout.read_schema(table, staged=True)
        if staged is not None:
            if staged != self.layout.read_schema(table) and self.layout.has_changes(table):
                self.layout.supersede_changes(table)
            self.layout.write_schema(table, staged)
            self.layout.delete_staged_schema(table)
        self.layout.write_current(table, epoch, min_low_watermark)

    def prepare(self, types, evolve: bool = False) -> None:
        """Record the table's columns the first time; a snapshot under another definition (``evolve``) stages
        it for ``finish_snapshot``, so the current state stays readable as it was until the new epoch is
        complete."""
        from pyspark.sql.types import StructType

        table = str(types.schema.table)
        schema_json = StructType.fromDDL(types.spark_ddl).json()
        current = self.layout.read_schema(table)
        if current is None:
            self.layout.write_schema(table, schema_json)
        elif evolve and current != schema_json:
            self.layout.write_schema(table, schema_json, staged=True)

    # -- snapshot windows ---------------------------------------------------------------------------------
    def open_window(self, rows, types, epoch: int, indexes: list[int], low_watermark: Version,
                    retried: set[int]) -> "StagedWindow":
        return StagedWindow(self, rows, types, epoch, indexes)

    @staticmethod
    def _snapshot_rows(df):
        from pyspark.sql import functions as F

        return df.select(*[col(c) for c in df.columns if c != CHUNK_COLUMN], F.lit("r").alias("_cdc_op"),
                         F.lit(0).cast("bigint").alias("_cdc_ts_ms"), F.col(CHUNK_COLUMN).alias("_cdc_chunk"))

    def _write_rows(self, df, table: str) -> str:
        """Write a window's rows (data columns and ``CHUNK_COLUMN``) to a new staging directory (returned)."""
        staging = self.layout.staging_dir(table)
        self._snapshot_rows(df).write.mode("overwrite").parquet(self.layout.location(staging))
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
        lost = self.layout.publish_window(wrapper, table, epoch, min(indexes), max(indexes))
        if rewritten is not None:
            self.layout.storage.rmtree(staging)
        return lost

    # -- stream batches ------------------------------------------------------------------------------------
    def write_changes(self, df, types, batch_id: int, mid_write: Hook, rows: Callable[[], int]) -> None:
        """A batch with no rows publishes nothing."""
        table = str(types.schema.table)
        staging = self.layout.staging_dir(table)
        df.write.mode("overwrite").parquet(self.layout.location(staging))
        mid_write()
        if rows():
            self.layout.publish(staging, self.layout.batch_dir(table, batch_id))
        else:
            self.layout.storage.rmtree(staging)

    def current_state(self, types, include_meta: bool = False):
        """Rows of the current snapshot epoch + newer changes; newest version per key; deletes dropped."""
        from pyspark.sql import functions as F
        from pyspark.sql.types import StructType

        table = str(types.schema.table)
        schema = StructType.fromDDL(types.spark_ddl + ", " + meta_ddl())
        parts = []
        current = self.layout.read_current(table)
        if current:
            d = self.layout.epoch_dir(table, current["epoch"])
            parts.append(self.spark.read.schema(schema).parquet(self.layout.location(d)).select(*cols(schema.fieldNames())))
        if self.layout.has_changes(table):
            ch = self.spark.read.schema(schema).parquet(self.layout.location(self.layout.changes_dir(table)))
            if current:
                ch = ch.filter(newer_than(current["min_low_watermark"]))
            parts.append(ch.select(*cols(schema.fieldNames())))
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


class StagedWindow:
    """A parquet window: staged (written once, which forces the read) when opened, published by a rename."""

    def __init__(self, sink: ParquetSink, rows, types, epoch: int, indexes: list[int]) -> None:
        self.sink, self.types, self.epoch, self.indexes = sink, types, epoch, indexes
        self.table = str(types.schema.table)
        self.staging = sink._write_rows(rows, self.table)
        self.counts = sink._staged_counts(self.staging)

    def rows(self):
        return self.sink._read_staged(self.staging, self.types)

    def publish(self, folded, version: Version, mid_write: Hook) -> list[int]:
        return self.sink._publish_window(self.staging, self.table, self.epoch, self.indexes, version, folded,
                                         mid_write)
