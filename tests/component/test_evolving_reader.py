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


def test_segments_record_versions_in_order_whichever_reads_first_then_every_row_decodes_with_its_own(
        source_db, tmp_path, server_id):
    db = source_db
    db.execute("CREATE TABLE t (id INT PRIMARY KEY, v INT NOT NULL)")
    db.executemany("INSERT INTO t VALUES (%s, %s)", [(i, i) for i in range(1, 6)])
    with db.connection() as conn:
        base = load_schema(conn, TableId(db.name, "t"))
    store = StateStore(tmp_path / "state")
    store.note_snapshot_definition(db.table("t"), 0, base)
    start = offset(db)
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
