"""A Delta table wider than Delta's default statistics columns (the first 32) through the real jobs: a source
table of 40 columns of mixed types, keyed by its last column, snapshotted in two chunk jobs while a writer changes
its rows, then caught up by the stream.

Delta keeps statistics of the first 32 columns unless ``delta.dataSkippingStatsColumns`` says otherwise; past
them would be the key and every column of the sink's own (``_cdc_chunk``, the version, ``_cdc_deleted``), which
the windows' append checks and the MERGEs' bounds read. The table must name them all in that property, every
file's ``add`` action must state what the file holds of them, and the table must equal MariaDB row by row
(read by delta-rs alone) with no application transaction version committed twice.
"""

from __future__ import annotations

import json
import random
from datetime import datetime
from pathlib import Path
from urllib.parse import unquote

import deltalake
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from airflow_cdc_provider.sinks.base import META_NAMES

from .cdc_helpers import Pipeline, ThreadedWriter, delta_sink
from .test_delta_sink import (
    app_transactions,
    assert_delta_equals_source,
    merge_predicates,
    other_readers_agree,
    table_uri,
    window_commits,
)

ROWS = 3_000
KEY_SPACE = 3_100  # the writer's keys: the table's, and a few past it (inserts into the last chunk)
# (type, value of the row made from ``seq``) of the columns c01..c39, in turn; {i} is the column's number, so no
# two columns hold the same values; the nullable ones hold NULL in some rows (MOD, not %: the writer's statements
# take parameters)
KINDS = (
    ("INT NOT NULL", "seq * {i}"),
    ("BIGINT NULL", "IF(MOD(seq, 11) = MOD({i}, 11), NULL, seq * 1000003 + {i})"),
    ("VARCHAR(40) NULL", "IF(MOD(seq, 13) = MOD({i}, 13), NULL, CONCAT('v{i}-', seq))"),
    ("DECIMAL(12,3) NOT NULL", "seq / 7 + {i}"),
    ("DATETIME(6) NULL",
     "IF(MOD(seq, 17) = MOD({i}, 17), NULL, TIMESTAMP('2020-01-01') + INTERVAL seq * 1000003 + {i} MICROSECOND)"),
    ("DATE NULL", "DATE('2000-01-01') + INTERVAL seq + {i} DAY"),
    ("SMALLINT NOT NULL", "CAST(MOD(seq + {i}, 30000) AS SIGNED) - 15000"),
    ("VARCHAR(200) NOT NULL", "CONCAT(REPEAT('\u00e9', MOD(seq + {i}, 20)), seq)"),
)
COLUMNS = [(f"c{i:02d}", *KINDS[(i - 1) % len(KINDS)]) for i in range(1, 40)]
# c01 INT, c03 VARCHAR NULL, c33 INT, c34 BIGINT NULL, c35 VARCHAR NULL, c37 DATETIME NULL, c39 SMALLINT
UPDATE = ("UPDATE wide SET c01 = c01 + 1, c03 = IF(c03 IS NULL, %s, NULL), c33 = c33 - 1, "
          "c34 = IF(c34 IS NULL, %s, NULL), c35 = CONCAT('w', %s), "
          "c37 = IF(c37 IS NULL, '2030-01-01 00:00:00.5', NULL), c39 = -c39 WHERE id = %s")


def row_values(seq: str = "seq") -> str:
    """The SELECT list of c01..c39 of the row made from ``seq``."""
    return ", ".join(expr.format(i=int(name[1:])).replace("seq", seq) for name, _, expr in COLUMNS)


def make_wide(db, n: int) -> None:
    """``wide``: c01..c39, then its primary key ``id`` (the 40th column; the 47th of the Delta table is the last
    of the sink's own), ``n`` rows keyed 1..n."""
    columns = ", ".join(f"{name} {kind}" for name, kind, _ in COLUMNS)
    db.execute(f"CREATE TABLE wide ({columns}, id INT NOT NULL, PRIMARY KEY (id))")
    db.execute(f"INSERT INTO wide SELECT {row_values()}, seq FROM seq_1_to_{n}")  # MariaDB's sequence engine


