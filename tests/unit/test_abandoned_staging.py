"""Staged rows a killed window or batch left behind are removed by the sink's next ``prepare`` once nothing has
been written in them for a day; a live write's staging directory (written minutes ago) stays. On a local
directory and on fsspec's in-memory filesystem (a stand-in for an object store)."""

import datetime as dt
import os
import time
import uuid

import pytest

from airflow_cdc_provider.sinks.base import ABANDONED_AFTER, SinkConfig
from airflow_cdc_provider.sinks.delta import DeltaSink
from airflow_cdc_provider.sinks.parquet import ParquetSink

T = "db.t"


@pytest.fixture(params=["parquet-local", "parquet-memory", "delta-local", "delta-memory"])
def sink(request, tmp_path):
    kind, where = request.param.split("-")
    path = str(tmp_path / "sink") if where == "local" else f"memory://sink-{uuid.uuid4().hex}"
    return (ParquetSink if kind == "parquet" else DeltaSink)(SinkConfig(type=kind, path=path), {})


def stage(sink, age_seconds: float) -> str:
    """A staging directory with one file written ``age_seconds`` ago; its name."""
    storage = sink.layout.storage
    rel = sink.layout.staging_dir(T)
    storage.write_text(f"{rel}/part-0.parquet", "rows")
    when = time.time() - age_seconds
    if storage.is_local:
        os.utime(storage.path(f"{rel}/part-0.parquet"), (when, when))
    else:
        storage.fs.store[storage.path(f"{rel}/part-0.parquet")].modified = dt.datetime.fromtimestamp(when, dt.UTC)
    return rel.rsplit("/", 1)[1]


def test_a_killed_writers_staging_goes_and_a_live_ones_stays(sink, caplog):
    old, live = stage(sink, ABANDONED_AFTER + 3600), stage(sink, 600)
    other_table = sink.layout.staging_dir("db.other")
    sink.layout.storage.write_text(f"{other_table}/part-0.parquet", "rows")
    sink.remove_abandoned_staging(T)
    assert sink.layout.storage.listdir(sink.layout.staging_root(T)) == [live]
    assert sink.layout.storage.exists(f"{other_table}/part-0.parquet")
    assert f"{T}: removed 1 staging directories a killed write left behind more than 24 hours ago ({old})" \
        in caplog.text
    sink.remove_abandoned_staging(T)  # nothing more to remove, nothing said
    assert caplog.text.count("removed") == 1


def test_no_staging_yet_is_nothing_to_remove(sink):
    sink.remove_abandoned_staging(T)
    assert sink.layout.storage.listdir(sink.layout.staging_root(T)) == []
