"""Every validation error, provoked on a real server, with its actionable message."""

from __future__ import annotations

import contextlib
import dataclasses

import pymysql
import pytest

from airflow_cdc_provider.core.chunks import TableId
from airflow_cdc_provider.source.schema import load_schema
from airflow_cdc_provider.source.server import server_info
from airflow_cdc_provider.source.settings import ConnectionSettings
from airflow_cdc_provider.source.validation import SourceValidationError, check_columns, validate_source
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
    assert found == [f"unknown table '{source_db.table('tt')}' (did you mean '{table_t}'?): it does not exist, or the "
                     f"connection's user cannot see it (GRANT SELECT ON `{source_db.name}`.`tt` TO that user); check "
                     "source.tables"]


def test_a_table_the_user_may_not_select_is_named_with_the_grant(mariadb, source_db, table_t):
    """A user who may read one table of the database sees the others as missing: the message gives the grant."""
    source_db.execute("CREATE TABLE t2 (id INT PRIMARY KEY)")
    with temporary_user(mariadb, "partial", "REPLICATION SLAVE, REPLICATION CLIENT") as partial:
        with contextlib.closing(mariadb.root_connection()) as c, c.cursor() as cur:
            for host in ("localhost", "127.0.0.1"):
                cur.execute(f"GRANT SELECT ON `{source_db.name}`.`t2` TO 'partial'@'{host}'")
        found = problems(partial, [table_t, source_db.table("t2")])
    assert found == [f"unknown table '{table_t}' (did you mean '{source_db.table('t2')}'?): it does not exist, or the "
                     f"connection's user cannot see it (GRANT SELECT ON `{source_db.name}`.`t` TO that user); check "
                     "source.tables"]


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
    source_db.execute("CREATE TABLE log (event_id BIGINT NOT NULL, msg TEXT, n INT, UNIQUE KEY uq_event (event_id))")
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
    source_db.execute("CREATE TABLE log (msg TEXT, n INT, UNIQUE KEY uq_n (n))")
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


# -- chunk keys must be unique ---------------------------------------------------------------------------------
def test_non_unique_chunk_key_is_refused_with_the_unique_keys_it_could_use(source_db):
    """Every sink keys rows by the chunk key: a NOT NULL but non-unique one would keep one row of many."""
    source_db.execute("CREATE TABLE log (a INT NOT NULL, b INT NOT NULL, c INT, e VARCHAR(20) NOT NULL, "
                      "UNIQUE KEY uq_e (e), UNIQUE KEY uq_bc (b, c), UNIQUE KEY uq_ab (a, b))")
    name = source_db.table("log")
    unique_keys = "[a, b] (index uq_ab), e (index uq_e)"  # uq_bc has a nullable column: no candidate
    for key in ("a", ["b"], ["c", "b"]):
        shown = "(c, b)" if len(key) == 2 else "column 'a'" if key == "a" else "column 'b'"
        found = problems(source_db.settings, [name], {name: key})
        if key == ["c", "b"]:  # uq_bc covers it, but c is nullable
            assert found[0].startswith(f"chunk key column 'c' of table '{name}' is nullable") and len(found) == 1
            continue
        assert found == [
            f"chunk key {shown} of table '{name}' is not unique (no UNIQUE index or primary key covers it): every "
            "sink keys rows by the chunk key, so rows with equal keys would overwrite each other; choose one of the "
            f"table's unique NOT NULL keys as source.chunk_key for this table: {unique_keys}"
        ]


def test_composite_chunk_key_that_no_unique_index_covers_is_refused(source_db):
    """(a, b) is not unique when the unique index is (a, b, c): a unique index must lie within the chunk key."""
    source_db.execute("CREATE TABLE t3 (a INT NOT NULL, b INT NOT NULL, c INT NOT NULL, UNIQUE KEY uq_abc (a, b, c))")
    name = source_db.table("t3")
    assert problems(source_db.settings, [name], {name: ["a", "b"]}) == [
        f"chunk key (a, b) of table '{name}' is not unique (no UNIQUE index or primary key covers it): every sink "
        "keys rows by the chunk key, so rows with equal keys would overwrite each other; choose one of the table's "
        "unique NOT NULL keys as source.chunk_key for this table: [a, b, c] (index uq_abc)"
    ]


