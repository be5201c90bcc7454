"""The ``jdbc`` sink: PostgreSQL mirror tables, their SQL, and the versioned upsert the Spark executors run.

Per source table ``db.t`` a mirror table ``<sink.schema>."db__t"`` with the source's columns (types from
``sinks.types``), the metadata columns, ``_cdc_deleted`` (tombstone) and ``_cdc_chunk`` (the snapshot chunk
that wrote the row, to clean up after a retried chunk). Primary key: the source key.

Rows arrive by ``COPY`` into a temporary staging table; upserts from it apply only when the incoming version is
newer::

    INSERT ... SELECT ... FROM staging ON CONFLICT (key) DO UPDATE SET ... WHERE (t.version) < (EXCLUDED.version)

so replays, retries, late snapshot rows and out-of-order writes converge to the newest state, and a delete
(a tombstone with the delete's version) is never undone by an older write.

The table version (``source.table_versions``) a mirror's columns are at, and the snapshot epoch it counts from, are
recorded in the sink schema's ``"_cdc_schema_versions"`` (no row: version 0, the definition the snapshot created it
with). The stream brings
a mirror to its newest version in place (``PostgresMirror.evolve_in_place``), all steps and the record in one
transaction, so a crash leaves the mirror at the version it records.

The dialect is small on purpose: a MySQL/MariaDB target needs ``INSERT ... ON DUPLICATE KEY UPDATE`` with
``IF(version newer, new, old)`` per column and its own type names; nothing else changes.
"""

from __future__ import annotations

import contextlib
import io
import itertools
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Literal, Sequence

from airflow_cdc_provider.pipeline.connections import resolve_fields
from airflow_cdc_provider.sinks.base import (
    CHUNK_COLUMN,
    EMPTYING_OPS,
    META_COLUMNS,
    META_NAMES,
    ROW_OPS,
    VERSION_COLUMNS,
    Hook,
    Sink,
    SinkConfig,
    SinkDefinition,
    SinkError,
    Version,
)
from airflow_cdc_provider.sinks.evolution import check_numbering, column_moves
from airflow_cdc_provider.sinks.parquet_arrow import newest_row_changes
from airflow_cdc_provider.sinks.registry import register_sink
from airflow_cdc_provider.sinks.types import TableSinkTypes
from airflow_cdc_provider.spark.frames import col, latest_per_key, with_meta

log = logging.getLogger("airflow_cdc.jdbc")

META_PG_TYPES = {"string": "text", "bigint": "bigint", "int": "integer"}
PG_IDENTIFIER_MAX = 63
OWN_COLUMNS = frozenset({*META_NAMES, "_cdc_deleted", "_cdc_chunk"})  # the mirror's columns that are not data
VERSIONS_TABLE = "_cdc_schema_versions"  # per mirror table, the table version its columns are at
STAGING_TABLE = "_cdc_staging"  # a write's rows on their way in: a temporary table, dropped at commit
COPY_PAGE_ROWS = 50_000  # rows COPYed and merged at a time


def pg_ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def with_params(sql: str) -> str:
    """``sql`` (names, no placeholders) inside a statement psycopg2 fills in: a ``%`` of a name doubled."""
    return sql.replace("%", "%%")


def bytea_text(value: Any) -> str | None:
    """A ``bytea`` value as PostgreSQL's hex input text (``\\x0a1b``), as COPY takes it."""
    return None if value is None else "\\x" + bytes(value).hex()


def mirror_table_name(table: str) -> str:
    db, _, name = table.partition(".")
    out = f"{db}__{name}"
    if len(out.encode("utf-8")) > PG_IDENTIFIER_MAX:
        raise SinkError(
            f"mirror table name {out!r} for {table} is longer than PostgreSQL's {PG_IDENTIFIER_MAX} bytes; "
            "shorten the source names or use the parquet sink"
        )
    return out


