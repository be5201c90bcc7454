"""Every validation error, provoked on a real server, with its actionable message."""

from __future__ import annotations

import contextlib

import pymysql
import pytest

from airflow_cdc_provider.source.settings import ConnectionSettings
from airflow_cdc_provider.source.validation import SourceValidationError, validate_source
from airflow_cdc_provider.testing.mariadb import PrivateMariaDB


def validate(settings, tables, chunk_keys=None):
    with contextlib.closing(pymysql.connect(**settings.pymysql_kwargs())) as conn:
        return validate_source(conn, tables, chunk_keys)


def problems(settings, tables, chunk_keys=None):
    with pytest.raises(SourceValidationError) as exc:
        validate(settings, tables, chunk_keys)
    return exc.value.problems


@contextlib.contextmanager
def global_setting(server, name, value):
    with contextlib.closing(server.root_connection()) as c, c.cursor() as cur:
        cur.execute(f"SELECT @@GLOBAL.{name}")
        old = cur.fetchone()[0]
        cur.execute(f"SET GLOBAL {name} = %s", (value,))
        try:
            yield
        finally:
            cur.execute(f"SET GLOBAL {name} = %s", (old,))


@contextlib.contextmanager
def temporary_user(server, name, grants):
    """A user with only ``grants`` ON *.*, for both host forms; its connection settings are yielded."""
    with contextlib.closing(server.root_connection()) as c, c.cursor() as cur:
        for host in ("localhost", "127.0.0.1"):
            cur.execute(f"CREATE USER '{name}'@'{host}' IDENTIFIED BY 'pw-{name}'")
            cur.execute(f"GRANT {grants} ON *.* TO '{name}'@'{host}'")
    try:
        yield ConnectionSettings.from_airflow_conn(f"mysql://{name}:pw-{name}@127.0.0.1:{server.port}")
    finally:
        with contextlib.closing(server.root_connection()) as c, c.cursor() as cur:
            cur.execute(f"DROP USER '{name}'@'localhost', '{name}'@'127.0.0.1'")


@pytest.fixture
def table_t(source_db):
    source_db.execute("CREATE TABLE t (id INT PRIMARY KEY, v INT)")
    return source_db.table("t")


def test_a_good_source_passes_and_returns_schemas(source_db, table_t):
    result = validate(source_db.settings, [table_t])
    assert result.info.is_mariadb and [str(s.table) for s in result.schemas] == [table_t]


@pytest.mark.parametrize(
    "name, value, expected",
    [
        ("binlog_format", "STATEMENT", "binlog_format is STATEMENT, must be ROW: run SET GLOBAL binlog_format='ROW'"),
        ("binlog_format", "MIXED", "binlog_format is MIXED, must be ROW"),
        ("binlog_row_image", "MINIMAL", "binlog_row_image is MINIMAL, must be FULL: run SET GLOBAL binlog_row_image='FULL'"),
        ("binlog_row_metadata", "MINIMAL", "binlog_row_metadata is MINIMAL, must be FULL so the binlog names the columns"),
        ("binlog_row_metadata", "NO_LOG", "binlog_row_metadata is NO_LOG, must be FULL"),
        ("log_bin_compress", "ON", "log_bin_compress is ON: the binlog then holds compressed or partial row "
         "events, whose rows cannot be decoded: run SET GLOBAL log_bin_compress=OFF"),
    ],
)
def test_binlog_settings(mariadb, source_db, table_t, name, value, expected):
    with global_setting(mariadb, name, value):
        found = problems(source_db.settings, [table_t])
    assert len(found) == 1 and found[0].startswith(expected), found


def test_binlog_disabled():
    with PrivateMariaDB(extra_args=["--skip-log-bin"]) as server:
        server.create_database("d")
        with contextlib.closing(server.app_connection("d")) as c, c.cursor() as cur:
            cur.execute("CREATE TABLE t (id INT PRIMARY KEY)")
        settings = ConnectionSettings.from_airflow_conn(server.connection_uri())
        found = problems(settings, ["d.t"])
    assert found == [
        "binary logging is disabled (log_bin=OFF): restart the server with --log-bin --binlog-format=ROW "
        "--binlog-row-image=FULL --binlog-row-metadata=FULL"
    ]


