"""What every pipeline operator shares: the pipeline YAML it belongs to, resolved at run time."""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path
from typing import Any

from ..config import load_config
from ..jobspec import write_secrets_file
from ..pipeline import Pipeline, resolve_pipeline
from ..spark.session import default_jars


def load_pipeline(config: str) -> Pipeline:
    return resolve_pipeline(load_config(config))


def server_id_for(pipeline: Pipeline, slot: int) -> int:
    """A replica server id from the connection's range (extra ``server_id_range``), one per concurrent reader."""
    lo, hi = pipeline.source.server_id_range
    return lo + slot % (hi - lo + 1)


def spark_submit_defaults(kwargs: dict[str, Any]) -> dict[str, Any]:
    """SparkSubmitOperator defaults that make the embedded setup work: the venv's spark-submit, the JDBC
    driver jars, Python workers on this interpreter."""
    binary = Path(sys.executable).with_name("spark-submit")
    if binary.exists():
        kwargs.setdefault("spark_binary", str(binary))
    kwargs.setdefault("jars", ",".join(default_jars()) or None)
    kwargs.setdefault("conn_id", "spark_default")
    env = dict(kwargs.get("env_vars") or {})
    env.setdefault("PYSPARK_PYTHON", sys.executable)
    env.setdefault("SPARK_LOCAL_IP", os.environ.get("SPARK_LOCAL_IP", "127.0.0.1"))
    kwargs["env_vars"] = env
    return kwargs


def private_secrets_file(secrets: dict[str, str]) -> Path:
    """A 0600 file in a 0700 directory, for the spark-submit process only; the caller deletes it."""
    d = Path(tempfile.mkdtemp(prefix="airflow-cdc-secrets-"))
    return write_secrets_file(d / "secrets.json", secrets)


def remove_secrets_file(path: Path | None) -> None:
    if path is None:
        return
    try:
        path.unlink()
        path.parent.rmdir()
    except OSError:
        pass