class PostgresMirror:
    def __init__(self, sink: SinkConfig, secrets: dict[str, str]) -> None:
        self.sink = sink
        self.conn_fields = dict(sink.conn)
        self.password = secrets.get("sink_password") or ""

    # -- connection --------------------------------------------------------------------------------
    def connect(self):
        import psycopg2

        c = self.conn_fields
        try:
            return psycopg2.connect(
                host=c.get("host"),
                port=int(c.get("port") or 5432),
                user=c.get("login"),
                password=self.password,
                dbname=c.get("schema") or "postgres",
                connect_timeout=int((c.get("extra") or {}).get("connect_timeout", 30)),
                options="-c timezone=UTC",
            )
        except psycopg2.OperationalError as exc:
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise SinkError(
                f"cannot connect to the jdbc sink {c.get('conn_id') or ''} ({c.get('login')}@{c.get('host')}:"
                f"{c.get('port')}): {first}; check the sink connection and that PostgreSQL is running"
            ) from None

    @contextlib.contextmanager
    def cursor(self) -> Iterator[Any]:
        conn = self.connect()
        try:
            with conn, conn.cursor() as cur:
                yield cur
        finally:
            conn.close()

    def qualified(self, table: str) -> str:
        return f"{pg_ident(self.sink.schema)}.{pg_ident(mirror_table_name(table))}"

    # -- DDL ---------------------------------------------------------------------------------------
    def create_table_sql(self, table: str, columns: Sequence[tuple[str, str]], key_columns: Sequence[str]) -> list[str]:
        cols = [f"{pg_ident(n)} {t}" for n, t in columns]
        cols += [f"{pg_ident(n)} {META_PG_TYPES[t]} NOT NULL" for n, t in META_COLUMNS]
        cols += ['"_cdc_deleted" boolean NOT NULL DEFAULT false', '"_cdc_chunk" text']
        pk = ", ".join(pg_ident(k) for k in key_columns)
        return [
            f"CREATE SCHEMA IF NOT EXISTS {pg_ident(self.sink.schema)}",
            f"CREATE TABLE IF NOT EXISTS {self.qualified(table)} ({', '.join(cols)}, PRIMARY KEY ({pk}))",
        ]

    def ensure_table(self, table: str, columns: Sequence[tuple[str, str]], key_columns: Sequence[str],
                     evolve: bool = False, version: int = 0, epoch: int = 0) -> None:
        """Create the mirror table; with ``evolve``, bring an existing one to ``columns`` (the source's definition
        changed and the table is being re-snapshotted): new columns added, gone ones dropped, a column of
        another type dropped and added again; the snapshot writes their values. A table created or evolved
        here is at ``version`` of ``epoch`` (whose definition ``columns`` is); an existing one left as it is
        keeps the version it records, as does one the stream evolved in place in this epoch or a newer
        epoch's snapshot prepared (another task of the epoch, cleared and run again, must not undo them)."""
        with self.cursor() as cur:
            self._ensure(cur, table, columns, key_columns, evolve, version, epoch)

    def _ensure(self, cur: Any, table: str, columns: Sequence[tuple[str, str]], key_columns: Sequence[str],
                evolve: bool, version: int, epoch: int) -> None:
        cur.execute("SELECT to_regclass(%s)", (self.qualified(table),))
        exists = cur.fetchone()[0] is not None
        for stmt in self.create_table_sql(table, columns, key_columns):
            cur.execute(stmt)
        if exists and evolve:
            at_epoch, at = self.recorded(cur, table)
            if at_epoch > epoch or (at_epoch == epoch and at > version):
                log.warning("%s: the mirror is at version %d of epoch %d: left as it is for epoch %d's snapshot",
                            table, at, at_epoch, epoch)
                return
            for stmt in self.evolve_sql(cur, table, columns, key_columns):
                cur.execute(stmt)
        if not exists or evolve:
            self._record_version(cur, table, version, epoch)

    # -- table versions ----------------------------------------------------------------------------
    def versions_table(self) -> str:
        return f"{pg_ident(self.sink.schema)}.{pg_ident(VERSIONS_TABLE)}"

    def recorded(self, cur: Any, table: str) -> tuple[int, int]:
        """(snapshot epoch, table version of it) the mirror's columns are at; (0, 0) when none is recorded."""
        cur.execute("SELECT to_regclass(%s)", (self.versions_table(),))
        if cur.fetchone()[0] is None:
            return 0, 0
        # a versions table an earlier release created has no epoch column (its records: epoch 0) until a write adds it
        cur.execute("SELECT 1 FROM pg_attribute WHERE attrelid = %s::regclass AND attname = 'epoch' AND NOT "
                    "attisdropped", (self.versions_table(),))
        epoch = "epoch" if cur.fetchone() else "0"
        cur.execute(f"SELECT {epoch}, version FROM {with_params(self.versions_table())} WHERE mirror = %s",
                    (mirror_table_name(table),))
        row = cur.fetchone()
        return (0, 0) if row is None else (int(row[0]), int(row[1]))

    def recorded_version(self, cur: Any, table: str) -> int:
        """The table version the mirror's columns are at; 0 when none is recorded."""
        return self.recorded(cur, table)[1]

    def _record_version(self, cur: Any, table: str, version: int, epoch: int) -> None:
        cur.execute(f"CREATE TABLE IF NOT EXISTS {self.versions_table()} (mirror text PRIMARY KEY, "
                    "version integer NOT NULL, epoch bigint NOT NULL DEFAULT 0, "
                    "updated_at timestamptz NOT NULL DEFAULT now())")
        # the epoch column, added to a versions table an earlier release created without it
        cur.execute(f"ALTER TABLE {self.versions_table()} ADD COLUMN IF NOT EXISTS epoch bigint NOT NULL DEFAULT 0")
        cur.execute(f"INSERT INTO {with_params(self.versions_table())} (mirror, version, epoch) VALUES (%s, %s, %s) "
                    "ON CONFLICT (mirror) DO UPDATE SET version = EXCLUDED.version, epoch = EXCLUDED.epoch, "
                    "updated_at = now()", (mirror_table_name(table), version, epoch))

    def data_columns(self, cur: Any, table: str) -> list[str]:
        cur.execute("SELECT attname FROM pg_attribute WHERE attrelid = %s::regclass AND attnum > 0 AND NOT "
                    "attisdropped ORDER BY attnum", (self.qualified(table),))
        return [r[0] for r in cur.fetchall() if r[0] not in OWN_COLUMNS]

    def evolve_in_place(self, versions: Sequence[Any], epoch: int = 0) -> int:
        """Bring the mirror of ``versions[-1].table`` from the version it records to the newest of ``versions``
        (``TableVersion``s of snapshot epoch ``epoch``, numbered 0..n), every step at once (``evolution``) and
        then the record, in one transaction: a crash or an error leaves it at the version it was. Returns the
        version it was at. A mirror that does not exist yet is created at the newest version; one a newer
        epoch's snapshot prepared is left as it is (it is being re-snapshotted)."""
        check_numbering(versions)
        newest = versions[-1]
        table, n = newest.table, newest.number
        q = self.qualified(table)
        with self.cursor() as cur:
            cur.execute("SELECT to_regclass(%s)", (q,))
            if cur.fetchone()[0] is None:
                self._ensure(cur, table, pg_columns(TableSinkTypes.of(newest.schema, n)), newest.schema.key_columns,
                             False, n, epoch)
                return n
            if self.recorded(cur, table) == (epoch, n):
                return n
            # one evolution at a time: a concurrent one waits here, then finds the version this one recorded
            cur.execute(f"LOCK TABLE {q} IN ACCESS EXCLUSIVE MODE")
            at_epoch, at = self.recorded(cur, table)
            if at_epoch > epoch:
                log.info("%s: the mirror was prepared by epoch %d's snapshot: left as it is by epoch %d's stream",
                         table, at_epoch, epoch)
                return at
            if at == n:
                self._record_version(cur, table, n, epoch)
                return n
            if at > n:
                raise SinkError(
                    f"the mirror table {q} is at version {at} of {table}'s definition, newer than the newest the "
                    f"stream knows ({n}); it was evolved by another epoch's stream: drop {q} and re-snapshot the table")
            have, want = self.data_columns(cur, table), versions[at].schema.column_names
            if sorted(have) != sorted(want):
                raise SinkError(
                    f"the mirror table {q} has the columns ({', '.join(have)}), not those of version {at} of {table} "
                    f"it records ({', '.join(want)}); it was changed outside the pipeline: drop {q} and re-snapshot "
                    "the table")
            for stmt in evolution(versions, at).sql(q, lambda v: literal(cur, v)):
                cur.execute(stmt)
            self._record_version(cur, table, n, epoch)
            return at

    def evolve_sql(self, cur: Any, table: str, columns: Sequence[tuple[str, str]], key_columns: Sequence[str]) -> list[str]:
        """The ALTERs that give the mirror table exactly the data columns ``columns`` (types compared as
        PostgreSQL spells them, through a temporary table of the wanted ones)."""
        def definition(regclass: str) -> dict[str, str]:
            cur.execute("SELECT attname, format_type(atttypid, atttypmod) FROM pg_attribute WHERE attrelid = "
                        "%s::regclass AND attnum > 0 AND NOT attisdropped ORDER BY attnum", (regclass,))
            return dict(cur.fetchall())

        cur.execute(f"CREATE TEMPORARY TABLE cdc_wanted ({', '.join(f'{pg_ident(n)} {t}' for n, t in columns)}) "
                    "ON COMMIT DROP")
        wanted, have = definition("cdc_wanted"), definition(self.qualified(table))
        cur.execute("DROP TABLE cdc_wanted")
        cur.execute("SELECT a.attname FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid AND "
                    "a.attnum = ANY(i.indkey) WHERE i.indrelid = %s::regclass AND i.indisprimary",
                    (self.qualified(table),))
        key = sorted(r[0] for r in cur.fetchall())
        if key != sorted(key_columns):
            raise SinkError(
                f"the key of {table} changed from ({', '.join(key)}) to ({', '.join(key_columns)}); a mirror table's "
                f"key cannot change in place: drop {self.qualified(table)} and re-snapshot the table")
        own = {n for n, _ in META_COLUMNS} | {"_cdc_deleted", "_cdc_chunk"}
        q = self.qualified(table)
        out = [f"ALTER TABLE {q} DROP COLUMN {pg_ident(n)}" for n in have
               if n not in own and (n not in wanted or wanted[n] != have[n])]
        out += [f"ALTER TABLE {q} ADD COLUMN {pg_ident(n)} {t}" for n, t in wanted.items()
                if n not in have or have[n] != t]
        return out

    # -- writes ------------------------------------------------------------------------------------
    def mirror_columns(self, data_columns: Sequence[str]) -> list[str]:
        """The columns a write carries, in order: the data columns, META_COLUMNS, deleted, chunk."""
        return [*data_columns, *(n for n, _ in META_COLUMNS), "_cdc_deleted", "_cdc_chunk"]

    def upsert_sql(self, table: str, data_columns: Sequence[str], key_columns: Sequence[str], rows_from: str) -> str:
        """The versioned upsert of ``rows_from`` (a query giving ``mirror_columns`` in order) into the mirror."""
        cols = self.mirror_columns(data_columns)
        updates = [c for c in cols if c not in key_columns and c != "_cdc_chunk"]
        # a snapshot write names its chunk, a stream write keeps the chunk that last read the key: a retried
        # chunk then finds every row its earlier attempt wrote, old epoch's rows included (``sweep_chunk``). A
        # snapshot row of the same version as the live row (no binlog event between the two reads: the same
        # state) is written too, only to name its chunk: a later sweep must tell it from a row no chunk re-read
        chunk = '"_cdc_chunk" = COALESCE(EXCLUDED."_cdc_chunk", t."_cdc_chunk")'
        tv = ", ".join(f"t.{pg_ident(c)}" for c in VERSION_COLUMNS)
        ev = ", ".join(f"EXCLUDED.{pg_ident(c)}" for c in VERSION_COLUMNS)
        return (
            f"INSERT INTO {self.qualified(table)} AS t ({', '.join(pg_ident(c) for c in cols)}) {rows_from} "
            f"ON CONFLICT ({', '.join(pg_ident(k) for k in key_columns)}) DO UPDATE SET "
            + ", ".join([*(f"{pg_ident(c)} = EXCLUDED.{pg_ident(c)}" for c in updates), chunk])
            + f" WHERE ({tv}) < ({ev}) OR (({tv}) = ({ev}) AND EXCLUDED.\"_cdc_op\" = 'r' AND NOT t.\"_cdc_deleted\")"
        )

    def upsert_batches(self, table: str, data_columns: Sequence[str], key_columns: Sequence[str],
                       batches: Iterable[Any], page_rows: int = COPY_PAGE_ROWS, insert_first: bool = False) -> int:
        """Upsert Arrow record batches, columns by position as ``mirror_columns`` (``bytea`` columns as
        ``\\x`` hex text, ``bytea_text``; one row per key: dedupe before calling), in one transaction; returns
        how many rows were sent.

        Each page of about ``page_rows`` rows is COPYed as CSV into a temporary table and merged with one
        ``INSERT ... SELECT ... ON CONFLICT``: PostgreSQL parses and merges the rows itself, several times
        faster than statements built row by row in Python. ``insert_first`` (a snapshot's rows, mostly of keys
        the mirror does not hold yet): a page is first COPYed straight into the mirror, which is what the upsert
        does when none of its keys is there; the first key that is there fails that COPY (back to a savepoint,
        nothing written), and this page and the rest are merged."""
        import psycopg2.errors
        import pyarrow as pa
        import pyarrow.csv as pa_csv

        cols = self.mirror_columns(data_columns)
        names = ", ".join(pg_ident(c) for c in cols)
        copy_sql = f"COPY pg_temp.{pg_ident(STAGING_TABLE)} ({names}) FROM STDIN WITH (FORMAT csv)"
        insert_sql = f"COPY {self.qualified(table)} ({names}) FROM STDIN WITH (FORMAT csv)"
        staged = False
        merge_sql = self.upsert_sql(table, data_columns, key_columns,
                                    f"SELECT {names} FROM pg_temp.{pg_ident(STAGING_TABLE)}")
        options = pa_csv.WriteOptions(include_header=False)  # strings quoted, NULL an empty field: as COPY reads
        n = 0
        conn = None
        try:
            page: list[Any] = []
            for batch in itertools.chain(batches, [None]):
                if batch is not None and batch.num_rows:
                    if len(batch.schema) != len(cols):
                        raise SinkError(f"a write to {self.qualified(table)} has {len(batch.schema)} columns, "
                                        f"not the {len(cols)} of ({names})")
                    page.append(batch.rename_columns([f"c{i}" for i in range(len(cols))]))
                if page and (batch is None or sum(b.num_rows for b in page) >= page_rows):
                    if conn is None:
                        conn = self.connect()
                        conn.set_client_encoding("UTF8")  # what the CSV is written in
                        cur = conn.cursor()
                    text = io.BytesIO()
                    pa_csv.write_csv(pa.Table.from_batches(page), text, options)
                    n += sum(b.num_rows for b in page)
                    page = []
                    if insert_first:
                        cur.execute("SAVEPOINT page")
                        try:
                            text.seek(0)
                            cur.copy_expert(insert_sql, text)
                            cur.execute("RELEASE SAVEPOINT page")
                            continue
                        except psycopg2.errors.UniqueViolation:
                            cur.execute("ROLLBACK TO SAVEPOINT page")
                            insert_first = False
                    if not staged:
                        cur.execute(f"CREATE TEMPORARY TABLE {pg_ident(STAGING_TABLE)} (LIKE "
                                    f"{self.qualified(table)}) ON COMMIT DROP")
                        staged = True
                    text.seek(0)
                    cur.copy_expert(copy_sql, text)
                    cur.execute(merge_sql)
                    cur.execute(f"TRUNCATE pg_temp.{pg_ident(STAGING_TABLE)}")
            if conn is not None:
                conn.commit()
        finally:
            if conn is not None:
                conn.close()
        return n

    def upsert(self, table: str, data_columns: Sequence[str], key_columns: Sequence[str],
               rows: Iterable[Sequence[Any]]) -> int:
        """``upsert_batches`` of Python rows (tuples as ``mirror_columns``; ``bytes`` for ``bytea``)."""
        import pyarrow as pa

        columns = list(zip(*rows))
        if not columns:
            return 0
        arrays = [pa.array([bytea_text(v) for v in c]) if any(isinstance(v, (bytes, bytearray, memoryview)) for v in c)
                  else pa.array(c) for c in columns]
        batch = pa.RecordBatch.from_arrays(arrays, names=[f"c{i}" for i in range(len(arrays))])
        return self.upsert_batches(table, data_columns, key_columns, [batch])

    def _tombstone(self, cur: Any, table: str, condition: str, params: tuple, op: str = "d",
                   version: tuple | None = None) -> int:
        """Make the live rows that meet ``condition`` (which may use ``{v}``, the version columns) tombstones
        with ``op``, and with ``version`` when given."""
        v = ", ".join(pg_ident(c) for c in VERSION_COLUMNS)
        sets = '"_cdc_deleted" = true, "_cdc_op" = %s' + (f", ({v}) = (%s, %s, %s)" if version else "")
        cur.execute(f'UPDATE {with_params(self.qualified(table))} SET {sets} WHERE NOT "_cdc_deleted" AND '
                    f'{condition.format(v=v)}',
                    (op, *(version or ()), *params))
        return cur.rowcount

    def sweep_chunk(self, table: str, chunk_tag: str, low_watermark: tuple) -> int:
        """Tombstone rows an earlier attempt of this chunk wrote that this attempt did not rewrite, as gone at
        this attempt's low watermark: an older change written later (a lagging stream) cannot bring them back."""
        with self.cursor() as cur:
            return self._tombstone(cur, table, '"_cdc_chunk" = %s AND "_cdc_op" = \'r\' AND ({v}) < (%s, %s, %s)',
                                   (chunk_tag, *low_watermark), version=tuple(low_watermark))

    def live_rows_by_chunk(self, table: str, chunk_tags: Sequence[str]) -> dict[str, int]:
        """Live rows per snapshot chunk tag (rows a running stream changed since are among them)."""
        with self.cursor() as cur:
            cur.execute(f'SELECT "_cdc_chunk", count(*) FROM {with_params(self.qualified(table))} '
                        'WHERE "_cdc_chunk" = ANY(%s) AND NOT "_cdc_deleted" GROUP BY 1', (list(chunk_tags),))
            return {tag: int(n) for tag, n in cur.fetchall()}

    def tombstone_older(self, table: str, version: tuple, op: str) -> int:
        """Tombstone every live row older than ``version`` (a truncate's or drop's), giving it that version and
        ``op``, so that no older write replayed later brings it back."""
        with self.cursor() as cur:
            return self._tombstone(cur, table, "({v}) < (%s, %s, %s)", tuple(version), op, tuple(version))

    def move(self, old: str, new: str) -> str | None:
        """``Sink.move_table``: the mirror renamed and its recorded version moved with it, in one transaction."""
        try:
            moved_to = pg_ident(mirror_table_name(new))
        except SinkError as exc:
            return str(exc)
        with self.cursor() as cur:
            cur.execute("SELECT to_regclass(%s), to_regclass(%s), to_regclass(%s)",
                        (self.qualified(old), self.qualified(new), self.versions_table()))
            source, target, versions = (r is not None for r in cur.fetchone())
            if target:
                return f"{self.qualified(new)} exists already" if source else None
            if not source:
                return None
            cur.execute(f"ALTER TABLE {self.qualified(old)} RENAME TO {moved_to}")
            if versions:  # a record of the new name whose mirror is gone (dropped by hand) records nothing
                cur.execute(f"DELETE FROM {with_params(self.versions_table())} WHERE mirror = %s",
                            (mirror_table_name(new),))
                cur.execute(f"UPDATE {with_params(self.versions_table())} SET mirror = %s, updated_at = now() "
                            "WHERE mirror = %s", (mirror_table_name(new), mirror_table_name(old)))
            cur.execute(f"COMMENT ON TABLE {with_params(self.qualified(new))} IS %s",
                        (f"source table {old}, renamed to {new}",))
        return None

    def comment(self, table: str, text: str | None) -> None:
        with self.cursor() as cur:
            cur.execute(f"COMMENT ON TABLE {with_params(self.qualified(table))} IS %s", (text,))

    def sweep_stale(self, table: str, min_low_watermark: tuple, epoch: int | None = None) -> int:
        """After a complete (re-)snapshot of ``epoch``: rows last written before it started are gone from the
        source. A row of the snapshot's first low watermark exactly is one of them unless a chunk of ``epoch``
        wrote it (the old epoch read it at that very position, and no chunk of this one read it again). They are
        gone as of that low watermark: a change older than it that a stream of the older epoch writes later
        (lagging behind the re-snapshot) cannot bring them back."""
        with self.cursor() as cur:
            cur.execute("SELECT to_regclass(%s)", (self.qualified(table),))
            if cur.fetchone()[0] is None:
                return 0
            return self._tombstone(cur, table, '(({v}) < (%s, %s, %s) OR (({v}) = (%s, %s, %s) AND '
                                   '("_cdc_chunk" IS NULL OR "_cdc_chunk" NOT LIKE %s)))',
                                   (*min_low_watermark, *min_low_watermark, f"{epoch}:%"),
                                   version=tuple(min_low_watermark))


