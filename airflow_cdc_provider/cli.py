"""The ``airflow-cdc`` console script.

``airflow-cdc plan CONFIG.yaml [--json] [--max-tasks N]`` validates the source and prints the chunk plan.

Errors are one line per problem on stderr, prefixed ``airflow-cdc: error:``, exit code 2; they name the
file, key or table and say what to change.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Sequence

from .config import ConfigError, load_config
from .core.keys import format_key
from .mysql.planner import DEFAULT_MAX_TASKS, ChunkPlan, plan_chunks
from .mysql.server import SourceError
from .mysql.settings import ConnectionConfigError
from .mysql.validation import SourceValidationError

EXIT_USAGE = 2


def _fail(messages: Sequence[str]) -> int:
    for m in messages:
        print(f"airflow-cdc: error: {m}", file=sys.stderr)
    return EXIT_USAGE


def _print_plan(plan: ChunkPlan, title: str) -> None:
    print(title)
    for schema in plan.schemas:
        chunks = [c for c in plan.chunks if c.table == schema.table]
        print(f"\n{schema.table}  key ({', '.join(schema.key_columns)})  {len(chunks)} chunk(s)")
        for c in chunks:
            lo = "(-inf" if c.start is None else f"[{format_key(c.start)}"
            hi = "+inf)" if c.end is None else f"{format_key(c.end)})"
            print(f"  {c.index:>5}  {lo}, {hi}")
    print(f"\n{len(plan.chunks)} chunk(s) in {len(plan.tasks)} task(s)")


def cmd_plan(args: argparse.Namespace) -> int:
    from .connections import resolve_mysql

    try:
        cfg = load_config(args.config)
    except ConfigError as exc:
        return _fail([str(exc)])
    where = f"{args.config}: source"
    try:
        settings = resolve_mysql(cfg.source.conn_id)
        plan = plan_chunks(
            settings,
            cfg.source.tables,
            cfg.snapshot.split_options(),
            cfg.source.chunk_key,
            max_tasks=args.max_tasks,
        )
    except SourceValidationError as exc:
        return _fail([f"{where}: {p}" for p in exc.problems])
    except (ConnectionConfigError, SourceError, ValueError) as exc:
        return _fail([f"{where}: {exc}"])
    if args.json:
        json.dump({"dag_id": cfg.dag_id, "chunk_size": cfg.snapshot.chunk_size, **plan.to_dict()}, sys.stdout, indent=2)
        print()
    else:
        _print_plan(plan, f"Chunk plan of {cfg.dag_id} (source {settings.describe()}, chunk_size {cfg.snapshot.chunk_size})")
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
    return ap


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
