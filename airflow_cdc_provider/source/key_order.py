"""Key order as the database sees it, usable from Python (``core.emit_filter.KeyOrder``).

Numbers, dates, times and binary strings order the same in Python and in MySQL. Character strings do not:
``utf8mb4_general_ci`` says ``'a' = 'A'`` and ``'Z' > 'a'``, and PAD SPACE collations ignore trailing
spaces. For those columns the order key is ``WEIGHT_STRING`` computed by the server in the column's
collation. Under a PAD SPACE collation the server compares two strings as if the shorter were padded with
spaces: ``PaddedWeight`` compares weights so, with the pad's weight asked of the server. (``AS CHAR(n)``
padding is no way around it: it cuts the weights at ``n``, and ``ß`` alone weighs two.) A multi-level collation
(``utf8mb4_uca1400_as_cs``) is weighed level by level, each padded so (``DatabaseKeyOrder._levels``). Weights are
fetched in batches and cached. ENUM keys order by their index, as MySQL does.
"""

from __future__ import annotations

from functools import total_ordering
from typing import Any, Iterable

import pymysql

from airflow_cdc_provider.core.keys import Key
from airflow_cdc_provider.source.schema import Column, TableSchema, enum_values

_BATCH = 500
_LEVEL_PROBE = "Aé "  # a base letter, an accent, a case and a pad: a weight at every level a collation has


@total_ordering
class PaddedWeight:
    """A PAD SPACE string's weight, ordered as the server orders the strings: as if the shorter went on with the
    pad's weight (``pad``, one weight unit) for ever. Trailing pads are left out, so equal strings are equal."""

    __slots__ = ("weight", "pad")

    def __init__(self, weight: bytes, pad: bytes) -> None:
        width = len(pad)
        end = len(weight)
        while end >= width and weight[end - width:end] == pad:
            end -= width
        self.weight, self.pad = weight[:end], pad

    def __eq__(self, other: object) -> bool:
        return isinstance(other, PaddedWeight) and self.weight == other.weight

    def __hash__(self) -> int:
        return hash(self.weight)

    def __lt__(self, other: "PaddedWeight") -> bool:
        a, b = self.weight, other.weight
        n = min(len(a), len(b))
        if a[:n] != b[:n]:
            return a[:n] < b[:n]
        if len(a) == len(b):
            return False
        longer, width = (a if len(a) > len(b) else b), len(self.pad)
        unit = next(u for u in (longer[i:i + width] for i in range(n, len(longer), width)) if u != self.pad)
        return unit < self.pad if longer is a else unit > self.pad

    def __repr__(self) -> str:
        return f"PaddedWeight({self.weight.hex()})"


def order_signature(schema: TableSchema) -> tuple[str, ...]:
    """What decides the server's order of the table's key, one entry per key column: integers all order alike;
    character strings by their character set and collation; ENUMs (and SETs) by their list of values and their
    collation (chunk bounds compare them as text); other types by their type. Chunk ranges planned under one
    signature and read under another may overlap (and count some keys twice), where an ALTER changed a key
    column's collation or type in between."""
    out = []
    for col in schema.key:
        listed = col.data_type in ("enum", "set")
        if col.is_integer:
            out.append("integer")
        elif listed or col.is_collated_string:
            out.append(f"{col.column_type if listed else col.data_type} {col.charset} {col.collation}")
        else:
            out.append(col.data_type)
    return tuple(out)


def pads_spaces(conn: Any, col: Column) -> bool:
    """Whether the server compares the string column's values as if padded with spaces (``'a' = 'a '``), asked of
    it rather than read from the collation's name: MySQL 8's ``utf8mb4_0900_*`` collations are NO PAD unnamed."""
    collated = f"CONVERT(%s USING {col.charset}) COLLATE {col.collation}"
    with conn.cursor() as cur:
        cur.execute(f"SELECT {collated} = {collated}", ("a", "a "))
        return bool(cur.fetchone()[0])