def pg_columns(types: TableSinkTypes) -> list[tuple[str, str]]:
    """The data columns of a table's mirror: (name, PostgreSQL type)."""
    return [(c.name, t.postgres) for c, t in zip(types.schema.columns, types.types, strict=True)]


def literal(cur: Any, value: Any) -> str:
    """``value`` as an SQL literal, quoted by psycopg2 as it quotes parameters."""
    from psycopg2.extensions import encodings

    return cur.mogrify("%s", (value,)).decode(encodings[cur.connection.encoding])


@dataclass(frozen=True)
class Evolution:
    """What a run of table versions changes in the mirror, by column name: ``renames`` (old, new), ``drops`` (old
    names), ``widenings`` (new name, PostgreSQL type), ``adds`` (name, PostgreSQL type, sink value of the rows
    that existed; None for NULL)."""

    renames: tuple[tuple[str, str], ...]
    drops: tuple[str, ...]
    widenings: tuple[tuple[str, str], ...]
    adds: tuple[tuple[str, str, Any], ...]

    def sql(self, qualified: str, quote: Callable[[Any], str]) -> list[str]:
        """The statements, in order. Renamed columns go through temporary names first, so swaps and a rename onto
        the name of a dropped column work. Drops, widenings and adds are one ``ALTER TABLE``, so PostgreSQL
        rewrites the table once however many columns widen; an added column takes its value with a DEFAULT
        that is dropped again (the stream writes every column)."""
        alter = f"ALTER TABLE {qualified} "
        temp = {new: f"_cdc_renaming_{i}" for i, (_, new) in enumerate(self.renames)}
        out = [alter + f"RENAME COLUMN {pg_ident(old)} TO {pg_ident(temp[new])}" for old, new in self.renames]
        actions = [f"DROP COLUMN {pg_ident(c)}" for c in self.drops]
        for c, t in self.widenings:
            now = pg_ident(temp.get(c, c))
            actions.append(f"ALTER COLUMN {now} TYPE {t} USING {now}::{t}")
        actions += [f"ADD COLUMN {pg_ident(c)} {t}" + ("" if value is None else f" DEFAULT {quote(value)}")
                    for c, t, value in self.adds]
        if actions:
            out.append(alter + ", ".join(actions))
        out += [alter + f"RENAME COLUMN {pg_ident(temp[new])} TO {pg_ident(new)}" for _, new in self.renames]
        defaults = [f"ALTER COLUMN {pg_ident(c)} DROP DEFAULT" for c, _, value in self.adds if value is not None]
        if defaults:
            out.append(alter + ", ".join(defaults))
        return out


