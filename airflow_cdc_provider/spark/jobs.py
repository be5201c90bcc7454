"""Entry points behind ``spark_jobs/*.py``: parse ``--spec``, read secrets, run, exit with a clear code."""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
import traceback
from pathlib import Path
from typing import Callable, NoReturn

from airflow_cdc_provider.pipeline.jobspec import JobSpec, load_secrets
from airflow_cdc_provider.spark.session import spark_session, stop_session


def _args(argv: list[str], what: str) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog=what)
    p.add_argument("--spec", required=True, help="job spec JSON (no secrets; see airflow_cdc_provider.pipeline.jobspec)")
    return p.parse_args(argv)


def _logging() -> None:
    import faulthandler
    import signal

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    # `kill -USR1 <driver python pid>` prints every thread's stack to the driver's stderr (a stuck job's
    # Python side; `kill -3` on the driver JVM does the same for the JVM side)
    faulthandler.register(signal.SIGUSR1, all_threads=True)


def _run(argv: list[str] | None, script: str, title, runner) -> int:
    """Parse ``--spec``, start the session named by ``title(spec)``, run ``runner(spark, spec, secrets)``."""
    _logging()
    args = _args(sys.argv[1:] if argv is None else argv, script)
    spec = JobSpec.load(args.spec)
    t0 = time.monotonic()
    spark = spark_session(title(spec))
    logging.getLogger("airflow_cdc.job").info("Spark session ready in %.2fs", time.monotonic() - t0)
    ship_package_to_executors(spark)
    try:
        return runner(spark, spec, load_secrets())
    finally:
        stop_session(spark)


def run_driver(job: Callable[[], int]) -> NoReturn:
    """Run ``job`` as the driver's Python and end the process with its exit code at once, output flushed,
    skipping the interpreter's shutdown. There py4j's finalizers log, and a daemon thread stopped while it held
    the logging lock makes them wait for ever: after a SIGTERM to spark-submit, whose JVM exits, its orphaned
    Python driver would stay behind."""
    try:
        code = job()
    except SystemExit as exc:  # as the interpreter ends on one: an int is the code, None 0, anything else printed
        if exc.code is None or isinstance(exc.code, int):
            code = exc.code or 0
        else:
            print(exc.code, file=sys.stderr)
            code = 1
    except BaseException:  # noqa: BLE001 - printed as the interpreter would, then the same exit code
        traceback.print_exc()
        code = 1
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def ship_package_to_executors(spark) -> None:
    """Started from the package archive (cluster deploy mode): let the executors' Python import it too."""
    import airflow_cdc_provider

    archive = Path(airflow_cdc_provider.__file__).parent.parent
    if archive.is_file():  # a zip on sys.path, not an installed package directory
        spark.sparkContext.addPyFile(str(archive))


def main(argv: list[str]) -> int:
    """``JOB --spec SPEC``: the entry point of the package archive (see airflow_cdc_provider.spark.launch.package)."""
    jobs = {"snapshot_chunk": snapshot_main, "binlog_stream": stream_main}
    if not argv or argv[0] not in jobs:
        print(f"usage: <archive> {{{','.join(jobs)}}} --spec SPEC", file=sys.stderr)
        return 2
    return jobs[argv[0]](argv[1:])


def snapshot_main(argv: list[str] | None = None) -> int:
    from airflow_cdc_provider.spark.snapshot import run_snapshot

    def run(spark, spec, secrets) -> int:
        reports = run_snapshot(spark, spec, secrets)
        print(json.dumps({"chunks": len(reports), "rows": sum(r.rows for r in reports)}))
        return 0

    first = lambda spec: spec.chunks[0].split_id if spec.chunks else ""  # noqa: E731
    return _run(argv, "snapshot_chunk.py", lambda spec: f"airflow-cdc {spec.pipeline} snapshot {first(spec)}", run)


def stream_main(argv: list[str] | None = None) -> int:
    from airflow_cdc_provider.spark.stream import run_stream

    return _run(argv, "binlog_stream.py", lambda spec: f"airflow-cdc {spec.pipeline} binlog stream", run_stream)
