"""The shadow tables of online schema change tools, followed so that their swap is one ALTER of the table.

gh-ost and pt-online-schema-change never ALTER the table they change. They create a shadow table as a copy of
its definition (gh-ost: ``_t_gho``, ``CREATE TABLE ... LIKE t``; pt-osc: ``_t_new``, from ``SHOW CREATE TABLE
t``), ALTER the shadow, copy the rows into it while keeping it in step with the table, and swap it in with one
atomic ``RENAME TABLE t TO _t_del, _t_gho TO t``. After the swap, ``t`` holds the same rows under the shadow's
definition. For the sinks that is the shadow's ALTER applied to ``t`` at the swap's position, and nothing
else: the shadow's own row events belong to a table that is not captured.

The stream notes every statement about a shadow of a captured table as it passes it (``ShadowStatement``, kept
in the state store by snapshot epoch). At the swap, ``swapped_in_changes`` gives the ALTER to apply, when the
shadow was created as a copy of the definition the table still had at the swap, then ALTERed by column changes
at most once, and nothing else changed it; otherwise it says why, and the swap stays the resync it always was.
The built version is then checked like any ALTER's, against every later TABLE_MAP, and its columns must be the
table's columns on the source now (``StreamEvolutions.record``). A swap is one RENAME that moves the table away
and the shadow in (``source.ddl.swapped_into``); a table truncated or dropped after its shadow was created
(EMPTIED notes) no longer holds what the shadow copied.

The row copy is the tool's: the sinks trust that the shadow holds the table's rows at the swap, as every CDC
system following these tools does. ``stream.schema_changes: resnapshot`` re-reads the table instead.
"""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Callable, Sequence

from airflow_cdc_provider.core.chunks import TableId
from airflow_cdc_provider.core.offsets import EventPosition
from airflow_cdc_provider.core.shadow_tables import (
    ALTERED, CREATED, CREATED_LIKE, OTHER, ShadowStatement, shadow_originals,
)
from airflow_cdc_provider.source.ddl import column_changes, named_tables, schema_changes, table_creation
from airflow_cdc_provider.source.table_versions import (
    ADD_COLUMN, DROP_COLUMN, MODIFY_COLUMN, RENAME_COLUMN, ColumnChange,
)

_HINT = re.compile(r"_gho|_new", re.IGNORECASE)  # cheap test before a statement is parsed
# an ALTER of the shadow naming a storage engine (anywhere, a comment's text included: it only costs a resync):
# the rows of a rollback are judged by the engine the table has when the stream reads them, so a swap that may
# change it is not followed (a CREATE of the shadow names the original's engine, as SHOW CREATE TABLE gave it)
_ENGINE = re.compile(r"\bENGINE\b", re.IGNORECASE)


def shadow_statements(statement: str, database: str | None,
                      captured: Callable[[TableId], bool]) -> list[ShadowStatement]:
    """What ``statement`` (run in ``database``) does to the shadow tables of the ``captured`` tables: one
    record for each shadow it creates, ALTERs or otherwise changes; [] for statements that leave every shadow's
    definition as it was (its triggers, ANALYZE, statements about other tables)."""
    if not _HINT.search(statement):
        return []
    out = []
    for shadow in sorted(named_tables(statement, database), key=str):
        for original in shadow_originals(shadow, captured):
            found = _shadow_statement(statement, database, shadow, original)
            if found is not None:
                out.append(found)
    return out


