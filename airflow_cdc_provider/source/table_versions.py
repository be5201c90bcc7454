"""A captured table's definitions by binlog position: the versions the stream decodes and writes with.

The stream decodes every row event with the definition in force at its position. Version 0 is the definition
the stream started the table's snapshot epoch with; each later version is what an ALTER TABLE the stream
applied in place made of the one before it (``source.schema_evolution``), at the ALTER's position. Rows
are decoded with their own version and then carried up to the newest one the stream knows (``upcast``), as
the source itself carried the rows that existed when the ALTER ran: a renamed column keeps its values
under its new name, an added column holds the value the ALTER gave the existing rows (its DEFAULT), a
dropped column is gone, a widened column keeps its values. The sinks evolve the same way
(``Sink.evolve_in_place``), so one rule describes the source, the stream and every sink.

A version is recorded once, by the stream task that meets its ALTER first (``StateStore.record_table_version``),
and never changes: every re-run of a batch, every task and every restart decodes with the same history.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, Mapping, Sequence

from airflow_cdc_provider.core.offsets import EventPosition
from airflow_cdc_provider.source.schema import TableSchema

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
    written (``'x'``, ``5``, ``NULL``, ``CURRENT_TIMESTAMP``), None without one. ``placement``: ``FIRST``,
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
    if since == len(versions) - 1:
        return dict(image)
    return {name: image.get(source) if kind == "column" else source
            for name, (kind, source) in origins(versions, since).items()}


def version_at(versions: Sequence[TableVersion], sort_key: tuple[int, int, int]) -> TableVersion:
    """The version in force at binlog position ``sort_key`` (a version is in force from its own position on)."""
    current = versions[0]
    for version in versions[1:]:
        if version.position is not None and version.position.sort_key <= sort_key:
            current = version
    return current
