"""Sink types by name: what ``sink.type`` in a pipeline YAML may say, and the class behind each.

The built-in sinks are imported when first asked for; ``register_sink`` adds another type (before the
pipeline files are loaded, e.g. from a module the DAG folder imports). The config schema, the resolution of
a pipeline and the jobs all go through ``sink_class``: adding a sink touches no other module.
"""

from __future__ import annotations

import importlib
from typing import Any, Mapping

from airflow_cdc_provider.sinks.base import Sink, SinkConfig, SinkError

_BUILT_IN = {
    "parquet": "airflow_cdc_provider.sinks.parquet:ParquetSink",
    "jdbc": "airflow_cdc_provider.sinks.postgres:PostgresSink",
    "delta": "airflow_cdc_provider.sinks.delta:DeltaSink",
}
_registered: dict[str, type[Sink]] = {}


def register_sink(cls: type[Sink]) -> type[Sink]:
    """Make ``cls`` the sink of ``sink.type: <cls.type>`` (usable as a class decorator)."""
    _registered[cls.type] = cls
    return cls


def sink_types() -> list[str]:
    return sorted({*_BUILT_IN, *_registered})


def sink_class(name: str) -> type[Sink]:
    if name not in _registered and name in _BUILT_IN:
        module, _, attr = _BUILT_IN[name].partition(":")
        register_sink(getattr(importlib.import_module(module), attr))
    if name not in _registered:
        raise SinkError(f"unknown sink type {name!r}; use one of {', '.join(sink_types())}")
    return _registered[name]


def open_sink(config: SinkConfig, secrets: Mapping[str, str], spark: Any = None) -> Sink:
    """The sink ``config`` names, for the Airflow side (``spark=None``) or a Spark job."""
    return sink_class(config.type)(config, secrets, spark)
