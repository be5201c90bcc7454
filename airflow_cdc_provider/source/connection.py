"""Opening a connection to the source, with errors that say which setting to check."""

from __future__ import annotations

import pymysql

from airflow_cdc_provider.source.server import SourceError
from airflow_cdc_provider.source.settings import ConnectionSettings


class SourceConnectError(SourceError):
    pass


class SourceConnection(pymysql.connections.Connection):
    """A pymysql connection whose TLS context, when the settings give none (pymysql's PREFERRED mode: TLS when
    the server offers it, its certificate not checked), is one shared by every such connection of the process.
    pymysql builds one per connection, loading the system's CA store each time (tens of milliseconds), and a
    binlog read opens two. Should pymysql stop calling this method, each connection builds its own again."""

    _preferred = None

    def _create_ssl_ctx(self, sslp):
        if sslp:
            return super()._create_ssl_ctx(sslp)
        if SourceConnection._preferred is None:
            SourceConnection._preferred = super()._create_ssl_ctx({})
        return SourceConnection._preferred


def connect(settings: ConnectionSettings) -> pymysql.connections.Connection:
    """A new autocommit connection in UTC (see ``ConnectionSettings.pymysql_kwargs``); the caller closes it."""
    try:
        return SourceConnection(**settings.pymysql_kwargs())
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
