"""Online schema change tools against the real MariaDB while an application keeps writing the captured table.

pt-online-schema-change and gh-ost never ALTER the table itself: they build an altered shadow table, keep it in
step with the original (triggers, or the binlog), and swap it in with one atomic RENAME. Each test runs the
tool's statements in its order, on its own connections, beside a writer whose inserts, updates and deletes name
their columns (so they go on working on the swapped-in table). The stream must see one change of the table at
the swap, apply every row of the original up to it, and nothing of the shadow, changelog or sentry tables: the
swap is the shadow's ALTER, applied in place at its position, and no re-snapshot is needed. The jdbc mirror is
also read with plain SQL, the parquet sink with pyarrow alone.
"""

from __future__ import annotations

import collections
import contextlib
import os
import queue
import random
import re
import threading
import time

import pymysql

from airflow_cdc_provider.pipeline.table_schemas import pending_resyncs
from airflow_cdc_provider.sinks.postgres import mirror_table_name
from tests.e2e.cdc_helpers import ThreadedWriter, source_rows, wait_until
from tests.e2e.test_schema_changes import assert_sink_equals_source, make_pipeline, make_tables, snapshot_all

ROWS = 400  # rows of ``t`` when the tool starts
CHUNK = 40  # rows per copy chunk: ten chunks
WRITES_PER_CHUNK = 12  # the writer's operations between two chunks, as a tool throttled by its load would leave
RETRIED = (1205, 1213)  # lock wait timeout, deadlock: the tools retry a chunk, an application its statement


class AppWriter(ThreadedWriter):
    """The application: inserts new rows, updates rows (``name`` and ``qty``) and deletes rows of the original
    set, naming its columns, so it keeps working on the swapped-in table. Notes each row it changed as a binlog
    row event would show it (gh-ost's applier replays those), and the phase of the migration each insert was
    made in."""

    def __init__(self, db, seed: int = 17) -> None:
        super().__init__(db.server, db.name, pause=0.003)
        self.rng = random.Random(seed)
        self.first_id = self.next_id = 10_000
        self.phase = "before"
        self.by_phase: collections.Counter[str] = collections.Counter()
        self.inserted: dict[int, str] = {}  # id -> phase
        self.touched: collections.defaultdict[str, set[int]] = collections.defaultdict(set)  # phase -> ids
        self.events: queue.SimpleQueue = queue.SimpleQueue()  # (kind, row or key), in commit order
        self.thread_id: int | None = None

    def write(self, cur) -> None:
        self.thread_id = cur.connection.thread_id()
        phase, r = self.phase, self.rng.random()
        if r < 0.35:
            row = (self.next_id, f"w{self.ops}", self.ops)
            self.next_id += 1
            execute(cur, "INSERT INTO t (id, name, qty) VALUES (%s, %s, %s)", row)
            self.inserted[row[0]] = phase
            self.touched[phase].add(row[0])
            self.events.put(("insert", row))
        elif r < 0.8:
            written = self.next_id > self.first_id and self.rng.random() < 0.4
            key = self.rng.randrange(self.first_id, self.next_id) if written else self.rng.randrange(1, ROWS + 1)
            row = (key, f"u{self.ops}", -self.ops)
            self.touched[phase].add(key)
            if execute(cur, "UPDATE t SET name = %s, qty = %s WHERE id = %s", (*row[1:], key)):
                self.events.put(("update", row))
        else:
            key = self.rng.randrange(1, ROWS + 1)
            self.touched[phase].add(key)
            if execute(cur, "DELETE FROM t WHERE id = %s", (key,)):
                self.events.put(("delete", (key,)))
        self.by_phase[phase] += 1


def execute(cur, sql: str, args=None) -> int:
    """One statement, again after a deadlock or a lock wait timeout (the statement was rolled back)."""
    for _ in range(50):
        try:
            return cur.execute(sql, args)
        except pymysql.err.OperationalError as exc:
            if exc.args[0] not in RETRIED:
                raise
    raise AssertionError(f"still deadlocked after 50 tries: {sql}")


def q(db, name: str) -> str:
    return f"`{db.name}`.`{name}`"


def writes_between_chunks(writer: AppWriter) -> None:
    goal = writer.ops + WRITES_PER_CHUNK
    wait_until(lambda: writer.ops >= goal, "the writer to write between two chunks", timeout=30, interval=0.005)


