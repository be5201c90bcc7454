"""What the DAG run a task belongs to means for a CDC pipeline."""

from __future__ import annotations

import logging
from typing import Any, Mapping

from airflow_cdc_provider.state.records import PlannedSnapshot

log = logging.getLogger(__name__)


def is_backfill(context: Any) -> bool:
    """A run of ``airflow backfill``: its logical dates are past, and a CDC stream has no past to replay. Such a
    run re-snapshots the tables its conf names (``resnapshot``) and launches no stream."""
    run_type = getattr(context.get("dag_run"), "run_type", None)
    return getattr(run_type, "value", run_type) == "backfill"


ACTIVE_RUN_STATES = ("queued", "running")


def snapshots_under_way(context: Any, planned: Mapping[str, PlannedSnapshot]) -> dict[str, PlannedSnapshot]:
    """Those of ``planned`` (``StateStore.planned_snapshots``) whose DAG run is another one, still queued or
    running: their tables are being read now, and a second read would only repeat it."""
    ti = context["ti"]
    out = {}
    for table, snapshot in planned.items():
        if (snapshot.dag_id, snapshot.run_id) == (ti.dag_id, ti.run_id):
            continue
        try:
            state = ti.get_dagrun_state(snapshot.dag_id, snapshot.run_id)
        except Exception as exc:  # noqa: BLE001 - a run deleted since: nobody works on that snapshot any more
            log.debug("state of DAG run %s/%s not known: %s", snapshot.dag_id, snapshot.run_id, exc)
            continue
        if getattr(state, "value", state) in ACTIVE_RUN_STATES:
            out[table] = snapshot
    return out
