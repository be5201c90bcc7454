"""sysbench (Debian package) against a private MariaDB: the load of the load tests, soak and benchmarks."""

from __future__ import annotations

import subprocess


def sysbench(mariadb, db: str, action: str, table_size: int, *extra: str, test: str = "oltp_write_only",
             background: bool = False):
    """``sysbench <test> ... <action>`` on ``db`` (one table, ``sbtest1``) as the app account; the completed
    process (asserted successful), or the Popen when ``background``."""
    cmd = ["sysbench", test, "--db-driver=mysql", "--mysql-host=127.0.0.1", f"--mysql-port={mariadb.port}",
           f"--mysql-user={mariadb.app.user}", f"--mysql-password={mariadb.app.password}", f"--mysql-db={db}",
           "--tables=1", f"--table-size={table_size}", *extra, action]
    if background:
        return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=3600)
    if res.returncode != 0:
        raise RuntimeError(f"sysbench {action} failed:\n{res.stdout[-2000:]}{res.stderr[-2000:]}")
    return res
