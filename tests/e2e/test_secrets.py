"""Secrets: a full DAG run (snapshot chunks + stream, parquet and jdbc sinks) leaves the source and
sink passwords in no process argv (sampled with ps while it runs), no log, no XCom, no file other tasks or
users could read (state store, specs, Airflow's DB, Spark event logs = what the Spark UI's Environment tab
shows), and leaves no secrets file behind."""

from __future__ import annotations

import json
import subprocess
import threading
from pathlib import Path

from airflow_cdc_provider.testing.airflow_run import run_dag

from .cdc_helpers import write_pipeline


class ArgvSampler:
    """Every process's argv, sampled with ``ps`` until stopped; and the secrets files seen in ``tmp`` meanwhile."""

    def __init__(self, tmp: Path) -> None:
        self.samples: list[str] = []
        self.secrets_files: set[Path] = set()
        self._tmp = tmp
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(0.3):
            self.samples.append(subprocess.run(["ps", "-eww", "-o", "args="], capture_output=True, text=True).stdout)
            self.secrets_files.update(self._tmp.glob("airflow-cdc-secrets-*"))

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join(10)


def test_passwords_leak_nowhere(airflow_home, source_db, postgres, tmp_path):
    env, dags, pipelines = airflow_home
    source_db.execute("CREATE TABLE orders (id INT PRIMARY KEY, v INT NOT NULL, note VARCHAR(20))")
    source_db.executemany("INSERT INTO orders VALUES (%s, %s, 'init')", [(i, i) for i in range(1, 3001)])
    events = tmp_path / "spark-events"
    events.mkdir()
    sink = (f"sink:\n  type: jdbc\n  conn_id: pg\n  schema: s_{source_db.name}\n")
    write_pipeline(pipelines, source_db, tmp_path, tables=("orders",), sink=sink,
                   extra=f"spark:\n  conf:\n    spark.eventLog.enabled: 'true'\n    spark.eventLog.dir: file://{events}\n"
                                 "    spark.eventLog.compress: 'false'\n")
    # the runs' own temporary directory: another test worker's jobs have their secrets files in /tmp meanwhile
    private_tmp = tmp_path / "tmp"
    private_tmp.mkdir()
    env = {**env, "AIRFLOW_CONN_PG": postgres.connection_uri(), "TMPDIR": str(private_tmp)}
    secrets = {"source": source_db.server.cdc.password, "sink": postgres.password}

    with ArgvSampler(private_tmp) as ps:
        result = run_dag(env, dags, "shop_cdc", log_file=tmp_path / "run.log")
        source_db.execute("UPDATE orders SET note = 'x' WHERE id <= 10")
        result2 = run_dag(env, dags, "shop_cdc", log_file=tmp_path / "run2.log")
    assert result["state"] == result2["state"] == "success", result
    assert len(ps.samples) > 20 and any("spark-submit" in s or "SparkSubmit" in s for s in ps.samples)

    for name, secret in secrets.items():
        assert not any(secret in s for s in ps.samples), f"{name} password in a process argv"
        assert secret not in json.dumps([result["xcom"], result2["xcom"]], default=str), f"{name} password in XCom"
        leaked = [str(p) for p in tmp_path.rglob("*") if p.is_file() and secret.encode() in p.read_bytes()]
        assert leaked == [], f"{name} password written to {leaked}"
    event_logs = [p for p in events.rglob("*") if p.is_file()]  # Spark 4 writes a directory per application
    assert event_logs and any(b"SparkListenerEnvironmentUpdate" in p.read_bytes() for p in event_logs)
    assert (tmp_path / "state" / "specs").exists() or list((tmp_path / "state").rglob("*.json"))
    assert ps.secrets_files, "the jobs' secrets files were not where TMPDIR puts them"
    assert list(private_tmp.glob("airflow-cdc-secrets-*")) == [], "a secrets file was left behind"
