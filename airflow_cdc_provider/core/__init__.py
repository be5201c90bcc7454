"""The CDC algorithm in pure Python: no Airflow, no Spark, no database driver.

offsets      binlog positions and their total order across file rotation
keys         chunk-key values <-> JSON
chunks       chunk model, splitter (even and uneven paths), grouping into mapped tasks
records      the change record (one row change of one key)
normalize    folding the [LW, HW] binlog window onto a chunk's SELECTed rows
emit_filter  the stream's exactly-once filter over chunk high watermarks
"""
