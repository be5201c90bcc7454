"""The one line of a failed Spark job's output that says what went wrong, for the task's error.

A job that fails prints a Python traceback (the driver), a query error that embeds a worker's traceback (a
stream), or a JVM stack; spark-submit then exits non-zero and the Spark provider's exception is the whole
command line with the output's tail. Users need the cause: the exception line (``module.Error: message``).
"""

from __future__ import annotations

import re

_EXCEPTION_LINE = re.compile(r"^([A-Za-z_][\w.]*(?:Error|Exception|Exit|Fault))(?::\s.*)?$")


def failure_summary(error: str) -> str:
    """The line of a query's error that says what went wrong: a Python exception raised in a Spark worker comes
    back as its whole traceback, followed by the query's description and the JVM stack; this is the
    traceback's last line (``module.Error: message``), else the first line."""
    lines = error.splitlines()
    end = next((i for i, line in enumerate(lines) if line.strip().startswith(("SQLSTATE", "=== Streaming Query"))),
               len(lines))
    found = [line for line in lines[1:end] if line.strip() and not line.startswith(" ")]
    return (found[-1] if found else (lines[0] if lines else "")).strip()[:500]


def root_cause(output: str) -> str | None:
    """The last exception line in a job's output (leading blanks stripped), or None if it has none."""
    for line in reversed(output.splitlines()):
        if _EXCEPTION_LINE.match(line.strip()):
            return line.strip()[:500]
    return None
