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

Local paths and ``file://`` URIs are handled here with the standard library.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any, Iterator
from urllib.parse import urlsplit


class StateStoreError(RuntimeError):
    pass


def ensure_writable_dir(root: Path, what: str, key: str) -> None:
    """Create ``root`` if needed and prove a file can be written there; else a StateStoreError naming ``key``."""
    try:
        root.mkdir(parents=True, exist_ok=True)
        probe = root / f".probe-{os.getpid()}"
        probe.write_text("ok")
        probe.unlink()
    except OSError as exc:
        raise StateStoreError(
            f"{what} is not writable ({exc.strerror or exc}); set {key} to a directory the Airflow workers "
            "and Spark driver can write"
        ) from None


def local_path(uri: str) -> Path:
    """``/x``, ``x`` or ``file:///x`` -> a local Path; other schemes are refused with a clear message."""
    parts = urlsplit(str(uri))
    if parts.scheme in ("", "file"):
        return Path(parts.path if parts.scheme else str(uri)).expanduser().absolute()
    raise StateStoreError(
        f"state path {uri!r}: scheme {parts.scheme!r} is not supported here; use a local path or file:// URI "
        "reachable by the Airflow workers and the Spark driver"
    )


def table_dir_name(table: str) -> str:
    """A directory name for 'db.table' that survives any character a MySQL identifier may hold."""
    safe = "".join(c if c.isalnum() or c in "._-" else f"%{ord(c):02X}" for c in table)
    return safe


class StateStore:
    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.uri = str(root)
        self.root = local_path(self.uri)

    # -- files -------------------------------------------------------------------------------------
    def path(self, *parts: str) -> Path:
        return self.root.joinpath(*parts)

    def ensure_writable(self) -> None:
        ensure_writable_dir(self.root, f"state path {self.uri!r}", "state.path")

    def write_json(self, rel: str, data: Any, mode: int = 0o644) -> Path:
        target = self.path(rel)
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=target.parent)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                json.dump(data, f, indent=1, sort_keys=True, default=str)
            os.chmod(tmp, mode)
            os.replace(tmp, target)
        except BaseException:
            if os.path.exists(tmp):
                os.unlink(tmp)
            raise
        return target

    def read_json(self, rel: str, default: Any = None) -> Any:
        try:
            return json.loads(self.path(rel).read_text(encoding="utf-8"))
        except FileNotFoundError:
            return default

    def delete(self, rel: str) -> None:
        try:
            self.path(rel).unlink()
        except FileNotFoundError:
            pass

    def exists(self, rel: str) -> bool:
        return self.path(rel).exists()

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
        base = self.path("tables")
        if base.is_dir():
            for d in sorted(base.iterdir()):
                snap = self.read_json(f"tables/{d.name}/snapshot.json")
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
        return str(self.path("stream", "checkpoint"))

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

    def iter_specs(self) -> Iterator[Path]:
        d = self.path("specs")
        return iter(sorted(d.glob("*.json"))) if d.is_dir() else iter(())
