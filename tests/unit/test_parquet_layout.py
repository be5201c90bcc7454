"""Publishing snapshot windows in the parquet layout: a retry replaces its window, and a differently grouped
earlier attempt never leaves rows twice nor loses other chunks' rows silently."""

from airflow_cdc_provider.sinks.parquet import ParquetLayout

T = "db.t"


def staged(layout, tag):
    d = layout.staging_dir(T) / "w"
    d.mkdir(parents=True)
    (d / "part-0.parquet").write_text(tag)
    return d


def published(layout, epoch=1):
    root = layout.epoch_dir(T, epoch)
    return {d.name: (d / "part-0.parquet").read_text() for d in sorted(root.iterdir()) if not d.name.startswith("_")}


def test_a_retry_of_the_same_window_replaces_it(tmp_path):
    layout = ParquetLayout(str(tmp_path))
    assert layout.publish_window(staged(layout, "first"), T, 1, 0, 3) == []
    assert layout.publish_window(staged(layout, "retry"), T, 1, 0, 3) == []
    assert published(layout) == {"chunks=0-3": "retry"}


def test_other_windows_stay_and_a_differently_grouped_attempt_reports_the_chunks_it_took_along(tmp_path):
    layout = ParquetLayout(str(tmp_path))
    layout.publish_window(staged(layout, "a"), T, 1, 0, 3)
    layout.publish_window(staged(layout, "b"), T, 1, 4, 7)
    layout.publish_window(staged(layout, "c"), T, 1, 8, 9)
    lost = layout.publish_window(staged(layout, "regrouped"), T, 1, 2, 5)
    assert published(layout) == {"chunks=2-5": "regrouped", "chunks=8-9": "c"}
    assert sorted(lost) == [0, 1, 6, 7]  # their rows went with the replaced directories: read them again
    assert not list(layout.epoch_dir(T, 1).glob("_old-*"))
