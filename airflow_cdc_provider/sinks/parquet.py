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
Spark's file listing).

Current state of a table (``materialize``): rows of the current snapshot epoch plus the changes newer than
that epoch's smallest low watermark; per key the highest version wins; keys whose winner is a delete are
gone. Changes older than the epoch's low watermark are superseded by the re-snapshot (and may miss deletes
the stream filtered as already contained in it), so they are left out.
"""

from __future__ import annotations

import json
import os
import shutil
import uuid
from pathlib import Path
from typing import Any

from ..state import local_path, table_dir_name


def _chunk_range(name: str) -> tuple[int, int] | None:
    """``chunks=3-7`` -> (3, 7); anything else (staging, trash) -> None."""
    if not name.startswith("chunks="):
        return None
    first, _, last = name[len("chunks="):].partition("-")
    return int(first), int(last)


def _discard(d: Path) -> None:
    """Take ``d`` out of readers' sight with one rename (``_``-names are hidden), then delete it."""
    trash = d.with_name(f"_old-{uuid.uuid4().hex}")
    os.replace(d, trash)
    shutil.rmtree(trash, ignore_errors=True)


class ParquetLayout:
    def __init__(self, path: str | None) -> None:
        if not path:
            from . import SinkError

            raise SinkError("sink.path is required for the parquet sink")
        self.uri = path
        self.root = local_path(path)

    def table_dir(self, table: str) -> Path:
        return self.root / table_dir_name(table)

    def epoch_dir(self, table: str, epoch: int) -> Path:
        return self.table_dir(table) / "snapshot" / f"epoch={epoch}"

    def window_dir(self, table: str, epoch: int, first: int, last: int) -> Path:
        return self.epoch_dir(table, epoch) / f"chunks={first}-{last}"

    def publish_window(self, staging: Path, table: str, epoch: int, first: int, last: int) -> list[int]:
        """Make ``staging`` the directory of chunks ``first..last``, after removing every directory an earlier
        attempt wrote for an overlapping range. Returns the chunks *outside* ``first..last`` whose rows went
        with such a directory (an attempt that grouped the chunks differently, e.g. after an upgrade): the
        caller must drop their reports so they are read again, never silently missing."""
        final = self.window_dir(table, epoch, first, last)
        lost: list[int] = []
        if final.parent.is_dir():
            for d in final.parent.iterdir():
                rng = _chunk_range(d.name)
                if d != final and rng is not None and rng[0] <= last and first <= rng[1]:
                    lost += [i for i in range(rng[0], rng[1] + 1) if not first <= i <= last]
                    _discard(d)
        self.publish(staging, final)
        return lost

    @staticmethod
    def version_path(version: tuple[int, int, int]) -> str:
        """The directories holding a snapshot chunk's files: its version as Hive-style partition values."""
        seq, pos, row = version
        return f"_cdc_file_seq={seq}/_cdc_pos={pos}/_cdc_row={row}"

    def batch_dir(self, table: str, batch_id: int) -> Path:
        return self.table_dir(table) / "changes" / f"batch={batch_id}"

    def staging_dir(self, table: str) -> Path:
        return self.table_dir(table) / "_staging" / uuid.uuid4().hex

    @staticmethod
    def publish(staging: Path, final: Path) -> None:
        """Replace ``final`` with ``staging``: remove the old copy, then one atomic rename."""
        final.parent.mkdir(parents=True, exist_ok=True)
        if final.exists():
            _discard(final)
        os.replace(staging, final)

    def write_schema(self, table: str, schema_json: str) -> None:
        d = self.table_dir(table)
        d.mkdir(parents=True, exist_ok=True)
        tmp = d / f"._schema.{uuid.uuid4().hex}"
        tmp.write_text(schema_json, encoding="utf-8")
        os.replace(tmp, d / "_schema.json")

    def read_schema(self, table: str) -> str | None:
        p = self.table_dir(table) / "_schema.json"
        return p.read_text(encoding="utf-8") if p.exists() else None

    def write_current(self, table: str, epoch: int, min_low_watermark: tuple) -> None:
        d = self.table_dir(table) / "snapshot"
        d.mkdir(parents=True, exist_ok=True)
        tmp = d / f"._current.{uuid.uuid4().hex}"
        tmp.write_text(json.dumps({"epoch": epoch, "min_low_watermark": list(min_low_watermark)}), encoding="utf-8")
        os.replace(tmp, d / "_current.json")

    def read_current(self, table: str) -> dict[str, Any] | None:
        p = self.table_dir(table) / "snapshot" / "_current.json"
        return json.loads(p.read_text(encoding="utf-8")) if p.exists() else None

    def has_changes(self, table: str) -> bool:
        d = self.table_dir(table) / "changes"
        return d.is_dir() and any(p.name.startswith("batch=") for p in d.iterdir())

    def tables(self) -> list[str]:
        if not self.root.is_dir():
            return []
        out = []
        for d in sorted(self.root.iterdir()):
            if (d / "_schema.json").exists():
                out.append(d.name)
        return out
