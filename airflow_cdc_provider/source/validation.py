"""Fail fast, with every problem at once: is this server and this user a usable CDC source?

Checks, each with a message that says what to change:

* binary log enabled; ``binlog_format=ROW``; ``binlog_row_image=FULL``;
* ``binlog_row_metadata=FULL`` where the server has it (MariaDB 10.5+, MySQL 8.0.1+): without it the binlog
  has no column names and rows cannot be matched to columns after a schema change;
* no compressed or partial row events (MariaDB ``log_bin_compress``, MySQL ``binlog_transaction_compression``
  and ``binlog_row_value_options=PARTIAL_JSON``): their rows cannot be decoded;
* privileges: REPLICATION SLAVE (binlog dump), REPLICATION CLIENT / BINLOG MONITOR (watermarks), ``XA RECOVER``
  (a chunk read waits for prepared XA transactions; MySQL 8 asks XA_RECOVER_ADMIN), SELECT on every captured
  table;
* tables: exist, are not system-versioned, have a primary key or a configured chunk key, chunk key columns exist
  and are NOT NULL, and a UNIQUE index (or the primary key) covers the chunk key: every sink keys rows by it, so
  rows with equal keys would overwrite each other;
* foreign keys: none with ON DELETE/UPDATE CASCADE or SET NULL, whose changes are not in the binlog;
* per-table settings (``source.chunk_key``, ``stream.schema_changes_per_table``) name captured tables: a typo
  there would silently leave the table with the default;
* columns: every one has a sink type (``sinks/types.py``: VECTOR, MySQL's binary JSON and unknown types have
  none), and the binlog decoders read it as SELECT does: not COMPRESSED, a character set with an exact codec
  (``values.CHARSET_CODECS``) and a collation the binlog library knows, ENUM/SET members that are the same in
  the column's character set as in UTF-8 (the library reads them as UTF-8); no VIRTUAL generated column whose
  value depends on the session computing it (``generated_columns``): the binlog has the writer's value.

A column that cannot be captured correctly is refused here, naming table, column and fix, never inside a Spark
task.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Collection, Mapping, Sequence

import pymysql

from airflow_cdc_provider.compat import replication
from airflow_cdc_provider.core.chunks import TableId
from airflow_cdc_provider.core.records import null_key_message
from airflow_cdc_provider.sinks.types import UnsupportedColumnType, sink_type
from airflow_cdc_provider.source.ddl import ROW_CHANGING_ACTION, ROW_LOGGING_ENGINES
from airflow_cdc_provider.source.generated_columns import session_dependence
from airflow_cdc_provider.source.schema import (
    Column,
    TableConfigError,
    TableSchema,
    compile_pattern,
    discover,
    enum_values,
    is_exact,
    list_tables,
    load_schema,
    table_engine,
)
from airflow_cdc_provider.source.key_order import pads_spaces
from airflow_cdc_provider.source.server import ServerInfo, SourceError, prepared_xa_transactions, server_info, variables
from airflow_cdc_provider.source.sql import display_table, quote_ident, quote_table, unquote_ident
from airflow_cdc_provider.source.values import CHARSET_CODECS, UNSUPPORTED_CHARSET, string_codec

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
    gone: list[str] = field(default_factory=list)  # tables the pipeline captured that the source no longer has


def check_binlog_settings(conn: Any, info: ServerInfo) -> list[str]:
    names = ["log_bin", "binlog_format", "binlog_row_image"]
    if info.supports_row_metadata:
        names.append("binlog_row_metadata")
    undecodable = ({"log_bin_compress": "OFF"} if info.is_mariadb else  # the server has what it knows
                   {"binlog_transaction_compression": "OFF", "binlog_row_value_options": "''"})
    names += list(undecodable) + ["lower_case_table_names"]
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
    if v.get("lower_case_table_names", "0") != "0":
        problems.append(
            f"lower_case_table_names is {v.get('lower_case_table_names')}: statements may name a captured table in "
            "another case than the binlog's row events do, so a TRUNCATE or DROP of it could go unnoticed; "
            "capture from a server with lower_case_table_names=0 (the Linux default)"
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
    try:
        prepared_xa_transactions(conn)
    except pymysql.MySQLError as e:
        problems.append(f"user {user} cannot run XA RECOVER ({e.args[-1]}; a chunk read waits for the XA "
                        f"transactions it lists): GRANT XA_RECOVER_ADMIN ON *.* TO {quoted_user}")
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


# a foreign key in SHOW CREATE TABLE, whose actions the server takes inside the storage engine, without row events
_SHOWN_NAME = r'(?:`(?:[^`]|``)+`|"(?:[^"]|"")+"|[^\s(.]+)'  # as SHOW CREATE TABLE quotes it, under any sql_mode
_FOREIGN_KEY_LINE = re.compile(
    rf"^\s*CONSTRAINT\s+(?P<name>{_SHOWN_NAME})\s+FOREIGN KEY\s*\(.*?\)\s*REFERENCES\s+"
    rf"(?P<parent>{_SHOWN_NAME}(?:\.{_SHOWN_NAME})?)\s*\(.*?\)(?P<actions>[^\n]*)$", re.M)


def check_foreign_key_actions(conn: Any, table: TableId) -> list[str]:
    """A foreign key of the table with ON DELETE/UPDATE CASCADE or SET NULL changes the table's rows when its
    parent's rows change, and InnoDB logs no row event for that: the sink would keep rows the source deleted or
    changed. Refused, naming the constraint and the fix. Read from SHOW CREATE TABLE, which SELECT allows
    (information_schema.REFERENTIAL_CONSTRAINTS shows a user with SELECT only nothing)."""
    try:
        with conn.cursor() as cur:
            cur.execute(f"SHOW CREATE TABLE {quote_table(table)}", ())
            row = cur.fetchone()
    except pymysql.err.MySQLError as exc:
        return [f"cannot read the definition of table {str(table)!r} (SHOW CREATE TABLE): {exc}"]
    problems = []
    for m in _FOREIGN_KEY_LINE.finditer(row[1] if row else ""):
        rules = [f"ON {what} {rule}" for what, rule in ROW_CHANGING_ACTION.findall(m.group("actions"))]
        if not rules:
            continue
        name = unquote_ident(m.group("name"))
        parent = ".".join(unquote_ident(p) for p in re.findall(_SHOWN_NAME, m.group("parent")))
        problems.append(
            f"table {str(table)!r}: foreign key {name} (to {parent}) has {' and '.join(rules)}, whose "
            "changes to its rows the server does not write to the binlog, so the sink would keep rows the source "
            f"deleted or changed: make it RESTRICT (ALTER TABLE {display_table(table)} DROP FOREIGN KEY "
            f"`{name.replace('`', '``')}`, ADD CONSTRAINT ... ON DELETE RESTRICT ON UPDATE RESTRICT) and change the "
            "rows in the application, or leave the table out of source.tables")
    return problems


def check_storage_engine(conn: Any, table: TableId) -> list[str]:
    """A table of an engine whose rows change without row events of the table in this server's binlog (BLACKHOLE
    keeps none, MERGE shows other tables' rows, FEDERATED, CONNECT and SPIDER another server's, ColumnStore's bulk
    loads bypass the binlog): the sink would miss changes. Refused, naming the engine and the fix."""
    engine = table_engine(conn, table)
    if engine is None or engine.upper() in ROW_LOGGING_ENGINES:
        return []
    return [f"table {str(table)!r} uses the {engine} storage engine, whose rows change without row events of the "
            f"table in this server's binlog, so the sink would miss changes: capture the table where its rows are "
            f"written, or move it to InnoDB (ALTER TABLE {display_table(table)} ENGINE=InnoDB), or leave it out of "
            "source.tables"]


# Types whose order in the server is not the order of their canonical value, which chunk lookups compare: INET4,
# INET6 and UUID order by their binary form (UUID with swapped segments), SET by its bit mask. ENUM orders by its
# member's index, but compares with a string as text: see ``check_enum_key_order``.
UNORDERED_KEY_TYPES = {"inet4", "inet6", "uuid", "set"}
_COLLATION_NAME = re.compile(r"\w+")


def _unusable_key_type(col) -> str | None:
    """Why a chunk key column of this type would put rows in the wrong chunk, if it would."""
    if col.data_type in UNORDERED_KEY_TYPES:
        return ("which the server orders otherwise than its value's text (by its binary form or bit mask), while "
                "chunks are looked up by that text")
    if col.data_type == "bit":
        return "whose range scans compare it with the chunks' bounds as binary strings, which miss rows"
    if col.data_type == "float":
        return ("which a SELECT prints to 6 significant digits while the binlog holds its exact value, so a row and "
                "its later changes would have different keys")
    return None


def _key_type_problem(table: TableId, col, why: str) -> str:
    return (f"chunk key column {col.name!r} of table {str(table)!r} has type {col.column_type}"
            f"{' COLLATE ' + col.collation if col.data_type == 'char' and col.collation else ''}, {why}: set "
            "source.chunk_key to a unique NOT NULL key of other types for this table, or leave the table out of "
            "source.tables")


def check_char_key_padding(conn: Any, schema: TableSchema) -> list[str]:
    """A CHAR chunk key column stores its values padded with spaces, which a SELECT strips; under a collation that
    does not pad (NO PAD) the server compares the stored values, so chunks would be looked up by other values than
    the server's. Whether the collation pads is asked of the server (``pads_spaces``)."""
    return [_key_type_problem(schema.table, col, "whose values the table stores padded with spaces, which a NO PAD "
                              "collation compares and a SELECT strips, so chunks would be looked up by other values "
                              "than the server's")
            for col in schema.key if col.data_type == "char" and col.collation
            and _COLLATION_NAME.fullmatch(col.collation) and not pads_spaces(conn, col)]


