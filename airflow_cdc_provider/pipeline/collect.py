"""collect_watermarks: from every chunk's report to a finished snapshot and the stream seed.

A table's snapshot epoch is finished only when a report exists for *every* planned chunk and the reports
cover the key space contiguously; a missing report fails here, loudly, instead of silently shifting the
minimum high watermark (which would make the stream skip changes). Then:

* the sink makes the epoch current (parquet: ``_current.json``; jdbc: tombstones rows older than the epoch);
* ``tables/<t>/snapshot.json`` records the finished epoch with its chunk reports;
* ``stream/seed.json`` gets ``start`` = the smallest high watermark over all finished tables' chunks, and
  per table the chunk infos the emit filter needs, compacted (adjacent chunks of one watermark window are
  one info).
"""

from __future__ import annotations

import time
from typing import Any, Iterable, Mapping

from airflow_cdc_provider.core.emit_filter import compact_chunk_infos, table_split_info
from airflow_cdc_provider.core.offsets import BinlogOffset
from airflow_cdc_provider.sinks import SinkConfig, finish_snapshot
from airflow_cdc_provider.state.store import StateStore


class MissingChunkReports(RuntimeError):
    pass


def _offsets(reports: Iterable[Mapping[str, Any]], key: str) -> list[BinlogOffset]:
    return [BinlogOffset.from_dict(r[key]) for r in reports]


def finish_table(store: StateStore, sink: SinkConfig, secrets: dict[str, str], table: str, epoch: int,
                 planned_chunks: int, reports: list[dict[str, Any]]) -> dict[str, Any]:
    got = sorted({int(r["index"]) for r in reports})
    missing = sorted(set(range(planned_chunks)) - set(got))
    if missing or len(reports) != planned_chunks:
        raise MissingChunkReports(
            f"{table}: {len(reports)} of {planned_chunks} chunk reports present; missing chunk(s) "
            f"{', '.join(f'{table}:{i}' for i in missing[:10])}. Clear the failed chunk tasks to re-read them."
        )
    table_split_info(reports)  # raises if the chunks are not contiguous
    low = min(_offsets(reports, "low_watermark"))
    high = max(_offsets(reports, "high_watermark"))
    finish_snapshot(sink, secrets, table, epoch, low.sort_key)
    record = {
        "table": table,
        "epoch": epoch,
        "chunks": sorted(reports, key=lambda r: int(r["index"])),
        "min_low_watermark": low.to_dict(),
        "max_high_watermark": high.to_dict(),
        "rows": sum(int(r["rows"]) for r in reports),
        "finished_at": time.time(),
    }
    store.write_finished_snapshot(table, record)
    return record


def build_seed(finished: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    if not finished:
        raise MissingChunkReports("no finished table snapshot to seed the stream from")
    all_hws = [BinlogOffset.from_dict(r["high_watermark"]) for t in finished.values() for r in t["chunks"]]
    return {
        "start": min(all_hws).to_dict(),
        "tables": {name: {"epoch": t["epoch"], "chunks": compact_chunk_infos(t["chunks"]),
                          "max_high_watermark": t["max_high_watermark"]}
                   for name, t in finished.items()},
        "created_at": time.time(),
    }


def collect_watermarks(store: StateStore, sink: SinkConfig, secrets: dict[str, str],
                       plan: Mapping[str, Mapping[str, Any]], reports: Iterable[Mapping[str, Any]] | None = None
                       ) -> dict[str, Any]:
    """``plan``: table -> {"epoch", "chunks": n} for the tables snapshotted in this run. ``reports`` (from
    XCom) are checked against the state store's copies; the state store is the source of truth."""
    xcom = {(r["table"], int(r["index"])): r for r in (reports or [])}
    for table, p in plan.items():
        epoch, n = int(p["epoch"]), int(p["chunks"])
        stored = store.chunk_reports(table, epoch)
        for i in range(n):
            if i not in stored and (table, i) in xcom:
                raise MissingChunkReports(f"{table}:{i}: XCom has a report the state store lacks; re-run the chunk")
        finish_table(store, sink, secrets, table, epoch, n, [r for i, r in sorted(stored.items()) if i < n])
    seed = build_seed(store.finished_tables())
    store.write_seed(seed)
    return seed
