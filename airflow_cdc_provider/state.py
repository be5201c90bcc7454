"""The pipeline's state store: chunk reports, finished snapshots, the stream seed, checkpoint and status.

One directory per pipeline (``state.path`` in YAML). Layout::

    tables/<db.table>/epoch=<E>/<chunk index>.json   chunk reports of snapshot epoch E
    tables/<db.table>/snapshot.json                   the finished snapshot: epoch, chunk reports, min LW
    stream/seed.json                                  min HW + per-table chunk infos (collect_watermarks)
    stream/checkpoint/                                Spark's checkpoint location
    stream/status.json                                heartbeat: last_offset, lag_seconds, rows_emitted, ...
    stream/stop                                       a stop request for a continuous stream
    specs/                                            job specs (no secrets in them)

An *epoch* is one snapshot of one table (the first, or a re-snapshot): its chunk reports live apart from
other epochs', so a re-snapshot never mixes chunks of two plans. Writes are atomic (temporary file +
rename), so a reader never sees half a report, and a killed job leaves no partial state.

The root is a local path or any URI fsspec opens (``storage.Storage``): the Airflow side and the Spark jobs
both read it directly, so they need no shared disk when the URI is one the cluster reaches too.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any

from .storage import Storage


def table_dir_name(table: str) -> str:
    """A directory name for 'db.table' that survives any character a MySQL identifier may hold."""
    safe = "".join(c if c.isalnum() or c in "._-" else f"%{ord(c):02X}" for c in table)
    return safe


class StateStore:
    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.uri = str(root)
        self.storage = Storage(self.uri, key="state.path")

    # -- files -------------------------------------------------------------------------------------
    def location(self, *parts: str) -> str:
        """A state file or directory as a job (Spark) names it: the URI, or the local path."""
        return self.storage.location("/".join(parts))

    def ensure_writable(self) -> None:
        self.storage.ensure_writable("state path")

    def local_dir(self, *parts: str) -> Path:
        """A directory on this machine for what stays with the Airflow worker (a detached job's log, the
        package archive it builds): inside the state root when that is on this machine, else under the temp
        directory, one per state URI."""
        if self.storage.is_local:
            base = Path(self.storage.root)
        else:
            base = Path(tempfile.gettempdir()) / "airflow-cdc" / hashlib.sha1(self.uri.encode()).hexdigest()[:12]
        d = base.joinpath(*parts)
        d.mkdir(parents=True, exist_ok=True)
        return d

    def write_spec(self, name: str, spec_json: str) -> str:
        """Store a job spec (it holds no secrets) where the job reads it; returns its location for ``--spec``."""
        rel = f"specs/{name}"
        self.storage.write_text(rel, spec_json)
        return self.storage.location(rel)

    def upload(self, local_file: Path, rel: str) -> str:
        """Copy a local file into the store once (``rel`` names content, e.g. by hash); returns its location."""
        if not self.storage.exists(rel):
            self.storage.upload(local_file, rel)
        return self.storage.location(rel)

    def write_json(self, rel: str, data: Any) -> str:
        self.storage.write_text(rel, json.dumps(data, indent=1, sort_keys=True, default=str))
        return self.storage.location(rel)

    def read_json(self, rel: str, default: Any = None) -> Any:
        text = self.storage.read_text(rel)
        return default if text is None else json.loads(text)

    def delete(self, rel: str) -> None:
        self.storage.delete(rel)

    def exists(self, rel: str) -> bool:
        return self.storage.exists(rel)

    # -- snapshots ---------------------------------------------------------------------------------
    @staticmethod
    def chunk_report_rel(table: str, epoch: int, index: int) -> str:
        return f"tables/{table_dir_name(table)}/epoch={epoch}/{index}.json"

    def write_chunk_report(self, epoch: int, index: int, report: dict[str, Any]) -> None:
        self.write_json(self.chunk_report_rel(report["table"], epoch, index), report)

    def read_chunk_report(self, table: str, epoch: int, index: int) -> dict[str, Any] | None:
        return self.read_json(self.chunk_report_rel(table, epoch, index))

    def clear_chunk_report(self, table: str, epoch: int, index: int) -> None:
        self.delete(self.chunk_report_rel(table, epoch, index))

    def finished_snapshot(self, table: str) -> dict[str, Any] | None:
        return self.read_json(f"tables/{table_dir_name(table)}/snapshot.json")

    def write_finished_snapshot(self, table: str, data: dict[str, Any]) -> None:
        self.write_json(f"tables/{table_dir_name(table)}/snapshot.json", data)

    def finished_tables(self) -> dict[str, dict[str, Any]]:
        out = {}
        for name in self.storage.listdir("tables"):
            snap = self.read_json(f"tables/{name}/snapshot.json")
            if snap:
                out[snap["table"]] = snap
        return out

    # -- stream ------------------------------------------------------------------------------------
    SEED = "stream/seed.json"
    STATUS = "stream/status.json"
    STOP = "stream/stop"
    LAUNCH = "stream/launch.json"

    @property
    def checkpoint_location(self) -> str:
        return self.location("stream", "checkpoint")

    def write_seed(self, seed: dict[str, Any]) -> None:
        self.write_json(self.SEED, seed)

    def read_seed(self) -> dict[str, Any] | None:
        return self.read_json(self.SEED)

    def write_status(self, status: dict[str, Any]) -> None:
        self.write_json(self.STATUS, {**status, "updated_at": time.time()})

    def read_status(self) -> dict[str, Any] | None:
        return self.read_json(self.STATUS)

    def request_stop(self) -> None:
        self.write_json(self.STOP, {"requested_at": time.time()})

    def stop_requested(self) -> bool:
        return self.exists(self.STOP)

    def clear_stop(self) -> None:
        self.delete(self.STOP)