def test_chunk_key_of_a_table_without_unique_keys_says_it_cannot_be_captured_yet(source_db):
    source_db.execute("CREATE TABLE heap (a INT NOT NULL, b INT, UNIQUE KEY uq_b (b))")  # b may be NULL: no key
    name = source_db.table("heap")
    assert problems(source_db.settings, [name], {name: "a"}) == [
        f"chunk key column 'a' of table '{name}' is not unique (no UNIQUE index or primary key covers it): every "
        "sink keys rows by the chunk key, so rows with equal keys would overwrite each other; the table has no "
        "unique NOT NULL key, so it cannot be captured yet: add a primary key or a unique NOT NULL key (or leave "
        "the table out of source.tables)"
    ]


def test_chunk_keys_a_unique_index_or_the_primary_key_covers_are_accepted(source_db):
    source_db.execute("CREATE TABLE log (a INT NOT NULL, b INT NOT NULL, c INT, e VARCHAR(20) NOT NULL, "
                      "UNIQUE KEY uq_e (e(5)), UNIQUE KEY uq_ab (a, b))")
    source_db.execute("CREATE TABLE pk (id INT PRIMARY KEY, x INT NOT NULL)")
    log, pk = source_db.table("log"), source_db.table("pk")
    cases = [(log, "e"), (log, ["a", "b"]), (log, ["b", "a"]), (log, ["e", "a"]), (pk, ["x", "id"]), (pk, "id")]
    for table, key in cases:  # a prefix index (e(5)) is unique on whole values too; extra columns keep it unique
        result = validate(source_db.settings, [table], {table: key})
        assert result.schemas[0].key_columns == ((key,) if isinstance(key, str) else tuple(key)), (table, key)


@pytest.mark.parametrize("definition, shown, why", [
    ("BIT(16)", "bit(16)", "whose range scans compare it with the chunks' bounds as binary strings"),
    ("FLOAT", "float", "which a SELECT prints to 6 significant digits while the binlog holds its exact value"),
    ("CHAR(4) COLLATE utf8mb4_nopad_bin", "char(4) COLLATE utf8mb4_nopad_bin",
     "whose values the table stores padded with spaces, which a NO PAD collation compares"),
    ("CHAR(4) CHARACTER SET utf8mb4 COLLATE utf8mb4_uca1400_nopad_as_cs", "char(4) COLLATE utf8mb4_uca1400_nopad_as_cs",
     "whose values the table stores padded with spaces, which a NO PAD collation compares"),
])
def test_chunk_key_types_whose_rows_would_land_in_the_wrong_chunk_are_refused(source_db, definition, shown, why):
    """A BIT bound binds as a binary string the range scan misses rows by; a FLOAT's SELECT text is rounded; a
    NO PAD CHAR's stored padding is stripped by the SELECT (whether a collation pads is asked of the server): rows
    would be in no chunk, or in another one."""
    source_db.execute(f"CREATE TABLE k (k {definition} NOT NULL PRIMARY KEY, n INT NOT NULL UNIQUE)")
    name = source_db.table("k")
    found = problems(source_db.settings, [name])
    assert found == [f"chunk key column 'k' of table '{name}' has type {shown}, {why}" + found[0].split(why)[1]]
    assert found[0].endswith(": set source.chunk_key to a unique NOT NULL key of other types for this table, or "
                             "leave the table out of source.tables")
    assert validate(source_db.settings, [name], {name: "n"}).schemas[0].key_columns == ("n",)


