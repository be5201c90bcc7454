"""spark-submit application: the streaming binlog job described by ``--spec`` (see spark/stream.py)."""

import sys

from airflow_cdc_provider.spark.jobs import stream_main

if __name__ == "__main__":
    sys.exit(stream_main())
