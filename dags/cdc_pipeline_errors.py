"""Airflow DAG file that holds no DAG: its import fails, with one error naming each pipeline YAML in
$AIRFLOW_CDC_PIPELINES that cdc_pipelines.py could not load (file, key, how to fix), so broken pipeline
files show up in the UI's import errors. Copy it into your dags folder next to cdc_pipelines.py."""

from pathlib import Path

from airflow_cdc_provider.dag_factory import pipelines_folder, raise_pipeline_errors

raise_pipeline_errors(pipelines_folder(Path(__file__).resolve().parent / "pipelines"))
