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
    **dict.fromkeys(("date_format", "time_format", "monthname", "dayname", "str_to_date", "to_char"),
                    "the session's locale (lc_time_names)"),
    **dict.fromkeys(("rand", "uuid", "uuid_short", "sys_guid", "connection_id", "user", "current_user",
                     "session_user", "system_user", "current_role", "database", "schema", "last_insert_id",
                     "row_count", "found_rows", "nextval", "lastval", "setval"),
                    "the connection or chance"),
    "encrypt": "chance (a random salt)",
    "password": "the session's old_passwords",
    "version": "the server's version",
    **dict.fromkeys(("regexp_replace", "regexp_substr", "regexp_instr", "regexp_like"),
                    "the session's default_regex_flags"),
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
# conversions that check a date against the session's sql_mode even when it comes from a DATE column (a zero
# in it, or an invalid day, stored under another mode, comes out NULL), and comparisons of dates
_CHECKING = frozenset(("date", "timestamp", "datetime", "cast", "convert", "greatest", "least", "last_day"))
_TEMPORAL_TYPES = frozenset(("date", "datetime", "time", "timestamp"))
_WHOLE_DATES = frozenset(("date", "year", "datetime"))  # columns a date function reads the same way in every session
_DATED = _TEMPORAL_TYPES | {"year"}
# functions that return one of their arguments (or it rounded) as it is: given a date, they return a date, which
# is checked against the session's sql_mode when the column's type converts it (a zero date comes out NULL)
_DATE_RETURNING = frozenset(("if", "ifnull", "nvl", "nvl2", "coalesce", "nullif", "last_value", "decode_oracle",
                             "decode", "round", "floor", "ceiling", "ceil", "truncate"))
# operators that bind an operand to their left before a / does (the operand of / is then their result)
_BINDING_LEFT = frozenset((TokenType.DIV, TokenType.MOD, TokenType.STAR, TokenType.SLASH, TokenType.CARET))
_OPERAND_ENDS = frozenset((TokenType.IDENTIFIER, TokenType.VAR, TokenType.NUMBER, TokenType.STRING,
                           TokenType.R_PAREN, TokenType.HEX_STRING, TokenType.BIT_STRING))
_BITWISE = frozenset((TokenType.PIPE, TokenType.AMP, TokenType.CARET, TokenType.TILDE))
_UNSIGNED_FUNCTIONS = frozenset(("crc32", "crc32c", "inet_aton"))
_FLOATS = frozenset(("float", "double"))
_INTERVAL_UNITS = frozenset((
    "microsecond", "second", "minute", "hour", "day", "week", "month", "quarter", "year", "second_microsecond",
    "minute_microsecond", "minute_second", "hour_microsecond", "hour_second", "hour_minute", "day_microsecond",
    "day_second", "day_minute", "day_hour", "year_month"))
_DATES_READ = "the session's sql_mode (ALLOW_INVALID_DATES, NO_ZERO_DATE, NO_ZERO_IN_DATE, TIME_ROUND_FRACTIONAL)"


