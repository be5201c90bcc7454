"""Parquet sink layout (DMS-style): per table a ``snapshot/`` and a ``changes/`` directory.

::

    <path>/<db.table>/_schema.json                        Spark schema of the data columns
    <path>/<db.table>/snapshot/epoch=<E>/chunk=<i>/*.parquet  rows of chunk i as of its high watermark
    <path>/<db.table>/snapshot/_current.json              {"epoch": E, "min_low_watermark": [seq, pos, row]}
    <path>/<db.table>/changes/batch=<B>/*.parquet         the stream's micro-batch B (c/u/d rows)

Each chunk and each batch directory is written to ``_staging/`` first and renamed into place, so a retry
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


class ParquetLayout:
    def __init__(self, path: str | None) -> None:
        if not path:
            from . import SinkError

            raise SinkError("sink.path is required for the parquet sink")
        self.uri = path
        self.root = local_path(path)

    def table_dir(self, table: str) -> Path:
        return self.root / table_dir_name(table)

    def chunk_dir(self, table: str, epoch: int, index: int) -> Path:
        return self.table_dir(table) / "snapshot" / f"epoch={epoch}" / f"chunk={index}"

    def batch_dir(self, table: str, batch_id: int) -> Path:
        return self.table_dir(table) / "changes" / f"batch={batch_id}"

    def staging_dir(self, table: str) -> Path:
        return self.table_dir(table) / "_staging" / uuid.uuid4().hex

    @staticmethod
    def publish(staging: Path, final: Path) -> None:
        """Replace ``final`` with ``staging``: remove the old copy, then one atomic rename."""
        final.parent.mkdir(parents=True, exist_ok=True)
        if final.exists():
            trash = final.with_name(f"_old-{uuid.uuid4().hex}")
            os.replace(final, trash)
            shutil.rmtree(trash, ignore_errors=True)
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
