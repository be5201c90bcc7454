"""The python-mysql-replication versions the binlog reader supports, and its refusal of any other.

The packet reader and the compiled row decoder use the library's internals (``compat/replication.py``). A
release that renamed or reordered one must be refused up front with one error saying what to install, not
fail deep in a read or decode wrongly. The stand-ins for such a release below are subclasses of the real
classes with the one difference a release could make.
"""

import configparser
import functools
import importlib.metadata
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.version import Version
from pymysqlreplication import BinLogStreamReader
from pymysqlreplication.packet import BinLogPacketWrapper

from airflow_cdc_provider.compat import replication
from airflow_cdc_provider.core.offsets import BinlogOffset
from airflow_cdc_provider.source.binlog import TableChangeReader, read_changes_between
from airflow_cdc_provider.source.server import SourceError
from airflow_cdc_provider.source.settings import ConnectionSettings

ROOT = Path(__file__).resolve().parents[2]
INSTALL = "pip install 'mysql-replication>=1.0.17,<1.1'"


def test_the_installed_library_is_supported():
    installed = importlib.metadata.version("mysql-replication")
    assert Version(installed) in SpecifierSet(replication.SUPPORTED)
    assert replication.missing_internals() == []
    replication.check_supported()
    replication.check_library(installed)


def test_the_supported_range_is_the_one_the_package_requires():
    cfg = configparser.ConfigParser()
    cfg.read(ROOT / "setup.cfg")
    requirements = [Requirement(line) for line in cfg["options"]["install_requires"].splitlines()
                    if line.strip() and not line.strip().startswith("#")]
    (pinned,) = [r for r in requirements if r.name == "mysql-replication"]
    assert pinned.specifier == SpecifierSet(replication.SUPPORTED)
    assert replication.INSTALL == INSTALL


@pytest.mark.parametrize("version", ["1.0.17", "1.0.18", "1.0.99"])
def test_versions_inside_the_range_pass(version):
    replication.check_library(version)


@pytest.mark.parametrize("version", ["1.0.16", "1.0.9", "1.1.0", "1.1.0rc1", "2.0.0", "0.45", "custom-build"])
def test_a_version_outside_the_range_is_refused_with_what_to_install(version):
    with pytest.raises(replication.UnsupportedLibrary) as raised:
        replication.check_library(version)
    message = str(raised.value)
    assert f"python-mysql-replication {version} is installed" in message
    assert ">=1.0.17,<1.1" in message and INSTALL in message
    assert isinstance(raised.value, SourceError)


@pytest.fixture
def installed(monkeypatch):
    """Pretend pip installed another mysql-replication: the version its package metadata reports."""
    real = importlib.metadata.version

    def pretend(version):
        monkeypatch.setattr(importlib.metadata, "version",
                            lambda name: version if name == "mysql-replication" else real(name))
        monkeypatch.setattr(replication, "_supported", False)  # a new process, as far as the check knows

    return pretend


def test_check_supported_reads_the_installed_version(installed):
    installed("1.1.2")
    with pytest.raises(replication.UnsupportedLibrary, match=r"python-mysql-replication 1\.1\.2 is installed"):
        replication.check_supported()
    installed("1.0.17")
    replication.check_supported()


@pytest.mark.parametrize("compiled", [True, False])
def test_a_read_is_refused_before_it_connects(installed, compiled):
    """Port 9 has no server: without the check the read would fail connecting instead."""
    installed("1.1.0")
    settings = ConnectionSettings(host="127.0.0.1", port=9, connect_timeout=1)
    reader = TableChangeReader({}, compiled=compiled)
    changes = read_changes_between(settings, 5401, BinlogOffset("mysql-bin.000001", 4),
                                   BinlogOffset("mysql-bin.000001", 400), {}, reader=reader)
    with pytest.raises(replication.UnsupportedLibrary, match=r"1\.1\.0 .*pip install 'mysql-replication"):
        next(changes)


