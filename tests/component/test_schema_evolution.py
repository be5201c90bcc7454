"""ALTERs applied in place (``source.schema_evolution``) against the real MariaDB: each statement runs, and the
version built from the definition before it, its column changes and the definition after it must be the
definition information_schema shows, with the rows that existed (decoded under the old definition and carried
up) as SELECT gives them now. What cannot be applied in place is a reason.
"""

from __future__ import annotations

import pytest

from airflow_cdc_provider.core.chunks import TableId
from airflow_cdc_provider.source.ddl import column_changes, schema_changes
from airflow_cdc_provider.source.schema import load_schema, table_charset
from airflow_cdc_provider.source.schema_evolution import evolve_definition
from airflow_cdc_provider.source.table_versions import TableVersion, upcast
from airflow_cdc_provider.source.values import RowCanonicalizer

CREATE = ("CREATE TABLE t (id INT PRIMARY KEY, a INT, b VARCHAR(10), p DECIMAL(6,2), f FLOAT, "
          "e ENUM('x','y'), n TINYINT UNSIGNED)")
ROWS = [(1, 10, "bee ", "1.25", 0.1, "y", 200), (2, None, None, None, None, None, None),
        (3, -7, "", "-0.5", -2.5, "x", 0)]


def schema_of(db, chunk_key=None):
    with db.connection() as conn:
        return load_schema(conn, TableId(db.name, "t"), chunk_key)


def charset_of(db):
    with db.connection() as conn:
        return table_charset(conn, TableId(db.name, "t"))


def rows_of(db, schema):
    """Every row as SELECT gives it, canonical (as the row decoder gives it), by id."""
    canonical = RowCanonicalizer(schema)
    with db.connection() as conn, conn.cursor() as cur:
        cur.execute(f"SELECT {', '.join(f'`{c}`' for c in schema.column_names)} FROM `{db.name}`.`t`")
        rows = [canonical.from_select(r) for r in cur.fetchall()]
    key = schema.key_columns[0] if schema.key_columns else schema.column_names[0]
    return {r[key]: r for r in rows}


def make_table(db):
    db.execute(CREATE)
    db.executemany("INSERT INTO t VALUES (%s, %s, %s, %s, %s, %s, %s)", ROWS)
    return schema_of(db)


def evolve(db, statement, before, chunk_key=None):
    """Runs ``statement`` for real; the version evolve_definition builds from it, and the definition after."""
    db.execute(statement)
    after = schema_of(db, chunk_key)
    parsed = column_changes(statement, db.name)
    assert parsed is not None and parsed[0] == TableId(db.name, "t"), parsed
    return evolve_definition(before, parsed[1], after, 1, None, statement, charset_of(db)), after


def assert_describes(version, before, after, rows_before, rows_after):
    assert isinstance(version, TableVersion), version
    assert version.schema.column_names == after.column_names
    for got, want in zip(version.schema.columns, after.columns, strict=True):
        assert got == want
    assert version.schema == after
    chain = [TableVersion(0, before), version]
    carried = {k: upcast(row, chain, 0) for k, row in rows_before.items()}
    assert carried == rows_after
    for name, value in version.added.items():
        for row in rows_after.values():
            assert row[name] == value and type(row[name]) is type(value), (name, row[name], value)


