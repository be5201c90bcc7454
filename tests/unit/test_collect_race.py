"""Two collects of one table racing (two runs that snapshotted it at once): whichever finishes last, the older
epoch never replaces the newer one, in the state store or as the parquet sink's current epoch, so the stream's
seed and the rows the sink serves stay of the same epoch. Real local state store and sink directory."""

from airflow_cdc_provider.core.chunks import Chunk, TableId
from airflow_cdc_provider.core.offsets import BinlogOffset
from airflow_cdc_provider.core.reports import ChunkReport
from airflow_cdc_provider.sinks.base import SinkConfig
from airflow_cdc_provider.sinks.parquet import ParquetSink
from airflow_cdc_provider.state.records import FinishedSnapshot
from airflow_cdc_provider.state.store import StateStore

TABLE = "shop.orders"


def finished(epoch: int, high: int) -> FinishedSnapshot:
    chunk = Chunk(TableId.parse(TABLE), 0, ("id",), None, None, epoch=epoch)
    return FinishedSnapshot(TABLE, epoch, (ChunkReport(chunk, BinlogOffset("b.000001", 4),
                                                       BinlogOffset("b.000001", high), 1, 0, 0.1),))


def test_an_older_epoch_finishing_last_stays_behind_the_newer_one(tmp_path):
    store = StateStore(tmp_path / "state")
    sink = ParquetSink(SinkConfig(type="parquet", path=str(tmp_path / "sink")), {})
    newer, older = finished(2000, 900), finished(1000, 400)
    sink.finish_snapshot(TABLE, newer.epoch, (1, 4, 0))
    store.write_finished_snapshot(newer)
    sink.finish_snapshot(TABLE, older.epoch, (1, 4, 0))  # the other collect, finishing last
    store.write_finished_snapshot(older)
    assert store.finished_snapshot(TABLE).epoch == newer.epoch
    assert sink.layout.read_current(TABLE)["epoch"] == newer.epoch
    later = finished(3000, 950)  # a later epoch still goes in
    sink.finish_snapshot(TABLE, later.epoch, (1, 4, 0))
    store.write_finished_snapshot(later)
    assert store.finished_snapshot(TABLE).epoch == sink.layout.read_current(TABLE)["epoch"] == later.epoch
