"""The jdbc sink is checked at validation, against the real PostgreSQL: its connection opens and its user may
create the mirror tables in ``sink.schema`` (or create the schema). Each problem names the key and the fix; none
shows the password."""

from __future__ import annotations

import re

import pytest

from airflow_cdc_provider.sinks.base import SinkConfig
from airflow_cdc_provider.sinks.postgres import PostgresSink


def sink_of(postgres, schema: str, user: str | None = None, password: str | None = None) -> PostgresSink:
    conn = {"conn_id": "shop_pg", "host": "127.0.0.1", "port": postgres.port, "login": user or postgres.user,
            "schema": postgres.database}
    return PostgresSink(SinkConfig(type="jdbc", conn=conn, schema=schema),
                        {"sink_password": password if password is not None else postgres.password})


@pytest.fixture
def weak_user(postgres, request):
    """A login role with no CREATE on the database (PostgreSQL gives PUBLIC none), and a schema it may only read."""
    name = "weak_" + re.sub(r"[^a-z0-9]+", "_", request.node.name.lower())[-30:]
    conn = postgres.connect()
    conn.autocommit = True
    with conn.cursor() as cur:
        cur.execute(f"CREATE ROLE {name} LOGIN PASSWORD 'weak-pw'")
        cur.execute(f"CREATE SCHEMA IF NOT EXISTS {name}_ro")
        cur.execute(f"GRANT USAGE ON SCHEMA {name}_ro TO {name}")
    try:
        yield name
    finally:
        with conn.cursor() as cur:
            cur.execute(f"DROP SCHEMA {name}_ro CASCADE")
            cur.execute(f"DROP ROLE {name}")
        conn.close()


def test_a_sink_whose_user_may_create_its_schema_passes(postgres):
    assert sink_of(postgres, "checks_new_schema").check_writable() == []


def test_a_wrong_password_is_named_under_sink_conn_id_without_the_password(postgres):
    problems = sink_of(postgres, "checks", password="not-the-password").check_writable()
    assert len(problems) == 1 and problems[0].startswith("sink.conn_id: cannot connect to the jdbc sink shop_pg")
    assert "not-the-password" not in problems[0] and postgres.password not in problems[0]


def test_a_user_who_cannot_create_the_schema_or_tables_in_it_is_told_the_grant(postgres, weak_user):
    missing = sink_of(postgres, "checks_absent", weak_user, "weak-pw").check_writable()
    assert missing == [f"sink.schema: schema checks_absent does not exist in database {postgres.database} and user "
                       f'{weak_user} cannot create it: CREATE SCHEMA "checks_absent" AUTHORIZATION "{weak_user}", or '
                       f'GRANT CREATE ON DATABASE "{postgres.database}" TO "{weak_user}"']
    read_only = sink_of(postgres, f"{weak_user}_ro", weak_user, "weak-pw").check_writable()
    assert read_only == [f"sink.schema: user {weak_user} cannot create tables in schema {weak_user}_ro of database "
                         f'{postgres.database}: GRANT USAGE, CREATE ON SCHEMA "{weak_user}_ro" TO "{weak_user}", or '
                         "name another sink.schema"]
