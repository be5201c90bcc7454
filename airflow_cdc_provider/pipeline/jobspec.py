"""The job spec: everything a Spark job needs, in one JSON file without secrets; and how secrets travel.

The spec is written by the Airflow operator (or a test) and named on the spark-submit command line; it
holds connection *fields* but never a password. Passwords travel separately, as JSON
``{"source_password": ..., "sink_password": ...}``:

* ``AIRFLOW_CDC_SECRETS_FILE``: path of a 0600 file (shipped with ``--files`` in cluster mode, where the
  driver finds it by its base name in the working directory), or
* ``AIRFLOW_CDC_SECRETS``: the JSON itself, in the environment of the spark-submit process.

Neither reaches argv, the Spark conf or the Spark UI's environment page (Spark redacts nothing it is not
shown, so nothing secret is shown).
"""

from __future__ import annotations

import json
import os
import stat
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from airflow_cdc_provider.core.chunks import Chunk, TableId
from airflow_cdc_provider.pipeline.config import StreamConfig
from airflow_cdc_provider.sinks.base import SinkConfig
from airflow_cdc_provider.source.settings import ConnectionSettings

SECRETS_ENV = "AIRFLOW_CDC_SECRETS"
SECRETS_FILE_ENV = "AIRFLOW_CDC_SECRETS_FILE"


class JobSpecError(ValueError):
    pass


def connection_fields(settings: ConnectionSettings) -> dict[str, Any]:
    """Fields of a source connection without its password."""
    extra: dict[str, Any] = {"charset": settings.charset, "connect_timeout": settings.connect_timeout}
    if settings.ssl:
        extra["ssl"] = settings.ssl
    extra["server_id_range"] = f"{settings.server_id_range[0]}-{settings.server_id_range[1]}"
    return {
        "conn_id": settings.conn_id,
        "host": settings.host,
        "port": settings.port,
        "login": settings.user,
        "schema": settings.database,
        "extra": extra,
    }


ChunkKey = str | list[str] | None  # a configured chunk key (column or columns), None for the primary key


@dataclass
class JobSpec:
    """What one Spark job (a chunk task's or the stream's) works on. One JSON form: ``to_json`` / ``from_json``."""

    pipeline: str
    source: ConnectionSettings  # without its password (``source_settings`` adds it from the secrets)
    tables: dict[str, ChunkKey]  # 'db.t' -> its configured chunk key
    sink: SinkConfig
    state_path: str
    server_id: int
    chunks: list[Chunk] = field(default_factory=list)  # snapshot jobs: the task's chunks, in order
    stream: StreamConfig = field(default_factory=StreamConfig)
    launch_id: str | None = None  # stream jobs: written into every status, so a status is known to be this job's
    read_partitions: int | None = None
    fault: dict[str, Any] | None = None

    def chunk_key(self, table: TableId | str) -> ChunkKey:
        return self.tables.get(str(table))

    def to_json(self) -> str:
        return json.dumps({
            "pipeline": self.pipeline, "source": connection_fields(self.source), "tables": self.tables,
            "sink": self.sink.to_dict(), "state_path": self.state_path, "server_id": self.server_id,
            "chunks": [c.to_dict() for c in self.chunks], "stream": self.stream.to_dict(),
            "launch_id": self.launch_id, "read_partitions": self.read_partitions, "fault": self.fault,
        }, indent=1, sort_keys=True)

    @classmethod
    def from_json(cls, text: str, where: str = "job spec") -> "JobSpec":
        try:
            data = json.loads(text)
            return cls(
                pipeline=data["pipeline"], source=settings_from_fields(data["source"], None),
                tables=dict(data["tables"]), sink=SinkConfig.from_dict(data["sink"]), state_path=data["state_path"],
                server_id=int(data["server_id"]), chunks=[Chunk.from_dict(c) for c in data.get("chunks") or []],
                stream=StreamConfig.from_dict(data.get("stream") or {}), launch_id=data.get("launch_id"),
                read_partitions=data.get("read_partitions"), fault=data.get("fault"),
            )
        except (json.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
            raise JobSpecError(f"{where}: not a valid job spec ({type(exc).__name__}: {exc})") from None

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> "JobSpec":
        """Read the spec from a local path or a state-store URI; in YARN / K8s cluster mode a local path of
        the Airflow worker is not here, but the file was shipped with ``--files`` under its base name."""
        from airflow_cdc_provider.state.storage import read_text

        where = str(path)
        text = read_text(where)
        if text is None and not urlsplit(where).scheme:
            text = read_text(Path(where).name)
        if text is None:
            raise JobSpecError(f"job spec {where} not found (is the state store reachable from the Spark driver?)")
        return cls.from_json(text, where=where)

    def write(self, path: str | os.PathLike[str]) -> Path:
        """Write the spec to a local file atomically (tests and tools; operators use the state store)."""
        p = Path(path)
        p.parent.mkdir(parents=True, exist_ok=True)
        tmp = p.with_name(p.name + ".tmp")
        tmp.write_text(self.to_json(), encoding="utf-8")
        os.replace(tmp, p)
        return p

    def source_settings(self, secrets: dict[str, str]) -> ConnectionSettings:
        return replace(self.source, password=secrets.get("source_password") or "")


def settings_from_fields(fields: dict[str, Any], password: str | None) -> ConnectionSettings:
    return ConnectionSettings.from_fields(
        conn_type="mysql", host=fields["host"], port=fields.get("port"), login=fields.get("login"), password=password,
        schema=fields.get("schema"), extra=fields.get("extra"), conn_id=fields.get("conn_id"))


def load_secrets() -> dict[str, str]:
    """Read the secrets JSON from ``AIRFLOW_CDC_SECRETS_FILE`` or ``AIRFLOW_CDC_SECRETS`` (may be empty)."""
    path = os.environ.get(SECRETS_FILE_ENV)
    if path:
        p = Path(path)
        if not p.exists() and Path(p.name).exists():
            p = Path(p.name)
        mode = stat.S_IMODE(p.stat().st_mode)
        if mode & 0o077:
            raise JobSpecError(f"{SECRETS_FILE_ENV}={path}: the secrets file must not be readable by others (chmod 600)")
        return json.loads(p.read_text(encoding="utf-8"))
    text = os.environ.get(SECRETS_ENV)
    return json.loads(text) if text else {}


def write_secrets_file(path: str | os.PathLike[str], secrets: dict[str, str]) -> Path:
    """Create a 0600 secrets file (created with that mode, so it is never readable by others)."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    if p.exists():
        p.unlink()
    fd = os.open(p, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        json.dump(secrets, f)
    return p