def check_zero_date_keys(conn: Any, schema: TableSchema) -> list[str]:
    """A NOT NULL date key column holding a zero date or year 0 reads as NULL (``null_key_message``): the snapshot
    task would stop at that row. Found here, before a run starts, where an index leads with the column (the
    primary key's first column), so the probe is an index range read: the values that sort before year 1 (a
    TIMESTAMP: its zero). Invalid days and zero months or days inside a date (``2024-02-30``, ``2024-00-10``) sort
    among valid dates: they are found by the snapshot task."""
    dated = [c for c in schema.key if c.data_type in ("date", "datetime", "timestamp") and not c.nullable]
    if not dated:
        return []
    with conn.cursor() as cur:
        cur.execute("SELECT DISTINCT COLUMN_NAME FROM information_schema.STATISTICS WHERE TABLE_SCHEMA = %s "
                    "AND TABLE_NAME = %s AND SEQ_IN_INDEX = 1", (schema.table.database, schema.table.table))
        leading = {r[0] for r in cur.fetchall()}
        problems = []
        for col in dated:
            if col.name not in leading:
                continue
            zero = "= '0000-00-00 00:00:00'" if col.data_type == "timestamp" else "< '0001-01-01'"
            cur.execute(f"SELECT 1 FROM {quote_table(schema.table)} WHERE {quote_ident(col.name)} {zero} LIMIT 1", ())
            if cur.fetchone():
                problems.append(null_key_message(schema.table, [col.name], "it holds a row (a zero date or year 0)"))
    return problems


