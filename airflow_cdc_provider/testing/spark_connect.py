"""A private, long-lived Spark Connect server on loopback (``local[2]`` by default), the opt-in way to run
snapshot chunks without a spark-submit per task (``spark.connect_conn_id``). pyspark's wheel has the server
class but not ``start-connect-server.sh``, which is only this spark-submit.

Used by the Connect tests and ``make bench``; usable by hand::

    python -m airflow_cdc_provider.testing.spark_connect   # prints the sc:// URL, Ctrl-C stops it
"""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

from airflow_cdc_provider.spark.session import check_reachable, default_jars
from airflow_cdc_provider.testing.mariadb import PrivateServer, free_port, serve_until_interrupted, stop_process_group
from airflow_cdc_provider.testing.spark import spark_env, spark_submit_binary

SERVER_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"


class PrivateSparkConnect(PrivateServer):
    """``event_log``: write Spark's event log (uncompressed, so tests can read it) under ``base_dir``."""

    def __init__(self, master: str = "local[2]", base_dir: str | None = None, driver_memory: str = "2g",
                 event_log: bool = False, ui: bool = False) -> None:
        self.base_dir = Path(base_dir or tempfile.mkdtemp(prefix="airflow-cdc-connect-"))
        self.master, self.driver_memory, self.event_log, self.ui = master, driver_memory, event_log, ui
        self.port = free_port()
        self.ui_port = free_port() if ui else None
        self._proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"sc://127.0.0.1:{self.port}"

    @property
    def ui_url(self) -> str | None:
        return f"http://127.0.0.1:{self.ui_port}" if self.ui_port else None

    @property
    def event_log_dir(self) -> Path:
        return self.base_dir / "events"

    def connection_uri(self) -> str:
        """An Airflow ``spark_connect`` connection (JSON form) for this server."""
        return json.dumps({"conn_type": "spark_connect", "host": "127.0.0.1", "port": self.port})

    def start(self, timeout: float = 90.0) -> "PrivateSparkConnect":
        self.base_dir.mkdir(parents=True, exist_ok=True)
        conf = {
            "spark.connect.grpc.binding.address": "127.0.0.1",
            "spark.connect.grpc.binding.port": str(self.port),
            "spark.ui.enabled": str(self.ui).lower(),
            "spark.driver.memory": self.driver_memory,
        }
        if self.ui_port:
            conf["spark.ui.port"] = str(self.ui_port)
        if self.event_log:
            self.event_log_dir.mkdir(exist_ok=True)
            conf.update({"spark.eventLog.enabled": "true", "spark.eventLog.dir": self.event_log_dir.as_uri(),
                         "spark.eventLog.compress": "false", "spark.eventLog.rolling.enabled": "false"})
        cmd = [spark_submit_binary(), "--master", self.master, "--class", SERVER_CLASS,
               "--jars", ",".join(default_jars())]
        for k, v in conf.items():
            cmd += ["--conf", f"{k}={v}"]
        log = open(self.base_dir / "server.log", "ab")
        self._proc = subprocess.Popen(cmd, env=spark_env(), stdout=log, stderr=subprocess.STDOUT,
                                      start_new_session=True)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                raise RuntimeError(f"the Spark Connect server exited with {self._proc.returncode}: see "
                                   f"{self.base_dir / 'server.log'}")
            try:
                check_reachable(self.url, timeout=1)
                return self
            except ConnectionError:
                time.sleep(0.3)
        self.stop()
        raise RuntimeError(f"the Spark Connect server did not listen within {timeout}s: see {self.base_dir}/server.log")

    def stop(self, timeout: float = 30.0) -> None:
        proc, self._proc = self._proc, None
        stop_process_group(proc, signal.SIGTERM, timeout)

    def cleanup(self) -> None:
        self.stop()
        shutil.rmtree(self.base_dir, ignore_errors=True)


def main() -> None:  # pragma: no cover - manual use
    serve_until_interrupted(PrivateSparkConnect(ui=True), lambda s: f"Spark Connect {s.url}  UI {s.ui_url}  "
                                                                     f"logs {s.base_dir}")


if __name__ == "__main__":
    main()
