"""PySpark side: session defaults, the JDBC chunk read, the snapshot job, the binlog stream, the sinks.

Only this package (and ``spark_jobs/``) imports pyspark.
"""
