"""The binlog as a Spark Structured Streaming source (PySpark Python data source, simple reader).

Offsets are binlog positions at transaction boundaries (``{"file", "pos", "gtid", "ts_ms", "behind"}``):
a batch ends only after an XID (or a DDL/non-transactional COMMIT), never inside a transaction, because
python-mysql-replication silently drops rows when it starts mid-transaction (feasibility P12). The reader
runs on the driver (``SimpleDataSourceStreamReader``): one decode per event, and Spark keeps each batch's
rows so a batch is planned once; after a crash, ``readBetweenOffsets`` re-reads exactly the checkpointed
range, which gives the same rows because the filter is deterministic.

Every row change passes the emit filter (``core.emit_filter``) built from the stream seed: a change is
emitted only if it is newer than the high watermark of the chunk that holds its key (or of the whole table),
so nothing a snapshot chunk already contains is emitted again. Rows carry the sink values of their image,
pickled, so one source serves tables of any schema; ``spark/stream.py`` turns them into typed rows per table.

``available_now``: ``prepareForTriggerAvailableNow`` records the server's position as the target, batches
are capped at ``max_rows_per_batch`` rows, and the query ends at the target.
"""

from __future__ import annotations

import pickle
from typing import Any, Iterator

from pyspark.sql.datasource import DataSource, SimpleDataSourceStreamReader
from pyspark.sql.streaming.datasource import SupportsTriggerAvailableNow

SOURCE_SCHEMA = "table string, op string, file_seq bigint, pos bigint, row int, ts_ms bigint, payload binary"
DEFAULT_MAX_ROWS = 50_000
DEFAULT_RECONNECT_SECONDS = 300


def offset_dict(file: str, pos: int, gtid: str | None, ts_ms: int, behind: bool) -> dict[str, Any]:
    return {"file": file, "pos": int(pos), "gtid": gtid, "ts_ms": int(ts_ms), "behind": bool(behind)}


