"""The column specifications of an ALTER TABLE as the statement wrote them (``source.ddl.column_changes``), for
the stream's in-place schema evolution; None for every statement that must stay a resync."""

import pytest

from airflow_cdc_provider.core.chunks import TableId
from airflow_cdc_provider.source.ddl import column_changes
from airflow_cdc_provider.source.table_versions import ColumnChange


def add(name, type_sql, **kw):
    return ColumnChange("add", name, type_sql=type_sql, **kw)


def modify(name, type_sql, new_name=None, **kw):
    return ColumnChange("modify", name, new_name, type_sql, **kw)


def drop(name):
    return ColumnChange("drop", name)


def rename(name, new_name):
    return ColumnChange("rename", name, new_name)


def changes_of(statement, database="db"):
    found = column_changes(statement, database)
    assert found is not None, statement
    return found[1]


@pytest.mark.parametrize("statement, expected", [
    ("ALTER TABLE t ADD COLUMN c VARCHAR(10) NOT NULL DEFAULT 'x' AFTER b",
     [add("c", "VARCHAR(10)", nullable=False, default_sql="'x'", placement="AFTER b")]),
    ("ALTER TABLE t ADD c BIGINT UNSIGNED ZEROFILL DEFAULT 5 FIRST",
     [add("c", "BIGINT UNSIGNED ZEROFILL", default_sql="5", placement="FIRST")]),
    ("alter table t add column c decimal(10,2) default -1.5", [add("c", "decimal(10,2)", default_sql="-1.5")]),
    ("ALTER TABLE t ADD c INT DEFAULT - 5", [add("c", "INT", default_sql="-5")]),
    ("ALTER TABLE t ADD c INT NULL DEFAULT NULL COMMENT 'why'", [add("c", "INT", default_sql="NULL")]),
    ("ALTER TABLE t ADD c DATETIME DEFAULT CURRENT_TIMESTAMP()",
     [add("c", "DATETIME", default_sql="CURRENT_TIMESTAMP()")]),
    ("ALTER TABLE t ADD c INT DEFAULT (1 + 2)", [add("c", "INT", default_sql="(1 + 2)")]),
    ("ALTER TABLE t ADD c VARCHAR(5) DEFAULT 'it''s'", [add("c", "VARCHAR(5)", default_sql="'it''s'")]),
    # a string in double quotes stays so: under the sql_mode ANSI_QUOTES it is a column's name
    ('ALTER TABLE t ADD c VARCHAR(5) DEFAULT "s"', [add("c", "VARCHAR(5)", default_sql='"s"')]),
    ('ALTER TABLE t ADD COLUMN (a INT, c VARCHAR(5) DEFAULT  ("it""s") COLLATE utf8mb4_bin)',
     [add("a", "INT"), add("c", "VARCHAR(5) COLLATE utf8mb4_bin", default_sql='("it""s")')]),
    ('ALTER TABLE t ADD c VARCHAR(5) DEFAULT \'a"b\'', [add("c", "VARCHAR(5)", default_sql='\'a"b\'')]),
    ("ALTER TABLE t ADD c VARCHAR(5) DEFAULT ''", [add("c", "VARCHAR(5)", default_sql="''")]),
    ("ALTER TABLE t ADD COLUMN IF NOT EXISTS c INT", [add("c", "INT")]),
    ("ALTER TABLE t ADD `my col` INT(11) SIGNED NOT NULL", [add("my col", "INT(11) SIGNED", nullable=False)]),
    ("ALTER TABLE t ADD c ENUM('a','b''c') NOT NULL DEFAULT 'a'",
     [add("c", "ENUM('a','b''c')", nullable=False, default_sql="'a'")]),
    ("ALTER TABLE t ADD c VARCHAR(20)  CHARACTER SET latin1 COLLATE latin1_bin NOT NULL",
     [add("c", "VARCHAR(20) CHARACTER SET latin1 COLLATE latin1_bin", nullable=False)]),
    ("ALTER TABLE t ADD c TEXT CHARSET utf8mb4", [add("c", "TEXT CHARSET utf8mb4")]),
    ("ALTER TABLE t ADD c VARCHAR(10) NOT NULL COLLATE utf8mb4_bin",
     [add("c", "VARCHAR(10) COLLATE utf8mb4_bin", nullable=False)]),
    ("ALTER TABLE t ADD c VARCHAR(10) DEFAULT 'x' COLLATE utf8mb4_bin",
     [add("c", "VARCHAR(10) COLLATE utf8mb4_bin", default_sql="'x'")]),
    ("ALTER TABLE t ADD c DOUBLE PRECISION(10,2) UNSIGNED", [add("c", "DOUBLE PRECISION(10,2) UNSIGNED")]),
    ("ALTER TABLE t ADD c INT AS (a + 1) VIRTUAL", [add("c", "INT", generated=True)]),
    ("ALTER TABLE t ADD c INT GENERATED ALWAYS AS (a + 1) STORED", [add("c", "INT", generated=True)]),
    ("ALTER TABLE t ADD c INT NOT NULL AUTO_INCREMENT, ADD UNIQUE KEY (c)",
     [add("c", "INT", nullable=False, auto_increment=True)]),
    ("ALTER TABLE t ADD c SERIAL", [add("c", "SERIAL", auto_increment=True)]),
    ("ALTER TABLE t ADD COLUMN (c1 INT NOT NULL, `c 2` DECIMAL(10,2) DEFAULT -1.5)",
     [add("c1", "INT", nullable=False), add("c 2", "DECIMAL(10,2)", default_sql="-1.5")]),
    ("ALTER TABLE t ADD (c1 INT, c2 INT)", [add("c1", "INT"), add("c2", "INT")]),
    ("ALTER TABLE t DROP COLUMN c", [drop("c")]),
    ("ALTER TABLE t DROP c, DROP COLUMN IF EXISTS `d`", [drop("c"), drop("d")]),
    ("ALTER TABLE t RENAME COLUMN a TO b", [rename("a", "b")]),
    ("ALTER TABLE t RENAME COLUMN IF EXISTS a TO b", [rename("a", "b")]),
    ("ALTER TABLE t CHANGE COLUMN a b INT NOT NULL AFTER x",
     [modify("a", "INT", "b", nullable=False, placement="AFTER x")]),
    ("ALTER TABLE t CHANGE a a INT", [modify("a", "INT", "a")]),
    ("ALTER TABLE t CHANGE COLUMN IF EXISTS a b VARCHAR(9)", [modify("a", "VARCHAR(9)", "b")]),
    ("ALTER TABLE t MODIFY c BIGINT FIRST", [modify("c", "BIGINT", placement="FIRST")]),
    ("ALTER TABLE t MODIFY COLUMN c ENUM('a','b') NOT NULL DEFAULT 'a'",
     [modify("c", "ENUM('a','b')", nullable=False, default_sql="'a'")]),
    ("ALTER TABLE t MODIFY COLUMN IF EXISTS c BIGINT UNSIGNED", [modify("c", "BIGINT UNSIGNED")]),
    ('ALTER TABLE t MODIFY COLUMN IF EXISTS c CHAR(2) DEFAULT "x"', [modify("c", "CHAR(2)", default_sql='"x"')]),
    ("ALTER TABLE t MODIFY c NVARCHAR(9) BINARY", [modify("c", "NVARCHAR(9) BINARY")]),
    ("ALTER TABLE t CHANGE c d CHAR(3) ASCII", [modify("c", "CHAR(3) ASCII", "d")]),
])
def test_column_specifications_as_written(statement, expected):
    assert changes_of(statement) == expected


