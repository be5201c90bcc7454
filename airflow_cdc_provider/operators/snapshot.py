"""SnapshotChunkOperator: one mapped task = one Spark application reading one chunk (or a group), or, with
``connect_conn_id``, one session on a long-lived Spark Connect server (no spark-submit, no JVM start)."""

from __future__ import annotations

from typing import Any, Sequence

from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator

from airflow_cdc_provider.operators.frozen_heap import with_frozen_heap
from airflow_cdc_provider.operators.spark_submit import CdcSparkSubmitOperator
from airflow_cdc_provider.pipeline.resolve import load_pipeline

CHUNK_LABEL_TEMPLATE = "{{ chunk_label }}"
"""Pass as ``map_index_template`` in ``.partial()``: the UI then names each mapped task ``db.t [a, b)``."""


class SnapshotChunkOperator(CdcSparkSubmitOperator):
    """Submit ``snapshot_chunk.py`` for ``chunk`` (an item of PlanChunksOperator's output) and return its
    chunk report(s), read back from the state store (spark-submit prints nothing usable in cluster mode).

    Accepts every ``SparkSubmitOperator`` argument (``conn_id``, ``conf``, ``jars``, ``py_files``,
    ``executor_memory``, ``env_vars``, ...). ``durable`` defaults to False: a retried or cleared chunk must
    read its range again (a new LW/HW), never reuse an earlier attempt's job. Secrets travel in a 0600 file
    named by the environment, never on the command line.

    ``connect_conn_id`` (an Airflow ``spark_connect`` connection; opt-in) runs the same job in this task's
    process as a client of that server: the job's driver code (watermarks, binlog window) runs here, the
    JDBC read and the sink writes on the server's executors. A task then costs its Spark work plus ~0.2 s
    (0.6-0.8 s if the task imports the Connect client itself: see ``worker_preload``), instead of a
    spark-submit (JVM start and session, 2.4-3.8 s on 2 cores with our start-up aids). ``conf`` keys
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
        super().__init__(**kwargs)
        self.config = config
        self.chunk = chunk
        self.connect_conn_id = connect_conn_id
        self._connect_session = None

    @with_frozen_heap
    def execute(self, context: Any) -> list[dict[str, Any]]:
        if not self.chunk or not self.chunk.get("chunks"):
            raise ValueError("SnapshotChunkOperator needs chunk={'label', 'chunks': [...]} from PlanChunksOperator")
        context["chunk_label"] = self.chunk["label"]  # map_index_template: 'db.t [a, b)' in the UI
        p = load_pipeline(self.config)
        chunks = self.chunk["chunks"]
        tables = list(dict.fromkeys(c["table"] for c in chunks))  # several whole small tables may share a task
        ti = context["ti"]
        spec = p.job_spec(server_id=p.server_id(max(ti.map_index, 0)),
                          tables={t: {"chunk_key": p.config.source.chunk_key.get(t)} for t in tables}, chunks=chunks)
        by_table_epoch: dict[tuple[str, int], list[int]] = {}  # (table, epoch) -> chunk indexes
        for c in chunks:
            by_table_epoch.setdefault((c["table"], int(c["epoch"])), []).append(int(c["index"]))
        for (table, epoch), indexes in by_table_epoch.items():  # no earlier attempt's report is taken for this one's
            p.state.clear_chunk_reports(table, epoch, indexes)
        if self.connect_conn_id:
            self.run_on_connect(p, spec)
        else:
            name = f"{ti.dag_id}__{ti.run_id}__{ti.map_index}__{ti.try_number}.json".replace(":", "_").replace("+", "_")
            self.configure_job(p, p.state.write_spec(name, spec.to_json()))
            self.submit(context)
        stored = {k: p.state.chunk_reports(*k) for k in by_table_epoch}
        missing = [c["split_id"] for c in chunks if int(c["index"]) not in stored[c["table"], int(c["epoch"])]]
        if missing:
            raise RuntimeError(f"the Spark job ended without a report for chunk(s) {', '.join(missing[:10])}; see its "
                               "log above")
        reports = [stored[c["table"], int(c["epoch"])][int(c["index"])] for c in chunks]
        self.log.info("%s: %d rows, %d window changes applied", self.chunk["label"],
                      sum(r["rows"] for r in reports), sum(r["window_events_applied"] for r in reports))
        return reports

    def run_on_connect(self, pipeline, spec) -> None:
        """The chunk job in this process, on a new session of the ``connect_conn_id`` server."""
        from airflow_cdc_provider.operators._connect import job_session
        from airflow_cdc_provider.spark.snapshot import run_snapshot

        # the jdbc sink writes from the executors' Python: they import this package from the session
        with job_session(self, pipeline, pipeline.sink.type == "jdbc", "chunk job") as spark:
            run_snapshot(spark, spec, pipeline.secrets)

    def on_kill(self) -> None:
        from airflow_cdc_provider.operators._connect import interrupt

        if not interrupt(self):  # on Connect the server stops the session's jobs; execute() then ends it
            super().on_kill()
