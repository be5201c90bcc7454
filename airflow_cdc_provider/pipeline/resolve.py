"""A pipeline YAML resolved into what the jobs need: source settings, sink, secrets, state store, options.

Defaults: the state store and the parquet sink live under ``$AIRFLOW_CDC_DATA`` (default
``$AIRFLOW_HOME/cdc``, else ``~/airflow/cdc``) in ``<dag_id>/state`` and ``<dag_id>/sink``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from airflow_cdc_provider.pipeline.config import PipelineConfig, load_config
from airflow_cdc_provider.pipeline.connections import resolve_fields, resolve_mysql
from airflow_cdc_provider.pipeline.jobspec import JobSpec, connection_fields
from airflow_cdc_provider.sinks import SinkConfig
from airflow_cdc_provider.source.settings import ConnectionSettings
from airflow_cdc_provider.state.store import StateStore

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

    def server_id(self, slot: int) -> int:
        """A replica server id from the connection's range (extra ``server_id_range``), one per concurrent
        binlog reader: ``slot`` is the reader's number (a mapped task's index, the stream's own slot)."""
        lo, hi = self.source.server_id_range
        return lo + slot % (hi - lo + 1)

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
        from airflow_cdc_provider.pipeline.config import ConfigError

        raise ConfigError(f"{cfg.path or cfg.dag_id}: sink.conn_id: required for sink type jdbc (a postgres connection)")
    fields = resolve_fields(s["conn_id"], example="postgresql://user:password@host:5432/db")
    password = fields.pop("password", None)
    conn = {"conn_id": s["conn_id"], **{k: v for k, v in fields.items() if k != "conn_type"}}
    return SinkConfig(type="jdbc", conn=conn, schema=s.get("schema") or "public"), password


def resolve_state(cfg: PipelineConfig) -> StateStore:
    """The pipeline's state store (no connection needed)."""
    from airflow_cdc_provider.pipeline.config import ConfigError
    from airflow_cdc_provider.state.storage import StorageError

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


def load_pipeline(config_path: str | os.PathLike[str]) -> Pipeline:
    """The pipeline of a YAML file, resolved (what every operator does first, at run time)."""
    return resolve_pipeline(load_config(config_path))


def check_writable(p: Pipeline) -> list[str]:
    """Problems with the state store and the parquet sink path, each naming the YAML key and what to do."""
    from airflow_cdc_provider.sinks.parquet import ParquetLayout
    from airflow_cdc_provider.state.storage import StorageError

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
