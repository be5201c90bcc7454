"""DeltaMaintenanceOperator: compaction and VACUUM of a delta pipeline's tables (``sinks.delta_maintenance``)."""

from __future__ import annotations

from typing import Any, Sequence

from airflow.sdk import BaseOperator


class DeltaMaintenanceOperator(BaseOperator):
    """Compact and vacuum every table the pipeline captured, as its ``sink.maintenance`` says (the defaults
    without one); returns the report: per table its data files before and after, the files vacuumed."""

    template_fields: Sequence[str] = ("config",)
    ui_color = "#f3eefd"

    def __init__(self, *, config: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.config = config

    def execute(self, context: Any) -> dict[str, Any]:
        from airflow_cdc_provider.pipeline.config import load_config
        from airflow_cdc_provider.sinks.delta_maintenance import maintain_pipeline

        report = maintain_pipeline(load_config(self.config))
        self.log.info("%d table(s) maintained, %d without a Delta table yet", len(report.tables), len(report.skipped))
        return report.to_dict()
