"""Generated columns whose value depends on the session that computes it.

A VIRTUAL column is computed whenever a row is read; a row event of a FULL binlog image carries the value
computed when it was written. When the expression depends on a session's settings (its time zone, locale,
``sql_mode``, ``div_precision_increment``, the clock, the connection), a snapshot's SELECT and the stream's row
events can give the same row different values, and the sink would hold a mix. Some settings are read by each
statement, others when a session first opens the table (the server then keeps that instance's expression for
every session that reuses it), so even writers on the defaults can log another session's value.
STORED/PERSISTENT columns are computed once, when the row is written, and both paths read the stored value.

The check reads the expression as ``information_schema.COLUMNS.GENERATION_EXPRESSION`` shows it (columns
back-quoted) with the types of the columns it uses, and refuses whatever could differ; it errs on refusing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

from sqlglot import TokenType
from sqlglot.dialects.mysql import MySQL
from sqlglot.errors import TokenError

if TYPE_CHECKING:
    from airflow_cdc_provider.source.schema import Column

# what each function's value depends on besides its arguments
SESSION_FUNCTIONS = {
    **dict.fromkeys(("from_unixtime", "unix_timestamp"), "the session's time zone"),
    **dict.fromkeys(("now", "current_timestamp", "localtime", "localtimestamp", "sysdate", "curdate",
                     "current_date", "curtime", "current_time", "utc_date", "utc_time", "utc_timestamp"),
                    "the clock"),
    **dict.fromkeys(("date_format", "time_format", "monthname", "dayname", "str_to_date"),
                    "the session's locale (lc_time_names)"),
    **dict.fromkeys(("rand", "uuid", "uuid_short", "sys_guid", "connection_id", "user", "current_user",
                     "session_user", "system_user", "current_role", "database", "schema", "last_insert_id",
                     "row_count", "found_rows", "nextval", "lastval", "setval"),
                    "the connection or chance"),
    "encrypt": "chance (a random salt)",
    "password": "the session's old_passwords",
}
# the clock's and the user's, which need no parentheses
_BARE_FUNCTIONS = {"current_timestamp", "current_date", "current_time", "localtime", "localtimestamp",
                   "current_user", "current_role", "utc_date", "utc_time", "utc_timestamp"}


# functions that read a date or time from their arguments: what a string or number gives depends on the
# session's sql_mode (ALLOW_INVALID_DATES, NO_ZERO_DATE, NO_ZERO_IN_DATE, TIME_ROUND_FRACTIONAL)
TEMPORAL_FUNCTIONS = frozenset((
    "date", "time", "timestamp", "datetime", "to_days", "to_seconds", "from_days", "makedate", "maketime",
    "sec_to_time", "time_to_sec", "date_add", "date_sub", "adddate", "subdate", "addtime", "subtime", "datediff",
    "timediff", "timestampadd", "timestampdiff", "day", "dayofmonth", "dayofweek", "dayofyear", "weekday",
    "weekofyear", "week", "yearweek", "month", "quarter", "year", "hour", "minute", "second", "microsecond",
    "last_day", "extract", "convert_tz"))
_TEMPORAL_TYPES = frozenset(("date", "datetime", "time", "timestamp"))
_WHOLE_DATES = frozenset(("date", "year"))  # columns a date function reads the same way in every session
_OPERAND_ENDS = frozenset((TokenType.IDENTIFIER, TokenType.VAR, TokenType.NUMBER, TokenType.STRING,
                           TokenType.R_PAREN))


def session_dependence(expression: str, columns: Sequence["Column"]) -> str | None:
    """What the value of a VIRTUAL column ``AS (expression)`` depends on besides the row, if anything;
    ``columns``: the table's columns. None: a function of the row's values alone, in every session."""
    try:
        tokens = MySQL().tokenize(expression)
    except TokenError:  # an expression this cannot read is not judged safe
        return "an expression the check cannot read"
    types = {c.name.lower(): c for c in columns}
    used: list[tuple[int, "Column"]] = []  # (token index, column) of each column the expression reads
    for i, token in enumerate(tokens):
        word = token.text.lower()
        called = i + 1 < len(tokens) and tokens[i + 1].token_type is TokenType.L_PAREN
        quoted = token.token_type is TokenType.IDENTIFIER  # a quoted name is a column, never a function
        if token.token_type in (TokenType.SESSION_PARAMETER, TokenType.PARAMETER):
            return "a session variable"
        if word in types and (quoted or not called):
            column = types[word]
            why = _column_dependence(column)
            if why:
                return f"{why} ({column.data_type.upper()} column {token.text})"
            used.append((i, column))
            continue
        if quoted:
            continue
        if word in SESSION_FUNCTIONS and (called or word in _BARE_FUNCTIONS):
            return f"{SESSION_FUNCTIONS[word]} ({word})"
        if word == "week" and called and _arguments(tokens, i + 1) == 1:  # its mode, when not given
            return "the session's default_week_format (week without a mode)"
        if token.token_type is TokenType.SLASH:
            return "the session's div_precision_increment (a division with /; DIV is the same in every session)"
    if any(t.token_type is TokenType.DASH and i and tokens[i - 1].token_type in _OPERAND_ENDS
           for i, t in enumerate(tokens)):
        unsigned = [c.name for _, c in used if c.unsigned] + [t.text for t in tokens if t.text.lower() == "unsigned"]
        if unsigned:
            return f"the session's sql_mode NO_UNSIGNED_SUBTRACTION (a subtraction with {unsigned[0]})"
    for first, last in _temporal_reads(tokens):
        read = [c for i, c in used if first < i < last and c.data_type not in _WHOLE_DATES
                and not (c.data_type == "datetime" and not c.datetime_precision)]
        if read:
            return ("the session's sql_mode (ALLOW_INVALID_DATES, NO_ZERO_DATE, NO_ZERO_IN_DATE, "
                    f"TIME_ROUND_FRACTIONAL) (a date or time read from {read[0].data_type.upper()} column "
                    f"{read[0].name})")
    return None


def _column_dependence(column: "Column") -> str | None:
    """What a column's value, used in an expression, depends on in the session, if anything."""
    if column.data_type == "timestamp":  # as anything but itself, it is in the session's time zone
        return "the session's time zone"
    if column.data_type == "time":  # as a date, it takes today's date (or a zero one under old_mode)
        return "the clock and the session's old_mode"
    if column.data_type == "datetime" and column.datetime_precision:
        return "the session's sql_mode TIME_ROUND_FRACTIONAL (fractional seconds rounded or truncated)"
    if column.data_type == "char":  # padded to its length under PAD_CHAR_TO_FULL_LENGTH
        return "the session's sql_mode PAD_CHAR_TO_FULL_LENGTH"
    return None


