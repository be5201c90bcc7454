"""How a sink table's columns go from one version of its source table to the newest, all steps at once.

The rule is the stream's own (``table_versions.origins``): every column of the newest version comes from a
column of the older version (kept, renamed, maybe widened) or holds the value an ALTER gave the rows that
existed; the older version's columns none comes from are dropped. Each sink that evolves in place turns this
into its own operations (PostgreSQL statements, a Delta rewrite).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from airflow_cdc_provider.sinks.base import SinkError
from airflow_cdc_provider.sinks.types import SinkType, TableSinkTypes
from airflow_cdc_provider.source.table_versions import TableVersion, origins


def check_numbering(versions: Sequence[TableVersion]) -> None:
    if not versions or [v.number for v in versions] != list(range(len(versions))):
        raise SinkError(f"table versions must be numbered 0..n in order, got {[v.number for v in versions]}")


@dataclass(frozen=True)
class ColumnMoves:
    """Version ``since`` of a table to its newest version, by column: ``sources`` (newest column -> the column
    of version ``since`` it comes from), ``values`` (newest column -> the sink value, ``SinkType.convert``, the
    rows that existed hold in it; None for NULL), ``drops`` (columns of version ``since`` none comes from), and
    the sink types of both versions' columns."""

    sources: Mapping[str, str]
    values: Mapping[str, Any]
    drops: tuple[str, ...]
    old: Mapping[str, SinkType]  # by column of version ``since``
    new: Mapping[str, SinkType]  # by column of the newest version

    @property
    def renames(self) -> tuple[tuple[str, str], ...]:
        """(old name, new name) of the columns renamed."""
        return tuple((s, c) for c, s in self.sources.items() if s != c)

    def retyped(self, same: Any = None) -> tuple[str, ...]:
        """Newest columns whose type differs from their source column's; ``same(a, b)`` compares two
        ``SinkType``s as the sink stores them (by default, their Spark types)."""
        same = same or (lambda a, b: a.spark == b.spark)
        return tuple(c for c, s in self.sources.items() if not same(self.old[s], self.new[c]))

    @property
    def adds_only_nulls(self) -> bool:
        """Whether the change only adds columns that hold NULL in the rows that existed."""
        return not self.drops and not self.renames and not self.retyped() and \
            all(v is None for v in self.values.values())


def column_moves(versions: Sequence[TableVersion], since: int) -> ColumnMoves:
    """``ColumnMoves`` from version ``since`` of ``versions`` (numbered 0..n) to the newest. Refused (``SinkError``)
    when a version renames a column its predecessor lacks, when two columns would come from one, or when the key
    columns change (a sink table's key cannot change in place)."""
    check_numbering(versions)
    for before, after in zip(versions[since:], versions[since + 1:]):
        missing = {new: old for new, old in after.renamed.items() if old not in before.schema.column_names}
        if missing:
            raise SinkError(f"version {after.number} of {after.table} renames "
                            f"{', '.join(map(repr, missing.values()))}, which version {before.number} does not have")
    old, newest = versions[since].schema, versions[-1]
    new = newest.schema
    old_types = dict(zip(old.column_names, TableSinkTypes.of(old).types, strict=True))
    new_types = dict(zip(new.column_names, TableSinkTypes.of(new).types, strict=True))
    sources: dict[str, str] = {}
    values: dict[str, Any] = {}
    for name, (kind, origin) in origins(versions, since).items():
        if kind == "column":
            sources[name] = origin
        else:
            values[name] = None if origin is None else new_types[name].convert(origin)
    kept = set(sources.values())
    if len(kept) != len(sources):
        raise SinkError(f"version {newest.number} of {newest.table} makes two columns of one column of version "
                        f"{since}: {sources}")
    drops = tuple(c for c in old.column_names if c not in kept)
    moved = {*drops, *(s for c, s in sources.items() if s != c), *values}
    if tuple(new.key_columns) != tuple(old.key_columns) or moved & set(old.key_columns):
        raise SinkError(
            f"version {newest.number} of {newest.table} changes its key columns ({', '.join(old.key_columns)}): a "
            "sink table's key cannot be dropped, renamed or replaced in place; re-snapshot the table")
    return ColumnMoves(sources, values, drops, old_types, new_types)