def old_table_rows(cur, db, name: str) -> dict[tuple, tuple]:
    """The original table as it was at the swap (nothing writes it under its new name)."""
    cur.execute(f"SELECT id, name, qty FROM {q(db, name)}")
    return {(r[0],): tuple(r) for r in cur.fetchall()}


def pt_online_schema_change(db, writer: AppWriter) -> dict[tuple, tuple]:
    """pt-online-schema-change 3.x ``--alter 'ADD COLUMN c INT NOT NULL DEFAULT 0' --execute`` on one
    connection, as it prints it: the new table from SHOW CREATE TABLE, its ALTER, the three triggers, the
    nibbled copy, ANALYZE, the swap, the drops. Returns the original table as it was at the swap."""
    t, new, old = q(db, "t"), q(db, "_t_new"), q(db, "_t_old")
    trigger = f"pt_osc_{db.name}_t"
    cols, new_cols = "`id`, `name`, `qty`", "NEW.`id`, NEW.`name`, NEW.`qty`"
    with contextlib.closing(db.server.app_connection(db.name)) as conn, conn.cursor() as cur:
        cur.execute("SET SESSION innodb_lock_wait_timeout=1")
        cur.execute("SET SESSION lock_wait_timeout=60")
        cur.execute(f"SHOW CREATE TABLE {t}")
        ddl = cur.fetchone()[1]
        cur.execute(re.sub(r"\ACREATE TABLE `t` \(", f"CREATE TABLE {new} (", ddl))
        cur.execute(f"ALTER TABLE {new} ADD COLUMN c INT NOT NULL DEFAULT 0")
        cur.execute(f"CREATE TRIGGER `{trigger}_del` AFTER DELETE ON {t} FOR EACH ROW "
                    f"DELETE IGNORE FROM {new} WHERE {new}.`id` <=> OLD.`id`")
        cur.execute(f"CREATE TRIGGER `{trigger}_upd` AFTER UPDATE ON {t} FOR EACH ROW BEGIN "
                    f"DELETE IGNORE FROM {new} WHERE !(OLD.`id` <=> NEW.`id`) AND {new}.`id` <=> OLD.`id`; "
                    f"REPLACE INTO {new} ({cols}) VALUES ({new_cols}); END")
        cur.execute(f"CREATE TRIGGER `{trigger}_ins` AFTER INSERT ON {t} FOR EACH ROW "
                    f"REPLACE INTO {new} ({cols}) VALUES ({new_cols})")
        writer.phase = "copy"
        cur.execute(f"SELECT /*!40001 SQL_NO_CACHE */ `id` FROM {t} FORCE INDEX(`PRIMARY`) ORDER BY `id` "
                    "LIMIT 1 /*first lower boundary*/")
        lower = cur.fetchone()[0]
        cur.execute(f"SELECT /*!40001 SQL_NO_CACHE */ `id` FROM {t} FORCE INDEX(`PRIMARY`) ORDER BY `id` DESC "
                    "LIMIT 1 /*last upper boundary*/")
        last = cur.fetchone()[0]
        chunks = 0
        while lower is not None:
            cur.execute(f"SELECT /*!40001 SQL_NO_CACHE */ `id` FROM {t} FORCE INDEX(`PRIMARY`) WHERE ((`id` >= %s)) "
                        "ORDER BY `id` LIMIT %s, 2 /*next chunk boundary*/", (lower, CHUNK - 1))
            boundary = [r[0] for r in cur.fetchall()]
            upper, after = (boundary[0], boundary[1]) if len(boundary) == 2 and boundary[1] <= last else (last, None)
            execute(cur, f"INSERT LOW_PRIORITY IGNORE INTO {new} ({cols}) SELECT {cols} FROM {t} "
                         "FORCE INDEX(`PRIMARY`) WHERE ((`id` >= %s)) AND ((`id` <= %s)) LOCK IN SHARE MODE "
                         f"/*pt-online-schema-change {os.getpid()} copy nibble*/", (lower, upper))
            chunks += 1
            lower = after
            writes_between_chunks(writer)
        assert chunks >= ROWS // CHUNK - 1, chunks
        writer.phase = "swap"
        cur.execute(f"ANALYZE TABLE {new} /* pt-online-schema-change */")
        cur.fetchall()
        cur.execute(f"RENAME TABLE {t} TO {old}, {new} TO {t}")
        at_swap = old_table_rows(cur, db, "_t_old")
        cur.execute(f"DROP TABLE IF EXISTS {old}")
        for kind in ("del", "upd", "ins"):
            cur.execute(f"DROP TRIGGER IF EXISTS `{db.name}`.`{trigger}_{kind}`")
    return at_swap