def test_several_specifications_in_statement_order():
    statement = ("ALTER TABLE t ADD c INT, DROP d, RENAME COLUMN e TO f, CHANGE g h BIGINT, MODIFY i VARCHAR(40), "
                 "ADD j INT FIRST")
    assert changes_of(statement) == [add("c", "INT"), drop("d"), rename("e", "f"), modify("g", "BIGINT", "h"),
                                     modify("i", "VARCHAR(40)"), add("j", "INT", placement="FIRST")]


@pytest.mark.parametrize("statement", [
    "ALTER TABLE t ADD c INT, ADD INDEX (c), ALGORITHM=INPLACE, LOCK=NONE",
    "ALTER TABLE t ADD c INT, ALTER COLUMN d SET DEFAULT 3, ALTER e DROP DEFAULT, ENGINE=InnoDB, COMMENT='x'",
    "ALTER TABLE t DROP INDEX i, DROP FOREIGN KEY fk, DROP CHECK ck, ADD c INT",
    "ALTER TABLE t ADD FULLTEXT INDEX ft (v), ADD c INT, ADD CONSTRAINT chk CHECK (c > 0)",
    "ALTER TABLE t ADD c INT, ADD UNIQUE KEY uk (c), ADD CONSTRAINT fk FOREIGN KEY (c) REFERENCES x (id)",
    "ALTER TABLE t ADD c INT, ADD FOREIGN KEY (c) REFERENCES x (id) ON DELETE RESTRICT ON UPDATE NO ACTION",
    "ALTER TABLE t RENAME INDEX a TO b, ADD c INT, FORCE",
    "ALTER TABLE t ADD c INT, ALGORITHM=INSTANT",
    "ALTER TABLE t /*!50100 ADD c INT */",
])
def test_changes_that_leave_row_images_alone_are_left_out(statement):
    assert changes_of(statement) == [add("c", "INT")]


