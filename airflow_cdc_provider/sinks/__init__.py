"""Sinks: where captured rows land, chosen in YAML (``sink.type``). Spark-free parts live here (layout,
SQL, finishing a snapshot); the Spark writers are in ``airflow_cdc_provider.spark.sinks``.

Every row written carries the metadata columns below. The version ``(_cdc_file_seq, _cdc_pos, _cdc_row)``
totally orders the changes of one key: a change's binlog position, or for snapshot rows their chunk's high
watermark with row -1 (so every later change of the key is newer). Sinks keep, per key, the row with the
highest version, which is what makes retries, replays and re-snapshots converge.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

META_COLUMNS: tuple[tuple[str, str], ...] = (
    ("_cdc_op", "string"),  # r snapshot read, c insert, u update (after image), d delete (before image)
    ("_cdc_ts_ms", "bigint"),  # event time in ms since the epoch; 0 for snapshot rows
    ("_cdc_file_seq", "bigint"),  # binlog file sequence number (mysql-bin.000042 -> 42)
    ("_cdc_pos", "bigint"),  # start of the row event (or the chunk's high watermark position)
    ("_cdc_row", "int"),  # row index in the event; -1 for snapshot rows
)
META_NAMES = tuple(n for n, _ in META_COLUMNS)
VERSION_COLUMNS = ("_cdc_file_seq", "_cdc_pos", "_cdc_row")


class SinkError(RuntimeError):
    pass


@dataclass
class SinkConfig:
    """``type`` parquet: ``path``. ``type`` jdbc: ``conn`` (connection fields without password),
    ``schema`` (target schema), and the password in the job's secrets as ``sink_password``."""

    type: str = "parquet"
    path: str | None = None
    conn: dict[str, Any] = field(default_factory=dict)
    schema: str = "public"

    def to_dict(self) -> dict[str, Any]:
        return {"type": self.type, "path": self.path, "conn": self.conn, "schema": self.schema}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "SinkConfig":
        return cls(**data)

    def describe(self) -> str:
        if self.type == "parquet":
            return f"parquet sink at {self.path}"
        return f"jdbc sink {self.conn.get('host')}:{self.conn.get('port')}/{self.conn.get('schema')} schema {self.schema}"


def finish_snapshot(sink: SinkConfig, secrets: dict[str, str], table: str, epoch: int, min_low_watermark: tuple) -> None:
    """Make a completed snapshot epoch the table's current one (called once every chunk report is in)."""
    if sink.type == "parquet":
        from airflow_cdc_provider.sinks.parquet import ParquetLayout

        ParquetLayout(sink.path).write_current(table, epoch, min_low_watermark)
    elif sink.type == "jdbc":
        from airflow_cdc_provider.sinks.postgres import PostgresMirror

        PostgresMirror(sink, secrets).sweep_stale(table, min_low_watermark)
    else:
        raise SinkError(f"unknown sink type {sink.type!r}")
