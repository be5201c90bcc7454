"""What kind of server this is, and where its binlog is now.

MySQL 8.2+ renamed ``SHOW MASTER STATUS`` to ``SHOW BINARY LOG STATUS`` (8.4 removed the old name);
MariaDB and older MySQL only know ``SHOW MASTER STATUS``. The watermark is the first row's file and
position; the GTID position comes from ``@@gtid_binlog_pos`` on MariaDB and from the ``Executed_Gtid_Set``
column on MySQL.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from airflow_cdc_provider.core.offsets import BinlogOffset


class SourceError(RuntimeError):
    """Base class of source-side errors whose message tells the user what to change."""


@dataclass(frozen=True)
class ServerInfo:
    version: str
    is_mariadb: bool
    major: int
    minor: int
    patch: int

    @classmethod
    def from_version(cls, version: str) -> "ServerInfo":
        m = re.match(r"(\d+)\.(\d+)\.(\d+)", version)
        major, minor, patch = (int(x) for x in m.groups()) if m else (0, 0, 0)
        return cls(version, "mariadb" in version.lower(), major, minor, patch)

    @property
    def flavor(self) -> str:
        return "MariaDB" if self.is_mariadb else "MySQL"

    def at_least(self, major: int, minor: int = 0, patch: int = 0) -> bool:
        return (self.major, self.minor, self.patch) >= (major, minor, patch)

    @property
    def binlog_status_statement(self) -> str:
        if not self.is_mariadb and self.at_least(8, 2):
            return "SHOW BINARY LOG STATUS"
        return "SHOW MASTER STATUS"

    @property
    def supports_row_metadata(self) -> bool:
        """``binlog_row_metadata`` exists on MariaDB 10.5+ and MySQL 8.0.1+ (FULL names columns)."""
        return self.at_least(10, 5) if self.is_mariadb else self.at_least(8, 0, 1)


def server_info(conn: Any) -> ServerInfo:
    with conn.cursor() as cur:
        cur.execute("SELECT VERSION()")
        return ServerInfo.from_version(cur.fetchone()[0])


def variables(conn: Any, *names: str) -> dict[str, Any]:
    with conn.cursor() as cur:
        cur.execute("SHOW GLOBAL VARIABLES WHERE Variable_name IN (" + ", ".join(["%s"] * len(names)) + ")", names)
        return {str(k).lower(): v for k, v in cur.fetchall()}


def current_offset(conn: Any, info: ServerInfo | None = None) -> BinlogOffset:
    """The binlog position now: a transaction boundary (the low or high watermark of a chunk read)."""
    info = info or server_info(conn)
    with conn.cursor() as cur:
        cur.execute(info.binlog_status_statement)
        row = cur.fetchone()
        if row is None:
            raise SourceError(
                f"{info.binlog_status_statement} returned nothing: the binary log is disabled on this "
                f"{info.flavor} server; start it with --log-bin"
            )
        file, pos = row[0], int(row[1])
        gtid = None
        if info.is_mariadb:
            cur.execute("SELECT @@GLOBAL.gtid_binlog_pos")
            gtid = cur.fetchone()[0] or None
        elif len(row) >= 5:
            gtid = (row[4] or "").replace("\n", "") or None
    return BinlogOffset(file, pos, gtid)


def gtid_history(conn: Any, info: ServerInfo | None = None) -> str | None:
    """The GTIDs the server's binlog holds: MariaDB's ``@@gtid_binlog_state`` (the last GTID of every domain and
    server; ``@@gtid_binlog_pos`` has only the last one of each domain, whose sequence number may go down where
    ``gtid_strict_mode`` is off), MySQL's executed set."""
    info = info or server_info(conn)
    if not info.is_mariadb:
        return current_offset(conn, info).gtid
    with conn.cursor() as cur:
        cur.execute("SELECT @@GLOBAL.gtid_binlog_state")
        return cur.fetchone()[0] or None


def binlog_files(conn: Any) -> list[tuple[str, int]]:
    """``SHOW BINARY LOGS``: the files still on the server, oldest first, with their sizes."""
    with conn.cursor() as cur:
        cur.execute("SHOW BINARY LOGS")
        return [(r[0], int(r[1])) for r in cur.fetchall()]


XA_COMMIT_GRACE = 0.05  # seconds in which an XA COMMIT the server has taken off XA RECOVER's list reaches the binlog


def prepared_xa_transactions(conn: Any) -> list[str]:
    """``XA RECOVER``: the xids (``source.transactions.xid_of``) of the XA transactions prepared now, whose
    outcome is not logged yet."""
    from airflow_cdc_provider.source.transactions import xid_of

    with conn.cursor() as cur:
        cur.execute("XA RECOVER")
        out = []
        for format_id, gtrid_length, bqual_length, data in cur.fetchall():
            data = data if isinstance(data, (bytes, bytearray)) else str(data).encode("utf-8", "surrogateescape")
            gtrid_length, bqual_length = int(gtrid_length), int(bqual_length)
            out.append(xid_of(int(format_id), bytes(data[:gtrid_length]),
                              bytes(data[gtrid_length:gtrid_length + bqual_length])))
        return out
