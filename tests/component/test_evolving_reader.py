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

