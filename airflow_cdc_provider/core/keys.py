"""Chunk-key values in JSON and back, losslessly.

Chunk boundaries travel through XCom, job spec files and the state store as JSON. Integers (including
BIGINT UNSIGNED above 2**63) and strings are plain JSON; other key types are tagged so that they come back
as the same Python type the database driver gives (``Decimal``, ``date``, ``datetime``, ``timedelta`` for
TIME, ``bytes``).
"""

from __future__ import annotations

import base64
import datetime as dt
from decimal import Decimal
from typing import Any, Sequence

Key = tuple  # a key is a tuple of column values, one per key column


def encode_value(value: Any) -> Any:
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return {"$float": repr(value)}
    if isinstance(value, Decimal):
        return {"$decimal": str(value)}
    if isinstance(value, dt.datetime):
        return {"$datetime": value.isoformat()}
    if isinstance(value, dt.date):
        return {"$date": value.isoformat()}
    if isinstance(value, dt.timedelta):
        return {"$time_us": (value.days * 86400 + value.seconds) * 1_000_000 + value.microseconds}
    if isinstance(value, (bytes, bytearray, memoryview)):
        return {"$bytes": base64.b64encode(bytes(value)).decode("ascii")}
    raise TypeError(f"cannot encode key value of type {type(value).__name__}: {value!r}")


def decode_value(value: Any) -> Any:
    if not isinstance(value, dict):
        return value
    if len(value) != 1:
        raise ValueError(f"not an encoded key value: {value!r}")
    ((tag, raw),) = value.items()
    if tag == "$float":
        return float(raw)
    if tag == "$decimal":
        return Decimal(raw)
    if tag == "$datetime":
        return dt.datetime.fromisoformat(raw)
    if tag == "$date":
        return dt.date.fromisoformat(raw)
    if tag == "$time_us":
        return dt.timedelta(microseconds=int(raw))
    if tag == "$bytes":
        return base64.b64decode(raw)
    raise ValueError(f"unknown key value tag {tag!r}")


def encode_key(key: Sequence[Any] | None) -> list | None:
    return None if key is None else [encode_value(v) for v in key]


def decode_key(key: Sequence[Any] | None) -> Key | None:
    return None if key is None else tuple(decode_value(v) for v in key)


def format_key(key: Sequence[Any] | None) -> str:
    """Human-readable key for labels and messages: ``105``, ``('a', 3)``, ``null``."""
    if key is None:
        return "null"
    parts = [v.decode("utf-8", "backslashreplace") if isinstance(v, bytes) else v for v in key]
    if len(parts) == 1:
        return str(parts[0])
    return "(" + ", ".join(str(p) for p in parts) + ")"