class DatabaseKeyOrder:
    """Callable: ``order(key)`` -> a tuple whose Python order equals the server's order of keys."""

    def __init__(self, conn: Any, schema: TableSchema, cache_size: int = 200_000) -> None:
        self.conn = conn
        self.schema = schema
        self._kinds: list[tuple[str, Any]] = [self._kind(c) for c in schema.key]
        self._level_exprs: dict[int, list[tuple[str, bytes | None]]] = {}  # column index -> ``_levels``
        self._cache: dict[tuple[int, Any], Any] = {}
        self._cache_size = cache_size

    @staticmethod
    def _kind(col: Column) -> tuple[str, Any]:
        if col.data_type == "enum":
            return ("enum", {v: i + 1 for i, v in enumerate(enum_values(col.column_type))})
        if col.is_collated_string and col.data_type != "set":
            collated = f"CONVERT(%s USING {col.charset}) COLLATE {col.collation}"
            return ("weight", (f"WEIGHT_STRING({collated}{{}})", collated))  # {}: a LEVEL clause, or none
        return ("native", None)

    def _weight(self, expr: str, value: str) -> bytes:
        with self.conn.cursor() as cur:
            cur.execute(f"SELECT {expr}", (value,))
            return bytes(cur.fetchone()[0])

    def _levels(self, i: int, expr: str, collated: str) -> list[tuple[str, bytes | None]]:
        """The column's collation levels: each level's weight expression and the space's weight at that level
        (None: the level compares NO PAD, as bytes). Most collations have one level. MariaDB's multi-level ones
        (``utf8mb4_uca1400_as_cs``: base letters, then accents, then case) run the levels together in one weight
        and compare level by level, each as if padded with the space's weight at that level; a NO PAD one pads
        every level but the first. The levels are found as those whose ``LEVEL k`` weights, run together, are
        the whole weight (a single-level collation ignores ``LEVEL``). Whether the collation is NO PAD is asked of
        the server (``pads_spaces``)."""
        if i not in self._level_exprs:
            nopad = not pads_spaces(self.conn, self.schema.key[i])
            whole, found, levels = self._weight(expr.format(""), _LEVEL_PROBE), b"", []
            for k in range(1, 7):
                try:
                    w = self._weight(expr.format(f" LEVEL {k}"), _LEVEL_PROBE)
                except pymysql.err.ProgrammingError:  # MySQL 8 has no LEVEL: its weights hold level separators
                    levels = [expr.format("")]
                    break
                if w:
                    levels.append(expr.format(f" LEVEL {k}"))
                found += w
                if found == whole:
                    break
            else:
                raise ValueError(f"{self.schema.table}: the weights of key column {self.schema.key[i].name}'s "
                                 f"collation {self.schema.key[i].collation} do not split into levels")
            if len(levels) == 1:
                levels = [expr.format("")]
            self._level_exprs[i] = [(e, None if nopad and n == 0 else self._weight(e, " ") or None)
                                    for n, e in enumerate(levels)]
        return self._level_exprs[i]

    @property
    def needs_database(self) -> bool:
        return any(kind == "weight" for kind, _ in self._kinds)

    @property
    def is_natural(self) -> bool:
        """Whether Python orders the keys as the server does (numbers, dates, times, binary strings): the emit
        filter then compares them as they are (``core.emit_filter.natural_order``)."""
        return all(kind == "native" for kind, _ in self._kinds)

    def prefetch(self, keys: Iterable[Key]) -> None:
        """Fetch the weights of many keys in few round trips (call before ordering a batch of events)."""
        for i, (kind, data) in enumerate(self._kinds):
            if kind != "weight":
                continue
            levels = self._levels(i, *data)
            exprs = [e for e, _ in levels]
            todo = list(dict.fromkeys(k[i] for k in keys if (i, k[i]) not in self._cache))
            for off in range(0, len(todo), _BATCH):
                part = todo[off : off + _BATCH]
                with self.conn.cursor() as cur:
                    cur.execute("SELECT " + ", ".join(exprs * len(part)), [v for v in part for _ in exprs])
                    weights = cur.fetchone()
                if len(self._cache) + len(part) > self._cache_size:
                    self._cache.clear()
                n = len(levels)
                for j, value in enumerate(part):
                    ws = [bytes(w) if pad is None else PaddedWeight(bytes(w), pad)
                          for w, (_, pad) in zip(weights[j * n:(j + 1) * n], levels, strict=True)]
                    self._cache[(i, value)] = ws[0] if n == 1 else tuple(ws)

    def __call__(self, key: Key) -> tuple:
        out = []
        for i, ((kind, data), value) in enumerate(zip(self._kinds, key, strict=True)):
            if kind == "native":
                out.append(value)
            elif kind == "enum":
                out.append(self._enum_index(i, data, value))
            else:
                w = self._cache.get((i, value))
                if w is None:
                    self.prefetch([key])
                    w = self._cache[(i, value)]
                out.append(w)
        return tuple(out)

    def _enum_index(self, i: int, indexes: dict[str, int], value: Any) -> int:
        """An ENUM value's place in the column's list ('' is the server's error value, index 0). A name not in
        the list means the key's definition is not the one the value was written under: ordered by a guess, a
        change would be given the wrong chunk."""
        index = indexes.get(value, 0 if value == "" else None)
        if index is None:
            col = self.schema.key[i]
            raise ValueError(f"{self.schema.table}: key column {col.name} holds {value!r}, which is not in its "
                             f"definition {col.column_type}, so its order among the chunk bounds is not known. The "
                             f"table's definition changed in a way the capture cannot follow: re-snapshot the table "
                             f"(airflow-cdc resnapshot <pipeline.yaml> --table {self.schema.table})")
        return index

    def in_range(self, key: Key, start: Key | None, end: Key | None) -> bool:
        k = self(key)
        return (start is None or self(start) <= k) and (end is None or k < self(end))
