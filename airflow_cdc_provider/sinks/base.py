"""What every sink is: the metadata columns it writes, its runtime configuration, and the interface the
pipeline's steps call. A sink type plugs in through ``sinks.registry``; nothing else names sink types.

Every row written carries the metadata columns below. The version ``(_cdc_file_seq, _cdc_pos, _cdc_row)``
totally orders the changes of one key: a change's binlog position, or for snapshot rows a watermark of their
chunk with row -1 (the high watermark; in the jdbc mirror the low watermark, or for a key the binlog window
changed, that change's position), so every later change of the key is newer. Sinks keep, per key, the row with the
highest version, which is what makes retries, replays and re-snapshots converge.

Who calls what:

* the Airflow side (no Spark): ``resolve`` (YAML section -> ``SinkConfig`` + secrets), ``check_writable``
  (validate step), ``finish_snapshot`` (collect step: make a completed epoch the table's current one);
* the snapshot job: ``prepare`` once per table, then per watermark window ``open_window`` (it forces the
  window's read between the watermarks) and the returned window's ``publish`` once the HW is known;
* the stream job: ``write_changes`` per micro-batch and table, idempotent per batch id, then
  ``apply_schema_change`` for each truncate or drop the batch held;
* ``verify`` and ``materialize``: ``current_state``, the table as the sink holds it now (a DataFrame).
"""

from __future__ import annotations

import abc
import logging
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, ClassVar, Iterable, Mapping, Protocol

from airflow_cdc_provider.state.store import table_dir_name

if TYPE_CHECKING:
    from airflow_cdc_provider.pipeline.chunk_window import WindowChanges

META_COLUMNS: tuple[tuple[str, str], ...] = (
    ("_cdc_op", "string"),  # r snapshot read, c insert, u update (after image), d delete (before image);
    # a schema change's record (no data): t truncate, x drop, s resync (changes held until a re-snapshot)
    ("_cdc_ts_ms", "bigint"),  # event time in ms since the epoch; 0 for snapshot rows
    ("_cdc_file_seq", "bigint"),  # binlog file sequence number (mysql-bin.000042 -> 42)
    ("_cdc_pos", "bigint"),  # start of the row event (snapshot rows: the position of their version, above)
    ("_cdc_row", "int"),  # row index in the event; -1 for a watermark
)
META_NAMES = tuple(n for n, _ in META_COLUMNS)
VERSION_COLUMNS = ("_cdc_file_seq", "_cdc_pos", "_cdc_row")
ROW_OPS = ("r", "c", "u", "d")  # the ops of rows with data (the others are schema changes' records)
EMPTYING_OPS = ("t", "x")  # truncate and drop: every row of the table older than the record is gone
ABANDONED_AFTER = 24 * 3600  # seconds without a write after which a staging directory is a killed writer's
CHUNK_COLUMN = "__cdc_chunk"  # a snapshot window's rows: the index of each row's chunk

Hook = Callable[[], None]
Version = tuple[int, int, int]


class SinkError(RuntimeError):
    pass


def check_written(where: str, written: int, held: int) -> None:
    """Spark wrote ``written`` rows as Parquet files to ``where`` (the tasks whose output was committed counted
    them: ``spark.frames.counted_write``), whose files hold ``held``. They differ when the output committer left
    files of task attempts that did not commit, or lost some: committed as they are, rows would be there twice,
    or missing."""
    if held != written:
        raise SinkError(f"{where}: Spark wrote {written:,} rows, but the Parquet files there hold {held:,}: the "
                        "output committer left files of task attempts that did not commit (as "
                        "spark.hadoop.mapreduce.fileoutputcommitter.algorithm.version=2 does after a failed task), "
                        "or lost some. None of them was committed; this task's retry writes them again. Use "
                        "Spark's default committer (algorithm version 1)")


