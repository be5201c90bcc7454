"""The pipeline's stages and what they hand each other, free of Airflow and Spark.

config        the pipeline YAML (typed sections, every error at once, JSON Schema)
connections   connection ids resolved the way Airflow resolves them
resolve       a YAML resolved into what the jobs need: source, sink, secrets, state store
jobspec       the job spec a Spark job reads, and how its secrets travel
plan          validate the source, split each table into chunks, group chunks into mapped tasks
chunk_window  the watermark read of consecutive chunks (LW, SELECT, HW, binlog window, fold)
collect       every chunk's report -> finished snapshots and the stream seed
stream_watch  is a launched stream healthy (heartbeat, final state, liveness)
faults        fault injection for the fault tests and soak runs
"""
