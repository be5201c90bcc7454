"""CollectWatermarksOperator: the reduce step after the mapped chunk tasks."""

from __future__ import annotations

from typing import Any, Sequence

from airflow.sdk import BaseOperator

from airflow_cdc_provider.core.reports import ChunkReport
from airflow_cdc_provider.operators.assets import emit_table_events
from airflow_cdc_provider.operators.lineage import CdcLineageMixin
from airflow_cdc_provider.pipeline.collect import collect_watermarks
from airflow_cdc_provider.pipeline.resolve import load_pipeline
from airflow_cdc_provider.state.records import TablePlan


class CollectWatermarksOperator(CdcLineageMixin, BaseOperator):
    """Check that every planned chunk reported, finish each table's snapshot, write the stream seed.

    Takes upstream task ids (not XComArgs) so that YAML DAG builders can use it as a plain operator.
    """

    template_fields: Sequence[str] = ("config",)
    ui_color = "#e8fdf0"

    def __init__(self, *, config: str, plan_task_id: str = "plan_chunks", snapshot_task_id: str = "snapshot_chunk",
                 **kwargs: Any) -> None:
        kwargs.setdefault("trigger_rule", "all_done")
        super().__init__(**kwargs)
        self.config = config
        self.plan_task_id = plan_task_id
        self.snapshot_task_id = snapshot_task_id

    def execute(self, context: Any) -> dict[str, Any]:
        from airflow.sdk.exceptions import AirflowFailException

        from airflow_cdc_provider.pipeline.collect import MissingChunkReports

        ti = context["ti"]
        plan = {t: TablePlan.from_dict(p) for t, p in (ti.xcom_pull(task_ids=self.plan_task_id, key="plan") or {}).items()}
        # every map index's reports; map_indexes=None would ask for an unmapped task's and log "XCom not found"
        pulled = ti.xcom_pull(task_ids=self.snapshot_task_id) if plan else []
        if isinstance(pulled, dict):  # an unmapped snapshot task's single return value
            pulled = [pulled]
        reports = [ChunkReport.from_dict(r) for item in (pulled or []) if item
                   for r in (item if isinstance(item, list) else [item])]
        p = load_pipeline(self.config)
        try:
            seed = collect_watermarks(p.state, p.open_sink(), plan, reports)
        except MissingChunkReports as exc:
            raise AirflowFailException(str(exc)) from None
        if seed is None:
            self.log.info("nothing was snapshotted in this run and the pipeline has no stream seed yet")
            return {"start": None, "tables": [], "snapshotted": []}
        self.log.info("stream seed: start %s, %d table(s)", seed.start, len(seed.tables))
        # the tables whose epoch this run made current (not those a later re-snapshot superseded meanwhile)
        current = {t: tp for t, tp in plan.items() if t in seed.tables and seed.tables[t].epoch == tp.epoch}
        # a table's snapshot is in the sink as a whole only now: its asset event
        emit_table_events(self, context, p.sink, {
            table: {"kind": "snapshot", "epoch": tp.epoch, "rows": sum(r.rows for r in reports if r.table == table)}
            for table, tp in current.items()})
        return {"start": seed.start.to_dict(), "tables": sorted(seed.tables), "snapshotted": sorted(current)}
