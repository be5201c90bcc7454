"""Small stream batches read and written by the driver: no Spark job, instead of one per table with rows.

Most of a small batch's time in a Spark job is Spark's own (scheduling, the Python worker, the parquet writer's
commit protocol, the cache the tables' writes share), not the rows. A batch whose binlog span is at most
``stream.driver_batch_bytes`` is therefore read by the driver with the source's own reader
(``BinlogReader.read_table``), or, when a value needs Spark's converter, collected to it as Arrow in the one
job that reads it; each table's rows go into the sink from there through the sink's own Python writer
(``Sink.write_arrow_changes``). Larger batches, whose rows would not fit the driver comfortably and whose
writes gain from the executors, stay with Spark.

The span comes from Spark's checkpoint, which records a batch's end offset before the batch runs: the end of
the batch before is its start. A span across binlog files is not measured (the batch is left to Spark).
"""

from __future__ import annotations

from typing import Any

from airflow_cdc_provider.core.offsets import BinlogOffset
from airflow_cdc_provider.sinks.base import META_COLUMNS

# the source's metadata fields (``binlog_source.META_SCHEMA``) each sink metadata column is taken from
_META_SOURCES = ("op", "ts_ms", "file_seq", "pos", "row")
_ARROW_META = {"string": "string", "bigint": "int64", "int": "int32"}


def span_bytes(start: BinlogOffset | None, end: BinlogOffset | None) -> int | None:
    """The binlog bytes from ``start`` to ``end``; None when unknown (no start, or another file)."""
    if start is None or end is None or start.file != end.file:
        return None
    return max(0, end.pos - start.pos)


def table_changes(batch: Any, table: str, image_column: str) -> Any:
    """``table``'s rows of a collected batch (a ``pyarrow.Table`` of the source's schema) as the sink takes
    them: its image's columns (NULL in a schema change's record), then the change's metadata columns."""
    import pyarrow as pa
    import pyarrow.compute as pc

    rows = batch.filter(pc.equal(batch["table"], table))
    image = rows[image_column].combine_chunks() if rows.num_rows else None
    fields = rows.schema.field(image_column).type
    columns = ({f.name: a for f, a in zip(fields, image.flatten())} if image is not None
               else {f.name: pa.array([], f.type) for f in fields})
    for (name, kind), source in zip(META_COLUMNS, _META_SOURCES):
        columns[name] = rows[source].cast(_ARROW_META[kind])
    return pa.table(columns)


def schema_change_records(batch: Any, ops: Any, fields: tuple[str, ...]) -> list[dict[str, Any]]:
    """The schema changes' records of a collected batch (rows whose op is one of ``ops``), each a dict of
    ``fields``, as the Spark path's observation collects them."""
    import pyarrow as pa
    import pyarrow.compute as pc

    records = batch.filter(pc.is_in(batch["op"], value_set=pa.array(list(ops), pa.string())))
    return records.select(list(fields)).to_pylist()
