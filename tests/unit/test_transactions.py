"""Which of a logged transaction's records stand (``source.transactions.committed``), group by group, with
the marks as the server writes them (MariaDB: a GTID event opens a group, no BEGIN statement)."""

from __future__ import annotations

from airflow_cdc_provider.core.chunks import TableId
from airflow_cdc_provider.core.offsets import EventPosition
from airflow_cdc_provider.core.records import ChangeRecord
from airflow_cdc_provider.source.transactions import (
    COMMITTED, GROUP_STARTS, PREPARED_COMMIT, PREPARED_GROUP, PREPARED_ROLLBACK, UNSURE, XA_END, TransactionMark,
    committed, transaction_mark, xid_of,
)

INNO, MYISAM = TableId("db", "inno"), TableId("db", "myisam")


def row(table: TableId, key: int) -> ChangeRecord:
    return ChangeRecord("c", table, (key,), None, {"id": key}, EventPosition("b.000001", key, 0), 0)


def mark(statement: str) -> TransactionMark:
    return transaction_mark(statement, EventPosition("b.000001", 999, 0))


def run(*items) -> list:
    """What stands, as (table, key) of each record and the kind of each mark passed on."""
    out = committed(items, lambda tables: ({t for t in tables if t == INNO}, set()))
    return [(r.table.table, r.key[0]) if isinstance(r, ChangeRecord) else (r.kind, sorted(t.table for t in r.tables))
            for r in out]


def test_a_rollback_to_a_savepoint_in_double_quotes_undoes_only_what_followed_it():
    """Under sql_mode ANSI_QUOTES the server writes the savepoint's name in double quotes."""
    got = run(GROUP_STARTS, row(INNO, 1), mark('SAVEPOINT "s"'), row(INNO, 2), row(MYISAM, 3),
              mark('ROLLBACK TO "s"'), row(INNO, 4), COMMITTED)
    assert got == [("inno", 1), ("myisam", 3), ("inno", 4)]


def test_savepoint_names_are_told_apart_whole():
    got = run(GROUP_STARTS, mark("SAVEPOINT a$b"), row(INNO, 1), mark("SAVEPOINT a$c"), row(INNO, 2),
              mark("ROLLBACK TO a$b"), COMMITTED)
    assert got == []


def test_a_rollback_that_is_not_read_re_snapshots_the_tables_it_may_have_undone():
    for unread in ("ROLLBACK TO nowhere", "ROLLBACK AND CHAIN", "SAVEPOINT"):
        got = run(GROUP_STARTS, row(INNO, 1), row(MYISAM, 2), mark(unread), COMMITTED)
        assert got == [("inno", 1), ("myisam", 2), (UNSURE, ["inno", "myisam"])], unread


def test_an_xa_transaction_rolled_back_in_its_own_group_is_a_rollback():
    """Without XA PREPARE its rows never counted (MariaDB writes no XA START statement in the group)."""
    assert run(GROUP_STARTS, row(INNO, 1), row(MYISAM, 2), mark("XA END X'31'"), mark("XA ROLLBACK X'31'")) == [
        (XA_END, []), ("myisam", 2)]


def test_xa_end_and_the_commit_of_a_prepared_transaction_are_passed_on_with_their_xid():
    """A chunk window compares them: the commit of a transaction it did not see end was prepared before it."""
    items = [GROUP_STARTS, row(INNO, 1), mark("XA END X'31',X'',1"), PREPARED_GROUP, GROUP_STARTS,
             mark("XA COMMIT X'31',X'',1"), GROUP_STARTS, mark("xa commit x'32', x'0a', 7")]
    got = list(committed(items, lambda tables: (set(tables), set())))
    marks = [(m.kind, m.xid) for m in got if isinstance(m, TransactionMark)]
    assert marks == [(XA_END, "x'31',x'',1"), (PREPARED_COMMIT, "x'31',x'',1"), (PREPARED_COMMIT, "x'32',x'0a',7")]
    assert xid_of(7, b"2", b"\n") == "x'32',x'0a',7"
    assert transaction_mark("XA COMMIT X'31' ONE PHASE").kind == "commit"


def test_the_rollback_of_a_prepared_xa_transaction_names_the_tables_this_read_saw_prepared():
    got = run(GROUP_STARTS, row(INNO, 1), PREPARED_GROUP, GROUP_STARTS, row(MYISAM, 2), COMMITTED,
              GROUP_STARTS, mark("XA ROLLBACK X'31'"))
    assert got == [("inno", 1), ("myisam", 2), (PREPARED_ROLLBACK, ["inno"])]


def test_a_rollback_of_a_table_whose_engine_then_is_not_known_keeps_its_rows_and_re_snapshots_it():
    """Its definition was created again after its rows (an ALTER TABLE, maybe of the engine): the engine the
    source has now may not be the one that judged the rollback."""
    items = [GROUP_STARTS, row(INNO, 1), row(MYISAM, 2), mark("ROLLBACK")]
    got = list(committed(items, lambda tables: ({INNO}, {MYISAM})))
    assert [(r.table.table, r.key[0]) for r in got[:-1]] == [("myisam", 2)]
    assert (got[-1].kind, got[-1].tables, got[-1].position) == (UNSURE, frozenset({MYISAM}), items[-1].position)
    assert "may have changed engine" in got[-1].detail