@pytest.mark.parametrize("alter", [
    "ADD COLUMN c VARCHAR(10) NOT NULL DEFAULT 'x' AFTER id",
    "ADD c INT DEFAULT -5 FIRST",
    "ADD c BIGINT UNSIGNED DEFAULT 18446744073709551615 AFTER b",
    "ADD c DECIMAL(8,3) NOT NULL DEFAULT 2.5",
    "ADD c DECIMAL(6,2) NOT NULL DEFAULT 1.555",  # rounded half away from zero, as the server stores it
    "ADD c DECIMAL(5,2) DEFAULT '-3.1'",
    "ADD c DOUBLE DEFAULT 1e3",
    "ADD c FLOAT NOT NULL DEFAULT 0.1",
    "ADD c INT NULL DEFAULT NULL",
    "ADD c VARCHAR(3)",
    "ADD c CHAR(4) NOT NULL DEFAULT 'ab  '",
    "ADD c TEXT DEFAULT 'it''s here'",
    "ADD c VARCHAR(5) DEFAULT 'a\"b'",
    "ADD c VARCHAR(5) NOT NULL DEFAULT ''",  # an error under EMPTY_STRING_IS_NULL, so '' whatever the sql_mode
    "ADD c TINYINT(1) NOT NULL DEFAULT TRUE",
    "ADD c ENUM('k','l') DEFAULT 'l'",
    "ADD c SET('k','l','m') NOT NULL DEFAULT 'm,k'",
    "ADD COLUMN IF NOT EXISTS c VARCHAR(5) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin DEFAULT 'ü😀'",
    "ADD COLUMN (i INT NOT NULL, d DECIMAL(5,2) NOT NULL, s VARCHAR(5) NOT NULL, x ENUM('u','v') NOT NULL, "
    "g DOUBLE NOT NULL, st SET('p','q') NOT NULL, tx TEXT NOT NULL)",
    "DROP COLUMN a",
    "DROP a, DROP COLUMN IF EXISTS b",
    "RENAME COLUMN a TO a2",
    "CHANGE b b2 VARCHAR(10)",
    "CHANGE COLUMN b b2 VARCHAR(20) AFTER id",
    "MODIFY COLUMN B VARCHAR(10)",  # the name takes the statement's case
    "MODIFY a BIGINT",
    "MODIFY a INT FIRST",
    "MODIFY b VARCHAR(40)",
    "MODIFY b TEXT",
    "MODIFY b VARCHAR(20) BINARY",  # the table's character set, which b has: only the collation changes
    "MODIFY b VARCHAR(20) COLLATE utf8mb4_bin",
    "MODIFY p DECIMAL(10,3)",
    "MODIFY p DECIMAL(6,2) DEFAULT 9 COMMENT 'price'",
    "MODIFY f DOUBLE",
    "MODIFY n SMALLINT",
    "MODIFY n INT UNSIGNED",
    "MODIFY e ENUM('x','y','z') AFTER a",
    "RENAME COLUMN a TO a2, ADD c INT NOT NULL DEFAULT 7 AFTER a2, DROP COLUMN b, MODIFY p DECIMAL(9,2), "
    "ADD INDEX (c), ALGORITHM=COPY",
    "ADD c INT AFTER a2, MODIFY n SMALLINT FIRST, RENAME COLUMN a TO a2, ADD d INT FIRST",  # AFTER: the new names
    "MODIFY e ENUM('x','y','z') AFTER b2, CHANGE b b2 VARCHAR(11), DROP COLUMN p, ADD COLUMN p VARCHAR(3) AFTER id",
    "DROP COLUMN b, ADD COLUMN b INT NOT NULL DEFAULT 3",
    "ADD c INT DEFAULT 1, ADD d VARCHAR(2) DEFAULT 'd' FIRST, ADD g INT AFTER d, ALTER COLUMN a SET DEFAULT 4",
])
def test_an_alter_applied_in_place_is_the_definition_and_the_rows_after_it(source_db, alter):
    db = source_db
    before = make_table(db)
    rows_before = rows_of(db, before)
    version, after = evolve(db, f"ALTER TABLE t {alter}", before)
    assert_describes(version, before, after, rows_before, rows_of(db, after))


