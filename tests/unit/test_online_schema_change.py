"""Online schema change tools' shadow tables (``core/shadow_tables.py``, ``source/online_schema_change.py``):
which statements about a shadow the stream keeps, and when a swap stands for the shadow's one ALTER. The tools'
statements are as gh-ost and pt-online-schema-change log them."""

import pytest

from airflow_cdc_provider.core.chunks import TableId
from airflow_cdc_provider.core.offsets import EventPosition
from airflow_cdc_provider.core.shadow_tables import ShadowStatement, shadow_originals
from airflow_cdc_provider.source.ddl import swapped_into, table_creation
from airflow_cdc_provider.source.online_schema_change import shadow_statements, swapped_in_changes
from airflow_cdc_provider.source.table_versions import ADD_COLUMN, RENAME_COLUMN

T, GHO = TableId("db", "t"), TableId("db", "_t_gho")
CAPTURED = {T, TableId("db", "_u")}.__contains__


def notes(statement, database="db"):
    return [(n.kind, str(n.shadow), n.columns, n.detail) for n in shadow_statements(statement, database, CAPTURED)]


@pytest.mark.parametrize(("name", "originals"), [
    ("_t_gho", ["t"]), ("_t_new", ["t"]), ("__t_new", ["t"]), ("__u_new", ["_u"]), ("___u_new", ["_u"]),
    ("__u_gho", ["_u"]), ("_u_gho", []), ("_t_ghc", []), ("_t_del", []), ("_t_old", []), ("t_new", []),
    ("_x_gho", []),
])
def test_a_shadow_is_known_by_the_tools_names_for_a_captured_table(name, originals):
    assert [t.table for t in shadow_originals(TableId("db", name), CAPTURED)] == originals


def test_a_name_two_captured_tables_may_give_their_shadow_is_noted_for_both():
    both = {TableId("db", "t"), TableId("db", "_t")}.__contains__
    assert [t.table for t in shadow_originals(TableId("db", "__t_new"), both)] == ["_t", "t"]
    assert [(n.kind, str(n.original)) for n in shadow_statements("CREATE TABLE __t_new LIKE t", "db", both)] == [
        ("other", "db._t"), ("like", "db.t")]  # a copy of t, not of _t
    assert [(n.kind, str(n.original)) for n in shadow_statements("ALTER TABLE __t_new ADD c INT", "db", both)] == [
        ("alter", "db._t"), ("alter", "db.t")]


