"""StreamBatchesTrigger: an asset watcher's trigger, so a downstream DAG runs when a continuous stream has written
new rows of a table, not only when the stream task ends (``operators.assets.table_asset(..., per_batch=True)``)."""

from __future__ import annotations

import asyncio
from typing import Any, AsyncIterator

from airflow.triggers.base import BaseEventTrigger, TriggerEvent

from airflow_cdc_provider.pipeline.stream_watch import BatchCursor, new_batches
from airflow_cdc_provider.state.store import StateStore


class StreamBatchesTrigger(BaseEventTrigger):
    """Polls the pipeline's stream status every ``poll_interval`` seconds and fires an event when the stream wrote
    rows of ``table`` since the last poll (the payload: rows, batch id, binlog position, launch). Batches written
    while no triggerer ran it are reported with the next one; its events say that the sink changed, not what."""

    def __init__(self, state_path: str, table: str, poll_interval: float = 5.0) -> None:
        super().__init__()
        self.state_path, self.table, self.poll_interval = state_path, table, poll_interval

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (f"{type(self).__module__}.{type(self).__qualname__}",
                {"state_path": self.state_path, "table": self.table, "poll_interval": self.poll_interval})

    async def _status(self, store: StateStore):
        try:
            return await asyncio.to_thread(store.read_status)
        except Exception as exc:  # noqa: BLE001 - a state store out of reach for a while ends no watcher
            self.log.warning("the stream status at %s is not readable now: %s", self.state_path, exc)
            return None

    async def run(self) -> AsyncIterator[TriggerEvent]:
        store = StateStore(self.state_path)
        _, cursor = new_batches(await self._status(store), self.table, BatchCursor())  # what was written before
        while True:
            await asyncio.sleep(self.poll_interval)
            payload, cursor = new_batches(await self._status(store), self.table, cursor)
            if payload is not None:
                yield TriggerEvent(payload)
