"""How a job reaches a Spark cluster, without Airflow or Spark imports.

* ``package_archive(dest)``: the package as one zip (named ``.jar``: standalone cluster mode accepts only a
  jar URL as the application, and Python runs any zip holding a ``__main__.py``). Built once per package
  content; in client mode it goes to the executors with ``--py-files``, in cluster mode it *is* the
  application, started by ``org.apache.spark.deploy.PythonRunner`` on the worker that hosts the driver
  (Spark's standalone master refuses ``.py`` applications in cluster deploy mode).
* ``StandaloneRest``: a driver's state and its kill, over the standalone master's REST submission server
  (``spark.master.rest.enabled=true``, port 6066 by default): how a cluster-mode stream is tracked by its
  driver id from the Airflow worker, the triggerer or the CLI.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import urllib.error
import urllib.request
import zipfile
from dataclasses import dataclass
from pathlib import Path

import airflow_cdc_provider

PYTHON_RUNNER = "org.apache.spark.deploy.PythonRunner"
DRIVER_ID = re.compile(r"driver-\d{14}-\d{4,}")
# What spark-submit's launcher gives a client-mode driver on Java 17 but a standalone worker does not give
# a cluster-mode DriverWrapper: without them Arrow (Python data sources, foreachBatch) fails with
# "sun.misc.Unsafe or java.nio.DirectByteBuffer.<init>(long, int) not available".
DRIVER_JAVA_OPTIONS = " ".join([
    "-XX:+IgnoreUnrecognizedVMOptions", "--add-modules=jdk.incubator.vector",
    *(f"--add-opens=java.base/{m}=ALL-UNNAMED" for m in (
        "java.lang", "java.lang.invoke", "java.lang.reflect", "java.io", "java.net", "java.nio", "java.util",
        "java.util.concurrent", "java.util.concurrent.atomic", "jdk.internal.ref", "sun.nio.ch", "sun.nio.cs",
        "sun.security.action", "sun.util.calendar")),
    "-Djdk.reflect.useDirectMethodHandle=false", "-Dio.netty.tryReflectionSetAccessible=true",
])
ACTIVE_DRIVER_STATES = ("SUBMITTED", "RUNNING", "RELAUNCHING", "UNKNOWN")
MAIN = (
    '"""Entry point when this archive is the application: python <archive> JOB --spec SPEC."""\n'
    "import sys\n\nfrom airflow_cdc_provider.spark.jobs import main\n\nsys.exit(main(sys.argv[1:]))\n"
)


@dataclass(frozen=True)
class SparkTarget:
    """Where spark-submit sends a job: the resolved master URL and deploy mode of the Spark connection."""

    master: str
    deploy_mode: str = "client"
    rest_url: str | None = None  # standalone cluster mode: the master's REST submission server

    @property
    def local(self) -> bool:
        return self.master.startswith("local")

    @property
    def cluster_mode(self) -> bool:
        return self.deploy_mode == "cluster"

    @property
    def standalone(self) -> bool:
        return self.master.startswith("spark://")


def _package_files() -> list[tuple[str, Path]]:
    root = Path(airflow_cdc_provider.__file__).resolve().parent
    return sorted((str(p.relative_to(root.parent)), p) for p in root.rglob("*.py") if "__pycache__" not in p.parts)


def package_archive(dest_dir: str | os.PathLike[str]) -> Path:
    """``dest_dir/airflow-cdc-provider-<content hash>.jar``, written once (atomically) per package content."""
    files = _package_files()
    digest = hashlib.sha256()
    for name, path in files:
        digest.update(name.encode())
        digest.update(path.read_bytes())
    dest = Path(dest_dir) / f"airflow-cdc-provider-{digest.hexdigest()[:12]}.jar"
    if dest.exists():
        return dest
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("__main__.py", MAIN)
        for name, path in files:
            z.write(path, name)
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(f".{dest.name}.{os.getpid()}.tmp")
    tmp.write_bytes(buf.getvalue())
    os.replace(tmp, dest)
    return dest


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
