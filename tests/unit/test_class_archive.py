"""The JVM class archive's life cycle with this machine's real java: claim, dump at exit, check, publish."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from airflow_cdc_provider.spark.launch.class_archive import ClassArchive


def _java_with(options: str) -> subprocess.CompletedProcess:
    """A JVM started with ``options`` (what spark-submit's driver would get), running only -version."""
    return subprocess.run(["java", *options.split(), "-version"], capture_output=True, text=True, timeout=60)


@pytest.fixture()
def archive(tmp_path: Path) -> ClassArchive:
    a = ClassArchive.for_job("snapshot_chunk", shutil.which("java") or "", directory=tmp_path)
    assert a is not None, "java is a dependency of the project (Spark runs on it)"
    return a


def test_first_job_dumps_later_jobs_map(archive: ClassArchive):
    first = archive.java_options()
    assert "-XX:ArchiveClassesAtExit=" in first and not archive.path.exists()
    assert archive.java_options() == "", "a second job must not dump while the first holds the claim"
    assert _java_with(first).returncode == 0
    assert archive.publish(first)
    assert archive.path.exists() and not archive.claim.exists()
    later = archive.java_options()
    assert later.endswith(f"-XX:SharedArchiveFile={archive.path}")
    run = subprocess.run(["java", *later.split(), "-Xshare:on", "-Xlog:cds=info", "-version"],
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 0 and "dynamic" in run.stdout.lower(), run.stdout + run.stderr


def test_a_truncated_dump_is_never_published(archive: ClassArchive, tmp_path: Path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    options = archive.java_options()
    assert _java_with(options).returncode == 0
    data = archive.dump.read_bytes()
    archive.dump.chmod(0o644)
    archive.dump.write_bytes(data[: len(data) // 3])  # a JVM killed while writing it
    assert not archive.publish(options)
    assert not archive.path.exists() and not archive.dump.exists() and not archive.claim.exists()
    assert not list(tmp_path.glob("hs_err_pid*")), "the check's JVM crash leaves no crash log behind"
    assert "-XX:ArchiveClassesAtExit=" in archive.java_options(), "the next job dumps again"


def test_a_failed_job_leaves_no_claim(archive: ClassArchive):
    options = archive.java_options()
    archive.abandon(options)
    assert not archive.claim.exists()
    assert "-XX:ArchiveClassesAtExit=" in archive.java_options()


def test_the_key_follows_job_and_class_path(tmp_path: Path):
    java = shutil.which("java") or ""
    paths = {ClassArchive.for_job(job, java, class_path=cp, directory=tmp_path).path
             for job in ("snapshot_chunk", "binlog_stream") for cp in ("", "/opt/extra.jar")}
    assert len(paths) == 4


def test_archive_options_are_replaced_not_stacked():
    options = "-Dx=1 -XX:+IgnoreUnrecognizedVMOptions -XX:ArchiveClassesAtExit=/c/a.jsa.dump-1"
    assert ClassArchive.is_option(options)
    assert ClassArchive.without_options(options) == "-Dx=1 -XX:+IgnoreUnrecognizedVMOptions"
