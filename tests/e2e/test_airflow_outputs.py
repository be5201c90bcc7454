"""What the generated DAG gives Airflow besides the sink: asset events per sink table, metrics through Airflow's
Stats, OpenLineage events (to a file transport), a continuous stream's progress in the task log, and first-run
logs free of spurious errors. One run (snapshot, then a continuous stream that follows a change until stopped),
several checks on it."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from airflow_cdc_provider.hooks.spark_job import SparkJobHook
from airflow_cdc_provider.operators.assets import table_asset
from airflow_cdc_provider.state.store import StateStore
from airflow_cdc_provider.testing.airflow_run import BackgroundDagRun

from .cdc_helpers import parquet_sink, sink_rows, source_rows, stream_state, table_types, wait_until, write_pipeline
from .test_spark_jobs import make_orders

CLI = str(Path(sys.executable).parent / "airflow-cdc")


class MetricsReceiver:
    """An OTLP/HTTP metrics endpoint: the last value of every data point Airflow's metrics exporter sends, by
    ``(metric name, attributes)`` (counters arrive cumulative)."""

    def __init__(self) -> None:
        from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2

        values: dict[tuple[str, tuple], float] = {}
        lock = threading.Lock()

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                body = self.rfile.read(int(self.headers["Content-Length"]))
                request = metrics_service_pb2.ExportMetricsServiceRequest.FromString(body)
                with lock:
                    for rm in request.resource_metrics:
                        for sm in rm.scope_metrics:
                            for m in sm.metrics:
                                kind = m.WhichOneof("data")
                                if kind not in ("sum", "gauge"):  # Airflow's own timings: histograms
                                    continue
                                for p in getattr(m, kind).data_points:
                                    attrs = tuple(sorted((a.key, a.value.string_value) for a in p.attributes))
                                    value = p.as_int if p.WhichOneof("value") == "as_int" else p.as_double
                                    values[m.name, attrs] = value
                reply = metrics_service_pb2.ExportMetricsServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)

            def log_message(self, *args) -> None:
                pass

        self.values, self._lock = values, lock
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.endpoint = f"http://127.0.0.1:{self.server.server_address[1]}/v1/metrics"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def get(self, name: str, **attrs: str) -> float | None:
        with self._lock:
            return self.values.get((f"airflow.airflow_cdc.{name}", tuple(sorted(attrs.items()))))

    def close(self) -> None:
        self.server.shutdown()


@pytest.fixture
def metrics():
    receiver = MetricsReceiver()
    yield receiver
    receiver.close()


def asset_events(airflow_home: Path) -> list[dict]:
    with sqlite3.connect(airflow_home / "airflow.db") as db:
        rows = db.execute("SELECT a.uri, e.source_task_id, e.extra FROM asset_event e JOIN asset a ON a.id = e.asset_id "
                          "ORDER BY e.id").fetchall()
    return [{"uri": uri, "task_id": task_id, "extra": json.loads(extra)} for uri, task_id, extra in rows]


def test_assets_metrics_progress_and_quiet_logs_of_a_run(airflow_home, source_db, tmp_path, spark, metrics):
    env, dags, pipelines = airflow_home
    make_orders(source_db, 300)
    config = write_pipeline(pipelines, source_db, tmp_path, tables=("orders",),
                            extra="stream:\n  mode: continuous\n  trigger_interval: 1 second\n  heartbeat_timeout: 60\n")
    # the source connection as a UI user creates it, in the metadata database (not an AIRFLOW_CONN_ variable):
    # the tasks and the triggerer resolve it through the Task SDK, which they must
    uri = env.pop("AIRFLOW_CONN_SRC")
    add = subprocess.run([sys.executable, "-m", "airflow", "connections", "add", "src", "--conn-uri", uri], env=env,
                         capture_output=True, text=True, timeout=300)
    assert add.returncode == 0, add.stdout + add.stderr
    lineage = tmp_path / "openlineage.jsonl"
    env = {**env, "AIRFLOW__METRICS__OTEL_ON": "True", "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT": metrics.endpoint,
           "OTEL_METRIC_EXPORT_INTERVAL": "500",
           "AIRFLOW__OPENLINEAGE__TRANSPORT": json.dumps({"type": "file", "log_file_path": str(lineage),
                                                          "append": True}),
           "AIRFLOW__OPENLINEAGE__NAMESPACE": "cdc_test",
           "AIRFLOW__OPENLINEAGE__EXECUTE_IN_THREAD": "True"}  # dag.test(): the events of the task's own process
    table = source_db.table("orders")
    tags = {"dag_id": "shop_cdc", "table": table}
    state = StateStore(tmp_path / "state")
    log_file = tmp_path / "run.log"
    run = BackgroundDagRun(env, dags, "shop_cdc", log_file)
    try:
        wait_until(lambda: stream_state(state) == "running", "the stream task's job to run", 600)
        source_db.execute("UPDATE orders SET note = 'live' WHERE id <= 20")
        wait_until(lambda: sink_rows(spark, parquet_sink(tmp_path), {}, table_types(source_db, "orders"))
                   == source_rows(source_db, "orders"), "the live changes to reach the sink", 120)
        # while the stream runs: its progress in the task log, its metrics sent from the trigger
        progress = wait_until(lambda: [line for line in log_file.read_text(errors="replace").splitlines()
                                       if "stream running:" in line and "20 row(s) emitted" in line],
                              "a progress line of the running stream with the change's rows", 120)
        assert "binlog bytes behind" in progress[-1] and "lag" in progress[-1] and ":" in progress[-1], progress
        wait_until(lambda: metrics.get("stream.rows", **tags) == 20, "the stream's rows metric", 120)
        live_behind = wait_until(lambda: metrics.get("stream.binlog_bytes_behind", dag_id="shop_cdc") is not None,
                                 "the stream's binlog bytes behind metric", 120)
        stop = subprocess.run([CLI, "stop", str(config), "--wait", "120"], env=env, capture_output=True, text=True)
        assert stop.returncode == 0, stop.stdout + stop.stderr
        result = run.result(300)
    finally:
        run.kill()
        launch = state.read_launch()
        if launch is not None:  # a failed test leaves no stream job behind
            SparkJobHook.terminate(launch, grace_seconds=0)
    assert result["state"] == "success", result
    assert live_behind
    log = log_file.read_text(errors="replace")

    # a first run logs no "XCom not found" (the collect step's pull, the stream's Spark UI link)
    assert "XCom not found" not in log, [line for line in log.splitlines() if "XCom not found" in line][:5]
    chunks = [t for t in result["tis"] if t["task_id"] == "snapshot_chunk"]
    assert [t["label"] for t in chunks] == [f"{table} (whole table)"], chunks

    # asset events: the snapshot (when collect made it current) and the stream's rows, on the table's Asset
    uri = f"file://{tmp_path}/sink/{table}"
    assert table_asset(str(config), table).uri == uri
    events = asset_events(Path(env["AIRFLOW_HOME"]))
    assert [(e["uri"], e["task_id"], e["extra"]["kind"], e["extra"]["rows"]) for e in events] == [
        (uri, "collect_watermarks", "snapshot", 300), (uri, "stream", "stream", 20)], events

    # metrics through Stats, tagged by DAG and table, with the values the jobs reported
    assert metrics.get("snapshot.rows", **tags) == 300
    assert metrics.get("snapshot.chunks", **tags) == 1
    assert metrics.get("stream.rows", **tags) == 20
    assert metrics.get("stream.batches", dag_id="shop_cdc") >= 1
    assert 0 <= metrics.get("stream.lag_seconds", dag_id="shop_cdc") < 600
    assert 0 <= metrics.get("stream.binlog_bytes_behind", dag_id="shop_cdc") < 64 * 2**20

    # the airflow-cdc command on a machine of the deployment reads the same connection from the metadata database
    plan = subprocess.run([CLI, "plan", str(config), "--json"], env=env, capture_output=True, text=True, timeout=300)
    assert plan.returncode == 0 and plan.stdout.startswith("{"), plan.stdout[:3000] + plan.stderr[-3000:]
    assert [t["table"] for t in json.loads(plan.stdout)["tables"]] == [table]
    assert json.loads(plan.stdout)["snapshotted"] == [table]  # its chunks are what a resnapshot would read

    # materialize: the table's current state as plain parquet files any reader takes, written again over its own
    # output (a marker says it wrote it), compared with MariaDB row by row through pyarrow
    import pyarrow.parquet as pq

    out, expected = tmp_path / "materialized", source_rows(source_db, "orders")
    for _ in range(2):
        res = subprocess.run([CLI, "materialize", str(config), "--table", table, "--output", str(out)], env=env,
                             capture_output=True, text=True, timeout=300)
        assert res.returncode == 0 and f"{table}: {len(expected)} rows written to {out}" in res.stdout, \
            res.stdout + res.stderr
    types = table_types(source_db, "orders")
    keys = [types.schema.column_names.index(k) for k in types.schema.key_columns]
    read = [tuple(r.values()) for r in pq.read_table(out).to_pylist()]
    assert {tuple(r[i] for i in keys): r for r in read} == expected and len(read) == len(expected)
    assert json.loads((out / "_MATERIALIZED").read_text()) == {"table": table, "rows": len(expected)}

    # OpenLineage: each task that wrote the table names the MySQL table as its input and the sink table as its
    # output, with the columns of both and the trivial column lineage; no secret in any event
    events = [json.loads(line) for line in lineage.read_text().splitlines() if line.strip()]
    assert source_db.server.cdc.password not in lineage.read_text()
    complete = {e["job"]["name"]: e for e in events if e["eventType"] == "COMPLETE" and e.get("outputs")}
    assert set(complete) == {f"shop_cdc.{t}" for t in ("snapshot_chunk", "collect_watermarks", "stream")}, \
        sorted({(e["eventType"], e["job"]["name"]) for e in events})
    settings = source_db.settings
    for name, event in complete.items():
        assert event["job"]["namespace"] == "cdc_test"
        (source,) = event["inputs"]
        assert (source["namespace"], source["name"]) == (f"mysql://{settings.host}:{settings.port}", table), name
        assert [f["name"] for f in source["facets"]["schema"]["fields"]] == ["id", "v", "note"]
        (sink,) = event["outputs"]
        assert (sink["namespace"], sink["name"]) == ("file", f"{tmp_path}/sink/{table}"), name
        columns = [f["name"] for f in sink["facets"]["schema"]["fields"]]
        assert columns[:3] == ["id", "v", "note"] and "_cdc_op" in columns, columns
        fed = sink["facets"]["columnLineage"]["fields"]["note"]["inputFields"]
        assert [(f["namespace"], f["name"], f["field"]) for f in fed] == [(source["namespace"], table, "note")]
    assert complete["shop_cdc.snapshot_chunk"]["outputs"][0]["outputFacets"]["outputStatistics"]["rowCount"] == 300
    assert complete["shop_cdc.stream"]["outputs"][0]["outputFacets"]["outputStatistics"]["rowCount"] == 20
