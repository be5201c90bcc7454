"""A pipeline YAML resolved into what the jobs need: source settings, sink, secrets, state store.

Defaults: the state store and the parquet sink live under ``$AIRFLOW_CDC_DATA`` (default
``$AIRFLOW_HOME/cdc``, else ``~/airflow/cdc``) in ``<dag_id>/state`` and ``<dag_id>/sink``.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Iterable

from airflow_cdc_provider.core.offsets import BinlogOffset
from airflow_cdc_provider.pipeline.config import ConfigError, PipelineConfig, StreamConfig, load_config
from airflow_cdc_provider.pipeline.connections import resolve_mysql
from airflow_cdc_provider.pipeline.jobspec import JobSpec
from airflow_cdc_provider.sinks.base import Sink, SinkConfig
from airflow_cdc_provider.sinks.registry import open_sink, sink_class
from airflow_cdc_provider.source.settings import ConnectionConfigError, ConnectionSettings, parse_server_id_range
from airflow_cdc_provider.state.storage import StorageError
from airflow_cdc_provider.state.store import StateStore


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

    @property
    def dag_id(self) -> str:
        return self.config.dag_id

    @property
    def stream(self) -> StreamConfig:
        return self.config.stream

    def open_sink(self, spark=None) -> Sink:
        return open_sink(self.sink, self.secrets, spark)

    def captured_tables(self) -> list[str]:
        """The tables ``source.tables`` (names, globs, regexes) match on the source now, and those the pipeline
        read before that the source no longer has and whose drop the stream has not applied yet (it must
        still read their changes up to it). While there is one, a new table waits (``pipeline.renames``)."""
        from airflow_cdc_provider.pipeline.renames import awaiting_drops
        from airflow_cdc_provider.pipeline.table_schemas import dropped_tables
        from airflow_cdc_provider.pipeline.uncapture import held_tables
        from airflow_cdc_provider.source.connection import connect
        from airflow_cdc_provider.source.schema import discover, list_tables
        from airflow_cdc_provider.source.server import current_offset

        before = self.captured_before()
        with contextlib.closing(connect(self.source)) as conn:
            existing = {str(t) for t in list_tables(conn)}
            patterns = [p for p in self.config.source.tables if not (p in before and p not in existing)]
            found = [str(t) for t in discover(conn, patterns)] if patterns else []
            awaiting = awaiting_drops(self.state, existing, lambda: current_offset(conn))
        if awaiting:  # a new table may be one of them renamed: it waits
            held = held_tables(self.state)
            found = [t for t in found if t in held]
        applied = set(dropped_tables(self.state)) | set(self.state.renamed_tables())
        return found + sorted(t for t in before - existing if t not in found and t not in applied)

    def source_tables(self) -> set[str]:
        """Every table on the source now (``db.t``), captured or not."""
        from airflow_cdc_provider.source.connection import connect
        from airflow_cdc_provider.source.schema import list_tables

        with contextlib.closing(connect(self.source)) as conn:
            return {str(t) for t in list_tables(conn)}

    def source_position(self) -> BinlogOffset:
        """The source's binlog position now."""
        from airflow_cdc_provider.source.connection import connect
        from airflow_cdc_provider.source.server import current_offset

        with contextlib.closing(connect(self.source)) as conn:
            return current_offset(conn)

    def captured_before(self) -> set[str]:
        """The tables this pipeline has snapshotted or streamed: one of them missing on the source was dropped or
        renamed away, not misspelt. A table carried over to its new name (``pipeline.renames``) counts too."""
        return captured_tables_in(self.state) | set(self.state.renamed_tables())

    def server_id(self, slot: int) -> int:
        """A replica server id from the connection's range (extra ``server_id_range``), one per concurrent
        binlog reader: ``slot`` is the reader's number (a mapped task's index, the stream's own slot)."""
        lo, hi = self.source.server_id_range
        return lo + slot % (hi - lo + 1)

    def job_spec(self, server_id: int, tables: Iterable[str] = (), **kw) -> JobSpec:
        """The spec of a job over ``tables`` (each with its configured chunk key)."""
        return JobSpec(
            pipeline=self.dag_id,
            source=self.source,
            tables={t: self.config.source.chunk_key.get(t) for t in tables},
            sink=self.sink,
            state_path=self.state.uri,
            server_id=server_id,
            stream=self.stream,
            **kw,
        )


