"""Publishing snapshot windows in the parquet layout: a retry replaces its window, and a differently grouped
earlier attempt never leaves rows twice nor loses other chunks' rows silently. Run on a local directory and
on fsspec's in-memory filesystem (a stand-in for a remote URI: no local path, no atomic directory rename)."""

import uuid

import pytest

from airflow_cdc_provider.sinks.parquet import ParquetLayout

T = "db.t"


@pytest.fixture(params=["local", "memory"])
def layout(request, tmp_path):
    return ParquetLayout(str(tmp_path) if request.param == "local" else f"memory://sink-{uuid.uuid4().hex}")


def staged(layout, tag):
    d = f"{layout.staging_dir(T)}/w"
    layout.storage.write_text(f"{d}/part-0.parquet", tag)
    return d


def published(layout, epoch=1):
    root = layout.epoch_dir(T, epoch)
    return {n: layout.storage.read_text(f"{root}/{n}/part-0.parquet")
            for n in layout.storage.listdir(root) if not n.startswith("_")}


def test_a_retry_of_the_same_window_replaces_it(layout):
    assert layout.publish_window(staged(layout, "first"), T, 1, 0, 3) == []
    assert layout.publish_window(staged(layout, "retry"), T, 1, 0, 3) == []
    assert published(layout) == {"chunks=0-3": "retry"}


def test_other_windows_stay_and_a_differently_grouped_attempt_reports_the_chunks_it_took_along(layout):
    layout.publish_window(staged(layout, "a"), T, 1, 0, 3)
    layout.publish_window(staged(layout, "b"), T, 1, 4, 7)
    layout.publish_window(staged(layout, "c"), T, 1, 8, 9)
    lost = layout.publish_window(staged(layout, "regrouped"), T, 1, 2, 5)
    assert published(layout) == {"chunks=2-5": "regrouped", "chunks=8-9": "c"}
    assert sorted(lost) == [0, 1, 6, 7]  # their rows went with the replaced directories: read them again
    assert layout.storage.listdir(layout.epoch_dir(T, 1)) == ["chunks=2-5", "chunks=8-9"]  # no _old-* left


def test_current_epoch_and_changes_are_read_back_through_the_same_storage(layout):
    assert layout.read_current(T) is None and not layout.has_changes(T)
    layout.write_current(T, 2, (1, 4, 0))
    staging = staged(layout, "batch")
    layout.publish(staging, layout.batch_dir(T, 0))
    assert layout.read_current(T) == {"epoch": 2, "min_low_watermark": [1, 4, 0]}
    assert layout.has_changes(T)
    assert layout.location(layout.batch_dir(T, 0)).endswith("/db.t/changes/batch=0")