def evolution(versions: Sequence[Any], since: int) -> Evolution:
    """The mirror changes that take a table from version ``since`` of ``versions`` (``TableVersion``s numbered
    0..n) to the newest, all steps at once (``sinks.evolution.column_moves``)."""
    moves = column_moves(versions, since)
    widenings = tuple((c, moves.new[c].postgres)
                      for c in moves.retyped(lambda a, b: a.postgres == b.postgres))
    adds = tuple((c, moves.new[c].postgres, v) for c, v in moves.values.items())
    return Evolution(moves.renames, moves.drops, widenings, adds)


@dataclass(kw_only=True)
class JdbcSinkSettings:
    """``sink:`` of a pipeline writing to PostgreSQL."""

    __pydantic_config__ = {"extra": "forbid"}
    type: Literal["jdbc"] = "jdbc"
    conn_id: str  # an Airflow postgres connection
    schema: str = "public"  # the PostgreSQL schema of the mirror tables


@register_sink
class PostgresSink(Sink):
    """A snapshot window's rows are upserted as they are read, under the window's low watermark, and the binlog
    window's last changes on top once the HW is known (``WrittenWindow``); stream batches are upserted as they
    come (newest version per key)."""

    type = "jdbc"
    settings = JdbcSinkSettings
    writes_from_executors = True  # the versioned upserts run in the executors' Python
    evolves_in_place = True

    def __init__(self, config: SinkConfig, secrets, spark=None) -> None:
        super().__init__(config, secrets, spark)
        self.mirror = PostgresMirror(config, self.secrets)

    @classmethod
    def resolve(cls, settings: JdbcSinkSettings, data_dir: Path) -> tuple[SinkConfig, dict[str, str]]:
        fields = resolve_fields(settings.conn_id, example="postgresql://user:password@host:5432/db")
        password = fields.pop("password", None)
        conn = {"conn_id": settings.conn_id, **{k: v for k, v in fields.items() if k != "conn_type"}}
        return SinkConfig(type=cls.type, conn=conn, schema=settings.schema), ({"sink_password": password} if password else {})

    def table_name(self, table: str) -> str:
        return mirror_table_name(table)

    def describe(self) -> str:
        c = self.config.conn
        return f"jdbc sink {c.get('host')}:{c.get('port')}/{c.get('schema')} schema {self.config.schema}"

    def check_writable(self) -> list[str]:
        """The sink's connection opens, and its user may create the mirror tables in ``sink.schema`` (or create
        that schema): found at validation, not in the first chunk task's Spark job."""
        try:
            with self.mirror.cursor() as cur:
                cur.execute("SELECT current_user, current_database(), "
                            "EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = %s), "
                            "has_database_privilege(current_database(), 'CREATE')", (self.config.schema,))
                user, database, exists, create_schema = cur.fetchone()
                if exists:
                    cur.execute("SELECT has_schema_privilege(%s, 'CREATE') AND has_schema_privilege(%s, 'USAGE')",
                                (self.config.schema, self.config.schema))
                    allowed = cur.fetchone()[0]
        except SinkError as exc:
            return [f"sink.conn_id: {exc}"]
        schema = pg_ident(self.config.schema)
        if exists and not allowed:
            return [f"sink.schema: user {user} cannot create tables in schema {self.config.schema} of database "
                    f"{database}: GRANT USAGE, CREATE ON SCHEMA {schema} TO {pg_ident(user)}, or name another "
                    "sink.schema"]
        if not exists and not create_schema:
            return [f"sink.schema: schema {self.config.schema} does not exist in database {database} and user {user} "
                    f"cannot create it: CREATE SCHEMA {schema} AUTHORIZATION {pg_ident(user)}, or GRANT CREATE ON "
                    f"DATABASE {pg_ident(database)} TO {pg_ident(user)}"]
        return []

    def finish_snapshot(self, table: str, epoch: int, min_low_watermark: Version,
                        emptied_after: tuple = ()) -> None:
        """Rows older than the snapshot are gone; so are rows older than a truncate or drop the stream applied
        after the snapshot started (``emptied_after``: their records): a window published after such a
        tombstone may have inserted keys it did not cover."""
        self.mirror.sweep_stale(table, min_low_watermark, epoch)
        for change in emptied_after:
            self.apply_schema_change(change, None)

    def prepare(self, types, evolve: bool = False) -> None:
        self.mirror.ensure_table(str(types.schema.table), pg_columns(types), types.schema.key_columns, evolve,
                                 types.version, types.epoch)

    def evolve_in_place(self, versions, epoch: int) -> None:
        self.mirror.evolve_in_place(versions, epoch)

    def open_window(self, rows, types, epoch: int, indexes: list[int], low_watermark: Version,
                    retried: set[int], split_keys: bool = False) -> "WrittenWindow":
        return WrittenWindow(self, rows, types, epoch, indexes, low_watermark, retried)

    def _upsert(self, df, types, chunk_tag, insert_first: bool = False) -> dict[str | None, int]:
        """``chunk_tag``: a Spark column naming each row's snapshot chunk (``epoch:index``), or None. Returns how
        many rows were sent per chunk tag. ``insert_first``: see ``PostgresMirror.upsert_batches``."""
        from pyspark.sql import functions as F

        table = str(types.schema.table)
        data_cols = types.schema.column_names
        keys = list(types.schema.key_columns)
        # A timestamp goes as timestamp_ntz in the UTC session zone, the UTC wall clock, which PostgreSQL (session
        # zone UTC) stores as the right instant; ``bytea`` as its hex input text (``PostgresMirror.upsert_batches``).
        data = []
        for c, t in zip(types.schema.columns, types.types, strict=True):
            ref = col(c.name)
            if t.spark == "timestamp":
                ref = ref.cast("timestamp_ntz")
            elif t.spark == "binary":
                ref = F.concat(F.lit("\\x"), F.hex(ref))
            data.append(ref.alias(c.name))
        out = df.select(
            *data, *[F.col(n) for n in META_NAMES],
            (F.col("_cdc_op") == "d").alias("_cdc_deleted"),
            (F.lit(None) if chunk_tag is None else chunk_tag).cast("string").alias("_cdc_chunk"),
        )
        mirror = self.mirror

        def write_partition(batches):
            import pyarrow as pa
            import pyarrow.compute as pc

            sent: dict[str | None, int] = {}

            def counted(batches):
                for batch in batches:
                    for vc in pc.value_counts(batch.column(batch.num_columns - 1)).to_pylist():
                        sent[vc["values"]] = sent.get(vc["values"], 0) + vc["counts"]
                    yield batch

            mirror.upsert_batches(table, data_cols, keys, counted(batches), insert_first=insert_first)
            yield pa.RecordBatch.from_arrays([pa.array(list(sent), pa.string()), pa.array(list(sent.values()),
                                                                                          pa.int64())],
                                             names=["chunk", "rows"])

        # a DataFrame action (not foreachPartition, an RDD's), so an observation of ``df`` sees it; rows reach
        # Python as Arrow columns, by position (mapInArrow refers to columns by name, unquoted); the rows sent are
        # counted by ``_cdc_chunk``, the last column
        sent: dict[str | None, int] = {}
        for chunk, n in out.toDF(*[f"c{i}" for i in range(len(out.columns))]).mapInArrow(
                write_partition, "chunk string, rows bigint").collect():
            sent[chunk] = sent.get(chunk, 0) + n
        return sent

    def write_changes(self, df, types, batch_id: int, mid_write: Hook, rows: Callable[[], int]) -> None:
        """``rows`` is not needed: an upsert of no rows changes nothing. Schema changes' records are not rows of
        the mirror (``apply_schema_change``)."""
        from pyspark.sql import functions as F

        self._upsert(latest_per_key(df.filter(F.col("_cdc_op").isin(*ROW_OPS)), types.schema.key_columns), types, None)
        mid_write()

    def writes_arrow_changes(self, types) -> bool:
        return True

    def write_arrow_changes(self, rows, types, batch_id: int, mid_write: Hook) -> None:
        """As ``write_changes``, from the driver: the newest change per key, upserted with the same conversions
        as ``_upsert`` (a timestamp as its UTC wall clock, ``bytea`` as hex text)."""
        import pyarrow as pa

        rows = newest_row_changes(rows, list(types.schema.key_columns))
        data = []
        for c, t in zip(types.schema.columns, types.types, strict=True):
            values = rows[c.name]
            if t.spark == "timestamp":
                values = values.cast(pa.timestamp("us", tz="UTC")).cast(pa.timestamp("us"))
            elif t.spark == "binary":
                values = pa.array([bytea_text(v) for v in values.to_pylist()], pa.string())
            data.append(values)
        out = pa.table(data + [rows[n] for n in META_NAMES] + [rows["_cdc_deleted"], pa.nulls(rows.num_rows, pa.string())],
                       names=[*types.schema.column_names, *META_NAMES, "_cdc_deleted", "_cdc_chunk"])
        self.mirror.upsert_batches(str(types.schema.table), types.schema.column_names, list(types.schema.key_columns),
                                   out.to_batches())
        mid_write()

    def apply_schema_change(self, change, types) -> None:
        """A truncate or drop tombstones every row older than it, with its version (so an older write replayed
        later cannot bring a row back); a dropped table's mirror says so in its comment."""
        if change.op not in EMPTYING_OPS:
            return
        table = str(change.table)
        self.mirror.tombstone_older(table, change.position.sort_key, change.op)
        if change.op == "x":
            self.mirror.comment(table, f"source table dropped at {change.position.file}:{change.position.pos}")

    def move_table(self, old: str, new: str) -> str | None:
        return self.mirror.move(old, new)

    def definition(self, table: str) -> SinkDefinition | None:
        with self.mirror.cursor() as cur:
            cur.execute("SELECT to_regclass(%s)", (self.mirror.qualified(table),))
            if cur.fetchone()[0] is None:
                return None
            return SinkDefinition(tuple(self.mirror.data_columns(cur, table)), self.mirror.recorded_version(cur, table))

    def jdbc_url(self) -> str:
        c = self.config.conn
        return f"jdbc:postgresql://{c.get('host')}:{int(c.get('port') or 5432)}/{c.get('schema') or 'postgres'}"

    def current_state(self, types, include_meta: bool = False):
        from pyspark.sql import functions as F

        exprs = []
        for c, t in zip(types.schema.columns, types.types, strict=True):
            q = pg_ident(c.name)
            if t.postgres.startswith("timestamptz"):
                e = f"({q} AT TIME ZONE 'UTC')::text"
            elif t.postgres.startswith(("timestamp", "date")) or (t.postgres.startswith("numeric") and t.spark == "string"):
                e = f"{q}::text"
            else:
                e = q
            exprs.append(f"{e} AS {pg_ident(c.name)}")
        if include_meta:
            exprs += [pg_ident(n) for n in META_NAMES]
        query = (f"(SELECT {', '.join(exprs)} FROM {self.mirror.qualified(str(types.schema.table))} "
                 'WHERE NOT "_cdc_deleted") AS m')
        df = self.spark.read.jdbc(self.jdbc_url(), query, properties={
            "user": self.config.conn.get("login") or "", "password": self.mirror.password,
            "driver": "org.postgresql.Driver"})
        out = [col(c.name).cast(t.spark).alias(c.name) for c, t in zip(types.schema.columns, types.types, strict=True)]
        if include_meta:
            out += [F.col(n) for n in META_NAMES]
        return df.select(*out)