def write_checked(df, storage, rel: str, what: str, write: Callable[[Any, str], None]) -> int:
    """``write(df, location)``: Spark writes ``df`` as Parquet files into the directory ``rel`` of ``storage``;
    then the rows it wrote are checked against those its files hold (``check_written``), and on a difference
    the directory is removed and the write fails. How many rows Spark wrote."""
    from airflow_cdc_provider.spark.frames import counted_write

    location = storage.location(rel)
    written = counted_write(df, lambda d: write(d, location))
    try:
        check_written(f"{what}: {location}", written, parquet_rows(storage, rel))
    except SinkError:
        storage.rmtree(rel)
        raise
    return written


def parquet_rows(storage, rel: str) -> int:
    """The rows the Parquet files directly in the directory ``rel`` of ``storage`` hold, by their footers."""
    import pyarrow.parquet as pq

    rows = 0
    for name in storage.listdir(rel):
        if name.endswith(".parquet"):
            with storage.open(f"{rel}/{name}", "rb") as f:
                rows += pq.ParquetFile(f).metadata.num_rows
    return rows


@dataclass(frozen=True)
class SinkDefinition:
    """What a sink table holds: its data columns, and the version of the source table's definition they are
    at (None: the sink does not keep versions)."""

    columns: tuple[str, ...]
    version: int | None = None


@dataclass
class SinkConfig:
    """A sink as the jobs get it (in the job spec): no secrets. ``path`` for file sinks; ``conn`` (connection
    fields without the password) and ``schema`` for database sinks, whose password travels in the job's
    secrets as ``sink_password``."""

    type: str = "parquet"
    path: str | None = None
    conn: dict[str, Any] = field(default_factory=dict)
    schema: str = "public"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "SinkConfig":
        return cls(**data)

    def identity(self) -> dict[str, Any]:
        """Where the sink's data lives, and nothing that can change without moving it (a connection id, a
        login): what the state store's snapshots and stream position were written for."""
        if self.path is not None:  # the place the storage opens, however the URI spells it
            import posixpath

            from airflow_cdc_provider.state.storage import Storage

            storage = Storage(self.path, key="sink.path")
            protocol = {"s3a": "s3", "s3n": "s3", "local": "file"}.get(storage.protocol, storage.protocol)
            return {"type": self.type, "path": f"{protocol}://{posixpath.normpath(storage.root)}"}
        return {"type": self.type, "host": str(self.conn.get("host") or "").lower(),
                "port": int(self.conn.get("port") or 5432), "database": self.conn.get("schema"), "schema": self.schema}


class SnapshotWindow(Protocol):
    """One watermark window's rows on their way into the sink: read (and counted) between the watermarks, then
    made exactly as of the high watermark by the binlog window's changes (``spark.window_fold``)."""

    counts: dict[int, int]  # rows per chunk index: as read, then as of the high watermark once published

    def publish(self, changes: "WindowChanges", mid_write: Hook) -> list[int]:
        """Bring the window's rows to ``changes.high`` with the binlog window's ``changes`` and make them final;
        return the indexes of other chunks whose rows an earlier, differently grouped attempt took with it
        (their reports must be dropped so they are read again)."""

    def discard(self) -> None:
        """The window is not published (its job failed after reading it): remove what it wrote that no later
        job would find, never anything the sink already holds."""


