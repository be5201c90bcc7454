"""The pipeline's state store: chunk reports, finished snapshots, the stream seed, checkpoint and status.

One directory per pipeline (``state.path`` in YAML). Layout::

    tables/<db.table>/epoch=<E>/chunks=<a>-<b>.json  chunk reports of snapshot epoch E, one file a window
    tables/<db.table>/epoch=<E>/chunks=<a>-<b>.started  a window's job began (tells a retry to clean up)
    tables/<db.table>/snapshot.json                   the finished snapshot: epoch, chunk reports, min LW
    tables/<db.table>/planned.json                    the epoch a DAG run planned and has not finished yet
    tables/<db.table>/schema.json                     the table's definition as the pipeline last read it
    tables/<db.table>/epoch=<E>/definition/            the definitions the stream decodes epoch E's changes with:
                                                      base.json (version 0), <seq>-<pos>.json (a later version
                                                      from an ALTER applied in place, at that position)
    tables/<db.table>/epoch=<E>/shadows/<db.shadow>/  statements about an online schema change tool's shadow
                                                      table of it, <seq>-<pos>.json each (the swap's ALTER)
    schema/changes.json                               the schema changes the stream applied (truncate, drop,
                                                      resync), in binlog order
    stream/seed.json                                  min HW + per-table chunk infos (collect_watermarks)
    stream/streamed.json                              every table a stream launch read
    stream/query_seed.json                            the seed the running query took up (its tasks read it)
    stream/overlapped_epochs.json                     epochs an older epoch's stream wrote into (query_seed)
    stream/checkpoint/                                Spark's checkpoint location
    stream/status.json                                heartbeat: last_offset, lag_seconds, rows_emitted, ...
    stream/stop                                       a stop request for a continuous stream
    stream/reload.json                                asks a continuous stream to take up new snapshots
    specs/                                            job specs (no secrets in them)
    sink.json                                         the sink all of the above was written for

An *epoch* is one snapshot of one table (the first, or a re-snapshot): its chunk reports live apart from
other epochs', so a re-snapshot never mixes chunks of two plans. Writes are atomic (temporary file +
rename), so a reader never sees half a report, and a killed job leaves no partial state.

The root is a local path or any URI fsspec opens (``storage.Storage``): the Airflow side and the Spark jobs
both read it directly, so they need no shared disk when the URI is one the cluster reaches too.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any, Iterable, Mapping

from airflow_cdc_provider.core.offsets import BinlogOffset
from airflow_cdc_provider.core.reports import ChunkReport
from airflow_cdc_provider.core.schema_changes import SchemaChange
from airflow_cdc_provider.core.shadow_tables import ShadowStatement
from airflow_cdc_provider.source.table_versions import TableVersion
from airflow_cdc_provider.state.records import (
    FinishedSnapshot,
    PlannedSnapshot,
    ReloadRequest,
    StreamLaunch,
    StreamLease,
    StreamSeed,
    StreamStatus,
    OverlappedEpoch,
)
from airflow_cdc_provider.state.storage import Storage, StorageError


def position_file_name(position) -> str:
    """``<seq>-<pos>.json``: a record kept at a binlog position, named so that names sort in binlog order."""
    seq, pos, _ = position.sort_key
    return f"{seq:06d}-{pos:012d}.json"


def table_dir_name(table: str) -> str:
    """A directory name for 'db.table' that survives any character a MySQL identifier may hold."""
    safe = "".join(c if c.isalnum() or c in "._-" else f"%{ord(c):02X}" for c in table)
    return safe


def planned_before_uncapture(epoch: int, uncaptured_at: float | None) -> bool:
    """Whether a snapshot of ``epoch`` (its planning time, in ms) was planned before its table was taken out at
    ``uncaptured_at`` (``StateStore.uncaptured_tables``, in s): such a snapshot no longer counts for the table."""
    return uncaptured_at is not None and uncaptured_at * 1000 > epoch


class StateStore:
    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.uri = str(root)
        self.storage = Storage(self.uri, key="state.path")

    # -- files -------------------------------------------------------------------------------------
    def location(self, *parts: str) -> str:
        """A state file or directory as a job (Spark) names it: the URI, or the local path."""
        return self.storage.location("/".join(parts))

    def ensure_writable(self) -> None:
        self.storage.ensure_writable("state path")

    def local_dir(self, *parts: str) -> Path:
        """A directory on this machine for what stays with the Airflow worker (a detached job's log, the
        package archive it builds): inside the state root when that is on this machine, else under the temp
        directory, one per state URI."""
        if self.storage.is_local:
            base = Path(self.storage.root)
        else:
            base = Path(tempfile.gettempdir()) / "airflow-cdc" / hashlib.sha1(self.uri.encode()).hexdigest()[:12]
        d = base.joinpath(*parts)
        d.mkdir(parents=True, exist_ok=True)
        return d

    STREAM_SPEC = "binlog_stream.json"  # the stream job's spec, as its task stores it

    def write_spec(self, name: str, spec_json: str) -> str:
        """Store a job spec (it holds no secrets) where the job reads it; returns its location for ``--spec``."""
        rel = f"specs/{name}"
        self.storage.write_text(rel, spec_json)
        return self.storage.location(rel)

    def read_spec(self, name: str) -> str | None:
        return self.storage.read_text(f"specs/{name}")

    def upload(self, local_file: Path, rel: str) -> str:
        """Copy a local file into the store once (``rel`` names content, e.g. by hash); returns its location."""
        if not self.storage.exists(rel):
            self.storage.upload(local_file, rel)
        return self.storage.location(rel)

    def write_json(self, rel: str, data: Any) -> str:
        self.storage.write_text(rel, json.dumps(data, indent=1, sort_keys=True, default=str))
        return self.storage.location(rel)

    def read_json(self, rel: str, default: Any = None) -> Any:
        text = self.storage.read_text(rel)
        return default if text is None else json.loads(text)

    def delete(self, rel: str) -> None:
        self.storage.delete(rel)

    def exists(self, rel: str) -> bool:
        return self.storage.exists(rel)

    # -- snapshots ---------------------------------------------------------------------------------
    # A watermark window's chunk reports are one file, named by its chunk range like the parquet sink's
    # directory of the window: a task of many chunks writes one file, not one per chunk. A retry that groups
    # the chunks differently takes its chunks out of the earlier files first.
    @staticmethod
    def epoch_rel(table: str, epoch: int) -> str:
        return f"tables/{table_dir_name(table)}/epoch={epoch}"

    @staticmethod
    def _window_name(indexes: list[int]) -> str:
        return f"chunks={min(indexes)}-{max(indexes)}"

    def _window_files(self, table: str, epoch: int, suffix: str) -> dict[str, range]:
        """The epoch's window files ending in ``suffix``, with the chunk indexes each covers."""
        out = {}
        for name in self.storage.listdir(self.epoch_rel(table, epoch)):
            if name.startswith("chunks=") and name.endswith(suffix):
                first, _, last = name[len("chunks="):-len(suffix)].partition("-")
                if first.isdigit() and last.isdigit():
                    out[name] = range(int(first), int(last) + 1)
        return out

    def write_window_reports(self, table: str, epoch: int, reports: list[ChunkReport]) -> None:
        """The reports of one window's chunks, in one atomic write."""
        name = self._window_name([r.index for r in reports])
        self.write_json(f"{self.epoch_rel(table, epoch)}/{name}.json", {"chunks": [r.to_dict() for r in reports]})

    def _window_reports(self, rel: str) -> list[dict[str, Any]]:
        return (self.read_json(rel) or {}).get("chunks", [])

    def chunk_reports(self, table: str, epoch: int) -> dict[int, ChunkReport]:
        """Every chunk report of the epoch, by chunk index. Should two files hold one chunk (two attempts that
        grouped it differently, racing), the report with the later high watermark is the later read."""
        out: dict[int, ChunkReport] = {}
        rel = self.epoch_rel(table, epoch)
        for name in self._window_files(table, epoch, ".json"):
            for data in self._window_reports(f"{rel}/{name}"):
                r = ChunkReport.from_dict(data)
                if r.index not in out or r.high_watermark > out[r.index].high_watermark:
                    out[r.index] = r
        return out

    def read_chunk_report(self, table: str, epoch: int, index: int) -> ChunkReport | None:
        return self.chunk_reports(table, epoch).get(index)

    def clear_chunk_reports(self, table: str, epoch: int, indexes: list[int]) -> None:
        """Take the reports of chunks ``indexes`` out of the epoch: a file holding only such chunks goes, one
        holding others too is written again without them."""
        drop = set(indexes)
        rel = self.epoch_rel(table, epoch)
        for name, covered in self._window_files(table, epoch, ".json").items():
            if drop.isdisjoint(covered):
                continue
            kept = [r for r in self._window_reports(f"{rel}/{name}") if int(r["index"]) not in drop]
            if kept:
                self.write_json(f"{rel}/{name}", {"chunks": kept})
            else:
                self.delete(f"{rel}/{name}")

    def mark_window_started(self, table: str, epoch: int, indexes: list[int]) -> set[int]:
        """Record that a job begins writing chunks ``indexes``; returns those of them an earlier attempt had
        begun (whose rows it may have left in the sink), whatever windows that attempt grouped them in."""
        earlier = {i for covered in self._window_files(table, epoch, ".started").values() for i in covered}
        self.write_json(f"{self.epoch_rel(table, epoch)}/{self._window_name(indexes)}.started",
                        {"chunks": sorted(indexes), "at": time.time()})
        return earlier & set(indexes)

    def finished_snapshot(self, table: str) -> FinishedSnapshot | None:
        data = self.read_json(f"tables/{table_dir_name(table)}/snapshot.json")
        return FinishedSnapshot.from_dict(data) if data else None

    def write_finished_snapshot(self, snapshot: FinishedSnapshot) -> None:
        """Record the table's finished epoch, unless a later one is recorded (two collects of one table racing:
        an older epoch never replaces a newer one)."""
        current = self.finished_snapshot(snapshot.table)
        if current is None or current.epoch <= snapshot.epoch:
            self.write_json(f"tables/{table_dir_name(snapshot.table)}/snapshot.json", snapshot.to_dict())

    def write_planned_snapshot(self, planned: PlannedSnapshot) -> None:
        self.write_json(f"tables/{table_dir_name(planned.table)}/planned.json", planned.to_dict())

    def planned_snapshot(self, table: str) -> PlannedSnapshot | None:
        """The snapshot of ``table`` a DAG run planned, if no epoch as new has finished since."""
        data = self.read_json(f"tables/{table_dir_name(table)}/planned.json")
        planned = PlannedSnapshot.from_dict(data) if data else None
        finished = self.finished_snapshot(table) if planned is not None else None
        return planned if planned is not None and (finished is None or finished.epoch < planned.epoch) else None

    def planned_snapshots(self) -> dict[str, PlannedSnapshot]:
        """Every table's planned snapshot that has not finished (``planned_snapshot``), by table."""
        out = {}
        for name in self.storage.listdir("tables"):
            data = self.read_json(f"tables/{name}/planned.json")
            planned = self.planned_snapshot(data["table"]) if data else None
            if planned is not None:
                out[planned.table] = planned
        return out

    def finished_tables(self) -> dict[str, FinishedSnapshot]:
        out = {}
        for name in self.storage.listdir("tables"):
            data = self.read_json(f"tables/{name}/snapshot.json")
            if data:
                snap = FinishedSnapshot.from_dict(data)
                out[snap.table] = snap
        return out

    # -- schema ------------------------------------------------------------------------------------
    SCHEMA_CHANGES = "schema/changes.json"

    def write_table_schema(self, table: str, schema: dict[str, Any]) -> None:
        """The definition a job read the table with: what decodes its binlog events once the table is gone."""
        rel = f"tables/{table_dir_name(table)}/schema.json"
        if self.read_json(rel) != schema:
            self.write_json(rel, schema)

    def _definition_rel(self, table: str, epoch: int) -> str:
        return f"{self.epoch_rel(table, epoch)}/definition"

    def table_versions(self, table: str, epoch: int) -> list[TableVersion]:
        """The table's definitions for the stream in snapshot epoch ``epoch``, in binlog order, numbered from 0
        (the base); [] when no stream has set the base yet."""
        rel = self._definition_rel(table, epoch)
        base = self.table_base(table, epoch)
        if base is None:
            return []
        later = [TableVersion.from_dict(self.read_json(f"{rel}/{n}")) for n in self.storage.listdir(rel)
                 if n.endswith(".json") and n not in ("base.json", "mixed.json")]
        later.sort(key=lambda v: v.position.sort_key)
        return [replace(v, number=i) for i, v in enumerate([base] + later)]

    def table_base(self, table: str, epoch: int) -> TableVersion | None:
        """The definition the stream starts the epoch with (version 0), None when none is set yet."""
        base = self.read_json(f"{self._definition_rel(table, epoch)}/base.json")
        return None if base is None else TableVersion.from_dict(base)

    def write_table_base(self, table: str, epoch: int, version: TableVersion) -> TableVersion:
        """Set the definition the stream starts the epoch with, unless one is set (returned then)."""
        rel = f"{self._definition_rel(table, epoch)}/base.json"
        if not self.storage.create(rel, json.dumps(version.to_dict())):
            return TableVersion.from_dict(self.read_json(rel))
        return version

    def note_snapshot_definition(self, table: str, epoch: int, schema) -> None:
        """The definition a snapshot task of the epoch read the table with: the epoch's base. Tasks that read it
        under different definitions (an ALTER during the snapshot) leave the epoch without one it can trust
        (``mixed.json``): the stream then applies no change of that epoch in place."""
        base = self.write_table_base(table, epoch, TableVersion(0, schema))
        if base.schema != schema:
            self.write_json(f"{self._definition_rel(table, epoch)}/mixed.json", {"mixed": True})

    def snapshot_definitions_mixed(self, table: str, epoch: int) -> bool:
        return self.exists(f"{self._definition_rel(table, epoch)}/mixed.json")

    def record_table_version(self, table: str, epoch: int, version: TableVersion) -> TableVersion:
        """Record a version at its position once: the first writer wins, every other gets what it wrote."""
        rel = f"{self._definition_rel(table, epoch)}/{position_file_name(version.position)}"
        if not self.storage.create(rel, json.dumps(version.to_dict())):
            return TableVersion.from_dict(self.read_json(rel))
        return version

    def _shadow_rel(self, table: str, epoch: int, shadow: str) -> str:
        return f"{self.epoch_rel(table, epoch)}/shadows/{table_dir_name(shadow)}"

    def record_shadow_statement(self, epoch: int, note: ShadowStatement) -> None:
        """Keep a statement about a shadow table of ``note.original`` (``source.online_schema_change``) at its
        position, once."""
        rel = f"{self._shadow_rel(str(note.original), epoch, str(note.shadow))}/{position_file_name(note.position)}"
        self.storage.create(rel, json.dumps(note.to_dict()))

    def shadow_statements(self, table: str, epoch: int, shadow: str) -> list[ShadowStatement]:
        """The statements about ``shadow`` the stream of ``table``'s epoch ``epoch`` kept, in binlog order."""
        rel = self._shadow_rel(table, epoch, shadow)
        notes = [ShadowStatement.from_dict(self.read_json(f"{rel}/{n}")) for n in self.storage.listdir(rel)
                 if n.endswith(".json")]
        return sorted(notes, key=lambda n: n.position.sort_key)

    def read_table_schema(self, table: str) -> dict[str, Any] | None:
        return self.read_json(f"tables/{table_dir_name(table)}/schema.json")

    def saved_tables(self) -> set[str]:
        """The tables a job has read (their saved definitions)."""
        out = set()
        for name in self.storage.listdir("tables"):
            data = self.read_json(f"tables/{name}/schema.json")
            if data:
                out.add(data["table"])
        return out

    def record_schema_changes(self, changes: list[SchemaChange]) -> None:
        """Add what a stream batch met; a re-run of the batch adds nothing twice."""
        known = self.schema_changes()
        seen = {(c.kind, str(c.table), c.position.sort_key if c.position else None) for c in known}
        new = [c for c in changes if (c.kind, str(c.table), c.position.sort_key if c.position else None) not in seen]
        if new:
            ordered = sorted(known + new, key=lambda c: c.position.sort_key if c.position else (0, 0, 0))
            self.write_json(self.SCHEMA_CHANGES, [c.to_dict() for c in ordered])

    def schema_changes(self) -> list[SchemaChange]:
        return [SchemaChange.from_dict(d) for d in self.read_json(self.SCHEMA_CHANGES, [])]

    def forget_table(self, table: str, archive: str, now: float, renamed_to: str | None = None) -> None:
        """Move ``table``'s own state to ``archive`` and drop it from the stream's lists (``pipeline.uncapture``):
        to this store it is then a table never captured. Its schema changes are kept in the archive.
        ``renamed_to``: the source renamed the table and its sink data moved to that name (``pipeline.renames``).

        In an order a crash at any step leaves safe: first the mark (from then on, captured again, the table is
        snapshotted: ``recaptured_tables``), then its finished snapshot (no seed built later takes it back), then
        the seed and the lists the stream reads, and last the mark's ``complete``; until then
        ``unfinished_uncapture`` names the archive, for a second run into it to finish the job."""
        changes = self.schema_changes()
        mark = self.mark_forget(table, archive, now, renamed_to, changes)
        own = f"tables/{table_dir_name(table)}"
        if self.exists(own) or self.storage.listdir(own):
            self.storage.rename(own, f"{archive}/state")
        seed = self.read_seed()
        if seed is not None and table in seed.tables:
            self.write_seed(replace(seed, tables={t: s for t, s in seed.tables.items() if t != table}))
        streamed = self.streamed_tables()
        if table in streamed:
            self.write_json(self.STREAMED, sorted(streamed - {table}))
        status = self.read_json(self.STATUS)
        if status and (table in (status.get("epochs") or {}) or table in (status.get("tables") or [])):
            # the last query's epochs: kept, the table's would pass for the epoch a new snapshot of it follows
            status["epochs"] = {t: e for t, e in (status.get("epochs") or {}).items() if t != table}
            status["tables"] = [t for t in status.get("tables") or [] if t != table]
            self.write_json(self.STATUS, status)  # its heartbeat time unchanged
        overlapped = self.read_overlapped_epochs()
        if table in overlapped:
            self.write_overlapped_epochs({t: r for t, r in overlapped.items() if t != table})
        if any(str(c.table) == table for c in changes):
            self.write_json(self.SCHEMA_CHANGES, [c.to_dict() for c in changes if str(c.table) != table])
        self.write_json(f"{archive}/uncaptured.json", {**mark, "complete": True})

    def mark_forget(self, table: str, archive: str, now: float, renamed_to: str | None = None,
                    changes: list[SchemaChange] | None = None) -> dict[str, Any]:
        """``forget_table``'s first step, the mark (not complete), with the table's schema changes so far."""
        changes = self.schema_changes() if changes is None else changes
        kept = (self.read_json(f"{archive}/uncaptured.json") or {}).get("schema_changes") or []  # a first try's
        mark = {"table": table, "uncaptured_at": now, "complete": False,
                "schema_changes": kept + [d for c in changes if str(c.table) == table and (d := c.to_dict()) not in kept]}
        if renamed_to is not None:
            mark["renamed_to"] = renamed_to
        self.write_json(f"{archive}/uncaptured.json", mark)
        return mark

    def unfinished_uncapture(self, table: str) -> str | None:
        """The archive of a ``forget_table`` of ``table`` that stopped half way (its mark says not complete)."""
        prefix = f"{table_dir_name(table)}-"
        for name in reversed(self.storage.listdir("uncaptured")):
            data = self.read_json(f"uncaptured/{name}/uncaptured.json") if name.startswith(prefix) else None
            if data and data.get("table") == table and data.get("complete") is False:
                return f"uncaptured/{name}"
        return None

    def _forget_marks(self) -> list[dict[str, Any]]:
        """The marks ``forget_table`` left, oldest first."""
        marks = [self.read_json(f"uncaptured/{name}/uncaptured.json") for name in self.storage.listdir("uncaptured")]
        return sorted((m for m in marks if m), key=lambda m: float(m.get("uncaptured_at") or 0.0))

    def uncaptured_tables(self) -> dict[str, float]:
        """The tables ``forget_table`` took out, each with the last time it did (seconds since the epoch)."""
        return {m["table"]: float(m.get("uncaptured_at") or 0.0) for m in self._forget_marks()}

    def renamed_tables(self) -> dict[str, str]:
        """The tables a rename took out, the last time one was taken out (``forget_table`` with ``renamed_to``):
        old name -> the name its sink data moved to."""
        last = {m["table"]: m for m in self._forget_marks()}
        return {t: m["renamed_to"] for t, m in last.items() if m.get("renamed_to")}

    def carried_tables(self) -> dict[str, str]:
        """The names a rename moved a table's sink data to and that were not snapshotted since (new name -> old
        name): each needs a snapshot whatever the startup mode, as its sink holds the rows of the old name."""
        finished = self.finished_tables()
        out = {}
        for m in self._forget_marks():  # oldest first: a later mark of the new name (taken out again) ends it
            out.pop(m["table"], None)
            new = m.get("renamed_to")
            if new and (new not in finished or planned_before_uncapture(finished[new].epoch, m.get("uncaptured_at"))):
                out[new] = m["table"]
        return out

    def recaptured_tables(self) -> set[str]:
        """The tables taken out (``uncaptured_tables``) and not snapshotted since: captured again, each needs a
        snapshot whatever the startup mode, as its sink holds the rows of before. A finished snapshot planned
        before the table was taken out (left by a crash half way, or a run that went on) does not count."""
        finished = self.finished_tables()
        return {t for t, at in self.uncaptured_tables().items()
                if t not in finished or planned_before_uncapture(finished[t].epoch, at)}

    # -- the sink the state is of -----------------------------------------------------------------
    SINK = "sink.json"

    def read_sink_identity(self) -> dict[str, Any] | None:
        return self.read_json(self.SINK)

    def write_sink_identity(self, identity: Mapping[str, Any]) -> None:
        self.write_json(self.SINK, dict(identity))

    # -- stream ------------------------------------------------------------------------------------
    STREAMED = "stream/streamed.json"
    MISSING = "stream/missing.json"  # tables the stream reads found missing on the source: the position then

    def streamed_tables(self) -> set[str]:
        """Every table a stream of this pipeline was launched to read."""
        return set(self.read_json(self.STREAMED, []))

    def add_streamed_tables(self, tables: Iterable[str]) -> None:
        known = self.streamed_tables()
        if not set(tables) <= known:
            self.write_json(self.STREAMED, sorted(known | set(tables)))

    SEED = "stream/seed.json"
    QUERY_SEED = "stream/query_seed.json"
    OVERLAPPED_EPOCHS = "stream/overlapped_epochs.json"
    STATUS = "stream/status.json"
    STOP = "stream/stop"
    LAUNCH = "stream/launch.json"
    LEASE = "stream/lease.json"
    RELOAD = "stream/reload.json"

    CHECKPOINT = "stream/checkpoint"

    @property
    def checkpoint_location(self) -> str:
        return self.location(self.CHECKPOINT)

    def _committed_batches(self) -> list[int]:
        return sorted(int(n) for n in self.storage.listdir(f"{self.CHECKPOINT}/commits") if n.isdigit())

    def has_checkpoint(self) -> bool:
        """Whether a stream committed a batch: it then resumes from its checkpoint, not from the seed."""
        return bool(self._committed_batches())

    def checkpoint_offset(self) -> BinlogOffset | None:
        """Where a restarted stream reads from: the end of its last committed batch, from Spark's checkpoint
        (``offsets/<batch>``: a version line, the batch's metadata, then the source's offset). None before the
        first committed batch, or when the checkpoint is not one of this source's."""
        committed = self._committed_batches()
        return self._batch_end(committed[-1]) if committed else None

    def planned_batch_end(self) -> BinlogOffset | None:
        """Where the batch a restarted stream re-runs first ends: the end Spark's checkpoint recorded for a batch
        planned after the last committed one; None when there is none (the next batch is planned anew)."""
        planned = sorted(int(n) for n in self.storage.listdir(f"{self.CHECKPOINT}/offsets") if n.isdigit())
        committed = self._committed_batches()
        if not planned or (committed and planned[-1] <= committed[-1]):
            return None
        return self._batch_end(planned[-1])

    def batch_end(self, batch: int) -> BinlogOffset | None:
        """Where batch ``batch`` ends, as Spark's checkpoint planned it (before the batch runs); None when the
        checkpoint has no such batch (the batch before the first starts at the query's initial offset)."""
        return self._batch_end(batch) if batch >= 0 else None

    def _batch_end(self, batch: int) -> BinlogOffset | None:
        text = self.storage.read_text(f"{self.CHECKPOINT}/offsets/{batch}")
        lines = [line for line in (text or "").splitlines() if line.strip()]
        try:
            return BinlogOffset.from_dict(json.loads(lines[2]))
        except (IndexError, ValueError, TypeError):
            return None

    def write_seed(self, seed: StreamSeed) -> None:
        self.write_json(self.SEED, seed.to_dict())

    def read_seed(self) -> StreamSeed | None:
        data = self.read_json(self.SEED)
        return StreamSeed.from_dict(data) if data else None

    def write_query_seed(self, seed: StreamSeed | None) -> None:
        """The seed the stream's query runs with (``pipeline.query_seed``), written before it starts: the
        query's tasks read this, not ``seed.json``, which a re-snapshot replaces while the query runs."""
        self.write_json(self.QUERY_SEED, seed.to_dict() if seed is not None else {})

    def read_query_seed(self) -> StreamSeed | None:
        data = self.read_json(self.QUERY_SEED)
        return StreamSeed.from_dict(data) if data else None

    def write_overlapped_epochs(self, overlapped: Mapping[str, OverlappedEpoch]) -> None:
        self.write_json(self.OVERLAPPED_EPOCHS, {t: r.to_dict() for t, r in sorted(overlapped.items())})

    def read_overlapped_epochs(self) -> dict[str, OverlappedEpoch]:
        return {t: OverlappedEpoch.from_dict(d) for t, d in (self.read_json(self.OVERLAPPED_EPOCHS) or {}).items()}

    def write_status(self, status: StreamStatus) -> None:
        self.write_json(self.STATUS, {**status.to_dict(), "updated_at": time.time()})

    def read_status(self) -> StreamStatus | None:
        data = self.read_json(self.STATUS)
        return StreamStatus.from_dict(data) if data else None

    def write_launch(self, launch: StreamLaunch) -> None:
        self.write_json(self.LAUNCH, launch.to_dict())

    def read_launch(self) -> StreamLaunch | None:
        data = self.read_json(self.LAUNCH)
        return StreamLaunch.from_dict(data) if data else None

    def delete_launch(self, launch_id: str | None = None) -> None:
        """Forget the detached stream job; with ``launch_id``, only if it is still that launch (a task ending late
        must not forget the launch another run's task made since)."""
        if launch_id is not None:
            launch = self.read_launch()
            if launch is None or launch.launch_id != launch_id:
                return
        self.delete(self.LAUNCH)

    def try_lease(self, lease: StreamLease) -> StreamLease | None:
        """Take the stream lease if nobody holds it; else the current holder's lease (``lease`` not taken). The
        lease taken records now as its ``acquired_at``, whenever ``lease`` was made: a watcher on another host gives
        its holder's job that long from now to write its first status, not from before the taker's waits."""
        for _ in range(100):
            taken = replace(lease, acquired_at=time.time())
            if self.storage.create(self.LEASE, json.dumps(taken.to_dict(), sort_keys=True, default=str)):
                return None
            held = self.read_lease()
            if held is not None:
                return held
            # released between the two: try again
        raise StorageError(f"{self.location(self.LEASE)} keeps being taken and released: another process is "
                              "churning the stream lease; stop the other DAG runs of this pipeline and retry")

    def read_lease(self) -> StreamLease | None:
        data = self.read_json(self.LEASE)
        return StreamLease.from_dict(data) if data else None

    def write_lease(self, lease: StreamLease) -> None:
        """Record the lease's new content (the detached job it launched); the caller holds it."""
        self.write_json(self.LEASE, lease.to_dict())

    def release_lease(self, launch_id: str) -> None:
        """Give the lease up if ``launch_id`` still holds it."""
        lease = self.read_lease()
        if lease is not None and lease.launch_id == launch_id:
            self.delete(self.LEASE)

    def request_stop(self) -> None:
        self.write_json(self.STOP, {"requested_at": time.time()})

    def stop_requested(self) -> bool:
        return self.exists(self.STOP)

    def clear_stop(self) -> None:
        self.delete(self.STOP)

    def request_reload(self, request: ReloadRequest) -> None:
        self.write_json(self.RELOAD, request.to_dict())

    def read_reload(self) -> ReloadRequest | None:
        data = self.read_json(self.RELOAD)
        return ReloadRequest.from_dict(data) if data else None

    def clear_reload(self, taken_up: ReloadRequest | None) -> None:
        """Delete the reload request a stream has taken up (not a newer one written meanwhile)."""
        current = self.read_reload()
        if current is not None and (taken_up is None or current.requested_at <= taken_up.requested_at):
            self.delete(self.RELOAD)
