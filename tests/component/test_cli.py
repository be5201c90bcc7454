"""``airflow-cdc plan``, run as the installed console script against the private MariaDB."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

CLI = str(Path(sys.executable).parent / "airflow-cdc")


def run(config: Path, *args: str, env_extra=None, tmp_path=None):
    env = {**os.environ, "AIRFLOW_HOME": str(tmp_path or config.parent), **(env_extra or {})}
    return subprocess.run([CLI, "plan", str(config), *args], capture_output=True, text=True, env=env, timeout=120)


@pytest.fixture
def pipeline(source_db, tmp_path):
    source_db.execute("CREATE TABLE orders (id INT PRIMARY KEY, amount INT)")
    source_db.executemany("INSERT INTO orders VALUES (%s, 1)", [(i,) for i in range(101, 111)])
    source_db.analyze("orders")
    source_db.execute("CREATE TABLE audit (msg VARCHAR(10))")

    def write(tables, extra=""):
        p = tmp_path / "shop.yaml"
        p.write_text(f"source:\n  conn_id: src\n  tables: {json.dumps(tables)}\nsnapshot:\n  chunk_size: 4\n{extra}")
        return p

    env = {"AIRFLOW_CONN_SRC": source_db.server.connection_uri()}
    return write, env


def test_plan_prints_the_chunks(pipeline, source_db):
    write, env = pipeline
    res = run(write([source_db.table("orders")]), env_extra=env)
    assert res.returncode == 0, res.stderr
    assert f"{source_db.table('orders')}  key (id)  3 chunk(s)" in res.stdout
    assert "(-inf, 105)" in res.stdout and "[105, 109)" in res.stdout and "[109, +inf)" in res.stdout
    assert source_db.server.cdc.password not in res.stdout + res.stderr


def test_plan_json(pipeline, source_db):
    write, env = pipeline
    res = run(write([source_db.table("orders")]), "--json", env_extra=env)
    assert res.returncode == 0, res.stderr
    plan = json.loads(res.stdout)
    assert [(c["start"], c["end"]) for c in plan["tables"][0]["chunks"]] == [(None, [105]), ([105], [109]), ([109], None)]
    assert len(plan["tasks"]) == 1 and len(plan["tasks"][0]["chunks"]) == 3  # rows_per_task: one Spark app
    # one task per chunk (rows_per_task = chunk_size), capped by --max-tasks (Airflow's max_map_length)
    res = run(write([source_db.table("orders")], "  rows_per_task: 4\n"), "--json", "--max-tasks", "2", env_extra=env)
    plan = json.loads(res.stdout)
    assert len(plan["tasks"]) == 2 and sum(len(t["chunks"]) for t in plan["tasks"]) == 3


def one_line_error(res):
    assert res.returncode == 2, (res.stdout, res.stderr)
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1, res.stderr
    assert lines[0].startswith("airflow-cdc: error: ")
    return lines[0]


def test_unknown_table(pipeline, source_db):
    write, env = pipeline
    line = one_line_error(run(write([source_db.table("ordrs")]), env_extra=env))
    assert f"source: unknown table '{source_db.table('ordrs')}' (did you mean '{source_db.table('orders')}'?)" in line


def test_table_without_key(pipeline, source_db):
    write, env = pipeline
    line = one_line_error(run(write([source_db.table("audit")]), env_extra=env))
    assert f"table '{source_db.table('audit')}' has no primary key: set a chunk key column" in line


def test_yaml_typo(pipeline, source_db):
    write, env = pipeline
    path = write([source_db.table("orders")], extra="  chunk_sise: 4\n")
    line = one_line_error(run(path, env_extra=env))
    assert line.startswith(f"airflow-cdc: error: {path}: snapshot.chunk_sise: unknown key (did you mean 'chunk_size'?")


def test_unknown_connection(pipeline, source_db, tmp_path):
    write, _ = pipeline
    line = one_line_error(run(write([source_db.table("orders")]), tmp_path=tmp_path))
    assert "unknown connection 'src': create it in Airflow" in line and "AIRFLOW_CONN_SRC=" in line


def test_wrong_password(pipeline, source_db):
    write, _ = pipeline
    bad = source_db.server.connection_uri().replace(source_db.server.cdc.password, "Wr0ngPa55")
    res = run(write([source_db.table("orders")]), env_extra={"AIRFLOW_CONN_SRC": bad})
    line = one_line_error(res)
    assert "cannot connect to src (cdc@127.0.0.1:" in line and "check the login and password" in line
    assert "Wr0ngPa55" not in res.stderr + res.stdout


def test_unreachable_host(pipeline, source_db, mariadb):
    from airflow_cdc_provider.testing.mariadb import free_port

    write, _ = pipeline
    dead = source_db.server.connection_uri().replace(f":{mariadb.port}", f":{free_port()}")
    line = one_line_error(run(write([source_db.table("orders")]), env_extra={"AIRFLOW_CONN_SRC": dead}))
    assert "cannot connect to src (cdc@127.0.0.1:" in line
    assert "check the host and port of the connection and that the server is running" in line


@pytest.mark.parametrize("key", ["state", "sink"])
def test_unwritable_state_or_sink_path(pipeline, source_db, tmp_path, key):
    write, env = pipeline
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    path = write([source_db.table("orders")], extra=f"{key}:\n  path: {blocker / 'sub'}\n")
    line = one_line_error(run(path, env_extra=env))
    assert line.startswith(f"airflow-cdc: error: {path}: {key} path '{blocker / 'sub'}' is not writable (Not a directory)")
    assert f"set {key}.path to a directory the Airflow workers and Spark driver can write" in line


@pytest.mark.parametrize("key", ["state", "sink"])
def test_state_or_sink_uri_this_machine_cannot_open(pipeline, source_db, key):
    write, env = pipeline
    path = write([source_db.table("orders")], extra=f"{key}:\n  path: gs://bucket/cdc\n")
    line = one_line_error(run(path, env_extra=env))
    assert line.startswith(f"airflow-cdc: error: {path}: {key}.path 'gs://bucket/cdc': cannot open gs:// here"), line
    assert "install gcsfs on the Airflow workers and the Spark cluster, or use a local path or file:// URI" in line


def test_every_yaml_problem_is_one_error_line(pipeline, source_db):
    write, env = pipeline
    path = write([source_db.table("orders")], extra="  chunk_sise: 4\nstream: {mode: sometimes}\n")
    res = run(path, env_extra=env)
    lines = res.stderr.strip().splitlines()
    assert res.returncode == 2 and len(lines) == 2, res.stderr
    assert all(line.startswith(f"airflow-cdc: error: {path}: ") for line in lines)
    assert "snapshot.chunk_sise: unknown key" in lines[0] + lines[1] and "stream.mode: 'sometimes'" in res.stderr


def test_schema_prints_the_published_json_schema():
    res = subprocess.run([CLI, "schema"], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    published = Path(__file__).resolve().parents[2] / "docs" / "pipeline.schema.json"
    assert json.loads(res.stdout) == json.loads(published.read_text())
    assert "chunk_size" in json.dumps(json.loads(res.stdout)["$defs"])


def test_maintain_is_for_the_delta_sink_and_needs_no_source(tmp_path):
    def maintain(sink: str):
        p = tmp_path / "shop.yaml"
        p.write_text(f"source: {{conn_id: nowhere, tables: [shop.orders]}}\nsink: {sink}\n"
                     f"state: {{path: {tmp_path / 'state'}}}\n")
        env = {**os.environ, "AIRFLOW_HOME": str(tmp_path)}
        return subprocess.run([CLI, "maintain", str(p)], capture_output=True, text=True, env=env, timeout=120)

    res = maintain("{type: parquet}")
    assert res.returncode == 2 and "sink.type is 'parquet': maintenance (compaction, VACUUM) is for the delta" in \
        res.stderr, res.stderr
    res = maintain(f"{{type: delta, path: {tmp_path / 'lake'}}}")  # the connection is never resolved
    assert res.returncode == 0, res.stderr
    assert res.stdout.splitlines() == ["Maintain shop: compaction and VACUUM",
                                       "  no table captured yet: the pipeline has not run"], res.stdout


def test_resnapshot_checks_the_tables_then_triggers_the_dag_through_airflow(pipeline, source_db, tmp_path):
    write, env = pipeline
    config = write([source_db.table("orders")], f"state:\n  path: {tmp_path / 'state'}\n")
    env = {**os.environ, "AIRFLOW_HOME": str(tmp_path), **env}
    typo = source_db.table("order")
    res = subprocess.run([CLI, "resnapshot", str(config), "--table", typo], capture_output=True, text=True, env=env,
                         timeout=120)
    line = one_line_error(res)
    assert (f"--table {typo}: not a table this pipeline captures (did you mean '{source_db.table('orders')}'?); it "
            f"captures: {source_db.table('orders')}") in line
    res = subprocess.run([CLI, "resnapshot", str(config), "--table", source_db.table("orders"), "--print"],
                         capture_output=True, text=True, env=env, timeout=120)
    assert res.returncode == 0, res.stderr
    words = shlex.split(res.stdout)
    assert words[1:7] == ["-m", "airflow", "dags", "trigger", "shop", "--conf"], words
    assert json.loads(words[7]) == {"resnapshot": [source_db.table("orders")]} and words[8:] == ["--output", "json"]


def test_verify_and_materialize_before_any_snapshot_say_so_instead_of_listing_every_key(pipeline, source_db, tmp_path):
    write, env = pipeline
    config = write([source_db.table("orders")], f"state:\n  path: {tmp_path / 'state'}\n")
    envs = {**os.environ, "AIRFLOW_HOME": str(tmp_path), **env}
    why = (f"{config}: {source_db.table('orders')}: no finished snapshot in the sink yet: run the pipeline first "
           "(airflow dags trigger shop), then look again")
    for args in (["verify", str(config)], ["materialize", str(config), "--table", source_db.table("orders"),
                                           "--output", str(tmp_path / "out")]):
        res = subprocess.run([CLI, *args], capture_output=True, text=True, env=envs, timeout=120)
        assert res.returncode != 0 and why in res.stderr + res.stdout, (args, res.stdout, res.stderr)
    assert not (tmp_path / "out").exists()


def test_materialize_refuses_to_empty_a_directory_it_did_not_write(pipeline, source_db, tmp_path):
    write, env = pipeline
    config = write([source_db.table("orders")], f"state:\n  path: {tmp_path / 'state'}\nstream:\n  startup: latest\n")
    envs = {**os.environ, "AIRFLOW_HOME": str(tmp_path), **env}
    (tmp_path / "home").mkdir()
    (tmp_path / "home" / "notes.txt").write_text("mine")
    (tmp_path / "file.parquet").write_text("mine")
    (tmp_path / "spark_output").mkdir()  # any Spark output has a _SUCCESS file
    (tmp_path / "spark_output" / "_SUCCESS").write_text("")
    (tmp_path / "spark_output" / "part-0.parquet").write_text("mine")
    for output, problem in ((tmp_path / "home", "is a directory with files that no finished airflow-cdc materialize "
                                                "wrote (no _MATERIALIZED marker, written last; an older "
                                                "airflow-cdc wrote none); it would be emptied first"),
                            (tmp_path / "file.parquet", "is a file"),
                            (f"file://{tmp_path / 'home'}", "is a directory with files that no finished"),
                            (tmp_path / "spark_output", "is a directory with files that no finished")):
        res = subprocess.run([CLI, "materialize", str(config), "--table", source_db.table("orders"), "--output",
                              str(output)], capture_output=True, text=True, env=envs, timeout=120)
        assert res.returncode != 0 and f"--output {output}: {problem}" in res.stderr, res.stderr
    assert (tmp_path / "home" / "notes.txt").read_text() == "mine"
    assert (tmp_path / "file.parquet").read_text() == "mine"
    assert (tmp_path / "spark_output" / "part-0.parquet").read_text() == "mine"


def test_materialize_refuses_a_path_without_a_scheme_that_spark_puts_on_another_filesystem(pipeline, source_db,
                                                                                            tmp_path):
    """The output check looks at the local disk; with an HDFS ``fs.defaultFS`` Spark would empty and write another
    directory than the one checked."""
    write, env = pipeline
    config = write([source_db.table("orders")], f"state:\n  path: {tmp_path / 'state'}\nstream:\n  startup: latest\n")
    conf_dir = tmp_path / "spark-conf"
    conf_dir.mkdir()
    (conf_dir / "spark-defaults.conf").write_text("spark.hadoop.fs.defaultFS hdfs://127.0.0.1:9/\n")
    envs = {**os.environ, "AIRFLOW_HOME": str(tmp_path), "SPARK_CONF_DIR": str(conf_dir), **env}
    output = tmp_path / "out"
    res = subprocess.run([CLI, "materialize", str(config), "--table", source_db.table("orders"), "--output",
                          str(output), "--master", "local[1]"], capture_output=True, text=True, env=envs, timeout=300)
    assert res.returncode != 0, res.stdout + res.stderr
    assert (f"--output {output}: a path without a scheme is on hdfs://127.0.0.1:9/ to Spark (fs.defaultFS), not on "
            "the local disk this command checked: give the full URI (file:///... or hdfs://127.0.0.1:9/...)"
            in res.stderr), res.stderr
    assert not output.exists()


def test_stop_without_a_running_stream_says_so_and_asks_nothing(pipeline, source_db, tmp_path):
    write, env = pipeline
    config = write([source_db.table("orders")], f"state:\n  path: {tmp_path / 'state'}\n")
    res = subprocess.run([CLI, "stop", str(config)], capture_output=True, text=True, timeout=120,
                         env={**os.environ, "AIRFLOW_HOME": str(tmp_path), **env})
    assert res.returncode == 0 and res.stdout.strip() == "no stream is running (it has not run): nothing to stop"
    assert not (tmp_path / "state" / "stream" / "stop").exists()


def test_output_cut_short_by_its_reader_ends_without_a_traceback(pipeline, source_db, tmp_path):
    write, env = pipeline
    source_db.executemany("INSERT INTO orders VALUES (%s, 1)", [(i,) for i in range(1000, 5000)])
    source_db.analyze("orders")
    config = write([source_db.table("orders")])  # ~1,000 chunks: more JSON than a pipe holds
    cmd = f"{shlex.quote(CLI)} plan {shlex.quote(str(config))} --json | head -c 10"
    res = subprocess.run(["bash", "-c", cmd], capture_output=True, text=True, timeout=120,
                         env={**os.environ, "AIRFLOW_HOME": str(tmp_path), **env})
    assert len(res.stdout) == 10 and "Traceback" not in res.stderr and "BrokenPipe" not in res.stderr, res.stderr


def test_plan_names_a_table_whose_re_snapshot_is_due(pipeline, source_db, tmp_path):
    """A table snapshotted already but holding a pending resync is shown as what the next run re-snapshots, not
    as snapshotted already."""
    from airflow_cdc_provider.core.chunks import TableId
    from airflow_cdc_provider.core.schema_changes import RESYNC, SchemaChange
    from airflow_cdc_provider.state.store import StateStore

    write, env = pipeline
    table = source_db.table("orders")
    config = write([table], f"state:\n  path: {tmp_path / 'state'}\n")
    StateStore(tmp_path / "state").record_schema_changes([SchemaChange(
        RESYNC, TableId(*table.split(".")), "ALTER TABLE orders MODIFY amount TINYINT", "narrows amount")])
    res = run(config, env_extra=env)
    assert res.returncode == 0, res.stderr
    assert f"{table}  key (id)  3 chunk(s)  (the next run re-snapshots it: resync of {table} (narrows amount)" \
        in res.stdout
    due = json.loads(run(config, "--json", env_extra=env).stdout)["snapshot_due"]
    assert list(due) == [table] and "narrows amount" in due[table]


def test_two_tables_written_to_one_jdbc_mirror_table_are_refused_at_plan(pipeline, source_db, mariadb, postgres):
    """``db.x__y`` and ``db__x.y`` would share the mirror table ``db__x__y``: their rows would overwrite, truncate and
    sweep each other's. The plan refuses the pair, naming both tables, before anything is written."""
    write, env = pipeline
    other = f"{source_db.name}__eu"
    source_db.execute("CREATE TABLE eu__orders (id INT PRIMARY KEY)")
    mariadb.create_database(other)
    try:
        with mariadb.root_connection() as conn, conn.cursor() as cur:
            cur.execute(f"CREATE TABLE `{other}`.orders (id INT PRIMARY KEY)")
        tables = [source_db.table("eu__orders"), f"{other}.orders", source_db.table("orders")]
        sink = "sink: {type: jdbc, conn_id: pg, schema: cli_names}\n"
        res = run(write(tables, sink), env_extra={**env, "AIRFLOW_CONN_PG": postgres.connection_uri()})
        line = one_line_error(res)
        assert (f"source.tables: tables {source_db.table('eu__orders')} and {other}.orders would both be written to "
                f"'{other}__orders' of the jdbc sink") in line, line
        # each name apart is fine, and the parquet sink keeps them apart
        assert run(write(tables[:1] + tables[2:], sink), env_extra={**env, "AIRFLOW_CONN_PG": postgres.connection_uri()}
                   ).returncode == 0
        assert run(write(tables), env_extra=env).returncode == 0
    finally:
        mariadb.drop_database(other)