def test_the_tools_statements_about_their_shadow():
    assert notes("create /* gh-ost */ table `db`.`_t_gho` like `db`.`t`", None) == [("like", "db._t_gho", (), "")]
    assert notes("alter /* gh-ost */ table `db`.`_t_gho` ADD COLUMN c INT NOT NULL DEFAULT 0") == [
        ("alter", "db._t_gho", (), "")]
    show = ("CREATE TABLE `db`.`_t_new` (\n  `id` int(11) NOT NULL,\n  `name` varchar(20) NOT NULL,\n"
            "  `ts` timestamp NOT NULL DEFAULT current_timestamp() ON UPDATE current_timestamp(),\n"
            "  PRIMARY KEY (`id`),\n  KEY `k` (`name`)\n) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4")
    assert notes(show) == [("create", "db._t_new", ("id", "name", "ts"), "")]
    # pt-osc's triggers, ANALYZE, its copy as SQL never logged under row-based logging: the shadow's definition
    # stays as it was
    assert notes("CREATE TRIGGER `pt_osc_db_t_ins` AFTER INSERT ON `db`.`t` FOR EACH ROW "
                 "REPLACE INTO `db`.`_t_new` (`id`, `name`) VALUES (NEW.`id`, NEW.`name`)") == []
    assert notes("ANALYZE TABLE `db`.`_t_new` /* pt-online-schema-change */") == []
    assert notes("DROP TRIGGER IF EXISTS `db`.`pt_osc_db_t_del`") == []
    # anything else that changes the shadow leaves its definition unknown
    assert notes("TRUNCATE TABLE _t_gho") == [("other", "db._t_gho", (), "truncated")]
    assert notes("ALTER TABLE _t_gho ADD PRIMARY KEY (id, name)")[0][0] == "other"
    # a new engine: the rollbacks read before the swap would be judged by it
    assert notes("alter /* gh-ost */ table `db`.`_t_gho` engine=MyISAM") == [
        ("other", "db._t_gho", (), "its storage engine set")]
    assert notes("CREATE TABLE _t_gho LIKE other")[0][:2] == ("other", "db._t_gho")
    # a foreign key whose actions change the shadow's rows without row events would land in the table at the swap
    assert notes("ALTER TABLE _t_gho ADD FOREIGN KEY (p) REFERENCES x (id) ON DELETE CASCADE")[0][:2] == (
        "other", "db._t_gho")
    assert notes("CREATE TABLE `db`.`_t_new` (`id` int NOT NULL, `p` int, PRIMARY KEY (`id`), CONSTRAINT `_fk` "
                 "FOREIGN KEY (`p`) REFERENCES `x` (`id`) ON DELETE SET NULL)")[0][:2] == ("other", "db._t_new")
    assert notes("CREATE TABLE _t_gho AS SELECT * FROM t")[0][:2] == ("other", "db._t_gho")
    assert notes("RENAME TABLE x TO _t_gho")[0][:2] == ("other", "db._t_gho")
    # the swap: the shadow leaves; the table it lands in is the reader's business
    assert notes("RENAME TABLE `t` TO `_t_old`, `_t_new` TO `t`")[0][:2] == ("other", "db._t_new")
    assert swapped_into("rename /* gh-ost */ table `db`.`t` to `db`.`_t_del`, `db`.`_t_gho` to `db`.`t`", None,
                        T) == GHO
    assert swapped_into("RENAME TABLE t TO t2", "db", T) is None
    # a swap moves the table out in the same statement; a name left empty before (pt-osc's drop_swap: DROP TABLE
    # t, then RENAME TABLE _t_new TO t) is refilled by another table, no swap
    assert swapped_into("RENAME TABLE _t_new TO t", "db", T) is None
    assert swapped_into("RENAME TABLE t TO _t_old, _t_new TO t", "db", T) == TableId("db", "_t_new")
    assert swapped_into("ALTER TABLE _t_gho RENAME TO t", "db", T) is None
    # shadows of tables not captured, and tables not named as shadows
    assert notes("CREATE TABLE _x_gho LIKE x") == [] and notes("CREATE TABLE t_copy LIKE t") == []


def test_what_create_table_creates():
    assert table_creation("CREATE TABLE _t_gho (LIKE t)", "db").like == T
    assert table_creation("CREATE TABLE IF NOT EXISTS _t_gho LIKE t", "db") == table_creation(
        "CREATE TABLE _t_gho SELECT 1 AS a", "db") == table_creation("CREATE TABLE _t_gho LIKE t", "db").__class__(GHO)
    assert table_creation("CREATE TEMPORARY TABLE _t_gho LIKE t", "db") is None
    assert table_creation("CREATE OR REPLACE TABLE _t_gho LIKE t", "db") is None


def at(pos):
    return EventPosition("mariadb-bin.000001", pos)


def note(kind, pos, statement="", columns=()):
    return ShadowStatement(GHO, T, kind, statement, "db", columns, "changed" if kind == "other" else "", at(pos))


ALTER = "ALTER TABLE _t_gho ADD COLUMN c INT NOT NULL DEFAULT 0, RENAME COLUMN name TO title"


def swap(found, swap_pos=1000, versions=((0, 0),), before=0, columns=("id", "name"), emptied=()):
    """``swapped_in_changes`` of the notes ``found``; ``versions``: (from position, number) of the table's."""
    def version_at(p):
        return max((v for v in versions if v[0] <= p.pos), key=lambda v: v[0])[1]
    result = swapped_in_changes(found, GHO, at(swap_pos), version_at, before, list(columns), emptied)
    return result if isinstance(result, str) else (result[0], [(c.kind, c.name) for c in result[1]])


