"""The ``airflow-cdc`` console script.

``airflow-cdc plan CONFIG.yaml [--json] [--max-tasks N]`` validates the source and prints the chunk plan.
``airflow-cdc verify CONFIG.yaml [--table T] [--json]`` compares source and sink chunk by chunk; exit 1 on
any difference, 0 when equal.
``airflow-cdc materialize CONFIG.yaml --table T --output DIR`` writes a table's current state (as the sink
holds it) to Parquet.
``airflow-cdc status CONFIG.yaml`` prints the stream's status (offset, lag, rows, heartbeat age) as JSON.
``airflow-cdc stop CONFIG.yaml [--wait S]`` asks a running stream to stop after its current batch.
``airflow-cdc resnapshot CONFIG.yaml --table T [--table T ...] [--print]`` triggers the pipeline's DAG with
``{"resnapshot": [...]}`` (through Airflow's own ``airflow dags trigger``), after checking that it captures them.
``airflow-cdc uncapture CONFIG.yaml --table T`` takes a table left out of ``source.tables`` out of the pipeline's
state: the stream stops reading it, its sink data stays.
``airflow-cdc maintain CONFIG.yaml [--json]`` compacts and vacuums a delta pipeline's tables (``sink.maintenance``,
or its defaults), as the maintenance DAG does.
``airflow-cdc schema`` prints the JSON Schema of the pipeline YAML (the one in docs/pipeline.schema.json).

Errors are one line per problem on stderr, prefixed ``airflow-cdc: error:``, exit code 2; they name the
file, key or table and say what to change.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import json
import sys
from typing import Sequence

from airflow_cdc_provider.core.keys import format_key
from airflow_cdc_provider.pipeline.config import ConfigError, load_config
from airflow_cdc_provider.pipeline.plan import DEFAULT_MAX_TASKS, ChunkPlan, plan_chunks
from airflow_cdc_provider.source.server import SourceError
from airflow_cdc_provider.source.settings import ConnectionConfigError
from airflow_cdc_provider.source.validation import SourceValidationError
from airflow_cdc_provider.state.records import FINAL_STATES
from airflow_cdc_provider.state.store import StateStore

EXIT_USAGE = 2


def _fail(messages: Sequence[str]) -> int:
    for m in messages:
        print(f"airflow-cdc: error: {m}", file=sys.stderr)
    return EXIT_USAGE


def _print_plan(plan: ChunkPlan, title: str, snapshotted: Sequence[str] = (),
                due: dict[str, str] | None = None) -> None:
    print(title)
    for schema in plan.schemas:
        chunks = [c for c in plan.chunks if c.table == schema.table]
        name = str(schema.table)
        done = (f"  (the next run re-snapshots it: {due[name]})" if due and name in due
                else "  (snapshotted already: these are the chunks a re-snapshot would read)" if name in snapshotted
                else "")
        print(f"\n{schema.table}  key ({', '.join(schema.key_columns)})  {len(chunks)} chunk(s){done}")
        for c in chunks:
            lo = "(-inf" if c.start is None else f"[{format_key(c.start)}"
            hi = "+inf)" if c.end is None else f"{format_key(c.end)})"
            print(f"  {c.index:>5}  {lo}, {hi}")
    print(f"\n{len(plan.chunks)} chunk(s) in {len(plan.tasks)} task(s)")


def cmd_plan(args: argparse.Namespace) -> int:
    from airflow_cdc_provider.dag_factory import check_default_args
    from airflow_cdc_provider.pipeline.connections import resolve_mysql

    try:
        cfg = load_config(args.config)
        # Airflow sets its logging (and metrics) up on import, writing to stdout: here stdout is the plan (--json)
        with contextlib.redirect_stdout(sys.stderr):
            check_default_args(cfg)
    except ConfigError as exc:
        return _fail(str(exc).splitlines())
    where = f"{args.config}: source"
    from airflow_cdc_provider.pipeline.resolve import check_sink_names, check_writable, resolve_pipeline

    try:
        pipeline = resolve_pipeline(cfg)
        problems = check_writable(pipeline)
    except ConfigError as exc:  # names its file and key already (sink.conn_id, state.path, ...)
        return _fail(str(exc).splitlines())
    except (ConnectionConfigError, SourceError, ValueError) as exc:
        return _fail([f"{where}: {exc}"])
    if problems:
        return _fail(problems)
    try:
        settings = resolve_mysql(cfg.source.conn_id)
        plan = plan_chunks(
            settings,
            cfg.source.tables,
            cfg.snapshot.split_options(),
            cfg.source.chunk_key,
            max_tasks=args.max_tasks,
            chunks_per_task=cfg.snapshot.chunks_per_task,
            schema_changes_per_table=cfg.stream.schema_changes_per_table,
        )
    except SourceValidationError as exc:
        return _fail([f"{where}: {p}" for p in exc.problems])
    except (ConfigError, ConnectionConfigError, SourceError, ValueError) as exc:
        return _fail([f"{where}: {exc}"])
    problems = check_sink_names(pipeline, [str(s.table) for s in plan.schemas])
    if problems:
        return _fail(problems)
    finished = pipeline.state.finished_tables()
    snapshotted = [str(s.table) for s in plan.schemas if str(s.table) in finished]
    try:
        due = _snapshots_due(pipeline, plan)
    except (ConnectionConfigError, SourceError) as exc:
        return _fail([f"{where}: {exc}"])
    if args.json:
        json.dump({"dag_id": cfg.dag_id, "chunk_size": cfg.snapshot.chunk_size, **plan.to_dict(),
                   "snapshotted": snapshotted, "snapshot_due": due}, sys.stdout, indent=2)
        print()
    else:
        _print_plan(plan, f"Chunk plan of {cfg.dag_id} (source {settings.describe()}, chunk_size {cfg.snapshot.chunk_size})",
                    snapshotted, due)
    return 0


def _snapshots_due(pipeline, plan: ChunkPlan) -> dict[str, str]:
    """The tables of ``plan`` the next run snapshots whatever they hold, with why, as the plan task decides it: a
    pending resync (a schema change the stream could not apply in place, a drop followed by a table of the name)
    or a table captured again after ``uncapture``."""
    from airflow_cdc_provider.pipeline.renames import renames_due
    from airflow_cdc_provider.pipeline.table_schemas import resnapshots_due

    planned = {str(s.table) for s in plan.schemas}
    due = {name: change.describe() for name, change in resnapshots_due(pipeline.state, pipeline.source_tables).items()
           if name in planned}
    for name in sorted(pipeline.state.recaptured_tables() & planned - set(due)):
        due[name] = "taken out by airflow-cdc uncapture and captured again; its sink holds the rows of before"
    carried = {**pipeline.state.carried_tables(),
               **{new: r.old for new, r in renames_due(pipeline.state, pipeline.source_tables).items()}}
    for name in sorted(set(carried) & planned - set(due)):
        due[name] = f"renamed from {carried[name]} on the source; carries its sink data over"
    return due


def _spark_pipeline(args: argparse.Namespace):
    """Config, resolved pipeline and a fresh chunk plan, for verify and materialize."""
    from airflow_cdc_provider.pipeline.resolve import resolve_pipeline

    cfg = load_config(args.config)
    pipeline = resolve_pipeline(cfg)
    tables = cfg.source.tables
    plan = plan_chunks(pipeline.source, tables, cfg.snapshot.split_options(), cfg.source.chunk_key,
                       captured_before=pipeline.captured_before())
    if args.table:
        names = [str(s.table) for s in plan.schemas]
        if args.table not in names:
            raise ValueError(f"--table {args.table}: not captured by {args.config} (its tables: {', '.join(names)})")
    return cfg, pipeline, plan


def cmd_verify(args: argparse.Namespace) -> int:
    from airflow_cdc_provider.pipeline.renames import why_gone
    from airflow_cdc_provider.sinks.types import TableSinkTypes
    from airflow_cdc_provider.spark.session import spark_session, stop_session
    from airflow_cdc_provider.spark.verify import verify_table

    try:
        cfg, pipeline, plan = _spark_pipeline(args)
    except SourceValidationError as exc:
        return _fail([f"{args.config}: source: {p}" for p in exc.problems])
    except (ConfigError, ConnectionConfigError, SourceError, ValueError, RuntimeError) as exc:
        return _fail(str(exc).splitlines())
    selected = [s for s in plan.schemas if not args.table or str(s.table) == args.table]
    waiting = not_snapshotted(pipeline, [str(s.table) for s in selected])
    if len(waiting) == len(selected):
        return _fail([f"{args.config}: {name}: {why}" for name, why in waiting.items()])
    spark = spark_session("airflow-cdc verify", master=args.master)
    verdicts = []
    seed = pipeline.state.read_seed()
    try:
        sink = pipeline.open_sink(spark)
        for schema in selected:
            name = str(schema.table)
            if name in waiting:
                continue
            ranges = [(c.start, c.end) for c in plan.chunks if c.table == schema.table]
            epoch = seed.tables[name].epoch if seed and name in seed.tables else 0
            versions = pipeline.state.table_versions(name, epoch)
            verdicts.append(verify_table(spark, pipeline.source, sink, TableSinkTypes.of(schema), ranges,
                                         stream_version=versions[-1].number if versions else None,
                                         behaviour=cfg.stream.schema_changes_for(name)))
    finally:
        stop_session(spark)
    equal = all(v.equal for v in verdicts) and not waiting
    gone = {name: why_gone(pipeline.state, name) for name in plan.validation.gone}
    if args.json:
        json.dump({"dag_id": cfg.dag_id, "equal": equal, "tables": [v.to_dict() for v in verdicts],
                   "dropped": gone, "not_snapshotted": waiting}, sys.stdout, indent=2)
        print()
    else:
        print(f"Verify {cfg.dag_id}: source {pipeline.source.describe()} vs {sink.describe()}")
        for name, how in gone.items():
            print(f"  {name:<40} DROPPED   not on the source any more ({how})")
        for name, why in waiting.items():
            print(f"  {name:<40} NOT YET   {why}")
        for v in verdicts:
            bad = [c for c in v.chunks if c.differing]
            status = "EQUAL" if v.equal else "DIFFERENT"
            at = "" if v.sink_version is None else f", schema version {v.sink_version}" + (
                "" if v.stream_version in (None, v.sink_version) else f" (the stream's: {v.stream_version})")
            if v.missing_columns or v.extra_columns:
                print(f"  {v.table:<40} {status:<9} columns differ" + at)
                if v.missing_columns:
                    print(f"      not in the sink: {', '.join(v.missing_columns)}")
                if v.extra_columns:
                    print(f"      in the sink, not on the source: {', '.join(v.extra_columns)}")
                continue
            print(f"  {v.table:<40} {status:<9} source {v.source_rows} rows, sink {v.sink_rows} rows, "
                  f"{len(v.chunks)} chunk(s)" + (f", {len(bad)} differ" if bad else "") + at)
            if v.kept_apart:
                print("      not compared (kept so by stream.schema_changes): "
                      + "; ".join(f"{k}: {', '.join(c)}" for k, c in v.kept_apart.items() if c))
            for c in bad[:10]:
                print(f"      chunk {c.chunk}: source {c.source_rows} rows (checksum {c.source_checksum:016x}), "
                      f"sink {c.sink_rows} rows (checksum {c.sink_checksum:016x}), {c.differing} differing")
            for d in v.first_differences:
                print(f"      key {format_key(d['key'])}: {d['problem']}")
        print("source == sink" if equal else "source and sink DIFFER")
    return 0 if equal else 1


def not_snapshotted(pipeline, tables: list[str]) -> dict[str, str]:
    """The tables whose sink holds no finished snapshot yet (the pipeline has not run, or their first snapshot is
    under way): their sink is not the source's rows, and saying so beats listing every key as missing."""
    finished = pipeline.state.finished_tables()
    startup = pipeline.config.stream.startup
    why = (f"no finished snapshot in the sink yet: run the pipeline first (airflow dags trigger "
           f"{pipeline.config.dag_id}), then look again" if startup == "initial" else
           f"not snapshotted: stream.startup {startup} streams without a snapshot, so the sink holds only the "
           "changes from there on and cannot equal the source")
    return {t: why for t in tables if t not in finished}


