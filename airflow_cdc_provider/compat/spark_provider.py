"""The one place that reaches into apache-airflow-providers-apache-spark's internals.

``SparkSubmitOperator`` / ``SparkSubmitHook`` have no public way to build the spark-submit command without
running it (a detached stream launch needs the command), to read the resolved connection (master, deploy
mode, REST endpoint), to give spark-submit's own process an environment variable (standalone cluster mode
forwards it to the driver, which is how secrets avoid argv and Spark conf), to learn a cluster driver's id,
or to set the application's main class after construction. These functions do it, for the provider versions
in ``SUPPORTED``; ``check_supported`` refuses any other version, or one that lacks one of these internals, with
one error saying what to install, instead of an ``AttributeError`` in the middle of a task.
"""

from __future__ import annotations

import inspect
import re
from typing import Any

from airflow_cdc_provider.compat import versions

DISTRIBUTION = "apache-airflow-providers-apache-spark"
SUPPORTED = ">=6.3,<7"  # as setup.cfg's install_requires
INSTALL = f"pip install '{DISTRIBUTION}{SUPPORTED}'"
# attributes the hook's / operator's __init__ sets (read or written here), and methods called here
_HOOK_ATTRIBUTES = ("_connection", "_env", "_driver_id", "_conn_id")
_HOOK_METHODS = ("_build_spark_submit_command", "submit")
_OPERATOR_ATTRIBUTES = ("_hook", "_java_class", "_spark_binary")
_OPERATOR_METHODS = ("_get_hook", "execute")

_supported = False  # check_supported passed once in this process


class UnsupportedSparkProvider(versions.UnsupportedLibrary):
    """The installed Spark provider is not one whose internals this provider was written against."""


def missing_internals(hook_class: type | None = None, operator_class: type | None = None) -> list[str]:
    """The internals used here that these classes (the installed provider's by default) lack."""
    if hook_class is None or operator_class is None:
        from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook
        from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator

        hook_class, operator_class = hook_class or SparkSubmitHook, operator_class or SparkSubmitOperator
    missing = []
    for cls, attributes, methods in ((hook_class, _HOOK_ATTRIBUTES, _HOOK_METHODS),
                                     (operator_class, _OPERATOR_ATTRIBUTES, _OPERATOR_METHODS)):
        init = inspect.getsource(cls.__init__)
        missing += [f"{cls.__name__}.{a}" for a in attributes
                    if f"self.{a} =" not in init and f"self.{a}:" not in init]
        missing += [f"{cls.__name__}.{m}()" for m in methods if not callable(getattr(cls, m, None))]
    if not hasattr(hook_class, "_log"):  # Airflow's LoggingMixin keeps a hook's logger there
        missing.append(f"{hook_class.__name__}._log")
    return missing


def check_library(version: str, hook_class: type | None = None, operator_class: type | None = None) -> None:
    """Raise ``UnsupportedSparkProvider`` unless ``version`` is in ``SUPPORTED`` and nothing used here is missing."""
    versions.require(DISTRIBUTION, version, SUPPORTED, INSTALL, "drives its spark-submit hook through internals",
                     lambda: missing_internals(hook_class, operator_class), UnsupportedSparkProvider)


def check_supported() -> None:
    """Refuse an unsupported provider before anything relies on its internals (once per process)."""
    global _supported
    if not _supported:
        check_library(versions.installed_version(DISTRIBUTION))
        _supported = True


def new_submit_hook(operator: Any) -> Any:
    """A ``SparkSubmitHook`` built from the operator's arguments, as its ``execute`` would build it; an operator
    whose ``embedded_master`` is set runs there when its Spark connection does not exist (the hook would send the
    job to YARN)."""
    check_supported()
    hook = operator._get_hook()
    master = getattr(operator, "embedded_master", None)
    if master and not _connection_exists(hook):
        hook._connection["master"] = master
        hook.log.info("no Airflow connection %r: Spark runs embedded, master %s (create the connection to use a "
                      "cluster)", hook._conn_id, master)
    return hook


def _connection_exists(hook: Any) -> bool:
    from airflow.exceptions import AirflowException

    try:
        hook.get_connection(hook._conn_id)
    except AirflowException:  # what the hook itself takes for a missing connection
        return False
    return True


