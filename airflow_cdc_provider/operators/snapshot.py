"""SnapshotChunkOperator: one mapped task = one Spark application reading one chunk (or a group), or, with
``connect_conn_id``, one session on a long-lived Spark Connect server (no spark-submit, no JVM start)."""

from __future__ import annotations

from typing import Any, Sequence

from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator

from airflow_cdc_provider.core.chunks import ChunkTask
from airflow_cdc_provider.operators.frozen_heap import with_frozen_heap
from airflow_cdc_provider.operators.lineage import CdcLineageMixin
from airflow_cdc_provider.operators.metrics import emit
from airflow_cdc_provider.operators.spark_submit import CdcSparkSubmitOperator
from airflow_cdc_provider.pipeline.metrics import snapshot_metrics
from airflow_cdc_provider.pipeline.resolve import load_pipeline
from airflow_cdc_provider.state.store import planned_before_uncapture

# A chunk task planned at up to this many rows runs its driver with the client compiler only (``CLIENT_JIT``) on a
# local master: its JVM ends before the optimizing compiler's work on the shared cores pays back, while a larger
# window reads and writes enough rows to gain from it (docs/performance.md)
CLIENT_JIT_MAX_ROWS = 2_000_000

CHUNK_LABEL_TEMPLATE = "{{ task.chunk.label }}"
"""Pass as ``map_index_template`` in ``.partial()``: the UI then names each mapped task ``db.t [a, b)`` from the
task's start on (Airflow renders it when the task starts and again when it ends; ``{{ chunk_label }}``, set by
``execute``, works too, but only once the task has ended)."""


def small_task(task: ChunkTask, chunk_size: int) -> bool:
    """Whether ``task`` is planned at most ``CLIENT_JIT_MAX_ROWS`` rows (``chunk_size`` a chunk: an upper bound,
    keys may be sparse), so that its job starts sooner with the client compiler only."""
    return len(task.chunks) * chunk_size <= CLIENT_JIT_MAX_ROWS


def chunks_to_read(task: ChunkTask, state) -> tuple[ChunkTask, list[str]]:
    """The chunks of ``task`` still to read, and why the others are not: a table whose later snapshot finished
    (this chunk of an earlier one has nothing to add) or that was taken out of the pipeline after this snapshot
    was planned (``airflow-cdc uncapture``: reading it would bring its sink back). A task of several small
    tables reads those left."""
    uncaptured = state.uncaptured_tables()
    left, why = [], {}
    for c in task.chunks:
        table = str(c.table)
        finished = state.finished_snapshot(table)
        if planned_before_uncapture(c.epoch, uncaptured.get(table)):
            why[table] = (f"{table} taken out of the pipeline (airflow-cdc uncapture) after this snapshot was "
                          "planned: nothing to read")
        elif finished is not None and finished.epoch > c.epoch:
            why[table] = (f"a later snapshot of {table} finished (epoch {finished.epoch}): this chunk of an earlier "
                          'one has nothing to add. To read a table again, trigger a run with {"resnapshot": '
                          '["db.table"]}')
        else:
            left.append(c)
    return ChunkTask(left), list(why.values())


