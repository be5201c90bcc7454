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
           column("Ts", "timestamp", 0), column("t", "time", 0), column("doc", "longtext"), column("y", "year(4)")]


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
    ("`dt6` + interval 0 second", "the session's sql_mode TIME_ROUND_FRACTIONAL (fractional seconds rounded or "
                                  "truncated) (DATETIME column dt6)"),
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
])
def test_expressions_of_the_row_alone_pass(expression):
    assert session_dependence(expression, COLUMNS + [column("now", "int(11)"), column("user", "int(11)"),
                                                     column("database", "int(11)")]) is None
