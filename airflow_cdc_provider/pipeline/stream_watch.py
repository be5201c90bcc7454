"""Is a launched stream job healthy? One judgement shared by the operator's in-process watch and the
deferrable trigger, free of Airflow so it is tested directly.

Inputs: the job's status (``StreamStatus``, written after every batch and every few seconds while idle), the
launch (``StreamLaunch``) and whether the job is still alive (``None`` when the watcher cannot tell, e.g. it
runs on another host: then only the heartbeat counts).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from airflow_cdc_provider.state.records import RUNNING_STATES, StreamLaunch, StreamLease, StreamStatus


@dataclass(frozen=True)
class StreamHealth:
    verdict: str  # starting | running | ended | failed | died | stalled
    message: str
    status: StreamStatus | None = None

    @property
    def final(self) -> bool:
        return self.verdict not in RUNNING_STATES

    def to_dict(self) -> dict[str, Any]:
        return {"verdict": self.verdict, "message": self.message,
                "status": self.status.to_dict() if self.status else None}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "StreamHealth":
        status = data.get("status")
        return cls(data["verdict"], data["message"], StreamStatus.from_dict(status) if status else None)


class ProgressLog:
    """A continuous stream's progress for a task log, visible while it runs: a line when new batches were
    written (at most one per ``batch_gap`` seconds), and one per ``idle_gap`` seconds while nothing changes."""

    def __init__(self, batch_gap: float = 10.0, idle_gap: float = 60.0) -> None:
        self.batch_gap, self.idle_gap = batch_gap, idle_gap
        self._batch: int | None = None
        self._at: float | None = None

    def line(self, status: StreamStatus | None, now: float) -> str | None:
        if status is None or status.state not in RUNNING_STATES:
            return None
        gap = self.batch_gap if status.batch_id != self._batch else self.idle_gap
        if self._at is not None and now - self._at < gap:
            return None
        self._batch, self._at = status.batch_id, now
        at = f"{status.last_offset.file}:{status.last_offset.pos}" if status.last_offset else "its start"
        return (f"stream {status.state}: {status.batches} batch(es), {status.rows_emitted} row(s) emitted, lag "
                f"{status.lag_seconds:.1f}s, at {at}")


def current_status(status: StreamStatus | None, launch: StreamLaunch) -> StreamStatus | None:
    """The status if this launch wrote it (an older run's status file does not count): by the launch id the
    job got in its spec, or for launches without one, by time."""
    if status is None:
        return None
    if launch.launch_id:
        return status if status.launch_id == launch.launch_id else None
    return status if status.updated_at >= launch.started_at - 1 else None


def judge(status: StreamStatus | None, launch: StreamLaunch, *, now: float, heartbeat_timeout: float,
          alive: bool | None) -> StreamHealth:
    st = current_status(status, launch)
    state = st.state if st else None
    if st is not None and state in ("finished", "stopped"):
        return StreamHealth("ended", f"the stream {state} after {st.batches} batch(es), {st.rows_emitted} row(s) "
                                     "emitted", st)
    if state == "failed":
        return StreamHealth("failed", f"the stream job ({launch.name}) failed; see {launch.log}", st)
    if alive is False:
        return StreamHealth("died", f"the stream job ({launch.name}) is gone without a final status (killed?); "
                                    f"see {launch.log}; a retry resumes from its checkpoint", st)
    beat = (st.updated_at if st else 0) or launch.started_at or now
    age = now - beat
    if age > heartbeat_timeout:
        return StreamHealth("stalled", f"the stream's heartbeat is {age:.0f}s old (limit {heartbeat_timeout:.0f}s); "
                                       "a retry restarts it from its checkpoint", st)
    return StreamHealth(state if state in RUNNING_STATES else "starting", f"heartbeat {age:.0f}s ago", st)


def lease_alive(lease: StreamLease, status: StreamStatus | None, *, now: float, heartbeat_timeout: float,
                alive: bool | None) -> bool:
    """Whether the holder of the stream lease still runs its stream. ``alive``: what the watcher can tell of its
    job (a detached launch) or of the holding task's process; None when it cannot (another host): then the
    job's heartbeat decides, or, before its first status, the time since the lease was taken."""
    if alive is not None:
        return alive
    if status is not None and status.launch_id == lease.launch_id:
        return status.state in RUNNING_STATES and now - status.updated_at <= heartbeat_timeout
    return now - lease.acquired_at <= heartbeat_timeout


@dataclass(frozen=True)
class BatchCursor:
    """How far a watcher of one table's stream batches has reported: the launch, and the rows of the table that
    launch had written then."""

    launch_id: str | None = None
    rows: int = 0


def new_batches(status: StreamStatus | None, table: str, seen: BatchCursor) -> tuple[dict[str, Any] | None, BatchCursor]:
    """What the stream wrote of ``table`` since ``seen``, as an asset event's payload (None: nothing new), and the
    cursor after it. A new launch counts from zero; its status counts a batch once the sink holds it."""
    if status is None or status.launch_id is None:
        return None, seen
    rows = int(status.rows_by_table.get(table, 0))
    before = seen.rows if status.launch_id == seen.launch_id else 0
    cursor = BatchCursor(status.launch_id, rows)
    if rows <= before:
        return None, cursor
    at = f"{status.last_offset.file}:{status.last_offset.pos}" if status.last_offset else None
    return {"kind": "stream batches", "table": table, "rows": rows - before, "batch_id": status.batch_id,
            "launch_id": status.launch_id, "position": at}, cursor