class Sink(abc.ABC):
    """The interface of a sink type; ``type`` is its ``sink.type`` name, ``settings`` the dataclass of its YAML
    section (validated with the rest of the pipeline file)."""

    type: ClassVar[str]
    settings: ClassVar[type]
    # whether the sink's writes run our Python code on the executors (a Spark Connect server's Python workers
    # then need this package shipped to the session)
    writes_from_executors: ClassVar[bool] = False
    # whether the stream applies an ALTER that adds, drops, renames or widens columns in place (``evolve_in_place``);
    # otherwise such an ALTER holds the table until it is re-snapshotted
    evolves_in_place: ClassVar[bool] = False

    def __init__(self, config: SinkConfig, secrets: Mapping[str, str], spark: Any = None) -> None:
        self.config = config
        self.secrets = dict(secrets)
        self.spark = spark

    # -- the Airflow side ------------------------------------------------------------------------------
    @classmethod
    @abc.abstractmethod
    def resolve(cls, settings: Any, data_dir: Path) -> tuple[SinkConfig, dict[str, str]]:
        """The YAML section as the jobs get it, and its secrets; ``data_dir`` holds the pipeline's defaults."""

    def check_writable(self) -> list[str]:
        """Problems that would stop the first write, each saying which key to change (validate step)."""
        return []

    def table_name(self, table: str) -> str:
        """The name the sink writes ``table`` ('db.table') under (a directory's, by default); a ``SinkError`` for
        one it cannot hold."""
        return table_dir_name(table)

    def check_table_names(self, tables: Iterable[str]) -> list[str]:
        """Problems with the names the captured ``tables`` are written under (validate and plan steps): a name the
        sink cannot hold, and one name for two tables, which would overwrite, truncate and sweep away each
        other's rows."""
        problems, by_name = [], {}
        for table in tables:
            try:
                by_name.setdefault(self.table_name(table), []).append(table)
            except SinkError as exc:
                problems.append(f"source.tables: {exc}")
        for name, sharing in by_name.items():
            if len(sharing) > 1:
                problems.append(f"source.tables: tables {' and '.join(sharing)} would both be written to {name!r} "
                                f"of the {self.type} sink, mixing their rows: capture only one of them here, and "
                                "the other in a pipeline of its own with another sink")
        return problems

    @abc.abstractmethod
    def describe(self) -> str:
        """Where the rows go, without secrets."""

    @abc.abstractmethod
    def finish_snapshot(self, table: str, epoch: int, min_low_watermark: Version, emptied_after: tuple = ()) -> None:
        """Make a completed snapshot epoch of ``table`` its current one (every chunk of it is written).
        ``emptied_after``: the truncates and drops the stream applied since the epoch started (their
        ``SchemaChange``s), for a sink whose windows could have been published after them."""

    # -- the Spark jobs ---------------------------------------------------------------------------------
    def prepare(self, types, evolve: bool = False) -> None:
        """Once per table and job, before the first write: create the table, record its definition. ``evolve``
        (the snapshot job): an existing table takes the source's new definition for this snapshot, and is
        recorded at version 0 of its epoch (``types.epoch``) unless the stream evolved it in this epoch already;
        the stream never changes it (a table held for a re-snapshot keeps its sink as it was)."""

    def evolve_in_place(self, versions, epoch: int) -> None:
        """Bring the table to the newest of ``versions`` (``source.table_versions.TableVersion``, numbered 0..n;
        version 0 is the definition snapshot epoch ``epoch`` was read with), as the source's ALTERs did: renamed
        columns keep their values, added ones hold the version's ``added`` value in every existing row,
        dropped ones go, widened ones take the wider type. Called by the stream job when its query starts,
        before any batch written with the newest version (``types.version``); idempotent (a restart calls it
        again). A table a newer epoch's snapshot has prepared is left as it is (it is being re-snapshotted).
        Only for sinks whose ``evolves_in_place`` is true."""
        raise NotImplementedError(f"the {self.type} sink does not apply schema changes in place")

    @abc.abstractmethod
    def open_window(self, rows, types, epoch: int, indexes: list[int], low_watermark: Version,
                    retried: set[int], split_keys: bool = False) -> SnapshotWindow:
        """Start writing a watermark window's ``rows`` (data columns and ``CHUNK_COLUMN``): the read must
        happen now, between the watermarks. ``retried``: chunks an earlier attempt may have written part of.
        ``split_keys``: the epoch's chunks split the table's keys as the window reads them (they were planned
        under the key order it reads with), so no chunk of the epoch writes a key of another."""

    @abc.abstractmethod
    def write_changes(self, df, types, batch_id: int, mid_write: Hook, rows: Callable[[], int]) -> None:
        """One stream micro-batch of one table (data columns and metadata), idempotent per ``batch_id``;
        ``rows()`` is how many rows ``df`` held, known once it is written. Rows whose ``_cdc_op`` is a schema
        change's (``t`` truncate, ``x`` drop, ``s`` resync: no data columns) are among them, in a changelog
        they are records of their own; ``apply_schema_change`` is called for each after the batch's write."""

    def writes_arrow_changes(self, types) -> bool:
        """Whether a small stream batch of ``types``' table can be written from the driver (``write_arrow_changes``)."""
        return False

    def write_arrow_changes(self, rows, types, batch_id: int, mid_write: Hook) -> None:
        """``write_changes`` for a small batch collected to the driver (``spark.driver_batches``): ``rows``, a
        ``pyarrow.Table`` of the same columns (Spark's Arrow types), is written from this process with the same
        effect and the same idempotence per ``batch_id``. Only for tables ``writes_arrow_changes`` takes."""
        raise NotImplementedError(f"the {self.type} sink writes stream batches with Spark only")

    def apply_schema_change(self, change, types) -> None:
        """Apply a truncate or drop (``core.schema_changes.SchemaChange``) of the stream at its version: rows
        older than it are gone, newer ones stay. Idempotent, and correct whether the batch's rows were written
        before or after it. A sink whose ``current_state`` reads the change's record needs nothing here."""

    def move_table(self, old: str, new: str) -> str | None:
        """Move table ``old``'s sink data (rows, changelog, recorded versions) to ``new``, which the sink does not
        hold: the source renamed the table (``pipeline.renames``); nothing writes either table meanwhile. Moved
        already (``old`` gone, ``new`` there) counts as done. Returns None once moved, else why the sink cannot
        (nothing is moved then)."""
        return f"the {self.type} sink does not move a table's data to another name"

    def definition(self, table: str) -> "SinkDefinition | None":
        """The data columns the sink's table has now and the table version it is at (``source.table_versions``);
        None when the table does not exist in the sink yet."""
        return None

    @abc.abstractmethod
    def current_state(self, types, include_meta: bool = False):
        """The table as the sink holds it now: the newest version per key, deletes gone (a DataFrame)."""


