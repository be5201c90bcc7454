"""A statement about the shadow table of an online schema change tool, as the stream keeps it.

gh-ost builds ``_t_gho`` and pt-online-schema-change ``_t_new`` beside the table ``t`` they change, ALTER it,
and swap it in by RENAME (``source.online_schema_change`` reads the statements and says what the swap stands
for). The stream keeps each such statement in the state store as it passes it, so that the swap, however much
later, knows how the shadow was made.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Any, Callable, Mapping

from airflow_cdc_provider.core.chunks import TableId
from airflow_cdc_provider.core.offsets import EventPosition

CREATED_LIKE = "like"  # CREATE TABLE shadow LIKE original
CREATED = "create"  # CREATE TABLE shadow (columns...): pt-osc's copy of SHOW CREATE TABLE
ALTERED = "alter"  # an ALTER TABLE of the shadow that the stream could apply in place to the original
OTHER = "other"  # anything else that changes the shadow (dropped, renamed, an ALTER not understood, ...)
EMPTIED = "emptied"  # the original itself truncated or dropped (``shadow`` is the original then)
KINDS = (CREATED_LIKE, CREATED, ALTERED, OTHER, EMPTIED)

# gh-ost's ghost table ``_<t>_gho``; pt-osc's new table ``_<t>_new``, with more leading underscores when
# that name is taken
_GHOST = re.compile(r"_(.+)_gho")
_NEW = re.compile(r"(_+)(.+)_new")


def shadow_originals(table: TableId, captured: Callable[[TableId], bool]) -> list[TableId]:
    """The captured tables whose shadow ``table`` may be by its name (``_t_gho``, ``_t_new``, ``__t_new``: ``t``;
    ``__t_new`` may be ``_t``'s as well as ``t``'s, so both when both are captured)."""
    names = []
    if (ghost := _GHOST.fullmatch(table.table)) is not None:
        names.append(ghost.group(1))
    if (new := _NEW.fullmatch(table.table)) is not None:
        names += ["_" * k + new.group(2) for k in range(len(new.group(1)) - 1, -1, -1)]
    return [TableId(table.database, n) for n in names if captured(TableId(table.database, n))]


@dataclass(frozen=True)
class ShadowStatement:
    """A statement about ``shadow``, the shadow table of the captured ``original``, at ``position``: ``kind``
    (one of ``KINDS``), the ``statement`` as logged, in ``database``; ``columns``: the column names a CREATED
    shadow was defined with; ``detail``: what an OTHER statement did, in words."""

    shadow: TableId
    original: TableId
    kind: str
    statement: str
    database: str | None = None
    columns: tuple[str, ...] = ()
    detail: str = ""
    position: EventPosition | None = None

    def at(self, position: EventPosition) -> "ShadowStatement":
        return replace(self, position=position)

    def refused(self, detail: str) -> "ShadowStatement":
        """This statement as one that leaves the shadow's definition unknown, for ``detail``."""
        return replace(self, kind=OTHER, columns=(), detail=detail)

    def to_dict(self) -> dict[str, Any]:
        return {"shadow": str(self.shadow), "original": str(self.original), "kind": self.kind,
                "statement": self.statement, "database": self.database, "columns": list(self.columns),
                "detail": self.detail, "position": None if self.position is None else self.position.to_dict()}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "ShadowStatement":
        p = data.get("position")
        return cls(TableId.parse(data["shadow"]), TableId.parse(data["original"]), data["kind"], data["statement"],
                   data.get("database"), tuple(data.get("columns") or ()), data.get("detail", ""),
                   EventPosition(p["file"], int(p["pos"]), int(p.get("row", 0))) if p else None)
