"""query_seed: the seed one streaming query runs with, fixed for its lifetime.

``collect_watermarks`` replaces ``stream/seed.json`` when a re-snapshot finishes, possibly while a query of the
older epoch runs; the query takes the new epoch up only when it starts again (a reload, a restart, the next
run). If the older epoch's query wrote the table's changes past the new epoch's first low watermark, it may
have written a row whose delete lies inside a later window's binlog range: that window holds no row of the key,
and the new epoch's emit filter would drop the delete, leaving the row in the sink. A query that resumes before
the first low watermark may have done the same: lagging behind the re-snapshot, it writes after the epoch's sweep
a key it inserted before the epoch began and deleted before the resume's next batch. Such an epoch is taken up
emitting every change of the table after the position the query resumes at (``OverlappedEpoch``), in this
query and in every later one of the epoch; the sinks' versions make the changes the snapshot holds no-ops.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Mapping

from airflow_cdc_provider.core.offsets import BinlogOffset
from airflow_cdc_provider.state.records import FinishedSnapshot, OverlappedEpoch, StreamSeed


def query_seed(seed: StreamSeed | None, finished: Mapping[str, FinishedSnapshot],
               overlapped: Mapping[str, OverlappedEpoch], previous_epochs: Mapping[str, int],
               resume: BinlogOffset | None) -> tuple[StreamSeed | None, dict[str, OverlappedEpoch]]:
    """The query's seed and the overlapped epochs to keep. ``previous_epochs``: the epochs the previous query ran
    with (its status); ``resume``: where this query starts (the checkpoint's last committed end; None: no query
    committed a batch, so none wrote anything)."""
    if seed is None:
        return None, {}
    kept: dict[str, OverlappedEpoch] = {}
    tables = dict(seed.tables)
    for table, table_seed in seed.tables.items():
        record = overlapped.get(table)
        if record is None or record.epoch != table_seed.epoch:
            record = _overlapped(table_seed.epoch, finished.get(table), previous_epochs.get(table), resume)
        if record is not None:
            kept[table] = record
            tables[table] = table_seed.emitting_after(record.after)
    return replace(seed, tables=tables), kept


def _overlapped(epoch: int, snapshot: FinishedSnapshot | None, previous: int | None,
                resume: BinlogOffset | None) -> OverlappedEpoch | None:
    """The record of an overlapped epoch when a query of an older epoch (``previous``) committed before the
    epoch's last high watermark; None when the epoch's own emit filter is exact. Also before its first low
    watermark: that query may have written after the epoch finished (a stream lagging behind a re-snapshot), a
    change the epoch's sweep no longer saw (a key it inserted then), whose delete the epoch's filter would drop."""
    if resume is None or previous is None or previous >= epoch or snapshot is None or snapshot.epoch != epoch:
        return None
    if resume < snapshot.max_high_watermark:
        return OverlappedEpoch(epoch, resume)
    return None
