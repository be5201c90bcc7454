"""The binlog as a Spark Structured Streaming source, decoded in parallel by Spark tasks.

Offsets are binlog positions at transaction boundaries (``{"file", "pos", "gtid", "ts_ms", "behind"}``).
The driver plans each micro-batch without decoding anything (``mysql/segments.py``): ``latestOffset`` ends
the batch at a transaction boundary about ``stream.max_batch_bytes`` of binlog after its start (or at the server's
current position, or at the ``available_now`` target), and ``partitions`` cuts the batch into segments that
also start at transaction boundaries, about equal in bytes, one per Spark task (``read_partitions``,
default: the application's default parallelism). Each task decodes its segment through its own replica
connection (server id: the stream's plus one plus the segment's index, inside the connection's range).
Never starting inside a transaction matters: python-mysql-replication silently drops rows when it does
(feasibility P12). Because a batch's offsets are checkpointed before it runs and the plan depends only on
them, a re-run after a crash reads exactly the same rows.

Segments arrive in any order; every row carries its binlog position, and the sinks keep the newest version
per key, so the per-key order is restored there. Every row change passes the emit filter (``core.emit_filter``)
built from the stream seed: a change is emitted only if it is newer than the high watermark of the chunk
that holds its key (or of the whole table), so nothing a snapshot chunk already contains is emitted again.
Rows carry the sink values of their image in their table's struct column (``source_schema``), so they
leave the tasks typed, through Arrow, and ``spark/stream.py`` selects each table's rows without another
pass through Python. Row events of tables not captured are skipped before their rows are decoded (the
library's table filter). ``ts_ms`` stays in offsets for old checkpoints; the lag comes from the rows.
"""

from __future__ import annotations

import gc
import json
from functools import partial
from typing import Any, Iterator

from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxBytes, SupportsTriggerAvailableNow

# The change's metadata in these columns, then one struct column per captured table (``source_schema``).
# ``statement``: set in a schema change's row only (``schema_change_row``).
META_SCHEMA = "table string, op string, ts_ms bigint, file_seq bigint, pos bigint, row int, statement string"
META_WIDTH = 7


def image_column(index: int) -> str:
    return f"image_{index}"


def source_schema(table_ddls: list[str]) -> str:
    """The source's schema: the metadata, then ``image_<i>``, a struct of table ``i``'s sink columns (its
    ``TableSinkTypes.spark_ddl``), set only in that table's rows. The rows leave the reader typed (Arrow),
    so a batch never goes through Python a second time to become per-table DataFrames."""
    return ", ".join([META_SCHEMA] + [f"{image_column(i)} struct<{ddl}>" for i, ddl in enumerate(table_ddls)])


def source_row(rec, types, columns: dict[str, int]) -> list:
    """One change as a row of the source's schema: its metadata, then its sink values in its table's image
    column (``columns``: table -> column index); the other image columns stay null."""
    seq, pos, row = rec.position.sort_key
    name = str(rec.table)
    values = [None] * (META_WIDTH + len(columns))
    values[:META_WIDTH] = (name, rec.op, rec.ts_ms, seq, pos, row, None)
    values[columns[name]] = types.row_to_sink(dict(rec.image))
    return values


def schema_change_row(change, columns: dict[str, int]) -> list:
    """A schema change as a row of the source's schema: its op (``t`` truncate, ``x`` drop, ``s`` resync), its
    position, and the statement with what it did, its binlog file and a rename's new name (JSON); no image."""
    seq, pos, row = change.position.sort_key
    values = [None] * (META_WIDTH + len(columns))
    said = {"statement": change.statement, "detail": change.detail, "file": change.position.file}
    if change.renamed_to is not None:
        said["renamed_to"] = str(change.renamed_to)
    values[:META_WIDTH] = (str(change.table), change.op, 0, seq, pos, row, json.dumps(said))
    return values


def unreachable_errors() -> tuple[type[BaseException], ...]:
    """The errors that mean the source could not be reached (a restart, a failover, an idle connection closed)."""
    import pymysql

    return (pymysql.err.OperationalError, pymysql.err.InterfaceError, ConnectionError)


def offset_dict(file: str, pos: int, gtid: str | None, ts_ms: int, behind: bool) -> dict[str, Any]:
    return {"file": file, "pos": int(pos), "gtid": gtid, "ts_ms": int(ts_ms), "behind": bool(behind)}


