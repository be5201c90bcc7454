"""Binlog positions and their total order.

Two kinds of position exist:

* ``BinlogOffset``: a transaction boundary (``SHOW MASTER STATUS``, the end of an XID event). Watermarks,
  stream seeds and checkpoints are offsets: the binlog may only be resumed from a transaction boundary,
  because starting in the middle of a transaction silently drops rows (python-mysql-replication skips row
  events whose TABLE_MAP it never saw).
* ``EventPosition``: where one row change sits: the start of its row event plus the row's index in it.

Both order by ``(file sequence, position, row)``. The file *sequence* (``.000042``) comes first, so the
order stays correct across ``FLUSH BINARY LOGS`` rotations, where positions restart near 4. An offset sorts
with row ``-1``: a row event that starts exactly at an offset was written after it, so
``event.sort_key > offset.sort_key`` means "this change is newer than that watermark". Snapshot rows carry a
watermark of their chunk as version (the high one; the low one in the jdbc mirror, where the window's changes
are written on top under their own positions), so every later change of the same key has a higher version.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from typing import Any, Mapping

_FILE_RE = re.compile(r"^(?P<base>.+)\.(?P<seq>\d+)$")


@functools.lru_cache(maxsize=64)  # called for every decoded event, with the few names of a binlog
def split_binlog_file(file: str) -> tuple[str, int]:
    """``'mariadb-bin.000042'`` -> ``('mariadb-bin', 42)``; raises ValueError for other names."""
    m = _FILE_RE.match(file or "")
    if not m:
        raise ValueError(f"not a binlog file name: {file!r} (expected '<basename>.<number>')")
    return m.group("base"), int(m.group("seq"))


def _check_same_base(a: str, b: str) -> None:
    if split_binlog_file(a)[0] != split_binlog_file(b)[0]:
        raise ValueError(
            f"cannot order binlog positions of different binlog base names ({a!r} vs {b!r}); "
            "the server's log-bin name changed, re-snapshot the pipeline"
        )


@dataclass(frozen=True)
class BinlogOffset:
    """A transaction boundary in the binlog: ``file``/``pos`` plus the GTID position where known."""

    file: str
    pos: int
    gtid: str | None = None

    def __post_init__(self) -> None:
        split_binlog_file(self.file)
        if self.pos < 0:
            raise ValueError(f"binlog position must be >= 0, got {self.pos}")

    @property
    def file_seq(self) -> int:
        return split_binlog_file(self.file)[1]

    @property
    def sort_key(self) -> tuple[int, int, int]:
        return (self.file_seq, self.pos, -1)

    def _cmp_key(self, other: "BinlogOffset | EventPosition") -> tuple[tuple, tuple]:
        _check_same_base(self.file, other.file)
        return self.sort_key, other.sort_key

    def __lt__(self, other: "BinlogOffset") -> bool:
        a, b = self._cmp_key(other)
        return a < b

    def __le__(self, other: "BinlogOffset") -> bool:
        a, b = self._cmp_key(other)
        return a <= b

    def __gt__(self, other: "BinlogOffset") -> bool:
        a, b = self._cmp_key(other)
        return a > b

    def __ge__(self, other: "BinlogOffset") -> bool:
        a, b = self._cmp_key(other)
        return a >= b

    # Equality ignores the GTID: the same (file, pos) is the same place whatever the GTID text says.
    def __eq__(self, other: object) -> bool:
        if not isinstance(other, BinlogOffset):
            return NotImplemented
        return (self.file, self.pos) == (other.file, other.pos)

    def __hash__(self) -> int:
        return hash((self.file, self.pos))

    def to_dict(self) -> dict[str, Any]:
        return {"file": self.file, "pos": self.pos, "gtid": self.gtid}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "BinlogOffset":
        try:
            return cls(file=str(data["file"]), pos=int(data["pos"]), gtid=data.get("gtid") or None)
        except KeyError as exc:
            raise ValueError(f"binlog offset needs 'file' and 'pos', got {dict(data)!r}") from exc

    def __str__(self) -> str:
        return f"{self.file}:{self.pos}" + (f" (gtid {self.gtid})" if self.gtid else "")


@dataclass(frozen=True, order=False)
class EventPosition:
    """The position of one row change: its row event's start offset and the row's index in the event."""

    file: str
    pos: int
    row: int = 0

    @property
    def sort_key(self) -> tuple[int, int, int]:
        return (split_binlog_file(self.file)[1], self.pos, self.row)

    def is_after(self, offset: BinlogOffset) -> bool:
        """True if this change was written after ``offset`` (so it is not contained in a read at it)."""
        _check_same_base(self.file, offset.file)
        return self.sort_key > offset.sort_key

    def __lt__(self, other: "EventPosition") -> bool:
        _check_same_base(self.file, other.file)
        return self.sort_key < other.sort_key

    def to_dict(self) -> dict[str, Any]:
        return {"file": self.file, "pos": self.pos, "row": self.row}


def min_offset(offsets: "list[BinlogOffset]") -> BinlogOffset:
    if not offsets:
        raise ValueError("no offsets given")
    return min(offsets)


def max_offset(offsets: "list[BinlogOffset]") -> BinlogOffset:
    if not offsets:
        raise ValueError("no offsets given")
    return max(offsets)


def gtids_went_back(resume: str | None, now: str | None) -> bool:
    """Whether the server's GTID position ``now`` lacks a transaction that ``resume`` (read from the same
    server earlier) already had: GTIDs only grow, so the server's binlog is not the one ``resume`` was read from,
    even where its file and position have grown past ``resume``'s again. False when either is unknown.

    MariaDB (``@@gtid_binlog_pos``, ``domain-server-seq`` per domain): a domain of ``resume`` at a lower sequence
    number now (a domain gone, as ``FLUSH BINARY LOGS DELETE_DOMAIN_ID`` leaves it, is not counted). MySQL
    (``Executed_Gtid_Set``, ``uuid[:tag]:lo-hi:...``): a transaction of ``resume`` not in the set now."""
    if not resume or not now:
        return False
    if _MARIADB_GTID.fullmatch(resume.replace(" ", "")) and _MARIADB_GTID.fullmatch(now.replace(" ", "")):
        was, is_now = _mariadb_domains(resume), _mariadb_domains(now)
        return any(domain in is_now and is_now[domain] < seq for domain, seq in was.items())
    was_set, now_set = _mysql_gtid_set(resume), _mysql_gtid_set(now)
    if was_set is None or now_set is None:
        return False
    return any(not _covered(lo, hi, now_set.get(source, [])) for source, intervals in was_set.items()
               for lo, hi in intervals)


_MARIADB_GTID = re.compile(r"\d+-\d+-\d+(?:,\d+-\d+-\d+)*")
_MYSQL_INTERVAL = re.compile(r"(\d+)(?:-(\d+))?")


def _covered(lo: int, hi: int, intervals: list[tuple[int, int]]) -> bool:
    """Whether the intervals (inclusive) together hold every number from ``lo`` to ``hi``."""
    for start, end in sorted(intervals):
        if start > lo:
            return False
        if end >= lo:
            lo = end + 1
        if lo > hi:
            return True
    return False


def _mariadb_domains(position: str) -> dict[int, int]:
    """``d-s-n,...`` -> domain -> sequence number."""
    domains: dict[int, int] = {}
    for gtid in position.replace(" ", "").split(","):
        domain, _, seq = (int(x) for x in gtid.split("-"))
        domains[domain] = max(seq, domains.get(domain, 0))
    return domains


def _mysql_gtid_set(text: str) -> dict[tuple[str, str], list[tuple[int, int]]] | None:
    """``uuid[:tag]:lo-hi[:lo-hi...],...`` -> (uuid, tag) -> intervals; None when it is not such a set."""
    sources: dict[tuple[str, str], list[tuple[int, int]]] = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        uuid, *rest = item.split(":")
        tag = ""
        for part in rest:
            interval = _MYSQL_INTERVAL.fullmatch(part)
            if interval is None:
                tag = part.lower()
                continue
            lo = int(interval.group(1))
            sources.setdefault((uuid.lower(), tag), []).append((lo, int(interval.group(2) or lo)))
        if not re.fullmatch(r"[0-9a-fA-F-]{36}", uuid):
            return None
    return sources
