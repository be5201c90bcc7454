"""BinlogRetentionSensor: the position the stream will resume from is still on the server."""

from __future__ import annotations

from typing import Any, Sequence

from airflow.sdk.bases.sensor import BaseSensorOperator

from airflow_cdc_provider.core.offsets import BinlogOffset, gtids_went_back, split_binlog_file
from airflow_cdc_provider.hooks.mysql_cdc import MySqlCdcHook
from airflow_cdc_provider.pipeline.resolve import load_pipeline


def resume_offset(state) -> BinlogOffset | None:
    """Where the stream continues: the end of its last committed batch (Spark's checkpoint), else the seed's
    start. Not the status: a run that failed before its first batch leaves a status without an offset."""
    checkpoint = state.checkpoint_offset()
    if checkpoint is not None:
        return checkpoint
    seed = state.read_seed()
    return seed.start if seed else None


def went_back(resume: BinlogOffset, now: BinlogOffset, gtids: str | None = None) -> bool:
    """Whether the server's binlog is behind ``resume`` (or has another base name), or lacks a transaction of
    ``resume``'s GTID position (a reset binlog grown past ``resume``'s file and position again): positions and
    GTIDs only grow on a server, so it is not the binlog ``resume`` was read from. ``gtids``: the GTIDs the
    server's binlog holds (``source.server.gtid_history``), else ``now``'s."""
    if split_binlog_file(resume.file)[0] != split_binlog_file(now.file)[0]:
        return True
    return now.sort_key[:2] < resume.sort_key[:2] or gtids_went_back(resume.gtid, gtids or now.gtid)


class BinlogRetentionSensor(BaseSensorOperator):
    """Succeeds when the binlog file holding the stream's resume position still exists; fails with what to
    change (binlog retention, or a re-snapshot) when the server has purged it, and with how to start over when
    the server's binlog is behind it (reset, restored, another server)."""

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
        if start is None:  # nothing recorded yet: the stream resolves its startup mode itself
            return True
        hook = MySqlCdcHook(p.config.source.conn_id, settings=p.source)
        files = hook.binlog_files()
        now = hook.current_offset()
        if went_back(start, now, hook.gtid_history()):
            raise AirflowFailException(
                f"the stream must resume at {start}, but the source's binlog is at {now}, behind it or without its "
                "transactions (GTIDs): the server's "
                "binlog was reset (RESET MASTER), restored from a backup, or the connection now reaches another "
                "server. The positions this pipeline's state and sink hold are not comparable with the server's "
                "any more, so neither the stream nor a re-snapshot can go on correctly (a re-snapshot's rows would "
                "lose to the sink's newer-looking versions). Start the pipeline over: delete its state "
                f"({p.state.location()}) and its sink's tables, then run the DAG (a full snapshot).")
        if start.file in files:
            return True
        seed = p.state.read_seed()
        tables = sorted({*(seed.tables if seed else {}), *p.state.finished_tables()}) or p.config.source.tables
        where = "the end of its last committed batch" if p.state.has_checkpoint() else "its seed"
        raise AirflowFailException(
            f"the stream must resume at {start} ({where}), but the server no longer has {start.file} (oldest "
            f"binlog: {files[0] if files else 'none'}). The changes written in between are gone from the binlog, so "
            "the sink lacks them until the tables are read again. Keep binlogs longer (binlog_expire_logs_seconds / "
            f"expire_logs_days), then delete only the stream's checkpoint and seed ({p.state.location('stream')}; "
            "the sink and the finished snapshots stay) and trigger the DAG with conf "
            f"{{\"resnapshot\": {tables!r}}}: the re-snapshot brings every table back to the source's state and "
            "the sink converges by version."
        )