# -- a release without one of the internals ---------------------------------------------------------------------
class _RenamedChecksum(BinLogStreamReader):
    """A release that keeps its checksum setting under another name."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.use_checksum = self._BinLogStreamReader__use_checksum
        del self._BinLogStreamReader__use_checksum


class _NoConnectStep(BinLogStreamReader):
    """A release whose control connection is opened by another method."""

    _BinLogStreamReader__connect_to_ctl = None


class _ReorderedWrapper(BinLogPacketWrapper):
    """A release that swapped two positional parameters: the old call would pass the checksum flag as the
    allowed events, and decode with the wrong settings rather than fail."""

    def __init__(self, from_packet, table_map, ctl_connection, mysql_version, allowed_events, use_checksum,
                 only_tables, ignored_tables, only_schemas, ignored_schemas, freeze_schema, ignore_decode_errors,
                 verify_checksum, optional_meta_data, enable_logging, use_column_name_cache=False,
                 post_header_lengths=None):
        super().__init__(from_packet, table_map, ctl_connection, mysql_version, use_checksum, allowed_events,
                         only_tables, ignored_tables, only_schemas, ignored_schemas, freeze_schema,
                         ignore_decode_errors, verify_checksum, optional_meta_data, enable_logging,
                         use_column_name_cache, post_header_lengths)


class _NoDataBuffer(BinLogPacketWrapper):
    """A release with the same parameters whose pushed-back bytes live elsewhere."""

    @functools.wraps(BinLogPacketWrapper.__init__)
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.pushed_back = self._BinLogPacketWrapper__data_buffer
        del self._BinLogPacketWrapper__data_buffer


@pytest.mark.parametrize("reader_class, wrapper_class, named", [
    (_RenamedChecksum, BinLogPacketWrapper, "_RenamedChecksum()._BinLogStreamReader__use_checksum"),
    (_NoConnectStep, BinLogPacketWrapper, "_NoConnectStep._BinLogStreamReader__connect_to_ctl"),
    (BinLogStreamReader, _ReorderedWrapper, "found (from_packet, table_map, ctl_connection, mysql_version, "
                                            "allowed_events, use_checksum,"),
    (BinLogStreamReader, _NoDataBuffer, "_NoDataBuffer()._BinLogPacketWrapper__data_buffer"),
])
def test_a_missing_internal_is_refused_by_name(reader_class, wrapper_class, named):
    assert replication.missing_internals() == []  # the real classes have them all
    missing = replication.missing_internals(reader_class, wrapper_class)
    assert len(missing) == 1 and named in missing[0]
    with pytest.raises(replication.UnsupportedLibrary) as raised:
        replication.check_library("1.0.17", reader_class, wrapper_class)
    message = str(raised.value)
    assert "python-mysql-replication 1.0.17 lacks internals" in message and named in message
    assert ">=1.0.17,<1.1" in message and INSTALL in message


class _UnnamedConnections(BinLogStreamReader):
    """A release whose connect steps keep the connections under other names (no server is contacted)."""

    def _BinLogStreamReader__connect_to_stream(self):
        self.stream_connection = object()
        self._BinLogStreamReader__connected_stream = True

    def _BinLogStreamReader__connect_to_ctl(self):
        self.ctl_connection = object()
        self._BinLogStreamReader__connected_ctl = True


def test_connections_the_connect_steps_no_longer_set_are_refused():
    stream = _UnnamedConnections(connection_settings={}, server_id=1, enable_logging=False)
    with pytest.raises(replication.UnsupportedLibrary,
                       match=r"no longer set _stream_connection, _ctl_connection.*pip install 'mysql-replication"):
        replication.connect(stream)


def test_the_library_event_of_a_packet_is_the_one_fetchone_makes():
    """A ROTATE packet read through the adapter's 17-argument wrapper gives the library's own RotateEvent."""
    import struct

    from pymysql.protocol import MysqlPacket
    from pymysqlreplication.event import RotateEvent

    stream = BinLogStreamReader(connection_settings={}, server_id=1, enable_logging=False)
    # what connect would have opened: a control connection's charset and the server flavor it reports
    stream._ctl_connection = type("Ctl", (), {"charset": "utf8", "_get_dbms": lambda self: "mysql"})()
    body = struct.pack("<Q", 4) + b"mysql-bin.000002"
    data = b"\x00" + struct.pack("<IBIIIH", 0, 4, 1, 19 + len(body), 0, 0) + body
    assert replication.uses_checksum(stream) is False
    event = replication.library_event(stream, MysqlPacket(data, "utf8"))
    assert isinstance(event, RotateEvent)
    assert (event.position, event.next_binlog) == (4, "mysql-bin.000002")
    replication.set_post_header_lengths(stream, b"\x38")
    assert stream._BinLogStreamReader__post_header_lengths == b"\x38"
