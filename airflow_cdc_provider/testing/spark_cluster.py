"""A private Spark standalone cluster on loopback, from the pyspark distribution (which has ``spark-class``
but no ``start-master.sh``): one Master with its REST submission server on, and one or more Workers, each
with its own ports and work dir. Started and stopped by PID, like the private MariaDB and PostgreSQL.

Used by the cluster tests (client and cluster deploy mode) and usable by hand::

    python -m airflow_cdc_provider.testing.spark_cluster      # prints the spark:// URL, Ctrl-C stops it

``AIRFLOW_CDC_KEEP_CLUSTER=1`` keeps the work dirs (driver and executor logs) after the cluster stops.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from airflow_cdc_provider.testing.mariadb import PrivateServer, free_port, serve_until_interrupted, stop_process_group


def spark_class() -> str:
    import pyspark

    path = Path(pyspark.__file__).parent / "bin" / "spark-class"
    if not path.exists():
        raise RuntimeError(f"{path} not found: the pyspark package is incomplete")
    return str(path)


class PrivateSparkCluster(PrivateServer):
    def __init__(self, workers: int = 1, cores: int = 2, memory: str = "2g", base_dir: str | None = None) -> None:
        self.base_dir = Path(base_dir or tempfile.mkdtemp(prefix="airflow-cdc-spark-"))
        self.workers, self.cores, self.memory = workers, cores, memory
        self.port, self.ui_port, self.rest_port = free_port(), free_port(), free_port()
        self._procs: list[subprocess.Popen] = []

    @property
    def master_url(self) -> str:
        return f"spark://127.0.0.1:{self.port}"

    @property
    def ui_url(self) -> str:
        return f"http://127.0.0.1:{self.ui_port}"

    def connection_uri(self, deploy_mode: str = "client") -> str:
        """An Airflow ``spark`` connection (JSON form) for this master; cluster mode tracks drivers over REST."""
        return json.dumps({"conn_type": "spark", "host": self.master_url,
                           "extra": {"deploy-mode": deploy_mode, "rest-port": str(self.rest_port)}})

    def _env(self) -> dict[str, str]:
        env = dict(os.environ)
        env.update({
            "SPARK_LOCAL_IP": "127.0.0.1",
            "SPARK_LOG_DIR": str(self.base_dir / "logs"),
            "SPARK_PID_DIR": str(self.base_dir),
            "PYSPARK_PYTHON": env.get("PYSPARK_PYTHON", sys.executable),
            "SPARK_MASTER_OPTS": f"-Dspark.master.rest.enabled=true -Dspark.master.rest.port={self.rest_port} "
                                 "-Dspark.master.rest.host=127.0.0.1",
            "SPARK_WORKER_OPTS": "-Dspark.worker.cleanup.enabled=false",
        })
        return env

    def _launch(self, name: str, args: list[str]) -> subprocess.Popen:
        log = open(self.base_dir / f"{name}.log", "ab")
        proc = subprocess.Popen([spark_class(), *args], env=self._env(), stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)
        self._procs.append(proc)
        return proc

    def start(self, timeout: float = 90.0) -> "PrivateSparkCluster":
        self.base_dir.mkdir(parents=True, exist_ok=True)
        self._launch("master", ["org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                                "--port", str(self.port), "--webui-port", str(self.ui_port)])
        for i in range(self.workers):
            work = self.base_dir / f"work-{i}"
            work.mkdir(exist_ok=True)
            self._launch(f"worker-{i}", ["org.apache.spark.deploy.worker.Worker", self.master_url,
                                         "--host", "127.0.0.1", "--port", str(free_port()),
                                         "--webui-port", str(free_port()), "--work-dir", str(work),
                                         "--cores", str(self.cores), "--memory", self.memory])
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for p in self._procs:
                if p.poll() is not None:
                    raise RuntimeError(f"a Spark cluster process exited with {p.returncode}: see {self.base_dir}/*.log")
            state = self.master_state()
            if state and len([w for w in state.get("workers", []) if w.get("state") == "ALIVE"]) >= self.workers:
                return self
            time.sleep(0.5)
        raise RuntimeError(f"the Spark cluster did not come up within {timeout}s: see {self.base_dir}/*.log")

    def master_state(self) -> dict | None:
        """The master's JSON view (workers, active apps and drivers); None while it is not answering."""
        try:
            with urllib.request.urlopen(f"{self.ui_url}/json/", timeout=5) as r:
                return json.load(r)
        except (OSError, ValueError):  # ValueError: an empty or partial answer while the master starts
            return None

    def driver_processes(self, driver_id: str) -> list[int]:
        """PIDs of a cluster-mode driver: its DriverWrapper JVM (found by the driver dir in its command line,
        which is too long for pgrep) and that JVM's children (the Python driver)."""
        cmdlines, parents = {}, {}
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                try:
                    cmdlines[int(entry)] = Path(f"/proc/{entry}/cmdline").read_bytes()
                    parents[int(entry)] = int(Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[1])
                except (OSError, ValueError, IndexError):
                    continue
        jvms = [pid for pid, cmd in cmdlines.items() if b"DriverWrapper" in cmd and driver_id.encode() in cmd]
        return jvms + [pid for pid, ppid in parents.items() if ppid in jvms]

    def stop(self, timeout: float = 30.0) -> None:
        procs, self._procs = self._procs, []
        for p in reversed(procs):  # workers first: they kill their executors and drivers
            stop_process_group(p, signal.SIGTERM, timeout)

    def cleanup(self) -> None:
        self.stop()
        if not os.environ.get("AIRFLOW_CDC_KEEP_CLUSTER"):
            shutil.rmtree(self.base_dir, ignore_errors=True)


def main() -> None:  # pragma: no cover - manual use
    serve_until_interrupted(PrivateSparkCluster(), lambda c: f"master {c.master_url}  UI {c.ui_url}  REST port "
                                                                f"{c.rest_port}  logs {c.base_dir}")


if __name__ == "__main__":
    main()
