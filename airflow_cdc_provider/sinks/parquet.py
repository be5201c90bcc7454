"""Parquet sink layout (DMS-style): per table a ``snapshot/`` and a ``changes/`` directory.

::

    <path>/<db.table>/_schema.json                        Spark schema of the data columns
    <path>/<db.table>/snapshot/epoch=<E>/chunks=<i>-<j>/_cdc_file_seq=<S>/_cdc_pos=<P>/_cdc_row=<R>/*.parquet
                                      rows of chunks i..j (one watermark window) as of their high watermark
    <path>/<db.table>/snapshot/_current.json              {"epoch": E, "min_low_watermark": [seq, pos, row]}
    <path>/<db.table>/changes/batch=<B>/*.parquet         the stream's micro-batch B (c/u/d rows)

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
gone. Changes older than the epoch's low watermark are superseded by the re-snapshot (and may miss deletes
the stream filtered as already contained in it), so they are left out.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

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
            from airflow_cdc_provider.sinks import SinkError

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

    def write_schema(self, table: str, schema_json: str) -> None:
        self.storage.write_text(f"{self.table_dir(table)}/_schema.json", schema_json)

    def write_current(self, table: str, epoch: int, min_low_watermark: tuple) -> None:
        self.storage.write_text(f"{self.table_dir(table)}/snapshot/_current.json",
                                json.dumps({"epoch": epoch, "min_low_watermark": list(min_low_watermark)}))

    def read_current(self, table: str) -> dict[str, Any] | None:
        text = self.storage.read_text(f"{self.table_dir(table)}/snapshot/_current.json")
        return None if text is None else json.loads(text)

    def has_changes(self, table: str) -> bool:
        return any(n.startswith("batch=") for n in self.storage.listdir(self.changes_dir(table)))
