"""The binlog reader applying ALTERs in place, against the real MariaDB and a real state store: a read that
meets an ALTER records the table's next version; a read starting inside a batch after an ALTER no one recorded
yet first records those of the batch's earlier part, in order, so every version is built on the one really
before it; and a read with the recorded versions decodes every row with its own version and carries it up."""

from __future__ import annotations

import pymysql

from airflow_cdc_provider.core.chunks import TableId
from airflow_cdc_provider.core.records import ChangeRecord
from airflow_cdc_provider.core.schema_changes import SchemaChange
from airflow_cdc_provider.pipeline.stream_evolutions import StreamEvolutions
from airflow_cdc_provider.source.binlog import TableChangeReader, read_changes_between
from airflow_cdc_provider.source.schema import load_schema
from airflow_cdc_provider.source.segments import BinlogMap
from airflow_cdc_provider.source.server import current_offset
from airflow_cdc_provider.source.table_versions import TableVersion
from airflow_cdc_provider.state.store import StateStore


def offset(db):
    with db.connection() as conn:
        return current_offset(conn)


def evolutions(db, store, versions):
    name = db.table("t")
    return StreamEvolutions({name: versions}, {name: 0}, store.uri,
                            lambda: pymysql.connect(**db.settings.pymysql_kwargs()), {name: "evolve"})


def read(db, server_id, evo, start, stop, batch_start, schema):
    table = schema.table
    reader = TableChangeReader({table: schema}, evolutions=evo.reading_from(start, batch_start, db.settings,
                                                                            server_id + 50),
                               confirmed=None if start == batch_start else ())
    out = list(read_changes_between(db.settings, server_id, start, stop, {table: schema}, reader))
    return reader, out


def snapshotted_table(db, tmp_path):
    """Table ``t`` (5 rows) as a snapshot read it: ``(its definition, the state store, the position after it)``."""
    db.execute("CREATE TABLE t (id INT PRIMARY KEY, v INT NOT NULL)")
    db.executemany("INSERT INTO t VALUES (%s, %s)", [(i, i) for i in range(1, 6)])
    with db.connection() as conn:
        base = load_schema(conn, TableId(db.name, "t"))
    store = StateStore(tmp_path / "state")
    store.note_snapshot_definition(db.table("t"), 0, base)
    return base, store, offset(db)


def test_segments_record_versions_in_order_whichever_reads_first_then_every_row_decodes_with_its_own(
        source_db, tmp_path, server_id):
    db = source_db
    base, store, start = snapshotted_table(db, tmp_path)
    db.execute("UPDATE t SET v = 10 WHERE id = 1")
    db.execute("ALTER TABLE t ADD COLUMN c INT NOT NULL DEFAULT 5")
    db.execute("UPDATE t SET c = 6 WHERE id = 2")
    middle = offset(db)  # the second segment starts here, after the first ALTER
    db.execute("UPDATE t SET v = 30 WHERE id = 3")
    db.execute("ALTER TABLE t CHANGE v w INT NOT NULL")
    db.execute("INSERT INTO t VALUES (7, 70, 7)")
    end = offset(db)

    # the second segment reads first: its first TABLE_MAP is of a definition it does not know; the batch's earlier
    # part holds an ALTER nobody recorded yet: recorded first, then the second ALTER, built on it
    evo = evolutions(db, store, [TableVersion(0, base)])
    second, out = read(db, server_id, evo, middle, end, start, base)
    assert second.recorded and not [r for r in out if isinstance(r, SchemaChange) and r.kind == "resync"]
    v0, v1, v2 = store.table_versions(db.table("t"), 0)
    assert v1.schema.column_names == ["id", "v", "c"] and dict(v1.added) == {"c": 5}
    assert v2.schema.column_names == ["id", "w", "c"] and dict(v2.renamed) == {"w": "v"}
    # the first segment meets the first ALTER, recorded already: the same version, no resync
    first, out = read(db, server_id, evo, start, middle, start, base)
    assert [c.version.number for c in first.recorded] == [1]
    assert not [r for r in out if isinstance(r, SchemaChange) and r.kind == "resync"]
    assert store.table_versions(db.table("t"), 0) == [v0, v1, v2]

    # the query again, with the recorded versions: nothing new to record, every row carried up to version 2
    evo = evolutions(db, store, [v0, v1, v2])
    rows = []
    for a, b in ((start, middle), (middle, end)):
        reader, out = read(db, server_id, evo, a, b, start, base)
        assert not reader.recorded
        rows += [(r.op, dict(r.after)) for r in out if isinstance(r, ChangeRecord)]
        assert [r.kind for r in out if isinstance(r, SchemaChange)] == ["evolve"]
    assert rows == [("u", {"id": 1, "w": 10, "c": 5}), ("u", {"id": 2, "w": 2, "c": 6}),
                    ("u", {"id": 3, "w": 30, "c": 5}), ("c", {"id": 7, "w": 70, "c": 7})]