def use_submit_hook(operator: Any, process_env: dict[str, str] | None = None) -> Any:
    """Build the hook the operator's ``execute`` will use now (from its current arguments), with
    ``process_env`` added to spark-submit's own environment; returns it."""
    hook = new_submit_hook(operator)
    if process_env:
        hook._env = {**(hook._env or {}), **process_env}
    operator._hook = hook
    return hook


def forget_submit_hook(operator: Any) -> None:
    """The operator's arguments changed: its ``execute`` must build a new hook."""
    operator._hook = None


def resolved_connection(hook: Any) -> dict[str, Any]:
    """The Spark connection as the hook resolved it: ``master``, ``deploy_mode``, ``rest_endpoint``, ..."""
    return hook._connection


def submit_command(hook: Any, application: str) -> list[str]:
    """The spark-submit command line the hook would run for ``application`` (secrets are never in it)."""
    return hook._build_spark_submit_command(application)


def process_env(hook: Any) -> dict[str, str]:
    """The environment the hook gives spark-submit's process, over the caller's own."""
    return dict(hook._env or {})


def driver_id(hook: Any) -> str | None:
    """The standalone cluster driver id the hook read from spark-submit's output, after ``submit``."""
    return hook._driver_id


def set_main_class(operator: Any, name: str) -> None:
    operator._java_class = name


def spark_binary(operator: Any) -> str | None:
    return operator._spark_binary


# A spark-submit output line's own level: the JVM's log4j ``yy/MM/dd HH:mm:ss LEVEL``, the job's Python logging
# ``yyyy-mm-dd time,ms LEVEL``, or the JVM's unified logging ``[uptime][level]``.
_LINE_LEVEL = re.compile(r"^(?:\d\d/\d\d/\d\d \S+ (?P<jvm>TRACE|DEBUG|INFO|WARN|ERROR|FATAL)\b"
                         r"|\S+ \S+ (?P<log>DEBUG|INFO|WARNING|ERROR|CRITICAL)\b"
                         r"|\[[^\]]*\]\[(?P<unified>trace|debug|info|warning|error)\])")
_LEVELS = {"TRACE": "debug", "DEBUG": "debug", "INFO": "info", "WARN": "warning", "WARNING": "warning",
           "ERROR": "error", "FATAL": "error", "CRITICAL": "error"}
# What every Spark 4 JVM prints on a machine without Hadoop's native library, whatever the job: no action to take.
_NOTICES = ("WARNING: Using incubator modules: jdk.incubator.vector", "NativeCodeLoader: Unable to load native-hadoop",
            "Using Spark's default log4j profile")


def line_level(line: str) -> str:
    """The logging method for one line of spark-submit's output: the level the line itself states (Spark's
    own info lines and fixed start-up notices at debug), else info."""
    if any(notice in line for notice in _NOTICES):
        return "debug"
    m = _LINE_LEVEL.match(line)
    if not m:
        return "info"
    if m.group("jvm"):  # Spark's info lines are its start-up (the job's session logs at WARN from then on)
        level = _LEVELS[m.group("jvm")]
        return "debug" if level == "info" else level
    return _LEVELS[(m.group("log") or m.group("unified")).upper()]


# the time a JVM (log4j) or job (Python logging) line starts with: the task log stamps every line already
_LINE_TIME = re.compile(r"^(?:\d\d/\d\d/\d\d \d\d:\d\d:\d\d|\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) (?=[A-Z])")


class _OutputAtItsLevel:
    """The hook's logger, except that each output line it logs at info goes out at the line's own level,
    without the time it starts with (the task log's own stamp is the one that reads in order)."""

    def __init__(self, log: Any) -> None:
        self._inner = log

    def info(self, msg: Any, *args: Any, **kwargs: Any) -> Any:
        if not isinstance(msg, str) or args:
            return self._inner.info(msg, *args, **kwargs)
        return getattr(self._inner, line_level(msg))(_LINE_TIME.sub("", msg, count=1), **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def log_output_at_its_level(hook: Any) -> None:
    """The provider logs every spark-submit output line at info: Spark's warnings and errors then hide among
    thousands of info lines. Route each line by the level it states instead (``line_level``)."""
    hook._log = _OutputAtItsLevel(hook.log)
