"""A statement's effect on one captured table, as the stream applies it at the statement's binlog position.

Row events say what happened to rows; a few statements change rows (or the table's definition) without any
row event, so the stream must see them as events too:

* ``truncate``: every row of the table is gone (TRUNCATE TABLE). Applied by the sinks at its position: rows
  with an older version disappear, later changes apply normally.
* ``drop``: the table left the source (DROP TABLE, a rename to another name). Applied like a truncate; the
  sinks keep nothing of it current and mark it dropped. A rename's drop names the new name (``renamed_to``):
  when the next run finds that name captured and new, the sink data moves there (``pipeline.renames``).
* ``resync``: the table's rows or definition changed in a way the binlog does not spell out row by row (an ALTER
  that adds, drops, renames or retypes columns, a table renamed into the captured name, the name created again by
  CREATE TABLE or CREATE OR REPLACE, a statement about the table that cannot be classified). The stream holds the
  table's changes from here on and the table is re-snapshotted (its new epoch's rows are read after the statement,
  so nothing is lost).
* ``evolve``: an ALTER the stream applies in place (columns added with a constant default, dropped, renamed
  or widened): later rows are decoded with the table's next version (``source.table_versions``) and the
  sinks take the same change; the record marks where in the changelog.

The classification of statements lives with the source (``source/ddl.py``); this record is what crosses
from the binlog reader to the sinks and the state store.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Mapping

from airflow_cdc_provider.core.chunks import TableId
from airflow_cdc_provider.core.offsets import EventPosition

TRUNCATE = "truncate"
DROP = "drop"
RESYNC = "resync"
EVOLVE = "evolve"
KINDS = (TRUNCATE, DROP, RESYNC, EVOLVE)

# the stream's op code of each kind (the sinks' ``_cdc_op`` column for a truncate or drop record)
OP_OF_KIND = {TRUNCATE: "t", DROP: "x", RESYNC: "s", EVOLVE: "e"}
KIND_OF_OP = {op: kind for kind, op in OP_OF_KIND.items()}


@dataclass(frozen=True)
class SchemaChange:
    """``kind`` of change to ``table`` by ``statement`` (the SQL as logged), at ``position`` once read from the
    binlog; ``detail`` says what the statement did to the table in words (for logs and errors); ``renamed_to``:
    for a drop by a rename, the table's new name."""

    kind: str
    table: TableId
    statement: str
    detail: str = ""
    position: EventPosition | None = None
    renamed_to: TableId | None = None

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"unknown schema change kind {self.kind!r}; one of {', '.join(KINDS)}")

    @property
    def op(self) -> str:
        return OP_OF_KIND[self.kind]

    def at(self, position: EventPosition) -> "SchemaChange":
        return replace(self, position=position)

    def describe(self) -> str:
        where = f" at {self.position.file}:{self.position.pos}" if self.position else ""
        what = f" ({self.detail})" if self.detail else ""
        said = f": {shorten(self.statement)}" if self.statement else ""  # a table map's difference has no statement
        return f"{self.kind} of {self.table}{what}{where}{said}"

    def to_dict(self) -> dict[str, Any]:
        out = {"kind": self.kind, "table": str(self.table), "statement": self.statement, "detail": self.detail,
               "position": None if self.position is None else self.position.to_dict()}
        return out if self.renamed_to is None else {**out, "renamed_to": str(self.renamed_to)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "SchemaChange":
        p = data.get("position")
        renamed_to = data.get("renamed_to")
        return cls(data["kind"], TableId.parse(data["table"]), data["statement"], data.get("detail", ""),
                   EventPosition(p["file"], int(p["pos"]), int(p.get("row", 0))) if p else None,
                   TableId.parse(renamed_to) if renamed_to else None)


def shorten(statement: str, limit: int = 200) -> str:
    """A statement on one line, cut at ``limit`` characters (logs and errors quote it)."""
    flat = " ".join(statement.split())
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."