def captured_tables_in(state: StateStore) -> set[str]:
    """The tables a pipeline's state store says it has snapshotted or streamed (no source connection needed)."""
    seed = state.read_seed()
    return set(state.finished_tables()) | set(seed.tables if seed else ()) | state.saved_tables()


def resolve_state(cfg: PipelineConfig) -> StateStore:
    """The pipeline's state store (no connection needed)."""
    try:
        return StateStore(cfg.state.path or str(data_home() / cfg.dag_id / "state"))
    except StorageError as exc:
        raise ConfigError(f"{cfg.where}: {exc}") from None


def resolve_pipeline(cfg: PipelineConfig) -> Pipeline:
    source = resolve_mysql(cfg.source.conn_id)
    if cfg.source.server_id is not None:  # the pipeline's own replica ids, over the connection's
        try:
            ids = parse_server_id_range(cfg.source.server_id, "source.server_id")
        except ConnectionConfigError as exc:
            raise ConfigError(f"{cfg.where}: {exc}") from None
        source = replace(source, server_id_range=ids)
    try:
        sink, sink_secrets = sink_class(cfg.sink.type).resolve(cfg.sink, data_home() / cfg.dag_id)
    except ConnectionConfigError as exc:  # the jdbc sink's connection
        raise ConfigError(f"{cfg.where}: sink.conn_id: {exc}") from None
    return Pipeline(cfg, source, sink, {"source_password": source.password, **sink_secrets}, resolve_state(cfg))


def load_pipeline(config_path: str | os.PathLike[str]) -> Pipeline:
    """The pipeline of a YAML file, resolved (what every operator does first, at run time)."""
    return resolve_pipeline(load_config(config_path))


def check_writable(p: Pipeline) -> list[str]:
    """Problems with the state store and the sink, each naming the YAML key and what to do."""
    problems = []
    try:
        p.state.ensure_writable()
    except StorageError as exc:
        problems.append(f"{p.config.where}: {exc}")
    try:
        problems += [f"{p.config.where}: {problem}" for problem in p.open_sink().check_writable()]
    except StorageError as exc:  # a sink URI this machine cannot open
        problems.append(f"{p.config.where}: {exc}")
    return problems or sink_moved(p)


def check_sink_names(p: Pipeline, tables: Iterable[str]) -> list[str]:
    """Problems with the names the sink writes the captured ``tables`` under (``Sink.check_table_names``)."""
    return [f"{p.config.where}: {problem}" for problem in p.open_sink().check_table_names(tables)]


def sink_moved(p: Pipeline) -> list[str]:
    """The sink the state store's snapshots and stream position were written for, when the YAML now names
    another: the stream would go on from its checkpoint into the new sink, which would hold only the rows
    changed from now on. The first run that writes records the sink (``claim_sink``)."""
    try:
        recorded = p.state.read_sink_identity()
        current = p.sink.identity()
    except (StorageError, OSError):  # an unreadable state store or sink: check_writable says so
        return []
    if recorded is None or recorded == current:
        return []
    return [f"{p.config.where}: sink: the state store at {p.state.uri} (state.path) holds the snapshots and the "
            f"stream position of this pipeline for {_where(recorded)}, but the sink is now {_where(current)}, "
            "which would get only the changes from now on, never the rows snapshotted before. Put sink back as it "
            "was, or give state.path a new location (a new state store snapshots every table into the new "
            f"sink); if you moved the sink's data there yourself, delete {p.state.uri}/{p.state.SINK}"]


def claim_sink(p: Pipeline) -> None:
    """Record the sink this state store is of, before anything is written for it (``sink_moved``)."""
    if p.state.read_sink_identity() is None:
        p.state.write_sink_identity(p.sink.identity())


def _where(identity: dict) -> str:
    return ", ".join(f"{k} {v}" for k, v in identity.items() if v is not None)