def test_the_first_batchs_alters_are_recorded_before_its_read_and_only_when_a_definition_changed(
        source_db, tmp_path, server_id):
    db = source_db
    base, store, start = snapshotted_table(db, tmp_path)
    db.execute("UPDATE t SET v = 10 WHERE id = 1")

    def ahead(versions, max_bytes=None):
        """What the stream records before its first batch (capped at ``max_bytes``) is read."""
        evo = evolutions(db, store, versions)
        with db.connection() as conn:
            if not evo.definitions_changed(conn):
                return []
            stop, _ = BinlogMap(conn).batch_end(start, current_offset(conn), max_bytes)
        return [r.version for r in evo.record_between(db.settings, server_id, start, stop, {}, set())]

    # the definition now is the snapshot's: nothing to look for, nothing recorded
    assert ahead([TableVersion(0, base)]) == [] and store.table_versions(db.table("t"), 0) == [TableVersion(0, base)]

    db.execute("ALTER TABLE t ADD COLUMN c INT NOT NULL DEFAULT 5")
    db.execute("UPDATE t SET c = 6 WHERE id = 2")
    db.execute("ALTER TABLE t CHANGE v w INT NOT NULL")
    db.execute("INSERT INTO t VALUES (7, 70, 7)")
    end = offset(db)
    # a batch capped at one byte holds the first transaction only: no ALTER in it
    assert ahead([TableVersion(0, base)], max_bytes=1) == []
    recorded = ahead([TableVersion(0, base)])
    v0, v1, v2 = store.table_versions(db.table("t"), 0)
    assert recorded == [v1, v2]
    assert v1.schema.column_names == ["id", "v", "c"] and dict(v1.added) == {"c": 5}
    assert v2.schema.column_names == ["id", "w", "c"] and dict(v2.renamed) == {"w": "v"}
    # the query then reads the batch with them: each ALTER is met where its version starts (nothing to record,
    # no attempt fails), every row carried up to version 2
    reader, out = read(db, server_id, evolutions(db, store, [v0, v1, v2]), start, end, start, base)
    assert not reader.recorded
    assert [(r.kind, r.position) for r in out if isinstance(r, SchemaChange)] == [
        ("evolve", v1.position), ("evolve", v2.position)]
    assert [(r.op, dict(r.after)) for r in out if isinstance(r, ChangeRecord)] == [
        ("u", {"id": 1, "w": 10, "c": 5}), ("u", {"id": 2, "w": 2, "c": 6}), ("c", {"id": 7, "w": 70, "c": 7})]
    # a second look finds the versions known: nothing more
    assert ahead([v0, v1, v2]) == [] and store.table_versions(db.table("t"), 0) == [v0, v1, v2]
    # a change of nullability alone is a change of the definition; a table held for its re-snapshot has none to record
    db.execute("ALTER TABLE t MODIFY c INT NULL DEFAULT 5")
    with db.connection() as conn:
        assert evolutions(db, store, [v0, v1, v2]).definitions_changed(conn)
        assert not evolutions(db, store, [v0, v1, v2]).definitions_changed(conn, held={base.table})



