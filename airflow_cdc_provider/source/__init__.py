"""The MySQL/MariaDB source: settings, validation, discovery, watermarks, chunk queries, binlog reading.

settings       connection settings from an Airflow mysql connection (URI or JSON), no Airflow import
sql            identifier quoting and key-range predicates
server         flavor/version, binlog status statement, current offset
schema         table discovery (names, globs, regexes) and table metadata, chunk key choice
validation     fail-fast checks of server settings, privileges and tables
chunk_queries  the database side of the chunk splitter
key_order      the database's key order (collations) usable from Python
values         canonical column values shared by SELECT and binlog paths
binlog         bounded/unbounded row-change reading with python-mysql-replication
chunk_reader   the in-process lock-free chunk read (reference for the Spark job)
planner        validate + split the configured tables into a chunk plan
"""
