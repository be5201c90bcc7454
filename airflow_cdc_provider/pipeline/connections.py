"""Resolve a connection id the way Airflow does, without paying for Airflow when it is not needed.

``AIRFLOW_CONN_<ID>`` (URI or JSON) is read directly; any other id is looked up through Airflow's own
secrets backends and metadata database (imported lazily, only then).
"""

from __future__ import annotations

import os
from typing import Any

from airflow_cdc_provider.source.settings import ConnectionConfigError, ConnectionSettings, parse_connection_text


def env_var_name(conn_id: str) -> str:
    return f"AIRFLOW_CONN_{conn_id.upper()}"


def resolve_fields(conn_id: str, example: str = "mysql://user:password@host:3306") -> dict[str, Any]:
    """conn_type, host, port, login, password, schema, extra (a dict) of an Airflow connection."""
    text = os.environ.get(env_var_name(conn_id))
    if text:
        return parse_connection_text(text, conn_id)
    try:
        conn = airflow_connection(conn_id)
    except Exception as exc:  # not found, or no usable Airflow metadata DB
        raise ConnectionConfigError(
            f"unknown connection {conn_id!r}: create it in Airflow (Admin > Connections) or set "
            f"{env_var_name(conn_id)}='{example}' ({type(exc).__name__})"
        ) from None
    return {
        "conn_type": conn.conn_type, "host": conn.host, "port": conn.port, "login": conn.login,
        "password": conn.password, "schema": conn.schema, "extra": conn.extra_dejson,
    }


def airflow_connection(conn_id: str):
    """The connection as Airflow resolves it where this runs: in a task or trigger, through the Task SDK (the
    API server answers; such a process has no metadata database); elsewhere (the ``airflow-cdc`` command on a
    machine of the deployment), through the secrets backends and the metadata database."""
    import sys

    if hasattr(sys.modules.get("airflow.sdk.execution_time.task_runner"), "SUPERVISOR_COMMS"):
        from airflow.sdk import Connection

        return Connection.get(conn_id)
    import contextlib

    # Airflow sets its logging up on import, writing to stdout; here stdout is a command's output (--json)
    with contextlib.redirect_stdout(sys.stderr):
        from airflow.models.connection import Connection  # noqa: PLC0415 - heavy, only as a fallback

        return Connection.get_connection_from_secrets(conn_id)


def resolve_mysql(conn_id: str) -> ConnectionSettings:
    return ConnectionSettings.from_fields(**resolve_fields(conn_id), conn_id=conn_id)
