"""The pipeline's metrics (``pipeline.metrics``) sent through Airflow's ``Stats``: to StatsD, Datadog or
OpenTelemetry, whichever ``[metrics]`` turns on, tagged ``dag_id`` and ``table``."""

from __future__ import annotations

import re
from typing import Iterable

from airflow_cdc_provider.pipeline.metrics import Metric, binlog_bytes_behind

_NOT_IN_STAT = re.compile(r"[^A-Za-z0-9_.-]")  # what Airflow's stat name check lets through


def _stats():
    try:
        from airflow.sdk.observability.stats import Stats
    except ImportError:  # Airflow before the Task SDK's own Stats
        from airflow.stats import Stats
    return Stats


def tag_value(text: str) -> str:
    """A tag value Airflow accepts in every metrics backend (influx-style StatsD tags are part of the name)."""
    return _NOT_IN_STAT.sub("_", text)


def emit(metrics: Iterable[Metric], dag_id: str) -> None:
    stats = _stats()
    for m in metrics:
        tags = {"dag_id": tag_value(dag_id)}
        if m.table is not None:
            tags["table"] = tag_value(m.table)
        if m.kind == "incr":
            stats.incr(m.stat, count=int(m.value), tags=tags)
        else:
            stats.gauge(m.stat, m.value, tags=tags)


def source_bytes_behind(settings, offset) -> int | None:
    """How many binlog bytes the source's server holds past ``offset`` (one ``SHOW BINARY LOGS``)."""
    from airflow_cdc_provider.hooks.mysql_cdc import MySqlCdcHook
    from airflow_cdc_provider.source.server import binlog_files

    if offset is None:
        return None
    with MySqlCdcHook(settings=settings).connection() as conn:
        return binlog_bytes_behind(offset, binlog_files(conn))


def stream_progress(progress, meter, status, now: float, source) -> tuple[str | None, list[Metric]]:
    """The progress line of a running stream if one is due now (``ProgressLog``), with the metrics since the
    last one; the binlog bytes behind are asked from the ``source`` (connection settings; None: not asked)
    only then."""
    line = progress.line(status, now)
    if line is None:
        return None, []
    behind = None
    if source is not None and status.last_offset is not None:
        try:
            behind = source_bytes_behind(source, status.last_offset)
        except Exception as exc:  # noqa: BLE001 - the source down must not fail the watch: the stream reconnects
            line += f" (binlog bytes behind not known: {type(exc).__name__}: {exc})"
    if behind is not None:
        line += f", {behind} binlog bytes behind"
    return line, meter.observe(status, behind)
