"""spark-submit applications shipped inside the package, so the operators find them wherever it is
installed (``application_path('snapshot_chunk')``). The repository's top-level ``spark_jobs/`` links here."""

from __future__ import annotations

from pathlib import Path


def application_path(name: str) -> str:
    path = Path(__file__).with_name(f"{name}.py")
    if not path.exists():
        raise FileNotFoundError(f"no Spark application {name!r} in {path.parent}")
    return str(path)
