"""What the DAG run a task belongs to means for a CDC pipeline."""

from __future__ import annotations

from typing import Any


def is_backfill(context: Any) -> bool:
    """A run of ``airflow backfill``: its logical dates are past, and a CDC stream has no past to replay. Such a
    run re-snapshots the tables its conf names (``resnapshot``) and launches no stream."""
    run_type = getattr(context.get("dag_run"), "run_type", None)
    return getattr(run_type, "value", run_type) == "backfill"
