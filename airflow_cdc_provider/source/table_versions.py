"""A captured table's definitions by binlog position: the versions the stream decodes and writes with.

The stream decodes every row event with the definition in force at its position. Version 0 is the definition
the stream started the table's snapshot epoch with; each later version is what an ALTER TABLE the stream
applied in place made of the one before it (``source.schema_evolution``), at the ALTER's position. Rows
are decoded with their own version and then carried up to the newest one the stream knows (``upcast``), as
the source itself carried the rows that existed when the ALTER ran: a renamed column keeps its values
under its new name, an added column holds the value the ALTER gave the existing rows (its DEFAULT), a
dropped column is gone, a widened column keeps its values. Under ``stream.schema_changes: evolve`` the sinks
evolve the same way (``Sink.evolve_in_place``), so one rule describes the source, the stream and every sink;
under ``lenient`` and ``ignore`` a sink goes through versions of its own (``sink_versions``), which the same
rule reads.

A version is recorded once, by the stream task that meets its ALTER first (``StateStore.record_table_version``),
and never changes: every re-run of a batch, every task and every restart decodes with the same history.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass, field, replace
from decimal import Decimal
from typing import Any, Mapping, Sequence

from airflow_cdc_provider.core.offsets import EventPosition
from airflow_cdc_provider.source.schema import Column, TableSchema

# the kinds of ``ColumnChange``
ADD_COLUMN = "add"
DROP_COLUMN = "drop"
RENAME_COLUMN = "rename"  # RENAME COLUMN a TO b, or CHANGE a b <same type>
MODIFY_COLUMN = "modify"  # MODIFY a <type>, CHANGE a b <type>, ALTER COLUMN a SET DATA TYPE ...
COLUMN_CHANGE_KINDS = (ADD_COLUMN, DROP_COLUMN, RENAME_COLUMN, MODIFY_COLUMN)


@dataclass(frozen=True)
class ColumnChange:
    """One column specification of an ALTER TABLE, as the statement wrote it (``source.ddl.column_changes``).

    ``name``: the column as it was named before the statement (for ``add``: the new column). ``new_name``: its
    name after (``rename``, or ``modify`` by CHANGE a b). ``type_sql``: the column type as written, for ``add``
    and ``modify`` (``VARCHAR(40)``, ``BIGINT UNSIGNED``). ``default_sql``: the DEFAULT clause's expression as
    written (``'x'``, ``"x"``, ``5``, ``NULL``, ``CURRENT_TIMESTAMP``), None without one. ``placement``: ``FIRST``,
    ``AFTER <col>`` or None (at the end)."""

    kind: str
    name: str
    new_name: str | None = None
    type_sql: str | None = None
    nullable: bool = True
    default_sql: str | None = None
    placement: str | None = None
    generated: bool = False  # a generated (virtual or stored) column
    auto_increment: bool = False

    def __post_init__(self) -> None:
        if self.kind not in COLUMN_CHANGE_KINDS:
            raise ValueError(f"unknown column change {self.kind!r}; one of {', '.join(COLUMN_CHANGE_KINDS)}")

    @property
    def final_name(self) -> str:
        return self.new_name or self.name


@dataclass(frozen=True)
class TableVersion:
    """The definition of a table from ``position`` on (version 0: from the start of its snapshot epoch).

    ``renamed``: a column of this version -> its name in the previous version, for the columns renamed.
    ``added``: a column new in this version -> the value every row that existed before holds in it (canonical,
    as the row decoder produces values; None for NULL). Columns of the previous version that are neither
    here nor renamed were dropped; a column of both with another type was widened (only widening is applied
    in place)."""

    number: int
    schema: TableSchema
    position: EventPosition | None = None
    statement: str = ""
    renamed: Mapping[str, str] = field(default_factory=dict)
    added: Mapping[str, Any] = field(default_factory=dict)

    @property
    def table(self) -> str:
        return str(self.schema.table)

    def to_dict(self) -> dict[str, Any]:
        return {"number": self.number, "schema": self.schema.to_dict(),
                "position": None if self.position is None else self.position.to_dict(),
                "statement": self.statement, "renamed": dict(self.renamed),
                "added": {k: encode_value(v) for k, v in self.added.items()}}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "TableVersion":
        p = data.get("position")
        return cls(int(data["number"]), TableSchema.from_dict(data["schema"]),
                   EventPosition(p["file"], int(p["pos"]), int(p.get("row", 0))) if p else None,
                   data.get("statement", ""), dict(data.get("renamed") or {}),
                   {k: decode_value(v) for k, v in (data.get("added") or {}).items()})


def encode_value(value: Any) -> Any:
    """A canonical value as JSON: ``None``, bool, int, float and str as they are; the rest tagged."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, Decimal):
        return {"decimal": str(value)}
    if isinstance(value, (bytes, bytearray)):
        return {"bytes": base64.b64encode(bytes(value)).decode("ascii")}
    raise TypeError(f"a default of type {type(value).__name__} cannot be recorded")


