"""A launcher for the Python processes Spark starts on this machine: PySpark from its installed package, not
from ``pyspark.zip``.

Spark puts ``$SPARK_HOME/python/lib/pyspark.zip`` and py4j's zip first on the ``PYTHONPATH`` of every
Python process it starts: a spark-submit's driver, the daemons that fork the workers, the planner processes
of a Python data source. Python keeps no compiled bytecode for modules it imports from a zip, so each of
these processes compiles PySpark's sources again, several times slower than importing the installed package
with its bytecode, and a stream job starts five such processes.

When spark-submit belongs to the pip-installed ``pyspark`` this interpreter imports (the embedded default),
``SPARK_HOME`` is that package's directory and the two zips hold the package's own files. The launcher, a
small sh script, then drops exactly those two entries from ``PYTHONPATH`` and execs this interpreter, which
imports the package with its cached bytecode. With any other ``SPARK_HOME`` it changes nothing.

The script is written once per interpreter and package into the class archive directory (see
``class_archive``), under a name that hashes its content, and renamed into place: concurrent tasks never
run a half-written one. Pure Python: no Airflow or Spark imports.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import os
import shlex
import sys
from pathlib import Path

from airflow_cdc_provider.spark.launch.class_archive import default_dir

_SCRIPT = """#!/bin/sh
# Written by airflow-cdc-provider (airflow_cdc_provider/python_launcher.py): the Python of Spark's processes,
# importing PySpark from its installed package {package} instead of SPARK_HOME's zips.
if [ -n "$SPARK_HOME" ] && [ "$SPARK_HOME" -ef {package} ]; then
  kept=
  set -f
  IFS=:
  for entry in $PYTHONPATH; do
    case "$entry" in
      "$SPARK_HOME"/python/lib/pyspark.zip|"$SPARK_HOME"/python/lib/py4j-*-src.zip) ;;
      *) kept="${{kept:+$kept:}}$entry" ;;
    esac
  done
  unset IFS
  set +f
  if [ -n "$kept" ]; then export PYTHONPATH="$kept"; else unset PYTHONPATH; fi
fi
exec {python} "$@"
"""


def installed_pyspark() -> Path | None:
    """The directory of the ``pyspark`` package this interpreter imports, if it is a pip-installed one (it
    holds ``python/lib/pyspark.zip``: spark-submit's ``SPARK_HOME``); else None."""
    spec = importlib.util.find_spec("pyspark")
    if spec is None or not spec.submodule_search_locations:
        return None
    package = Path(next(iter(spec.submodule_search_locations)))
    return package if (package / "python" / "lib" / "pyspark.zip").is_file() else None


def launcher_script(package: Path, python: str) -> str:
    return _SCRIPT.format(package=shlex.quote(str(package)), python=shlex.quote(python))


def python_launcher(python: str | None = None, directory: Path | None = None) -> str | None:
    """The path of the launcher for ``python`` (default: this interpreter), written if needed; None when
    this interpreter has no pip-installed ``pyspark`` or the directory is not writable (Spark then starts
    ``python`` itself, as without a launcher)."""
    package = installed_pyspark()
    if package is None:
        return None
    script = launcher_script(package, python or sys.executable)
    directory = directory or default_dir()
    path = directory / f"python-{hashlib.sha256(script.encode()).hexdigest()[:16]}.sh"
    if path.is_file() and os.access(path, os.X_OK):
        return str(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")  # as deploy.package_archive writes its archive
    try:
        directory.mkdir(parents=True, exist_ok=True)
        tmp.write_text(script)
        tmp.chmod(0o755)
        os.replace(tmp, path)
    except OSError:  # an unwritable directory: Spark starts ``python`` itself
        with contextlib.suppress(OSError):
            tmp.unlink()
        return None
    return str(path)


def launcher_env(local_master: bool) -> dict[str, str]:
    """The environment that starts a spark-submit's Python processes through the launcher: the driver's always
    (it runs here), the workers' and planners' on a local master only (executors elsewhere have their own
    Python). Empty when there is no launcher."""
    launcher = python_launcher()
    if launcher is None:
        return {}
    return {"PYSPARK_DRIVER_PYTHON": launcher, **({"PYSPARK_PYTHON": launcher} if local_master else {})}