MATERIALIZED_MARKER = "_MATERIALIZED"


def unsafe_output(output: str) -> str | None:
    """Why writing a table over ``output`` (a local path or any URI the state store opens) could destroy
    something, if it could: Spark's overwrite empties the directory first, which is right for an earlier
    materialize (the marker it writes last says so: Spark's own ``_SUCCESS`` is in any Spark output) and wrong for
    anything else."""
    from airflow_cdc_provider.state.storage import Storage, StorageError

    try:
        out = Storage(output, key="--output")
        if not out.exists(""):
            return None
        if out.fs.isfile(out.path()):
            return "is a file; give a directory to write the table's parquet files into"
        names = out.listdir("")
    except StorageError as exc:
        return str(exc).split(": ", 1)[-1]
    except Exception as exc:  # noqa: BLE001 - credentials, a missing native library: the check cannot be made
        return (f"cannot be looked at through fsspec ({type(exc).__name__}: {exc}); materialize empties it first, so "
                "it checks it first: give the fsspec package of its scheme the credentials Spark has, or a local path")
    if names and MATERIALIZED_MARKER not in names:
        return (f"is a directory with files that no finished airflow-cdc materialize wrote (no {MATERIALIZED_MARKER} "
                "marker, written last; an older airflow-cdc wrote none); it would be emptied first: give a new or empty "
                "directory (empty it yourself if an earlier materialize into it failed)")
    return None