def gh_ost_swap(db, alter="ADD COLUMN c INT NOT NULL DEFAULT 0", middle=None):
    """gh-ost's statements on ``t`` (id, v), its replay of changes onto the ghost table left out: the ghost
    created like ``t`` and altered, the rows copied, changes of ``t`` meanwhile, the atomic swap, one change of
    the swapped-in table. ``middle``: called between the copy and the swap; returns its value."""
    db.execute("CREATE /* gh-ost */ TABLE `_t_gho` LIKE `t`")
    db.execute(f"ALTER /* gh-ost */ TABLE `_t_gho` {alter}")
    db.execute("INSERT /* gh-ost */ IGNORE INTO `_t_gho` (id, v) SELECT id, v FROM t")
    db.execute("UPDATE t SET v = 20 WHERE id = 2")
    db.execute("UPDATE _t_gho SET v = 20 WHERE id = 2")
    found = middle() if middle else None
    db.execute("RENAME /* gh-ost */ TABLE `t` TO `_t_del`, `_t_gho` TO `t`")
    db.execute("DROP TABLE `_t_del`")
    db.execute("UPDATE t SET v = 40 WHERE id = 4")
    return found


def schema_changes_of(out):
    return [(r.kind, r.table.table) for r in out if isinstance(r, SchemaChange)]


def changed_rows(out):
    return [(r.op, dict(r.after)) for r in out if isinstance(r, ChangeRecord)]


def test_an_online_schema_change_swap_is_the_shadows_alter_at_the_swap_and_no_row_of_the_copy(
        source_db, tmp_path, server_id):
    """gh-ost: the ghost table's ALTER, noted as the read passed it, is the version the swap starts; the copy's
    rows and the ghost's own changes are not the table's. Read again as the query reads it after the restart,
    the batch's rows of the original are carried up to the new version, and the swapped-in table's rows decode
    with it."""
    db = source_db
    base, store, start = snapshotted_table(db, tmp_path)
    middle = gh_ost_swap(db, middle=lambda: offset(db))
    end = offset(db)

    # the swap read first, by a segment starting after the ghost's ALTER: the batch's earlier part is read for
    # the ghost's statements first
    reader, out = read(db, server_id, evolutions(db, store, [TableVersion(0, base)]), middle, end, start, base)
    assert schema_changes_of(out) == [("evolve", "t")] and reader.recorded
    v0, v1 = store.table_versions(db.table("t"), 0)
    assert v1.schema.column_names == ["id", "v", "c"] and dict(v1.added) == {"c": 0} and not v1.renamed
    assert "_t_gho" in v1.statement and "ADD COLUMN c" in v1.statement
    notes = store.shadow_statements(db.table("t"), 0, db.table("_t_gho"))
    assert [n.kind for n in notes] == ["like", "alter", "other"]  # the swap itself renames the ghost away

    reader, out = read(db, server_id, evolutions(db, store, [v0, v1]), start, end, start, base)
    assert not reader.recorded and schema_changes_of(out) == [("evolve", "t")]
    assert changed_rows(out) == [("u", {"id": 2, "v": 20, "c": 0}), ("u", {"id": 4, "v": 40, "c": 0})]