class WideWriter(ThreadedWriter):
    """Inserts, updates (of early and late columns, NULLs set and cleared; also of the key) and deletes rows of
    ``wide`` until stopped, ``rate`` operations a second."""

    def __init__(self, db, rate: float, seed: int = 11) -> None:
        super().__init__(db.server, db.name, 1.0 / rate)
        self.rng = random.Random(seed)

    def write(self, cur) -> None:
        k, op = self.rng.randrange(1, KEY_SPACE), self.rng.random()
        if op < 0.3:
            v = self.rng.randrange(1, 10 * ROWS)
            cur.execute(f"INSERT IGNORE INTO wide SELECT {row_values()}, %s FROM seq_{v}_to_{v}", (k,))
        elif op < 0.7:
            cur.execute(UPDATE, (f"set{self.ops}", self.ops, self.ops, k))
        elif op < 0.9:
            cur.execute("DELETE FROM wide WHERE id = %s", (k,))
        else:
            cur.execute("UPDATE IGNORE wide SET id = %s WHERE id = %s", (KEY_SPACE + k, k))


def log_adds(uri: str) -> list[dict]:
    """Every ``add`` action of the table's log, oldest first (the files later commits removed included)."""
    out = []
    for commit in sorted((Path(uri) / "_delta_log").glob("*.json")):
        for line in commit.read_text().splitlines():
            action = json.loads(line)
            if "add" in action:
                out.append(action["add"])
    return out


def assert_adds_state_key_and_chunk(uri: str, names: list[str]) -> int:
    """Each add action of the log states null counts of every column, and the smallest and largest ``id`` and
    ``_cdc_chunk`` of its file as its rows hold them (read with pyarrow); returns how many adds state a
    ``_cdc_chunk`` range."""
    adds = log_adds(uri)
    assert adds, "the table's log adds no file"
    with_chunk = 0
    for add in adds:
        assert add.get("stats"), f"{add['path']}: no statistics"
        stats = json.loads(add["stats"])
        rows = pq.read_table(Path(uri) / unquote(add["path"]), columns=["id", "_cdc_chunk"])
        assert stats["numRecords"] == rows.num_rows, add["path"]
        assert sorted(stats["nullCount"]) == sorted(names), f"{add['path']}: null counts of {stats['nullCount']}"
        if not rows.num_rows:
            continue
        ids = pc.min_max(rows.column("id")).as_py()
        assert (stats["minValues"].get("id"), stats["maxValues"].get("id")) == (ids["min"], ids["max"]), \
            f"{add['path']}: id stated {stats['minValues'].get('id')}..{stats['maxValues'].get('id')}, holds {ids}"
        assert stats["nullCount"]["id"] == 0, add["path"]
        chunk = rows.column("_cdc_chunk")
        assert stats["nullCount"]["_cdc_chunk"] == chunk.null_count, add["path"]
        if chunk.null_count < rows.num_rows:  # a file of stream rows alone holds no chunk to state
            tags = [t for t in chunk.to_pylist() if t is not None]  # MERGEs' files: string_view, no min_max kernel
            stated = (stats["minValues"].get("_cdc_chunk"), stats["maxValues"].get("_cdc_chunk"))
            assert stated == (min(tags), max(tags)), f"{add['path']}: _cdc_chunk stated {stated}, holds {set(tags)}"
            with_chunk += 1
        elif add["path"].startswith("snapshot-"):
            raise AssertionError(f"{add['path']}: a snapshot window's data file without a chunk")
    return with_chunk


