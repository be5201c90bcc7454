"""What the read of one chunk yields (``ChunkReport``: the XCom value of a chunk task, one per chunk), and
the compact form the stream seed keeps of a table's reports (``ChunkRange``: adjacent chunks that share one
high watermark). Each has one JSON form (``to_dict`` / ``from_dict``), the architecture's contract:

    chunk report  {"split_id", "table", "index", "epoch", "key_columns", "start", "end",
                   "low_watermark", "high_watermark", "rows", "window_events_applied", "seconds"}
    chunk range   {"table", "split_id", "index", "start", "end", "high_watermark", "chunks"}

with keys as ``core.keys`` encodes them and watermarks as ``{"file", "pos", "gtid"}``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Mapping

from airflow_cdc_provider.core.chunks import Chunk, TableId
from airflow_cdc_provider.core.keys import Key, decode_key, encode_key
from airflow_cdc_provider.core.offsets import BinlogOffset


@dataclass(frozen=True)
class ChunkReport:
    """One chunk read between ``low_watermark`` and ``high_watermark``: its rows are the chunk as of the HW."""

    chunk: Chunk
    low_watermark: BinlogOffset
    high_watermark: BinlogOffset
    rows: int
    window_events_applied: int
    seconds: float

    @property
    def epoch(self) -> int:
        return self.chunk.epoch

    @property
    def table(self) -> str:
        return str(self.chunk.table)

    @property
    def index(self) -> int:
        return self.chunk.index

    @property
    def split_id(self) -> str:
        return self.chunk.split_id

    @property
    def range(self) -> "ChunkRange":
        return ChunkRange(self.chunk.table, self.chunk.index, self.chunk.start, self.chunk.end, self.high_watermark)

    def to_dict(self) -> dict[str, Any]:
        return {
            "split_id": self.split_id,
            "table": self.table,
            "index": self.index,
            "epoch": self.epoch,
            "key_columns": list(self.chunk.key_columns),
            "start": encode_key(self.chunk.start),
            "end": encode_key(self.chunk.end),
            "low_watermark": self.low_watermark.to_dict(),
            "high_watermark": self.high_watermark.to_dict(),
            "rows": self.rows,
            "window_events_applied": self.window_events_applied,
            "seconds": self.seconds,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "ChunkReport":
        index = int(data["index"]) if "index" in data else int(str(data["split_id"]).rsplit(":", 1)[1])
        chunk = Chunk(TableId.parse(data["table"]), index, tuple(data["key_columns"]), decode_key(data["start"]),
                      decode_key(data["end"]), int(data.get("epoch") or 0))
        return cls(chunk, BinlogOffset.from_dict(data["low_watermark"]), BinlogOffset.from_dict(data["high_watermark"]),
                   int(data["rows"]), int(data["window_events_applied"]), float(data["seconds"]))


@dataclass(frozen=True)
class ChunkRange:
    """``chunks`` adjacent chunks of one table, from chunk ``index`` on, covering ``[start, end)``, all read
    with one high watermark: what the stream's emit filter needs to know of them."""

    table: TableId
    index: int
    start: Key | None
    end: Key | None
    high_watermark: BinlogOffset
    chunks: int = 1

    @property
    def split_id(self) -> str:
        return f"{self.table}:{self.index}"

    def to_dict(self) -> dict[str, Any]:
        return {"table": str(self.table), "split_id": self.split_id, "index": self.index,
                "start": encode_key(self.start), "end": encode_key(self.end),
                "high_watermark": self.high_watermark.to_dict(), "chunks": self.chunks}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "ChunkRange":
        return cls(TableId.parse(data["table"]), int(data["index"]), decode_key(data["start"]),
                   decode_key(data["end"]), BinlogOffset.from_dict(data["high_watermark"]), int(data.get("chunks") or 1))


def compact_ranges(ranges: Iterable[ChunkRange]) -> list[ChunkRange]:
    """One table's ranges in chunk order, each run of adjacent ones that share a high watermark merged into
    one (``start`` of the first, ``end`` of the last): what the stream seed keeps per table, so its size
    follows the number of watermark windows, not of chunks."""
    out: list[ChunkRange] = []
    for r in sorted(ranges, key=lambda r: r.index):
        prev = out[-1] if out else None
        if prev is not None and prev.high_watermark == r.high_watermark and prev.end == r.start:
            out[-1] = ChunkRange(prev.table, prev.index, prev.start, r.end, prev.high_watermark, prev.chunks + r.chunks)
        else:
            out.append(r)
    return out
