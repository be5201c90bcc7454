"""MySqlCdcHook: the CDC view of a source connection (binlog position and files, validation).

Its connection type ``mysql_cdc`` (registered by the provider, so the UI offers it with its extras) or the
MySQL provider's ``mysql``: host/port/login/password/schema as usual, and in the extras ``server_id_range``
(e.g. ``"5400-6400"``, replica ids our binlog readers use), ``ssl`` (``ca``/``cert``/``key``/
``verify_identity``) or ``ssl_ca``/``ssl_cert``/``ssl_key``, ``charset`` and ``connect_timeout``.
"""

from __future__ import annotations

import contextlib
from typing import Any, Iterator

from airflow.sdk import BaseHook

from airflow_cdc_provider.core.offsets import BinlogOffset
from airflow_cdc_provider.pipeline.connections import resolve_mysql
from airflow_cdc_provider.source.connection import connect
from airflow_cdc_provider.source.server import binlog_files, current_offset, gtid_history
from airflow_cdc_provider.source.settings import ConnectionSettings


class MySqlCdcHook(BaseHook):
    conn_name_attr = "mysql_conn_id"
    default_conn_name = "mysql_default"
    conn_type = "mysql_cdc"
    hook_name = "MySQL CDC"

    def __init__(self, mysql_conn_id: str = default_conn_name, settings: ConnectionSettings | None = None,
                 **kwargs: Any) -> None:
        """``settings``: already resolved settings of ``mysql_conn_id`` (skips a second lookup)."""
        super().__init__(**kwargs)
        self.mysql_conn_id = mysql_conn_id
        self._settings = settings

    @property
    def settings(self) -> ConnectionSettings:
        """Resolved connection settings (TLS, server-id range and timeouts read from the extras)."""
        if self._settings is None:
            self._settings = resolve_mysql(self.mysql_conn_id)
        return self._settings

    @contextlib.contextmanager
    def connection(self) -> Iterator[Any]:
        conn = connect(self.settings)
        try:
            yield conn
        finally:
            conn.close()

    def get_conn(self) -> Any:
        """A new pymysql connection; the caller closes it."""
        return connect(self.settings)

    def current_offset(self) -> BinlogOffset:
        with self.connection() as conn:
            return current_offset(conn)

    def gtid_history(self) -> str | None:
        with self.connection() as conn:
            return gtid_history(conn)

    def binlog_files(self) -> list[str]:
        with self.connection() as conn:
            return [f for f, _ in binlog_files(conn)]

    def validate(self, tables: list[str], chunk_keys: dict[str, Any] | None = None, captured_before=()):
        """Raise ``SourceValidationError`` listing every problem (binlog settings, privileges, tables, keys);
        ``captured_before``: tables whose absence means they were dropped, not misspelt."""
        from airflow_cdc_provider.source.validation import validate_source

        with self.connection() as conn:
            return validate_source(conn, tables, chunk_keys or {}, source=f"source {self.settings.describe()}",
                                   captured_before=captured_before)

    def test_connection(self) -> tuple[bool, str]:
        try:
            with self.connection() as conn:
                off = current_offset(conn)
            return True, f"connected; binlog at {off}"
        except Exception as exc:
            return False, str(exc)
