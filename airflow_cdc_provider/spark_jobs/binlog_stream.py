"""spark-submit application: the streaming binlog job described by ``--spec`` (see spark/stream.py)."""

from airflow_cdc_provider.spark.jobs import run_driver, stream_main

if __name__ == "__main__":
    run_driver(stream_main)
