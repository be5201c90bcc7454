"""StreamHeartbeatTrigger: watches a continuous stream job from the triggerer, so the stream task holds no
worker slot while the job runs for days."""

from __future__ import annotations

import asyncio
import time
from typing import Any, AsyncIterator

from airflow.triggers.base import BaseTrigger, TriggerEvent

from airflow_cdc_provider.hooks.spark_job import SparkJobHook
from airflow_cdc_provider.pipeline.metrics import StreamMeter
from airflow_cdc_provider.pipeline.stream_watch import ProgressLog, judge
from airflow_cdc_provider.state.records import StreamLaunch
from airflow_cdc_provider.state.store import StateStore


class StreamHeartbeatTrigger(BaseTrigger):
    """Fires once the stream ended (stopped on request / finished), failed, died, or its heartbeat stalled
    beyond ``heartbeat_timeout`` seconds; the event carries the verdict, a message, the last status and what
    the trigger's metrics counted (``meter``). While the stream runs it writes a progress line into the task's
    log per batch (at most one per 10 s, one a minute while idle) and sends the stream's metrics (``Stats``,
    tags ``dag_id`` and ``table``). When the user marks the deferred task failed or clears it, ``on_kill``
    stops the job gracefully.

    ``config`` (the pipeline YAML) lets the trigger ask the source how many binlog bytes the stream is behind;
    ``meter``: what the deferring task already counted of this launch."""

    def __init__(self, state_path: str, launch: dict[str, Any], heartbeat_timeout: float, poll_interval: float = 5.0,
                 config: str | None = None, dag_id: str | None = None, meter: dict[str, Any] | None = None):
        super().__init__()
        self.state_path = state_path
        self.launch = launch
        self.heartbeat_timeout = heartbeat_timeout
        self.poll_interval = poll_interval
        self.config = config
        self.dag_id = dag_id
        self.meter = meter

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (f"{type(self).__module__}.{type(self).__qualname__}",
                {"state_path": self.state_path, "launch": self.launch,
                 "heartbeat_timeout": self.heartbeat_timeout, "poll_interval": self.poll_interval,
                 "config": self.config, "dag_id": self.dag_id, "meter": self.meter})

    def _source(self):
        """The source's connection settings, resolved here (passwords never travel in a trigger's arguments)."""
        from airflow_cdc_provider.pipeline.resolve import load_pipeline

        if not self.config:
            return None
        try:
            return load_pipeline(self.config).source
        except Exception as exc:  # noqa: BLE001 - progress and metrics go on without the bytes behind
            self.log.warning("binlog bytes behind not measured: the source of %s does not resolve here: %s",
                             self.config, exc)
            return None

    async def run(self) -> AsyncIterator[TriggerEvent]:
        from airflow_cdc_provider.operators.metrics import emit, stream_progress

        store = StateStore(self.state_path)
        launch = StreamLaunch.from_dict(self.launch)
        progress, meter = ProgressLog(), StreamMeter.from_dict(self.meter)
        source = await asyncio.to_thread(self._source)
        while True:
            status = await asyncio.to_thread(store.read_status)
            alive = await asyncio.to_thread(SparkJobHook.alive, launch)  # a REST call for a cluster driver
            health = judge(status, launch, now=time.time(), heartbeat_timeout=self.heartbeat_timeout, alive=alive)
            if health.status is not None and not health.final:
                line, metrics = await asyncio.to_thread(stream_progress, progress, meter, health.status, time.time(),
                                                        source)
                if line:  # the triggerer writes it into the deferred task's log
                    self.log.info(line)
                if self.dag_id:
                    emit(metrics, self.dag_id)
            if health.final:
                yield TriggerEvent({**health.to_dict(), "meter": meter.to_dict(), "launch": self.launch})
                return
            await asyncio.sleep(self.poll_interval)

    async def on_kill(self) -> None:
        StateStore(self.state_path).request_stop()  # a cluster-mode driver stops on this between batches
        SparkJobHook.signal_stop(StreamLaunch.from_dict(self.launch))
