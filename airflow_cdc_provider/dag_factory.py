"""YAML -> Airflow DAG: one DAG per pipeline file.

    validate_source >> plan_chunks >> snapshot_chunk[mapped] >> collect_watermarks >> binlog_retention >> stream

A delta pipeline with ``sink.maintenance`` also gets ``<dag_id>_maintenance`` (``build_maintenance_dag``): one
task compacting and vacuuming its tables on the maintenance schedule.

Generated DAGs run one at a time (``max_active_runs=1``, ``catchup=False``; a continuous pipeline two, see
``max_active_runs``): a run snapshots the tables that have no finished snapshot (all of them the first time,
none later, or those named in ``dag_run.conf["resnapshot"]``) and then streams the binlog from where the last
run stopped.

``load_pipeline_dags(folder)`` builds every ``*.yaml``/``*.yml`` in the folder. A file that fails to load
does not take the others down: the loader module skips it, and a second DAG file,
``dags/cdc_pipeline_errors.py``, calls ``raise_pipeline_errors(folder)``, which fails its import with one
error naming each broken file and key. Airflow keeps one import error per Python file, so this is how a
broken YAML shows up in the UI's import errors, and disappears at the next parse once the file is fixed,
while every valid pipeline's DAG keeps loading from the loader module.
"""

from __future__ import annotations

import datetime as dt
import logging
import os
from pathlib import Path
from typing import Any

from airflow_cdc_provider.pipeline.config import ConfigError, PipelineConfig, load_config

log = logging.getLogger(__name__)

DEFAULT_START = dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc)


class PipelineFilesError(Exception):
    """Some pipeline files could not be turned into DAGs; the message names each file and why."""


def spark_kwargs(cfg: PipelineConfig) -> dict[str, Any]:
    from airflow_cdc_provider.spark.session import default_jars

    kw = cfg.spark.submit_arguments()
    jars = cfg.spark.jars or []
    jars = [jars] if isinstance(jars, str) else list(jars)
    kw["jars"] = ",".join([*jars, *(j for j in default_jars() if j not in jars)])
    return kw


def _default_args(cfg: PipelineConfig) -> dict[str, Any]:
    args = dict(cfg.default_args)
    if isinstance(args.get("retry_delay"), (int, float)):
        args["retry_delay"] = dt.timedelta(seconds=args["retry_delay"])
    args.setdefault("retries", 0)
    return args


def check_default_args(cfg: PipelineConfig) -> None:
    """``default_args`` as Airflow takes them: every key an operator argument, every value of its type. Airflow
    ignores an unknown key (a typo of ``retries`` gives no retries) and fails the whole DAG file on a wrong type."""
    import inspect

    from airflow_cdc_provider.core.hints import did_you_mean

    from airflow.sdk import BaseOperator
    from airflow.providers.standard.operators.empty import EmptyOperator

    known = [n for n in inspect.signature(BaseOperator.__init__).parameters if n not in ("self", "kwargs")]
    for key in cfg.default_args:
        if key not in known:
            raise ConfigError(f"{cfg.where}: default_args.{key}: not an operator argument Airflow knows"
                              + did_you_mean(key, known))
    try:
        EmptyOperator(task_id="check_default_args", **_default_args(cfg))
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"{cfg.where}: default_args: {exc}") from None


def doc_md(cfg: PipelineConfig) -> str:
    sink = cfg.sink
    return (
        f"### CDC pipeline `{cfg.dag_id}`\n\n{cfg.description or ''}\n\n"
        f"* **source**: connection `{cfg.source.conn_id}`, tables {', '.join(f'`{t}`' for t in cfg.source.tables)}\n"
        f"* **snapshot**: chunks of {cfg.snapshot.chunk_size} rows, at most {cfg.snapshot.max_active_chunks} at once\n"
        f"* **stream**: mode `{cfg.stream.mode}`, startup `{cfg.stream.startup}`\n"
        f"* **sink**: `{sink.type}` {getattr(sink, 'path', None) or getattr(sink, 'conn_id', None) or '(default path)'}\n"
        f"* defined in `{cfg.path}`\n\n"
        "Re-snapshot a table: trigger with conf `{\"resnapshot\": [\"db.table\"]}`. "
        "Stop capturing a table taken out of `source.tables`: `{\"uncapture\": [\"db.table\"]}`. "
        "Check the sink: `airflow-cdc verify <this yaml>`."
    )