def test_a_table_past_32_columns_keeps_statistics_of_its_late_key_and_the_sinks_columns(source_db, tmp_path):
    db = source_db
    make_wide(db, ROWS)
    p = Pipeline(db, tmp_path, delta_sink(tmp_path), ["wide"], chunk_size=1_000)
    chunks = p.plan()
    assert len(chunks) >= 3
    # two chunk jobs (two windows, as two mapped tasks), the writer changing rows all along; the second window is
    # appended only if the first one's files state their key range
    with WideWriter(db, rate=50) as writer:
        p.snapshot(chunks[:1])
        p.snapshot(chunks[1:])
        p.collect()
    assert writer.ops > 20
    assert sum(r.window_events_applied for r in p.state.finished_snapshot(db.table("wide")).chunks) > 0, \
        "no chunk window saw a change: the test lost its point"
    uri = table_uri(p, db, "wide")
    table = deltalake.DeltaTable(uri)
    names = [f.name for f in table.schema().fields]
    assert len(names) == 47 and names.index("id") == 39 and names[40:] == [*META_NAMES, "_cdc_deleted", "_cdc_chunk"]
    windows = window_commits(uri)
    assert [op for _, op in windows] == ["append", "append"], windows
    snapshot_version = table.version()

    # the catch-up: updates (NULLs set and cleared, late columns), deletes, inserts, key changes, changes of rows
    # inserted in the same stream
    db.execute("UPDATE wide SET c02 = NULL, c35 = CONCAT('late', id), c38 = c38 + INTERVAL 1 DAY, c05 = NULL "
               "WHERE id % 9 = 0")
    db.execute("DELETE FROM wide WHERE id BETWEEN 1200 AND 1260")
    db.execute(f"INSERT INTO wide SELECT {row_values('(seq + 7)')}, seq + 50000 FROM seq_1_to_300")
    db.execute("UPDATE wide SET id = id + 100000 WHERE id BETWEEN 10 AND 20")
    db.execute("UPDATE wide SET c37 = '2031-05-06 07:08:09.123456', c34 = NULL, c03 = 'again' "
               "WHERE id BETWEEN 50001 AND 50100")
    db.execute("DELETE FROM wide WHERE id % 50 = 7")
    p.stream(max_bytes=200_000)  # the writer's changes after the first window, then the catch-up: several batches
    want = assert_delta_equals_source(p, db, "wide")  # row by row, with no txn version twice per app id
    assert not [k for k in want if 1_200 <= k[0] <= 1_260 or k[0] % 50 == 7] and (50_300,) in want
    assert want[(50_050,)][36] == datetime(2031, 5, 6, 7, 8, 9, 123456) and want[(50_050,)][33] is None
    other_readers_agree(p, db, "wide", want)

    # the application transactions the no-duplicate check above looked at: each window's, several stream batches
    txns = app_transactions(p, db, "wide")
    stream = [v for app, v in txns.items() if ":stream:" in app]
    assert len(stream) == 1 and len(stream[0]) >= 2, txns
    assert sum(":snapshot:" in app for app in txns) == 2, txns
    # the stream's MERGEs bounded by the key, a column past the first 32
    merges = merge_predicates(uri, snapshot_version)
    assert merges and all(" AND t.id >= " in on for _, on in merges), merges

    # every column named in the table's statistics columns (none is left out: no float, no wide decimal), the key
    # and the sink's own columns past the 32nd among them
    table = deltalake.DeltaTable(uri)
    named = table.metadata().configuration.get("delta.dataSkippingStatsColumns", "").split(",")
    assert named == names, f"delta.dataSkippingStatsColumns: {named}"
    assert "id" in named and {*META_NAMES, "_cdc_deleted", "_cdc_chunk"} <= set(named)
    # every file the log ever added states the key's range and its chunks' tags (the snapshot windows' too)
    assert assert_adds_state_key_and_chunk(uri, names) >= 2
    # what delta-rs's readers see of the live files: the key's range stated by every one
    live = pa.table(table.get_add_actions(flatten=True)).to_pylist()
    assert live and all(a["min.id"] is not None and a["max.id"] is not None for a in live), live
    assert any(a["min._cdc_chunk"] is not None for a in live)
    # and filtering on the key or a chunk's tag finds exactly its rows
    every = table.to_pyarrow_table(columns=["id", "_cdc_chunk"])
    for key in (1, 999, 1_000, 2_999, 50_050, 100_015, 1_230):
        assert table.to_pyarrow_table(columns=["id"], filters=[("id", "=", key)]).num_rows == \
            every.filter(pc.equal(every.column("id"), key)).num_rows, key
    tags = set(every.column("_cdc_chunk").to_pylist()) - {None}
    assert len(tags) >= 3, tags
    for tag in tags:
        assert table.to_pyarrow_table(columns=["id"], filters=[("_cdc_chunk", "=", tag)]).num_rows == \
            every.filter(pc.equal(every.column("_cdc_chunk"), tag)).num_rows, tag
