"""Which VIRTUAL column expressions depend on the session computing them (``source/generated_columns.py``).
The expressions are written as MariaDB shows them in ``information_schema.COLUMNS.GENERATION_EXPRESSION``."""

import pytest

from airflow_cdc_provider.source.generated_columns import session_dependence


@pytest.mark.parametrize("expression, why", [
    ("from_unixtime(`e`)", "the session's time zone (from_unixtime)"),
    ("unix_timestamp(`dt`)", "the session's time zone (unix_timestamp)"),
    ("current_timestamp()", "the clock (current_timestamp)"),
    ("`a` + (current_date - interval 1 day)", "the clock (current_date)"),
    ("date_format(`d`,_utf8mb4'%M %Y')", "the session's locale (lc_time_names) (date_format)"),
    ("concat(`a`,uuid())", "the connection or chance (uuid)"),
    ("concat(`a`,@@time_zone)", "a session variable"),
    ("cast(`ts` as char charset utf8mb4)", "the session's time zone (TIMESTAMP column ts)"),
    ("year(`Ts`)", "the session's time zone (TIMESTAMP column Ts)"),
    ("week(`d`) + 1", "the session's default_week_format (week without a mode)"),
    ("week(coalesce(`d`,`e`))", "the session's default_week_format (week without a mode)"),
])
def test_session_dependent_expressions_say_on_what(expression, why):
    assert session_dependence(expression, ["ts"]) == why


@pytest.mark.parametrize("expression", [
    "`a` + `b`",
    "concat(`now`,`user`,`database`)",  # columns named like functions
    "json_value(`doc`,_utf8mb4'$.name')",
    "year(`dt`)",  # a DATETIME column is the same in every session
    "week(`d`,3)",
    "yearweek(`d`,0)",
    "convert_tz(`dt`,_utf8mb4'+00:00',_utf8mb4'+05:00')",
])
def test_expressions_of_the_row_alone_pass(expression):
    assert session_dependence(expression, ["ts"]) is None