def test_pt_online_schema_change_creates_its_shadow_from_show_create_table(source_db, tmp_path, server_id):
    db = source_db
    base, store, start = snapshotted_table(db, tmp_path)
    with db.connection() as conn, conn.cursor() as cur:
        cur.execute(f"SHOW CREATE TABLE `{db.name}`.`t`")
        ddl = cur.fetchone()[1]
    db.execute(ddl.replace("CREATE TABLE `t`", "CREATE TABLE `_t_new`", 1))
    db.execute("ALTER TABLE `_t_new` CHANGE v w BIGINT NOT NULL, ADD COLUMN d VARCHAR(8) DEFAULT 'x'")
    db.execute("CREATE TRIGGER `pt_osc_t_upd` AFTER UPDATE ON t FOR EACH ROW "
               "REPLACE INTO `_t_new` (id, w) VALUES (NEW.id, NEW.v)")
    db.execute("INSERT LOW_PRIORITY IGNORE INTO `_t_new` (id, w) SELECT id, v FROM t LOCK IN SHARE MODE")
    db.execute("UPDATE t SET v = 30 WHERE id = 3")
    db.execute("ANALYZE TABLE `_t_new`")
    db.execute("RENAME TABLE `t` TO `_t_old`, `_t_new` TO `t`")
    db.execute("DROP TABLE IF EXISTS `_t_old`")
    db.execute("DROP TRIGGER IF EXISTS `pt_osc_t_upd`")
    db.execute("INSERT INTO t (id, w) VALUES (8, 80)")
    end = offset(db)

    reader, out = read(db, server_id, evolutions(db, store, [TableVersion(0, base)]), start, end, start, base)
    assert schema_changes_of(out) == [("evolve", "t")]
    v0, v1 = store.table_versions(db.table("t"), 0)
    assert v1.schema.column_names == ["id", "w", "d"] and dict(v1.renamed) == {"w": "v"}
    assert dict(v1.added) == {"d": "x"}
    reader, out = read(db, server_id, evolutions(db, store, [v0, v1]), start, end, start, base)
    assert changed_rows(out) == [("u", {"id": 3, "w": 30, "d": "x"}), ("c", {"id": 8, "w": 80, "d": "x"})]