def test_a_zero_date_in_a_key_column_an_index_leads_is_refused_before_any_snapshot(source_db):
    """A zero date or year 0 reads as NULL, and a NULL key no sink can tell apart: found by an index range read
    of the values before year 1 (a TIMESTAMP's zero), naming the table, the column and the fix. A zero date in
    another column is no problem of the key."""
    source_db.execute("SET SESSION sql_mode = ''")
    source_db.execute("CREATE TABLE days (d DATE NOT NULL, id INT NOT NULL, PRIMARY KEY (d, id))")
    source_db.execute("INSERT INTO days VALUES ('2024-01-01', 1), ('0000-03-01', 2)")
    source_db.execute("CREATE TABLE stamps (id INT NOT NULL, ts TIMESTAMP NOT NULL, PRIMARY KEY (id), "
                      "UNIQUE KEY uq (ts, id))")
    source_db.execute("INSERT INTO stamps VALUES (1, '2024-01-01'), (2, 0)")
    source_db.execute("CREATE TABLE logged (id INT PRIMARY KEY, at DATETIME NOT NULL)")
    source_db.execute("INSERT INTO logged VALUES (1, '0000-00-00 00:00:00')")
    days, stamps, logged = (source_db.table(t) for t in ("days", "stamps", "logged"))
    found = problems(source_db.settings, [days, stamps, logged], {stamps: ["ts", "id"]})
    assert found == [
        f"{days}: it holds a row (a zero date or year 0) whose key column(s) d read as NULL: such a row has no key "
        "the sinks can tell apart. A zero or invalid date reads so: give the row a valid date on the source (and "
        "set sql_mode NO_ZERO_DATE, NO_ZERO_IN_DATE, no ALLOW_INVALID_DATES for its writers). Or leave the table "
        "out of source.tables",
        f"{stamps}: it holds a row (a zero date or year 0) whose key column(s) ts read as NULL: such a row has no "
        "key the sinks can tell apart. A zero or invalid date reads so: give the row a valid date on the source "
        "(and set sql_mode NO_ZERO_DATE, NO_ZERO_IN_DATE, no ALLOW_INVALID_DATES for its writers). Or leave the "
        "table out of source.tables"]
    source_db.execute("UPDATE days SET d = '2000-03-01' WHERE id = 2")
    assert validate(source_db.settings, [days, stamps]).schemas[0].key_columns == ("d", "id")


def test_chunk_key_types_the_server_orders_otherwise_are_refused(source_db):
    source_db.execute("CREATE TABLE addr (u UUID NOT NULL PRIMARY KEY, ip INET6 NOT NULL, n INT NOT NULL, "
                      "UNIQUE KEY uq_ip (ip), UNIQUE KEY uq_n (n))")
    name = source_db.table("addr")
    found = problems(source_db.settings, [name])
    assert found == [
        f"chunk key column 'u' of table '{name}' has type uuid, which the server orders otherwise than its value's "
        "text (by its binary form or bit mask), while chunks are looked up by that text: set "
        "source.chunk_key to a "
        "unique NOT NULL key of other types for this table, or leave the table out of source.tables"
    ]
    assert problems(source_db.settings, [name], {name: "ip"})[0].startswith(
        f"chunk key column 'ip' of table '{name}' has type inet6, which the server orders otherwise")
    assert validate(source_db.settings, [name], {name: "n"}).schemas[0].key_columns == ("n",)
    # an ENUM sorts by its member's index, but compares with a string as text: ('web', 'app') orders web first
    source_db.execute("CREATE TABLE visits (kind ENUM('web', 'app') NOT NULL, id INT NOT NULL, PRIMARY KEY (kind, id))")
    visits = source_db.table("visits")
    found = problems(source_db.settings, [visits])
    assert len(found) == 1 and "enum('web','app'), whose members are not declared in the order" in found[0], found
    source_db.execute("CREATE TABLE sorted_kinds (kind ENUM('App', 'web') NOT NULL, id INT NOT NULL, "
                      "PRIMARY KEY (kind, id))")
    assert validate(source_db.settings, [source_db.table("sorted_kinds")]).schemas[0].key_columns == ("kind", "id")