def _default_filesystem(spark) -> str | None:
    """The filesystem Spark writes a path without a scheme to (``fs.defaultFS``), when it is not the local one
    the output check looked at; None where it is (or where the session does not say: Spark Connect)."""
    try:
        fs = spark.sparkContext._jsc.hadoopConfiguration().get("fs.defaultFS")
    except Exception:  # noqa: BLE001 - Spark Connect has no JVM here; its server resolves the path
        fs = spark.conf.get("spark.hadoop.fs.defaultFS", None)
    return None if not fs or fs.startswith("file:") else fs


def _mark_materialized(output: str, table: str, rows: int) -> None:
    from airflow_cdc_provider.state.storage import Storage

    Storage(output, key="--output").write_text(MATERIALIZED_MARKER, json.dumps({"table": table, "rows": rows}))


def cmd_materialize(args: argparse.Namespace) -> int:
    from airflow_cdc_provider.sinks.types import TableSinkTypes
    from airflow_cdc_provider.spark.session import spark_session, stop_session

    try:
        cfg, pipeline, plan = _spark_pipeline(args)
    except (ConfigError, ConnectionConfigError, SourceError, ValueError, RuntimeError) as exc:
        return _fail(str(exc).splitlines())
    # a stream started without a snapshot (stream.startup other than initial) holds the changes since: those are
    # the table's state to write out
    waiting = not_snapshotted(pipeline, [args.table]) if cfg.stream.startup == "initial" else {}
    if waiting:
        return _fail([f"{args.config}: {args.table}: {waiting[args.table]}"])
    if problem := unsafe_output(args.output):
        return _fail([f"--output {args.output}: {problem}"])
    schema = next(s for s in plan.schemas if str(s.table) == args.table)
    spark = spark_session("airflow-cdc materialize", master=args.master)
    try:
        if "://" not in args.output and (fs := _default_filesystem(spark)):
            return _fail([f"--output {args.output}: a path without a scheme is on {fs} to Spark (fs.defaultFS), "
                          "not on the local disk this command checked: give the full URI (file:///... or "
                          f"{fs.rstrip('/')}/...)"])
        df = pipeline.open_sink(spark).current_state(TableSinkTypes.of(schema))
        df.write.mode("overwrite").parquet(args.output)
        n = spark.read.parquet(args.output).count()
        _mark_materialized(args.output, args.table, n)
    finally:
        stop_session(spark)
    print(f"{args.table}: {n} rows written to {args.output}")
    return 0


