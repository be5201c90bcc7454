"""Which VIRTUAL column expressions depend on the session computing them (``source/generated_columns.py``).
The expressions are written as MariaDB shows them in ``information_schema.COLUMNS.GENERATION_EXPRESSION``."""

import pytest

from airflow_cdc_provider.source.generated_columns import session_dependence
from airflow_cdc_provider.source.schema import Column


def column(name: str, column_type: str, precision: int | None = None) -> Column:
    return Column(name, column_type.split("(")[0].split()[0], column_type, True, None, None, None, None, None,
                  precision)


COLUMNS = [column("id", "int(11)"), column("u", "int(10) unsigned"), column("e", "int(11)"),
           column("n", "decimal(10,2)"), column("s", "varchar(20)"), column("c", "char(10)"), column("d", "date"),
           column("dt", "datetime", 0), column("dt6", "datetime(6)", 6), column("ts", "timestamp", 0),
           column("Ts", "timestamp", 0), column("t", "time", 0), column("doc", "longtext"), column("y", "year(4)"),
           column("x", "double"), column("b", "bit(8)")]
DATES_READ = "the session's sql_mode (ALLOW_INVALID_DATES, NO_ZERO_DATE, NO_ZERO_IN_DATE, TIME_ROUND_FRACTIONAL)"
SUBTRACTION = "the session's sql_mode NO_UNSIGNED_SUBTRACTION (a subtraction with"