def gh_ost(db, writer: AppWriter) -> dict[tuple, tuple]:
    """gh-ost ``--alter 'ADD COLUMN c INT NOT NULL DEFAULT 0' --ok-to-drop-table --execute``: changelog and
    ghost tables, the chunked copy with the original's row events replayed onto the ghost table first (gh-ost's
    applier, fed here by the writer's own notes instead of the binlog), then its atomic cut-over on three
    connections: the sentry table, LOCK TABLES, the RENAME that blocks behind it, the sentry dropped and the
    tables unlocked. Returns the original table as it was at the swap."""
    t, gho, ghc, sentry = q(db, "t"), q(db, "_t_gho"), q(db, "_t_ghc"), q(db, "_t_del")
    cols = "`id`, `name`, `qty`"
    replay = {
        "insert": f"replace /* gh-ost {gho} */ into {gho} ({cols}) values (%s, %s, %s)",
        "update": f"update /* gh-ost {gho} */ {gho} set `id`=%s, `name`=%s, `qty`=%s where ((`id` = %s))",
        "delete": f"delete /* gh-ost {gho} */ from {gho} where ((`id` = %s))",
    }

    def changelog(cur, hint: str, value: str) -> None:
        explicit = {"heartbeat": 1, "state": 2, "throttle": 3}.get(hint, 0)
        cur.execute(f"insert /* gh-ost */ into {ghc} (id, hint, value) values (NULLIF(%s, 0), %s, %s) "
                    "on duplicate key update last_update=NOW(), value=VALUES(value)", (explicit, hint, value))

    def state(cur, value: str) -> None:
        changelog(cur, "state", value)
        changelog(cur, f"state at {time.time_ns()}", value)

    def apply_events(conn, cur) -> int:
        n = 0
        conn.begin()
        while True:
            try:
                kind, row = writer.events.get_nowait()
            except queue.Empty:
                break
            cur.execute(replay[kind], (*row, row[0]) if kind == "update" else row)
            n += 1
        conn.commit()
        return n

    with contextlib.ExitStack() as stack:
        conn = stack.enter_context(contextlib.closing(db.server.app_connection(db.name)))
        cur = stack.enter_context(conn.cursor())
        cur.execute("SET /* gh-ost */ SESSION time_zone = '+00:00', "
                    "sql_mode = CONCAT(@@session.sql_mode, ',NO_AUTO_VALUE_ON_ZERO,STRICT_ALL_TABLES')")
        cur.execute(f"drop /* gh-ost */ table if exists {ghc}")
        cur.execute(f"create /* gh-ost */ table {ghc} (\n\t\t\tid bigint unsigned auto_increment,\n\t\t\t"
                    "last_update timestamp not null DEFAULT CURRENT_TIMESTAMP ON UPDATE CURRENT_TIMESTAMP,\n\t\t\t"
                    "hint varchar(64) charset ascii not null,\n\t\t\tvalue varchar(4096) charset ascii not null,"
                    "\n\t\t\tprimary key(id),\n\t\t\tunique key hint_uidx(hint)\n\t\t) auto_increment=256 "
                    "comment='gh-ost changelog'")
        cur.execute(f"create /* gh-ost */ table {gho} like {t}")
        cur.execute(f"alter /* gh-ost */ table {gho} ADD COLUMN c INT NOT NULL DEFAULT 0")
        state(cur, "GhostTableMigrated")
        # the streamer listens from here: every change of the original from now on is replayed
        while not writer.events.empty():
            writer.events.get_nowait()
        writer.phase = "copy"
        state(cur, "ReadMigrationRangeValues")
        cur.execute(f"select /* gh-ost {t} */ `id` from {t} force index (`PRIMARY`) order by `id` asc limit 1")
        low = cur.fetchone()[0]
        cur.execute(f"select /* gh-ost {t} */ `id` from {t} force index (`PRIMARY`) order by `id` desc limit 1")
        high = cur.fetchone()[0]
        replayed = iteration = 0
        while True:
            start = "((`id` > %s) or ((`id` = %s)))" if iteration == 0 else "((`id` > %s))"
            start_args = (low, low) if iteration == 0 else (low,)
            cur.execute(f"select /* gh-ost {t} iteration:{iteration} */ `id` from {t} "
                        f"where {start} and ((`id` < %s) or ((`id` = %s))) order by `id` asc limit 1 offset %s",
                        (*start_args, high, high, CHUNK - 1))
            row = cur.fetchone()
            if row is None:  # the last, shorter chunk ends at the range's end
                cur.execute(f"select /* gh-ost {t} iteration:{iteration} */ max(`id`) from {t} "
                            f"where {start} and ((`id` < %s) or ((`id` = %s)))", (*start_args, high, high))
                row = cur.fetchone()
            if row is None or row[0] is None:
                break
            end = row[0]
            replayed += apply_events(conn, cur)  # the binlog's events come before the next chunk
            execute(cur, f"insert /* gh-ost {t} */ ignore into {gho} ({cols}) (select {cols} from {t} "
                         f"force index (`PRIMARY`) where ({start} and ((`id` < %s) or ((`id` = %s)))) "
                         "lock in share mode)", (*start_args, end, end))
            changelog(cur, "heartbeat", time.strftime("%Y-%m-%dT%H:%M:%S"))
            low, iteration = end, iteration + 1
            writes_between_chunks(writer)
        assert iteration >= ROWS // CHUNK - 1, iteration
        replayed += apply_events(conn, cur)

        # the atomic cut-over
        writer.phase = "swap"
        lock = stack.enter_context(contextlib.closing(db.server.app_connection(db.name)))
        lock_cur = stack.enter_context(lock.cursor())
        lock_cur.execute("select /* gh-ost */ get_lock(%s, 0)", (f"gh-ost.{lock.thread_id()}.lock",))
        lock_cur.execute("set /* gh-ost */ session lock_wait_timeout:=6")
        cur.execute(f"create /* gh-ost */ table {sentry} (\n\t\t\tid int auto_increment primary key\n\t\t) "
                    "engine=InnoDB comment='ghost-cut-over-sentry'")
        lock_cur.execute(f"lock /* gh-ost */ tables {t} write, {sentry} write")
        # new writes of the original now wait: once the writer waits too, every change it made is noted
        wait_until(lambda: blocked(cur, writer.thread_id, "metadata lock", ""), "the writer to wait for the lock",
                   timeout=30, interval=0.01)
        state(cur, f"AllEventsUpToLockProcessed:{time.time_ns()}")
        replayed += apply_events(conn, cur)
        assert replayed > 50, replayed

        rename = stack.enter_context(contextlib.closing(db.server.app_connection(db.name)))
        renamed: list[BaseException | None] = []

        def cut_over_rename() -> None:
            try:
                with rename.cursor() as c:
                    c.execute("set /* gh-ost */ session lock_wait_timeout:=10")
                    c.execute(f"rename /* gh-ost */ table {t} to {sentry}, {gho} to {t}")
                renamed.append(None)
            except BaseException as exc:
                renamed.append(exc)

        thread = threading.Thread(target=cut_over_rename, daemon=True)
        thread.start()
        wait_until(lambda: blocked(cur, rename.thread_id(), "metadata lock", "rename"), "the RENAME to block",
                   timeout=30, interval=0.01)
        lock_cur.execute(f"drop /* gh-ost */ table if exists {sentry}")
        lock_cur.execute("unlock /* gh-ost */ tables")
        thread.join(30)
        assert renamed == [None], renamed
        at_swap = old_table_rows(cur, db, "_t_del")
        state(cur, "Migrated")
        cur.execute(f"drop /* gh-ost */ table if exists {ghc}")
        cur.execute(f"drop /* gh-ost */ table if exists {sentry}")
    return at_swap


