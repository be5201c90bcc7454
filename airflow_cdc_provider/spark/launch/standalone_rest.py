"""The standalone master's REST submission API for one driver (``spark.master.rest.enabled=true``, port 6066 by
default): how a cluster-mode stream is tracked by its driver id from the Airflow worker, the triggerer or the
CLI, and how it is killed."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

ACTIVE_DRIVER_STATES = ("SUBMITTED", "RUNNING", "RELAUNCHING", "UNKNOWN")


class StandaloneRest:
    """The standalone master's REST submission API for one driver."""

    def __init__(self, rest_url: str, timeout: float = 10.0) -> None:
        self.rest_url = rest_url.rstrip("/")
        self.timeout = timeout

    def _call(self, method: str, path: str) -> dict:
        req = urllib.request.Request(f"{self.rest_url}/v1/submissions/{path}", method=method)
        with urllib.request.urlopen(req, timeout=self.timeout) as r:
            return json.load(r)

    def driver_state(self, driver_id: str) -> str | None:
        """SUBMITTED/RUNNING/FINISHED/FAILED/KILLED/ERROR/...; None when the master cannot be asked."""
        try:
            data = self._call("GET", f"status/{driver_id}")
        except (OSError, ValueError, urllib.error.URLError):
            return None
        if not data.get("success"):  # the master does not know this driver
            return "ERROR"
        return data.get("driverState") or None

    def alive(self, driver_id: str) -> bool | None:
        state = self.driver_state(driver_id)
        return None if state is None else state in ACTIVE_DRIVER_STATES

    def kill(self, driver_id: str) -> bool:
        try:
            return bool(self._call("POST", f"kill/{driver_id}").get("success"))
        except (OSError, ValueError, urllib.error.URLError):
            return False