class BinlogReader(SimpleDataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, spec_json: str, secrets: dict[str, str]) -> None:
        from ..jobspec import JobSpec

        self.spec = JobSpec.from_json(spec_json)
        self.settings = self.spec.source_settings(secrets)
        self.max_rows = int(self.spec.stream.get("max_rows_per_batch") or DEFAULT_MAX_ROWS)
        self.reconnect_timeout = float(self.spec.stream.get("reconnect_timeout") or DEFAULT_RECONNECT_SECONDS)
        self._target: dict[str, Any] | None = None
        self._ready = False

    # -- lazy setup (runs in the driver's Python worker) -------------------------------------------
    def _setup(self) -> None:
        if self._ready:
            return
        import pymysql

        from ..core.chunks import TableId
        from ..core.emit_filter import build_emit_filter
        from ..mysql.key_order import DatabaseKeyOrder
        from ..mysql.schema import load_schema
        from ..mysql.types import TableSinkTypes
        from ..state import StateStore

        self.conn = pymysql.connect(**self.settings.pymysql_kwargs())
        self.schemas = {}
        for name, opts in self.spec.tables.items():
            t = TableId.parse(name)
            self.schemas[t] = load_schema(self.conn, t, (opts or {}).get("chunk_key"))
        self.types = {t: TableSinkTypes.of(s) for t, s in self.schemas.items()}
        self.orders = {t: DatabaseKeyOrder(self.conn, s) for t, s in self.schemas.items()}
        seed = StateStore(self.spec.state_path).read_seed() or {}
        reports = []
        orders = {}
        for name, info in (seed.get("tables") or {}).items():
            t = TableId.parse(name)
            if t not in self.schemas:
                continue
            order = self.orders[t]
            if order.needs_database:
                from ..core.keys import decode_key

                order.prefetch([decode_key(r["start"]) for r in info["chunks"] if r["start"] is not None])
                orders[name] = order
            reports += info["chunks"]
        self.filter = build_emit_filter(reports, orders)
        self._ready = True

    def _server_offset(self) -> dict[str, Any]:
        from ..mysql.server import current_offset

        self._setup()
        off = current_offset(self.conn)
        return offset_dict(off.file, off.pos, off.gtid, 0, False)

    def _reconnecting(self, what: str, fn, *args):
        """``fn(*args)``, retried with fresh connections while the server is unreachable (a restart, a
        failover), for up to ``stream.reconnect_timeout`` seconds; then the error fails the query."""
        import logging
        import time

        import pymysql

        deadline = time.monotonic() + self.reconnect_timeout
        delay = 1.0
        while True:
            try:
                return fn(*args)
            except (pymysql.err.OperationalError, pymysql.err.InterfaceError, ConnectionError) as exc:
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
        from ..mysql.startup import resolve_startup

        def initial() -> dict:
            self._setup()
            return resolve_startup(self.spec, self.settings, self.conn)

        return self._reconnecting("initial offset", initial)

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = self._reconnecting("target offset", self._server_offset)

    def read(self, start: dict) -> tuple[Iterator[tuple], dict]:
        from ..core.offsets import BinlogOffset

        target = self._target or self._reconnecting("server offset", self._server_offset)
        if not BinlogOffset.from_dict(target) > BinlogOffset.from_dict(start):
            return iter([]), start
        rows, end = self._reconnecting("binlog read", self._read, start, target, self.max_rows)
        return iter(rows), end

    def readBetweenOffsets(self, start: dict, end: dict) -> Iterator[tuple]:
        rows, _ = self._reconnecting("binlog re-read", self._read, start, end, None)
        return iter(rows)

    def commit(self, end: dict) -> None:
        pass

    # -- decoding ----------------------------------------------------------------------------------
    def _read(self, start: dict, stop: dict, max_rows: int | None) -> tuple[list[tuple], dict]:
        from pymysqlreplication.event import MariadbGtidEvent, QueryEvent, XidEvent

        from ..core.offsets import BinlogOffset
        from ..mysql.binlog import TableChangeReader, event_start, open_stream

        self._setup()
        begin = BinlogOffset.from_dict(start)
        stop_key = BinlogOffset.from_dict(stop).sort_key[:2]
        reader = TableChangeReader(self.schemas)
        committed: list = []
        pending: list = []
        end = dict(start)
        gtid = start.get("gtid")
        ts_ms = int(start.get("ts_ms") or 0)
        behind = False
        with open_stream(self.settings, self.spec.server_id, begin, self.schemas) as stream:
            for ev in stream:
                file = stream.log_file
                if BinlogOffset(file, event_start(ev)).sort_key[:2] >= stop_key:
                    break
                if isinstance(ev, MariadbGtidEvent):
                    gtid = ev.gtid
                    continue
                if isinstance(ev, XidEvent) or (isinstance(ev, QueryEvent) and ev.query.strip().upper() != "BEGIN"):
                    committed += pending
                    pending = []
                    ts_ms = int(ev.timestamp) * 1000
                    end = offset_dict(file, int(ev.packet.log_pos), gtid, ts_ms, False)
                    if max_rows is not None and len(committed) >= max_rows:
                        behind = True
                        break
                    continue
                pending += reader.records(ev, file)
        end["behind"] = behind
        return self._emit(committed), end

    def _emit(self, records: list) -> list[tuple]:
        from ..core.keys import Key

        need: dict[Any, list[Key]] = {}
        for rec in records:
            hw = self.filter.max_high_watermark(rec.table)
            if hw is not None and rec.position.sort_key <= hw and self.orders[rec.table].needs_database:
                need.setdefault(rec.table, []).append(rec.key)
        for table, keys in need.items():
            self.orders[table].prefetch(keys)
        out = []
        for rec in records:
            if not self.filter.should_emit(rec.table, rec.key, rec.position):
                continue
            seq, pos, row = rec.position.sort_key
            image = self.types[rec.table].row_to_sink(dict(rec.image))
            out.append((str(rec.table), rec.op, seq, pos, row, rec.ts_ms, pickle.dumps(image, protocol=5)))
        return out


class BinlogSource(DataSource):
    """Registered under ``airflow_cdc_binlog``; the spec arrives as the ``spec`` option (no secrets)."""

    _secrets: dict[str, str] = {}

    @classmethod
    def name(cls) -> str:
        return "airflow_cdc_binlog"

    def schema(self) -> str:
        return SOURCE_SCHEMA

    def simpleStreamReader(self, schema) -> BinlogReader:
        return BinlogReader(self.options["spec"], self._secrets)


def source_class_with(secrets: dict[str, str]) -> type:
    """A subclass carrying the secrets: Spark pickles the class by value to the reader's Python worker, so
    the password reaches it in every deploy mode without appearing in options, conf or the environment."""
    return type("BinlogSourceForJob", (BinlogSource,), {"_secrets": dict(secrets)})