def _state_of(config: str) -> StateStore:
    from airflow_cdc_provider.pipeline.resolve import resolve_state

    return resolve_state(load_config(config))


def cmd_status(args: argparse.Namespace) -> int:
    import time

    try:
        state = _state_of(args.config)
    except ConfigError as exc:
        return _fail(str(exc).splitlines())
    status = state.read_status()
    if status is None:
        return _fail([f"{args.config}: no stream status in {state.uri} yet (the stream has not run)"])
    launch = state.read_launch()
    out = {**status.to_dict(), "heartbeat_age_seconds": round(time.time() - status.updated_at, 1),
           "launch": launch.to_dict() if launch else None}
    json.dump(out, sys.stdout, indent=2)
    print()
    return 0


def cmd_stop(args: argparse.Namespace) -> int:
    import time

    try:
        state = _state_of(args.config)
    except ConfigError as exc:
        return _fail(str(exc).splitlines())
    status = state.read_status()
    if status is None or status.state in FINAL_STATES:
        print(f"no stream is running ({'it has not run' if status is None else 'stream ' + status.state}): "
              "nothing to stop")
        return 0
    state.request_stop()
    print(f"stop requested in {state.uri}: the stream stops after its current batch")
    deadline = time.time() + args.wait
    while time.time() < deadline:
        status = state.read_status()
        if status is not None and status.state in FINAL_STATES:
            print(f"stream {status.state}")
            return 0
        time.sleep(1)
    return 0 if args.wait == 0 else _fail([f"the stream did not stop within {args.wait}s"])


