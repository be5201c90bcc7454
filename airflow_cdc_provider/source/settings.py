"""Source connection settings, parsed from an Airflow ``mysql`` connection (URI or JSON form).

Airflow-free on purpose: Spark jobs and the CLI build these from the same connection text Airflow would
read from ``AIRFLOW_CONN_<ID>``. Extras understood (as Airflow's MySQL provider spells them where it has a
spelling): ``ssl`` (dict with ``ca``/``cert``/``key``/``check_hostname``) or ``ssl_ca``/``ssl_cert``/
``ssl_key``, ``charset``, ``connect_timeout``, ``server_id`` or ``server_id_range`` (``"5400-5408"``) for the
binlog readers' replica ids.

The password is kept out of ``repr`` so settings can be logged.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit

DEFAULT_SERVER_ID_RANGE = (5400, 6400)


def sql_mode_without(*modes: str) -> str:
    """An assignment of the session's sql_mode: the server's, less ``modes``."""
    expr = "CONCAT(',', @@sql_mode, ',')"
    for mode in modes:
        expr = f"REPLACE({expr}, ',{mode},', ',')"
    return f"sql_mode = TRIM(BOTH ',' FROM {expr})"


# a reading session: TIMESTAMPs in UTC and CHARs unpadded, as the binlog carries them, whatever the server says
SESSION_INIT = f"SET time_zone = '+00:00', {sql_mode_without('PAD_CHAR_TO_FULL_LENGTH')}"


class ConnectionConfigError(ValueError):
    """A connection that cannot be used as a CDC source, with a message that says how to fix it."""


def parse_connection_text(text: str, conn_id: str | None = None) -> dict[str, Any]:
    """The fields of an Airflow connection given as URI or JSON text (any connection type)."""
    text = text.strip()
    where = f"connection {conn_id!r}" if conn_id else "connection"
    if text.startswith("{"):
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ConnectionConfigError(f"{where}: invalid JSON ({exc})") from None
        return {k: data.get(k) for k in ("conn_type", "host", "port", "login", "password", "schema", "extra")}
    parts = urlsplit(text)
    if not parts.scheme:
        raise ConnectionConfigError(f"{where}: expected a URI like mysql://user:password@host:3306/db")
    extra: dict[str, Any] = dict(parse_qsl(parts.query, keep_blank_values=True))
    if "__extra__" in extra:
        extra = json.loads(extra["__extra__"])
    try:
        port = parts.port
    except ValueError:
        raise ConnectionConfigError(f"{where}: invalid port in URI") from None
    return {
        "conn_type": parts.scheme,
        "host": unquote(parts.hostname or ""),
        "port": port,
        "login": unquote(parts.username) if parts.username else None,
        "password": unquote(parts.password) if parts.password else None,
        "schema": unquote(parts.path.lstrip("/")) or None,
        "extra": extra,
    }


def parse_server_id_range(value: Any, where: str) -> tuple[int, int]:
    if isinstance(value, int):
        return (value, value)
    text = str(value).strip()
    lo, sep, hi = text.partition("-")
    try:
        a, b = int(lo), int(hi) if sep else int(lo)
    except ValueError:
        raise ConnectionConfigError(
            f"{where}: server id range {value!r} must be a number or 'start-end', e.g. '5400-5408'"
        ) from None
    if not (1 <= a <= b <= 2**32 - 1):
        raise ConnectionConfigError(f"{where}: server id range {value!r} must satisfy 1 <= start <= end < 2^32")
    return (a, b)


@dataclass(frozen=True)
class ConnectionSettings:
    host: str
    port: int = 3306
    user: str = ""
    password: str = field(default="", repr=False)
    database: str | None = None
    charset: str = "utf8mb4"
    connect_timeout: int = 30
    ssl: dict[str, Any] | None = None
    server_id_range: tuple[int, int] = DEFAULT_SERVER_ID_RANGE
    conn_id: str | None = None

    def replica_server_id(self, base: int, offset: int) -> int:
        """The server id ``offset`` places after ``base`` (a stream's own id), wrapped inside
        ``server_id_range``: the stream's readers and scans each take their own."""
        lo, hi = self.server_id_range
        base = base if lo <= base <= hi else lo
        return lo + (base - lo + offset) % (hi - lo + 1)

    # -- parsing --------------------------------------------------------------------------------------
    @classmethod
    def from_airflow_conn(cls, text: str, conn_id: str | None = None) -> "ConnectionSettings":
        """Parse the value of ``AIRFLOW_CONN_<ID>``: a URI (``mysql://u:p@h:3306/db?x=y``) or JSON."""
        return cls.from_fields(**parse_connection_text(text, conn_id), conn_id=conn_id)

    @classmethod
    def from_fields(
        cls,
        *,
        conn_type: str | None,
        host: str | None,
        port: int | None,
        login: str | None,
        password: str | None,
        schema: str | None,
        extra: dict[str, Any] | str | None,
        conn_id: str | None = None,
    ) -> "ConnectionSettings":
        """Build from the fields of an Airflow Connection object (what ``BaseHook.get_connection`` returns)."""
        where = f"connection {conn_id!r}" if conn_id else "connection"
        if conn_type and conn_type.replace("-", "_") not in ("mysql", "mariadb", "mysql_cdc"):
            raise ConnectionConfigError(f"{where}: connection type {conn_type!r} is not mysql; use a mysql connection")
        if not host:
            raise ConnectionConfigError(f"{where}: no host set")
        if isinstance(extra, str):
            try:
                extra = json.loads(extra) if extra.strip() else {}
            except json.JSONDecodeError as exc:
                raise ConnectionConfigError(f"{where}: extra is not valid JSON ({exc})") from None
        extra = dict(extra or {})
        ssl = extra.get("ssl")
        if isinstance(ssl, str):
            ssl = json.loads(ssl) if ssl.strip().startswith("{") else None
        ssl = dict(ssl or {})
        for k in ("ca", "cert", "key"):
            if extra.get(f"ssl_{k}"):
                ssl[k] = extra[f"ssl_{k}"]
        server_ids = extra.get("server_id_range", extra.get("server_id"))
        return cls(
            host=host,
            port=int(port or 3306),
            user=login or "",
            password=password or "",
            database=schema or None,
            charset=str(extra.get("charset") or "utf8mb4"),
            connect_timeout=int(extra.get("connect_timeout") or 30),
            ssl=ssl or None,
            server_id_range=(
                parse_server_id_range(server_ids, where) if server_ids not in (None, "") else DEFAULT_SERVER_ID_RANGE
            ),
            conn_id=conn_id,
        )

    # -- use --------------------------------------------------------------------------------------------
    def with_database(self, database: str | None) -> "ConnectionSettings":
        return replace(self, database=database)

    def pymysql_kwargs(self) -> dict[str, Any]:
        kw: dict[str, Any] = {
            "host": self.host,
            "port": self.port,
            "user": self.user,
            "password": self.password,
            "charset": self.charset,
            "connect_timeout": self.connect_timeout,
            "autocommit": True,
            "init_command": SESSION_INIT,
        }
        if self.database:
            kw["database"] = self.database
        if self.ssl:
            kw["ssl"] = self.ssl
        return kw

    def replication_kwargs(self) -> dict[str, Any]:
        """``connection_settings`` for python-mysql-replication's ``BinLogStreamReader``."""
        kw = self.pymysql_kwargs()
        kw.pop("autocommit", None)
        kw.pop("database", None)
        kw.pop("init_command", None)
        return kw

    def describe(self) -> str:
        """Safe to print: no password."""
        name = f"{self.conn_id} " if self.conn_id else ""
        return f"{name}({self.user}@{self.host}:{self.port})"
