"""``sink:`` of a delta pipeline as the pipeline YAML gives it, its ``maintenance`` section included (validated
when the YAML is loaded, so a bad retention fails there, not in the maintenance DAG)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Literal

import annotated_types

from airflow_cdc_provider.pipeline.config import Bool, PositiveInt, Str, _Check, _Strict, schedule_problem

# Delta's default ``delta.deletedFileRetentionDuration``: the shortest retention delta-rs accepts with its check on
MIN_RETENTION_HOURS = 168
@dataclass(kw_only=True)
class DeltaMaintenanceSettings:
    """``sink.maintenance`` of a delta pipeline: what the maintenance DAG (and ``airflow-cdc maintain``) does."""

    __pydantic_config__ = {"extra": "forbid"}
    # the maintenance DAG's Airflow schedule; null: only when triggered
    schedule: Annotated[Str | None, _Check(schedule_problem)] = "@daily"
    compact: Bool = True  # OPTIMIZE: rewrite small files into large ones
    z_order: Bool = False  # cluster each table's files by its key (a z-order) instead of a plain compaction
    target_file_size: PositiveInt | None = None  # bytes; default: the table's delta.targetFileSize, else 100 MB
    # null: no VACUUM; 0 (with allow_short_retention) deletes every unreferenced file at once
    vacuum_retention_hours: Annotated[int, _Strict(), annotated_types.Ge(0)] | None = MIN_RETENTION_HOURS
    allow_short_retention: Bool = False  # a retention below 168 hours: no writer or reader holds a version that long


def _retention_problem(settings: DeltaMaintenanceSettings) -> str | None:
    hours = settings.vacuum_retention_hours
    if hours is None or hours >= MIN_RETENTION_HOURS or settings.allow_short_retention:
        return None
    return (f"vacuum_retention_hours {hours} is below Delta's minimum of {MIN_RETENTION_HOURS} hours "
            "(delta.deletedFileRetentionDuration): a VACUUM could delete files a running snapshot task or stream "
            f"batch still reads; use at least {MIN_RETENTION_HOURS}, or set allow_short_retention: true if no "
            f"job or reader ever holds a table version for {hours} hours")


@dataclass(kw_only=True)
class DeltaSinkSettings:
    """``sink:`` of a pipeline writing Delta Lake tables."""

    __pydantic_config__ = {"extra": "forbid"}
    type: Literal["delta"]  # required: a sink section without a type is parquet's
    path: str | None = None  # default: <data home>/<dag_id>/delta
    maintenance: Annotated[DeltaMaintenanceSettings, _Check(_retention_problem)] | None = None
