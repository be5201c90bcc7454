"""Extra link on the stream task: the Spark UI of the running stream application."""

from __future__ import annotations

from airflow.sdk import BaseOperatorLink
from airflow.sdk.execution_time.xcom import XCom

SPARK_UI_XCOM_KEY = "spark_ui"


class SparkUILink(BaseOperatorLink):
    name = "Spark UI"

    def get_link(self, operator, *, ti_key) -> str:
        # get_all answers "none" quietly; a single-value read of an absent key (a stream task that launched no
        # job) logs an "XCom not found" error in the task log
        values = XCom.get_all(key=SPARK_UI_XCOM_KEY, dag_id=ti_key.dag_id, task_id=ti_key.task_id,
                              run_id=ti_key.run_id)
        return (values[0] if values else None) or ""