def test_a_swap_is_the_shadows_one_alter_on_the_definition_it_copied():
    assert swap([note("like", 10), note("alter", 20, ALTER)]) == (
        ALTER, [(ADD_COLUMN, "c"), (RENAME_COLUMN, "name")])
    # pt-osc's copy of the definition; index-only ALTERs besides; a rebuild with no column change at all
    assert swap([note("create", 10, columns=("ID", "name")), note("alter", 15, "ALTER TABLE _t_gho ADD INDEX (c)"),
                 note("alter", 20, ALTER)])[1] == [(ADD_COLUMN, "c"), (RENAME_COLUMN, "name")]
    assert swap([note("like", 10, "CREATE TABLE _t_gho LIKE t"), note("alter", 20, "ALTER TABLE _t_gho ENGINE=InnoDB")]
                ) == ("CREATE TABLE _t_gho LIKE t", [])
    # the last creation counts; statements after the swap do not
    assert swap([note("like", 5), note("other", 6), note("like", 10), note("alter", 20, ALTER),
                 note("other", 1000), note("other", 1100)])[0] == ALTER


def test_a_table_emptied_between_its_shadows_creation_and_the_swap_is_no_swap_of_the_same_rows():
    truncated = [ShadowStatement(T, T, "emptied", "TRUNCATE t", "db", (), "truncated", at(15))]
    assert swap([note("like", 10), note("alter", 20, ALTER)], emptied=truncated) == (
        "db.t was emptied after db._t_gho was created (truncated)")
    earlier = [ShadowStatement(T, T, "emptied", "TRUNCATE t", "db", (), "truncated", at(5))]
    assert swap([note("like", 10), note("alter", 20, ALTER)], emptied=earlier)[0] == ALTER


def test_a_swap_that_stands_for_no_alter_the_stream_can_derive_says_why():
    assert swap([note("alter", 20, ALTER)]) == "the stream did not see db._t_gho created"
    assert swap([note("like", 10), note("other", 15), note("alter", 20, ALTER)]) == (
        "the stream cannot tell what db._t_gho holds: changed")
    assert swap([note("other", 10), note("alter", 20, ALTER)]) == "the stream cannot tell what db._t_gho holds: changed"
    assert swap([note("like", 10), note("alter", 20, ALTER)], versions=((0, 0), (15, 1)), before=1) == (
        "db.t was altered after db._t_gho was created as a copy of it")
    assert swap([note("create", 10, columns=("id", "title")), note("alter", 20, ALTER)]).startswith(
        "db._t_gho was created with the columns id, title, not as a copy of db.t")
    assert swap([note("like", 10), note("alter", 20, ALTER), note("alter", 30, "ALTER TABLE _t_gho DROP c")]) == (
        "db._t_gho was altered 2 times (one ALTER is applied at the swap)")
    assert swap([note("like", 10), note("alter", 20, "ALTER TABLE _t_gho PARTITION BY HASH(id)")]) == (
        "db._t_gho was altered by a statement not understood")


@pytest.mark.parametrize("alter, reused", [
    ("ALTER TABLE _t_gho DROP COLUMN name, ADD COLUMN name INT DEFAULT 0", "name"),
    ("ALTER TABLE _t_gho DROP COLUMN `Name`, ADD COLUMN name INT", "name"),
    ("ALTER TABLE _t_gho RENAME COLUMN name TO title, ADD COLUMN name INT", "name"),
    ("ALTER TABLE _t_gho DROP COLUMN name, CHANGE id name INT", "name"),
])
def test_a_swap_whose_alter_gives_a_columns_name_to_another_column_is_no_alter_applied_in_place(alter, reused):
    """pt-osc copies every column whose name both tables have (the old values), gh-ost leaves a dropped column
    out of its copy (the new column's DEFAULT): the binlog does not say which tool ran."""
    why = swap([note("like", 10), note("alter", 20, alter)])
    assert isinstance(why, str) and f"({reused})" in why and "pt-online-schema-change" in why, why
