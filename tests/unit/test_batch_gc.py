"""A chunk job's driver on a local master runs with the throughput collector, unless the user's
``spark.driver.extraJavaOptions`` picks a collector: theirs is kept and ours not added."""

import pytest

from airflow_cdc_provider.operators.snapshot import SnapshotChunkOperator
from airflow_cdc_provider.operators.spark_submit import THROUGHPUT_GC, CdcSparkSubmitOperator, chooses_gc
from airflow_cdc_provider.operators.stream import BinlogStreamOperator


@pytest.mark.parametrize("options", ["-XX:+UseG1GC", "-Xmx2g -XX:+UseZGC -Dx=1", "-XX:+UseShenandoahGC",
                                     "-XX:+UseSerialGC", "-XX:+UseParallelGC"])
def test_a_collector_in_the_options_is_the_users_choice(options):
    assert chooses_gc(options)


@pytest.mark.parametrize("options", ["", "-Xmx2g", "-XX:+UseCompressedOops", "-XX:MaxGCPauseMillis=50",
                                     "-XX:+UseStringDeduplication"])
def test_options_without_a_collector_choose_none(options):
    assert not chooses_gc(options)


def gc_options(operator: CdcSparkSubmitOperator) -> str:
    operator._use_throughput_gc()
    return str((operator.conf or {}).get("spark.driver.extraJavaOptions", ""))


def chunk_operator(**kwargs) -> SnapshotChunkOperator:
    return SnapshotChunkOperator(task_id="chunk", config="unused.yaml", **kwargs)


def test_the_chunk_job_adds_the_throughput_collector_once():
    op = chunk_operator(conf={"spark.driver.extraJavaOptions": "-Dkeep=me"})
    assert gc_options(op) == f"-Dkeep=me {THROUGHPUT_GC}"
    assert gc_options(op) == f"-Dkeep=me {THROUGHPUT_GC}"  # a retry's configure_job adds nothing more


def test_the_users_collector_wins():
    op = chunk_operator(conf={"spark.driver.extraJavaOptions": "-XX:+UseG1GC"})
    assert gc_options(op) == "-XX:+UseG1GC"


def test_only_batch_jobs_ask_for_it():
    assert SnapshotChunkOperator.batch_job and not BinlogStreamOperator.batch_job
