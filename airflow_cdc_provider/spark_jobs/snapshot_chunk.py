"""spark-submit application: watermark snapshot of the chunk(s) named in ``--spec`` (see spark/snapshot.py)."""

from airflow_cdc_provider.spark.jobs import run_driver, snapshot_main

if __name__ == "__main__":
    run_driver(snapshot_main)
