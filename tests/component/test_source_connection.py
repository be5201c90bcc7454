"""Connections to the source share one TLS context when their settings give none."""

from __future__ import annotations

import contextlib

from airflow_cdc_provider.core.offsets import BinlogOffset
from airflow_cdc_provider.source.binlog import open_stream
from airflow_cdc_provider.source.connection import SourceConnection, connect
from airflow_cdc_provider.source.server import current_offset


def test_connections_without_ssl_settings_share_one_tls_context_and_work(source_db, server_id):
    with contextlib.closing(connect(source_db.settings)) as a, contextlib.closing(connect(source_db.settings)) as b:
        assert a.ctx is not None and a.ctx is b.ctx
        with a.cursor() as cur:
            cur.execute("SELECT 1")
            assert cur.fetchone() == (1,)
        here = current_offset(a)
        # a binlog read's replication and control connections too
        with open_stream(source_db.settings, server_id, BinlogOffset(here.file, here.pos), {}) as stream:
            list(stream)
            assert stream.library_stream._stream_connection.ctx is a.ctx
        # settings that give TLS options get a context of their own
        assert a._create_ssl_ctx({"check_hostname": False}) is not SourceConnection._preferred
