"""BinlogRetentionSensor: the position the stream will resume from is still on the server."""

from __future__ import annotations

from typing import Any, Sequence

from airflow.sdk.bases.sensor import BaseSensorOperator

from airflow_cdc_provider.core.offsets import BinlogOffset
from airflow_cdc_provider.hooks.mysql_cdc import MySqlCdcHook
from airflow_cdc_provider.pipeline.resolve import load_pipeline


def resume_offset(state) -> BinlogOffset | None:
    """Where the stream continues: its last committed offset, else the seed's start."""
    status = state.read_status()
    if status is not None and status.last_offset is not None:
        return status.last_offset
    seed = state.read_seed()
    return seed.start if seed else None


class BinlogRetentionSensor(BaseSensorOperator):
    """Succeeds when the binlog file holding the stream's resume position still exists; fails with what to
    change (binlog retention, or a re-snapshot) when the server has purged it."""

    template_fields: Sequence[str] = ("config",)

    def __init__(self, *, config: str, **kwargs: Any) -> None:
        kwargs.setdefault("poke_interval", 5)
        kwargs.setdefault("timeout", 300)
        super().__init__(**kwargs)
        self.config = config

    def poke(self, context: Any) -> bool:
        from airflow.sdk.exceptions import AirflowFailException

        p = load_pipeline(self.config)
        start = resume_offset(p.state)
        if start is None or p.stream.startup != "initial" and not p.state.read_status():
            return True
        hook = MySqlCdcHook(p.config.source.conn_id, settings=p.source)
        files = hook.binlog_files()
        if start.file in files:
            return True
        raise AirflowFailException(
            f"the stream must resume at {start}, but the server no longer has {start.file} (oldest binlog: "
            f"{files[0] if files else 'none'}). Changes in between are lost to CDC: keep binlogs longer "
            "(binlog_expire_logs_seconds / expire_logs_days) and re-snapshot every table: trigger the DAG with "
            f"conf {{\"resnapshot\": {sorted(p.config.source.tables)!r}}} after deleting {p.state.uri}/stream."
        )
