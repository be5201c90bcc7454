"""Is a launched stream job healthy? One judgement shared by the operator's in-process watch and the
deferrable trigger, free of Airflow so it is tested directly.

Inputs: the job's ``stream/status.json`` (written after every batch and every few seconds while idle), the
launch record ``stream/launch.json`` (pid, host, started_at) and whether the process is still alive (``None``
when the watcher runs on another host and cannot tell: then only the heartbeat counts).
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass, field
from typing import Any

RUNNING = ("starting", "running")


@dataclass(frozen=True)
class StreamHealth:
    verdict: str  # starting | running | ended | failed | died | stalled
    message: str
    status: dict[str, Any] = field(default_factory=dict)

    @property
    def final(self) -> bool:
        return self.verdict not in RUNNING

    def to_dict(self) -> dict[str, Any]:
        return {"verdict": self.verdict, "message": self.message, "status": self.status}


def current_status(status: dict[str, Any] | None, launch: dict[str, Any]) -> dict[str, Any]:
    """The status if this launch wrote it (an older run's status file does not count): by the launch id the
    job got in its spec, or for launches without one, by time."""
    if not status:
        return {}
    if launch.get("launch_id"):
        return status if status.get("launch_id") == launch["launch_id"] else {}
    if float(status.get("updated_at") or 0) >= float(launch.get("started_at") or 0) - 1:
        return status
    return {}


def judge(status: dict[str, Any] | None, launch: dict[str, Any], *, now: float, heartbeat_timeout: float,
          alive: bool | None) -> StreamHealth:
    st = current_status(status, launch)
    state = st.get("state")
    job = launch_name(launch)
    if state in ("finished", "stopped"):
        return StreamHealth("ended", f"the stream {state} after {st.get('batches')} batch(es), "
                                     f"{st.get('rows_emitted')} row(s) emitted", st)
    if state == "failed":
        return StreamHealth("failed", f"the stream job ({job}) failed; see {launch.get('log')}", st)
    if alive is False:
        return StreamHealth("died", f"the stream job ({job}) is gone without a final status (killed?); "
                                    f"see {launch.get('log')}; a retry resumes from its checkpoint", st)
    beat = float(st.get("updated_at") or launch.get("started_at") or now)
    age = now - beat
    if age > heartbeat_timeout:
        return StreamHealth("stalled", f"the stream's heartbeat is {age:.0f}s old (limit {heartbeat_timeout:.0f}s); "
                                       "a retry restarts it from its checkpoint", st)
    return StreamHealth(state if state in RUNNING else "starting", f"heartbeat {age:.0f}s ago", st)


def process_alive(pid: int | None) -> bool:
    """True while ``pid`` runs. Reaps it when it is our exited child; a zombie counts as dead."""
    if not pid:
        return False
    try:
        done, _ = os.waitpid(pid, os.WNOHANG)
        if done == pid:
            return False
    except ChildProcessError:
        pass
    try:
        os.kill(pid, 0)
    except OSError:
        return False
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return True


def launch_name(launch: dict[str, Any]) -> str:
    if launch.get("driver_id"):
        return f"driver {launch['driver_id']}"
    return f"pid {launch.get('pid')} on {launch.get('host')}"


def launch_alive(launch: dict[str, Any]) -> bool | None:
    """Whether the launched job is alive; None when this process cannot tell (then the heartbeat decides).

    A cluster-mode driver (``driver_id``) is asked about at the standalone master; a local spark-submit
    (``pid``) is checked on this host, and is unknown from another host."""
    if launch.get("driver_id"):
        from airflow_cdc_provider.spark.launch.standalone_rest import StandaloneRest

        return StandaloneRest(launch["rest_url"]).alive(launch["driver_id"]) if launch.get("rest_url") else None
    if not launch.get("pid"):
        return False
    if launch.get("host") and launch["host"] != socket.gethostname():
        return None
    return process_alive(launch.get("pid"))
