"""Airflow sensors of the CDC pipeline."""
