"""StreamHeartbeatTrigger: watches a continuous stream job from the triggerer, so the stream task holds no
worker slot while the job runs for days."""

from __future__ import annotations

import asyncio
import time
from typing import Any, AsyncIterator

from airflow.triggers.base import BaseTrigger, TriggerEvent

from airflow_cdc_provider.hooks.spark_job import SparkJobHook
from airflow_cdc_provider.pipeline.stream_watch import ProgressLog, judge
from airflow_cdc_provider.state.records import StreamLaunch
from airflow_cdc_provider.state.store import StateStore


class StreamHeartbeatTrigger(BaseTrigger):
    """Fires once the stream ended (stopped on request / finished), failed, died, or its heartbeat stalled
    beyond ``heartbeat_timeout`` seconds; the event carries the verdict, a message and the last status.
    When the user marks the deferred task failed or clears it, ``on_kill`` stops the job gracefully."""

    def __init__(self, state_path: str, launch: dict[str, Any], heartbeat_timeout: float, poll_interval: float = 5.0):
        super().__init__()
        self.state_path = state_path
        self.launch = launch
        self.heartbeat_timeout = heartbeat_timeout
        self.poll_interval = poll_interval

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (f"{type(self).__module__}.{type(self).__qualname__}",
                {"state_path": self.state_path, "launch": self.launch,
                 "heartbeat_timeout": self.heartbeat_timeout, "poll_interval": self.poll_interval})

    async def run(self) -> AsyncIterator[TriggerEvent]:
        store = StateStore(self.state_path)
        launch = StreamLaunch.from_dict(self.launch)
        progress = ProgressLog()
        while True:
            status = await asyncio.to_thread(store.read_status)
            alive = await asyncio.to_thread(SparkJobHook.alive, launch)  # a REST call for a cluster driver
            health = judge(status, launch, now=time.time(), heartbeat_timeout=self.heartbeat_timeout, alive=alive)
            line = progress.line(health.status, time.time())
            if line:  # the triggerer writes it into the deferred task's log
                self.log.info(line)
            if health.final:
                yield TriggerEvent(health.to_dict())
                return
            await asyncio.sleep(self.poll_interval)

    async def on_kill(self) -> None:
        StateStore(self.state_path).request_stop()  # a cluster-mode driver stops on this between batches
        SparkJobHook.signal_stop(StreamLaunch.from_dict(self.launch))
