"""The maintenance VACUUM on a real Delta table (delta-rs): which unreferenced files it deletes, which it keeps."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from deltalake import DeltaTable, write_deltalake

from airflow_cdc_provider.sinks.delta_maintenance import maintain_table
from airflow_cdc_provider.sinks.delta_settings import DeltaMaintenanceSettings

DAY = 86400.0


def _age(path: Path, days: float) -> None:
    then = time.time() - days * DAY
    os.utime(path, (then, then))


def _stray(table: Path, rel: str, days: float) -> Path:
    """A data file in the table's directory that no commit added, written ``days`` ago."""
    path = table / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table({"id": [99], "v": ["stray"]}), path)
    _age(path, days)
    return path


def _table(tmp_path: Path) -> tuple[Path, Path]:
    """A table whose first file a later overwrite removed (just now), aged as if written 10 days ago."""
    table = tmp_path / "shop.orders"
    write_deltalake(str(table), pa.table({"id": [1, 2], "v": ["a", "b"]}))
    removed = Path(DeltaTable(str(table)).file_uris()[0])
    write_deltalake(str(table), pa.table({"id": [1, 2, 3], "v": ["a", "b", "c"]}), mode="overwrite")
    for f in table.glob("*.parquet"):
        _age(f, 10)
    return table, removed


def test_a_week_s_retention_deletes_old_never_committed_window_files_only(tmp_path):
    table, removed = _table(tmp_path)
    killed = _stray(table, "snapshot-1-0-9-dead/part-00000.parquet", days=10)
    running = _stray(table, "snapshot-1-10-19-live/part-00000.parquet", days=0)
    staging = _stray(table, "_staging/orders/part-00000.parquet", days=10)

    done = maintain_table(str(table), "shop.orders", DeltaMaintenanceSettings(compact=False))

    assert done.vacuumed_files == 1
    assert not killed.exists(), "a window's file no commit added, 10 days old, survived the VACUUM"
    assert running.exists(), "a window's file written just now (its job may be about to commit it) was deleted"
    assert staging.exists(), "a file under _staging/ was deleted"
    assert removed.exists(), "a file removed by a commit just now was deleted before the retention ran out"
    assert sorted(DeltaTable(str(table)).to_pyarrow_table().column("id").to_pylist()) == [1, 2, 3]


def test_a_short_retention_deletes_only_files_commits_removed(tmp_path):
    table, removed = _table(tmp_path)
    killed = _stray(table, "snapshot-1-0-9-dead/part-00000.parquet", days=10)

    settings = DeltaMaintenanceSettings(compact=False, vacuum_retention_hours=0, allow_short_retention=True)
    done = maintain_table(str(table), "shop.orders", settings)

    assert done.vacuumed_files == 1
    assert not removed.exists(), "the file the overwrite removed survived a VACUUM of retention 0"
    assert killed.exists(), "a short retention deleted a file no commit added: a running window's could go too"
    assert sorted(DeltaTable(str(table)).to_pyarrow_table().column("id").to_pylist()) == [1, 2, 3]
