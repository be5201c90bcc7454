"""Column references by exact name. Spark parses a name given as a string (dots, backticks), so source
column names like ``a.b`` or ``we`ird`` must be quoted, with backticks doubled."""

from __future__ import annotations

from typing import Iterable


def quoted(name: str) -> str:
    """``name`` as a Spark SQL identifier."""
    return "`" + name.replace("`", "``") + "`"


def col(name: str):
    from pyspark.sql import functions as F

    return F.col(quoted(name))


def cols(names: Iterable[str]) -> list:
    return [col(n) for n in names]
