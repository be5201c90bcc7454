"""A private PostgreSQL server (Debian's binaries) for the jdbc sink's tests, the demo and benchmarks.

``initdb`` into a temporary directory, ``postgres`` on a free 127.0.0.1 port with its socket inside that
directory, password authentication over TCP. PostgreSQL refuses to run as root, so under root the server
runs as the ``postgres`` system user (created by the Debian package). Stop and restart by PID (the fault
tests stop it to make the sink unavailable).
"""

from __future__ import annotations

import glob
import os
import pwd
import secrets
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

from airflow_cdc_provider.testing.mariadb import PrivateServer, free_port, stop_process_group


def pg_bin(name: str) -> str:
    found = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"))
    if not found:
        raise RuntimeError(f"{name} not found: install the Debian package postgresql (make test does it)")
    return found[-1]


class PrivatePostgres(PrivateServer):
    def __init__(self, base_dir: str | None = None, port: int | None = None) -> None:
        self.base_dir = Path(base_dir or tempfile.mkdtemp(prefix="airflow-cdc-pg-"))
        self.port = port or free_port()
        self.user = "cdc_sink"
        self.password = secrets.token_urlsafe(16)
        self.database = "sink"
        self._proc: subprocess.Popen | None = None
        self._as_user: list[str] = []

    @property
    def datadir(self) -> Path:
        return self.base_dir / "data"

    def _run_as(self) -> list[str]:
        if os.geteuid() != 0:
            return []
        pw = pwd.getpwnam("postgres")
        os.chown(self.base_dir, pw.pw_uid, pw.pw_gid)
        return ["runuser", "-u", "postgres", "--"]

    def start(self, timeout: float = 60.0) -> "PrivatePostgres":
        self._as_user = self._run_as()
        if not self.datadir.exists():
            pwfile = self.base_dir / "pw"
            pwfile.write_text(self.password)
            if self._as_user:
                pw = pwd.getpwnam("postgres")
                os.chown(pwfile, pw.pw_uid, pw.pw_gid)
            subprocess.run([*self._as_user, pg_bin("initdb"), "-D", str(self.datadir), "-U", self.user,
                            f"--pwfile={pwfile}", "--auth-host=scram-sha-256", "--auth-local=trust", "-E", "UTF8",
                            "--no-sync"], check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
            pwfile.unlink()
        self._launch(timeout)
        self._psql(f"CREATE DATABASE {self.database}", db="postgres", check=False)
        return self

    def _launch(self, timeout: float) -> None:
        log = open(self.base_dir / "postgres.log", "ab")
        self._proc = subprocess.Popen(
            [*self._as_user, pg_bin("postgres"), "-D", str(self.datadir), "-p", str(self.port), "-k", str(self.base_dir),
             "-c", "listen_addresses=127.0.0.1", "-c", "fsync=off", "-c", "synchronous_commit=off",
             "-c", "full_page_writes=off", "-c", "max_connections=50"],
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                raise RuntimeError(f"postgres exited with {self._proc.returncode}: see {self.base_dir / 'postgres.log'}")
            ok = subprocess.run([pg_bin("pg_isready"), "-h", "127.0.0.1", "-p", str(self.port)],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode == 0
            if ok:
                return
            time.sleep(0.2)
        raise RuntimeError(f"postgres did not start within {timeout}s")

    def _psql(self, sql: str, db: str | None = None, check: bool = True) -> None:
        subprocess.run([*self._as_user, pg_bin("psql"), "-h", str(self.base_dir), "-p", str(self.port), "-U", self.user,
                        "-d", db or self.database, "-v", "ON_ERROR_STOP=1", "-q", "-c", sql],
                       check=check, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)

    def connection_uri(self) -> str:
        return f"postgresql://{self.user}:{self.password}@127.0.0.1:{self.port}/{self.database}"

    def connect(self):
        import psycopg2

        return psycopg2.connect(host="127.0.0.1", port=self.port, user=self.user, password=self.password,
                                dbname=self.database, options="-c timezone=UTC")

    def stop(self, timeout: float = 60.0) -> None:
        proc, self._proc = self._proc, None
        stop_process_group(proc, signal.SIGINT, timeout)  # SIGINT: PostgreSQL's fast shutdown

    def restart(self) -> None:
        self.stop()
        self._launch(60.0)

    def cleanup(self) -> None:
        self.stop()
        shutil.rmtree(self.base_dir, ignore_errors=True)
