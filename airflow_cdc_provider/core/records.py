"""The change record: one row change of one key, the unit both the chunk backfill and the stream handle.

A binlog UPDATE that changes the key is split into a delete of the old key and an insert of the new one,
because the two keys may belong to different chunks with different high watermarks: each half must pass the
emit filter on its own.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterator, Mapping, Sequence

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


def key_of(row: Mapping[str, Any], key_columns: Sequence[str]) -> Key:
    return tuple(row[c] for c in key_columns)


def records_from_row_event(
    kind: str,
    table: TableId,
    key_columns: Sequence[str],
    rows: Sequence[Mapping[str, Any]],
    file: str,
    event_start: int,
    ts_ms: int,
) -> Iterator[ChangeRecord]:
    """Turn one decoded binlog row event into change records.

    ``kind`` is ``insert``/``update``/``delete``; ``rows`` are python-mysql-replication's row dicts
    (``values`` or ``before_values``/``after_values``), already converted to canonical values.
    """
    for i, row in enumerate(rows):
        pos = EventPosition(file, event_start, i)
        if kind == "insert":
            after = row["values"]
            yield ChangeRecord(OP_CREATE, table, key_of(after, key_columns), None, after, pos, ts_ms)
        elif kind == "delete":
            before = row["values"]
            yield ChangeRecord(OP_DELETE, table, key_of(before, key_columns), before, None, pos, ts_ms)
        elif kind == "update":
            before, after = row["before_values"], row["after_values"]
            old_key, new_key = key_of(before, key_columns), key_of(after, key_columns)
            if old_key == new_key:
                yield ChangeRecord(OP_UPDATE, table, new_key, before, after, pos, ts_ms)
            else:
                yield ChangeRecord(OP_DELETE, table, old_key, before, None, pos, ts_ms)
                yield ChangeRecord(OP_CREATE, table, new_key, None, after, pos, ts_ms)
        else:
            raise ValueError(f"unknown row event kind {kind!r}")
