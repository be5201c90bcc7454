"""Two attempts of one chunk task at once (a job an earlier attempt left running): a window's directory is
replaced only by a read of its chunks at a later version, never by an older one that finishes last. Real local
sink directory."""

import pytest

from airflow_cdc_provider.sinks.parquet import ParquetLayout, WindowSuperseded

TABLE, EPOCH = "shop.orders", 7


def staged(layout: ParquetLayout, version: tuple[int, int, int], marker: str) -> str:
    """A window staged as the sink stages it: its files under the version's path in a wrapper directory."""
    wrapper = layout.staging_dir(TABLE)
    layout.storage.write_text(f"{wrapper}/{layout.version_path(version)}/{marker}.parquet", marker)
    return wrapper


def published(layout: ParquetLayout) -> list[str]:
    window = layout.window_dir(TABLE, EPOCH, 0, 3)
    return sorted(p.split(window)[1] for p in layout.storage.fs.find(layout.storage.path(window)))


def test_an_older_read_of_a_window_never_replaces_a_newer_one(tmp_path):
    layout = ParquetLayout(str(tmp_path))
    assert layout.publish_window(staged(layout, (5, 100, -1), "first"), TABLE, EPOCH, 0, 3, (5, 100, -1)) == []
    newer = staged(layout, (5, 900, -1), "retry")
    assert layout.publish_window(newer, TABLE, EPOCH, 0, 3, (5, 900, -1)) == []
    assert published(layout) == ["/_cdc_file_seq=5/_cdc_pos=900/_cdc_row=-1/retry.parquet"]
    older = staged(layout, (5, 400, -1), "orphan")  # an earlier attempt's job, finishing last
    with pytest.raises(WindowSuperseded, match=r"chunks 0-3 of snapshot epoch 7: another attempt published a later"):
        layout.publish_window(older, TABLE, EPOCH, 0, 3, (5, 400, -1))
    assert published(layout) == ["/_cdc_file_seq=5/_cdc_pos=900/_cdc_row=-1/retry.parquet"]
    assert not layout.storage.exists(older)
    assert layout.published_version(layout.window_dir(TABLE, EPOCH, 0, 3)) == (5, 900, -1)
    later_file = staged(layout, (6, 4, -1), "later")  # a later binlog file: newer whatever the position
    layout.publish_window(later_file, TABLE, EPOCH, 0, 3, (6, 4, -1))
    assert published(layout) == ["/_cdc_file_seq=6/_cdc_pos=4/_cdc_row=-1/later.parquet"]
