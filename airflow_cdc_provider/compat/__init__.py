"""The third-party internals the provider relies on, one adapter module per library, nowhere else.

replication       python-mysql-replication (and PyMySQL): packet reading, the packet wrapper, connect steps
spark_provider    apache-airflow-providers-apache-spark: the spark-submit hook's command, env and driver id
pyspark_internals PySpark: accumulator server, Connect plan text, Arrow conversion, the driver JVM gateway
versions          the version check each adapter runs before its library's internals are first used
"""
