"""JVM class-data sharing (AppCDS) for the spark-submit drivers started on this machine.

Much of the time a trivial spark-submit takes before it ends goes to loading and verifying Spark's classes. A
JVM (13+) can dump the classes it loaded into an archive when it exits (``-XX:ArchiveClassesAtExit``), and
later JVMs map that archive instead of loading the classes again (``-XX:SharedArchiveFile``), so each of our
jobs (a chunk task, a stream launch) starts sooner (docs/performance.md has the numbers).

One archive per job and per Java/Spark installation, in a cache directory of this machine
(``AIRFLOW_CDC_CLASS_ARCHIVE_DIR``, default ``~/.cache/airflow-cdc-provider/jvm``):

* the first job of a kind claims the archive (an exclusive claim file) and dumps it when its JVM exits
  (once, a few seconds more); the operator then checks that the dump maps (a truncated archive would crash a JVM)
  and publishes it by rename, so no JVM ever sees a half-written archive;
* later jobs map the published archive. A JVM whose version or class path differs from the dump's ignores
  the archive (the JVM checks this itself) and starts as it would without it;
* a claim left by a task that died goes stale after an hour and the next job dumps again.

Only for drivers in spark-submit's own process tree (local master or client deploy mode): a cluster-mode
driver starts on another machine. Pure Python: no Airflow or Spark imports.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

ARCHIVE_DIR_ENV = "AIRFLOW_CDC_CLASS_ARCHIVE_DIR"
STALE_CLAIM_SECONDS = 3600
# a JVM that does not know an -XX option (not HotSpot) starts anyway
_LENIENT = "-XX:+IgnoreUnrecognizedVMOptions"
_MAP = "-XX:SharedArchiveFile="
_DUMP = "-XX:ArchiveClassesAtExit="
# the JVM warns on stdout, line by line, about every class it cannot archive (hundreds, in a task's log);
# errors still show
_QUIET = "-Xlog:cds*=error"


def default_dir() -> Path:
    return Path(os.environ.get(ARCHIVE_DIR_ENV) or Path.home() / ".cache" / "airflow-cdc-provider" / "jvm")


def java_binary(env: dict[str, str] | None = None) -> str | None:
    """The java spark-submit's ``spark-class`` runs: ``$JAVA_HOME/bin/java``, else the one on PATH."""
    env = {**os.environ, **(env or {})}
    if env.get("JAVA_HOME"):
        return str(Path(env["JAVA_HOME"]) / "bin" / "java")
    return shutil.which("java", path=env.get("PATH"))


def _identity(path: str | None) -> str:
    """A file's real path, size and mtime: an upgrade in place changes the key."""
    if not path:
        return ""
    try:
        real = os.path.realpath(path)
        st = os.stat(real)
        return f"{real}:{st.st_size}:{st.st_mtime_ns}"
    except OSError:
        return str(path)


@dataclass(frozen=True)
class ClassArchive:
    """The archive of one job kind for one Java and one spark-submit, and the JVM options that use it."""

    path: Path
    java: str

    @classmethod
    def for_job(cls, job: str, spark_submit: str, env: dict[str, str] | None = None,
                class_path: str = "", directory: Path | None = None) -> ClassArchive | None:
        """None when no java is found (spark-submit will say so itself)."""
        java = java_binary(env)
        if not java:
            return None
        env = {**os.environ, **(env or {})}
        parts = [job, _identity(java), _identity(spark_submit), env.get("SPARK_HOME", ""),
                 env.get("SPARK_CONF_DIR", ""), class_path]
        key = hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]
        return cls((directory or default_dir()) / f"{job}-{key}.jsa", java)

    @staticmethod
    def is_option(options: str) -> bool:
        return _MAP in options or _DUMP in options or _QUIET in options

    @staticmethod
    def dumps(options: str) -> bool:
        """Whether a JVM started with ``options`` dumps the archive when it exits."""
        return _DUMP in options

    @staticmethod
    def without_options(options: str) -> str:
        """``options`` without the archive options ``java_options`` added."""
        return " ".join(o for o in options.split() if not ClassArchive.is_option(o))

    @property
    def claim(self) -> Path:
        return self.path.with_name(self.path.name + ".claim")

    @property
    def dump(self) -> Path:
        return self.path.with_name(self.path.name + f".dump-{os.getpid()}")

    def java_options(self, may_dump: bool = True) -> str:
        """Options for the driver JVM: map the archive, or dump it at exit if no other job is dumping it, or
        nothing (a job then starts as it would without an archive). ``may_dump=False`` for a job that may not
        exit normally here (detached, or killed by its caller): it maps a published archive, never dumps one."""
        if self.path.exists():
            return f"{_LENIENT} {_QUIET} {_MAP}{self.path}"
        if may_dump and self._take_claim():
            return f"{_LENIENT} {_QUIET} {_DUMP}{self.dump}"
        return ""

    def publish(self, options: str) -> bool:
        """After the JVM started with ``options`` exited normally: publish its dump if it maps, and drop the
        claim either way. True if an archive was published."""
        if not self.dumps(options):
            return False
        dump = self.dump
        try:
            ok = dump.exists() and subprocess.run(
                [self.java, f"{_MAP}{dump}", "-Xshare:auto", "-XX:-CreateCoredumpOnCrash",
                 "-XX:ErrorFile=/dev/null", "-version"],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=60).returncode == 0
            if ok:
                os.replace(dump, self.path)
            return ok
        except (OSError, subprocess.SubprocessError):
            return False
        finally:
            self.abandon(options)

    def abandon(self, options: str) -> None:
        """The dumping JVM failed or was killed: remove its partial dump and the claim."""
        if not self.dumps(options):
            return
        for p in (self.dump, self.claim):
            try:
                p.unlink()
            except OSError:
                pass

    def _take_claim(self) -> bool:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            try:
                if time.time() - self.claim.stat().st_mtime > STALE_CLAIM_SECONDS:
                    self.claim.unlink()
            except FileNotFoundError:
                pass
            fd = os.open(self.claim, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except OSError:  # claimed by another job, or the cache directory is not writable
            return False
        os.write(fd, f"{os.getpid()}\n".encode())
        os.close(fd)
        return True
