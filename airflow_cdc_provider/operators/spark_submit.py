"""CdcSparkSubmitOperator: what the chunk and stream operators add to SparkSubmitOperator to run one of our
jobs wherever the Spark connection points, without assuming the driver shares the Airflow worker's disk.

* local / client deploy mode: the application is the job script of the installed package; on a cluster the
  package archive also goes to the executors with ``--py-files``; secrets in a 0600 file named by the
  environment of spark-submit (the driver runs in that process tree).
* standalone cluster deploy mode: the package archive, stored in the state store (which the cluster must
  reach), is the application, run by Spark's PythonRunner on a worker; the spec is read from the state store;
  secrets travel in the environment of spark-submit, which the standalone client forwards to the driver
  (never argv, never Spark conf). The hook refuses ``env_vars`` in this mode, so they go the same way.
* YARN / Kubernetes cluster mode: the job script and the archive are uploaded by spark-submit; the secrets
  file travels with ``--files`` and is found by its base name (untested here: no such cluster in CI).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Iterator

from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.sdk.exceptions import AirflowException

from airflow_cdc_provider.compat import spark_provider
from airflow_cdc_provider.hooks.spark_job import SparkJobHook
from airflow_cdc_provider.operators.frozen_heap import frozen_heap
from airflow_cdc_provider.pipeline.job_errors import root_cause
from airflow_cdc_provider.pipeline.jobspec import SECRETS_ENV, SECRETS_FILE_ENV, write_secrets_file
from airflow_cdc_provider.spark.launch.class_archive import ClassArchive
from airflow_cdc_provider.spark.launch.package import package_archive
from airflow_cdc_provider.spark.launch.python_launcher import launcher_env
from airflow_cdc_provider.spark.launch.target import DRIVER_JAVA_OPTIONS, PYTHON_RUNNER, SparkTarget
from airflow_cdc_provider.spark.session import default_jars, with_driver_conf
from airflow_cdc_provider.spark_jobs import application_path
from airflow_cdc_provider.state.records import StreamLaunch

# A chunk job is a batch: on a local master its driver JVM also runs the Spark tasks, and HotSpot's throughput
# collector reads and writes a window faster there than the default G1 (docs/performance.md). The stream job
# keeps G1: a continuous stream wants G1's short pauses more than throughput.
THROUGHPUT_GC = "-XX:+IgnoreUnrecognizedVMOptions -XX:+UseParallelGC"
# The stream job's driver on a local master compiles with HotSpot's client compiler (C1) only: that JVM runs the
# Spark tasks beside the Python workers that decode the binlog, and the optimizing compiler (C2) would compile on
# the cores they need, for JVM code (moving Arrow batches, planning batches) it runs too briefly to pay that back.
# So does a small chunk task's; a large window's JVM reads and writes enough rows to gain from C2
# (``operators.snapshot.small_task``, docs/performance.md).
CLIENT_JIT = "-XX:TieredStopAtLevel=1"
JAVA_OPTIONS = "spark.driver.extraJavaOptions"
EMBEDDED_MASTER = "local[*]"  # where the jobs run without a Spark connection


def chooses_gc(java_options: str) -> bool:
    """Whether JVM options pick a garbage collector (``-XX:+UseG1GC``, ``-XX:+UseZGC``, ...): theirs wins."""
    return re.search(r"-XX:\+Use\w*GC\b", java_options) is not None


def chooses_jit(java_options: str) -> bool:
    """Whether JVM options set up the JIT compilers (``-XX:TieredStopAtLevel=4``, ``-XX:-TieredCompilation``,
    ``-XX:CICompilerCount=2``, ``-Xint``, ``-Xcomp``): theirs wins."""
    return re.search(r"-XX:(TieredStopAtLevel=|[+-]TieredCompilation\b|CICompilerCount=)|-X(int|comp)\b",
                     java_options) is not None


def spark_submit_defaults(kwargs: dict[str, Any]) -> dict[str, Any]:
    """SparkSubmitOperator defaults that make the embedded setup work: the venv's spark-submit, the JDBC
    driver jars, Python workers on this interpreter."""
    binary = Path(sys.executable).with_name("spark-submit")
    if binary.exists():
        kwargs.setdefault("spark_binary", str(binary))
    kwargs.setdefault("jars", ",".join(default_jars()) or None)
    kwargs.setdefault("conn_id", "spark_default")
    env = dict(kwargs.get("env_vars") or {})
    env.setdefault("PYSPARK_PYTHON", sys.executable)
    env.setdefault("SPARK_LOCAL_IP", os.environ.get("SPARK_LOCAL_IP", "127.0.0.1"))
    kwargs["env_vars"] = env
    return kwargs


def private_secrets_file(secrets: dict[str, str]) -> Path:
    """A 0600 file in a 0700 directory, for the spark-submit process only; the caller deletes it."""
    d = Path(tempfile.mkdtemp(prefix="airflow-cdc-secrets-"))
    return write_secrets_file(d / "secrets.json", secrets)


def remove_secrets_file(path: Path | None) -> None:
    if path is None:
        return
    try:
        path.unlink()
        path.parent.rmdir()
    except OSError:
        pass


class CdcSparkSubmitOperator(SparkSubmitOperator):
    """Base of the operators that submit ``spark_jobs/<job>.py``; not meant to be used directly.

    ``class_archive`` (default True): a driver started on this machine maps a JVM class archive of its job
    (see ``spark.launch.class_archive``), which shortens the JVM's start; False starts it plain.
    A ``batch_job`` on a local master runs with the throughput collector (``THROUGHPUT_GC``) unless
    ``spark.driver.extraJavaOptions`` picks a collector; a ``client_jit`` job (the stream, a small chunk task),
    with the client compiler only (``CLIENT_JIT``) unless those options set up the JIT compilers.
    """

    job: str = ""
    batch_job: bool = False
    client_jit: bool = False

    def __init__(self, *, class_archive: bool = True, connect_conn_id: str | None = None, **kwargs: Any) -> None:
        chosen = kwargs.get("env_vars") or {}
        self._python_chosen = "PYSPARK_PYTHON" in chosen or "PYSPARK_DRIVER_PYTHON" in chosen
        # no conn_id given and no spark_default connection: Spark embedded, not the provider's YARN
        self.embedded_master = None if kwargs.get("conn_id") else EMBEDDED_MASTER
        super().__init__(application=application_path(self.job), **spark_submit_defaults(kwargs))
        self.class_archive = class_archive
        self._process_env: dict[str, str] = {}
        self._secrets_file: Path | None = None
        self._archive: ClassArchive | None = None
        self._archive_options = ""
        self.connect_conn_id = connect_conn_id
        self._connect_session = None

    def spark_target(self) -> SparkTarget:
        """The master and deploy mode the Spark connection (plus our arguments) resolves to."""
        return SparkJobHook.target_of(self)

    def configure_job(self, pipeline, spec_path: str, detached: bool = False) -> SparkTarget:
        """Point this operator at ``job`` with ``spec_path`` for the resolved target; then ``submit``, or, for
        a ``detached`` launch (which maps a class archive but never dumps one), call ``release_secrets`` once
        the job has read them."""
        target = self.spark_target()
        spark_provider.forget_submit_hook(self)  # the hook is built from the settings below
        if isinstance(self.conf, dict) or self.conf is None:  # not a template string
            self.conf = with_driver_conf(self.conf)
        if not target.cluster_mode:
            self._use_class_archive(detached)
            self._use_python_launcher(target)
            if target.local and self.batch_job:
                self._use_throughput_gc()
            if target.local and self.client_jit:
                self._use_client_jit()
        if target.cluster_mode and target.standalone:
            archive = package_archive(pipeline.state.local_dir("dist"))
            # the driver starts on some worker: it fetches the application from the state store
            self.application = (archive.as_uri() if pipeline.state.storage.is_local
                                else pipeline.state.upload(archive, f"dist/{archive.name}"))
            spark_provider.set_main_class(self, PYTHON_RUNNER)
            self._add_driver_java_options(DRIVER_JAVA_OPTIONS)
            self.application_args = [archive.name, "", self.job, "--spec", spec_path]
            env = dict(self.env_vars or {})
            if not target.master.startswith(("spark://127.0.0.1:", "spark://localhost:")):
                env.pop("SPARK_LOCAL_IP", None)  # the embedded default, wrong for a driver on another host
            self._process_env = {**env, SECRETS_ENV: json.dumps(pipeline.secrets)}
            self.env_vars = None
            return target
        self._secrets_file = private_secrets_file(pipeline.secrets)
        self.application = application_path(self.job)
        self.application_args = ["--spec", spec_path]
        secrets_ref = str(self._secrets_file)
        if not target.local:
            archive = str(package_archive(pipeline.state.local_dir("dist")))
            self.py_files = ",".join(f for f in (self.py_files, archive) if f)
            if target.cluster_mode:  # YARN / K8s: the file is shipped and found by its base name
                self.files = ",".join(f for f in (self.files, secrets_ref, spec_path) if f)
                secrets_ref = self._secrets_file.name
        self.env_vars = {**(self.env_vars or {}), SECRETS_FILE_ENV: secrets_ref}
        return target

    def submit(self, context: Any) -> None:
        """Run the configured job to its end (SparkSubmitOperator.execute); publish the class archive its JVM
        dumped, if it dumped one. Logs how long spark-submit ran: the task's time beyond it is Airflow's and
        this operator's."""
        started = time.monotonic()
        try:
            SparkJobHook.of_operator(self, self._process_env)  # the hook execute() runs the job with
            super().execute(context)
        except Exception as exc:
            if self._archive:
                self._archive.abandon(self._archive_options)
            cause = self.job_failure(str(exc))
            if cause is None:
                raise
            # the provider's error is the whole command line; the job's own error is what the user needs
            raise AirflowException(f"the {self.job} Spark job failed: {cause} (its output is in the log above)") from None
        except BaseException:
            if self._archive:
                self._archive.abandon(self._archive_options)
            raise
        else:
            if self._archive and self._archive.publish(self._archive_options):
                self.log.info("JVM class archive published for later %s jobs: %s", self.job, self._archive.path)
        finally:
            self.log.info("%s: spark-submit ran %.2f s (command to exit)", self.job, time.monotonic() - started)
            self.release_secrets()

    def job_failure(self, error: str) -> str | None:
        """The line of a failed job's output that says what went wrong (``pipeline.job_errors``)."""
        return root_cause(error)

    def _use_class_archive(self, detached: bool) -> None:
        self._archive, self._archive_options = None, ""
        if ClassArchive.is_option(self._driver_java_options()):  # set by an earlier configure_job
            self.conf = {**self.conf, JAVA_OPTIONS: ClassArchive.without_options(self.conf[JAVA_OPTIONS])}
        if not self.class_archive:
            return
        archive = ClassArchive.for_job(self.job, spark_provider.spark_binary(self) or "spark-submit", self.env_vars,
                                       str((self.conf or {}).get("spark.driver.extraClassPath", "")))
        if archive is None:
            return
        options = archive.java_options(may_dump=not detached)
        if ClassArchive.dumps(options):
            self.log.info("this job's JVM dumps a class archive when it exits (once per machine, a few seconds): "
                          "later %s jobs start sooner", self.job)
        self._archive, self._archive_options = archive, options
        if options:
            self._add_driver_java_options(options)

    def _use_python_launcher(self, target: SparkTarget) -> None:
        """The driver (and, on a local master, the workers and planners) start through the Python launcher
        (``spark.launch.python_launcher``): PySpark imported with its cached bytecode instead of compiled again in
        every Python process Spark starts. Not when the DAG chose its own Python (``env_vars``)."""
        if self._python_chosen:
            return
        launch = launcher_env(target.local)
        if launch:
            self.env_vars = {**(self.env_vars or {}), **launch}

    def _use_throughput_gc(self) -> None:
        if not chooses_gc(self._driver_java_options()):
            self._add_driver_java_options(THROUGHPUT_GC)

    def _use_client_jit(self) -> None:
        if not chooses_jit(self._driver_java_options()):
            self._add_driver_java_options(CLIENT_JIT)

    def _driver_java_options(self) -> str:
        return str((self.conf or {}).get(JAVA_OPTIONS, ""))

    def _add_driver_java_options(self, options: str) -> None:
        current = self._driver_java_options()
        self.conf = {**(self.conf or {}), JAVA_OPTIONS: f"{current} {options}" if current else options}

    def launch_detached(self, log_path: Path, launch_id: str, target: SparkTarget) -> StreamLaunch:
        """Start the configured job without waiting for it (``SparkJobHook.launch``)."""
        return SparkJobHook.of_operator(self, self._process_env).launch(self.application, log_path, launch_id, target)

    # -- Spark Connect (opt-in) ---------------------------------------------------------------------------
    @contextlib.contextmanager
    def connect_job(self, pipeline, ship_package: bool, what: str) -> Iterator[Any]:
        """A new session of the ``connect_conn_id`` server for one job attempt, with this task's ``conf``;
        ``on_kill`` interrupts its Spark jobs while it is open. ``ship_package``: the server's Python workers
        run our code, so the package archive goes to the session."""
        artifacts = [str(package_archive(pipeline.state.local_dir("dist")))] if ship_package else []
        # the operators' execute already runs frozen (with_frozen_heap); nested, this one only adds ``freeze``
        # for the client's modules, which the session imports
        with frozen_heap() as freeze, SparkJobHook.connect_session(self.connect_conn_id, self.conf, artifacts,
                                                                  what, self.log, on_open=freeze) as spark:
            self._connect_session = spark
            try:
                yield spark
            finally:
                self._connect_session = None

    def on_kill(self) -> None:
        if self._connect_session is not None:  # on Connect the server stops the session's jobs; execute() ends
            self._connect_session.interruptAll()
        else:
            super().on_kill()

    def release_secrets(self) -> None:
        remove_secrets_file(self._secrets_file)
        self._secrets_file = None
        self._process_env = {}