def max_active_runs(cfg: PipelineConfig) -> int:
    """One run at a time; a continuous pipeline two: its stream's run stays open while the stream runs, and a
    second one re-snapshots beside it (the running stream takes the new snapshots up) or, scheduled, finds the
    stream running and succeeds. Two runs never read one table at once: the plan step leaves a snapshot under
    way in the other run to it."""
    return 2 if cfg.stream.mode == "continuous" else 1


def build_dag(path: str | Path, cfg: PipelineConfig | None = None):
    from airflow.sdk import DAG

    from airflow_cdc_provider.operators.assets import sink_alias
    from airflow_cdc_provider.operators.collect import CollectWatermarksOperator
    from airflow_cdc_provider.operators.plan import PlanChunksOperator, ValidateSourceOperator
    from airflow_cdc_provider.operators.snapshot import CHUNK_LABEL_TEMPLATE, SnapshotChunkOperator
    from airflow_cdc_provider.operators.stream import BinlogStreamOperator
    from airflow_cdc_provider.sensors.retention import BinlogRetentionSensor

    cfg = cfg or load_config(path)
    config = str(Path(path).resolve())
    spark = spark_kwargs(cfg)
    connect_conn_id = cfg.spark.connect_conn_id  # opt-in: chunk tasks and available_now streams
    sink_tables = sink_alias(cfg.dag_id)  # the asset events of the sink tables a task completed go through it
    with DAG(
        dag_id=cfg.dag_id,
        description=cfg.description,
        schedule=cfg.schedule,
        start_date=DEFAULT_START,
        catchup=False,
        max_active_runs=max_active_runs(cfg),
        default_args=_default_args(cfg),
        tags=list(cfg.tags),
        doc_md=doc_md(cfg),
        auto_register=False,  # returned to the caller: building twice (loader + error check) registers nothing
    ) as dag:
        validate = ValidateSourceOperator(task_id="validate_source", config=config)
        plan = PlanChunksOperator(task_id="plan_chunks", config=config)
        snapshot = SnapshotChunkOperator.partial(
            task_id="snapshot_chunk", config=config, max_active_tis_per_dagrun=cfg.snapshot.max_active_chunks,
            map_index_template=CHUNK_LABEL_TEMPLATE, connect_conn_id=connect_conn_id,
            **spark,
        ).expand(chunk=plan.output)
        collect = CollectWatermarksOperator(task_id="collect_watermarks", config=config, trigger_rule="none_failed",
                                            outlets=[sink_tables])
        retention = BinlogRetentionSensor(task_id="binlog_retention", config=config)
        stream = BinlogStreamOperator(task_id="stream", config=config, connect_conn_id=connect_conn_id,
                                      deferrable=cfg.stream.deferrable, outlets=[sink_tables], **spark)
        validate >> plan >> snapshot >> collect >> retention >> stream
    return dag


def maintenance_settings(cfg: PipelineConfig):
    """The pipeline's ``sink.maintenance`` section, or None (no maintenance DAG)."""
    return getattr(cfg.sink, "maintenance", None)


def build_maintenance_dag(path: str | Path, cfg: PipelineConfig):
    """``<dag_id>_maintenance``: compaction and VACUUM of a delta pipeline's tables.

    A DAG of its own rather than a task of the CDC DAG: maintenance runs on its own schedule (daily, say) while
    the CDC DAG runs hourly or holds one never-ending run in continuous mode, where a task after the stream would
    never start; its runs, failures and retries show apart from the pipeline's, and it can be paused or triggered
    alone. It may run beside the CDC DAG: compaction and the MERGEs retry each other's commit conflicts, and
    VACUUM keeps every file younger than its retention."""
    from airflow.sdk import DAG

    from airflow_cdc_provider.operators.maintenance import DeltaMaintenanceOperator
    from airflow_cdc_provider.sinks.delta_maintenance import MAINTENANCE_DAG_SUFFIX

    settings = maintenance_settings(cfg)
    hours = settings.vacuum_retention_hours
    steps = ("z-order by key" if settings.z_order else "compaction" if settings.compact else None,
             f"VACUUM of files unreferenced for {hours} h" if hours is not None else None)
    with DAG(
        dag_id=cfg.dag_id + MAINTENANCE_DAG_SUFFIX,
        description=f"Compaction and VACUUM of the Delta tables of {cfg.dag_id}",
        schedule=settings.schedule,
        start_date=DEFAULT_START,
        catchup=False,
        max_active_runs=1,
        default_args=_default_args(cfg),
        tags=[*cfg.tags, "maintenance"],
        doc_md=(f"### Maintenance of `{cfg.dag_id}`\n\n{', '.join(s for s in steps if s) or 'Nothing'} for every "
                f"captured table's Delta table; defined in `{cfg.path}` (`sink.maintenance`). By hand: "
                "`airflow-cdc maintain <this yaml>`."),
        auto_register=False,
    ) as dag:
        DeltaMaintenanceOperator(task_id="maintain_delta_tables", config=str(Path(path).resolve()))
    return dag


