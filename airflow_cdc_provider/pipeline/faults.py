"""Fault injection, off by default: kill or fail a job at a named point, for the fault tests and soak runs.

Set ``AIRFLOW_CDC_FAULT`` (or the job spec's ``fault``) to JSON::

    {"point": "after_select", "action": "kill", "match": "shop.orders:2", "once": "/tmp/fault-1"}

* ``point``: ``after_low_watermark``, ``after_select``, ``after_high_watermark``, ``mid_sink_write``,
  ``after_sink_write`` (a snapshot window in the sink, its chunks not yet reported), ``mid_batch``,
  ``after_schema_change`` (a stream batch's truncates and drops applied, its batch not yet committed);
* ``action``: ``kill`` (SIGKILL of this process: nothing gets to clean up), ``fail`` (an exception) or
  ``pause`` (sleep ``seconds``, default 10: holds a chunk window open so a test can commit into it; with
  ``until``, a file path, the pause ends as soon as that file exists);
* ``match``: only where the context (a split id, a table, a batch id) contains this text;
* ``once``: a marker file; the fault fires only if it does not exist yet, and creates it, so the retry that
  follows succeeds.
"""

from __future__ import annotations

import json
import os
import signal
import time
from typing import Any, Mapping

POINTS = ("after_low_watermark", "after_select", "after_high_watermark", "mid_sink_write", "after_sink_write",
          "mid_batch", "after_schema_change")
ACTIONS = ("kill", "fail", "pause")
ENV = "AIRFLOW_CDC_FAULT"


class InjectedFault(RuntimeError):
    pass


def parse_fault(value: str | Mapping[str, Any] | None) -> dict[str, Any] | None:
    if not value:
        return None
    fault = json.loads(value) if isinstance(value, str) else dict(value)
    if fault.get("point") not in POINTS:
        raise ValueError(f"{ENV}: point must be one of {', '.join(POINTS)}, got {fault.get('point')!r}")
    if fault.get("action", "kill") not in ACTIONS:
        raise ValueError(f"{ENV}: action must be one of {', '.join(ACTIONS)}, got {fault.get('action')!r}")
    return fault


class FaultSwitch:
    def __init__(self, fault: str | Mapping[str, Any] | None = None) -> None:
        self.fault = parse_fault(fault if fault is not None else os.environ.get(ENV))

    def hit(self, point: str, context: str = "") -> None:
        f = self.fault
        if not f or f["point"] != point or (f.get("match") and f["match"] not in context):
            return
        once = f.get("once")
        if once:
            try:
                fd = os.open(once, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
            except FileExistsError:
                return
            os.close(fd)
        action = f.get("action", "kill")
        if action == "pause":
            end = time.monotonic() + float(f.get("seconds", 10))
            while time.monotonic() < end and not (f.get("until") and os.path.exists(f["until"])):
                time.sleep(0.2)
            return
        if action == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        raise InjectedFault(f"injected fault at {point} ({context})")