def test_only_changes_that_leave_row_images_alone_are_no_column_changes():
    assert column_changes("ALTER TABLE t ADD INDEX (v), ENGINE=InnoDB", "db") == (TableId("db", "t"), [])


@pytest.mark.parametrize("statement, database, table", [
    ("ALTER TABLE t ADD c INT", "db", TableId("db", "t")),
    ("ALTER TABLE shop.`orders` ADD c INT", "db", TableId("shop", "orders")),
    ("ALTER ONLINE TABLE IF EXISTS shop.t WAIT 5 ADD c INT", None, TableId("shop", "t")),
    ("ALTER TABLE t NOWAIT ADD c INT", "db", TableId("db", "t")),
])
def test_the_table_in_the_current_database_or_as_qualified(statement, database, table):
    assert column_changes(statement, database) == (table, [add("c", "INT")])


@pytest.mark.parametrize("statement", [
    "ALTER TABLE t RENAME TO u",
    "ALTER TABLE t ADD c INT, RENAME TO u",
    "ALTER IGNORE TABLE t ADD c INT",
    "ALTER TABLE t ENGINE=BLACKHOLE",
    "ALTER TABLE t CONVERT TO CHARACTER SET utf8mb4",
    "ALTER TABLE t DEFAULT CHARSET=latin1",
    "ALTER TABLE t MODIFY c VARCHAR(9), COLLATE latin1_bin",
    "ALTER TABLE t ADD PARTITION (PARTITION p1 VALUES LESS THAN (10))",
    "ALTER TABLE t TRUNCATE PARTITION p1",
    "ALTER TABLE t ADD PRIMARY KEY (a)",
    "ALTER TABLE t ADD c INT PRIMARY KEY",
    "ALTER TABLE t ADD c INT KEY",
    "ALTER TABLE t DROP PRIMARY KEY, ADD PRIMARY KEY (a, b)",
    "ALTER TABLE t DROP KEY `PRIMARY`",
    "ALTER TABLE t ADD CONSTRAINT pk PRIMARY KEY (a)",
    "ALTER TABLE t ALTER COLUMN c SET INVISIBLE",
    "ALTER TABLE t ADD c INT, ADD CONSTRAINT fk FOREIGN KEY (c) REFERENCES x (id) ON DELETE CASCADE",
    "ALTER TABLE t ADD FOREIGN KEY (c) REFERENCES x (id) ON UPDATE SET NULL",
    "ALTER TABLE t ADD c INT REFERENCES x (id) ON DELETE SET NULL",  # MariaDB makes it a foreign key
    "ALTER TABLE t ADD c VARCHAR(10) COMPRESSED",  # MariaDB-only forms sqlglot rejects stay a resync
    "ALTER TABLE t ADD c INT AS (a + 1) PERSISTENT",
    "ALTER TABLE t ADD c INT, FROB",
    "ALTER VIEW v AS SELECT 1",
    "ALTER DATABASE db CHARACTER SET utf8mb4",
    "CREATE TABLE t (id INT)",
    "INSERT INTO t VALUES (1)",
    "BEGIN",
    "",
    "ALTER TABLE `unclosed ADD c INT",
])
def test_anything_else_is_none(statement):
    assert column_changes(statement, "db") is None