def check_enum_key_order(conn: Any, schema: TableSchema) -> list[str]:
    """An ENUM chunk key column sorts by member index, while a chunk's range compares it with its bounds as text:
    the two agree only when the members are declared in the order their collation sorts them. Asked of the
    server, in the column's character set and collation."""
    problems = []
    for col in schema.key:
        if col.data_type != "enum" or not col.collation or not _COLLATION_NAME.fullmatch(col.collation):
            continue
        members = enum_values(col.column_type)
        rows = " UNION ALL ".join(["SELECT %s AS m, %s AS i"] * len(members))
        with conn.cursor() as cur:
            cur.execute(f"SELECT i FROM ({rows}) x ORDER BY CONVERT(m USING {col.charset}) COLLATE {col.collation}, i",
                        [v for i, m in enumerate(members) for v in (m, i)])
            order = [int(r[0]) for r in cur.fetchall()]
        if order != list(range(len(members))):
            problems.append(
                f"chunk key column {col.name!r} of table {str(schema.table)!r} is {col.column_type}, whose members "
                f"are not declared in the order {col.collation} sorts them: the server orders the column by member, "
                "while chunks are looked up by the text. Set source.chunk_key to a unique NOT NULL key of other "
                "types for this table, declare the members in sorted order, or leave the table out of "
                "source.tables")
    return problems


@dataclass(frozen=True)
class UniqueKey:
    """A UNIQUE index (or the primary key) of a table."""

    index: str
    columns: tuple[str, ...]

    def describe(self) -> str:
        cols = self.columns[0] if len(self.columns) == 1 else f"[{', '.join(self.columns)}]"
        return f"{cols} (index {self.index})"


def unique_keys(conn: Any, table: TableId) -> list[UniqueKey]:
    """The table's unique indexes, primary key first (``information_schema.STATISTICS``, NON_UNIQUE = 0)."""
    with conn.cursor() as cur:
        cur.execute(
            "SELECT INDEX_NAME, COLUMN_NAME FROM information_schema.STATISTICS WHERE TABLE_SCHEMA = %s "
            "AND TABLE_NAME = %s AND NON_UNIQUE = 0 ORDER BY INDEX_NAME <> 'PRIMARY', INDEX_NAME, SEQ_IN_INDEX",
            (table.database, table.table),
        )
        indexes: dict[str, list[str]] = {}
        for index, column in cur.fetchall():
            indexes.setdefault(index, []).append(column)
    return [UniqueKey(i, tuple(c)) for i, c in indexes.items()]