def session_dependence(expression: str, columns: Sequence["Column"], column: "Column | None" = None) -> str | None:
    """What the value of a VIRTUAL column ``AS (expression)`` depends on besides the row, if anything;
    ``columns``: the table's columns, ``column``: the VIRTUAL column itself. None: a function of the row's
    values alone, in every session."""
    if column is not None and column.data_type in _TEMPORAL_TYPES:
        return (f"the session's time zone and sql_mode (a VIRTUAL {column.data_type.upper()} column: the value is "
                "converted to its type in the session)")
    try:
        tokens = MySQL().tokenize(expression)
    except TokenError:  # an expression this cannot read is not judged safe
        return "an expression the check cannot read"
    types = {c.name.lower(): c for c in columns}
    used: dict[int, "Column"] = {}  # token index -> the column the expression reads there
    for i, token in enumerate(tokens):
        word = token.text.lower()
        called = i + 1 < len(tokens) and tokens[i + 1].token_type is TokenType.L_PAREN
        quoted = token.token_type is TokenType.IDENTIFIER  # a quoted name is a column, never a function
        if token.token_type in (TokenType.SESSION_PARAMETER, TokenType.PARAMETER):
            return "a session variable"
        if word in types and (quoted or not called):
            why = _column_dependence(types[word])
            if why:
                return f"{why} ({types[word].data_type.upper()} column {token.text})"
            used[i] = types[word]
            continue
        if quoted:
            continue
        if word in SESSION_FUNCTIONS and (called or word in _BARE_FUNCTIONS):
            return f"{SESSION_FUNCTIONS[word]} ({word})"
        if token.token_type is TokenType.RLIKE:
            return f"the session's default_regex_flags ({word})"
        if word == "week" and called and _arguments(tokens, i + 1) == 1:  # its mode, when not given
            return "the session's default_week_format (week without a mode)"
        if token.token_type is TokenType.SLASH and not _float_division(tokens, i, types):
            return "the session's div_precision_increment (a division with /; DIV is the same in every session)"
    unsigned = _unsigned_operand(tokens, used)
    if unsigned and any(t.token_type is TokenType.DASH and i and tokens[i - 1].token_type in _OPERAND_ENDS
                        for i, t in enumerate(tokens)):
        return f"the session's sql_mode NO_UNSIGNED_SUBTRACTION (a subtraction with {unsigned})"
    timezones, amounts = _convert_tz_arguments(tokens), _interval_amounts(tokens)
    for first, last, checking in _temporal_reads(tokens, used):
        why = _date_read(tokens, range(first + 1, last), checking, used, timezones, amounts)
        if why:
            return f"{_DATES_READ} (a date or time read from {why})"
    return None


def _column_dependence(column: "Column") -> str | None:
    """What a column's value, used in an expression, depends on in the session, if anything."""
    if column.data_type == "timestamp":  # as anything but itself, it is in the session's time zone
        return "the session's time zone"
    if column.data_type == "time":  # as a date, it takes today's date (or a zero one under old_mode)
        return "the clock and the session's old_mode"
    if column.data_type == "char":  # padded to its length under PAD_CHAR_TO_FULL_LENGTH
        return "the session's sql_mode PAD_CHAR_TO_FULL_LENGTH"
    return None


def _float_division(tokens: list, at: int, types: dict) -> bool:
    """Whether an operand of the ``/`` at ``tokens[at]`` is a FLOAT or DOUBLE column or a literal in e-notation
    (not bound first to another operand, as in ``a DIV x / 7`` or ``a / x ^ 2``): its result is then a DOUBLE,
    whose digits no session setting changes."""
    def is_float(token) -> bool:
        if token.token_type is TokenType.NUMBER:
            return "e" in token.text.lower()
        column = types.get(token.text.lower()) if token.token_type in (TokenType.IDENTIFIER, TokenType.VAR) else None
        return column is not None and column.data_type in _FLOATS
    left = at >= 1 and is_float(tokens[at - 1]) and not (at >= 2 and tokens[at - 2].token_type in _BINDING_LEFT)
    right = at + 1 < len(tokens) and is_float(tokens[at + 1]) and not (
        at + 2 < len(tokens) and tokens[at + 2].token_type is TokenType.CARET)
    return left or right


def _unsigned_operand(tokens: list, used: dict) -> str | None:
    """An UNSIGNED value the expression has, if any: a column (BIT and YEAR ones are), a CAST to UNSIGNED, a hex
    or bit literal, a number above BIGINT's range, a bitwise operator's result, CRC32() or INET_ATON()."""
    for i, token in enumerate(tokens):
        kind = token.token_type
        nxt = tokens[i + 1] if i + 1 < len(tokens) else None
        if i in used and (used[i].unsigned or used[i].data_type in ("bit", "year")):
            return used[i].name
        if kind is TokenType.HEX_STRING:
            return f"0x{token.text}"
        if kind is TokenType.BIT_STRING:
            return f"b'{token.text}'"
        if token.text.lower() == "unsigned" or kind in _BITWISE:
            return token.text
        if kind in (TokenType.LT, TokenType.GT) and nxt is not None and nxt.token_type is kind:
            return token.text * 2
        if kind is TokenType.NUMBER and token.text.isdigit() and int(token.text) > (1 << 63) - 1:
            return token.text
        if token.text.lower() in _UNSIGNED_FUNCTIONS and nxt is not None and nxt.token_type is TokenType.L_PAREN:
            return f"{token.text}()"
    return None