def blocked(cur, thread_id: int | None, state: str, info: str) -> bool:
    cur.execute("select /* gh-ost */ id from information_schema.processlist where id != connection_id() "
                "and id = %s and state like %s and info like %s", (thread_id, f"%{state}%", f"%{info}%"))
    return bool(cur.fetchall())


def shadow_traces(p, postgres, db, sink_type, names) -> list[str]:
    """Whatever the pipeline keeps of ``names`` (sink files, state, mirror tables) but the statements about a
    shadow table kept for its swap: nothing is expected."""
    found = []
    for root in (p.tmp / "sink", p.tmp / "state"):
        for path in root.rglob("*"):
            if "shadows" not in path.relative_to(root).parts:
                found += [str(path) for n in names if db.table(n) in path.name]
    if sink_type == "jdbc":
        with postgres.connect() as conn, conn.cursor() as cur:
            cur.execute("SELECT table_name FROM information_schema.tables WHERE table_schema = %s",
                        (f"s_{db.name}",))
            tables = {r[0] for r in cur.fetchall()}
        found += sorted(tables & {mirror_table_name(db.table(n)) for n in names})
    return found


def redo_what_the_tool_lost(db, writer: AppWriter, at_swap: dict[tuple, tuple]) -> None:
    """An insert of the swap's phase that reached the original table after the tool's last replay (the server
    may grant the writer's waiting INSERT before the RENAME when the tables are unlocked) is in the original at
    the swap and never in the ghost table: the simulated tool lost it, as the real ones do not. It is made again
    on the swapped-in table, as the tool would have replayed it, so that the source holds what the binlog says."""
    now = source_rows(db, "t")
    lost = [v for k, v in at_swap.items()
            if k not in now and k[0] >= writer.first_id and k[0] in writer.touched["swap"]]
    with db.app.cursor() as cur:
        for row in lost:
            execute(cur, "INSERT IGNORE INTO t (id, name, qty) VALUES (%s, %s, %s)", row)
    assert len(lost) <= 2, lost  # more would be the simulation's cut-over failing, not a race