def test_a_swap_the_stream_cannot_derive_stays_a_resync(source_db, tmp_path, server_id):
    """A ghost ALTER not applied in place, the table altered after its ghost was created, a ghost altered twice, a
    ghost created before the read began: each swap is a resync of the table, naming why."""
    db = source_db
    base, _, _ = snapshotted_table(db, tmp_path)

    def swap_reason(before=(), **kwargs):
        """The resync's detail of a swap by ``gh_ost_swap(**kwargs)``, after the changes of kinds ``before``; ``t``
        and the state store start afresh."""
        db.execute("DROP TABLE IF EXISTS t, _t_gho")
        db.execute("CREATE TABLE t (id INT PRIMARY KEY, v INT NOT NULL)")
        db.executemany("INSERT INTO t VALUES (%s, %s)", [(i, i) for i in range(1, 6)])
        store = StateStore(tmp_path / f"state-{offset(db).pos}")
        store.note_snapshot_definition(db.table("t"), 0, base)
        start = offset(db)
        gh_ost_swap(db, **kwargs)
        reader, out = read(db, server_id, evolutions(db, store, [TableVersion(0, base)]), start, offset(db), start,
                           base)
        changes = [r for r in out if isinstance(r, SchemaChange)]
        assert (changes[-1].kind, changes[-1].table.table) == ("resync", "t"), changes
        assert [c.kind for c in changes[:-1]] == list(before)
        return changes[-1].detail

    assert "'v' changes from int(11) to smallint(6)" in swap_reason(alter="MODIFY v SMALLINT NOT NULL")

    def both_altered():  # the table itself, and its ghost the same way (no tool does)
        db.execute("ALTER TABLE t ADD COLUMN e INT NULL")
        db.execute("ALTER TABLE _t_gho ADD COLUMN e INT NULL")

    assert "t was altered after" in swap_reason(["evolve"], middle=both_altered)
    assert "_t_gho was altered 2 times" in swap_reason(
        middle=lambda: db.execute("ALTER TABLE _t_gho ADD COLUMN f INT NULL"))
    assert "cannot tell what {}._t_gho holds: truncated".format(db.name) in swap_reason(
        middle=lambda: db.execute("TRUNCATE TABLE _t_gho"))

    assert f"{db.name}.t was emptied after {db.name}._t_gho was created (truncated)" in swap_reason(
        ["truncate"], middle=lambda: db.execute("TRUNCATE TABLE t"))

    # pt-osc's drop_swap: the table dropped, then the shadow renamed into its empty name by another statement. The
    # sinks drop the table's rows at the drop; the shadow's are the table's new rows, which only a re-snapshot
    # reads
    db.execute("DROP TABLE IF EXISTS t, _t_gho, _t_new")
    db.execute("CREATE TABLE t (id INT PRIMARY KEY, v INT NOT NULL)")
    db.executemany("INSERT INTO t VALUES (%s, %s)", [(i, i) for i in range(1, 6)])
    store = StateStore(tmp_path / "state-drop-swap")
    store.note_snapshot_definition(db.table("t"), 0, base)
    start = offset(db)
    db.execute("CREATE TABLE `_t_new` LIKE `t`")
    db.execute("ALTER TABLE `_t_new` ADD COLUMN c INT NOT NULL DEFAULT 0")
    db.execute("INSERT INTO `_t_new` (id, v) SELECT id, v FROM t")
    db.execute("DROP TABLE t")
    db.execute("RENAME TABLE `_t_new` TO `t`")
    reader, out = read(db, server_id, evolutions(db, store, [TableVersion(0, base)]), start, offset(db), start, base)
    assert schema_changes_of(out) == [("drop", "t"), ("resync", "t")]
    assert len(store.table_versions(db.table("t"), 0)) == 1

    # the ghost created where the table's snapshot does not hold every change yet: the definition it copied may
    # be one the stream never had
    db.execute("DROP TABLE IF EXISTS t, _t_gho")
    db.execute("CREATE TABLE t (id INT PRIMARY KEY, v INT NOT NULL)")
    store = StateStore(tmp_path / "state-covered")
    store.note_snapshot_definition(db.table("t"), 0, base)
    start = offset(db)
    db.execute("CREATE TABLE `_t_gho` LIKE `t`")
    covered = offset(db)
    db.execute("ALTER TABLE `_t_gho` ADD COLUMN c INT NULL")
    db.execute("RENAME TABLE `t` TO `_t_del`, `_t_gho` TO `t`")
    reader = TableChangeReader({base.table: base}, covered_through={base.table: covered.sort_key},
                               evolutions=evolutions(db, store, [TableVersion(0, base)]).reading_from(start))
    out = list(read_changes_between(db.settings, server_id, start, offset(db), {base.table: base}, reader))
    assert [r.kind for r in out if isinstance(r, SchemaChange)] == ["resync"]
    assert out[-1].detail.endswith("holds: created before the table's snapshot held every change"), out[-1].detail
    db.execute("DROP TABLE _t_del")

    def created_before_the_read():
        db.execute("CREATE TABLE `_t_gho` LIKE `t`")
        db.execute("ALTER TABLE `_t_gho` ADD COLUMN c INT NULL")

    db.execute("DROP TABLE IF EXISTS t, _t_gho")
    db.execute("CREATE TABLE t (id INT PRIMARY KEY, v INT NOT NULL)")
    store = StateStore(tmp_path / "state-late")
    store.note_snapshot_definition(db.table("t"), 0, base)
    created_before_the_read()
    start = offset(db)
    db.execute("RENAME TABLE `t` TO `_t_del`, `_t_gho` TO `t`")
    reader, out = read(db, server_id, evolutions(db, store, [TableVersion(0, base)]), start, offset(db), start, base)
    assert [(r.kind, r.detail) for r in out if isinstance(r, SchemaChange)] == [
        ("resync", f"replaced by {db.table('_t_gho')} (renamed); not applied in place: an online schema change "
                   f"swapped {db.table('_t_gho')} in: the stream did not see {db.table('_t_gho')} created")]