def check_chunk_key(schema: TableSchema, keys: Sequence[UniqueKey] | None = None) -> list[str]:
    """NOT NULL, and unique: a unique index whose columns are all chunk key columns covers it (the NOT NULL key
    columns make it unique even where the index allows NULLs). ``keys``: the table's unique keys (None: only
    NOT NULL is checked)."""
    table = str(schema.table)
    problems = []
    nullable = [c.name for c in schema.key if c.nullable]
    if nullable:
        problems.append(
            f"chunk key column {nullable[0]!r} of table {table!r} is nullable: rows with NULL keys "
            "would belong to no chunk; choose a NOT NULL column as source.chunk_key for this table"
        )
    for col in schema.key:
        why = _unusable_key_type(col)
        if why:
            problems.append(_key_type_problem(schema.table, col, why))
    if keys is None or any(set(k.columns) <= set(schema.key_columns) for k in keys):
        return problems
    key = schema.key_columns
    what = f"chunk key column {key[0]!r}" if len(key) == 1 else f"chunk key ({', '.join(key)})"
    not_null = {c.name for c in schema.columns if not c.nullable}
    candidates = [k for k in keys if set(k.columns) <= not_null]
    problem = (f"{what} of table {table!r} is not unique (no UNIQUE index or primary key covers it): every sink keys "
               "rows by the chunk key, so rows with equal keys would overwrite each other; ")
    if candidates:
        problem += ("choose one of the table's unique NOT NULL keys as source.chunk_key for this table: "
                    + ", ".join(k.describe() for k in candidates))
    else:
        problem += ("the table has no unique NOT NULL key, so it cannot be captured yet: add a primary key or a "
                    "unique NOT NULL key (or leave the table out of source.tables)")
    problems.append(problem)
    return problems


def check_columns(schema: TableSchema, info: ServerInfo) -> list[str]:
    """Every column has a sink type and is decoded from the binlog as SELECT gives it."""
    table = str(schema.table)
    problems = []
    for col in schema.columns:
        try:
            sink_type(col)
        except UnsupportedColumnType as exc:
            problems.append(exc.for_table(table))
            continue
        problem = _decoding_problem(schema.table, col, info)
        if problem:
            problems.append(f"column {col.name!r} of table {table!r} {problem}")
    return problems


def _decoding_problem(table: TableId, col: Column, info: ServerInfo) -> str | None:
    modify = f"ALTER TABLE {display_table(table)} MODIFY `{col.name.replace('`', '``')}`"
    leave_out = "or leave the table out of source.tables"
    if col.column_type.lower() == "year(2)":
        return (f"is YEAR(2), which a SELECT gives as two digits (00 for 2000) and the binlog as the whole year: "
                f"make it YEAR ({modify} YEAR), {leave_out}")
    if col.compressed:
        return (f"is COMPRESSED ({col.column_type}): MariaDB writes compressed columns to the binlog in a form the "
                f"binlog reader cannot parse; redefine the column without COMPRESSED ({modify} ...), {leave_out}")
    if not col.charset:
        return None
    codec = string_codec(col.charset)
    to_utf8mb4 = f"convert the column to utf8mb4 ({modify} {col.column_type} CHARACTER SET utf8mb4 ...), {leave_out}"
    if codec is UNSUPPORTED_CHARSET:
        return (f"has character set {col.charset}, whose characters the binlog reader cannot decode exactly as the "
                f"server converts them: {to_utf8mb4}; character sets that can be captured: "
                f"{', '.join(sorted(CHARSET_CODECS))}")
    if col.collation and codec != "utf-8" and not replication.library_knows_collation(col.collation, info.is_mariadb):
        return (f"has collation {col.collation}, which the binlog reader (python-mysql-replication) does not know and "
                f"would decode as UTF-8: give the column another collation of {col.charset} ({modify} ... COLLATE "
                f"{col.charset}_general_ci), or {to_utf8mb4}")
    if col.data_type in ("enum", "set") and codec != "utf-8":
        for member in enum_values(col.column_type):
            if member.encode(codec or "utf-8") != member.encode("utf-8"):
                return (f"is {col.data_type.upper()} in character set {col.charset} with the member {member!r}, which "
                        "the binlog names otherwise than the server does (the binlog reader reads members as UTF-8): "
                        f"{to_utf8mb4}")
    return None


