"""On a local master a chunk job's driver runs with the throughput collector and the stream job's with the client
compiler only, unless the user's ``spark.driver.extraJavaOptions`` pick a collector or set up the JIT compilers:
theirs is kept and ours not added."""

import pytest

from airflow_cdc_provider.operators.snapshot import SnapshotChunkOperator
from airflow_cdc_provider.operators.spark_submit import (
    CLIENT_JIT,
    THROUGHPUT_GC,
    CdcSparkSubmitOperator,
    chooses_gc,
    chooses_jit,
)
from airflow_cdc_provider.operators.stream import BinlogStreamOperator


@pytest.mark.parametrize("options", ["-XX:+UseG1GC", "-Xmx2g -XX:+UseZGC -Dx=1", "-XX:+UseShenandoahGC",
                                     "-XX:+UseSerialGC", "-XX:+UseParallelGC"])
def test_a_collector_in_the_options_is_the_users_choice(options):
    assert chooses_gc(options)


@pytest.mark.parametrize("options", ["", "-Xmx2g", "-XX:+UseCompressedOops", "-XX:MaxGCPauseMillis=50",
                                     "-XX:+UseStringDeduplication"])
def test_options_without_a_collector_choose_none(options):
    assert not chooses_gc(options)


@pytest.mark.parametrize("options", ["-XX:TieredStopAtLevel=4", "-Xmx2g -XX:-TieredCompilation", "-XX:+TieredCompilation",
                                     "-XX:CICompilerCount=2", "-Xint", "-Dx=1 -Xcomp"])
def test_jit_settings_in_the_options_are_the_users_choice(options):
    assert chooses_jit(options)


@pytest.mark.parametrize("options", ["", "-Xmx2g", "-XX:+UseParallelGC", "-XX:TieredCompileTaskTimeout=5",
                                     "-Dint=1", "-XX:+UseCompressedOops"])
def test_options_without_jit_settings_choose_none(options):
    assert not chooses_jit(options)


def chunk_operator(**kwargs) -> SnapshotChunkOperator:
    return SnapshotChunkOperator(task_id="chunk", config="unused.yaml", **kwargs)


def stream_operator(**kwargs) -> BinlogStreamOperator:
    return BinlogStreamOperator(task_id="stream", config="unused.yaml", **kwargs)


def options_after(operator: CdcSparkSubmitOperator, use: str) -> str:
    """The driver's JVM options once ``operator``'s ``use`` step (as ``configure_job`` runs it) has run."""
    getattr(operator, use)()
    return str((operator.conf or {}).get("spark.driver.extraJavaOptions", ""))


# (operator, its step, the option it adds, an option of the user's that it keeps instead)
STEPS = [(chunk_operator, "_use_throughput_gc", THROUGHPUT_GC, "-XX:+UseG1GC"),
         (stream_operator, "_use_client_jit", CLIENT_JIT, "-XX:TieredStopAtLevel=4")]


@pytest.mark.parametrize("make, use, ours, _", STEPS)
def test_the_job_adds_its_option_once(make, use, ours, _):
    op = make(conf={"spark.driver.extraJavaOptions": "-Dkeep=me"})
    assert options_after(op, use) == f"-Dkeep=me {ours}"
    assert options_after(op, use) == f"-Dkeep=me {ours}"  # a retry's configure_job adds nothing more


@pytest.mark.parametrize("make, use, _, theirs", STEPS)
def test_the_users_choice_wins(make, use, _, theirs):
    op = make(conf={"spark.driver.extraJavaOptions": theirs})
    assert options_after(op, use) == theirs


def test_only_batch_jobs_ask_for_the_throughput_collector_and_only_the_stream_for_the_client_compiler():
    assert SnapshotChunkOperator.batch_job and not BinlogStreamOperator.batch_job
    assert BinlogStreamOperator.client_jit and not SnapshotChunkOperator.client_jit


def test_without_a_spark_connection_the_jobs_run_embedded_not_on_yarn(monkeypatch):
    """No ``spark_default`` connection and no ``spark.conn_id``: Spark runs on this machine (``local[*]``), where
    the provider's own default would send the job to YARN; a connection that exists decides."""
    monkeypatch.delenv("AIRFLOW_CONN_SPARK_DEFAULT", raising=False)
    assert chunk_operator().spark_target().master == "local[*]"
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_DEFAULT", '{"conn_type": "spark", "host": "spark://h:7077"}')
    assert chunk_operator().spark_target().master == "spark://h:7077"
    monkeypatch.setenv("AIRFLOW_CONN_MY_SPARK", '{"conn_type": "spark", "host": "local[2]"}')
    assert stream_operator(conn_id="my_spark").spark_target().master == "local[2]"
