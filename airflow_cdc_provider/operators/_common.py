"""What every pipeline operator shares: the pipeline YAML it belongs to, resolved at run time."""

from __future__ import annotations

from ..config import load_config
from ..pipeline import Pipeline, resolve_pipeline


def load_pipeline(config: str) -> Pipeline:
    return resolve_pipeline(load_config(config))


def server_id_for(pipeline: Pipeline, slot: int) -> int:
    """A replica server id from the connection's range (extra ``server_id_range``), one per concurrent reader."""
    lo, hi = pipeline.source.server_id_range
    return lo + slot % (hi - lo + 1)
