"""Fail fast, with every problem at once: is this server and this user a usable CDC source?

Checks, each with a message that says what to change:

* binary log enabled; ``binlog_format=ROW``; ``binlog_row_image=FULL``;
* ``binlog_row_metadata=FULL`` where the server has it (MariaDB 10.5+, MySQL 8.0.1+): without it the binlog
  has no column names and rows cannot be matched to columns after a schema change;
* no compressed or partial row events (MariaDB ``log_bin_compress``, MySQL ``binlog_transaction_compression``
  and ``binlog_row_value_options=PARTIAL_JSON``): their rows cannot be decoded;
* privileges: REPLICATION SLAVE (binlog dump), REPLICATION CLIENT / BINLOG MONITOR (watermarks), SELECT on
  every captured table;
* tables: exist, have a primary key or a configured chunk key, chunk key columns exist and are NOT NULL.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import pymysql

from airflow_cdc_provider.core.chunks import TableId
from airflow_cdc_provider.source.schema import TableConfigError, TableSchema, discover, load_schema
from airflow_cdc_provider.source.server import ServerInfo, SourceError, server_info, variables
from airflow_cdc_provider.source.sql import display_table, quote_table

ER_ACCESS_DENIED_CODES = {1044, 1045, 1142, 1143, 1227}


class SourceValidationError(SourceError):
    def __init__(self, problems: Sequence[str], source: str = "source") -> None:
        self.problems = list(problems)
        lines = "\n".join(f"  - {p}" for p in self.problems)
        super().__init__(f"{source} is not usable for CDC ({len(self.problems)} problem(s)):\n{lines}")


@dataclass
class ValidationResult:
    info: ServerInfo
    schemas: list[TableSchema] = field(default_factory=list)


def check_binlog_settings(conn: Any, info: ServerInfo) -> list[str]:
    names = ["log_bin", "binlog_format", "binlog_row_image"]
    if info.supports_row_metadata:
        names.append("binlog_row_metadata")
    undecodable = ({"log_bin_compress": "OFF"} if info.is_mariadb else  # the server has what it knows
                   {"binlog_transaction_compression": "OFF", "binlog_row_value_options": "''"})
    names += list(undecodable)
    v = {k: str(val).upper() for k, val in variables(conn, *names).items()}
    problems: list[str] = []
    if v.get("log_bin") not in ("ON", "1"):
        problems.append(
            "binary logging is disabled (log_bin=OFF): restart the server with --log-bin "
            "--binlog-format=ROW --binlog-row-image=FULL --binlog-row-metadata=FULL"
        )
        return problems
    if v.get("binlog_format") != "ROW":
        problems.append(
            f"binlog_format is {v.get('binlog_format')}, must be ROW: run SET GLOBAL binlog_format='ROW' and "
            "set binlog_format=ROW in the server config (existing sessions keep the old format until they reconnect)"
        )
    if v.get("binlog_row_image") != "FULL":
        problems.append(
            f"binlog_row_image is {v.get('binlog_row_image')}, must be FULL: run SET GLOBAL binlog_row_image='FULL' "
            "and set it in the server config"
        )
    if info.supports_row_metadata and v.get("binlog_row_metadata") != "FULL":
        problems.append(
            f"binlog_row_metadata is {v.get('binlog_row_metadata')}, must be FULL so the binlog names the columns: "
            "run SET GLOBAL binlog_row_metadata='FULL' and set it in the server config"
        )
    for name, off in undecodable.items():
        if v.get(name) not in (None, "", "OFF", "0"):
            problems.append(
                f"{name} is {v[name]}: the binlog then holds compressed or partial row events, whose rows cannot "
                f"be decoded: run SET GLOBAL {name}={off} and set it in the server config (re-snapshot the tables "
                "if it was on while they changed)"
            )
    return problems


_GRANT_RE = re.compile(r"^GRANT (?P<privs>.+?) ON (?P<on>\S+) TO ", re.IGNORECASE)


def global_privileges(conn: Any) -> tuple[str, set[str]]:
    """The current user and its privileges granted ON *.* (directly, as SHOW GRANTS lists them)."""
    with conn.cursor() as cur:
        cur.execute("SELECT CURRENT_USER()")
        user = cur.fetchone()[0]
        cur.execute("SHOW GRANTS")
        privs: set[str] = set()
        for (line,) in cur.fetchall():
            m = _GRANT_RE.match(line)
            if m and m.group("on") == "*.*":
                privs |= {p.strip().upper() for p in m.group("privs").split(",")}
    return user, privs


def check_privileges(conn: Any, info: ServerInfo) -> list[str]:
    user, privs = global_privileges(conn)
    if "ALL PRIVILEGES" in privs:
        return []
    quoted_user = "'{}'@'{}'".format(*user.split("@", 1)) if "@" in user else user
    problems: list[str] = []
    if not privs & {"REPLICATION SLAVE", "REPLICATION REPLICA"}:
        problems.append(
            f"user {user} lacks REPLICATION SLAVE (needed to read the binlog): "
            f"GRANT REPLICATION SLAVE ON *.* TO {quoted_user}"
        )
    if not privs & {"REPLICATION CLIENT", "BINLOG MONITOR", "SUPER"}:
        problems.append(
            f"user {user} lacks REPLICATION CLIENT (needed to read binlog positions): "
            f"GRANT REPLICATION CLIENT ON *.* TO {quoted_user}"
        )
    return problems


def check_table_access(conn: Any, schema: TableSchema) -> list[str]:
    try:
        with conn.cursor() as cur:
            cur.execute(f"SELECT 1 FROM {quote_table(schema.table)} LIMIT 0", ())
            cur.fetchall()
    except pymysql.err.MySQLError as exc:
        code = exc.args[0] if exc.args else None
        if code in ER_ACCESS_DENIED_CODES:
            return [
                f"no SELECT privilege on table {str(schema.table)!r}: "
                f"GRANT SELECT ON {display_table(schema.table)} TO <user>"
            ]
        return [f"cannot read table {str(schema.table)!r}: {exc}"]
    return []


def check_chunk_key(schema: TableSchema) -> list[str]:
    nullable = [c.name for c in schema.key if c.nullable]
    if nullable:
        return [
            f"chunk key column {nullable[0]!r} of table {str(schema.table)!r} is nullable: rows with NULL keys "
            "would belong to no chunk; choose a NOT NULL column as source.chunk_key for this table"
        ]
    return []


def validate_source(
    conn: Any,
    table_patterns: Sequence[str],
    chunk_keys: Mapping[str, Any] | None = None,
    source: str = "source",
) -> ValidationResult:
    """Run every check; raise ``SourceValidationError`` listing all problems, or return the table schemas."""
    chunk_keys = chunk_keys or {}
    info = server_info(conn)
    problems = check_binlog_settings(conn, info) + check_privileges(conn, info)
    schemas: list[TableSchema] = []
    tables: list[TableId] = []
    for pattern in table_patterns:  # one pattern at a time, so one typo does not hide the other problems
        try:
            tables += [t for t in discover(conn, [pattern]) if t not in tables]
        except TableConfigError as exc:
            problems.append(str(exc))
    for table in tables:
        try:
            schema = load_schema(conn, table, chunk_keys.get(str(table)))
        except TableConfigError as exc:
            problems.append(str(exc))
            continue
        table_problems = check_table_access(conn, schema) + check_chunk_key(schema)
        problems += table_problems
        if not table_problems:
            schemas.append(schema)
    unused = set(chunk_keys) - {str(t) for t in tables}
    for name in sorted(unused):
        problems.append(f"source.chunk_key names table {name!r}, which is not among the captured tables")
    if problems:
        raise SourceValidationError(problems, source)
    return ValidationResult(info, schemas)
