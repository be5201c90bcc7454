"""Opening a connection to the source, with errors that say which setting to check."""

from __future__ import annotations

import pymysql

from airflow_cdc_provider.source.server import SourceError
from airflow_cdc_provider.source.settings import ConnectionSettings


class SourceConnectError(SourceError):
    pass


def connect(settings: ConnectionSettings) -> pymysql.connections.Connection:
    """A new autocommit connection in UTC (see ``ConnectionSettings.pymysql_kwargs``); the caller closes it."""
    try:
        return pymysql.connect(**settings.pymysql_kwargs())
    except pymysql.err.OperationalError as exc:
        code, msg = (exc.args + ("",))[:2]
        if code == 1045:
            hint = "check the login and password of the connection"
        elif code in (2003, 2005, 2006, 2013):
            hint = "check the host and port of the connection and that the server is running"
        elif code == 1049:
            hint = "check the schema (database) of the connection"
        else:
            hint = "check the connection settings"
        raise SourceConnectError(f"cannot connect to {settings.describe()}: {msg} ({hint})") from None
