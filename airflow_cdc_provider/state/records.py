"""The records the pipeline's steps hand each other through the state store (and XCom), one JSON form each.

    TablePlan        plan_chunks -> collect_watermarks: a table's snapshot epoch and its chunk count
    FinishedSnapshot collect_watermarks: a table's completed epoch with every chunk's report
    StreamSeed       collect_watermarks -> stream: where the stream starts, and per table what its snapshot holds
    OverlappedEpoch  stream job -> its later queries: an epoch an older epoch's stream wrote into, and from where
    StreamLaunch     stream task: the launched job (pid and host, or a cluster driver) and its launch id
    StreamLease      stream task: the one task that runs the pipeline's stream now
    StreamStatus     stream job -> stream task, trigger, CLI: the job's heartbeat

Chunk reports themselves are ``core.reports.ChunkReport``. Dicts with string keys stop at ``from_dict``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from typing import Any, Mapping

from airflow_cdc_provider.core.offsets import BinlogOffset
from airflow_cdc_provider.core.reports import ChunkRange, ChunkReport, compact_ranges


def _offset(data: Mapping[str, Any] | None) -> BinlogOffset | None:
    return BinlogOffset.from_dict(data) if data else None


@dataclass(frozen=True)
class TablePlan:
    """A table the plan step snapshots in this run: the epoch of that snapshot and how many chunks it has."""

    epoch: int
    chunks: int

    def to_dict(self) -> dict[str, Any]:
        return {"epoch": self.epoch, "chunks": self.chunks}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "TablePlan":
        return cls(int(data["epoch"]), int(data["chunks"]))


@dataclass(frozen=True)
class PlannedSnapshot:
    """A table's snapshot a DAG run planned and has not finished yet: another run that finds it under way
    (its run still queued or running) leaves the table to it instead of reading it a second time."""

    table: str
    epoch: int
    dag_id: str
    run_id: str
    planned_at: float = field(default_factory=time.time)

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "PlannedSnapshot":
        return cls(str(data["table"]), int(data["epoch"]), str(data["dag_id"]), str(data["run_id"]),
                   float(data.get("planned_at") or 0))


@dataclass(frozen=True)
class FinishedSnapshot:
    """A table's snapshot epoch for which every chunk reported, contiguously."""

    table: str
    epoch: int
    chunks: tuple[ChunkReport, ...]  # in chunk order
    finished_at: float = field(default_factory=time.time)

    @property
    def min_low_watermark(self) -> BinlogOffset:
        return min(r.low_watermark for r in self.chunks)

    @property
    def max_high_watermark(self) -> BinlogOffset:
        return max(r.high_watermark for r in self.chunks)

    @property
    def rows(self) -> int:
        return sum(r.rows for r in self.chunks)

    def to_dict(self) -> dict[str, Any]:
        return {"table": self.table, "epoch": self.epoch, "chunks": [r.to_dict() for r in self.chunks],
                "min_low_watermark": self.min_low_watermark.to_dict(),
                "max_high_watermark": self.max_high_watermark.to_dict(), "rows": self.rows,
                "finished_at": self.finished_at}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "FinishedSnapshot":
        chunks = tuple(sorted((ChunkReport.from_dict(r) for r in data["chunks"]), key=lambda r: r.index))
        return cls(data["table"], int(data["epoch"]), chunks, float(data.get("finished_at") or 0))


@dataclass(frozen=True)
class TableSeed:
    """What the stream must know of one table's finished snapshot: its chunk ranges (compacted) for the emit
    filter; past ``max_high_watermark`` every change of the table is emitted."""

    epoch: int
    chunks: tuple[ChunkRange, ...]
    max_high_watermark: BinlogOffset

    @classmethod
    def of(cls, snapshot: FinishedSnapshot) -> "TableSeed":
        return cls(snapshot.epoch, tuple(compact_ranges(r.range for r in snapshot.chunks)), snapshot.max_high_watermark)

    def to_dict(self) -> dict[str, Any]:
        return {"epoch": self.epoch, "chunks": [c.to_dict() for c in self.chunks],
                "max_high_watermark": self.max_high_watermark.to_dict()}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "TableSeed":
        return cls(int(data["epoch"]), tuple(ChunkRange.from_dict(c) for c in data["chunks"]),
                   BinlogOffset.from_dict(data["max_high_watermark"]))

    def emitting_after(self, position: BinlogOffset) -> "TableSeed":
        """The seed with no high watermark later than ``position``: every change after it is emitted."""
        return TableSeed(self.epoch, tuple(replace(c, high_watermark=min(c.high_watermark, position))
                                           for c in self.chunks), min(self.max_high_watermark, position))


@dataclass(frozen=True)
class OverlappedEpoch:
    """A table's snapshot epoch as the stream took it up, resuming at ``after``, while a stream of an older
    epoch had written the table's changes past the epoch's first low watermark. That stream may have written a
    row whose delete comes later, inside a window's binlog range: the window holds no row of the key, and the
    epoch's emit filter would drop the delete. Every query of the epoch emits all the table's changes after
    ``after`` (``TableSeed.emitting_after``); those a window's rows also hold are older than them, and the
    sinks' version rule keeps them out of their state."""

    epoch: int
    after: BinlogOffset

    def to_dict(self) -> dict[str, Any]:
        return {"epoch": self.epoch, "after": self.after.to_dict()}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "OverlappedEpoch":
        return cls(int(data["epoch"]), BinlogOffset.from_dict(data["after"]))