class BinlogSegment(InputPartition):
    """``[start, end)`` of one batch, both transaction boundaries; ``index`` picks the reader's server id;
    ``batch_start``: where the batch starts (segment 0's start)."""

    def __init__(self, start: dict, end: dict, index: int, batch_start: dict | None = None) -> None:
        self.start, self.end, self.index = start, end, index
        self.batch_start = batch_start or start


# Spark's types whose Python values go into Arrow as they are (Spark's own converter only checks them);
# columns of other types (decimals, timestamps) pass through Spark's converter, value by value.
_ARROW_AS_IS = ("ByteType", "ShortType", "IntegerType", "LongType", "FloatType", "DoubleType", "BooleanType",
                "StringType", "BinaryType", "DateType", "TimestampNTZType")


def arrow_batches(rows: list[list], schema, batch_rows: int = 10_000) -> list | None:
    """``rows`` (the source's schema ``schema``, a ``StructType``) as Arrow record batches, built column by
    column: Spark's generic path converts every value of every row in Python, a sizeable part of a segment's
    read. None when a value does not fit its Arrow type as is; Spark's path then converts them."""
    import pyarrow as pa
    from pyspark.sql.pandas.types import to_arrow_schema

    from airflow_cdc_provider.compat.pyspark_internals import arrow_converter

    arrow_schema = to_arrow_schema(schema, timezone="UTC")  # what Spark's path builds and checks against

    def column(values, field, arrow_type):
        if type(field.dataType).__name__ not in _ARROW_AS_IS:
            convert = arrow_converter(field.dataType)
            values = [convert(v) for v in values]
        return pa.array(values, type=arrow_type)

    def batch(part: list[list]):
        arrays = []
        for i, (field, arrow_field) in enumerate(zip(schema.fields, arrow_schema, strict=True)):
            values = [r[i] for r in part]
            if arrow_field.type.num_fields and type(field.dataType).__name__ == "StructType":
                absent = (None,) * arrow_field.type.num_fields
                children = list(zip(*[v if v is not None else absent for v in values])) if values else [[]] * len(absent)
                arrays.append(pa.StructArray.from_arrays(
                    [column(c, f, af.type) for c, f, af in zip(children, field.dataType.fields, arrow_field.type, strict=True)],
                    fields=list(arrow_field.type), mask=pa.array([v is None for v in values], type=pa.bool_())))
            else:
                arrays.append(column(values, field, arrow_field.type))
        return pa.RecordBatch.from_arrays(arrays, schema=arrow_schema)

    try:
        return [batch(rows[i:i + batch_rows]) for i in range(0, len(rows), batch_rows)]
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError):
        return None


class BinlogReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, spec_json: str, secrets: dict[str, str], partitions: int, definitions: list[dict],
                 schema=None) -> None:
        from airflow_cdc_provider.pipeline.jobspec import JobSpec

        self.schema = schema  # the source's StructType, for the Arrow batches
        self.spec = JobSpec.from_json(spec_json)
        # each table's versions (``source.table_versions``) and snapshot epoch, in image column order
        self.definitions = definitions
        self.columns = {d["table"]: META_WIDTH + i for i, d in enumerate(definitions)}  # table -> its image column
        self.settings = self.spec.source_settings(secrets)
        stream = self.spec.stream
        self.max_bytes = stream.max_batch_bytes
        self.parallelism = max(1, int(stream.read_partitions or partitions or 1))
        self.min_segment = stream.min_segment_bytes
        self.reconnect_timeout = float(stream.reconnect_timeout)
        self._target: dict[str, Any] | None = None
        self._ready = False

    # -- lazy setup (in each process using the reader: the driver's planner, every task) ------------
    def _setup(self) -> None:
        if self._ready:
            return
        from airflow_cdc_provider.source.connection import SourceConnection

        self.conn = SourceConnection(**self.settings.pymysql_kwargs())
        try:
            self._set_up_with_connection()
        except BaseException:
            self.conn.close()
            raise
        self._ready = True

    def _set_up_with_connection(self) -> None:
        """Everything else the reader needs, from the options, the state store and ``self.conn``."""
        from airflow_cdc_provider.core.chunks import TableId
        from airflow_cdc_provider.core.emit_filter import build_emit_filter, natural_order
        from airflow_cdc_provider.pipeline.stream_evolutions import StreamEvolutions, covered_through
        from airflow_cdc_provider.sinks.registry import sink_class
        from airflow_cdc_provider.sinks.types import TableSinkTypes
        from airflow_cdc_provider.source.connection import SourceConnection
        from airflow_cdc_provider.source.key_order import DatabaseKeyOrder
        from airflow_cdc_provider.source.schema import TableSchema
        from airflow_cdc_provider.source.table_versions import TableVersion
        from airflow_cdc_provider.state.store import StateStore

        # the driver's definitions, the same in every task (never this process's own look at the source)
        chains = {d["table"]: [TableVersion.from_dict(v) for v in d["versions"]] for d in self.definitions}
        sinks = {d["table"]: [TableVersion.from_dict(v) for v in d.get("sink_versions") or d["versions"]]
                 for d in self.definitions}
        self.schemas = {TableId.parse(t): c[-1].schema for t, c in chains.items()}
        self.types = {TableId.parse(t): TableSinkTypes.of(c[-1].schema, c[-1].number) for t, c in sinks.items()}
        self.evolutions = StreamEvolutions(
            chains, {d["table"]: d.get("epoch", 0) for d in self.definitions}, self.spec.state_path,
            partial(SourceConnection, **self.settings.pymysql_kwargs()),
            {t: self.spec.stream.schema_changes_for(t) for t in chains},
            in_place=sink_class(self.spec.sink.type).evolves_in_place, sinks=sinks)
        # each table's key order as its snapshot's chunks were planned in (``table_schemas.chunk_order_schemas``)
        planned = {d["table"]: TableSchema.from_dict(d["chunk_order"]) if d.get("chunk_order")
                   else chains[d["table"]][0].schema for d in self.definitions}
        for t, s in planned.items():
            read = chains[t][-1].schema.key_columns
            if [c.lower() for c in s.key_columns] != [c.lower() for c in read]:
                raise ValueError(f"{t}: its snapshot's chunks split the key ({', '.join(s.key_columns)}), the stream "
                                 f"reads its key as ({', '.join(read)}) (source.chunk_key was edited): re-snapshot the "
                                 f"table (airflow-cdc resnapshot <pipeline.yaml> --table {t})")
        self.orders = {TableId.parse(t): DatabaseKeyOrder(self.conn, s) for t, s in planned.items()}
        store = StateStore(self.spec.state_path)
        self.seed = store.read_query_seed()  # the query's, fixed when the stream job set it up
        ranges = []
        orders = {}
        for name, table_seed in (self.seed.tables if self.seed else {}).items():
            t = TableId.parse(name)
            if t not in self.schemas:
                continue
            order = self.orders[t]  # the server's order, also of keys that need no query for it (ENUMs)
            if order.needs_database:
                order.prefetch([r.start for r in table_seed.chunks if r.start is not None])
            orders[name] = natural_order if order.is_natural else order
            ranges += table_seed.chunks
        self.covered_through = covered_through(self.seed, self.schemas)
        self.filter = build_emit_filter(ranges, orders)
        self.store = store

    def _server_offset(self) -> dict[str, Any]:
        from airflow_cdc_provider.source.server import current_offset

        self._setup()
        off = current_offset(self.conn)
        return offset_dict(off.file, off.pos, off.gtid, 0, False)

    def _reconnecting(self, what: str, fn, *args):
        """``fn(*args)``, retried with fresh connections while the server is unreachable (a restart, a
        failover), for up to ``stream.reconnect_timeout`` seconds; then the error fails the query."""
        import logging
        import time

        deadline = time.monotonic() + self.reconnect_timeout
        delay = 1.0
        while True:
            try:
                return fn(*args)
            except unreachable_errors() as exc:
                if time.monotonic() + delay > deadline:
                    raise
                logging.getLogger("airflow_cdc.binlog").warning(
                    "%s: source unreachable (%s); reconnecting in %.0fs", what, exc, delay)
                self._reset()
                time.sleep(delay)
                delay = min(delay * 2, 10.0)

    def _reset(self) -> None:
        if self._ready:
            try:
                self.conn.close()
            except Exception:
                pass
        self._ready = False

    # -- Spark API ---------------------------------------------------------------------------------
    def initialOffset(self) -> dict:
        from airflow_cdc_provider.source.startup import resolve_startup

        def initial() -> dict:
            self._setup()
            # a seed says where this pipeline's stream starts (the snapshot's smallest HW, or the position the
            # plan step recorded for another startup mode); without one the startup mode is resolved now
            mode = "initial" if self.seed is not None else self.spec.stream.startup
            return resolve_startup(mode, self.settings, self.conn, self.spec.server_id,
                                   self.seed.start if self.seed else None, self.spec.state_path)

        return self._reconnecting("initial offset", initial)

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = self._reconnecting("target offset", self._server_offset)

    def getDefaultReadLimit(self):
        return ReadMaxBytes(self.max_bytes)

    def latestOffset(self, start: dict, limit) -> dict:
        """The end of the next batch: the target (``available_now``) or the server's position, or a
        transaction boundary about ``limit`` bytes after ``start`` when that is nearer."""
        return self._reconnecting("batch plan", self._latest, start, limit)

    def _latest(self, start: dict, limit) -> dict:
        from airflow_cdc_provider.core.offsets import BinlogOffset
        from airflow_cdc_provider.source.segments import BinlogMap

        self._setup()
        target = self._target or self._server_offset()
        begin, goal = BinlogOffset.from_dict(start), BinlogOffset.from_dict(target)
        if not goal > begin:
            return start
        cap = None if isinstance(limit, ReadAllAvailable) else getattr(limit, "max_bytes", self.max_bytes)
        end, behind = BinlogMap(self.conn).batch_end(begin, goal, cap)
        return offset_dict(end.file, end.pos, self._gtid_at(end) if end != goal else goal.gtid, 0, behind)

    def _gtid_at(self, at) -> str | None:
        """The GTID position at a boundary (MariaDB's ``BINLOG_GTID_POS``); informational, for the status."""
        try:
            with self.conn.cursor() as cur:
                cur.execute("SELECT BINLOG_GTID_POS(%s, %s)", (at.file, at.pos))
                row = cur.fetchone()
            return (row[0] if row else None) or None
        except Exception:  # MySQL has no such function; the position alone identifies the place
            return None

    def partitions(self, start: dict, end: dict) -> list[BinlogSegment]:
        return self._reconnecting("segment plan", self._partitions, start, end)

    def _partitions(self, start: dict, end: dict) -> list[BinlogSegment]:
        from airflow_cdc_provider.core.offsets import BinlogOffset
        from airflow_cdc_provider.source.segments import BinlogMap

        begin, stop = BinlogOffset.from_dict(start), BinlogOffset.from_dict(end)
        if not stop > begin:
            return []
        self._setup()
        binlog = BinlogMap(self.conn)
        size = binlog.span_bytes(begin, stop)
        cuts = binlog.cut(begin, stop, max(self.min_segment, -(-size // self.parallelism))) if size > self.min_segment else []
        points = [begin, *cuts, stop]
        self._record_ahead(begin, stop)
        first = offset_dict(begin.file, begin.pos, None, 0, False)
        return [BinlogSegment(offset_dict(a.file, a.pos, None, 0, False), offset_dict(b.file, b.pos, None, 0, False), i,
                              first) for i, (a, b) in enumerate(zip(points, points[1:]))]

    def _record_ahead(self, begin, stop) -> None:
        """When a table's definition changed on the source, the batch's ALTERs are recorded before its tasks
        run; if that recorded any, the batch stops here (``DefinitionsChanged``), before anything is read: the
        query starts again with the versions, which is cheaper than a task meeting them."""
        import logging

        from airflow_cdc_provider.source.binlog import DefinitionsChanged

        try:
            held = self._held()
            if not self.evolutions.definitions_changed(self.conn, held):
                return
            # the replica id no task of the batch uses (they take 0..parallelism-1, their scans above it)
            recorded = self.evolutions.record_between(self.settings, self._server_id(self.parallelism), begin, stop,
                                                      self.covered_through, held)
        except Exception as exc:  # the tasks record what this did not: a failure here costs time, nothing else
            logging.getLogger("airflow_cdc.binlog").warning("the batch's ALTERs were not read ahead: %s", exc)
            return
        if recorded:
            first = recorded[0]
            raise DefinitionsChanged(first.table, first.change, first.version, len(recorded) - 1)

    def read(self, partition: BinlogSegment) -> Iterator[tuple]:
        rows = self._reconnecting("binlog read", self._read, partition.start, partition.end, partition.index,
                                  getattr(partition, "batch_start", partition.start))
        batches = arrow_batches(rows, self.schema) if self.schema is not None and rows else None
        return iter(batches if batches is not None else rows)

    def commit(self, end: dict) -> None:
        pass

    # -- a small batch read by the stream's driver (``spark.stream.BatchWriter``) ---------------------------
    def read_table(self, start, end, large_types: bool = False):
        """``[start, end)`` (``BinlogOffset``s of one batch) read as one segment, as a ``pyarrow.Table`` of the
        source's schema typed as ``DataFrame.toArrow`` collects it (``large_types``: Spark's
        ``useLargeVarTypes``); None when a value does not fit its Arrow type as is (Spark's path converts it),
        or when the source cannot be reached: Spark's tasks then read the batch, reconnecting as they do, and a
        stop asked for meanwhile cancels them (a read here cannot be)."""
        import logging

        import pyarrow as pa
        from pyspark.sql.pandas.types import to_arrow_schema

        first = offset_dict(start.file, start.pos, None, 0, False)
        unreachable = unreachable_errors()
        if self._ready:
            try:
                self.conn.ping(reconnect=False)
            except unreachable:  # idle longer than the server's wait_timeout: set up again
                self._reset()
        try:
            rows = self._read(first, offset_dict(end.file, end.pos, None, 0, False), 0, first)
        except unreachable as exc:
            logging.getLogger("airflow_cdc.binlog").warning("the batch was not read in the driver, Spark's tasks read "
                                                            "it: source unreachable (%s)", exc)
            self._reset()
            return None
        batches = arrow_batches(rows, self.schema)
        if batches is None:
            return None
        arrow_schema = to_arrow_schema(self.schema, error_on_duplicated_field_names_in_struct=True, timezone="UTC",
                                       prefers_large_types=large_types)
        return pa.Table.from_batches(batches, schema=to_arrow_schema(self.schema, timezone="UTC")).cast(arrow_schema)

    def close(self) -> None:
        self._reset()

    # -- decoding ----------------------------------------------------------------------------------
    def _read(self, start: dict, stop: dict, index: int, batch_start: dict | None = None) -> list[tuple]:
        """The emitted rows of the transactions in ``[start, stop)``, decoded by replica ``index``."""
        from airflow_cdc_provider.core.offsets import BinlogOffset
        from airflow_cdc_provider.source.binlog import DefinitionsChanged, TableChangeReader, read_changes_between

        self._setup()
        # A segment decodes into a few hundred thousand small objects without reference cycles; the cyclic
        # garbage collector would walk them again and again while they pile up.
        collecting = gc.isenabled()
        gc.disable()
        try:
            begin = BinlogOffset.from_dict(start)
            first = BinlogOffset.from_dict(batch_start or start)
            # a replica id for reading the batch's earlier part, beside this segment's own
            evolutions = self.evolutions.reading_from(begin, first, self.settings,
                                                      self._server_id(index + self.parallelism + 1))
            reader = TableChangeReader(self.schemas, covered_through=self.covered_through, held=self._held(),
                                       evolutions=evolutions, confirmed=None if begin == first else ())
            records = list(read_changes_between(self.settings, self._server_id(index), begin,
                                                BinlogOffset.from_dict(stop), self.schemas, reader))
            if reader.recorded:  # the batch cannot be written with this query's definitions: it starts again
                first = reader.recorded[0]
                raise DefinitionsChanged(first.table, first.change, first.version, len(reader.recorded) - 1)
            return self._emit(records)
        finally:
            if collecting:
                gc.enable()

    def _held(self) -> set:
        """Tables with a resync their current snapshot does not cover (read again for every segment: a
        continuous stream's earlier batch may have recorded one)."""
        from airflow_cdc_provider.pipeline.stream_evolutions import held_tables

        return held_tables(self.store, self.schemas, self.covered_through)

    def _server_id(self, index: int) -> int:
        """The stream's own id plus ``1 + index``, wrapped inside the connection's ``server_id_range``."""
        return self.settings.replica_server_id(self.spec.server_id, 1 + index)

    def _emit(self, records: list) -> list[tuple]:
        """The rows of the records the emit filter passes, and of every schema change (the reader already left
        out what a table's snapshot covers). A schema change of a table whose ``stream.schema_changes`` is
        ``fail`` fails the task, so the batch writes nothing."""
        from airflow_cdc_provider.core.keys import Key
        from airflow_cdc_provider.core.schema_changes import EVOLVE, SchemaChange

        changes = [r for r in records if isinstance(r, SchemaChange) and r.kind != EVOLVE
                   and self.spec.stream.schema_changes_for(str(r.table)) == "fail"]
        if changes:
            raise SchemaChangeStop(changes[0])
        need: dict[Any, list[Key]] = {}
        for rec in records:
            if isinstance(rec, SchemaChange):
                continue
            hw = self.filter.max_high_watermark(rec.table)
            if hw is not None and rec.position.sort_key <= hw and self.orders[rec.table].needs_database:
                need.setdefault(rec.table, []).append(rec.key)
        for table, keys in need.items():
            self.orders[table].prefetch(keys)
        return [schema_change_row(rec, self.columns) if isinstance(rec, SchemaChange)
                else source_row(rec, self.types[rec.table], self.columns) for rec in records
                if isinstance(rec, SchemaChange) or self.filter.should_emit(rec.table, rec.key, rec.position)]


class SchemaChangeStop(RuntimeError):
    """``stream.schema_changes: fail`` met a schema change of a captured table: the stream stops before it."""

    def __init__(self, change) -> None:
        table = str(change.table)
        super().__init__(
            f"schema change of {table} at {change.position.file}:{change.position.pos} ({change.detail or change.kind}): "
            f"{change.statement or '(seen in its row events)'}; stream.schema_changes is fail, so the stream stopped "
            f"before it and wrote nothing of this batch. To go on: "
            + ("the table is gone: set its stream.schema_changes (or "
               f"stream.schema_changes_per_table['{table}']) to resnapshot: the drop is then applied (its sink data "
               "kept, marked dropped); leaving it out of source.tables is not enough, the stream still reads it up to "
               "its drop"
               if change.kind == "drop" else
               f"re-snapshot the table (airflow dags trigger <dag_id> -c '{{\"resnapshot\": [\"{table}\"]}}') - its "
               f"new snapshot starts after the change, so the stream passes it - or set its stream.schema_changes (or "
               f"stream.schema_changes_per_table['{table}']) to evolve or resnapshot"))


class BinlogSource(DataSource):
    """Registered under ``airflow_cdc_binlog``. Options (no secrets): ``spec``; ``partitions``, the number of
    segments per batch; ``definitions``, a JSON list of each table's ``{"table", "epoch", "versions",
    "sink_versions", "chunk_order"}`` (its ``TableVersion``s, and the definition its chunks were read with) in
    image column order (every task decodes with these); ``schema`` (``source_schema``)."""

    _secrets: dict[str, str] = {}

    @classmethod
    def name(cls) -> str:
        return "airflow_cdc_binlog"

    def schema(self) -> str:
        return self.options["schema"]

    def streamReader(self, schema) -> BinlogReader:
        return BinlogReader(self.options["spec"], self._secrets, int(self.options.get("partitions") or 1),
                            json.loads(self.options["definitions"]), schema)


def source_class_with(secrets: dict[str, str]) -> type:
    """A subclass carrying the secrets: Spark pickles the class by value to the reader's Python worker, so
    the password reaches it in every deploy mode without appearing in options, conf or the environment."""
    return type("BinlogSourceForJob", (BinlogSource,), {"_secrets": dict(secrets)})


def register_source(spark, secrets: dict[str, str]) -> None:
    """Register the source, with ``secrets``, in this session. On a classic session, first tell Spark there
    are no other Python data sources to look for: its first registration otherwise starts a Python process
    that imports every installed ``pyspark_*`` module it finds (a good part of a stream job's start), and
    this application reads no source but ours. Left alone when that lookup already ran, on Spark Connect
    (the server's, once per server), and on a Spark without this internal (the lookup then runs as usual)."""
    from airflow_cdc_provider.compat.pyspark_internals import skip_python_data_source_lookup
    from airflow_cdc_provider.spark.session import is_connect

    if not is_connect(spark):
        try:
            skip_python_data_source_lookup(spark)
        except Exception as exc:  # py4j: the internal is gone or changed; the lookup costs time, nothing else
            import logging

            logging.getLogger("airflow_cdc.binlog").debug("Python data source lookup not skipped: %s", exc)
    spark.dataSource.register(source_class_with(secrets))


