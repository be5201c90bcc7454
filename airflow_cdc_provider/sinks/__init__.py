"""Sinks: where captured rows land, chosen by ``sink.type`` in the pipeline YAML.

base      the interface every sink implements, the metadata columns, ``SinkConfig``
registry  sink types by name (parquet, jdbc, delta, and any registered later)
types     how each MySQL column type is stored (Spark, Parquet, PostgreSQL)
parquet   the embedded default: per table snapshot epochs and a changelog of stream batches
parquet_arrow  a parquet table's current state with pyarrow alone
postgres  the jdbc sink: a PostgreSQL mirror table per source table, versioned upserts
delta     a Delta Lake table per source table (delta-rs), version-guarded MERGE, one transaction per batch
delta_maintenance  compaction and VACUUM of the delta sink's tables; ``sink.maintenance``
"""
