"""Chunk normalization: fold the binlog window ``[LW, HW]`` onto the rows SELECTed for a chunk.

The SELECT ran somewhere between LW and HW, so a row may be older or newer than HW. Replaying, in binlog
order, every change of a key inside the chunk that was written in the window yields the chunk as of HW:
insert/update put the after image, delete removes the key. Changes of keys outside the chunk belong to
another chunk and are ignored. This is Flink CDC's ``upsertBinlog`` (and the reference for the Spark job,
which does the same with a keyed anti-join + last image per key).
"""

from __future__ import annotations

from typing import Any, Callable, Iterable, Mapping

from airflow_cdc_provider.core.keys import Key
from airflow_cdc_provider.core.records import OP_CREATE, OP_DELETE, OP_UPDATE, ChangeRecord


def normalize_chunk(
    rows: Mapping[Key, Mapping[str, Any]],
    window: Iterable[ChangeRecord],
    in_chunk: Callable[[Key], bool],
) -> tuple[dict[Key, Mapping[str, Any]], int]:
    """Return the chunk's rows as of the high watermark, and how many window changes were applied.

    ``rows`` maps key -> row from the SELECT; ``window`` yields the table's changes between LW and HW in
    binlog order; ``in_chunk`` says whether a key lies in this chunk's range (database collation).
    """
    result = dict(rows)
    applied = 0
    for rec in window:
        if not in_chunk(rec.key):
            continue
        if rec.op in (OP_CREATE, OP_UPDATE):
            result[rec.key] = rec.after  # type: ignore[assignment]
        elif rec.op == OP_DELETE:
            result.pop(rec.key, None)
        else:
            raise ValueError(f"unexpected op {rec.op!r} in a binlog window")
        applied += 1
    return result, applied