@pytest.mark.parametrize("expression, why", [
    ("from_unixtime(`e`)", "the session's time zone (from_unixtime)"),
    ("unix_timestamp(`dt`)", "the session's time zone (unix_timestamp)"),
    ("current_timestamp()", "the clock (current_timestamp)"),
    ("`e` + (current_date - interval 1 day)", "the clock (current_date)"),
    ("date_format(`d`,_utf8mb4'%M %Y')", "the session's locale (lc_time_names) (date_format)"),
    ("concat(`s`,uuid())", "the connection or chance (uuid)"),
    ("concat(`s`,@@time_zone)", "a session variable"),
    ("cast(`ts` as char charset utf8mb4)", "the session's time zone (TIMESTAMP column ts)"),
    ("year(`Ts`)", "the session's time zone (TIMESTAMP column Ts)"),
    ("week(`d`) + 1", "the session's default_week_format (week without a mode)"),
    ("week(coalesce(`d`,`dt`))", "the session's default_week_format (week without a mode)"),
    ("password(`s`)", "the session's old_passwords (password)"),
    ("concat(`e` / 7)", "the session's div_precision_increment (a division with /; DIV is the same in every session)"),
    ("`n` / 7", "the session's div_precision_increment (a division with /; DIV is the same in every session)"),
    ("`u` - `e`", "the session's sql_mode NO_UNSIGNED_SUBTRACTION (a subtraction with u)"),
    ("cast(`e` as unsigned) - 5", "the session's sql_mode NO_UNSIGNED_SUBTRACTION (a subtraction with unsigned)"),
    ("concat(`c`,_utf8mb4'|')", "the session's sql_mode PAD_CHAR_TO_FULL_LENGTH (CHAR column c)"),
    ("cast(`dt6` as datetime)", f"{DATES_READ} (a date or time read from DATETIME column dt6)"),  # rounded or not
    ("floor(`dt6`)", f"{DATES_READ} (a date or time read from DATETIME column dt6)"),
    ("cast(`t` as datetime)", "the clock and the session's old_mode (TIME column t)"),
    ("concat(cast(`s` as date))", "the session's sql_mode (ALLOW_INVALID_DATES, NO_ZERO_DATE, NO_ZERO_IN_DATE, "
                                  "TIME_ROUND_FRACTIONAL) (a date or time read from VARCHAR column s)"),
    ("sec_to_time(`n`)", "the session's sql_mode (ALLOW_INVALID_DATES, NO_ZERO_DATE, NO_ZERO_IN_DATE, "
                         "TIME_ROUND_FRACTIONAL) (a date or time read from DECIMAL column n)"),
    ("to_days(`s`) - to_days(`d`)", "the session's sql_mode (ALLOW_INVALID_DATES, NO_ZERO_DATE, NO_ZERO_IN_DATE, "
                                    "TIME_ROUND_FRACTIONAL) (a date or time read from VARCHAR column s)"),
    ("`s` + interval 1 day", "the session's sql_mode (ALLOW_INVALID_DATES, NO_ZERO_DATE, NO_ZERO_IN_DATE, "
                             "TIME_ROUND_FRACTIONAL) (a date or time read from VARCHAR column s)"),
    ("extract(year from `s`)", "the session's sql_mode (ALLOW_INVALID_DATES, NO_ZERO_DATE, NO_ZERO_IN_DATE, "
                               "TIME_ROUND_FRACTIONAL) (a date or time read from VARCHAR column s)"),
    ("`s` regexp _utf8mb4'x.y'", "the session's default_regex_flags (regexp)"),
    ("regexp_replace(`s`,_utf8mb4'x.y',_utf8mb4'-')", "the session's default_regex_flags (regexp_replace)"),
    ("to_char(`d`,_utf8mb4'MONTH DAY')", "the session's locale (lc_time_names) (to_char)"),
    ("version()", "the server's version (version)"),
    ("greatest(`d`,`s`)", f"{DATES_READ} (a date or time read from DATE column d)"),
    ("least(`d`,_utf8mb4'2030-01-01')", f"{DATES_READ} (a date or time read from DATE column d)"),
    ("cast(`d` as datetime)", f"{DATES_READ} (a date or time read from DATE column d)"),
    ("date(`dt`)", f"{DATES_READ} (a date or time read from DATETIME column dt)"),
    ("cast(concat(year(`d`),_utf8mb4'-02-31') as date)", f"{DATES_READ} (a date or time read from concat())"),
    ("last_day(if(`d` is null,_utf8mb4'2020-02-31',`d`))", f"{DATES_READ} (a date or time read from if())"),
    ("last_day(_utf8mb4'2020-02-31')", f"{DATES_READ} (a date or time read from the string '2020-02-31')"),
    ("to_days(`d` + interval 0.9 second)", f"{DATES_READ} (a date or time read from the number 0.9)"),
    ("column_get(`doc`,_utf8mb4'x' as date)", f"{DATES_READ} (a date or time read from column_get())"),
    ("`d` - 1 + interval 1 day", f"{DATES_READ} (a date or time read from DATE column d)"),  # a number as a date
    ("interval 1 day + `d` * 2", f"{DATES_READ} (a date or time read from DATE column d)"),
    ("concat(`s` + interval 1 day)", f"{DATES_READ} (a date or time read from VARCHAR column s)"),
    # a function returning a date column as it is: a zero date comes out NULL under NO_ZERO_DATE
    ("ifnull(`d`,`dt`)", f"{DATES_READ} (a date or time read from DATE column d)"),
    ("if(`e` > 0,`d`,NULL)", f"{DATES_READ} (a date or time read from DATE column d)"),
    ("coalesce(`dt`)", f"{DATES_READ} (a date or time read from DATETIME column dt)"),
    ("case when `e` then `s` else `d` end", f"{DATES_READ} (a date or time read from DATE column d)"),
    ("case `e` when 1 then `y` end", f"{DATES_READ} (a date or time read from YEAR column y)"),
    ("nullif(`d`,_utf8mb4'x')", f"{DATES_READ} (a date or time read from DATE column d)"),
    ("decode_oracle(`e`,1,`d`)", f"{DATES_READ} (a date or time read from DATE column d)"),
    ("round(`dt`,0)", f"{DATES_READ} (a date or time read from DATETIME column dt)"),
    ("last_day(`dt6`)", f"{DATES_READ} (a date or time read from DATETIME column dt6)"),  # '2024-02-00': NULL or not
    # the operand of / is not the DOUBLE beside it
    ("`e` DIV `x` / 7", "the session's div_precision_increment (a division with /; DIV is the same in every session)"),
    ("`e` / `x` ^ 2", "the session's div_precision_increment (a division with /; DIV is the same in every session)"),
    ("`e` ^ 3e0 / 7", "the session's div_precision_increment (a division with /; DIV is the same in every session)"),
    ("`b` - 5", f"{SUBTRACTION} b)"),
    ("`y` - 2030", f"{SUBTRACTION} y)"),
    ("`e` - crc32(_utf8mb4'x')", f"{SUBTRACTION} crc32())"),
    ("`e` - 0xff", f"{SUBTRACTION} 0xff)"),
    ("`e` - b'1010'", f"{SUBTRACTION} b'1010')"),
    ("`e` - (`e` | 0) - 1", f"{SUBTRACTION} |)"),
    ("0 - ~`e`", f"{SUBTRACTION} ~)"),
    ("`e` - (`e` << 1)", f"{SUBTRACTION} <<)"),
    ("`e` - 9223372036854775808", f"{SUBTRACTION} 9223372036854775808)"),
])
def test_session_dependent_expressions_say_on_what(expression, why):
    assert session_dependence(expression, COLUMNS) == why


