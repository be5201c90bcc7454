"""The change record: one row change of one key, the unit both the chunk backfill and the stream handle.

A binlog UPDATE that changes the key is split into a delete of the old key and an insert of the new one,
because the two keys may belong to different chunks with different high watermarks: each half must pass the
emit filter on its own.
"""

from __future__ import annotations

from dataclasses import dataclass
from operator import itemgetter
from typing import Any, Mapping, Sequence

from airflow_cdc_provider.core.chunks import TableId
from airflow_cdc_provider.core.keys import Key
from airflow_cdc_provider.core.offsets import EventPosition

OP_READ = "r"  # snapshot read
OP_CREATE = "c"
OP_UPDATE = "u"
OP_DELETE = "d"


@dataclass(frozen=True)
class ChangeRecord:
    op: str
    table: TableId
    key: Key
    before: Mapping[str, Any] | None
    after: Mapping[str, Any] | None
    position: EventPosition
    ts_ms: int

    @property
    def image(self) -> Mapping[str, Any]:
        """The row as the sink stores it: the after image, or the before image of a delete."""
        return self.before if self.op == OP_DELETE else self.after  # type: ignore[return-value]


class NullKeyError(ValueError):
    """A change whose key decodes to NULL in a NOT NULL key column: a zero or invalid date (``0000-00-00``, a
    zero month or day, an invalid day stored under ``ALLOW_INVALID_DATES``), which has no date value, or a column
    a writer's session left out of the row image (``binlog_row_image`` other than FULL). The sinks would key the
    row by NULL (two such rows become one; a MERGE never matches it), so the stream, or the chunk whose watermark
    window reads the change, stops."""

    def __init__(self, table: TableId, columns: Sequence[str], key: Key) -> None:
        super().__init__(null_key_message(table, columns, f"a change of a row (key {key!r})", from_binlog=True))


def null_key_message(table: TableId | str, columns: Sequence[str], what: str, from_binlog: bool = False) -> str:
    """Why ``what`` (a change, a row a snapshot reads) of ``table`` cannot be captured: key ``columns`` read as
    NULL. Said alike by the stream and the snapshot."""
    binlog = (" So does a column a writer's session leaves out of the binlog: set binlog_row_image=FULL for every "
              "writer." if from_binlog else "")
    return (f"{table}: {what} whose key column(s) {', '.join(columns)} read as NULL: such a row has no key the "
            f"sinks can tell apart. A zero or invalid date reads so: give the row a valid date on the source (and "
            f"set sql_mode NO_ZERO_DATE, NO_ZERO_IN_DATE, no ALLOW_INVALID_DATES for its writers).{binlog} Or leave "
            f"the table out of source.tables")


def key_of(row: Mapping[str, Any], key_columns: Sequence[str]) -> Key:
    return tuple(row[c] for c in key_columns)


def row_images(kind: str, rows: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The images of python-mysql-replication's row dicts (``values``, or ``before_values`` and ``after_values``)
    in order, an update's before and after alternating, as the compiled decoder gives them."""
    if kind == "update":
        return [image for row in rows for image in (row["before_values"], row["after_values"])]
    return [row["values"] for row in rows]


def records_from_row_event(
    kind: str,
    table: TableId,
    key_columns: Sequence[str],
    rows: Sequence[Mapping[str, Any]],
    file: str,
    event_start: int,
    ts_ms: int,
) -> list[ChangeRecord]:
    """Turn one decoded binlog row event into change records.

    ``kind`` is ``insert``/``update``/``delete``; ``rows`` are python-mysql-replication's row dicts
    (``values`` or ``before_values``/``after_values``), already converted to canonical values.
    """
    return records_from_images(kind, table, key_columns, row_images(kind, rows), file, event_start, ts_ms)


def records_from_images(
    kind: str,
    table: TableId,
    key_columns: Sequence[str],
    images: Sequence[Mapping[str, Any]],
    file: str,
    event_start: int,
    ts_ms: int,
) -> list[ChangeRecord]:
    """``records_from_row_event`` of the event's row images (``row_images``). Every change the stream reads
    passes here: one list, the keys taken by an ``itemgetter``."""
    if kind not in ("insert", "delete", "update"):
        raise ValueError(f"unknown row event kind {kind!r}")
    get = itemgetter(*key_columns)
    one = get if len(key_columns) > 1 else (lambda image: (get(image),))  # a key is a tuple, even of one column

    def key(image: Mapping[str, Any]) -> Key:
        k = one(image)
        if None in k:
            raise NullKeyError(table, [c for c, v in zip(key_columns, k) if v is None], k)
        return k

    if kind == "insert":
        return [ChangeRecord(OP_CREATE, table, key(image), None, image, EventPosition(file, event_start, i), ts_ms)
                for i, image in enumerate(images)]
    if kind == "delete":
        return [ChangeRecord(OP_DELETE, table, key(image), image, None, EventPosition(file, event_start, i), ts_ms)
                for i, image in enumerate(images)]
    out = []
    for i in range(len(images) // 2):
        before, after = images[2 * i], images[2 * i + 1]
        pos = EventPosition(file, event_start, i)
        old_key, new_key = key(before), key(after)
        if old_key == new_key:
            out.append(ChangeRecord(OP_UPDATE, table, new_key, before, after, pos, ts_ms))
        else:
            out.append(ChangeRecord(OP_DELETE, table, old_key, before, None, pos, ts_ms))
            out.append(ChangeRecord(OP_CREATE, table, new_key, None, after, pos, ts_ms))
    return out
