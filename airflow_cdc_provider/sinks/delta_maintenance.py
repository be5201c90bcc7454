"""Maintenance of the delta sink's tables: compaction (OPTIMIZE) and VACUUM with delta-rs.

Every MERGE rewrites the files holding the keys it changes, so small files and unreferenced old files pile up.
``maintain_pipeline`` compacts each table the pipeline has captured (optionally clustering it by its key with a
z-order) and vacuums the files no version younger than the retention references, logging one line per table.
``sink.maintenance`` in the pipeline YAML schedules it (``dag_factory`` builds a maintenance DAG);
``airflow-cdc maintain`` runs it by hand.

Why it is safe beside running jobs:

* compaction only rewrites files (``dataChange`` false) in a commit without application transactions, so every
  stream batch's and snapshot window's ``txn`` version stays what it was: a replayed batch is still skipped.
  It commits optimistically; when a MERGE commits first, the compaction runs again on the new version, and a
  MERGE that loses to a compaction re-runs itself (``sinks.delta.committing``);
* VACUUM deletes only files unreferenced for longer than the retention, with delta-rs's own retention check on.
  With a retention of at least a week it is a full one, as Delta's own VACUUM: besides the files commits
  removed, it deletes data files no commit ever added (a snapshot window's, its job killed before the commit)
  once written longer ago than the retention; directories starting with ``_`` or ``.`` (the log, staging) are
  left alone. A shorter one deletes only files commits removed: it could take a running window's files before
  their commit.
  A retention below Delta's default minimum (a week) could delete files a running snapshot task or stream batch
  still reads from the version it started on, so it is refused unless ``allow_short_retention`` says otherwise.
"""

from __future__ import annotations

import json
import logging
from dataclasses import asdict, dataclass
from typing import Any

from airflow_cdc_provider.sinks.base import SinkError
from airflow_cdc_provider.sinks.delta import KEY_PROPERTY, DeltaLayout, committing
from airflow_cdc_provider.sinks.delta_settings import MIN_RETENTION_HOURS, DeltaMaintenanceSettings

log = logging.getLogger("airflow_cdc.delta.maintenance")

MAINTENANCE_DAG_SUFFIX = "_maintenance"


class MaintenanceError(SinkError):
    pass


@dataclass(frozen=True)
class TableMaintenance:
    """What maintenance did to one table: its data files before and after, the files compaction rewrote and
    wrote, and the unreferenced files VACUUM deleted."""

    table: str
    files_before: int
    files_after: int
    compacted_files: int
    written_files: int
    vacuumed_files: int
    version: int

    def describe(self) -> str:
        return (f"{self.table}: {self.files_before} -> {self.files_after} data files ({self.compacted_files} "
                f"compacted into {self.written_files}), {self.vacuumed_files} unreferenced files vacuumed, "
                f"now at version {self.version}")


@dataclass(frozen=True)
class MaintenanceReport:
    dag_id: str
    tables: tuple[TableMaintenance, ...]
    skipped: tuple[str, ...]  # captured tables without a Delta table yet

    def to_dict(self) -> dict[str, Any]:
        """JSON types only (lists, not tuples): what an XCom or ``--json`` holds."""
        return {"dag_id": self.dag_id, "tables": [asdict(t) for t in self.tables], "skipped": list(self.skipped)}


def maintain_table(uri: str, table: str, settings: DeltaMaintenanceSettings) -> TableMaintenance:
    """Compact, then vacuum, the Delta table at ``uri``; each step reloads the table when a concurrent commit
    wins, and commits without application transactions."""
    from deltalake import DeltaTable
    from deltalake.transaction import CommitProperties

    before = len(DeltaTable(uri).file_uris())
    metrics: dict[str, Any] = {}
    if settings.compact or settings.z_order:
        def compact() -> dict[str, Any]:
            dt = DeltaTable(uri)
            props = CommitProperties(custom_metadata={"airflow_cdc": "maintenance: compact"})
            if settings.z_order:
                keys = json.loads(dt.metadata().configuration.get(KEY_PROPERTY, "[]"))
                if not keys:
                    raise MaintenanceError(f"{table}: the Delta table at {uri} records no key ({KEY_PROPERTY}) to "
                                           "z-order by; run its snapshot first or set sink.maintenance.z_order: false")
                return dt.optimize.z_order(keys, target_size=settings.target_file_size, commit_properties=props)
            return dt.optimize.compact(target_size=settings.target_file_size, commit_properties=props)

        metrics = committing(f"{table}: compact", compact)
    vacuumed: list[str] = []
    if settings.vacuum_retention_hours is not None:
        def vacuum() -> list[str]:
            hours = settings.vacuum_retention_hours
            return DeltaTable(uri).vacuum(retention_hours=hours, dry_run=False,
                                          enforce_retention_duration=not settings.allow_short_retention,
                                          full=hours >= MIN_RETENTION_HOURS)

        try:
            vacuumed = committing(f"{table}: vacuum", vacuum)
        except Exception as exc:
            if "retention" not in str(exc).lower():
                raise
            raise MaintenanceError(
                f"{table}: VACUUM refused a retention of {settings.vacuum_retention_hours} hours: "
                f"{str(exc).splitlines()[0]}; raise sink.maintenance.vacuum_retention_hours to the table's "
                "delta.deletedFileRetentionDuration") from None
    dt = DeltaTable(uri)
    done = TableMaintenance(table, before, len(dt.file_uris()), int(metrics.get("numFilesRemoved", 0)),
                            int(metrics.get("numFilesAdded", 0)), len(vacuumed), dt.version())
    log.info("%s", done.describe())
    return done


def maintain_pipeline(cfg, settings: DeltaMaintenanceSettings | None = None) -> MaintenanceReport:
    """Maintain every table the pipeline ``cfg`` (a ``PipelineConfig``) has captured, with ``settings`` (default:
    its ``sink.maintenance``, else the defaults). Needs the sink and the state store, not the source."""
    from deltalake import DeltaTable

    from airflow_cdc_provider.pipeline.resolve import captured_tables_in, data_home, resolve_state
    from airflow_cdc_provider.sinks.registry import sink_class

    if cfg.sink.type != "delta":
        raise MaintenanceError(f"{cfg.where}: sink.type is {cfg.sink.type!r}: maintenance (compaction, VACUUM) is for "
                               "the delta sink's tables")
    settings = settings or getattr(cfg.sink, "maintenance", None) or DeltaMaintenanceSettings()
    sink, _ = sink_class(cfg.sink.type).resolve(cfg.sink, data_home() / cfg.dag_id)
    layout = DeltaLayout(sink.path)
    done, skipped = [], []
    for table in sorted(captured_tables_in(resolve_state(cfg))):
        uri = layout.table_uri(table)
        if not DeltaTable.is_deltatable(uri):
            log.info("%s: no Delta table at %s yet; nothing to maintain", table, uri)
            skipped.append(table)
            continue
        done.append(maintain_table(uri, table, settings))
    return MaintenanceReport(cfg.dag_id, tuple(done), tuple(skipped))
