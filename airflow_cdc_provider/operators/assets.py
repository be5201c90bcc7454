"""Every sink table is an Airflow Asset, so downstream DAGs can ``schedule=[Asset(uri)]`` on the tables they read.

The URI names where the table is, without credentials:

    parquet, delta   file:///data/cdc/shop/<db.table>       (or the sink's s3a://, hdfs://, ... URI)
    jdbc             postgres://host:5432/<database>/<schema>/<db>__<table>   (the PostgreSQL provider's form)

The captured tables are known only at run time (``source.tables`` may hold globs and regexes), and each mapped
chunk task touches only some of them, so the tasks carry one ``AssetAlias`` per pipeline (``sink_alias``) as
their outlet and, on success, add an event for each table they wrote through it. Airflow then records the event
on the table's Asset (creating it the first time), which triggers the DAGs scheduled on it.
"""

from __future__ import annotations

from typing import Any, Mapping
from urllib.parse import quote, urlsplit

from airflow_cdc_provider.sinks.base import SinkConfig
from airflow_cdc_provider.state.store import table_dir_name

ALIAS_PREFIX = "cdc_sink:"
WATCHER_PREFIX = "cdc_stream_batches:"
POSTGRES_PORT = 5432


def sink_alias(dag_id: str):
    """The outlet of a pipeline's chunk and stream tasks: events for its sink tables go through it."""
    from airflow.sdk import AssetAlias

    return AssetAlias(name=f"{ALIAS_PREFIX}{dag_id}")


def without_credentials(uri: str) -> str:
    """``uri`` without a login and password in its authority (``s3a://key:secret@bucket/...``): an Asset URI is
    shown in the UI and sent to every consumer. A user part alone stays (Azure's ``container@account``)."""
    parts = urlsplit(uri)
    if parts.password is None:
        return uri
    host = parts.hostname or ""
    return parts._replace(netloc=f"{host}:{parts.port}" if parts.port else host).geturl()


def table_asset_uri(sink: SinkConfig, table: str) -> str:
    """The Asset URI of ``table`` (``db.t``) in ``sink``; refuses a sink type it has no URI form for."""
    if sink.type in ("parquet", "delta"):
        from airflow_cdc_provider.state.storage import Storage

        root = without_credentials(Storage(sink.path, key="sink.path").location())
        name = quote(table_dir_name(table), safe="")  # the directory's name, as a URI path segment
        return f"{root}/{name}" if urlsplit(root).scheme else f"file://{quote(root)}/{name}"
    if sink.type == "jdbc":
        from airflow_cdc_provider.sinks.postgres import mirror_table_name

        c = sink.conn
        database = c.get("schema") or "postgres"  # an Airflow connection's schema is the database
        path = "/".join(quote(part, safe="") for part in (database, sink.schema, mirror_table_name(table)))
        return f"postgres://{c.get('host') or 'localhost'}:{c.get('port') or POSTGRES_PORT}/{path}"
    raise ValueError(f"sink.type {sink.type!r} has no Asset URI form: add one to {__name__}.table_asset_uri")


def table_asset(config: str, table: str, per_batch: bool = False, poll_interval: float = 5.0):
    """The Asset of ``table`` in the sink of the pipeline YAML ``config``, for a downstream DAG's ``schedule``.

    Its events come when a task of the pipeline wrote the table (a snapshot made current, a stream task's end).
    ``per_batch``: also while a continuous stream runs, at most one event per ``poll_interval`` seconds in which
    it wrote rows of the table (an ``AssetWatcher`` whose trigger reads the stream's status in the state store;
    Airflow runs it in the triggerer while a DAG scheduled on the asset is unpaused)."""
    from airflow.sdk import Asset

    from airflow_cdc_provider.pipeline.config import load_config
    from airflow_cdc_provider.pipeline.resolve import data_home, resolve_state
    from airflow_cdc_provider.sinks.registry import sink_class

    cfg = load_config(config)
    sink, _ = sink_class(cfg.sink.type).resolve(cfg.sink, data_home() / cfg.dag_id)
    uri = table_asset_uri(sink, table)
    if not per_batch:
        return Asset(uri=uri)
    from airflow.sdk import AssetWatcher

    from airflow_cdc_provider.triggers.stream_batches import StreamBatchesTrigger

    trigger = StreamBatchesTrigger(resolve_state(cfg).uri, table, poll_interval)
    return Asset(uri=uri, watchers=[AssetWatcher(name=f"{WATCHER_PREFIX}{cfg.dag_id}:{table}", trigger=trigger)])


def emit_table_events(operator: Any, context: Mapping[str, Any], sink: SinkConfig,
                      tables: Mapping[str, dict[str, Any]]) -> None:
    """An asset event per table (``{table: extra}``) through each ``AssetAlias`` among ``operator``'s outlets;
    Airflow records them when the task succeeds. Without an alias outlet (a hand-written DAG that set none)
    nothing is emitted."""
    from airflow.sdk import Asset, AssetAlias

    aliases = [o for o in (operator.outlets or []) if isinstance(o, AssetAlias)]
    if not aliases or not tables:
        return
    events = context["outlet_events"]
    for alias in aliases:
        for table, extra in sorted(tables.items()):
            events[alias].add(Asset(uri=table_asset_uri(sink, table)), extra={"table": table, **extra})
    operator.log.info("asset events for %d sink table(s) through %s", len(tables),
                      ", ".join(a.name for a in aliases))