def decode_value(data: Any) -> Any:
    if isinstance(data, dict):
        if "decimal" in data:
            return Decimal(data["decimal"])
        if "bytes" in data:
            return base64.b64decode(data["bytes"])
        raise ValueError(f"unknown recorded value {data!r}")
    return data


# what a column of the newest version holds for rows of an older one: ("column", name in the older version)
# or ("value", the value the ALTER gave rows that existed)
Origin = tuple[str, Any]


def origins(versions: Sequence[TableVersion], since: int) -> dict[str, Origin]:
    """For each column of the newest of ``versions`` (numbered 0..n in order), where rows written under
    version ``since`` have its value: a column of theirs (under its name then) or the value an ALTER gave."""
    newest = versions[-1]
    out: dict[str, Origin] = {c: ("column", c) for c in versions[since].schema.column_names}
    for version in versions[since + 1:]:
        step: dict[str, Origin] = {}
        for name in version.schema.column_names:
            if name in version.added:
                step[name] = ("value", version.added[name])
            else:
                before = version.renamed.get(name, name)
                step[name] = out.get(before, ("value", None))
        out = step
    return {c: out[c] for c in newest.schema.column_names}


def upcast(image: Mapping[str, Any], versions: Sequence[TableVersion], since: int) -> dict[str, Any]:
    """A row decoded under version ``since``, as the newest version holds it (see ``origins``)."""
    if since == len(versions) - 1:  # a sink's version may hold columns the image lacks, or lack some it has
        return {name: image.get(name) for name in versions[-1].schema.column_names}
    return {name: image.get(source) if kind == "column" else source
            for name, (kind, source) in origins(versions, since).items()}


def version_at(versions: Sequence[TableVersion], sort_key: tuple[int, int, int]) -> TableVersion:
    """The version in force at binlog position ``sort_key`` (a version is in force from its own position on)."""
    current = versions[0]
    for version in versions[1:]:
        if version.position is not None and version.position.sort_key <= sort_key:
            current = version
    return current


# ``stream.schema_changes``: what an ALTER of a captured table's columns does
SCHEMA_CHANGE_BEHAVIOURS = ("evolve", "lenient", "ignore", "resnapshot", "fail")


def sink_versions(versions: Sequence[TableVersion], behaviour: str) -> list[TableVersion] | str:
    """The versions a sink goes through for a table whose source went through ``versions`` (numbered 0..n),
    under ``behaviour`` (``SCHEMA_CHANGE_BEHAVIOURS``), or why the sink cannot follow them.

    evolve, resnapshot, fail: the source's own. lenient and ignore: one sink version per source version (same
    number, position and statement) whose ``renamed`` and ``added`` lead from the sink's previous version, so
    that ``upcast(row, sink, k)`` carries a row decoded under source version k (keyed by its columns) to the
    sink's newest version: a sink column the row lacks is NULL in it, a column of the row the sink lacks is
    not written.

    lenient: nothing is dropped or renamed in the sink. A dropped column stays (nullable, same type). A column
    renamed a -> b keeps its values under a, and b is a new column that is NULL in the rows that existed:
    copying a's values into b would make every old row hold them twice, and an old row written again later
    gets b then anyway.
    ignore: the sink keeps version 0's columns; new columns are not written, dropped or renamed ones stay
    (nullable). A widened column is widened in the sink all the same, as its new values would not fit.

    Under both the sink's columns are names: a column the source has again under a name the sink kept (added
    again, or renamed to it) is written to that sink column, and the rows that existed keep what it held.
    Where its type neither holds the sink column's values nor fits in it, there is no right projection, and
    a string says so; so does a lenient rename that differs only in case (MariaDB and Spark compare column
    names case-insensitively: one table cannot have both)."""
    if behaviour not in SCHEMA_CHANGE_BEHAVIOURS:
        raise ValueError(f"unknown schema change behaviour {behaviour!r}; one of {', '.join(SCHEMA_CHANGE_BEHAVIOURS)}")
    if behaviour not in ("lenient", "ignore") or not versions:
        return list(versions)
    out = [versions[0]]
    for version in versions[1:]:
        step = _lenient_step(out[-1], version) if behaviour == "lenient" else _ignore_step(out[-1], version)
        if isinstance(step, str):
            return (f"{version.table}: version {version.number} ({version.statement or 'seen in its row events'}) "
                    f"cannot be followed under stream.schema_changes {behaviour}: {step}")
        out.append(step)
    return out


