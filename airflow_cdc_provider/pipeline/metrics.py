"""The pipeline's metrics, from what its jobs already report (chunk reports, the stream's status), free of
Airflow: the operators and the trigger send them through Airflow's ``Stats`` (``operators.metrics``).

    airflow_cdc.snapshot.rows           counter  rows a chunk task wrote, per table
    airflow_cdc.snapshot.chunks         counter  chunks a chunk task read, per table
    airflow_cdc.stream.rows             counter  rows the stream wrote, per table
    airflow_cdc.stream.batches          counter  micro-batches the stream wrote
    airflow_cdc.stream.lag_seconds      gauge    commit time of the newest change written, to now, while behind
    airflow_cdc.stream.binlog_bytes_behind  gauge  binlog bytes between the stream's position and the server's

Counters carry increments, so the stream's are the growth of its cumulative totals since the last report
(``StreamMeter``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable, Sequence

from airflow_cdc_provider.core.offsets import BinlogOffset
from airflow_cdc_provider.core.reports import ChunkReport
from airflow_cdc_provider.state.records import StreamStatus

PREFIX = "airflow_cdc"


@dataclass(frozen=True)
class Metric:
    kind: str  # incr | gauge
    name: str  # without the prefix
    value: float
    table: str | None = None  # tagged when the metric is a table's

    @property
    def stat(self) -> str:
        return f"{PREFIX}.{self.name}"


def snapshot_metrics(reports: Iterable[ChunkReport]) -> list[Metric]:
    rows: dict[str, int] = {}
    chunks: dict[str, int] = {}
    for r in reports:
        rows[r.table] = rows.get(r.table, 0) + r.rows
        chunks[r.table] = chunks.get(r.table, 0) + 1
    return ([Metric("incr", "snapshot.rows", n, t) for t, n in sorted(rows.items())]
            + [Metric("incr", "snapshot.chunks", n, t) for t, n in sorted(chunks.items())])


def binlog_bytes_behind(offset: BinlogOffset | None, files: Sequence[tuple[str, int]]) -> int | None:
    """Bytes of binlog from ``offset`` to the server's end (``files``: ``SHOW BINARY LOGS``, oldest first, with
    sizes); None when it cannot be told (no position yet, or its file is no longer on the server)."""
    if offset is None:
        return None
    names = [name for name, _ in files]
    if offset.file not in names:
        return None
    i = names.index(offset.file)
    return max(0, files[i][1] - offset.pos) + sum(size for _, size in files[i + 1:])


@dataclass
class StreamMeter:
    """The stream's metrics from its successive statuses (one launch's cumulative totals): counters get what
    grew since the last report; ``counted`` starts from what an earlier reporter of this launch already sent."""

    counted_rows: dict[str, int] = field(default_factory=dict)
    counted_batches: int = 0

    def observe(self, status: StreamStatus | None, bytes_behind: int | None = None) -> list[Metric]:
        if status is None:
            return []
        out = []
        for table, rows in sorted(status.rows_by_table.items()):
            grown = rows - self.counted_rows.get(table, 0)
            if grown > 0:
                out.append(Metric("incr", "stream.rows", grown, table))
                self.counted_rows[table] = rows
        if status.batches > self.counted_batches:
            out.append(Metric("incr", "stream.batches", status.batches - self.counted_batches))
            self.counted_batches = status.batches
        out.append(Metric("gauge", "stream.lag_seconds", status.lag_seconds))
        if bytes_behind is not None:
            out.append(Metric("gauge", "stream.binlog_bytes_behind", bytes_behind))
        return out

    def to_dict(self) -> dict:
        return {"counted_rows": dict(self.counted_rows), "counted_batches": self.counted_batches}

    @classmethod
    def from_dict(cls, data: dict | None) -> "StreamMeter":
        data = data or {}
        return cls(dict(data.get("counted_rows") or {}), int(data.get("counted_batches") or 0))
