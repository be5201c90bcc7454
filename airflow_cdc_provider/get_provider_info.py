"""Provider registration (entry point ``apache_airflow_provider``). ``package-name`` must equal the
canonical distribution name, or Airflow's provider discovery raises."""

from __future__ import annotations

from airflow_cdc_provider import __version__


def get_provider_info() -> dict:
    return {
        "package-name": "airflow-cdc-provider",
        "name": "MySQL CDC (Spark)",
        "description": "Lock-free, exactly-once MySQL/MariaDB change data capture, run by Spark.",
        "versions": [__version__],
        "integrations": [
            {
                "integration-name": "MySQL CDC",
                "external-doc-url": "https://github.com/airflow-cdc-provider/airflow-cdc-provider",
                "tags": ["software"],
            }
        ],
        "operators": [
            {
                "integration-name": "MySQL CDC",
                "python-modules": [
                    "airflow_cdc_provider.operators.plan",
                    "airflow_cdc_provider.operators.snapshot",
                    "airflow_cdc_provider.operators.collect",
                    "airflow_cdc_provider.operators.stream",
                ],
            }
        ],
        "sensors": [{"integration-name": "MySQL CDC", "python-modules": ["airflow_cdc_provider.sensors.retention"]}],
        "hooks": [{"integration-name": "MySQL CDC", "python-modules": ["airflow_cdc_provider.hooks.mysql_cdc"]}],
        "triggers": [{"integration-name": "MySQL CDC", "python-modules": ["airflow_cdc_provider.triggers.stream"]}],
        "extra-links": ["airflow_cdc_provider.operators.links.SparkUILink"],
    }
