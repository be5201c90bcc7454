"""Which chunks of a chunk task cleared late still need reading: a table whose later snapshot finished, or that
was taken out of the pipeline since the plan, is left out; the others are read. Real local state store."""

from airflow_cdc_provider.core.chunks import Chunk, ChunkTask, TableId
from airflow_cdc_provider.core.offsets import BinlogOffset
from airflow_cdc_provider.core.reports import ChunkReport
from airflow_cdc_provider.operators.snapshot import chunks_to_read
from airflow_cdc_provider.state.records import FinishedSnapshot
from airflow_cdc_provider.state.store import StateStore


def test_a_task_of_several_tables_reads_those_left_after_others_were_superseded_or_taken_out(tmp_path):
    """A chunk task of small tables a, b and c, cleared late: b's later snapshot finished and c was taken out of
    the pipeline since the plan. It reads a alone (c's sink must not come back, b's older rows add nothing), and
    says why the others are left; with none left it has nothing to read."""
    state = StateStore(tmp_path)
    planned = 1_000_000  # the plan's epoch: its time in ms
    a, b, c = (TableId("shop", t) for t in "abc")
    task = ChunkTask([Chunk(t, 0, ("id",), None, None, epoch=planned) for t in (a, b, c)])
    later = Chunk(b, 0, ("id",), None, None, epoch=planned + 5)
    report = ChunkReport(later, BinlogOffset("b.000001", 4), BinlogOffset("b.000001", 8), 1, 0, 0.1)
    state.write_finished_snapshot(FinishedSnapshot(str(b), planned + 5, (report,)))
    state.forget_table(str(c), "uncaptured/shop.c-1", now=planned / 1000 + 1)
    left, why = chunks_to_read(task, state)
    assert left.chunks == task.chunks[:1]
    assert any(f"a later snapshot of {b} finished (epoch {planned + 5})" in w for w in why), why
    assert any(f"{c} taken out of the pipeline" in w for w in why), why
    left, why = chunks_to_read(ChunkTask(task.chunks[1:]), state)
    assert left.chunks == [] and len(why) == 2