# -- every column type: refused here, never inside a Spark task ------------------------------------------------
def test_a_two_digit_year_is_refused(source_db):
    """SELECT gives YEAR(2) as two digits (0 for 2000), the binlog as the whole year."""
    source_db.execute("CREATE TABLE y (id INT PRIMARY KEY, y YEAR(2), y4 YEAR)")
    name = source_db.table("y")
    assert source_db.execute("SHOW CREATE TABLE y")[0][1].count("year(2)") == 1
    assert problems(source_db.settings, [name]) == [
        f"column 'y' of table '{name}' is YEAR(2), which a SELECT gives as two digits (00 for 2000) and the binlog "
        f"as the whole year: make it YEAR (ALTER TABLE `{source_db.name}`.`y` MODIFY `y` YEAR), or leave the table "
        "out of source.tables"]


STORED_OR_LEFT_OUT = ("make it STORED (computed once, when the row is written; the server refuses that where it "
                      "knows the value depends on the session), or leave the table out of source.tables")
# why a VIRTUAL column computed from the session is refused
SESSION_MIX = ("a snapshot's SELECT computes it in the reading session while the binlog holds the value the writing "
               "session computed, so the sink would mix the two: compute it downstream from the captured columns and "
               "drop it")


def test_a_virtual_column_computed_in_the_session_is_refused(source_db):
    """A VIRTUAL column is computed by whoever reads the row; the binlog holds the writing session's value."""
    source_db.execute("""CREATE TABLE gen (id INT PRIMARY KEY, e INT, ts TIMESTAMP NULL, d DATE,
        local VARCHAR(40) AS (FROM_UNIXTIME(e)) VIRTUAL, day_of VARCHAR(20) AS (CAST(ts AS DATE)) VIRTUAL,
        month_name VARCHAR(20) AS (MONTHNAME(d)) VIRTUAL, total INT AS (id + e) VIRTUAL,
        stored_total INT AS (id * 2) PERSISTENT)""")
    with source_db.server.app_connection(source_db.name) as conn, conn.cursor() as cur:
        cur.execute("SET time_zone = '+05:00'")
        cur.execute("INSERT INTO gen (id, e) VALUES (1, 0)")
        cur.execute("SELECT local FROM gen")
        writer_saw = cur.fetchone()[0]
        conn.commit()
    assert writer_saw == "1970-01-01 05:00:00"
    name = source_db.table("gen")
    drop = f"ALTER TABLE `{source_db.name}`.`gen` DROP COLUMN"
    assert problems(source_db.settings, [name]) == [
        f"column 'local' of table '{name}' is VIRTUAL AS (from_unixtime(`e`)), whose value depends on the session's "
        f"time zone (from_unixtime): {SESSION_MIX} ({drop} `local`), {STORED_OR_LEFT_OUT}",
        f"column 'day_of' of table '{name}' is VIRTUAL AS (cast(`ts` as date)), whose value depends on the session's "
        f"time zone (TIMESTAMP column ts): {SESSION_MIX} ({drop} `day_of`), {STORED_OR_LEFT_OUT}",
        f"column 'month_name' of table '{name}' is VIRTUAL AS (monthname(`d`)), whose value depends on the session's "
        f"locale (lc_time_names) (monthname): {SESSION_MIX} ({drop} `month_name`), {STORED_OR_LEFT_OUT}"]
    source_db.execute("ALTER TABLE gen DROP COLUMN local, DROP COLUMN day_of, DROP COLUMN month_name")
    kept = validate(source_db.settings, [name]).schemas[0]
    assert [c.name for c in kept.columns] == ["id", "e", "ts", "d", "total", "stored_total"]