def test_missing_replication_privileges(mariadb, source_db, table_t):
    with temporary_user(mariadb, "weak", "SELECT") as weak:
        found = problems(weak, [table_t])
    assert found == [
        "user weak@localhost lacks REPLICATION SLAVE (needed to read the binlog): "
        "GRANT REPLICATION SLAVE ON *.* TO 'weak'@'localhost'",
        "user weak@localhost lacks REPLICATION CLIENT (needed to read binlog positions): "
        "GRANT REPLICATION CLIENT ON *.* TO 'weak'@'localhost'",
    ]


def test_table_the_user_cannot_see(mariadb, source_db, table_t):
    with temporary_user(mariadb, "blind", "REPLICATION SLAVE, REPLICATION CLIENT") as blind:
        found = problems(blind, [table_t])
    assert len(found) == 1 and "does not exist or the user cannot see it" in found[0]


def test_unknown_table_suggests_the_close_name(source_db, table_t):
    found = problems(source_db.settings, [source_db.table("tt")])
    assert found == [f"unknown table '{source_db.table('tt')}' (did you mean '{table_t}'?); check source.tables"]


def test_unknown_database(source_db, table_t):
    found = problems(source_db.settings, ["nosuchdb.t"])
    assert found[0].startswith("unknown table 'nosuchdb.t': database 'nosuchdb' does not exist or the user cannot see it")


def test_pattern_matching_nothing(source_db, table_t):
    found = problems(source_db.settings, [f"{source_db.name}.zz*"])
    assert found == [f"table pattern '{source_db.name}.zz*' matches no table on the source"]


def test_globs_and_regexes_discover_tables(source_db):
    for name in ("orders_1", "orders_2", "orders_x", "users"):
        source_db.execute(f"CREATE TABLE {name} (id INT PRIMARY KEY)")
    result = validate(source_db.settings, [f"{source_db.name}.orders_?", f"re:{source_db.name}\\.users"])
    assert [s.table.table for s in result.schemas] == ["orders_1", "orders_2", "orders_x", "users"]
    result = validate(source_db.settings, [f"re:{source_db.name}\\.orders_\\d+"])
    assert [s.table.table for s in result.schemas] == ["orders_1", "orders_2"]


def test_table_without_primary_key(source_db):
    source_db.execute("CREATE TABLE log (event_id BIGINT NOT NULL, msg TEXT, n INT)")
    name = source_db.table("log")
    assert problems(source_db.settings, [name]) == [
        f"table '{name}' has no primary key: set a chunk key column for it "
        f"(source.chunk_key: {{{name}: <column>}}) or add a primary key"
    ]
    result = validate(source_db.settings, [name], {name: "event_id"})
    assert result.schemas[0].key_columns == ("event_id",)


def test_chunk_key_column_missing(source_db, table_t):
    assert problems(source_db.settings, [table_t], {table_t: "nope"}) == [
        f"chunk key column 'nope' does not exist in table '{table_t}'; its columns are id, v"
    ]


def test_nullable_chunk_key(source_db):
    source_db.execute("CREATE TABLE log (msg TEXT, n INT)")
    name = source_db.table("log")
    found = problems(source_db.settings, [name], {name: "n"})
    assert found == [
        f"chunk key column 'n' of table '{name}' is nullable: rows with NULL keys would belong to no chunk; "
        "choose a NOT NULL column as source.chunk_key for this table"
    ]


def test_every_problem_is_reported_at_once(mariadb, source_db, table_t):
    source_db.execute("CREATE TABLE nokey (v INT)")
    with global_setting(mariadb, "binlog_row_image", "MINIMAL"):
        found = problems(source_db.settings, [table_t, source_db.table("nokey"), source_db.table("missing")],
                         {source_db.table("other"): "id"})
    assert len(found) == 4
    assert found[0].startswith("binlog_row_image is MINIMAL")
    assert found[1].startswith("unknown table")
    assert found[2].startswith(f"table '{source_db.table('nokey')}' has no primary key")
    assert found[3] == f"source.chunk_key names table '{source_db.table('other')}', which is not among the captured tables"
