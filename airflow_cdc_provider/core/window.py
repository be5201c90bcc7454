"""Folding a chunk's binlog window ``[LW, HW)`` onto the rows SELECTed for it.

The SELECT ran somewhere between LW and HW, so a row may be older or newer than HW. The last change of each
key inside the chunk that was written in the window is what the key looks like at HW: an insert or update
puts its after image, a delete removes the key. Changes of keys outside the chunks belong to other chunks
and are ignored. This is Flink CDC's ``upsertBinlog``. A TRUNCATE in the window voids the SELECTed rows
(``after_last_truncate``): only what was written after it remains. ``window_changes`` picks those last changes (pure);
the fold itself is ``fold_rows`` for rows in a dict, and in Spark ``spark.window_fold``: a keyed anti-join plus
union for staged rows, or the last changes upserted on top of rows already in the jdbc mirror.
"""

from __future__ import annotations

from collections import Counter
from typing import Any, Callable, Iterable, Mapping

from airflow_cdc_provider.core.chunks import Chunk
from airflow_cdc_provider.core.keys import Key
from airflow_cdc_provider.core.offsets import EventPosition
from airflow_cdc_provider.core.records import OP_CREATE, OP_DELETE, OP_UPDATE, ChangeRecord
from airflow_cdc_provider.core.schema_changes import DROP, TRUNCATE, SchemaChange

LastChanges = dict[Key, tuple[ChangeRecord, int]]  # key -> (its newest change in the window, its chunk index)


class SchemaChangeInWindow(RuntimeError):
    """A drop or definition change of the table between a window's watermarks: the SELECT may have read either
    definition, so the window cannot be folded. A new read of the chunks (a retry) reads the new one."""

    def __init__(self, change: SchemaChange) -> None:
        self.change = change
        if change.kind == DROP:
            why = "the table is gone: the next run of the pipeline leaves it out of its plan"
        else:
            why = ("its rows may hold either definition: retry the chunk task (it reads the table as it is now); "
                   "chunks read before the change are re-read too: the stream re-snapshots the table when it "
                   "reaches the change")
        super().__init__(f"{change.describe()} happened while this chunk was read; {why}")


def after_last_truncate(records: Iterable[ChangeRecord | SchemaChange]
                        ) -> tuple[list[ChangeRecord], EventPosition | None]:
    """A window's row changes after its last TRUNCATE, and where that TRUNCATE was (None: no TRUNCATE; if there
    was one, the SELECTed rows are void: every row at the high watermark was written after it). Raises
    ``SchemaChangeInWindow`` for any other schema change."""
    rows: list[ChangeRecord] = []
    truncate: EventPosition | None = None
    for rec in records:
        if isinstance(rec, SchemaChange):
            if rec.kind != TRUNCATE:
                raise SchemaChangeInWindow(rec)
            rows, truncate = [], rec.position
        else:
            rows.append(rec)
    return rows, truncate


def window_changes(records: Iterable[ChangeRecord], locate: Callable[[Key], Chunk | None]) -> tuple[LastChanges, Counter]:
    """The last change of every key inside the window's chunks (``locate``: the chunk holding a key, or None),
    with its chunk index, and per chunk index how many window changes touched it."""
    last: LastChanges = {}
    applied: Counter = Counter()
    for rec in records:
        if rec.op not in (OP_CREATE, OP_UPDATE, OP_DELETE):
            raise ValueError(f"unexpected op {rec.op!r} in a binlog window")
        chunk = locate(rec.key)
        if chunk is not None:
            last[rec.key] = (rec, chunk.index)
            applied[chunk.index] += 1
    return last, applied


def fold_rows(rows: Mapping[Key, Mapping[str, Any]], last: LastChanges) -> dict[Key, Mapping[str, Any]]:
    """``rows`` (key -> row, as SELECTed) as of the high watermark."""
    result = dict(rows)
    for key, (rec, _) in last.items():
        if rec.op == OP_DELETE:
            result.pop(key, None)
        else:
            result[key] = rec.after  # type: ignore[assignment]
    return result