def test_a_virtual_column_computed_with_the_sessions_sql_mode_or_precision_is_refused(source_db):
    """Settings read when a statement runs (sql_mode) or when a session first opens the table (the division's
    precision: later sessions reuse that instance of the expression) change a VIRTUAL column's value."""
    source_db.execute("""CREATE TABLE modes (id INT PRIMARY KEY, e INT, u INT UNSIGNED, c CHAR(10), s VARCHAR(20),
        ratio VARCHAR(64) AS (CONCAT(e / 7)) VIRTUAL, padded VARCHAR(20) AS (CONCAT(c, '|')) VIRTUAL,
        diff BIGINT AS (u - e) VIRTUAL, as_date VARCHAR(20) AS (CONCAT(CAST(s AS DATE))) VIRTUAL,
        whole INT AS (e DIV 7) VIRTUAL, joined VARCHAR(40) AS (CONCAT(s, '-', e)) VIRTUAL, d DATE,
        matched INT AS (s REGEXP 'x.y') VIRTUAL, due DATE AS (d + INTERVAL e DAY) VIRTUAL,
        due_text VARCHAR(20) AS (CONCAT(d + INTERVAL e DAY)) VIRTUAL)""")
    root = source_db.server.root_connection()
    try:
        with root.cursor() as cur:
            cur.execute("FLUSH TABLES")
            cur.execute("SET div_precision_increment = 9, sql_mode = CONCAT(@@sql_mode, ',PAD_CHAR_TO_FULL_LENGTH')")
            cur.execute(f"INSERT INTO `{source_db.name}`.modes (id, e, u, c, s) VALUES (1, 10, 20, 'ab', '2020-01-02')")
            cur.execute(f"SELECT ratio, padded FROM `{source_db.name}`.modes")
            writer_saw = cur.fetchone()
            root.commit()
            cur.execute("FLUSH TABLES")
    finally:
        root.close()
    with source_db.server.app_connection(source_db.name) as conn, conn.cursor() as cur:
        cur.execute("SELECT ratio, padded FROM modes")
        reader_saw = cur.fetchone()
    assert writer_saw == ("1.428571428", "ab        |") and reader_saw == ("1.4286", "ab|")
    name = source_db.table("modes")
    drop = f"ALTER TABLE `{source_db.name}`.`modes` DROP COLUMN"
    dates = "sql_mode (ALLOW_INVALID_DATES, NO_ZERO_DATE, NO_ZERO_IN_DATE, TIME_ROUND_FRACTIONAL)"
    assert problems(source_db.settings, [name]) == [
        f"column 'ratio' of table '{name}' is VIRTUAL AS (concat(`e` / 7)), whose value depends on the session's "
        f"div_precision_increment (a division with /; DIV is the same in every session): {SESSION_MIX} ({drop} `ratio`), "
        f"{STORED_OR_LEFT_OUT}",
        f"column 'padded' of table '{name}' is VIRTUAL AS (concat(`c`,'|')), whose value depends on the session's "
        f"sql_mode PAD_CHAR_TO_FULL_LENGTH (CHAR column c): {SESSION_MIX} ({drop} `padded`), {STORED_OR_LEFT_OUT}",
        f"column 'diff' of table '{name}' is VIRTUAL AS (`u` - `e`), whose value depends on the session's sql_mode "
        f"NO_UNSIGNED_SUBTRACTION (a subtraction with u): {SESSION_MIX} ({drop} `diff`), {STORED_OR_LEFT_OUT}",
        f"column 'as_date' of table '{name}' is VIRTUAL AS (concat(cast(`s` as date))), whose value depends on the "
        f"session's {dates} (a date or time read from VARCHAR column s): {SESSION_MIX} ({drop} `as_date`), "
        f"{STORED_OR_LEFT_OUT}",
        f"column 'matched' of table '{name}' is VIRTUAL AS (`s` regexp 'x.y'), whose value depends on the session's "
        f"default_regex_flags (regexp): {SESSION_MIX} ({drop} `matched`), {STORED_OR_LEFT_OUT}",
        f"column 'due' of table '{name}' is VIRTUAL AS (`d` + interval `e` day), whose value depends on the session's "
        "time zone and sql_mode (a VIRTUAL DATE column: the value is converted to its type in the session): "
        f"{SESSION_MIX} ({drop} `due`), {STORED_OR_LEFT_OUT}"]
    source_db.execute("ALTER TABLE modes DROP COLUMN ratio, DROP COLUMN padded, DROP COLUMN diff, DROP COLUMN as_date, "
                      "DROP COLUMN matched, DROP COLUMN due")
    kept = validate(source_db.settings, [name]).schemas[0]
    assert [c.name for c in kept.columns] == ["id", "e", "u", "c", "s", "whole", "joined", "d", "due_text"]