@pytest.mark.parametrize("expression", [
    "`id` + `e`",
    "concat(`now`,`user`,`database`)",  # columns named like functions
    "json_value(`doc`,_utf8mb4'$.name')",
    "year(`dt`)",  # a DATETIME column is the same in every session
    "week(`d`,3)",
    "yearweek(`d`,0)",
    "convert_tz(`dt`,_utf8mb4'+00:00',_utf8mb4'+05:00')",
    "`e` div 7",
    "`e` - `id`",  # no unsigned operand
    "-`u` + 1",  # a negation is no subtraction
    "`d` + interval -1 day",
    "concat(`s`,_utf8mb4'-',`e`)",
    "to_days(`d`) - to_days(`dt`)",
    "`y` + 1",
    "`x` / `e`",  # a DOUBLE division: no session setting changes its digits
    "`e` / 3e0",
    "`d` + interval `e` day",  # an integer column as the amount
    "date_add(`d`,interval -`e` month)",
    "to_days(`d`) - 5",
    "concat(`s`,`d` + interval 1 day)",  # the date read is the DATE column's alone
    "concat(`e` * (`d` + interval 1 day))",
    "interval 1 day + `d`",
    "`e` + `x` / 7",
    "`x` / `e` * 2",
    # a fractional DATETIME read whole: only a cast to less precision rounds it under TIME_ROUND_FRACTIONAL
    "year(`dt6`)",
    "to_days(`dt6`) - to_days(`dt`)",
    "concat(`dt6`)",
    "`dt6` > _utf8mb4'2024-12-31 23:59:59'",
    "interval(`e`,1,5)",  # the INTERVAL() function: a number
    "if(`e`,`s`,`n`)",
    "round(`n`,1)",
])
def test_expressions_of_the_row_alone_pass(expression):
    assert session_dependence(expression, COLUMNS + [column("now", "int(11)"), column("user", "int(11)"),
                                                     column("database", "int(11)")]) is None


@pytest.mark.parametrize("own", ["date", "datetime", "timestamp", "time"])
def test_a_virtual_column_of_a_temporal_type_is_converted_in_the_session(own):
    """Its value is converted to its type by the session that computes it: time zone, invalid or zero dates,
    fractional seconds."""
    assert session_dependence("`d`", COLUMNS, column("v", own)) == (
        f"the session's time zone and sql_mode (a VIRTUAL {own.upper()} column: the value is converted to its "
        "type in the session)")
    assert session_dependence("`d`", COLUMNS, column("v", "varchar(10)")) is None
