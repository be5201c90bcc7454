"""A pipeline YAML resolved into what the jobs need: source settings, sink, secrets, state store, options.

Defaults: the state store and the parquet sink live under ``$AIRFLOW_CDC_DATA`` (default
``$AIRFLOW_HOME/cdc``, else ``~/airflow/cdc``) in ``<dag_id>/state`` and ``<dag_id>/sink``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .config import PipelineConfig
from .connections import resolve_fields, resolve_mysql
from .jobspec import JobSpec, connection_fields
from .mysql.settings import ConnectionSettings
from .sinks import SinkConfig
from .state import StateStore

DEFAULT_MAX_BATCH_BYTES = 64 * 2**20  # binlog bytes per stream micro-batch


def data_home() -> Path:
    if os.environ.get("AIRFLOW_CDC_DATA"):
        return Path(os.environ["AIRFLOW_CDC_DATA"])
    return Path(os.environ.get("AIRFLOW_HOME") or Path.home() / "airflow") / "cdc"


@dataclass
class Pipeline:
    config: PipelineConfig
    source: ConnectionSettings
    sink: SinkConfig
    secrets: dict[str, str] = field(repr=False)
    state: StateStore
    stream: dict[str, Any]

    @property
    def dag_id(self) -> str:
        return self.config.dag_id

    def job_spec(self, server_id: int, tables: dict[str, dict[str, Any]] | None = None, **kw: Any) -> JobSpec:
        return JobSpec(
            pipeline=self.dag_id,
            source=connection_fields(self.source),
            tables=tables if tables is not None else {},
            sink=self.sink.to_dict(),
            state_path=self.state.uri,
            server_id=server_id,
            stream=self.stream,
            **kw,
        )


def sink_config(cfg: PipelineConfig) -> tuple[SinkConfig, str | None]:
    """The sink and its password (jdbc), from the YAML ``sink`` section."""
    s = cfg.section("sink")
    kind = s.get("type", "parquet")
    if kind == "parquet":
        return SinkConfig(type="parquet", path=s.get("path") or str(data_home() / cfg.dag_id / "sink")), None
    if not s.get("conn_id"):
        from .config import ConfigError

        raise ConfigError(f"{cfg.path or cfg.dag_id}: sink.conn_id: required for sink type jdbc (a postgres connection)")
    fields = resolve_fields(s["conn_id"], example="postgresql://user:password@host:5432/db")
    password = fields.pop("password", None)
    conn = {"conn_id": s["conn_id"], **{k: v for k, v in fields.items() if k != "conn_type"}}
    return SinkConfig(type="jdbc", conn=conn, schema=s.get("schema") or "public"), password


def resolve_state(cfg: PipelineConfig) -> StateStore:
    """The pipeline's state store (no connection needed)."""
    from .config import ConfigError
    from .storage import StorageError

    try:
        return StateStore(cfg.section("state").get("path") or str(data_home() / cfg.dag_id / "state"))
    except StorageError as exc:
        raise ConfigError(f"{cfg.path or cfg.dag_id}: {exc}") from None


def resolve_pipeline(cfg: PipelineConfig) -> Pipeline:
    source = resolve_mysql(cfg.source.conn_id)
    sink, sink_password = sink_config(cfg)
    secrets = {"source_password": source.password}
    if sink_password:
        secrets["sink_password"] = sink_password
    stream = {"mode": "available_now", "startup": "initial", "max_batch_bytes": DEFAULT_MAX_BATCH_BYTES,
              **cfg.section("stream")}
    return Pipeline(cfg, source, sink, secrets, resolve_state(cfg), stream)


def check_writable(p: Pipeline) -> list[str]:
    """Problems with the state store and the parquet sink path, each naming the YAML key and what to do."""
    from .sinks.parquet import ParquetLayout
    from .storage import StorageError

    where = p.config.path or p.dag_id
    problems = []
    try:
        p.state.ensure_writable()
    except StorageError as exc:
        problems.append(f"{where}: {exc}")
    if p.sink.type == "parquet":
        try:
            ParquetLayout(p.sink.path).storage.ensure_writable("sink path")
        except StorageError as exc:
            problems.append(f"{where}: {exc}")
    return problems
