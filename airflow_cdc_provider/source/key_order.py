"""Key order as the database sees it, usable from Python (``core.emit_filter.KeyOrder``).

Numbers, dates, times and binary strings order the same in Python and in MySQL. Character strings do not:
``utf8mb4_general_ci`` says ``'a' = 'A'`` and ``'Z' > 'a'``, and PAD SPACE collations ignore trailing
spaces. For those columns the order key is ``WEIGHT_STRING`` computed by the server in the column's
collation (padded ``AS CHAR(n)`` for PAD SPACE collations, so trailing blanks compare as the server
compares them). Weights are fetched in batches and cached. ENUM keys order by their index, as MySQL does.
"""

from __future__ import annotations

from typing import Any, Iterable

from airflow_cdc_provider.core.keys import Key
from airflow_cdc_provider.source.schema import Column, TableSchema, enum_values

_BATCH = 500


class DatabaseKeyOrder:
    """Callable: ``order(key)`` -> a tuple whose Python order equals the server's order of keys."""

    def __init__(self, conn: Any, schema: TableSchema, cache_size: int = 200_000) -> None:
        self.conn = conn
        self.schema = schema
        self._kinds: list[tuple[str, Any]] = [self._kind(c) for c in schema.key]
        self._cache: dict[tuple[int, Any], bytes] = {}
        self._cache_size = cache_size

    @staticmethod
    def _kind(col: Column) -> tuple[str, Any]:
        if col.data_type == "enum":
            return ("enum", {v: i + 1 for i, v in enumerate(enum_values(col.column_type))})
        if col.is_collated_string and col.data_type != "set":
            nopad = "nopad" in (col.collation or "").lower()
            pad = "" if nopad or not col.char_length else f" AS CHAR({min(col.char_length, 16383)})"
            expr = f"WEIGHT_STRING(CONVERT(%s USING {col.charset}) COLLATE {col.collation}{pad})"
            return ("weight", expr)
        return ("native", None)

    @property
    def needs_database(self) -> bool:
        return any(kind == "weight" for kind, _ in self._kinds)

    def prefetch(self, keys: Iterable[Key]) -> None:
        """Fetch the weights of many keys in few round trips (call before ordering a batch of events)."""
        for i, (kind, expr) in enumerate(self._kinds):
            if kind != "weight":
                continue
            todo = list(dict.fromkeys(k[i] for k in keys if (i, k[i]) not in self._cache))
            for off in range(0, len(todo), _BATCH):
                part = todo[off : off + _BATCH]
                with self.conn.cursor() as cur:
                    cur.execute("SELECT " + ", ".join([expr] * len(part)), part)
                    weights = cur.fetchone()
                if len(self._cache) + len(part) > self._cache_size:
                    self._cache.clear()
                for value, w in zip(part, weights, strict=True):
                    self._cache[(i, value)] = bytes(w)

    def __call__(self, key: Key) -> tuple:
        out = []
        for i, ((kind, data), value) in enumerate(zip(self._kinds, key, strict=True)):
            if kind == "native":
                out.append(value)
            elif kind == "enum":
                out.append(data.get(value, 0))
            else:
                w = self._cache.get((i, value))
                if w is None:
                    self.prefetch([key])
                    w = self._cache[(i, value)]
                out.append(w)
        return tuple(out)

    def in_range(self, key: Key, start: Key | None, end: Key | None) -> bool:
        k = self(key)
        return (start is None or self(start) <= k) and (end is None or k < self(end))
