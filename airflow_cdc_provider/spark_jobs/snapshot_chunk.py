"""spark-submit application: watermark snapshot of the chunk(s) named in ``--spec`` (see spark/snapshot.py)."""

import sys

from airflow_cdc_provider.spark.jobs import snapshot_main

if __name__ == "__main__":
    sys.exit(snapshot_main())
