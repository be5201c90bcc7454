"""collect_watermarks: from every chunk's report to a finished snapshot and the stream seed.

A table's snapshot epoch is finished only when a report exists for *every* planned chunk and the reports
cover the key space contiguously; a missing report fails here, loudly, instead of silently shifting the
minimum high watermark (which would make the stream skip changes). Then:

* the sink makes the epoch current (parquet: ``_current.json``; jdbc: tombstones rows older than the epoch);
* ``tables/<t>/snapshot.json`` records the finished epoch with its chunk reports;
* ``stream/seed.json`` gets ``start`` = the smallest high watermark over all finished tables' chunks, and
  per table the chunk ranges the emit filter needs, compacted (adjacent chunks of one watermark window are
  one range).
"""

from __future__ import annotations

import logging
from typing import Callable, Iterable, Mapping

from airflow_cdc_provider.core.emit_filter import table_split_info
from airflow_cdc_provider.core.reports import ChunkReport
from airflow_cdc_provider.sinks.base import EMPTYING_OPS, Sink
from airflow_cdc_provider.state.records import FinishedSnapshot, StreamSeed, TablePlan
from airflow_cdc_provider.state.store import StateStore, planned_before_uncapture


log = logging.getLogger("airflow_cdc.collect")


class MissingChunkReports(RuntimeError):
    pass


def finish_table(store: StateStore, sink: Sink, table: str, epoch: int, planned_chunks: int,
                 reports: list[ChunkReport]) -> FinishedSnapshot:
    got = sorted({r.index for r in reports})
    missing = sorted(set(range(planned_chunks)) - set(got))
    if missing or len(reports) != planned_chunks:
        raise MissingChunkReports(
            f"{table}: {len(reports)} of {planned_chunks} chunk reports present; missing chunk(s) "
            f"{', '.join(f'{table}:{i}' for i in missing[:10])}. Clear the failed chunk tasks to re-read them."
        )
    table_split_info([r.range for r in reports])  # raises if the chunks are not contiguous
    snapshot = FinishedSnapshot(table, epoch, tuple(sorted(reports, key=lambda r: r.index)))
    start = snapshot.min_low_watermark.sort_key
    emptied = tuple(c for c in store.schema_changes() if str(c.table) == table and c.op in EMPTYING_OPS
                    and c.position is not None and c.position.sort_key > start)
    sink.finish_snapshot(table, epoch, start, emptied)
    store.write_finished_snapshot(snapshot)
    return snapshot


def build_seed(finished: Mapping[str, FinishedSnapshot], previous: StreamSeed | None = None) -> StreamSeed:
    """The seed of every finished table; never starting later than a ``previous`` seed did (a stream that has
    not committed a batch yet must still read what that seed promised)."""
    if not finished:
        raise MissingChunkReports("no finished table snapshot to seed the stream from")
    seed = StreamSeed.of(finished)
    if previous is not None and previous.start < seed.start:
        seed = StreamSeed(previous.start, seed.tables)
    return seed


def streamed_tables(seed: StreamSeed | None, startup: str, captured: Callable[[], list[str]],
                    streamed_before: Iterable[str] = ()) -> list[str]:
    """The tables a stream launch reads. Under ``stream.startup: initial``, the snapshotted ones (the seed's).
    Under another startup mode, every table ``source.tables`` captures now (``captured``) as well: the seed then
    holds only the tables snapshotted since (a re-snapshot of one), and the others are streamed from where the
    mode started them; and every table an earlier launch read (``streamed_before``). Once streamed, a table is
    always streamed, as a snapshotted one is: left out of the stream for a while and captured again, it would
    have lost the changes in between without a word."""
    if startup != "initial":
        return sorted(set(seed.tables if seed is not None else ()) | set(captured()) | set(streamed_before))
    return sorted(seed.tables) if seed is not None and seed.tables else captured()


def collect_watermarks(store: StateStore, sink: Sink, plan: Mapping[str, TablePlan],
                       reports: Iterable[ChunkReport] = ()) -> StreamSeed | None:
    """``plan``: the tables snapshotted in this run. ``reports`` (from XCom) are checked against the state
    store's copies; the state store is the source of truth. A run that snapshotted nothing keeps the seed as it
    is (a later run, a backfill, or a stream without snapshot whose plan step recorded its start); None if there
    is none yet. A table whose finished snapshot is of a later epoch than this run's (a re-snapshot planned
    after this run's finished first) keeps it: an older epoch never replaces a newer one."""
    previous = store.read_seed()
    if not plan:
        return previous
    xcom = {(r.table, r.index) for r in reports}
    uncaptured = store.uncaptured_tables()
    for table, p in plan.items():
        current = store.finished_snapshot(table)
        if current is not None and current.epoch >= p.epoch:
            log.warning("%s: snapshot epoch %d is not made current: epoch %d, planned later, finished already and "
                        "holds newer rows (a re-snapshot superseded this one)", table, p.epoch, current.epoch)
            continue
        if planned_before_uncapture(p.epoch, uncaptured.get(table)):  # an earlier run, cleared: not back
            log.warning("%s: snapshot epoch %d is not made current: the table was taken out of the pipeline "
                        "(airflow-cdc uncapture) after it was planned", table, p.epoch)
            continue
        stored = store.chunk_reports(table, p.epoch)
        for i in range(p.chunks):
            if i not in stored and (table, i) in xcom:
                raise MissingChunkReports(f"{table}:{i}: XCom has a report the state store lacks; re-run the chunk")
        finish_table(store, sink, table, p.epoch, p.chunks, [r for i, r in sorted(stored.items()) if i < p.chunks])
    seed = build_seed(store.finished_tables(), previous)
    store.write_seed(seed)
    return seed
