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
                    "airflow_cdc_provider.operators.maintenance",
                ],
            }
        ],
        "sensors": [{"integration-name": "MySQL CDC", "python-modules": ["airflow_cdc_provider.sensors.retention"]}],
        "hooks": [{"integration-name": "MySQL CDC", "python-modules": ["airflow_cdc_provider.hooks.mysql_cdc"]}],
        "triggers": [{"integration-name": "MySQL CDC", "python-modules": ["airflow_cdc_provider.triggers.stream"]}],
        "extra-links": ["airflow_cdc_provider.operators.links.SparkUILink"],
        # the source connection's own type, so the UI's form offers it (and its extras) without the MySQL
        # provider; a connection of type mysql works as well
        "connection-types": [
            {
                "connection-type": "mysql_cdc",
                "hook-class-name": "airflow_cdc_provider.hooks.mysql_cdc.MySqlCdcHook",
                "hook-name": "MySQL CDC",
                "ui-field-behaviour": {"relabeling": {"schema": "Database (optional)"},
                                       "placeholders": {"port": "3306", "login": "cdc"}},
                "conn-fields": {
                    "server_id_range": {"label": "Replica server ids", "description": "e.g. 5400-6400: one id per "
                                        "concurrent binlog reader; no other replica may use them",
                                        "schema": {"type": ["string", "null"]}},
                    "ssl_ca": {"label": "TLS CA file", "schema": {"type": ["string", "null"]}},
                    "ssl_cert": {"label": "TLS client certificate file", "schema": {"type": ["string", "null"]}},
                    "ssl_key": {"label": "TLS client key file", "schema": {"type": ["string", "null"]}},
                    "charset": {"label": "Charset", "schema": {"type": ["string", "null"], "default": "utf8mb4"}},
                    "connect_timeout": {"label": "Connect timeout (s)", "schema": {"type": ["integer", "null"],
                                                                                   "default": 30}},
                },
            }
        ],
    }