def _shadow_statement(statement: str, database: str | None, shadow: TableId,
                      original: TableId) -> ShadowStatement | None:
    note = ShadowStatement(shadow, original, OTHER, statement, database)
    creation = table_creation(statement, database)
    if creation is not None and creation.table == shadow:
        if creation.like == original:
            return replace(note, kind=CREATED_LIKE)
        if creation.columns is not None:
            return replace(note, kind=CREATED, columns=creation.columns)
        return note.refused(f"created like {creation.like}" if creation.like else
                            "created from a query, with a definition not read, or with a foreign key whose "
                            "actions change rows without row events")
    altered = column_changes(statement, database)
    if altered is not None and altered[0] == shadow:
        return note.refused("its storage engine set") if _ENGINE.search(statement) else replace(note, kind=ALTERED)
    effects = schema_changes(statement, database, lambda t: t == shadow)
    if not effects:
        return None
    return note.refused(effects[0].detail or effects[0].kind)


def swapped_in_changes(notes: Sequence[ShadowStatement], shadow: TableId, swap: EventPosition,
                       version_at: Callable[[EventPosition], int], version_before: int,
                       columns_before: Sequence[str],
                       emptied: Sequence[ShadowStatement] = ()) -> tuple[str, list[ColumnChange]] | str:
    """The ALTER (its statement, its column changes) that ``shadow`` swapped into its original's name at
    ``swap`` stands for, from the ``notes`` of the shadow the stream kept; a string says why there is none.
    ``version_at``: the number of the original's version in force at a position; ``version_before`` and
    ``columns_before``: its version in force just before the swap, and that version's column names;
    ``emptied``: the original's own EMPTIED notes (its truncates and drops)."""
    seen = sorted((n for n in notes if n.shadow == shadow and n.position is not None
                   and n.position.sort_key < swap.sort_key), key=lambda n: n.position.sort_key)
    created = [i for i, n in enumerate(seen) if n.kind in (CREATED_LIKE, CREATED)]
    unknown = [i for i, n in enumerate(seen) if n.kind == OTHER]
    if unknown and (not created or unknown[-1] > created[-1]):
        return f"the stream cannot tell what {shadow} holds: {seen[unknown[-1]].detail}"
    if not created:
        return f"the stream did not see {shadow} created"
    create, since = seen[created[-1]], seen[created[-1] + 1:]
    gone = next((n for n in emptied if create.position.sort_key < n.position.sort_key < swap.sort_key), None)
    if gone is not None:
        return f"{create.original} was emptied after {shadow} was created ({gone.detail})"
    if version_at(create.position) != version_before:
        return f"{create.original} was altered after {shadow} was created as a copy of it"
    if create.kind == CREATED and [c.lower() for c in create.columns] != [c.lower() for c in columns_before]:
        return (f"{shadow} was created with the columns {', '.join(create.columns)}, not as a copy of "
                f"{create.original} ({', '.join(columns_before)})")
    alters = []
    for note in since:
        parsed = column_changes(note.statement, note.database)
        if parsed is None:
            return f"{shadow} was altered by a statement not understood"
        if parsed[1]:
            alters.append((note.statement, parsed[1]))
    if len(alters) > 1:
        return f"{shadow} was altered {len(alters)} times (one ALTER is applied at the swap)"
    reused = _names_reused(alters[0][1]) if alters else []
    if reused:
        return (f"{shadow}'s ALTER gives the name of a column it drops or renames away to another column "
                f"({', '.join(reused)}): pt-online-schema-change copies that column's old values into it, gh-ost "
                "does not, and the binlog does not say which tool ran")
    return alters[0] if alters else (create.statement, [])


def _names_reused(changes: Sequence[ColumnChange]) -> list[str]:
    """Names an ALTER takes from one column (dropped, or renamed away) and gives to another (added, or renamed
    to): the tools' row copies differ there, pt-osc copying every column whose name both tables have."""
    moved = [c for c in changes if c.kind in (RENAME_COLUMN, MODIFY_COLUMN) and c.final_name.lower() != c.name.lower()]
    left = {c.name.lower() for c in changes if c.kind == DROP_COLUMN} | {c.name.lower() for c in moved}
    arrived = {c.name.lower() for c in changes if c.kind == ADD_COLUMN} | {c.final_name.lower() for c in moved}
    return sorted(left & arrived)