class FileSink(Sink):
    """A sink of files under ``sink.path`` (``self.layout.storage``); ``default_dir``: its directory in the
    pipeline's data dir when the YAML gives no path."""

    default_dir: ClassVar[str]

    @classmethod
    def resolve(cls, settings: Any, data_dir: Path) -> tuple[SinkConfig, dict[str, str]]:
        return SinkConfig(type=cls.type, path=settings.path or str(data_dir / cls.default_dir)), {}

    def check_writable(self) -> list[str]:
        from airflow_cdc_provider.state.storage import StorageError

        try:
            self.layout.storage.ensure_writable("sink path")
        except StorageError as exc:
            return [str(exc)]
        return []

    def describe(self) -> str:
        return f"{self.type} sink at {self.config.path}"

    def move_table(self, old: str, new: str) -> str | None:
        """The table's directory renamed, in one step; refused where a directory rename is a copy of each file
        (an object store), which a crash could leave half done under both names."""
        storage = self.layout.storage
        if not storage.renames_atomically:
            return f"a directory rename on {storage.protocol}:// copies each file, so it is not done"
        source, target = table_dir_name(old), table_dir_name(new)
        if storage.exists(target):
            return None if not storage.exists(source) else f"{self.describe()} holds {new} already"
        if storage.exists(source):
            storage.rename(source, target)
        return None

    def remove_abandoned_staging(self, table: str) -> None:
        """Staged rows a killed window or batch left behind (its retry stages anew): removed once nothing was
        written in them for a day, which no live write comes near."""
        removed = self.layout.storage.remove_abandoned(self.layout.staging_root(table), ABANDONED_AFTER)
        if removed:
            logging.getLogger("airflow_cdc.sink").warning(
                "%s: removed %d staging directories a killed write left behind more than %d hours ago (%s)", table,
                len(removed), ABANDONED_AFTER // 3600, ", ".join(removed[:5]) + (", ..." if len(removed) > 5 else ""))
