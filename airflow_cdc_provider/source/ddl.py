"""What the statement of a binlog QUERY event does to the captured tables (``core.schema_changes``).

With row-based logging every change of rows arrives as a row event; QUERY events carry the other statements.
A few of those change a captured table without any row event, so the stream must apply them at their
position:

* ``truncate``: TRUNCATE TABLE;
* ``drop``: DROP TABLE, a rename to another name;
* ``resync``: an ALTER TABLE that adds, drops, changes or retypes columns or moves rows between tables, a
  table renamed into a captured name (gh-ost and pt-online-schema-change swap tables so), a captured name
  created again (CREATE TABLE after its drop, MariaDB's CREATE OR REPLACE TABLE), a primary key added or
  dropped (the sinks key rows by it), a foreign key added whose ON DELETE/UPDATE action changes the table's rows
  (CASCADE, SET NULL, SET DEFAULT: InnoDB changes them without row events, so the table is held and the re-snapshot's
  validation refuses it), the table's default character set or collation changed (what later ALTERs mean depends
  on it), the table moved to a storage engine whose rows change without its row events, a statement about the
  table that cannot be classified.

Everything else (indexes, constraints, triggers, views, grants, other table options) leaves the row images as
they are and yields nothing.

Statements are read with sqlglot's MySQL dialect. Its tokenizer deals with quoting, comments and the case of
keywords for every statement; its parse trees give TRUNCATE, DROP TABLE and the specifications of ALTER TABLE.
What sqlglot keeps as an unparsed ``Command`` or rejects (RENAME TABLE, CONVERT TO CHARACTER SET, partition
operations, MariaDB's ``WAIT n``) is read from its tokens by the MySQL grammar of the statement, as are the
fixed heads of statements (``CREATE [OR REPLACE] [TEMPORARY] TABLE t``, ``DROP INDEX i ON t``). A statement
that names a captured table and that neither reading understands is a resync of that table: nothing is skipped
for not being understood.

``column_changes`` reads the same ALTER TABLE for the stream's in-place schema evolution
(``source.schema_evolution``): the column specifications of an ALTER that changes nothing else the row images
show, as written; None for any other statement, which stays a resync. ``table_creation`` and ``swapped_into``
read a CREATE TABLE and a RENAME TABLE for following online schema change tools' shadow tables
(``source.online_schema_change``).

Names are case-sensitive (``lower_case_table_names=0``); an unqualified name is in the QUERY event's current
database. MySQL's executable comments (``/*!50001 ...*/``, MariaDB's ``/*M!100301 ...*/``) are read as
executed: the server that logged the statement ran them. MariaDB's ``SET STATEMENT var=value FOR <statement>``
is read as the statement it runs.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Callable, Iterable, Iterator

import sqlglot
from sqlglot import exp
from sqlglot.dialects.mysql import MySQL
from sqlglot.errors import SqlglotError
from sqlglot.tokens import Token, TokenType

from airflow_cdc_provider.core.chunks import TableId
from airflow_cdc_provider.core.schema_changes import DROP, RESYNC, TRUNCATE, SchemaChange, shorten
from airflow_cdc_provider.source.sql import unquote_ident
from airflow_cdc_provider.source.table_versions import (
    ADD_COLUMN, DROP_COLUMN, MODIFY_COLUMN, RENAME_COLUMN, ColumnChange,
)

NOT_UNDERSTOOD = "statement not understood"
ROWS_WITHOUT_ROW_EVENTS = "rows changed by a statement logged as SQL, not as row events"
CREATED_AGAIN = "created again under a definition its row events may not show"

# (kind, table, detail) for any table, and a rename's drop also the new name; only the captured tables' become
# SchemaChanges
_Change = tuple[str, TableId, str] | tuple[str, TableId, str, TableId]

# statements that change no table, recognised before anything is tokenized (BEGIN NOT ATOMIC is MariaDB's
# compound statement, not a transaction)
_NO_TABLE_CHANGE = re.compile(
    r"\s*(?:(?:BEGIN|COMMIT|ROLLBACK|SAVEPOINT|RELEASE|XA)\b(?!\s+NOT\s+ATOMIC)|# Dummy event|$)", re.IGNORECASE
)
_EXECUTABLE_COMMENT = re.compile(r"/\*M?!(?:\d{5,6})?(.*?)\*/", re.DOTALL)
_WORD = re.compile(r"[\w$]+")
_STATEMENT_WORD = re.compile(r"\bSTATEMENT\b", re.IGNORECASE)
# a possibly qualified, possibly quoted name, for statements sqlglot's tokenizer rejects
_QUOTED_OR_BARE = r"(?:`(?:[^`]|``)+`|\"(?:[^\"]|\"\")+\"|[\w$]+)"  # "name": a name under ANSI_QUOTES
_DOTTED_NAME = re.compile(rf"{_QUOTED_OR_BARE}(?:\s*\.\s*{_QUOTED_OR_BARE})*")

# objects whose statements change no rows of any table (DROP DATABASE: see ``dropped_database``)
_ROWLESS_KINDS = frozenset({
    "VIEW", "TRIGGER", "PROCEDURE", "FUNCTION", "EVENT", "USER", "ROLE", "SERVER", "TABLESPACE", "LOGFILE",
    "DATABASE", "SCHEMA", "INSTANCE", "RESOURCE", "PACKAGE", "SEQUENCE",
})
_KINDS = _ROWLESS_KINDS | {"TABLE", "TABLES", "INDEX"}
# words that begin an object's definition, after the kind of object
_DEFINITION_STARTS = frozenset({"ON", "AS", "(", "LIKE", "SELECT", "FROM"})
# statements that change no rows and no definition
_NO_EFFECT_VERBS = frozenset({
    "GRANT", "REVOKE", "SET", "FLUSH", "ANALYZE", "OPTIMIZE", "REPAIR", "CHECK", "CHECKSUM", "INSTALL",
    "UNINSTALL", "RESET", "PURGE", "CACHE",
})
# statements that change rows: logged as SQL only under statement-based or mixed logging
_ROW_VERBS = frozenset({"INSERT", "REPLACE", "UPDATE", "DELETE", "LOAD"})
# partition operations that leave every row in the table (new partitions start empty)
_ROW_KEEPING_PARTITION_OPS = frozenset({"ADD", "ANALYZE", "CHECK", "OPTIMIZE", "REBUILD", "REPAIR"})
# table options of sqlglot's ALTER TABLE trees that leave the rows as they are
_ROW_KEEPING_OPTIONS = (
    exp.EngineProperty, exp.SchemaCommentProperty, exp.AutoIncrementProperty, exp.RowFormatProperty,
    exp.AlgorithmProperty, exp.LockProperty, exp.ForceProperty, exp.Order,
)
# table options that set the table's default character set or collation, which the rows keep. A column a later
# ALTER types without a character set takes that default, and the stream reads it from the table when it
# reaches that ALTER (``source.schema_evolution``): it is the default the ALTER met only while no such option
# lies between them, so one is a resync
_DEFAULT_CHARSET_OPTIONS = (exp.CharacterSetProperty, exp.CollateProperty)
_DEFAULT_CHARSET_CHANGE = "default character set"
# storage engines whose tables change only by statements of this server, each logged as row events of the table;
# a table moved to another (BLACKHOLE keeps no rows, MERGE shows other tables' rows, FEDERATED, CONNECT and SPIDER
# another server's) is held, and validation refuses it
_QUOTES = "'\"`"
ROW_LOGGING_ENGINES = frozenset({"INNODB", "ARIA", "MYISAM", "MEMORY", "HEAP", "CSV", "ARCHIVE", "ROCKSDB", "S3",
                                 "MROONGA"})
# table options sqlglot does not parse, that leave the rows as they are
_ROW_KEEPING_OPTION_WORDS = frozenset({("CHECKSUM",), ("TABLESPACE",), ("DATA", "DIRECTORY"), ("INDEX", "DIRECTORY")})
# ALTER TABLE ... ADD <word>: an index or a constraint, which leaves the rows as they are (unless PRIMARY; a foreign
# key's row-changing actions: see ``_Reader.row_changing_actions``)
_ADDED_INDEXES = frozenset({"INDEX", "KEY", "UNIQUE", "FULLTEXT", "SPATIAL", "FOREIGN KEY", "CHECK", "CONSTRAINT"})
# a foreign key's action that changes the referencing rows when the referenced ones change, in a statement's keywords
ROW_CHANGING_ACTION = re.compile(r"\bON (DELETE|UPDATE) (CASCADE|SET NULL|SET DEFAULT)\b")


def mentions_captured(statement: str, names: Iterable[str]) -> bool:
    """Whether one of the captured tables' bare ``names`` occurs in ``statement``, as is or quoted: the cheap test
    run on every QUERY event before anything is parsed. It may say yes for a statement that does not name the table
    (the classification then finds nothing), never no for one that does."""
    return any(written in statement for name in names for written in _as_written(name))


def _as_written(name: str) -> tuple[str, ...]:
    """``name`` as a statement may write it: inside quotes, the quote character it holds is doubled (`` `a``b` ``,
    and ``"a""b"`` under ANSI_QUOTES)."""
    if "`" not in name and '"' not in name:
        return (name,)
    return name, name.replace("`", "``"), name.replace('"', '""')


def schema_changes(statement: str, default_database: str | None,
                   captured: Callable[[TableId], bool]) -> list[SchemaChange]:
    """The net effect of ``statement`` (a QUERY event's, run in ``default_database``) on each captured table, in
    statement order; [] when it changes none. DROP DATABASE yields nothing here: see ``dropped_database``."""
    if _NO_TABLE_CHANGE.match(statement):
        return []
    sql = _executed(statement)
    try:
        reader = _Reader.of(sql, default_database)
    except SqlglotError:
        changes = [(RESYNC, t, NOT_UNDERSTOOD) for t in _names_in_text(sql, default_database)]
    else:
        changes = _classify(reader)
    return _captured_changes(changes, statement, captured)


def dropped_database(statement: str) -> str | None:
    """The database a DROP DATABASE (or DROP SCHEMA, or CREATE OR REPLACE DATABASE) statement drops, else None.
    The caller drops every captured table of that database: which tables it held is known to the caller only, so
    ``schema_changes`` returns nothing for the statement."""
    if _NO_TABLE_CHANGE.match(statement):
        return None
    try:
        reader = _Reader.of(_executed(statement), None)
    except SqlglotError:
        return None
    if reader.word("DROP") is not None:
        if reader.word("DATABASE", "SCHEMA") is None:
            return None
        reader.words("IF", "EXISTS")
    elif not (reader.words("CREATE", "OR", "REPLACE") and reader.word("DATABASE", "SCHEMA")):
        return None  # CREATE OR REPLACE DATABASE drops the database first
    if not reader.at_end() and reader.may_name(reader.tokens[reader.i]):  # "db": a name under ANSI_QUOTES
        return reader.tokens[reader.i].text
    return None


def column_changes(statement: str, default_database: str | None) -> tuple[TableId, list[ColumnChange]] | None:
    """The table and the column changes, in statement order, of an ALTER TABLE whose specifications all add, drop,
    rename or redefine columns or leave the row images as they are (indexes and constraints other than the
    primary key, ALTER COLUMN ... SET/DROP DEFAULT, table options, ALGORITHM=, LOCK=). None for any other
    statement (one adding a foreign key whose actions change rows too), and for one not understood in every part:
    the caller keeps the resync, which is always right."""
    if _NO_TABLE_CHANGE.match(statement):
        return None
    try:
        reader = _Reader.of(_executed(statement), default_database)
        if reader.word("ALTER") is None:
            return None
        reader.word("ONLINE", "OFFLINE")
        if reader.word("IGNORE") is not None or reader.word("TABLE") is None:
            return None
        reader.words("IF", "EXISTS")
        table = reader.table()
        reader.lock_wait()
        if reader.row_changing_actions():
            return None
        changes: list[ColumnChange] = []
        for clause in reader.clauses():
            found = _clause_column_changes(clause)
            if found is None:
                return None
            changes += found
    except (SqlglotError, _NotUnderstood):
        return None
    return table, changes


@dataclass(frozen=True)
class TableCreation:
    """What a plain CREATE TABLE creates: ``table``, as a copy of ``like``'s definition (CREATE TABLE ... LIKE),
    or with the columns ``columns`` (its column definitions, by name, in order); both None when it is neither
    (CREATE ... SELECT, IF NOT EXISTS, a definition not parsed, or one with a foreign key whose actions change
    rows: see ``_Reader.row_changing_actions``)."""

    table: TableId
    like: TableId | None = None
    columns: tuple[str, ...] | None = None


def table_creation(statement: str, default_database: str | None) -> TableCreation | None:
    """The table a CREATE TABLE statement creates (not a TEMPORARY one, not CREATE OR REPLACE); None for any
    other statement."""
    if _NO_TABLE_CHANGE.match(statement):
        return None
    sql = _executed(statement)
    try:
        reader = _Reader.of(sql, default_database)
        if reader.word("CREATE") is None or reader.words("OR", "REPLACE") or reader.word("TEMPORARY"):
            return None
        if reader.word("TABLE") is None:
            return None
        if reader.words("IF", "NOT", "EXISTS"):  # an existing table of the name stays as it was
            return TableCreation(reader.table())
        table = reader.table()
        parenthesised = not reader.at_end() and reader.tokens[reader.i].token_type is TokenType.L_PAREN
        if parenthesised and reader.peek(1) == "LIKE":
            reader.i += 1
        if reader.word("LIKE"):
            like = reader.table()
            if parenthesised and not reader.at_end() and reader.tokens[reader.i].token_type is TokenType.R_PAREN:
                reader.i += 1
            return TableCreation(table, like=like) if reader.at_end() else TableCreation(table)
        if reader.row_changing_actions():
            return TableCreation(table)
    except (SqlglotError, _NotUnderstood):
        return None
    tree = _parse(sql)
    if isinstance(tree, exp.Create) and isinstance(tree.this, exp.Schema) and tree.expression is None:
        columns = tuple(e.name for e in tree.this.expressions if isinstance(e, exp.ColumnDef))
        if columns:  # the other definitions are indexes and constraints
            return TableCreation(table, columns=columns)
    return TableCreation(table)


def named_tables(statement: str, default_database: str | None) -> set[TableId]:
    """Every table ``statement`` may name (see ``_Reader.mentioned``: it may say too much, never too little)."""
    sql = _executed(statement)
    try:
        return set(_Reader.of(sql, default_database).mentioned())
    except SqlglotError:
        return set(_names_in_text(sql, default_database))


def _executed(statement: str) -> str:
    """The statement as run: its executable comments opened (their text is part of the statement) and MariaDB's
    ``SET STATEMENT var=value, ... FOR`` taken off (it only sets variables for the statement that follows)."""
    if "/*" in statement:
        statement = _EXECUTABLE_COMMENT.sub(lambda m: f" {m.group(1)} ", statement)
    return _without_statement_variables(statement)


def _without_statement_variables(sql: str) -> str:
    """The statement after ``SET STATEMENT ... FOR``; ``sql`` itself when it has no such prefix (or cannot be
    tokenized: the caller's own reading then fails the same way and resyncs what the text names)."""
    if not _STATEMENT_WORD.search(sql):
        return sql
    try:
        tokens = _Tokenizer(dialect=MySQL).tokenize(sql)
    except SqlglotError:
        return sql
    if len(tokens) < 2 or [t.text.upper() if _is_bare(t) else None for t in tokens[:2]] != ["SET", "STATEMENT"]:
        return sql
    depth = 0
    for token in tokens[2:]:  # the values are expressions: a FOR of a subquery is inside parentheses
        depth += (token.token_type is TokenType.L_PAREN) - (token.token_type is TokenType.R_PAREN)
        if depth == 0 and _is_bare(token) and token.text.upper() == "FOR":
            return sql[token.end + 1:]
    return sql


def _captured_changes(changes: Iterable[_Change], statement: str,
                      captured: Callable[[TableId], bool]) -> list[SchemaChange]:
    """The changes of captured tables, one per table (the first: classifiers list each table's net effect
    first), in statement order."""
    seen: set[TableId] = set()
    result = []
    for kind, table, detail, *renamed_to in changes:
        if table not in seen and captured(table):
            seen.add(table)
            result.append(SchemaChange(kind, table, statement, detail, renamed_to=next(iter(renamed_to), None)))
    return result


def _classify(reader: _Reader) -> list[_Change]:
    """The changes a statement makes, by its first word; a resync of each table it names when it is not
    understood."""
    verb = reader.word()
    if verb is None:  # nothing but comments
        return []
    handler = _HANDLERS.get(verb)
    try:
        changes = handler(reader) if handler is not None else None
    except (SqlglotError, _NotUnderstood):
        changes = None
    if changes is None:
        return [(RESYNC, t, NOT_UNDERSTOOD) for t in reader.mentioned()]
    return changes


class _NotUnderstood(Exception):
    """The statement does not follow the grammar its first words announce."""


class _Tokenizer(MySQL.Tokenizer):
    """MySQL's tokenizer reading every statement as tokens: sqlglot's own keeps the rest of RENAME, REPLACE and a
    few others as one string, to parse them as a ``Command``."""

    COMMANDS: set[TokenType] = set()


def _is_bare(token: Token) -> bool:
    """A keyword or an unquoted name (not a quoted name, a string or a number)."""
    return token.token_type is not TokenType.IDENTIFIER and not _is_literal(token)


def _is_literal(token: Token) -> bool:
    return token.token_type is TokenType.NUMBER or token.token_type.name.endswith("STRING")


def _is_name(token: Token) -> bool:
    return token.token_type is TokenType.IDENTIFIER or (not _is_literal(token) and bool(_WORD.fullmatch(token.text)))


@dataclass
class _Reader:
    """A statement's tokens, read left to right by the grammar of the statement."""

    sql: str
    tokens: list[Token]
    default_database: str | None
    i: int = 0

    @classmethod
    def of(cls, sql: str, default_database: str | None) -> _Reader:
        return cls(sql, _Tokenizer(dialect=MySQL).tokenize(sql), default_database)

    def peek(self, ahead: int = 0) -> str | None:
        """The keyword ``ahead`` tokens on, in upper case (sqlglot makes one token of a few pairs of words:
        ``PRIMARY KEY``, ``PARTITION BY``, ``ORDER BY``); None past the end and for names in quotes."""
        j = self.i + ahead
        if j >= len(self.tokens) or not _is_bare(self.tokens[j]):
            return None
        return self.tokens[j].text.upper()

    def word(self, *words: str) -> str | None:
        """The next keyword if it is one of ``words`` (any keyword when none are given), consumed."""
        found = self.peek()
        if found is None or (words and found not in words):
            return None
        self.i += 1
        return found

    def words(self, *sequence: str) -> bool:
        """Whether the next keywords are ``sequence``, consumed if they are (all or nothing)."""
        if any(self.peek(k) != w for k, w in enumerate(sequence)):
            return False
        self.i += len(sequence)
        return True

    def skip_past(self, word: str) -> None:
        """Moves past the next keyword ``word``."""
        while not self.at_end():
            self.i += 1
            if _is_bare(self.tokens[self.i - 1]) and self.tokens[self.i - 1].text.upper() == word:
                return
        raise _NotUnderstood(f"{word} was expected")

    def at_end(self) -> bool:
        return self.i >= len(self.tokens)

    def comma(self) -> bool:
        if not self.at_end() and self.tokens[self.i].token_type is TokenType.COMMA:
            self.i += 1
            return True
        return False

    def identifier(self) -> str | None:
        """One name (quoted or bare), consumed."""
        if self.at_end() or not _is_name(self.tokens[self.i]):
            return None
        self.i += 1
        return self.tokens[self.i - 1].text

    def table(self) -> TableId:
        """A table name, ``t``, ``db.t``, `` `db`.`t` ``, consumed."""
        parts = [self.identifier()]
        while (parts[-1] is not None and not self.at_end() and self.tokens[self.i].token_type is TokenType.DOT):
            self.i += 1
            parts.append(self.identifier())
        if None in parts or len(parts) > 2:
            raise _NotUnderstood("a table name was expected")
        return self.table_id(parts[-2] if len(parts) == 2 else None, parts[-1])

    def tables(self) -> list[TableId]:
        """Comma-separated table names, consumed."""
        names = [self.table()]
        while self.comma():
            names.append(self.table())
        return names

    def table_id(self, database: str | None, table: str) -> TableId:
        """An unqualified name is in the current database (none: the name cannot be a captured table's)."""
        return TableId(database or self.default_database or "", table)

    def resolve(self, table: exp.Table) -> TableId:
        """A table of a sqlglot tree."""
        if table.catalog:
            raise _NotUnderstood(f"{table.sql('mysql')} is not a table name")
        return self.table_id(table.db or None, table.name)

    def lock_wait(self) -> None:
        """Skips MariaDB's ``WAIT n`` / ``NOWAIT`` (how long to wait for the table's lock)."""
        if self.peek() == "WAIT" and self.i + 1 < len(self.tokens) and (
                self.tokens[self.i + 1].token_type is TokenType.NUMBER):
            self.i += 2
        else:
            self.word("NOWAIT")

    def object_kind(self) -> str | None:
        """What a CREATE, ALTER or DROP is about (TABLE, INDEX, TRIGGER, ...): the first such keyword, after
        whatever options precede it (``OR REPLACE``, ``DEFINER=...``, ``TEMPORARY``, ``UNIQUE``), and before
        the object's definition begins (an unknown kind of object may well mention a table there)."""
        for j in range(self.i, len(self.tokens)):
            word = self.tokens[j].text.upper() if _is_bare(self.tokens[j]) else None
            if word in _KINDS:
                return word
            if word in _DEFINITION_STARTS:
                return None
        return None

    def rest(self) -> str:
        """The statement's text from the current token on (comments around it left out)."""
        if self.at_end():
            return ""
        return self.sql[self.tokens[self.i].start: self.tokens[-1].end + 1]

    def part(self, start: int, end: int) -> _Reader:
        return _Reader(self.sql, self.tokens[start:end], self.default_database)

    def clauses(self) -> Iterator[_Reader]:
        """The comma-separated specifications of an ALTER TABLE from here on. A partition operation or ORDER BY
        takes the rest: its lists (of partitions, of columns) are comma-separated too, and it comes last."""
        start, depth = self.i, 0
        for j in range(self.i, len(self.tokens)):
            kind = self.tokens[j].token_type
            if kind is TokenType.L_PAREN:
                depth += 1
            elif kind is TokenType.R_PAREN:
                depth -= 1
            elif kind is TokenType.COMMA and depth == 0 and not self.part(start, j).takes_rest():
                yield self.part(start, j)
                start = j + 1
        if start < len(self.tokens):
            yield self.part(start, len(self.tokens))

    def skip_past_parenthesis(self) -> None:
        """Moves past the parenthesised list that starts here."""
        depth = 0
        while not self.at_end():
            kind = self.tokens[self.i].token_type
            self.i += 1
            depth += (kind is TokenType.L_PAREN) - (kind is TokenType.R_PAREN)
            if depth == 0:
                return
        raise _NotUnderstood(") was expected")

    def takes_rest(self) -> bool:
        return _is_partition_clause(self.peek(), self.peek(1)) or self.peek() == "ORDER BY"

    def row_changing_actions(self) -> list[str]:
        """The foreign key actions from here on that change this table's rows when the rows they reference change
        (``ON DELETE CASCADE``, ``ON UPDATE SET NULL``, ...). InnoDB takes them inside the engine and MariaDB logs
        no row event for them, so the sink would keep rows the source deleted or changed."""
        words = " ".join(t.text.upper() if _is_bare(t) else "?" for t in self.tokens[self.i:])
        return [f"ON {event} {action}" for event, action in ROW_CHANGING_ACTION.findall(words)]

    def all_words(self) -> set[str]:
        """The keywords from here on, word by word (sqlglot makes one token of PRIMARY KEY, PARTITION BY, ...)."""
        return {w for t in self.tokens[self.i:] if _is_bare(t) for w in t.text.upper().split()}

    def mentioned(self) -> Iterator[TableId]:
        """Every table the whole statement may name: each dotted name as ``db.t`` and each part as a table of the
        current database. Columns or other objects named like a table only make it say too much."""
        j = 0
        while j < len(self.tokens):
            if not self.may_name(self.tokens[j]):
                j += 1
                continue
            parts = [self.tokens[j].text]
            j += 1
            while (j + 1 < len(self.tokens) and self.tokens[j].token_type is TokenType.DOT
                   and self.may_name(self.tokens[j + 1])):
                parts.append(self.tokens[j + 1].text)
                j += 2
            yield from _tables_of_name(parts, self.default_database)

    def may_name(self, token: Token) -> bool:
        """A name, or a string in double quotes: a name under the sql_mode ANSI_QUOTES (or ORACLE), which the
        statement's session may have had."""
        quoted = self.sql[token.start:token.start + 1] == '"'
        return _is_name(token) or (token.token_type is TokenType.STRING and quoted)


def _tables_of_name(parts: list[str], default_database: str | None) -> Iterator[TableId]:
    """The tables a dotted name may stand for: ``db.t`` for each pair of parts, ``t`` in the current database
    for each part (``t.c`` is column ``c`` of ``t``)."""
    for k, part in enumerate(parts):
        if k + 1 < len(parts):
            yield TableId(part, parts[k + 1])
        if default_database:
            yield TableId(default_database, part)


def _names_in_text(sql: str, default_database: str | None) -> Iterator[TableId]:
    """The tables a statement sqlglot cannot even tokenize may name, read from its text."""
    for match in _DOTTED_NAME.finditer(sql):
        parts = [p.strip() for p in re.findall(_QUOTED_OR_BARE, match.group())]
        names = [unquote_ident(p) for p in parts]
        yield from _tables_of_name(names, default_database)


def _parse(sql: str) -> exp.Expression | None:
    """sqlglot's tree of ``sql`` (an ``exp.Command`` when it keeps the statement unparsed); None when it
    rejects it."""
    try:
        return sqlglot.parse_one(sql, read="mysql")
    except Exception:  # sqlglot raises more than ParseError on input it does not expect
        return None


def _not_understood(text: str) -> str:
    return f"{shorten(text, 80)} (not understood)"


def _no_effect(reader: _Reader) -> list[_Change]:
    """Statistics, maintenance, privileges, variables: rows and columns stay as they are."""
    return []


def _rows_changed(reader: _Reader) -> list[_Change]:
    """INSERT, UPDATE, ... as a QUERY event: its rows have no row events (statement-based or mixed logging), so
    every table it names is read again."""
    return [(RESYNC, t, ROWS_WITHOUT_ROW_EVENTS) for t in reader.mentioned()]


def _truncate(reader: _Reader) -> list[_Change] | None:
    """TRUNCATE [TABLE] t: every row is gone, without a row event."""
    tree = _parse(reader.sql)
    if isinstance(tree, exp.TruncateTable):
        tables = [reader.resolve(t) for t in tree.expressions]
    else:  # with MariaDB's WAIT n / NOWAIT, sqlglot keeps it as a Command
        reader.word("TABLE")
        tables = [reader.table()]
        reader.lock_wait()
        if not reader.at_end():
            return None
    return [(TRUNCATE, t, "truncated") for t in tables]


def _drop(reader: _Reader) -> list[_Change] | None:
    """DROP of a table, an index or an object without rows."""
    kind = reader.object_kind()
    if kind in ("TABLE", "TABLES"):
        return _drop_tables(reader)
    if kind == "INDEX":
        return _drop_index(reader)
    return [] if kind in _ROWLESS_KINDS else None


def _drop_tables(reader: _Reader) -> list[_Change] | None:
    """DROP [TEMPORARY] TABLE [IF EXISTS] a, b: each table leaves the source. A temporary table is no captured
    table (it hides the captured table of its name in its own session only)."""
    tree = _parse(reader.sql)
    if isinstance(tree, exp.Drop) and tree.args.get("kind") == "TABLE":
        if tree.args.get("temporary"):
            return []
        tables = [reader.resolve(t) for t in tree.args.get("tables") or ()]
    else:  # with MariaDB's WAIT n / NOWAIT, sqlglot rejects it
        if reader.word("TEMPORARY"):
            return []
        reader.word("TABLE", "TABLES")
        reader.words("IF", "EXISTS")
        tables = reader.tables()
        reader.lock_wait()
        reader.word("RESTRICT", "CASCADE")
        if not reader.at_end():
            return None
    return [(DROP, t, "dropped") for t in tables]


def _drop_index(reader: _Reader) -> list[_Change] | None:
    """DROP INDEX i ON t leaves the rows as they are, unless i is the primary key, which the sinks key rows by.
    Read from tokens: sqlglot rejects the ALGORITHM= and LOCK= options."""
    reader.word("ONLINE", "OFFLINE")
    reader.word("INDEX")
    reader.words("IF", "EXISTS")
    index = reader.identifier()
    if index is None:
        return None
    if index.upper() != "PRIMARY":
        return []
    if reader.word("ON") is None:
        return None
    return [(RESYNC, reader.table(), "drop primary key")]


def _create(reader: _Reader) -> list[_Change] | None:
    """CREATE TABLE of a captured name creates it again (a logged CREATE, even with IF NOT EXISTS, created the
    table: MariaDB does not log one that finds the table there): a resync, as its definition may differ from the
    one the stream has for the name in ways its row events do not show (a FLOAT's scale, a BINARY's length).
    MariaDB's CREATE OR REPLACE TABLE replaces the table: a resync too, whose re-snapshot replaces the sink's rows.
    Read from the statement's head, so a column list sqlglot does not know changes nothing."""
    kind = reader.object_kind()
    if kind != "TABLE":
        return [] if kind in _ROWLESS_KINDS or kind == "INDEX" else None
    replaces = reader.words("OR", "REPLACE")
    if reader.word("TEMPORARY"):
        return []
    if reader.word("TABLE") is None:
        return None
    reader.words("IF", "NOT", "EXISTS")
    return [(RESYNC, reader.table(), "replaced by CREATE OR REPLACE TABLE" if replaces else CREATED_AGAIN)]


def _rename(reader: _Reader) -> list[_Change] | None:
    """RENAME TABLE a TO b [, c TO d ...], read from tokens (sqlglot keeps it as a Command)."""
    if reader.word("USER"):
        return []
    moves = _rename_moves(reader)
    return None if moves is None else _renames(moves)


def _rename_moves(reader: _Reader) -> list[tuple[TableId, TableId]] | None:
    """The (from, to) pairs of RENAME TABLE, after its first word, in order; None when not understood."""
    if reader.word("TABLE", "TABLES") is None:
        return None
    moves = []
    while True:
        reader.words("IF", "EXISTS")
        source = reader.table()
        reader.lock_wait()
        if reader.word("TO") is None:
            return None
        moves.append((source, reader.table()))
        if not reader.comma():
            break
    return moves if reader.at_end() else None


def _holders(moves: list[tuple[TableId, TableId]]) -> dict[TableId, TableId | None]:
    """Each name the renames touch -> the original name of the table it holds after them (None: no table)."""
    holds: dict[TableId, TableId | None] = {}
    for source, target in moves:
        holds.setdefault(source, source)
        holds.setdefault(target, None)
        holds[target], holds[source] = holds[source], None
    return holds


def swapped_into(statement: str, default_database: str | None, table: TableId) -> TableId | None:
    """The table a RENAME TABLE statement swaps into ``table``'s name, as it was named before, when the same
    statement moves ``table``'s own table to another name (gh-ost and pt-online-schema-change swap their altered
    copy in so, atomically); None for any other statement, and for a rename into a name left empty before it
    (``table`` dropped first, or renamed away by another statement)."""
    try:
        reader = _Reader.of(_executed(statement), default_database)
        if reader.word("RENAME") is None:
            return None
        moves = _rename_moves(reader)
    except (SqlglotError, _NotUnderstood):
        return None
    holds = _holders(moves or [])
    original = holds.get(table)
    if original is None or original == table or table not in holds.values():
        return None
    return original


def _renames(moves: list[tuple[TableId, TableId]]) -> list[_Change]:
    """The net effect of renames applied in order, per name: a name whose table left and that got no other is a
    drop; a name holding another table at the end is a resync, and no drop (gh-ost and pt-online-schema-change
    swap the altered copy in so); a name holding its own table again is unchanged."""
    holds = _holders(moves)  # name -> the original name of the table it holds now
    now_at = {original: name for name, original in holds.items() if original is not None}
    changes = []
    for name, original in holds.items():
        if original is None and name in now_at:
            changes.append((DROP, name, f"renamed to {now_at[name]}", now_at[name]))
        elif original is not None and original != name:
            changes.append((RESYNC, name, f"replaced by {original} (renamed)"))
    return changes


@dataclass
class _AlterEffect:
    """What one ALTER TABLE does: its changes of rows or columns in words, the table's new name, the other tables
    it changes (EXCHANGE PARTITION)."""

    table: TableId
    changes: list[str] = field(default_factory=list)
    renamed_to: TableId | None = None
    others: list[_Change] = field(default_factory=list)

    def result(self) -> list[_Change]:
        """Renamed, the table is gone under its name and its new name holds another table, whatever else changed;
        otherwise a change of rows or columns is a resync."""
        if self.renamed_to is not None and self.renamed_to != self.table:
            return _renames([(self.table, self.renamed_to)]) + self.others
        own = [(RESYNC, self.table, ", ".join(self.changes))] if self.changes else []
        return own + self.others


def _alter(reader: _Reader) -> list[_Change] | None:
    """ALTER [ONLINE] [IGNORE] TABLE [IF EXISTS] t [WAIT n] spec, spec, ...: sqlglot parses the specifications
    after the head (it rejects ONLINE, IGNORE and WAIT); when it cannot parse them together, each on its own."""
    reader.word("ONLINE", "OFFLINE")
    ignore = reader.word("IGNORE")
    if reader.word("TABLE") is None:
        return [] if reader.object_kind() in _ROWLESS_KINDS else None
    reader.words("IF", "EXISTS")
    effect = _AlterEffect(reader.table())
    if ignore is not None:  # a unique key it adds deletes duplicate rows, without row events
        effect.changes.append("alter ignore")
    reader.lock_wait()
    actions = reader.row_changing_actions()
    tree = _parse(f"ALTER TABLE t {reader.rest()}")
    if isinstance(tree, exp.Alter):
        _read_alter_tree(tree, effect, reader)
    else:
        for clause in reader.clauses():
            _read_alter_clause(clause, effect)
    if actions:  # held: the re-snapshot's validation refuses the table
        effect.changes.append(f"add foreign key with {' and '.join(actions)} (its changes are not in the binlog)")
    return effect.result()


def _read_alter_clause(clause: _Reader, effect: _AlterEffect) -> None:
    """One specification, parsed by sqlglot if it can, else read by its keywords."""
    tree = _parse(f"ALTER TABLE t {clause.rest()}")
    if isinstance(tree, exp.Alter):
        _read_alter_tree(tree, effect, clause)
    else:
        _read_alter_words(clause, effect)


def _read_alter_tree(tree: exp.Alter, effect: _AlterEffect, reader: _Reader) -> None:
    """sqlglot's actions and table options of an ALTER TABLE."""
    for action in tree.args.get("actions") or ():
        if isinstance(action, exp.AlterRename):
            effect.renamed_to = reader.resolve(action.this)
        elif (change := _action_change(action)) is not None:
            effect.changes.append(change)
    for option in tree.args.get("options") or ():
        if isinstance(option, _DEFAULT_CHARSET_OPTIONS):
            if _DEFAULT_CHARSET_CHANGE not in effect.changes:  # CHARACTER SET x COLLATE y: two options
                effect.changes.append(_DEFAULT_CHARSET_CHANGE)
        elif not _keeps_rows(option):
            if isinstance(option, exp.EngineProperty):
                effect.changes.append(f"moved to the {option.name.strip(_QUOTES)} storage engine, whose rows change "
                                      "without row events of the table")
            else:
                effect.changes.append(_not_understood(option.sql("mysql")))


def _keeps_rows(option: exp.Expression) -> bool:
    """A table option of sqlglot's tree known to leave the rows as they are: ENGINE= one of ROW_LOGGING_ENGINES,
    COMMENT=, AUTO_INCREMENT=, ROW_FORMAT=, ALGORITHM=, LOCK=, FORCE, ORDER BY and the plain ``NAME=value``
    options (KEY_BLOCK_SIZE=, STATS_PERSISTENT=, ...). Any other kind of option (one sqlglot may learn to parse,
    such as PARTITION BY) is not known to."""
    if isinstance(option, exp.EngineProperty):
        return option.name.strip(_QUOTES).upper() in ROW_LOGGING_ENGINES
    return type(option) is exp.Property or isinstance(option, _ROW_KEEPING_OPTIONS)


def _action_change(action: exp.Expression) -> str | None:
    """An ALTER TABLE action of sqlglot's tree in words when it changes rows, columns or the primary key; None when
    the row images stay as they are (indexes, constraints, defaults, options)."""
    if isinstance(action, exp.ColumnDef):
        return f"add column {action.name}"
    if isinstance(action, exp.ModifyColumn):
        old, new = action.args.get("rename_from"), action.this.name
        return f"change column {old.name} to {new}" if old is not None and old.name != new else f"modify column {new}"
    if isinstance(action, exp.RenameColumn):
        return f"rename column {action.this.name} to {action.args['to'].name}"
    if isinstance(action, exp.Drop):
        return _dropped_part(action)
    if isinstance(action, exp.DropPrimaryKey):
        return "drop primary key"
    if isinstance(action, exp.AddConstraint):
        return "add primary key" if action.find(exp.PrimaryKey, exp.PrimaryKeyColumnConstraint) else None
    if isinstance(action, exp.AlterColumn):
        # SET DEFAULT / DROP DEFAULT change no stored value; a new type or visibility changes the column
        changed = {k for k, v in action.args.items() if v} - {"this"}
        return None if changed <= {"default", "drop"} else f"alter column {action.name}"
    if isinstance(action, (exp.RenameIndex, exp.AlterIndex)) or _keeps_rows(action):  # FORCE is an action
        return None
    return _not_understood(action.sql("mysql"))


def _dropped_part(action: exp.Drop) -> str | None:
    """DROP COLUMN changes the rows; dropping an index, a foreign key or a constraint does not, unless it is the
    primary key (``DROP INDEX `PRIMARY```)."""
    kind = str(action.args.get("kind") or "").upper()
    names = [t.name for t in action.args.get("tables") or ()]
    if kind == "COLUMN":
        return f"drop column {', '.join(names)}"
    if kind in ("INDEX", "KEY", "FOREIGN KEY", "CONSTRAINT", "CHECK"):
        return "drop primary key" if any(n.upper() == "PRIMARY" for n in names) else None
    return _not_understood(action.sql("mysql"))


def _is_partition_clause(first: str | None, second: str | None) -> bool:
    words = f"{first or ''} {second or ''}".split()[:2]
    return "PARTITION" in words or "PARTITIONING" in words


def _read_alter_words(clause: _Reader, effect: _AlterEffect) -> None:
    """A specification sqlglot cannot parse, by its leading keywords: partition operations, CONVERT TO CHARACTER
    SET, ADD CHECK, ENABLE/DISABLE KEYS, RENAME AS. Anything else changes the table as far as anyone knows."""
    first, second = clause.peek(), clause.peek(1)
    text = clause.rest()
    if (first, second) in (("ENABLE", "KEYS"), ("DISABLE", "KEYS")) or (first,) in _ROW_KEEPING_OPTION_WORDS or (
            (first, second) in _ROW_KEEPING_OPTION_WORDS):
        return
    if _is_partition_clause(first, second) or (first, second) == ("CONVERT", "TABLE"):
        _read_partition_clause(clause, effect)
    elif first == "CONVERT":
        effect.changes.append("convert to character set")
    elif first == "ADD" and "PRIMARY" in clause.all_words():
        effect.changes.append("add primary key")
    elif first == "ADD" and second in _ADDED_INDEXES:
        return
    elif first == "ADD" and second in ("COLUMN", "("):  # ADD [COLUMN] (a int, b int)
        effect.changes.append("add columns")
    elif first == "RENAME" and second in ("TO", "AS"):
        clause.i += 2
        effect.renamed_to = clause.table()
    else:
        effect.changes.append(_not_understood(text))


def _read_partition_clause(clause: _Reader, effect: _AlterEffect) -> None:
    """Partition operations that delete rows (TRUNCATE, DROP) or move them in or out of the table (EXCHANGE,
    MariaDB's CONVERT, and any other not known to keep them) change the table; those moving rows to or from
    another table change that one too: EXCHANGE swaps rows with it, CONVERT PARTITION creates it with the
    partition's rows, CONVERT TABLE moves all its rows in and drops it."""
    first, second = clause.peek(), clause.peek(1)
    if first in _ROW_KEEPING_PARTITION_OPS:
        return
    if first in ("EXCHANGE", "CONVERT"):
        clause.skip_past("TABLE")
        other, table = clause.table(), effect.table
        if first == "EXCHANGE":
            effect.changes.append(f"exchange partition with {other}")
            effect.others.append((RESYNC, other, f"exchange partition with {table}"))
        elif second == "TABLE":
            effect.changes.append(f"convert table {other} to partition")
            effect.others.append((DROP, other, f"converted to a partition of {table}"))
        else:
            effect.changes.append(f"convert partition to table {other}")
            effect.others.append((RESYNC, other, f"created from a partition of {table}"))
        return
    effect.changes.append((first if " " in (first or "") else f"{first or ''} {second or ''}").strip().lower())


# column attributes that do not change the values existing rows hold
_NEUTRAL_COLUMN_CONSTRAINTS = (
    exp.CommentColumnConstraint, exp.CharacterSetColumnConstraint, exp.CollateColumnConstraint,
    exp.ZeroFillColumnConstraint, exp.UniqueColumnConstraint, exp.CheckColumnConstraint, exp.Reference,
    exp.OnUpdateColumnConstraint, exp.BinaryColumnConstraint, exp.InvisibleColumnConstraint,
)
_GENERATED_CONSTRAINTS = (exp.ComputedColumnConstraint, exp.GeneratedAsIdentityColumnConstraint,
                          exp.GeneratedAsRowColumnConstraint)
# words of a column type after its name and parameters (a character set's and a collation's name follow theirs)
_TYPE_ATTRIBUTES = frozenset({"UNSIGNED", "SIGNED", "ZEROFILL", "BINARY", "ASCII", "UNICODE", "BYTE"})
# words that continue a type's name (NATIONAL CHAR, LONG VARCHAR, CHAR VARYING)
_TYPE_NAME_WORDS = frozenset({"PRECISION", "VARYING", "VARCHAR", "CHAR", "CHARACTER", "VARBINARY"})
# what a specification is parsed after, by itself (sqlglot parses the specifications, not the head)
_ALTER_PREFIX = "ALTER TABLE t "


def _clause_column_changes(clause: _Reader) -> list[ColumnChange] | None:
    """The column changes of one ALTER TABLE specification; None when it does anything else than change columns
    or leave the row images alone."""
    tree = _parse(f"{_ALTER_PREFIX}{clause.rest()}")
    if isinstance(tree, exp.Alter):
        return _tree_column_changes(tree, clause)
    first = clause.peek()
    if first in ("MODIFY", "CHANGE"):  # MariaDB's MODIFY/CHANGE [COLUMN] IF EXISTS, which sqlglot rejects
        clause.i += 1
        clause.word("COLUMN")
        if not clause.words("IF", "EXISTS"):
            return None
        prefix = f"{_ALTER_PREFIX}{first} COLUMN "
        tree = _parse(f"{prefix}{clause.rest()}")
        return _tree_column_changes(tree, clause, prefix) if isinstance(tree, exp.Alter) else None
    second = clause.peek(1)
    if first == "ADD" and (second == "(" or (second == "COLUMN" and clause.peek(2) == "(")):
        return _column_list(clause)
    if (first, second) in (("ENABLE", "KEYS"), ("DISABLE", "KEYS")) or (first,) in _ROW_KEEPING_OPTION_WORDS or (
            (first, second) in _ROW_KEEPING_OPTION_WORDS):
        return []
    if first == "ADD" and second in _ADDED_INDEXES and "PRIMARY" not in clause.all_words():
        return []
    return None


def _column_list(clause: _Reader) -> list[ColumnChange] | None:
    """ADD [COLUMN] (a <def>, b <def>): each definition as an ADD COLUMN of its own."""
    clause.word("ADD")
    clause.word("COLUMN")
    if clause.at_end() or clause.tokens[clause.i].token_type is not TokenType.L_PAREN:
        return None
    if clause.tokens[-1].token_type is not TokenType.R_PAREN:
        return None
    inner = clause.part(clause.i + 1, len(clause.tokens) - 1)
    changes = []
    prefix = f"{_ALTER_PREFIX}ADD COLUMN "
    for definition in inner.clauses():
        tree = _parse(f"{prefix}{definition.rest()}")
        if not isinstance(tree, exp.Alter) or len(tree.args.get("actions") or ()) != 1 or tree.args.get("options"):
            return None
        found = _tree_column_changes(tree, definition, prefix)
        if found is None:
            return None
        changes += found
    return changes


def _tree_column_changes(tree: exp.Alter, clause: _Reader, prefix: str = _ALTER_PREFIX) -> list[ColumnChange] | None:
    """The column changes of sqlglot's tree of ``prefix`` + the clause's text; None when an action or option does
    anything else than change columns or leave the row images alone."""
    changes = []
    for action in tree.args.get("actions") or ():
        if isinstance(action, exp.ColumnDef):
            changes.append(_column_change(ADD_COLUMN, action.name, None, action, clause, prefix))
        elif isinstance(action, exp.ModifyColumn):
            old = action.args.get("rename_from")
            new = action.this.name
            changes.append(_column_change(MODIFY_COLUMN, old.name if old is not None else new,
                                          new if old is not None else None, action.this, clause, prefix))
        elif isinstance(action, exp.RenameColumn):
            changes.append(ColumnChange(RENAME_COLUMN, action.this.name, action.args["to"].name))
        elif isinstance(action, exp.Drop):
            if str(action.args.get("kind") or "").upper() == "COLUMN":
                changes += [ColumnChange(DROP_COLUMN, column.name) for column in action.args.get("tables") or ()]
            elif _dropped_part(action) is not None:  # the primary key, or not understood
                return None
        elif _action_change(action) is not None:
            return None
    if any(not _keeps_rows(option) for option in tree.args.get("options") or ()):
        return None
    return changes


def _column_change(kind: str, name: str, new_name: str | None, definition: exp.ColumnDef, clause: _Reader,
                   prefix: str) -> ColumnChange:
    """One column definition of sqlglot's tree, with its type as the statement wrote it."""
    if definition.args.get("kind") is None:
        raise _NotUnderstood("a column type was expected")
    nullable, default_sql, generated, collation = True, None, False, None
    auto_increment = definition.args["kind"].this == exp.DataType.Type.SERIAL
    for constraint in definition.constraints:
        attribute = constraint.kind
        if isinstance(attribute, exp.NotNullColumnConstraint):
            nullable = bool(attribute.args.get("allow_null"))
        elif isinstance(attribute, exp.DefaultColumnConstraint):
            value = attribute.this
            if isinstance(value, exp.Collate):  # c VARCHAR(5) DEFAULT 'x' COLLATE y: the column's collation
                collation, value = value.expression.name, value.this
            default_sql = _default_as_written(value, clause, prefix)
        elif isinstance(attribute, _GENERATED_CONSTRAINTS):
            generated = True
        elif isinstance(attribute, exp.AutoIncrementColumnConstraint):
            auto_increment = True
        elif isinstance(attribute, exp.CollateColumnConstraint):
            collation = attribute.this.name
        elif not isinstance(attribute, _NEUTRAL_COLUMN_CONSTRAINTS):  # PRIMARY KEY, or one not known
            raise _NotUnderstood(f"column attribute {attribute.sql('mysql')}")
    position = definition.args.get("position")
    placement = None
    if position is not None:
        where = str(position.args.get("position") or "").upper()
        if where == "FIRST":
            placement = "FIRST"
        elif where == "AFTER" and position.this is not None:
            placement = f"AFTER {position.this.name}"
        else:
            raise _NotUnderstood(f"column position {position.sql('mysql')}")
    return ColumnChange(kind, name, new_name, _type_as_written(definition, clause, prefix, collation), nullable,
                        default_sql, placement, generated, auto_increment)


def _default_as_written(value: exp.Expression, clause: _Reader, prefix: str) -> str:
    """A DEFAULT's expression, each string in the quotes the statement wrote it in: a string in double quotes is a
    name under the sql_mode ANSI_QUOTES (or ORACLE), which the statement's session may have had."""
    offset = clause.tokens[clause.i].start - len(prefix)  # from sqlglot's positions to the statement's

    def written(node: exp.Expression) -> exp.Expression:
        start, end = node.meta.get("start"), node.meta.get("end")
        if isinstance(node, exp.Literal) and node.is_string and start is not None and end is not None:
            text = clause.sql[start + offset: end + offset + 1]
            if text.startswith('"'):
                return exp.Var(this=text)
        return node

    return value.transform(written).sql("mysql")


def _type_as_written(definition: exp.ColumnDef, clause: _Reader, prefix: str, collation: str | None) -> str:
    """The column's type as the statement wrote it: the words after the column's name, its parameters, UNSIGNED,
    ZEROFILL, CHARACTER SET and COLLATE (a COLLATE among the later attributes is added at the end)."""
    start = definition.this.meta.get("start")
    if start is None:
        raise _NotUnderstood("the column's name has no position")
    at = start - len(prefix) + clause.tokens[clause.i].start
    name = next((j for j in range(clause.i, len(clause.tokens)) if clause.tokens[j].start == at), None)
    if name is None:
        raise _NotUnderstood("the column's name was not found")
    reader = clause.part(name + 1, len(clause.tokens))
    first = reader.i
    if reader.word() is None:
        raise _NotUnderstood("a column type was expected")
    while reader.peek() in _TYPE_NAME_WORDS and not (
            reader.peek() in ("CHARACTER", "CHAR") and reader.peek(1) == "SET"):
        reader.i += 1
    if not reader.at_end() and reader.tokens[reader.i].token_type is TokenType.L_PAREN:
        reader.skip_past_parenthesis()
    words: list[str] = []
    while not reader.at_end():
        word = reader.peek()
        if word in _TYPE_ATTRIBUTES:
            reader.i += 1
        elif word in ("CHARSET", "COLLATE") or (word in ("CHARACTER", "CHAR") and reader.peek(1) == "SET"):
            reader.i += 1 if word in ("CHARSET", "COLLATE") else 2
            if reader.identifier() is None and reader.word() is None:
                raise _NotUnderstood(f"a name was expected after {word}")
        else:
            break
        words.append(word)
    text = " ".join(reader.sql[reader.tokens[first].start: reader.tokens[reader.i - 1].end + 1].split())
    if collation is not None and "COLLATE" not in words:
        text += f" COLLATE {collation}"
    return text


_HANDLERS: dict[str, Callable[[_Reader], list[_Change] | None]] = {
    "TRUNCATE": _truncate,
    "DROP": _drop,
    "RENAME": _rename,
    "ALTER": _alter,
    "CREATE": _create,
    **{verb: _no_effect for verb in _NO_EFFECT_VERBS},
    **{verb: _rows_changed for verb in _ROW_VERBS},
}