class SnapshotChunkOperator(CdcLineageMixin, CdcSparkSubmitOperator):
    """Submit ``snapshot_chunk.py`` for ``chunk`` (an item of PlanChunksOperator's output) and return its
    chunk report(s), read back from the state store (spark-submit prints nothing usable in cluster mode).

    Accepts every ``SparkSubmitOperator`` argument (``conn_id``, ``conf``, ``jars``, ``py_files``,
    ``executor_memory``, ``env_vars``, ...). ``durable`` defaults to False: a retried or cleared chunk must
    read its range again (a new LW/HW), never reuse an earlier attempt's job. Secrets travel in a 0600 file
    named by the environment, never on the command line.

    ``connect_conn_id`` (an Airflow ``spark_connect`` connection; opt-in) runs the same job in this task's
    process as a client of that server: the job's driver code (watermarks, binlog window) runs here, the
    JDBC read and the sink writes on the server's executors. A task then costs its Spark work plus a session's
    set-up (and the Connect client's import, unless the worker preloaded it: see ``worker_preload``), instead of
    a spark-submit's JVM start and session (docs/performance.md). ``conf`` keys
    ``spark.sql.*`` (runtime ones) become session settings; the rest of the Spark settings are the server's.
    The server must reach the source, the sink and the state path; passwords are redacted from its UI and
    event log.
    """

    template_fields: Sequence[str] = (*SparkSubmitOperator.template_fields, "config", "connect_conn_id")
    ui_color = "#fdf2e8"
    job = "snapshot_chunk"
    batch_job = True

    def __init__(self, *, config: str, chunk: dict[str, Any] | None = None, connect_conn_id: str | None = None,
                 **kwargs: Any) -> None:
        kwargs.setdefault("durable", False)
        kwargs.setdefault("map_index_template", CHUNK_LABEL_TEMPLATE)
        kwargs.setdefault("name", "airflow-cdc-snapshot")
        super().__init__(connect_conn_id=connect_conn_id, **kwargs)
        self.config = config
        self.chunk = chunk

    @with_frozen_heap
    def execute(self, context: Any) -> list[dict[str, Any]]:
        if not self.chunk or not self.chunk.get("chunks"):
            raise ValueError("SnapshotChunkOperator needs chunk={'label', 'chunks': [...]} from PlanChunksOperator")
        task = ChunkTask.from_dict(self.chunk)
        label = task.label
        context["chunk_label"] = label  # map_index_template: 'db.t [a, b)' in the UI
        p = load_pipeline(self.config)
        ti = context["ti"]
        task, left_out = chunks_to_read(task, p.state)
        if not task.chunks:
            from airflow.sdk.exceptions import AirflowSkipException

            raise AirflowSkipException(f"{label}: {'; '.join(left_out)}")
        for why in left_out:
            self.log.warning("%s: %s", label, why)
        spec = p.job_spec(server_id=p.server_id(max(ti.map_index, 0)), tables=map(str, task.tables),
                          chunks=task.chunks)
        by_table_epoch: dict[tuple[str, int], list[int]] = {}  # (table, epoch) -> chunk indexes
        for c in task.chunks:
            by_table_epoch.setdefault((str(c.table), c.epoch), []).append(c.index)
        for (table, epoch), indexes in by_table_epoch.items():  # no earlier attempt's report is taken for this one's
            p.state.clear_chunk_reports(table, epoch, indexes)
        if self.connect_conn_id:
            self.run_on_connect(p, spec)
        else:
            name = f"{ti.dag_id}__{ti.run_id}__{ti.map_index}__{ti.try_number}.json".replace(":", "_").replace("+", "_")
            self.client_jit = small_task(task, p.config.snapshot.chunk_size)
            self.configure_job(p, p.state.write_spec(name, spec.to_json()))
            self.submit(context)
        stored = {k: p.state.chunk_reports(*k) for k in by_table_epoch}
        missing = [c.split_id for c in task.chunks if c.index not in stored[str(c.table), c.epoch]]
        if missing:
            raise RuntimeError(f"the Spark job ended without a report for chunk(s) {', '.join(missing[:10])}; see its "
                               "log above")
        reports = [stored[str(c.table), c.epoch][c.index] for c in task.chunks]
        self.log.info("%s: %d rows, %d window changes applied", task.label, sum(r.rows for r in reports),
                      sum(r.window_events_applied for r in reports))
        emit(snapshot_metrics(reports), ti.dag_id)
        return [r.to_dict() for r in reports]

    def run_on_connect(self, pipeline, spec) -> None:
        """The chunk job in this process, on a new session of the ``connect_conn_id`` server."""
        from airflow_cdc_provider.spark.snapshot import run_snapshot

        # a sink that writes from the executors' Python needs this package there: it goes with the session
        with self.connect_job(pipeline, pipeline.open_sink().writes_from_executors, "chunk job") as spark:
            run_snapshot(spark, spec, pipeline.secrets)
