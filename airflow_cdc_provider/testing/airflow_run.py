"""Run a pipeline DAG with ``dag.test()`` in a fresh process and report what happened, as JSON.

    python -m airflow_cdc_provider.testing.airflow_run DAG_FOLDER DAG_ID [RUN_CONF_JSON]
    python -m airflow_cdc_provider.testing.airflow_run DAG_FOLDER --import-only

Airflow reads its configuration when first imported, so tests and the demo run DAGs in a child process with
their own ``AIRFLOW_HOME`` (see ``airflow_env``), after ``airflow db migrate``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

DAG_FILES = Path(__file__).resolve().parents[2] / "dags"


def install_dag_files(dags_folder: Path) -> None:
    """Copy the pipeline loader and its error reporter (``dags/*.py`` of this checkout) into a dags folder."""
    import shutil

    for f in ("cdc_pipelines.py", "cdc_pipeline_errors.py"):
        shutil.copy(DAG_FILES / f, Path(dags_folder) / f)


def install_worker_preload(config_dir: Path) -> Path:
    """``config_dir/airflow_local_settings.py`` importing ``worker_preload``, as the README tells Spark Connect
    users to do in ``$AIRFLOW_HOME/config``; any directory on an Airflow process's ``sys.path`` works."""
    config_dir.mkdir(parents=True, exist_ok=True)
    path = config_dir / "airflow_local_settings.py"
    path.write_text("import airflow_cdc_provider.worker_preload  # noqa: F401\n")
    return path


def airflow_env(home: Path, dags: Path, pipelines: Path, extra: dict[str, str] | None = None) -> dict[str, str]:
    env = dict(os.environ)
    env.update({
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__CORE__DAGS_FOLDER": str(dags),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__UNIT_TEST_MODE": "False",
        "AIRFLOW_CDC_PIPELINES": str(pipelines),
        "AIRFLOW_CONN_SPARK_DEFAULT": json.dumps({"conn_type": "spark", "host": "local[2]"}),
        "SPARK_LOCAL_IP": "127.0.0.1",
        "PYSPARK_PYTHON": sys.executable,
    })
    env.update(extra or {})
    return env


def migrate(env: dict[str, str]) -> None:
    airflow = str(Path(sys.executable).with_name("airflow"))
    res = subprocess.run([airflow, "db", "migrate"], env=env, capture_output=True, text=True, timeout=300)
    if res.returncode != 0:
        raise RuntimeError(f"airflow db migrate failed:\n{res.stdout[-3000:]}\n{res.stderr[-3000:]}")


def _command(dag_folder: Path, dag_id: str, conf: dict[str, Any] | None) -> list[str]:
    return [sys.executable, "-m", "airflow_cdc_provider.testing.airflow_run", str(dag_folder), dag_id, json.dumps(conf or {})]


def _result(returncode: int, stdout: str, stderr: str) -> dict[str, Any]:
    marker = [line for line in stdout.splitlines() if line.startswith("AIRFLOW_RUN_RESULT ")]
    if not marker:
        raise RuntimeError(f"dag run produced no result (exit {returncode}):\n{stdout[-4000:]}\n{stderr[-6000:]}")
    return json.loads(marker[-1][len("AIRFLOW_RUN_RESULT "):])


def run_dag(env: dict[str, str], dag_folder: Path, dag_id: str, conf: dict[str, Any] | None = None,
            timeout: float = 1200, log_file: Path | None = None) -> dict[str, Any]:
    res = subprocess.run(_command(dag_folder, dag_id, conf), env=env, capture_output=True, text=True, timeout=timeout)
    if log_file is not None:
        log_file.write_text(res.stdout + "\n" + res.stderr)
    return _result(res.returncode, res.stdout, res.stderr)


class BackgroundDagRun:
    """``run_dag`` in the background (for DAGs whose stream runs until stopped); ``result()`` waits for it."""

    def __init__(self, env: dict[str, str], dag_folder: Path, dag_id: str, log_file: Path,
                 conf: dict[str, Any] | None = None) -> None:
        self.log_file = log_file
        self._out = open(log_file, "w+")
        self.proc = subprocess.Popen(_command(dag_folder, dag_id, conf), env=env, stdout=self._out,
                                     stderr=subprocess.STDOUT, text=True)

    def result(self, timeout: float = 600) -> dict[str, Any]:
        rc = self.proc.wait(timeout)
        self._out.close()
        text = self.log_file.read_text()
        return _result(rc, text, "")

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self._out.close()


def _main(argv: list[str]) -> int:
    from airflow.dag_processing.dagbag import DagBag

    folder, dag_id = argv[0], argv[1]
    bag = DagBag(dag_folder=folder)
    if dag_id == "--import-only":
        out = {"import_errors": dict(bag.import_errors), "dags": sorted(bag.dags),
               "warnings": {k: list(v) for k, v in bag.captured_warnings.items()}}
        print("AIRFLOW_RUN_RESULT " + json.dumps(out))
        return 0
    conf = json.loads(argv[2]) if len(argv) > 2 else {}
    dag = bag.dags[dag_id]
    dr = dag.test(run_conf=conf)
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session

    tis = []
    with create_session() as session:
        for ti in dr.get_task_instances(session=session):
            tis.append({"task_id": ti.task_id, "map_index": ti.map_index, "state": str(ti.state),
                        "label": ti.rendered_map_index, "try_number": ti.try_number,
                        "start": ti.start_date.timestamp() if ti.start_date else None,
                        "end": ti.end_date.timestamp() if ti.end_date else None})
        rows = session.query(XComModel).filter(XComModel.dag_id == dag_id, XComModel.run_id == dr.run_id,
                                               XComModel.key == "return_value").all()
        xcoms = {f"{r.task_id}[{r.map_index}]": XComModel.deserialize_value(r) for r in rows}
    out = {"state": str(dr.state), "run_id": dr.run_id, "tis": tis, "xcom": xcoms}
    print("AIRFLOW_RUN_RESULT " + json.dumps(out, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