def check_generated_columns(conn: Any, schema: TableSchema) -> list[str]:
    """No VIRTUAL column whose value depends on the session (``generated_columns.session_dependence``): a
    snapshot's SELECT computes it in the reading session, the binlog holds the writing session's value."""
    with conn.cursor() as cur:
        cur.execute("SELECT COLUMN_NAME, GENERATION_EXPRESSION FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = %s "
                    "AND TABLE_NAME = %s AND EXTRA LIKE %s ORDER BY ORDINAL_POSITION",
                    (schema.table.database, schema.table.table, "%VIRTUAL%"))
        virtual = cur.fetchall()
    problems = []
    for name, expression in virtual:
        why = session_dependence(expression or "", schema.columns,
                                 next((c for c in schema.columns if c.name == name), None))
        if why is None:
            continue
        problems.append(
            f"column {name!r} of table {str(schema.table)!r} is VIRTUAL AS ({expression}), whose value depends on "
            f"{why}: a snapshot's SELECT computes it in the reading session while the binlog holds the value the "
            "writing session computed, so the sink would mix the two: compute it downstream from the captured "
            f"columns and drop it (ALTER TABLE {display_table(schema.table)} DROP COLUMN `{name.replace('`', '``')}`), "
            "make it STORED (computed once, when the row is written; the server refuses that where it knows the "
            "value depends on the session), or leave the table out of source.tables")
    return problems


def check_table_keys(keys: Collection[str], setting: str, captured: Sequence[str]) -> list[str]:
    """The keys of a per-table setting, table patterns as in ``source.tables``, that name or match none of the
    ``captured`` tables: a typo would leave the table with the default without a word."""
    from airflow_cdc_provider.core.hints import did_you_mean

    problems = []
    for key in keys:
        if is_exact(key):
            if key in captured:
                continue
            problem = f"names table {key!r}, which is not among the captured tables"
        else:
            rx = compile_pattern(key)
            if any(rx.fullmatch(t) for t in captured):
                continue
            problem = f"pattern {key!r} matches none of the captured tables"
        problems.append(f"{setting}[{key!r}]: {problem}{did_you_mean(key, captured)}; check source.tables")
    return problems


def validate_source(
    conn: Any,
    table_patterns: Sequence[str],
    chunk_keys: Mapping[str, Any] | None = None,
    source: str = "source",
    captured_before: Collection[str] = (),
    schema_changes_per_table: Mapping[str, Any] | None = None,
) -> ValidationResult:
    """Run every check; raise ``SourceValidationError`` listing all problems, or return the table schemas.
    A table named exactly that is missing is a problem unless the pipeline captured it before
    (``captured_before``): it was dropped or renamed, and is listed as ``gone``. ``schema_changes_per_table``:
    the pipeline's ``stream.schema_changes_per_table``, whose keys must each name or match a captured table."""
    chunk_keys = chunk_keys or {}
    info = server_info(conn)
    problems = check_binlog_settings(conn, info) + check_privileges(conn, info)
    schemas: list[TableSchema] = []
    tables: list[TableId] = []
    gone: list[str] = []
    existing = {str(t) for t in list_tables(conn)} if captured_before else set()
    discovered = True
    for pattern in table_patterns:  # one pattern at a time, so one typo does not hide the other problems
        if pattern in captured_before and pattern not in existing:
            gone.append(pattern)
            continue
        try:
            tables += [t for t in discover(conn, [pattern]) if t not in tables]
        except TableConfigError as exc:
            problems.append(str(exc))
            discovered = False
    if discovered:  # else the captured tables are not all known, and keys would be judged against some of them
        problems += check_table_keys(schema_changes_per_table or {}, "stream.schema_changes_per_table",
                                     [str(t) for t in tables] + gone)
    for table in tables:
        try:
            schema = load_schema(conn, table, chunk_keys.get(str(table)))
        except TableConfigError as exc:
            problems.append(str(exc))
            continue
        table_problems = (check_table_access(conn, schema) + check_chunk_key(schema, unique_keys(conn, table))
                          + check_columns(schema, info) + check_generated_columns(conn, schema)
                          + check_foreign_key_actions(conn, table) + check_storage_engine(conn, table)
                          + check_enum_key_order(conn, schema) + check_char_key_padding(conn, schema))
        if not table_problems:  # the key is one, and the table can be read
            table_problems = check_zero_date_keys(conn, schema)
        problems += table_problems
        if not table_problems:
            schemas.append(schema)
    unused = set(chunk_keys) - {str(t) for t in tables}
    for name in sorted(unused):
        problems.append(f"source.chunk_key names table {name!r}, which is not among the captured tables")
    if problems:
        raise SourceValidationError(problems, source)
    return ValidationResult(info, schemas, gone)
