"""Extra link on the stream task: the Spark UI of the running stream application."""

from __future__ import annotations

from airflow.sdk import BaseOperatorLink
from airflow.sdk.execution_time.xcom import XCom

SPARK_UI_XCOM_KEY = "spark_ui"


class SparkUILink(BaseOperatorLink):
    name = "Spark UI"

    def get_link(self, operator, *, ti_key) -> str:
        return XCom.get_value(ti_key=ti_key, key=SPARK_UI_XCOM_KEY) or ""
