"""A private MariaDB server with a ROW/FULL binlog, for tests, the demo and benchmarks.

It never touches a system MariaDB: ``mariadb-install-db`` initialises a data directory of its own, and
``mariadbd --no-defaults`` listens on a free 127.0.0.1 port and on a socket inside that directory. The
binlog is configured as a CDC source must be (ROW format, FULL row image, FULL row metadata so that column
names are in the binlog, utf8mb4), GTID strict mode on.

Accounts (each for both 'localhost' and '127.0.0.1', because a TCP login from 127.0.0.1 may resolve to
either host name):

* ``root``: unix socket only, no password, for administration;
* ``cdc``: only SELECT, REPLICATION SLAVE, REPLICATION CLIENT: what the pipeline needs, nothing more;
* ``app``: all privileges, the "application" that writes source data.

Run ``python -m airflow_cdc_provider.testing.mariadb`` to start one in the foreground (Ctrl-C stops it).
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Self

import pymysql

MARIADBD_CANDIDATES = ("/usr/sbin/mariadbd", "/usr/sbin/mysqld")


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class PrivateServer:
    """What the private servers (MariaDB, PostgreSQL, Spark) share: ``with`` starts one and cleans it up."""

    def start(self) -> Self:
        raise NotImplementedError

    def cleanup(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.cleanup()


def serve_until_interrupted(server: PrivateServer, describe: Callable[[Any], str]) -> None:  # pragma: no cover
    """Run ``server`` by hand: print ``describe(server)``, wait for Ctrl-C, clean up."""
    with server:
        print(describe(server), flush=True)
        try:
            signal.pause()
        except KeyboardInterrupt:
            pass


def stop_process_group(proc: subprocess.Popen | None, sig: int, timeout: float) -> None:
    """Stop a server started with ``start_new_session=True``: ``sig`` to its process group, SIGKILL if it
    has not exited within ``timeout`` seconds."""
    if proc is None or proc.poll() is not None:
        return
    os.killpg(proc.pid, sig)
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def _find_binary(name: str, candidates: tuple[str, ...] = ()) -> str:
    for c in candidates:
        if os.access(c, os.X_OK):
            return c
    found = shutil.which(name)
    if not found:
        raise RuntimeError(
            f"{name} not found: install the Debian package mariadb-server (make test and make demo do it)"
        )
    return found


@dataclass
class Account:
    user: str
    password: str


@dataclass
class PrivateMariaDB(PrivateServer):
    """Start with ``start()`` (or use as a context manager); stop with ``stop()``."""

    base_dir: Path | None = None
    port: int | None = None
    server_id: int = 1
    buffer_pool: str = "256M"
    extra_args: list[str] = field(default_factory=list)
    cdc: Account = field(default_factory=lambda: Account("cdc", "cdc-" + secrets.token_hex(8)))
    app: Account = field(default_factory=lambda: Account("app", "app-" + secrets.token_hex(8)))
    _proc: subprocess.Popen | None = None
    _owns_dir: bool = False

    # -- paths --------------------------------------------------------------------------------------
    @property
    def datadir(self) -> Path:
        assert self.base_dir is not None
        return self.base_dir / "data"

    @property
    def tmpdir(self) -> Path:
        """The server's own scratch directory: a shared /tmp lets another process remove its temp tables."""
        assert self.base_dir is not None
        return self.base_dir / "tmp"

    @property
    def socket_path(self) -> str:
        assert self.base_dir is not None
        return str(self.base_dir / "mysqld.sock")

    @property
    def pid_file(self) -> Path:
        assert self.base_dir is not None
        return self.base_dir / "mysqld.pid"

    @property
    def error_log(self) -> Path:
        assert self.base_dir is not None
        return self.base_dir / "mysqld.err"

    @property
    def host(self) -> str:
        return "127.0.0.1"

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc else None

    # -- lifecycle ----------------------------------------------------------------------------------
    def start(self, timeout: float = 60.0) -> "PrivateMariaDB":
        if self.base_dir is None:
            self.base_dir = Path(tempfile.mkdtemp(prefix="cdc-mariadb-"))
            self._owns_dir = True
        self.base_dir.mkdir(parents=True, exist_ok=True)
        self.tmpdir.mkdir(exist_ok=True)
        if self.port is None:
            self.port = free_port()
        fresh = not (self.datadir / "mysql").exists()
        if fresh:
            self._install_db()
        self._launch(timeout)
        if fresh:
            self._create_accounts()
        return self

    def _install_db(self) -> None:
        install = _find_binary("mariadb-install-db")
        cmd = [
            install,
            "--no-defaults",
            f"--datadir={self.datadir}",
            f"--tmpdir={self.tmpdir}",
            "--auth-root-authentication-method=normal",
            "--skip-test-db",
        ]
        if os.geteuid() == 0:
            cmd.append("--user=root")
        res = subprocess.run(cmd, capture_output=True, text=True)
        if res.returncode != 0:
            raise RuntimeError(f"mariadb-install-db failed ({res.returncode}):\n{res.stdout}\n{res.stderr}")

    def server_args(self) -> list[str]:
        args = [
            _find_binary("mariadbd", MARIADBD_CANDIDATES),
            "--no-defaults",
            f"--datadir={self.datadir}",
            f"--tmpdir={self.tmpdir}",
            f"--socket={self.socket_path}",
            f"--pid-file={self.pid_file}",
            f"--log-error={self.error_log}",
            f"--port={self.port}",
            "--bind-address=127.0.0.1",
            "--log-bin=mariadb-bin",
            "--binlog-format=ROW",
            "--binlog-row-image=FULL",
            "--binlog-row-metadata=FULL",
            f"--server-id={self.server_id}",
            "--gtid-strict-mode=1",
            "--character-set-server=utf8mb4",
            "--collation-server=utf8mb4_general_ci",
            f"--innodb-buffer-pool-size={self.buffer_pool}",
            "--innodb-log-file-size=256M",
            "--max-connections=300",
            *self.extra_args,
        ]
        if os.geteuid() == 0:
            args.append("--user=root")
        return args

    def _launch(self, timeout: float) -> None:
        log = open(self.base_dir / "mysqld.stdout", "ab")  # type: ignore[operator]
        self._proc = subprocess.Popen(
            self.server_args(), stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
        deadline = time.monotonic() + timeout
        last_error: Exception | None = None
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                raise RuntimeError(
                    f"mariadbd exited with {self._proc.returncode}; its log:\n{self._tail_log()}"
                )
            try:
                with contextlib.closing(self.root_connection()) as c:
                    c.ping()
                return
            except pymysql.err.OperationalError as exc:
                last_error = exc
                time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"mariadbd did not accept connections within {timeout}s: {last_error}")

    def _tail_log(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.error_log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no error log)"

    def _create_accounts(self) -> None:
        with contextlib.closing(self.root_connection()) as c, c.cursor() as cur:
            # anonymous accounts would shadow ours for some host forms
            cur.execute("DELETE FROM mysql.global_priv WHERE User=''")
            cur.execute("FLUSH PRIVILEGES")
            for host in ("localhost", "127.0.0.1"):
                cur.execute(f"CREATE USER '{self.cdc.user}'@'{host}' IDENTIFIED BY %s", (self.cdc.password,))
                cur.execute(
                    f"GRANT SELECT, REPLICATION SLAVE, REPLICATION CLIENT ON *.* TO '{self.cdc.user}'@'{host}'"
                )
                cur.execute(f"CREATE USER '{self.app.user}'@'{host}' IDENTIFIED BY %s", (self.app.password,))
                cur.execute(f"GRANT ALL PRIVILEGES ON *.* TO '{self.app.user}'@'{host}' WITH GRANT OPTION")

    def stop(self, timeout: float = 60.0) -> None:
        """Clean shutdown by PID (SIGTERM, then SIGKILL if it hangs)."""
        proc, self._proc = self._proc, None
        stop_process_group(proc, signal.SIGTERM, timeout)

    def restart(self) -> None:
        self.stop()
        self._launch(60.0)

    def cleanup(self) -> None:
        self.stop()
        if self._owns_dir and self.base_dir is not None:
            shutil.rmtree(self.base_dir, ignore_errors=True)

    # -- connections --------------------------------------------------------------------------------
    def root_connection(self, database: str | None = None, **kw) -> pymysql.connections.Connection:
        return pymysql.connect(
            unix_socket=self.socket_path, user="root", database=database, autocommit=True,
            charset="utf8mb4", **kw
        )

    def app_connection(self, database: str | None = None, **kw) -> pymysql.connections.Connection:
        return pymysql.connect(
            host=self.host, port=self.port, user=self.app.user, password=self.app.password,
            database=database, autocommit=True, charset="utf8mb4", **kw
        )

    def connection_uri(self, account: Account | None = None, database: str | None = None) -> str:
        """An Airflow-style connection URI (``mysql://user:pw@host:port/db``) for the given account."""
        from urllib.parse import quote

        a = account or self.cdc
        return (
            f"mysql://{quote(a.user, safe='')}:{quote(a.password, safe='')}@{self.host}:{self.port}"
            f"/{quote(database or '', safe='')}"
        )

    def create_database(self, name: str) -> None:
        with contextlib.closing(self.root_connection()) as c, c.cursor() as cur:
            cur.execute(f"CREATE DATABASE `{name}` CHARACTER SET utf8mb4")

    def drop_database(self, name: str) -> None:
        with contextlib.closing(self.root_connection()) as c, c.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS `{name}`")

    @contextlib.contextmanager
    def database(self, name: str) -> Iterator[str]:
        self.create_database(name)
        try:
            yield name
        finally:
            self.drop_database(name)


def main() -> None:  # pragma: no cover - manual use
    import argparse

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dir", type=Path, default=None, help="data directory (default: a new temp dir)")
    ap.add_argument("--port", type=int, default=None)
    args = ap.parse_args()
    db = PrivateMariaDB(base_dir=args.dir, port=args.port).start()
    print(f"MariaDB on 127.0.0.1:{db.port}, socket {db.socket_path}, pid {db.pid}")
    print(f"cdc user: {db.connection_uri()}")
    try:
        signal.pause()
    except KeyboardInterrupt:
        pass
    finally:
        db.stop()


if __name__ == "__main__":  # pragma: no cover
    main()
