"""Exactly-once across snapshot and stream, through the real binlog.

Chunks are read one after another while another connection keeps writing, so their high watermarks
differ and changes land before, inside and after each chunk's window. The stream is then replayed from the
smallest high watermark through the emit filter. Snapshot rows + emitted changes must equal the table, and
every dropped change must be one that its chunk already contains.
"""

from __future__ import annotations

import pymysql

from airflow_cdc_provider.core.chunks import SplitOptions, TableId
from airflow_cdc_provider.core.emit_filter import build_emit_filter
from airflow_cdc_provider.core.offsets import min_offset
from airflow_cdc_provider.core.records import OP_DELETE
from airflow_cdc_provider.pipeline.chunk_window import ChunkReadHooks, read_chunk
from airflow_cdc_provider.source.binlog import read_changes_between
from airflow_cdc_provider.source.chunk_queries import split_schema
from airflow_cdc_provider.source.key_order import DatabaseKeyOrder
from airflow_cdc_provider.source.schema import load_schema
from airflow_cdc_provider.source.server import current_offset


def _materialize(snapshot_rows, records):
    state = dict(snapshot_rows)
    for r in records:
        if r.op == OP_DELETE:
            state.pop(r.key, None)
        else:
            state[r.key] = r.after
    return state


def _table_now(db, table, key_columns):
    with db.connection() as conn, conn.cursor(pymysql.cursors.DictCursor) as cur:
        cur.execute(f"SELECT * FROM `{db.name}`.`{table}`")
        return {tuple(r[k] for k in key_columns): r for r in cur.fetchall()}


def run_scenario(db, server_id, table, keys_in_chunk):
    """keys_in_chunk(chunk) -> a few keys of that chunk to write to; returns (emitted, dropped, state, now)."""
    with db.connection() as conn:
        schema = load_schema(conn, TableId(db.name, table))
        chunks = split_schema(conn, schema, SplitOptions(10, even_split=False))
    assert len(chunks) == 3
    k0, k1, k2 = (keys_in_chunk(c) for c in chunks)
    col = schema.key_columns[0]

    def upd(key, v):
        db.execute(f"UPDATE `{table}` SET v = %s WHERE `{col}` = %s", (v, key))

    results = []
    results.append(read_chunk(db.settings, schema, chunks[0], server_id=server_id))
    upd(k0[0], "after chunk0 HW -> emit")
    upd(k1[0], "before chunk1 LW -> drop")
    results.append(read_chunk(db.settings, schema, chunks[1], server_id=server_id,
                              hooks=ChunkReadHooks(after_select=lambda: (upd(k1[1], "chunk1 window -> drop"),
                                                                         upd(k2[0], "before chunk2 read -> drop")))))
    upd(k1[2], "after chunk1 HW -> emit")
    results.append(read_chunk(db.settings, schema, chunks[2], server_id=server_id))
    upd(k2[1], "after all -> emit")
    db.execute(f"DELETE FROM `{table}` WHERE `{col}` = %s", (k0[1],))
    with db.connection() as conn:
        end = current_offset(conn)
        order = DatabaseKeyOrder(conn, schema)
        ranges = [r.report.range for r in results]
        seed = min_offset([r.report.high_watermark for r in results])
        assert seed == results[0].report.high_watermark
        changes = list(read_changes_between(db.settings, server_id, seed, end, {schema.table: schema}))
        order.prefetch([c.key for c in changes] + [k for c in chunks for k in (c.start, c.end) if k])
        emit = build_emit_filter(ranges, {str(schema.table): order})
        emitted = [c for c in changes if emit.should_emit(schema.table, c.key, c.position)]
        dropped = [c for c in changes if not emit.should_emit(schema.table, c.key, c.position)]
    snapshot = {k: v for r in results for k, v in r.rows.items()}
    return emitted, dropped, _materialize(snapshot, emitted), _table_now(db, table, schema.key_columns), results


def test_stream_after_snapshot_emits_each_change_exactly_once(source_db, server_id):
    source_db.execute("CREATE TABLE t (id INT PRIMARY KEY, v VARCHAR(40))")
    source_db.executemany("INSERT INTO t VALUES (%s, 'initial')", [(i,) for i in range(1, 31)])
    emitted, dropped, state, now, _ = run_scenario(source_db, server_id, "t", lambda c: [
        (c.start[0] if c.start else 1) + i for i in range(3)])
    assert state == now
    assert sorted(r.after["v"] if r.after else "delete" for r in emitted) == [
        "after all -> emit", "after chunk0 HW -> emit", "after chunk1 HW -> emit", "delete"]
    assert sorted(r.after["v"] for r in dropped) == [
        "before chunk1 LW -> drop", "before chunk2 read -> drop", "chunk1 window -> drop"]


def test_string_keys_route_changes_by_collation(source_db, server_id):
    source_db.execute("CREATE TABLE s (code VARCHAR(20) COLLATE utf8mb4_general_ci PRIMARY KEY, v VARCHAR(40))")
    # mixed case: Python's order would route changes to the wrong chunk
    codes = [f"{chr(ord('a') + i // 2)}{i}" if i % 2 else f"{chr(ord('A') + i // 2)}{i}" for i in range(30)]
    source_db.executemany("INSERT INTO s VALUES (%s, 'initial')", [(c,) for c in codes])

    def keys(chunk):
        with source_db.connection() as conn, conn.cursor() as cur:
            where = "1=1" if chunk.start is None else "code >= %s"
            cur.execute(f"SELECT code FROM `{source_db.name}`.s WHERE {where} ORDER BY code LIMIT 3", chunk.start or ())
            return [r[0] for r in cur.fetchall()]

    emitted, dropped, state, now, _ = run_scenario(source_db, server_id, "s", keys)
    assert state == now
    assert len(emitted) == 4 and len(dropped) == 3