def test_a_virtual_column_returning_a_date_column_is_refused(source_db):
    """IFNULL, COALESCE, CASE, ROUND ... of a DATE return it as a date, which the session's sql_mode checks when the
    VIRTUAL column's type converts it: a zero date stored under another mode is logged as the writer's session saw
    it. A fractional DATETIME read as a whole by a date function passes."""
    source_db.execute("""CREATE TABLE zero (id INT PRIMARY KEY, d DATE, d2 DATE, dt6 DATETIME(6),
        first_day VARCHAR(20) AS (IFNULL(d, d2)) VIRTUAL, made INT AS (YEAR(dt6)) VIRTUAL)""")
    root = source_db.server.root_connection()
    try:
        with root.cursor() as cur:
            cur.execute("SET sql_mode = ''")  # a zero date goes in
            cur.execute(f"INSERT INTO `{source_db.name}`.zero (id, d, d2, dt6) "
                        "VALUES (1, '0000-00-00', '2024-03-01', '2024-12-31 23:59:59.999999')")
            cur.execute("SET sql_mode = 'NO_ZERO_DATE,NO_ZERO_IN_DATE'")
            cur.execute(f"UPDATE `{source_db.name}`.zero SET d2 = '2024-03-02' WHERE id = 1")
            cur.execute(f"SELECT first_day FROM `{source_db.name}`.zero")
            writer_saw = cur.fetchone()[0]
            root.commit()
    finally:
        root.close()
    with source_db.server.app_connection(source_db.name) as conn, conn.cursor() as cur:
        cur.execute("SELECT first_day, made FROM zero")
        reader_saw = cur.fetchone()
    assert writer_saw == "2024-03-02" and reader_saw == ("0000-00-00", 2024)
    name = source_db.table("zero")
    drop = f"ALTER TABLE `{source_db.name}`.`zero` DROP COLUMN"
    assert problems(source_db.settings, [name]) == [
        f"column 'first_day' of table '{name}' is VIRTUAL AS (ifnull(`d`,`d2`)), whose value depends on the "
        "session's sql_mode (ALLOW_INVALID_DATES, NO_ZERO_DATE, NO_ZERO_IN_DATE, TIME_ROUND_FRACTIONAL) (a date or "
        f"time read from DATE column d): {SESSION_MIX} ({drop} `first_day`), {STORED_OR_LEFT_OUT}"]