def _temporal_reads(tokens: list, used: dict) -> list[tuple[int, int, bool]]:
    """The token ranges (exclusive) whose values are read as dates or times, and whether the reading checks
    even a DATE column's value: the arguments of a date or time function, of a CAST or CONVERT to a temporal type
    (``... AS DATE`` anywhere, as in COLUMN_GET), of GREATEST or LEAST over a temporal column, and the whole
    expression when it has INTERVAL arithmetic; and the first date column a function that returns its arguments
    (IF, COALESCE, CASE, ROUND, ...) may return."""
    reads = []
    for i, token in enumerate(tokens):
        word = token.text.lower()
        called = i + 1 < len(tokens) and tokens[i + 1].token_type is TokenType.L_PAREN
        if token.token_type is TokenType.INTERVAL and not _interval_function(tokens, i):
            reads.append(_interval_arithmetic(tokens, i))
        elif token.token_type is TokenType.CASE or (word in _DATE_RETURNING and called
                                                    and token.token_type is not TokenType.IDENTIFIER):
            end = _case_end(tokens, i) if token.token_type is TokenType.CASE else _closing(tokens, i + 1)
            returned = next((j for j, c in sorted(used.items()) if i < j < end and c.data_type in _DATED), None)
            if returned is not None:
                reads.append((returned - 1, returned + 1, True))
        elif token.token_type is TokenType.ALIAS and i + 1 < len(tokens) and \
                tokens[i + 1].text.lower() in _TEMPORAL_TYPES:
            reads.append((-1, len(tokens), True))
        elif not called or token.token_type is TokenType.IDENTIFIER:
            continue
        elif word in TEMPORAL_FUNCTIONS:
            reads.append((i + 1, _closing(tokens, i + 1), word in _CHECKING))
        elif word in ("cast", "convert"):
            close = _closing(tokens, i + 1)
            if any(t.text.lower() in _TEMPORAL_TYPES for t in tokens[i + 2:close]):
                reads.append((i + 1, close, True))
        elif word in ("greatest", "least"):
            close = _closing(tokens, i + 1)
            if any(c.data_type in _TEMPORAL_TYPES for j, c in used.items() if i + 1 < j < close):
                reads.append((i + 1, close, True))
    return reads


def _interval_arithmetic(tokens: list, at: int) -> tuple[int, int, bool]:
    """The range of ``X + INTERVAL n unit`` (or ``INTERVAL n unit + X``) around the INTERVAL at ``tokens[at]``:
    ``X`` is one token, a parenthesized group or a call; the whole expression when it is anything else."""
    unit = next((j for j in range(at + 1, len(tokens)) if tokens[j].text.lower() in _INTERVAL_UNITS
                 and tokens[j].token_type is not TokenType.IDENTIFIER), len(tokens) - 1)
    signs = (TokenType.PLUS, TokenType.DASH)
    whole = (-1, len(tokens), True)  # what it reads as a date is not clear: every column counts

    def alone(start: int, end: int) -> bool:  # nothing binds tighter or left of it: X is the date operand
        before = tokens[start - 1].token_type if start > 0 else None
        after = tokens[end + 1].token_type if end + 1 < len(tokens) else None
        return before in (None, TokenType.L_PAREN, TokenType.COMMA) and (
            after in (None, TokenType.R_PAREN, TokenType.COMMA)
            or (after in signs and end + 2 < len(tokens) and tokens[end + 2].token_type is TokenType.INTERVAL))
    if at >= 1 and tokens[at - 1].token_type is TokenType.COMMA:
        return at, at, False  # DATE_ADD(X, INTERVAL ...): the call reads X
    if at >= 2 and tokens[at - 1].token_type in signs:
        end = at - 2
        if tokens[end].token_type is TokenType.R_PAREN:
            start = _matching(tokens, end)
            if start is None:
                return whole
            if start and tokens[start - 1].token_type is not TokenType.L_PAREN and \
                    tokens[start - 1].token_type not in (TokenType.COMMA, *signs):
                start -= 1  # the called function's name
        elif tokens[end].token_type in _OPERAND_ENDS:
            start = end
        else:
            return whole
        return (start - 1, unit + 1, False) if alone(start, unit) else whole
    if unit + 2 < len(tokens) and tokens[unit + 1].token_type is TokenType.PLUS:
        first = unit + 2
        if first + 1 < len(tokens) and tokens[first + 1].token_type is TokenType.L_PAREN:
            last = _closing(tokens, first + 1)
        elif tokens[first].token_type is TokenType.L_PAREN:
            last = _closing(tokens, first)
        else:
            last = first
        return (at - 1, last + 1, False) if alone(at, last) else whole
    return whole