def pipeline_dags(path: str | Path, cfg: PipelineConfig) -> dict[str, Any]:
    """The DAGs of one pipeline file by dag id: the CDC DAG, and its maintenance DAG when configured."""
    dags = {cfg.dag_id: build_dag(path, cfg)}
    if maintenance_settings(cfg) is not None:
        maintenance = build_maintenance_dag(path, cfg)
        dags[maintenance.dag_id] = maintenance
    return dags


def pipelines_folder(default: str | Path | None = None) -> Path:
    env = os.environ.get("AIRFLOW_CDC_PIPELINES")
    return Path(env) if env else Path(default or Path.cwd() / "pipelines")


def _load(folder: str | Path | None, build: bool = True) -> tuple[dict[str, Any], list[str]]:
    """``({dag_id: DAG}, [error per file that did not load])`` for the pipeline YAML files in ``folder``.
    ``build=False`` only validates the files (no DAG is built; the error reporter's parse stays cheap)."""
    d = Path(folder) if folder else pipelines_folder()
    if not d.is_dir():
        return {}, [f"pipeline folder {d} does not exist: create it or set AIRFLOW_CDC_PIPELINES to the folder "
                    "that holds the pipeline YAML files"]
    dags: dict[str, Any] = {}
    errors: list[str] = []
    for path in sorted([*d.glob("*.yaml"), *d.glob("*.yml")]):
        try:
            cfg = load_config(path)
            check_default_args(cfg)
            built = pipeline_dags(path, cfg) if build else dict.fromkeys(_dag_ids(cfg))
        except ConfigError as exc:
            errors.append(str(exc))
        except Exception as exc:  # noqa: BLE001 - one broken pipeline must not hide the others
            errors.append(f"{path}: {type(exc).__name__}: {exc}")
        else:
            taken = [dag_id for dag_id in built if dag_id in dags]
            if taken:
                errors.append(f"{path}: dag_id {taken[0]!r} is already used by another pipeline file; "
                              "set a unique dag_id")
            else:
                dags.update(built)
    return dags, errors


def _dag_ids(cfg: PipelineConfig) -> list[str]:
    """The ids of the DAGs ``pipeline_dags`` builds for ``cfg``, without building them."""
    from airflow_cdc_provider.sinks.delta_maintenance import MAINTENANCE_DAG_SUFFIX

    return [cfg.dag_id, *([cfg.dag_id + MAINTENANCE_DAG_SUFFIX] if maintenance_settings(cfg) is not None else [])]


def load_pipeline_dags(folder: str | Path | None = None) -> dict[str, Any]:
    """``{dag_id: DAG}`` for every pipeline YAML in ``folder`` that loads; the others are logged and left out
    (``raise_pipeline_errors`` reports them as an import error)."""
    dags, errors = _load(folder)
    for msg in errors:
        log.error("pipeline not loaded: %s", msg)
    return dags


def raise_pipeline_errors(folder: str | Path | None = None) -> None:
    """Raise ``PipelineFilesError`` naming every pipeline file in ``folder`` that does not load; return
    quietly when all do. Called at import time by ``dags/cdc_pipeline_errors.py``: it validates the files and
    builds no DAG (``cdc_pipelines.py`` builds each pipeline's DAG once)."""
    _, errors = _load(folder, build=False)
    if errors:
        raise PipelineFilesError(
            f"{len(errors)} pipeline file(s) not loaded (the other pipelines' DAGs are unaffected):\n"
            + "\n".join(f"- {e}" for e in errors))