def cmd_uncapture(args: argparse.Namespace) -> int:
    from airflow_cdc_provider.pipeline.resolve import resolve_state
    from airflow_cdc_provider.pipeline.uncapture import UncaptureError, uncapture

    try:
        cfg = load_config(args.config)
        done = uncapture(cfg, resolve_state(cfg), args.table, force=args.force)
    except (ConfigError, UncaptureError) as exc:
        return _fail(str(exc).splitlines())
    print(done.describe())
    return 0


def airflow_json_output(output: str) -> list:
    """The JSON list an ``airflow ... --output json`` command printed: its last line starting with ``[`` (its log
    lines go to stdout too); empty if there is none."""
    for line in reversed(output.splitlines()):
        if line.startswith("["):
            try:
                return json.loads(line)
            except ValueError:
                continue
    return []


def cmd_resnapshot(args: argparse.Namespace) -> int:
    """Trigger a re-snapshot run. A continuous pipeline's running stream goes on and takes the new snapshots
    up when the run has finished them; otherwise the run's stream task streams as any run's does."""
    import shlex
    import subprocess

    from airflow_cdc_provider.pipeline.resolve import resolve_pipeline

    try:
        cfg = load_config(args.config)
        captured = resolve_pipeline(cfg).captured_tables()
    except ConfigError as exc:
        return _fail(str(exc).splitlines())
    except (ConnectionConfigError, SourceError, ValueError) as exc:
        return _fail([f"{args.config}: source: {exc}"])
    unknown = sorted(set(args.table) - set(captured))
    if unknown:
        from airflow_cdc_provider.core.hints import did_you_mean

        return _fail([f"{args.config}: --table {t}: not a table this pipeline captures"
                      f"{did_you_mean(t, sorted(captured))}; it captures: {', '.join(sorted(captured)) or 'none'}"
                      for t in unknown])
    tables = sorted(set(args.table))
    command = [sys.executable, "-m", "airflow", "dags", "trigger", cfg.dag_id, "--conf",
               json.dumps({"resnapshot": tables}), "--output", "json"]
    if args.print:
        print(shlex.join(command))
        return 0
    res = subprocess.run(command, capture_output=True, text=True)
    if res.returncode != 0:
        return _fail([f"airflow dags trigger {cfg.dag_id} failed (exit {res.returncode}): "
                      f"{(res.stderr.strip().splitlines() or ['no output'])[-1]}"])
    run = next((r for r in airflow_json_output(res.stdout) if isinstance(r, dict)), {})
    print(f"re-snapshot of {', '.join(tables)}: DAG run {run.get('dag_run_id', '(id not reported)')} of {cfg.dag_id} "
          f"{run.get('state', 'triggered')}")
    return 0