def test_columns_the_binlog_cannot_give_as_select_does_are_refused(source_db):
    source_db.execute("""CREATE TABLE odd (id INT PRIMARY KEY, v VARCHAR(10) COMPRESSED,
        s VARCHAR(10) CHARACTER SET sjis, g TEXT CHARACTER SET gbk, u VARCHAR(5) CHARACTER SET utf16 COLLATE
        utf16_uca1400_ai_ci, e ENUM('é', 'a') CHARACTER SET latin1, st SET('a', 'b') CHARACTER SET ucs2,
        fine_enum ENUM('a', 'b') CHARACTER SET latin1, fine_text TEXT CHARACTER SET latin1, p POINT, i6 INET6)""")
    name = source_db.table("odd")
    modify = f"ALTER TABLE `{source_db.name}`.`odd` MODIFY"
    supported = ("ascii, binary, cp1250, cp1251, cp1257, cp850, cp852, koi8r, latin1, latin2, latin5, latin7, "
                 "macroman, tis620, ucs2, utf16, utf16le, utf32, utf8, utf8mb3, utf8mb4")
    assert problems(source_db.settings, [name]) == [
        f"column 'v' of table '{name}' is COMPRESSED (varchar(10) /*M!100301 COMPRESSED*/): MariaDB writes "
        "compressed columns to the binlog in a form the binlog reader cannot parse; redefine the column without "
        f"COMPRESSED ({modify} `v` ...), or leave the table out of source.tables",
        f"column 's' of table '{name}' has character set sjis, whose characters the binlog reader cannot decode "
        f"exactly as the server converts them: convert the column to utf8mb4 ({modify} `s` varchar(10) CHARACTER "
        f"SET utf8mb4 ...), or leave the table out of source.tables; character sets that can be captured: "
        f"{supported}",
        f"column 'g' of table '{name}' has character set gbk, whose characters the binlog reader cannot decode "
        f"exactly as the server converts them: convert the column to utf8mb4 ({modify} `g` text CHARACTER SET "
        f"utf8mb4 ...), or leave the table out of source.tables; character sets that can be captured: {supported}",
        f"column 'u' of table '{name}' has collation utf16_uca1400_ai_ci, which the binlog reader "
        "(python-mysql-replication) does not know and would decode as UTF-8: give the column another collation of "
        f"utf16 ({modify} `u` ... COLLATE utf16_general_ci), or convert the column to utf8mb4 ({modify} `u` "
        "varchar(5) CHARACTER SET utf8mb4 ...), or leave the table out of source.tables",
        f"column 'e' of table '{name}' is ENUM in character set latin1 with the member 'é', which the binlog names "
        "otherwise than the server does (the binlog reader reads members as UTF-8): convert the column to utf8mb4 "
        f"({modify} `e` enum('é','a') CHARACTER SET utf8mb4 ...), or leave the table out of source.tables",
        f"column 'st' of table '{name}' is SET in character set ucs2 with the member 'a', which the binlog names "
        "otherwise than the server does (the binlog reader reads members as UTF-8): convert the column to utf8mb4 "
        f"({modify} `st` set('a','b') CHARACTER SET utf8mb4 ...), or leave the table out of source.tables",
    ]


def test_system_versioned_tables_and_views_are_refused_by_name(source_db):
    source_db.execute("CREATE TABLE hist (id INT PRIMARY KEY, v INT) WITH SYSTEM VERSIONING")
    source_db.execute("CREATE TABLE plain (id INT PRIMARY KEY)")
    source_db.execute("CREATE VIEW recent AS SELECT id FROM plain")
    hist, recent = source_db.table("hist"), source_db.table("recent")
    versioned = (f"table '{hist}' is system-versioned (WITH SYSTEM VERSIONING), which cannot be captured: its binlog "
                 "writes a DELETE as an UPDATE of the hidden row_end column and keeps history rows that SELECT does "
                 "not show; leave it out of source.tables (narrow a pattern that matches it)")
    assert problems(source_db.settings, [hist, recent]) == [
        f"'{recent}' is a view or a sequence, not a table: it has no binlog rows of its own to capture; capture the "
        "tables it reads from instead (check source.tables)",
        versioned,
    ]
    assert problems(source_db.settings, [f"{source_db.name}.*"]) == [versioned]  # a pattern does not skip it


def test_types_no_sink_can_hold_are_refused_by_name(source_db):
    """VECTOR (MariaDB 11.7+, MySQL 9) and MySQL's binary JSON cannot be created on this server: the column is
    given the type such a server reports, and validation's column check refuses it; so does a type a newer server
    might add."""
    source_db.execute("CREATE TABLE emb (id INT PRIMARY KEY, v VARBINARY(12), j LONGTEXT, x INT)")
    with source_db.connection() as conn:
        schema = load_schema(conn, TableId(source_db.name, "emb"))
        info = server_info(conn)
    reported = {"v": ("vector", "vector(3)"), "j": ("json", "json"), "x": ("frobnicate", "frobnicate")}
    columns = tuple(dataclasses.replace(c, data_type=reported[c.name][0], column_type=reported[c.name][1])
                    if c.name in reported else c for c in schema.columns)
    name = source_db.table("emb")
    move = ("leave the table out of source.tables, or move the column to a table that is not captured")
    assert check_columns(dataclasses.replace(schema, columns=columns), info) == [
        f"column 'v' of table '{name}' has type vector(3): VECTOR (MariaDB 11.7+, MySQL 9), whose binlog form is not "
        f"decoded; it cannot be captured: {move} (a view is no way around it: views have no binlog)",
        f"column 'j' of table '{name}' has type json: MySQL's binary JSON, whose binlog form cannot be shown to give "
        f"the text SELECT prints; it cannot be captured: {move} (a view is no way around it: views have no binlog)",
        f"column 'x' of table '{name}' has type frobnicate, which cannot be captured (no tested mapping to the "
        f"sinks): {move}",
    ]


