"""Airflow DAG loader for CDC pipelines: one DAG per YAML file in $AIRFLOW_CDC_PIPELINES (default: the
pipelines/ folder next to this file). Copy this file into your dags folder."""

from pathlib import Path

from airflow_cdc_provider.dag_factory import load_pipeline_dags, pipelines_folder

globals().update(load_pipeline_dags(pipelines_folder(Path(__file__).resolve().parent / "pipelines")))