def cmd_maintain(args: argparse.Namespace) -> int:
    from airflow_cdc_provider.sinks.base import SinkError
    from airflow_cdc_provider.sinks.delta_maintenance import maintain_pipeline

    try:
        report = maintain_pipeline(load_config(args.config))
    except (ConfigError, SinkError) as exc:
        return _fail(str(exc).splitlines())
    if args.json:
        json.dump(report.to_dict(), sys.stdout, indent=2)
        print()
        return 0
    print(f"Maintain {report.dag_id}: compaction and VACUUM")
    for t in report.tables:
        print(f"  {t.describe()}")
    for table in report.skipped:
        print(f"  {table}: no Delta table yet")
    if not report.tables and not report.skipped:
        print("  no table captured yet: the pipeline has not run")
    return 0


def cmd_schema(args: argparse.Namespace) -> int:
    from airflow_cdc_provider.pipeline.config import pipeline_json_schema

    json.dump(pipeline_json_schema(), sys.stdout, indent=2, sort_keys=True)
    print()
    return 0


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="airflow-cdc", description="MySQL/MariaDB CDC pipelines for Airflow and Spark")
    sub = ap.add_subparsers(dest="command", required=True)
    p = sub.add_parser("plan", help="validate the source and print the chunk plan of a pipeline YAML")
    p.add_argument("config", help="pipeline YAML file")
    p.add_argument("--json", action="store_true", help="print the plan as JSON")
    p.add_argument(
        "--max-tasks", type=int, default=DEFAULT_MAX_TASKS,
        help="group chunks so there are at most this many mapped tasks (Airflow [core] max_map_length)",
    )
    p.set_defaults(func=cmd_plan)
    v = sub.add_parser("verify", help="compare the source with the sink chunk by chunk (exit 1 if they differ)")
    v.add_argument("config", help="pipeline YAML file")
    v.add_argument("--table", help="only this table (db.table)")
    v.add_argument("--json", action="store_true", help="print the result as JSON")
    v.add_argument("--master", default="local[2]", help="Spark master for the comparison (default local[2])")
    v.set_defaults(func=cmd_verify)
    m = sub.add_parser("materialize", help="write a table's current state from the sink to Parquet")
    m.add_argument("config", help="pipeline YAML file")
    m.add_argument("--table", required=True, help="db.table")
    m.add_argument("--output", required=True, help="output directory: new, empty or an earlier materialize's (then replaced)")
    m.add_argument("--master", default="local[2]", help="Spark master (default local[2])")
    m.set_defaults(func=cmd_materialize)
    st = sub.add_parser("status", help="print the stream's status heartbeat as JSON")
    st.add_argument("config", help="pipeline YAML file")
    st.set_defaults(func=cmd_status)
    sp = sub.add_parser("stop", help="ask the pipeline's running stream to stop after its current batch")
    sp.add_argument("config", help="pipeline YAML file")
    sp.add_argument("--wait", type=float, default=0, help="wait up to this many seconds for the stop (default: don't)")
    sp.set_defaults(func=cmd_stop)
    rs = sub.add_parser("resnapshot", help="trigger the pipeline's DAG to snapshot tables again (the stream goes on)")
    rs.add_argument("config", help="pipeline YAML file")
    rs.add_argument("--table", action="append", required=True, help="db.table to snapshot again (repeatable)")
    rs.add_argument("--print", action="store_true", help="print the airflow command instead of running it")
    rs.set_defaults(func=cmd_resnapshot)
    uc = sub.add_parser("uncapture", help="stop streaming a table taken out of source.tables (its sink data stays)")
    uc.add_argument("config", help="pipeline YAML file")
    uc.add_argument("--table", required=True, help="db.table, no longer in source.tables")
    uc.add_argument("--force", action="store_true", help="even though a snapshot of it was planned (its run failed)")
    uc.set_defaults(func=cmd_uncapture)
    mt = sub.add_parser("maintain", help="compact and vacuum the Delta tables of a delta pipeline")
    mt.add_argument("config", help="pipeline YAML file")
    mt.add_argument("--json", action="store_true", help="print the report as JSON")
    mt.set_defaults(func=cmd_maintain)
    sc = sub.add_parser("schema", help="print the JSON Schema of the pipeline YAML (for editors)")
    sc.set_defaults(func=cmd_schema)
    return ap


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except BrokenPipeError:  # the reader of the output went away (``| head``): no traceback, as other tools
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # Python's flush at exit must not fail
        return 1


if __name__ == "__main__":
    sys.exit(main())