def _temporal_reads(tokens: list) -> list[tuple[int, int]]:
    """The token ranges (exclusive) whose values are read as dates or times: the arguments of a date or time
    function, of a CAST or CONVERT to a temporal type, and any expression with INTERVAL arithmetic (whole)."""
    reads = []
    for i, token in enumerate(tokens):
        word = token.text.lower()
        called = i + 1 < len(tokens) and tokens[i + 1].token_type is TokenType.L_PAREN
        if token.token_type is TokenType.INTERVAL:
            reads.append((-1, len(tokens)))
        elif called and token.token_type is not TokenType.IDENTIFIER and word in TEMPORAL_FUNCTIONS:
            reads.append((i + 1, _closing(tokens, i + 1)))
        elif called and word in ("cast", "convert"):
            close = _closing(tokens, i + 1)
            if any(t.text.lower() in _TEMPORAL_TYPES for t in tokens[i + 2:close]):
                reads.append((i + 1, close))
    return reads


def _closing(tokens: list, open_at: int) -> int:
    """The index of the ``)`` closing the ``(`` at ``tokens[open_at]``."""
    depth = 0
    for i in range(open_at, len(tokens)):
        if tokens[i].token_type is TokenType.L_PAREN:
            depth += 1
        elif tokens[i].token_type is TokenType.R_PAREN:
            depth -= 1
            if depth == 0:
                return i
    return len(tokens)


def _arguments(tokens: list, open_at: int) -> int:
    """How many arguments the call whose ``(`` is ``tokens[open_at]`` has."""
    depth, count = 0, 1
    for token in tokens[open_at:]:
        if token.token_type is TokenType.L_PAREN:
            depth += 1
        elif token.token_type is TokenType.R_PAREN:
            depth -= 1
            if depth == 0:
                return count
        elif token.token_type is TokenType.COMMA and depth == 1:
            count += 1
    return count
