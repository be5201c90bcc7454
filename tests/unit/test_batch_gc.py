"""On a local master a chunk job's driver runs with the throughput collector and the stream job's with the client
compiler only, unless the user's ``spark.driver.extraJavaOptions`` pick a collector or set up the JIT compilers:
theirs is kept and ours not added."""

import pytest

from airflow_cdc_provider.core.chunks import Chunk, ChunkTask, TableId
from airflow_cdc_provider.operators.snapshot import CLIENT_JIT_MAX_ROWS, SnapshotChunkOperator, small_task
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


def chunk_task(chunks: int) -> ChunkTask:
    return ChunkTask([Chunk(TableId("shop", "orders"), i, ("id",), None if i == 0 else (i * 100,),
                            None if i == chunks - 1 else ((i + 1) * 100,)) for i in range(chunks)])


@pytest.mark.parametrize("chunks, chunk_size, small", [
    (1, 8096, True), (122, 8096, True), (247, 8096, True),  # 1M and 2M rows of the default chunk size
    (248, 8096, False), (1219, 8096, False),  # just over 2M rows; 10M rows, one task at the default rows_per_task
    (1, CLIENT_JIT_MAX_ROWS, True), (2, CLIENT_JIT_MAX_ROWS, False), (3, 1_000_000, False)])
def test_a_chunk_task_planned_at_up_to_two_million_rows_starts_on_the_client_compiler(chunks, chunk_size, small):
    """Such a JVM ends before the optimizing compiler pays back; a larger window gains from it."""
    assert CLIENT_JIT_MAX_ROWS == 2_000_000
    assert small_task(chunk_task(chunks), chunk_size) is small


def test_a_small_chunk_task_adds_the_client_compiler_unless_the_user_set_up_the_jit():
    op = chunk_operator(conf={"spark.driver.extraJavaOptions": "-Dkeep=me"})
    op.client_jit = small_task(chunk_task(122), 8096)
    assert options_after(op, "_use_client_jit") == f"-Dkeep=me {CLIENT_JIT}"
    op = chunk_operator(conf={"spark.driver.extraJavaOptions": "-XX:TieredStopAtLevel=4"})
    assert options_after(op, "_use_client_jit") == "-XX:TieredStopAtLevel=4"


def test_without_a_spark_connection_the_jobs_run_embedded_not_on_yarn(monkeypatch):
    """No ``spark_default`` connection and no ``spark.conn_id``: Spark runs on this machine (``local[*]``), where
    the provider's own default would send the job to YARN; a connection that exists decides."""
    monkeypatch.delenv("AIRFLOW_CONN_SPARK_DEFAULT", raising=False)
    assert chunk_operator().spark_target().master == "local[*]"
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_DEFAULT", '{"conn_type": "spark", "host": "spark://h:7077"}')
    assert chunk_operator().spark_target().master == "spark://h:7077"
    monkeypatch.setenv("AIRFLOW_CONN_MY_SPARK", '{"conn_type": "spark", "host": "local[2]"}')
    assert stream_operator(conn_id="my_spark").spark_target().master == "local[2]"
