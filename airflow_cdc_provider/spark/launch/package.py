"""The package as one zip, for a Spark cluster: ``package_archive(dest)`` (named ``.jar``: standalone cluster
mode accepts only a jar URL as the application, and Python runs any zip holding a ``__main__.py``). Built once
per package content; in client mode it goes to the executors with ``--py-files``, in cluster mode it *is* the
application, started by ``org.apache.spark.deploy.PythonRunner`` on the worker that hosts the driver (Spark's
standalone master refuses ``.py`` applications in cluster deploy mode)."""

from __future__ import annotations

import hashlib
import io
import os
import zipfile
from pathlib import Path

import airflow_cdc_provider

MAIN = (
    '"""Entry point when this archive is the application: python <archive> JOB --spec SPEC."""\n'
    "import sys\n\nfrom airflow_cdc_provider.spark.jobs import main, run_driver\n\nrun_driver(lambda: main(sys.argv[1:]))\n"
)


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