def test_every_other_type_of_this_server_passes(source_db):
    """The types the sinks hold (docs/types.md), including the spatial ones, INET4/INET6/UUID, generated and
    INVISIBLE columns, and strings in every character set with an exact codec."""
    from .test_type_fidelity import ALL_TYPES_DDL, CHARSETS_DDL

    source_db.execute(ALL_TYPES_DDL)
    source_db.execute(CHARSETS_DDL)
    source_db.execute("CREATE TABLE gen (id INT PRIMARY KEY, a INT, v INT AS (a * 2) VIRTUAL, "
                      "s INT AS (a * 3) STORED, inv INT INVISIBLE, ls LINESTRING, mp MULTIPOLYGON, "
                      "gc GEOMETRYCOLLECTION)")
    result = validate(source_db.settings, [f"{source_db.name}.*"])
    assert sorted(s.table.table for s in result.schemas) == ["all_types", "charsets", "gen"]


@pytest.mark.parametrize("sql_mode", [None, "ANSI_QUOTES"])
def test_foreign_keys_whose_actions_are_not_in_the_binlog_are_refused(mariadb, source_db, sql_mode):
    """A cascade deletes or changes the child's rows inside InnoDB, without row events: the sink would keep them.
    Under ANSI_QUOTES, SHOW CREATE TABLE quotes names in double quotes."""
    db = source_db
    db.execute("CREATE TABLE parent (id INT PRIMARY KEY)")
    db.execute("CREATE TABLE child (id INT PRIMARY KEY, p INT, CONSTRAINT fk_p FOREIGN KEY (p) REFERENCES parent (id) "
               "ON DELETE CASCADE)")
    db.execute("CREATE TABLE nulled (id INT PRIMARY KEY, p INT, CONSTRAINT fk_n FOREIGN KEY (p) REFERENCES parent (id) "
               "ON UPDATE SET NULL)")
    db.execute("CREATE TABLE kept (id INT PRIMARY KEY, p INT, CONSTRAINT fk_k FOREIGN KEY (p) REFERENCES parent (id))")
    tables = [db.table("child"), db.table("nulled"), db.table("kept"), db.table("parent")]
    with global_setting(mariadb, "sql_mode", sql_mode) if sql_mode else contextlib.nullcontext():
        found = problems(db.settings, tables)
    assert len(found) == 2, found
    assert "fk_p (to parent) has ON DELETE CASCADE" in found[0] and db.table("child") in found[0]
    assert "fk_n (to parent) has ON UPDATE SET NULL" in found[1] and "RESTRICT" in found[1]


def test_a_table_of_an_engine_whose_changes_are_not_its_row_events_is_refused(source_db):
    """A MERGE table shows the rows of other tables: a change of them is logged as theirs, never as the merge
    table's, so its sink would miss it. A MyISAM table logs its own changes and passes."""
    db = source_db
    for name in ("m1", "m2"):
        db.execute(f"CREATE TABLE {name} (id INT PRIMARY KEY, v INT) ENGINE=MyISAM")
    db.execute("CREATE TABLE merged (id INT NOT NULL, v INT, PRIMARY KEY (id)) ENGINE=MRG_MyISAM UNION=(m1, m2)")
    found = problems(db.settings, [db.table("merged"), db.table("m1")])
    assert found == [f"table '{db.table('merged')}' uses the MRG_MyISAM storage engine, whose rows change without row "
                     f"events of the table in this server's binlog, so the sink would miss changes: capture the table "
                     f"where its rows are written, or move it to InnoDB (ALTER TABLE `{db.name}`.`merged` "
                     "ENGINE=InnoDB), or leave it out of source.tables"], found
