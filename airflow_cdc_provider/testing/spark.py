"""Run the Spark applications with spark-submit as the operators do (tests, demo, bench).

Secrets go through a 0600 file named by ``AIRFLOW_CDC_SECRETS_FILE``; the spec file holds none. The driver maps
its job's JVM class archive and Spark's Python processes start through the Python launcher, as an operator's
job on this machine does (``spark.launch``): a job's start costs here what it costs under Airflow.
"""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

from airflow_cdc_provider.pipeline.jobspec import SECRETS_FILE_ENV, JobSpec, write_secrets_file
from airflow_cdc_provider.spark.launch.class_archive import ClassArchive
from airflow_cdc_provider.spark.launch.python_launcher import launcher_env
from airflow_cdc_provider.spark.session import default_jars
from airflow_cdc_provider.spark_jobs import application_path


def spark_submit_binary() -> str:
    return str(Path(sys.executable).with_name("spark-submit"))


def spark_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = dict(os.environ)
    env.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    env["PYSPARK_PYTHON"] = sys.executable
    env["PYSPARK_DRIVER_PYTHON"] = sys.executable
    env.update(extra or {})
    return env


def submit(app: str, spec: JobSpec, secrets: dict[str, str], workdir: str | os.PathLike[str], *,
           master: str = "local[2]", env: dict[str, str] | None = None, timeout: float = 600,
           background: bool = False) -> Any:
    """spark-submit ``app`` (``snapshot_chunk`` or ``binlog_stream``) with ``spec``; returns the completed
    process, or the Popen when ``background``. ``env`` (say, ``PYSPARK_PYTHON``) goes over the launcher's."""
    work = Path(workdir)
    work.mkdir(parents=True, exist_ok=True)
    tag = uuid.uuid4().hex[:8]
    spec_path = spec.write(work / f"spec-{app}-{tag}.json")
    secrets_path = write_secrets_file(work / f"secrets-{tag}.json", secrets)
    archive = ClassArchive.for_job(app, spark_submit_binary(), env)
    options = archive.java_options(may_dump=not background) if archive else ""  # a background job may be killed
    cmd = [spark_submit_binary(), "--master", master, "--conf", "spark.ui.enabled=false",
           "--conf", "spark.sql.shuffle.partitions=4", "--driver-memory", "1g",
           *(["--driver-java-options", options] if options else []),
           "--jars", ",".join(default_jars()), application_path(app), "--spec", str(spec_path)]
    full_env = spark_env({SECRETS_FILE_ENV: str(secrets_path), **launcher_env(master.startswith("local")),
                          **(env or {})})
    log = open(work / f"{app}-{tag}.log", "wb")
    if background:
        return subprocess.Popen(cmd, env=full_env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        done = subprocess.run(cmd, env=full_env, stdout=log, stderr=subprocess.STDOUT, timeout=timeout)
    except BaseException:
        if archive:
            archive.abandon(options)
        raise
    finally:
        log.close()
    if archive and done.returncode == 0:
        archive.publish(options)  # drops the claim, published or not
    elif archive:
        archive.abandon(options)
    return done