@pytest.mark.parametrize("alter, reason", [
    ("ADD c DATETIME DEFAULT CURRENT_TIMESTAMP", "cannot be derived"),
    ("ADD c INT DEFAULT (1 + 2)", "cannot be derived"),
    ("ADD c VARBINARY(4) DEFAULT 'ab'", "cannot be derived"),
    ("ADD c DATE NOT NULL DEFAULT '2020-01-01'", "cannot be derived"),
    ("ADD c FLOAT(6,2) NOT NULL DEFAULT 1.555", "rounded"),
    ("ADD c VARCHAR(9) DEFAULT 'a\\\\b'", "NO_BACKSLASH_ESCAPES"),
    ("ADD c INT AS (a + 1) VIRTUAL", "generated"),
    ("ADD c INT NOT NULL AUTO_INCREMENT UNIQUE", "AUTO_INCREMENT"),
    ("MODIFY a SMALLINT", "may change values"),
    ("MODIFY p DECIMAL(6,1)", "may change values"),
    ("MODIFY p DECIMAL(40,2)", "sinks changes from decimal(6,2) to string"),
    ("MODIFY b CHAR(10)", "may change values"),
    ("MODIFY b VARCHAR(10) CHARACTER SET latin1", "may change values"),
    ("MODIFY b VARCHAR(20) COLLATE latin1_bin", "character set latin1, which may change values"),
    ("MODIFY b NVARCHAR(20)", "character set utf8mb3, which may change values"),
    ("MODIFY b VARCHAR(20) ASCII", "character set latin1, which may change values"),
    ("MODIFY e ENUM('y','x')", "may change values"),
    ("MODIFY a INT NOT NULL DEFAULT 0", "NOT NULL"),
    ("MODIFY id BIGINT", "key"),
    ("DROP COLUMN id", "key"),
    ("RENAME COLUMN id TO ident", "key"),
])
def test_what_cannot_be_applied_in_place_is_a_reason(source_db, alter, reason):
    db = source_db
    before = make_table(db)
    if alter.startswith("MODIFY a INT NOT NULL"):
        db.execute("DELETE FROM t WHERE a IS NULL")
    version, _ = evolve(db, f"ALTER TABLE t {alter}", before, chunk_key="n")  # DROP COLUMN id takes the key
    assert isinstance(version, str) and reason in version, version


def test_a_definition_that_moved_on_since_is_a_reason_and_a_chain_of_versions_carries_rows(source_db):
    db = source_db
    before = make_table(db)
    rows_before = rows_of(db, before)
    first, second, third = ("ALTER TABLE t ADD c VARCHAR(5) NOT NULL DEFAULT 'x'", "ALTER TABLE t ADD d INT DEFAULT 2",
                            "ALTER TABLE t MODIFY c VARCHAR(9) NOT NULL DEFAULT 'x'")
    for statement in (first, second):
        db.execute(statement)
    now = schema_of(db)
    # later ALTERs that only add columns leave the first one's definition readable from the table now
    charset = charset_of(db)
    v1 = evolve_definition(before, column_changes(first, db.name)[1], now, 1, None, first, charset)
    v2 = evolve_definition(v1.schema, column_changes(second, db.name)[1], now, 2, None, second, charset)
    assert isinstance(v1, TableVersion) and v1.schema.column_names == [*before.column_names, "c"]
    assert v1.added == {"c": "x"} and v2.added == {"d": 2} and v2.schema == now
    assert {k: upcast(r, [TableVersion(0, before), v1, v2], 0) for k, r in rows_before.items()} == rows_of(db, now)
    # a string column typed without a character set takes the table's default, which must be known
    no_default = evolve_definition(before, column_changes(first, db.name)[1], now, 1, None, first)
    assert isinstance(no_default, str) and "default character set" in no_default, no_default

    db.execute(third)
    now = schema_of(db)
    moved_on = evolve_definition(before, column_changes(first, db.name)[1], now, 1, None, first, charset)
    assert isinstance(moved_on, str) and "varchar(9)" in moved_on, moved_on
    unknown = evolve_definition(before, column_changes(first, db.name)[1], None, 1, None, first, charset)
    assert isinstance(unknown, str), unknown
    # a column the known definition lacks, or has already, means the statement skipped it or the definition is wrong
    gone = evolve_definition(before, column_changes("ALTER TABLE t DROP COLUMN IF EXISTS zz", db.name)[1], now, 1,
                             None, "")
    there = evolve_definition(before, column_changes("ALTER TABLE t ADD COLUMN IF NOT EXISTS a INT", db.name)[1], now,
                              1, None, "")
    assert isinstance(gone, str) and isinstance(there, str)


