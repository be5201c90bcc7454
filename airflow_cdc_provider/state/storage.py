"""Files of the state store and the parquet sink: at a local path or at any URI an fsspec filesystem serves.

A plain path (``/data/cdc``) is the disk of whichever process opens it. A URI (``file:///shared/cdc``,
``s3a://bucket/cdc``, ``hdfs://namenode/cdc``, ``gs://``, ``abfs://``) is opened through fsspec by the Airflow
worker and by the Spark job's Python alike, so neither assumes it shares a disk with the other; Spark reads and
writes the same URI (``location``) with its own Hadoop filesystem. So the URI must name the same place for both:
the scheme's fsspec package on the Airflow workers and the cluster (s3fs for s3/s3a, pyarrow for hdfs, gcsfs,
adlfs) and the same credentials in both credential chains (for s3a: the AWS chain and ``spark.hadoop.fs.s3a.*``).

Writes of one file are atomic: a temporary file renamed into place where renames are atomic (local disks,
HDFS), one PUT on object stores. A directory rename is atomic only where the filesystem's is (not on S3, where
it is a copy: readers may see a directory being published file by file).
"""

from __future__ import annotations

import os
import posixpath
import tempfile
import time
import uuid
from typing import IO, Any, Callable
from urllib.parse import urlsplit

# filesystems whose rename of a file is one atomic step (so temporary-file-then-rename is the atomic write)
_ATOMIC_RENAME = {"file", "local", "hdfs", "viewfs", "webhdfs", "swebhdfs"}

# the fsspec package a scheme needs, for the error message when it is missing
_PACKAGES = {"s3": "s3fs", "s3a": "s3fs", "gs": "gcsfs", "gcs": "gcsfs", "abfs": "adlfs", "abfss": "adlfs",
             "az": "adlfs", "hdfs": "pyarrow (and the Hadoop client libraries, libhdfs)"}


class StorageError(RuntimeError):
    pass


