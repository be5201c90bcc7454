"""Generated columns whose value depends on the session that computes it.

A VIRTUAL column is computed whenever a row is read, in the reading session; a row event of a FULL binlog
image carries the value the writing session computed. When the expression depends on the session (its time
zone, its locale, the clock, the connection), a snapshot's SELECT and the stream's row events give the same
row different values, and the sink would hold a mix. STORED/PERSISTENT columns are computed once, when the
row is written, and the server refuses session-dependent expressions for them, so they are safe.
"""

from __future__ import annotations

from typing import Collection

from sqlglot import TokenType
from sqlglot.dialects.mysql import MySQL
from sqlglot.errors import TokenError

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
}
# the clock's and the user's, which need no parentheses
_BARE_FUNCTIONS = {"current_timestamp", "current_date", "current_time", "localtime", "localtimestamp",
                   "current_user", "current_role", "utc_date", "utc_time", "utc_timestamp"}


def session_dependence(expression: str, timestamp_columns: Collection[str]) -> str | None:
    """What the value of a VIRTUAL column ``AS (expression)`` depends on besides the row, if anything: a
    session-dependent function, a session variable, or a TIMESTAMP column (``timestamp_columns``), whose value
    as anything but itself is in the session's time zone. None: a function of the row's values alone."""
    try:
        tokens = MySQL().tokenize(expression)
    except TokenError:  # an expression this cannot read is not judged safe
        return "an expression the check cannot read"
    stamps = {c.lower() for c in timestamp_columns}
    for i, token in enumerate(tokens):
        word = token.text.lower()
        called = i + 1 < len(tokens) and tokens[i + 1].token_type is TokenType.L_PAREN
        quoted = token.token_type is TokenType.IDENTIFIER  # a quoted name is a column, never a function
        if token.token_type in (TokenType.SESSION_PARAMETER, TokenType.PARAMETER):
            return "a session variable"
        if word in stamps and (quoted or not called):
            return f"the session's time zone (TIMESTAMP column {token.text})"
        if quoted:
            continue
        if word in SESSION_FUNCTIONS and (called or word in _BARE_FUNCTIONS):
            return f"{SESSION_FUNCTIONS[word]} ({word})"
        if word == "week" and called and _arguments(tokens, i + 1) == 1:  # its mode, when not given
            return "the session's default_week_format (week without a mode)"
    return None


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