def _interval_function(tokens: list, at: int) -> bool:
    """Whether the INTERVAL at ``tokens[at]`` is the INTERVAL(N, N1, N2, ...) function (a number), not ``INTERVAL
    (amount) unit``."""
    if at + 1 >= len(tokens) or tokens[at + 1].token_type is not TokenType.L_PAREN:
        return False
    close = _closing(tokens, at + 1)
    return close + 1 >= len(tokens) or tokens[close + 1].text.lower() not in _INTERVAL_UNITS


def _case_end(tokens: list, at: int) -> int:
    """The index of the END closing the CASE at ``tokens[at]`` (the end when none does)."""
    depth = 0
    for j in range(at, len(tokens)):
        if tokens[j].token_type is TokenType.CASE:
            depth += 1
        elif tokens[j].token_type is TokenType.END:
            depth -= 1
            if depth == 0:
                return j
    return len(tokens)


def _date_read(tokens: list, read: range, checking: bool, used: dict, timezones: set[int],
               amounts: set[int]) -> str | None:
    """What in ``tokens[read]``, read as a date or time, can give another value in another session: a column of
    another type (or any column, when the reading ``checking``), a string, a fractional number, or another
    function's result; None when nothing. ``timezones``: CONVERT_TZ's arguments; ``amounts``: INTERVAL amounts."""
    for j in read:
        token = tokens[j]
        if j in used and j in amounts and used[j].is_integer:
            continue  # how many days, months, ... to add: a number
        if j in used:
            c = used[j]
            if c.data_type not in _WHOLE_DATES or checking:
                return f"{c.data_type.upper()} column {c.name}"
        elif token.token_type is TokenType.STRING and j not in timezones:
            return f"the string '{token.text}'"
        elif token.token_type is TokenType.NUMBER and not token.text.isdigit():
            return f"the number {token.text}"
        elif (j + 1 < len(tokens) and tokens[j + 1].token_type is TokenType.L_PAREN
              and token.token_type is not TokenType.IDENTIFIER
              and token.text.lower() not in TEMPORAL_FUNCTIONS | {"cast", "convert", "greatest", "least"}):
            return f"{token.text.lower()}()"
    return None


def _interval_amounts(tokens: list) -> set[int]:
    """The token indexes of INTERVAL amounts (``INTERVAL <amount> DAY``)."""
    amounts: set[int] = set()
    for i, token in enumerate(tokens):
        if token.token_type is TokenType.INTERVAL:
            for j in range(i + 1, len(tokens)):
                if tokens[j].text.lower() in _INTERVAL_UNITS and tokens[j].token_type is not TokenType.IDENTIFIER:
                    break
                amounts.add(j)
    return amounts


def _convert_tz_arguments(tokens: list) -> set[int]:
    """The token indexes inside CONVERT_TZ() calls: their strings are time zones, not dates."""
    inside: set[int] = set()
    for i, token in enumerate(tokens):
        if token.text.lower() == "convert_tz" and i + 1 < len(tokens) and tokens[i + 1].token_type is TokenType.L_PAREN:
            inside |= set(range(i + 1, _closing(tokens, i + 1)))
    return inside


def _closing(tokens: list, open_at: int) -> int:
    """The index of the ``)`` closing the ``(`` at ``tokens[open_at]`` (the end when none does)."""
    found = _matching(tokens, open_at)
    return len(tokens) if found is None else found


def _matching(tokens: list, at: int) -> int | None:
    """The index of the parenthesis matching the one at ``tokens[at]``: forward from a ``(``, back from a ``)``."""
    step, inward = (1, TokenType.L_PAREN) if tokens[at].token_type is TokenType.L_PAREN else (-1, TokenType.R_PAREN)
    depth, i = 0, at
    while 0 <= i < len(tokens):
        kind = tokens[i].token_type
        if kind is inward:
            depth += 1
        elif kind in (TokenType.L_PAREN, TokenType.R_PAREN):
            depth -= 1
            if depth == 0:
                return i
        i += step
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