@pytest.mark.parametrize("mode, alter, holds", [
    ("ANSI_QUOTES", 'ADD c VARCHAR(10) DEFAULT "b"', lambda row: row["b"]),  # the value of column b
    ("ORACLE", 'ADD c VARCHAR(10) DEFAULT "b"', lambda row: row["b"]),
    ("", 'ADD c VARCHAR(10) DEFAULT "b"', lambda row: "b"),
    ("EMPTY_STRING_IS_NULL", "ADD c VARCHAR(10) DEFAULT ''", lambda row: None),
    ("EMPTY_STRING_IS_NULL", "ADD c ENUM('', 'k') DEFAULT ('')", lambda row: None),
    ("", "ADD c VARCHAR(10) DEFAULT ''", lambda row: ""),
])
def test_a_default_whose_value_depends_on_the_sql_mode_is_a_reason(source_db, mode, alter, holds):
    """The binlog's statement is the same under every sql_mode; what the existing rows get is not."""
    db = source_db
    before = make_table(db)
    db.execute(f"SET SESSION sql_mode = '{mode}'")
    version, after = evolve(db, f"ALTER TABLE t {alter}", before)
    assert all(row["c"] == holds(row) for row in rows_of(db, after).values())
    assert isinstance(version, str) and "sql_mode" in version, version


LOSSY = [
    ("MODIFY s VARCHAR(20)", "VARCHAR(20)", "?ü?"),
    ("CHANGE s s VARCHAR(20)", "VARCHAR(20)", "?ü?"),
    ("MODIFY s VARCHAR(20) BINARY", "VARCHAR(20)", "?ü?"),
    ("MODIFY s TEXT", "TEXT", "?ü?"),
    ("MODIFY s NVARCHAR(20)", "VARCHAR(20)", "жü?"),  # utf8mb3, whatever the table's
]


@pytest.mark.parametrize("alter, back, left", LOSSY)
def test_a_string_column_retyped_without_a_character_set_takes_the_tables_and_converted_back_is_a_reason(
        source_db, alter, back, left):
    """The server converts the column to the table's default character set, losing what that lacks; converted back
    by a later statement, the table shows the old character set again, and the ALTER is no widening."""
    db = source_db
    db.execute("CREATE TABLE t (id INT PRIMARY KEY, s VARCHAR(10) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin) "
               "DEFAULT CHARSET=latin1")
    db.execute("INSERT INTO t VALUES (1, 'жü😀')")
    before = schema_of(db)
    db.execute("SET SESSION sql_mode = ''")  # not strict: a character latin1 lacks becomes '?'
    db.execute(f"ALTER TABLE t {alter}")
    db.execute(f"ALTER TABLE t MODIFY s {back} CHARACTER SET utf8mb4 COLLATE utf8mb4_bin")
    now = schema_of(db)
    assert now.column("s").charset == "utf8mb4" and rows_of(db, now)[1]["s"] == left
    version = evolve_definition(before, column_changes(f"ALTER TABLE t {alter}", db.name)[1], now, 1, None, alter,
                                charset_of(db))
    assert isinstance(version, str) and "character set" in version, version


def test_a_new_default_character_set_between_is_a_resync(source_db):
    """The table's default now is not the one an ALTER met when a statement since changed it: that statement is a
    resync, whose re-snapshot reads what the ALTER did."""
    db = source_db
    db.execute("CREATE TABLE t (id INT PRIMARY KEY, s VARCHAR(10) CHARACTER SET utf8mb4) DEFAULT CHARSET=latin1")
    db.execute("INSERT INTO t VALUES (1, 'жü')")
    before = schema_of(db)
    db.execute("SET SESSION sql_mode = ''")
    statements = ["ALTER TABLE t MODIFY s VARCHAR(20)", "ALTER TABLE t DEFAULT CHARSET=utf8mb4",
                  "ALTER TABLE t MODIFY s VARCHAR(20)"]
    for statement in statements:
        db.execute(statement)
    now = schema_of(db)
    assert rows_of(db, now)[1]["s"] == "?ü"
    taken = evolve_definition(before, column_changes(statements[0], db.name)[1], now, 1, None, statements[0],
                              charset_of(db))
    assert isinstance(taken, TableVersion)  # the default the ALTER met is gone from the table
    assert [c.kind for c in schema_changes(statements[1], db.name, {TableId(db.name, "t")}.__contains__)] == [
        "resync"]
