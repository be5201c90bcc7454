"""Baseline: what a user would run instead of us: one spark-submit that reads a table over JDBC with 2
partitions on the primary key and writes Parquet. Usage: plain_jdbc_reload.py URL TABLE[,TABLE...] LO HI OUT
(several tables: one after the other in the same application, each into OUT/TABLE; the password comes from
BENCH_PASSWORD, user from BENCH_USER). Run with plain Python and SPARK_REMOTE set,
the same job runs as a client of that Spark Connect server."""

import os
import sys

from pyspark.sql import SparkSession

url, tables, lo, hi, out = sys.argv[1:6]
spark = SparkSession.builder.appName("plain-jdbc-reload").config("spark.sql.readSideCharPadding", "false").getOrCreate()
for table in tables.split(","):
    df = spark.read.jdbc(url, table, column="id", lowerBound=int(lo), upperBound=int(hi) + 1, numPartitions=2,
                         properties={"user": os.environ["BENCH_USER"], "password": os.environ["BENCH_PASSWORD"],
                                     "driver": "org.mariadb.jdbc.Driver", "fetchsize": "10000"})
    df.write.mode("overwrite").parquet(os.path.join(out, table))
spark.stop()