class Storage:
    """One root (``uri``); every method takes a path relative to it, written with ``/``."""

    def __init__(self, uri: str | os.PathLike[str], key: str = "path") -> None:
        import fsspec

        self.uri = str(uri)
        self.key = key
        scheme = urlsplit(self.uri).scheme
        if not scheme:  # a plain local path
            self.fs = fsspec.filesystem("file")
            self.root = os.path.abspath(os.path.expanduser(self.uri))
            self._location_root = self.root
            self.protocol = "file"
            return
        try:
            self.fs, root = fsspec.core.url_to_fs(self.uri)
        except (ImportError, ValueError) as exc:
            package = _PACKAGES.get(scheme, f"the fsspec implementation of {scheme!r}")
            raise StorageError(
                f"{key} {self.uri!r}: cannot open {scheme}:// here ({exc}); install {package} on the Airflow "
                "workers and the Spark cluster, or use a local path or file:// URI"
            ) from None
        self.root = root.rstrip("/") or "/"
        self._location_root = self.uri.rstrip("/")
        protocol = self.fs.protocol
        self.protocol = protocol if isinstance(protocol, str) else protocol[0]

    @property
    def is_local(self) -> bool:
        return self.protocol in ("file", "local")

    @property
    def renames_atomically(self) -> bool:
        """Whether ``rename`` of a directory is one step (a local or HDFS filesystem), not a copy of each object."""
        return self.protocol in _ATOMIC_RENAME

    # -- names -------------------------------------------------------------------------------------
    def path(self, rel: str = "") -> str:
        """The filesystem path of ``rel`` (what ``self.fs`` takes)."""
        return posixpath.join(self.root, rel) if rel else self.root

    def location(self, rel: str = "") -> str:
        """``rel`` as Spark (and a job spec) should name it: the URI with its scheme, or the local path."""
        return f"{self._location_root}/{rel}" if rel else self._location_root

    # -- files -------------------------------------------------------------------------------------
    def _fresh(self) -> None:
        """Forget cached listings: the other side (Airflow worker or Spark job) writes to the same place."""
        if not self.is_local:
            self.fs.invalidate_cache()

    def read_text(self, rel: str) -> str | None:
        self._fresh()
        try:
            with self.fs.open(self.path(rel), "rb") as f:
                return f.read().decode("utf-8")
        except FileNotFoundError:
            return None

    def write_text(self, rel: str, text: str) -> None:
        """Replace ``rel`` with ``text`` in one step: a reader sees the old or the new file, never a part."""
        self.write_bytes(rel, text.encode("utf-8"))

    def write_bytes(self, rel: str, data: bytes) -> None:
        """Replace ``rel`` with ``data`` in one step, as ``write_text``."""
        self._replace(rel, lambda path: self.fs.pipe_file(path, data))

    def create(self, rel: str, text: str) -> bool:
        """Write ``rel`` only if it does not exist, in one step; False if it does. Atomic on local disks and
        shared mounts (an exclusive create) and on object stores with conditional writes (S3's If-None-Match);
        elsewhere an existence check comes first, which two writers racing within milliseconds can both pass."""
        target = self.path(rel)
        data = text.encode("utf-8")
        self.fs.makedirs(posixpath.dirname(target), exist_ok=True)
        if self.is_local:  # written aside, then linked into place: a crash never leaves a half-written file
            fd, aside = tempfile.mkstemp(dir=posixpath.dirname(target), prefix=".create-", suffix=".tmp")
            try:
                with os.fdopen(fd, "wb") as f:
                    f.write(data)
                os.chmod(aside, 0o644)
                try:
                    os.link(aside, target)
                except FileExistsError:
                    return False
                return True
            finally:
                os.unlink(aside)
        self._fresh()
        try:
            self.fs.pipe_file(target, data, mode="create")
            return True
        except FileExistsError:
            return False
        except TypeError:  # a filesystem without exclusive writes
            if self.fs.exists(target):
                return False
            self.fs.pipe_file(target, data)
            return True
        except Exception as exc:  # noqa: BLE001 - S3's "precondition failed" comes as the client's own error
            if "PreconditionFailed" in type(exc).__name__ or "412" in str(exc) or "PreconditionFailed" in str(exc):
                return False
            raise

    def upload(self, local_file: str | os.PathLike[str], rel: str) -> None:
        """Copy a local file to ``rel``, as atomically as ``write_text``."""
        self._replace(rel, lambda path: self.fs.put_file(os.fspath(local_file), path))

    def _replace(self, rel: str, write: Callable[[str], Any]) -> None:
        target = self.path(rel)
        parent = posixpath.dirname(target)
        self.fs.makedirs(parent, exist_ok=True)
        if self.protocol not in _ATOMIC_RENAME:  # an object store: one PUT is atomic
            write(target)
            return
        tmp = posixpath.join(parent, f".tmp-{uuid.uuid4().hex}")
        try:
            write(tmp)
            self.fs.mv(tmp, target)
        except BaseException:
            if self.fs.exists(tmp):
                self.fs.rm_file(tmp)
            raise

    def open(self, rel: str, mode: str = "rb") -> IO[Any]:
        return self.fs.open(self.path(rel), mode)

    def exists(self, rel: str) -> bool:
        self._fresh()
        return self.fs.exists(self.path(rel))

    def listdir(self, rel: str = "") -> list[str]:
        """Names (not paths) in directory ``rel``, sorted; empty if it does not exist."""
        self._fresh()
        try:
            entries = self.fs.ls(self.path(rel), detail=False)
        except FileNotFoundError:
            return []
        base = self.path(rel).rstrip("/")
        return sorted(posixpath.basename(e.rstrip("/")) for e in entries if e.rstrip("/") != base)

    def delete(self, rel: str) -> None:
        try:
            self.fs.rm_file(self.path(rel))
        except FileNotFoundError:
            pass

    def rename(self, src: str, dst: str) -> None:
        """Move file or directory ``src`` to ``dst`` (which must not exist)."""
        s, d = self.path(src), self.path(dst)
        self.fs.makedirs(posixpath.dirname(d), exist_ok=True)
        if self.renames_atomically or not self.fs.isdir(s):
            self.fs.mv(s, d, recursive=True)
            return
        # an object store: a directory is a key prefix; copy its objects, then delete the originals
        for f in self.fs.find(s):
            self.fs.copy(f, d + f[len(s):])
        self.fs.rm(s, recursive=True)

    def rmtree(self, rel: str) -> None:
        try:
            self.fs.rm(self.path(rel), recursive=True)
        except FileNotFoundError:
            pass

    def remove_abandoned(self, rel: str, older_than: float) -> list[str]:
        """Remove the entries of directory ``rel`` in which nothing was written for ``older_than`` seconds (what a
        killed writer left on its way in); their names. An entry whose age this filesystem cannot tell stays."""
        now = time.time()
        removed = []
        for name in self.listdir(rel):
            entry = self.path(f"{rel}/{name}")
            try:
                files = self.fs.find(entry) or [entry]
                newest = max(self.fs.modified(f).timestamp() for f in files)
            except (NotImplementedError, OSError, ValueError):
                continue
            if now - newest > older_than:
                self.rmtree(f"{rel}/{name}")
                removed.append(name)
        return removed

    def ensure_writable(self, what: str) -> None:
        """Create the root if needed and prove a file can be written there; else a StorageError naming the key."""
        probe = f".probe-{uuid.uuid4().hex}"
        try:
            self.fs.makedirs(self.root, exist_ok=True)
            self.write_text(probe, "ok")
            self.delete(probe)
        except (OSError, PermissionError) as exc:
            raise StorageError(
                f"{what} {self.uri!r} is not writable ({getattr(exc, 'strerror', None) or exc}); set {self.key} "
                "to a directory the Airflow workers and Spark driver can write"
            ) from None


def read_text(uri: str) -> str | None:
    """The text of one file named by a local path or URI (None if it does not exist)."""
    head, name = posixpath.split(str(uri).rstrip("/"))
    return Storage(head or ".").read_text(name)