def _lenient_step(before: TableVersion, version: TableVersion) -> TableVersion | str:
    """The sink's version after ``before`` for source ``version``: the source's columns, the sink's others kept."""
    have = {c.name: c for c in before.schema.columns}
    present = set(version.schema.column_names)
    columns: list[Column] = []
    added: dict[str, Any] = {}
    for col in version.schema.columns:
        if col.name in have:
            merged = _merged(have[col.name], col)
            if isinstance(merged, str):
                return merged
            columns.append(merged)
        elif col.name in version.added:
            columns.append(col)
            added[col.name] = version.added[col.name]
        else:  # renamed: the rows that existed hold NULL under the new name
            columns.append(replace(col, nullable=True))
            added[col.name] = None
    previous: str | None = None
    for col in before.schema.columns:  # kept columns go back after the column they followed
        if col.name not in present:
            at = 0 if previous is None else [c.name for c in columns].index(previous) + 1
            columns.insert(at, replace(col, nullable=True))
        previous = col.name
    seen: dict[str, str] = {}
    for name in (c.name for c in columns):
        if name.lower() in seen:
            return (f"columns {seen[name.lower()]!r} and {name!r} would both be in the sink, and column names "
                    "compare case-insensitively")
        seen[name.lower()] = name
    return _sink_version(version, columns, added)


def _ignore_step(before: TableVersion, version: TableVersion) -> TableVersion | str:
    """The sink's version after ``before`` for source ``version``: the same columns, widened where the source's
    of the same name are wider, nullable where the source has none of that name."""
    source = {c.name: c for c in version.schema.columns}
    columns: list[Column] = []
    for col in before.schema.columns:
        if col.name not in source:
            columns.append(replace(col, nullable=True))
            continue
        merged = _merged(col, source[col.name])
        if isinstance(merged, str):
            return merged
        columns.append(merged)
    return _sink_version(version, columns, {})


def _sink_version(version: TableVersion, columns: list[Column], added: dict[str, Any]) -> TableVersion:
    s = version.schema
    return TableVersion(version.number, TableSchema(s.table, tuple(columns), s.primary_key, s.key_columns),
                        version.position, version.statement, {}, added)


def _merged(sink: Column, source: Column) -> Column | str:
    """The sink column ``sink`` once it takes the values of the source's column ``source`` of its name: the wider
    of the two, nullable if either is (a column the sink kept holds NULLs)."""
    nullable = sink.nullable or source.nullable
    if _holds(source, sink):
        return replace(source, nullable=nullable)
    if _holds(sink, source):
        return replace(sink, nullable=nullable)
    return (f"column {sink.name!r} is {sink.column_type} in the sink and {source.column_type} in the source (it was "
            "dropped or renamed, and another column took its name): one column of the sink cannot hold both")


def _holds(wide: Column, narrow: Column) -> bool:
    """Whether every value of ``narrow`` is the same value of ``wide``, in the source and in the sinks (the rule
    of the widenings applied in place)."""
    from airflow_cdc_provider.source import schema_evolution  # it builds on this module

    try:
        schema_evolution._check_retype(replace(narrow, nullable=True), replace(wide, nullable=True), False)
    except schema_evolution._Refused:
        return False
    return True