class WrittenWindow:
    """A jdbc window, upserted while it is read (which forces the read) under the window's low watermark: older
    than every change of the window, so whatever the fold or the stream writes for a key wins. Nothing is
    cached between MariaDB and PostgreSQL. Publishing upserts the last change of each key the binlog window
    touched, under that change's own position (``spark.window_fold``); a TRUNCATE in the window first makes
    every older row a tombstone. Rows an earlier attempt of a retried chunk wrote and this one did not (deleted
    meanwhile) are swept."""

    def __init__(self, sink: PostgresSink, rows, types, epoch: int, indexes: list[int], low_watermark: Version,
                 retried: set[int]) -> None:
        self.sink, self.types, self.epoch = sink, types, epoch
        self.table = str(types.schema.table)
        self.low_watermark, self.retried = low_watermark, retried
        self.tags = {index: f"{epoch}:{index}" for index in indexes}
        sent = sink._upsert(with_meta(rows, "r", 0, low_watermark), types, self._tag(), insert_first=True)
        self.counts = {index: sent.get(tag, 0) for index, tag in self.tags.items()}

    def _tag(self):
        from pyspark.sql import functions as F

        return F.concat(F.lit(f"{self.epoch}:"), F.col(CHUNK_COLUMN).cast("string"))

    def discard(self) -> None:
        """The rows upserted are the mirror's; a retry sweeps those it does not read again."""

    def publish(self, changes, mid_write: Hook) -> list[int]:
        """A TRUNCATE in the window empties the mirror at its position first, as the stream applies one (every
        row older than it, the rows just read included, becomes a tombstone); then each touched key's last change
        goes on top. ``mid_write`` (a fault point) comes before the sweep, as a kill there would. Rows never
        move between windows here, so no other chunk's report is lost (``[]``)."""
        from airflow_cdc_provider.spark.window_fold import last_changes_frame

        mirror, tags = self.sink.mirror, list(self.tags.values())
        if changes.truncate is not None:
            mirror.tombstone_older(self.table, changes.truncate.sort_key, "t")
        if changes.last:
            self.sink._upsert(last_changes_frame(self.sink.spark, self.types, changes.last), self.types, self._tag())
        mid_write()
        for index in sorted(self.retried):
            mirror.sweep_chunk(self.table, self.tags[index], self.low_watermark)
        if changes.touched or changes.truncated:
            live = mirror.live_rows_by_chunk(self.table, tags)
            self.counts = {index: live.get(tag, 0) for index, tag in self.tags.items()}
        return []