def online_schema_change_under_writes(db, tmp_path, spark, postgres, sink_type, tool, shadow, others):
    make_tables(db, rows=ROWS)
    p = make_pipeline(db, tmp_path, postgres, sink_type, chunk_size=200)
    snapshot_all(p)
    with AppWriter(db) as writer:
        wait_until(lambda: writer.ops >= 20, "the writer to start", interval=0.01)
        at_swap = tool(db, writer)
        writer.phase = "after"
        redo_what_the_tool_lost(db, writer, at_swap)
        goal = writer.ops + 30
        wait_until(lambda: writer.ops >= goal, "the writer to write the swapped-in table", interval=0.01)
    assert writer.by_phase["copy"] + writer.by_phase["swap"] > 100, writer.by_phase
    during_copy = {k for k, phase in writer.inserted.items() if phase == "copy"}
    assert len(during_copy) > 20, writer.by_phase
    # the tool lost nothing: the swapped-in table holds the original as it was at the swap, but for the rows
    # written since (a statement of the swap's phase may have run on either table)
    since = writer.touched["swap"] | writer.touched["after"]
    swapped_in = {k: v[:3] for k, v in source_rows(db, "t").items() if k[0] not in since}
    assert swapped_in == {k: v for k, v in at_swap.items() if k[0] not in since}
    db.execute("UPDATE t SET c = 9 WHERE MOD(id, 7) = 0")

    p.stream()
    changes = [(c.kind, c.table.table) for c in p.state.schema_changes()]
    assert changes == [("evolve", "t")], changes
    assert f"{db.table(shadow)} (renamed)" in p.state.schema_changes()[0].detail and not pending_resyncs(p.state)
    assert shadow_traces(p, postgres, db, sink_type, [shadow, *others]) == []
    # no re-snapshot: every change of the original up to the swap, the tool's ALTER at it (the rows that existed
    # hold the new column's DEFAULT), every change of the swapped-in table after it
    for table in ("t", "other"):
        assert_sink_equals_source(p, spark, postgres, db, sink_type, table)
    want = source_rows(db, "t")
    assert all((k,) in want for k in during_copy)  # the writer's rows of the copy, thanks to the tool
    assert {k: v[:3] for k, v in want.items() if k[0] not in since} == {
        k: v for k, v in at_swap.items() if k[0] not in since}

    db.execute("UPDATE t SET c = 10 WHERE MOD(id, 11) = 0")
    p.stream()
    for table in ("t", "other"):
        assert_sink_equals_source(p, spark, postgres, db, sink_type, table)
    assert {r[3] for r in source_rows(db, "t").values()} == {0, 9, 10}
    assert [c.kind for c in p.state.schema_changes()] == ["evolve"]


def test_pt_online_schema_change_is_one_change_of_the_table_and_no_row_of_the_copy(
        source_db, tmp_path, spark, postgres):
    """Its triggers write the shadow table inside the application's transactions: the stream must keep the
    original's rows of those transactions and drop the shadow's."""
    online_schema_change_under_writes(source_db, tmp_path, spark, postgres, "parquet", pt_online_schema_change,
                                      "_t_new", ["_t_old"])


def test_gh_ost_swap_is_one_change_of_the_table_and_no_row_of_the_copy(source_db, tmp_path, spark, postgres):
    """Triggerless: the ghost table is written by the tool's own transactions, with changelog heartbeats and a
    sentry table named as the old table will be; only the RENAME concerns ``t``."""
    online_schema_change_under_writes(source_db, tmp_path, spark, postgres, "jdbc", gh_ost,
                                      "_t_gho", ["_t_ghc", "_t_del"])
