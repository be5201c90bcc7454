"""PostgreSQL mirror tables: the ``jdbc`` sink's SQL, and the versioned upsert used by Spark executors.

Per source table ``db.t`` a mirror table ``<sink.schema>."db__t"`` with the source's columns (types from
``mysql.types``), the metadata columns, ``_cdc_deleted`` (tombstone) and ``_cdc_chunk`` (the snapshot chunk
that wrote the row, to clean up after a retried chunk). Primary key: the source key.

Upserts apply only when the incoming version is newer::

    INSERT ... ON CONFLICT (key) DO UPDATE SET ... WHERE (t.version) < (EXCLUDED.version)

so replays, retries, late snapshot rows and out-of-order writes converge to the newest state, and a delete
(a tombstone with the delete's version) is never undone by an older write.

The dialect is small on purpose: a MySQL/MariaDB target needs ``INSERT ... ON DUPLICATE KEY UPDATE`` with
``IF(version newer, new, old)`` per column and its own type names; nothing else changes.
"""

from __future__ import annotations

import contextlib
from typing import Any, Iterable, Iterator, Sequence

from airflow_cdc_provider.sinks import META_COLUMNS, VERSION_COLUMNS, SinkConfig, SinkError

META_PG_TYPES = {"string": "text", "bigint": "bigint", "int": "integer"}
PG_IDENTIFIER_MAX = 63


def pg_ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


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

    def ensure_table(self, table: str, columns: Sequence[tuple[str, str]], key_columns: Sequence[str]) -> None:
        with self.cursor() as cur:
            for stmt in self.create_table_sql(table, columns, key_columns):
                cur.execute(stmt)

    # -- writes ------------------------------------------------------------------------------------
    def upsert_sql(self, table: str, data_columns: Sequence[str], key_columns: Sequence[str]) -> str:
        """For ``psycopg2.extras.execute_values``: rows are data columns + META_COLUMNS + deleted + chunk."""
        cols = [*data_columns, *(n for n, _ in META_COLUMNS), "_cdc_deleted", "_cdc_chunk"]
        updates = [c for c in cols if c not in key_columns and c != "_cdc_chunk"]
        v = ", ".join(pg_ident(c) for c in VERSION_COLUMNS)
        ev = ", ".join(f"EXCLUDED.{pg_ident(c)}" for c in VERSION_COLUMNS)
        return (
            f"INSERT INTO {self.qualified(table)} AS t ({', '.join(pg_ident(c) for c in cols)}) VALUES %s "
            f"ON CONFLICT ({', '.join(pg_ident(k) for k in key_columns)}) DO UPDATE SET "
            + ", ".join(f"{pg_ident(c)} = EXCLUDED.{pg_ident(c)}" for c in updates)
            + f" WHERE (t.{v.replace(', ', ', t.')}) < ({ev})"
        )

    def upsert(self, table: str, data_columns: Sequence[str], key_columns: Sequence[str],
               rows: Iterable[Sequence[Any]], page_size: int = 1000) -> int:
        """Upsert rows (one per key; dedupe before calling) in pages; returns how many were sent."""
        from psycopg2.extras import execute_values

        sql = self.upsert_sql(table, data_columns, key_columns)
        n = 0
        conn = self.connect()
        try:
            with conn.cursor() as cur:
                page: list[Sequence[Any]] = []
                for row in rows:
                    page.append(row)
                    if len(page) >= page_size:
                        execute_values(cur, sql, page, page_size=page_size)
                        n += len(page)
                        page = []
                if page:
                    execute_values(cur, sql, page, page_size=page_size)
                    n += len(page)
            conn.commit()
        finally:
            conn.close()
        return n

    def sweep_chunk(self, table: str, chunk_tag: str, low_watermark: tuple) -> int:
        """Tombstone rows an earlier attempt of this chunk wrote that this attempt did not rewrite."""
        v = ", ".join(pg_ident(c) for c in VERSION_COLUMNS)
        with self.cursor() as cur:
            cur.execute(
                f"UPDATE {self.qualified(table)} SET \"_cdc_deleted\" = true, \"_cdc_op\" = 'd' "
                f"WHERE \"_cdc_chunk\" = %s AND \"_cdc_op\" = 'r' AND NOT \"_cdc_deleted\" AND ({v}) < (%s, %s, %s)",
                (chunk_tag, *low_watermark),
            )
            return cur.rowcount

    def sweep_stale(self, table: str, min_low_watermark: tuple) -> int:
        """After a complete (re-)snapshot: rows last written before it started are gone from the source."""
        v = ", ".join(pg_ident(c) for c in VERSION_COLUMNS)
        with self.cursor() as cur:
            cur.execute("SELECT to_regclass(%s)", (self.qualified(table),))
            if cur.fetchone()[0] is None:
                return 0
            cur.execute(
                f"UPDATE {self.qualified(table)} SET \"_cdc_deleted\" = true, \"_cdc_op\" = 'd' "
                f"WHERE NOT \"_cdc_deleted\" AND ({v}) < (%s, %s, %s)",
                tuple(min_low_watermark),
            )
            return cur.rowcount