@dataclass(frozen=True)
class StreamSeed:
    """Where a stream without a checkpoint starts (the smallest high watermark of every finished table's
    chunks), and the tables it captures with what their snapshots hold."""

    start: BinlogOffset
    tables: dict[str, TableSeed]
    created_at: float = field(default_factory=time.time)

    @classmethod
    def of(cls, finished: Mapping[str, FinishedSnapshot]) -> "StreamSeed":
        start = min(r.high_watermark for snap in finished.values() for r in snap.chunks)
        return cls(start, {name: TableSeed.of(snap) for name, snap in finished.items()})

    def to_dict(self) -> dict[str, Any]:
        return {"start": self.start.to_dict(), "tables": {t: s.to_dict() for t, s in self.tables.items()},
                "created_at": self.created_at}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "StreamSeed":
        return cls(BinlogOffset.from_dict(data["start"]),
                   {t: TableSeed.from_dict(s) for t, s in (data.get("tables") or {}).items()},
                   float(data.get("created_at") or 0))


@dataclass(frozen=True)
class StreamLaunch:
    """A launched stream job: a local spark-submit (``pid`` on ``host``) or a standalone cluster driver
    (``driver_id`` at ``rest_url``). ``launch_id`` is written into every status of that job. ``pid_start``: when
    that process started (``hooks.spark_job.process_start``), so that another process given the same pid after
    it ended is not taken for it (None in records of earlier versions: then the pid alone decides)."""

    launch_id: str
    started_at: float
    log: str
    pid: int | None = None
    host: str | None = None
    driver_id: str | None = None
    rest_url: str | None = None
    pid_start: int | None = None

    @property
    def name(self) -> str:
        """How messages name the job."""
        return f"driver {self.driver_id}" if self.driver_id else f"pid {self.pid} on {self.host}"

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if v is not None}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "StreamLaunch":
        return cls(str(data.get("launch_id") or ""), float(data.get("started_at") or 0), str(data.get("log") or ""),
                   data.get("pid"), data.get("host"), data.get("driver_id"), data.get("rest_url"),
                   data.get("pid_start"))


# the stream lease's mode while a plan step moves renamed tables' sink data and rewrites the state: no stream may
# launch in between, with the old name still in what it reads
CARRY_OVER_MODE = "carry-over"


@dataclass(frozen=True)
class StreamLease:
    """The one task that runs the pipeline's stream now. A second stream of a pipeline would fight the first
    over its checkpoint, so every stream task holds this lease (an exclusive file in the state store) while its
    job runs. ``launch`` is the detached job of a continuous stream, which outlives the task's process. A plan
    step carrying renamed tables over holds it too (mode ``CARRY_OVER_MODE``), for the few seconds that takes."""

    launch_id: str
    holder: str  # "<dag_id>/<run_id>/<task_id>"
    try_number: int
    host: str
    pid: int  # the holding task's process
    mode: str
    acquired_at: float = field(default_factory=time.time)
    launch: StreamLaunch | None = None
    pid_start: int | None = None  # when ``pid`` started, as ``StreamLaunch.pid_start``

    def to_dict(self) -> dict[str, Any]:
        return {**self.__dict__, "launch": self.launch.to_dict() if self.launch else None}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "StreamLease":
        launch = data.get("launch")
        return cls(str(data["launch_id"]), str(data["holder"]), int(data["try_number"]), str(data["host"]),
                   int(data["pid"]), str(data["mode"]), float(data.get("acquired_at") or 0),
                   StreamLaunch.from_dict(launch) if launch else None, data.get("pid_start"))


@dataclass(frozen=True)
class ReloadRequest:
    """Asks a running continuous stream to take up snapshots finished after it started (a re-snapshot's new
    epoch, a held table's new definition): it ends its query after the current batch and starts it again from
    the checkpoint with the state store's current seed and definitions, in the same Spark application."""

    epochs: dict[str, int]  # the tables re-snapshotted, with the epoch each finished
    requested_by: str  # dag_id/run_id/task_id, or the command that asked
    requested_at: float = field(default_factory=time.time)

    def to_dict(self) -> dict[str, Any]:
        return {"epochs": dict(self.epochs), "requested_by": self.requested_by, "requested_at": self.requested_at}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "ReloadRequest":
        return cls({str(t): int(e) for t, e in (data.get("epochs") or {}).items()}, str(data.get("requested_by") or ""),
                   float(data.get("requested_at") or 0))


RUNNING_STATES = ("starting", "running")
FINAL_STATES = ("finished", "stopped", "failed")


@dataclass(frozen=True)
class StreamStatus:
    """The stream job's heartbeat, written after every batch and every few seconds while idle."""

    state: str  # starting | running | finished (available_now caught up) | stopped (on request) | failed
    mode: str
    launch_id: str | None = None
    pid: int | None = None
    last_offset: BinlogOffset | None = None  # the last batch's end: where a restart resumes
    lag_seconds: float = 0.0
    rows_emitted: int = 0
    rows_by_table: dict[str, int] = field(default_factory=dict)  # rows emitted per table by this launch
    batches: int = 0
    batch_id: int | None = None
    epochs: dict[str, int] = field(default_factory=dict)  # the snapshot epoch of each table the job has taken up
    tables: list[str] = field(default_factory=list)  # the tables the job's query reads
    app_id: str | None = None
    ui_url: str | None = None
    error: str | None = None  # a failed stream: the line of its error that says what went wrong
    updated_at: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        out = dict(self.__dict__)
        out["last_offset"] = self.last_offset.to_dict() if self.last_offset else None
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "StreamStatus":
        known = {k: data[k] for k in cls.__dataclass_fields__ if k in data}
        known["last_offset"] = _offset(data.get("last_offset"))
        return cls(**known)
