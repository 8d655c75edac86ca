"""The shared tracking store (``creditbench server``): a real PostgreSQL and a real ``mlflow server``
with proxied artifacts; a sweep, ``summarize``, ``eval --model <run id>`` and ``ui`` through its http
URI, and a server that is down refused in one line before anything starts.

The tests marked ``server`` need PostgreSQL's binaries (Debian: apt-get install postgresql):
    bash tests/run.sh -m server tests/tracking/test_server.py
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
import yaml
from tiny_sweep import SPEC

from bench.cli import main
from bench.errors import CreditBenchError
from bench.tracking import server

REPO = Path(__file__).resolve().parents[2]
NAME = "shared"


def _server_dir(tmp_path_factory) -> Path:
    """A folder for the server; as root, one the ``postgres`` user can reach (pytest's are private)."""
    if os.geteuid() != 0:
        return tmp_path_factory.mktemp("server")
    d = Path(tempfile.mkdtemp(prefix="creditbench-server-"))
    d.chmod(0o755)
    return d


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    root = _server_dir(tmp_path_factory)
    try:
        with server.tracking_server(root, server.free_port(), server.free_port(), workers=2) as uri:
            yield uri, root
    finally:
        if os.geteuid() == 0:
            shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="module")
def swept(store, tmp_path_factory, warm_cache):
    """A 2-run sweep (grpo, seeds 0 and 1) run against the server by ``creditbench sweep``."""
    uri, _ = store
    root = tmp_path_factory.mktemp("sweep")
    spec = root / f"{NAME}.yaml"
    spec.write_text(yaml.safe_dump({**SPEC, "name": NAME, "methods": ["grpo"]}))
    results = root / "results"
    env = {**os.environ, "CREDITBENCH_CACHE": warm_cache, "MLFLOW_TRACKING_URI": uri}
    cmd = [sys.executable, "-m", "bench.cli", "sweep", str(spec), "--jobs", "2", "--results_dir", str(results)]
    p = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, env=env)
    assert p.returncode == 0, (p.stdout[-2000:], p.stderr[-3000:])
    return results


def _runs(uri: str):
    from mlflow.tracking import MlflowClient

    client = MlflowClient(uri)
    exp = client.get_experiment_by_name(SPEC.get("experiment", "creditbench"))
    runs = client.search_runs([exp.experiment_id], f"tags.sweep = '{NAME}'")
    parents = [r for r in runs if r.data.tags.get("kind") == "sweep"]
    children = [r for r in runs if r.data.tags.get("kind") == "rl"]
    return client, parents, children


@pytest.mark.server
def test_a_sweep_lands_in_postgresql_as_children_of_one_parent_with_proxied_artifacts(store, swept):
    uri, root = store
    client, parents, children = _runs(uri)
    assert len(parents) == 1 and parents[0].info.status == "FINISHED"
    assert len(children) == 2 and len({r.data.tags["run_key"] for r in children}) == 2
    for r in children:
        assert r.info.status == "FINISHED" and r.data.tags["mlflow.parentRunId"] == parents[0].info.run_id
        assert r.info.artifact_uri.startswith("mlflow-artifacts:/"), r.info.artifact_uri
        names = {a.path for a in client.list_artifacts(r.info.run_id)}
        assert {"config.yaml", "policy"} <= names, names
        assert (root / "artifacts" / r.info.experiment_id / r.info.run_id / "artifacts" / "config.yaml").is_file()
    # the runs are PostgreSQL's rows, not a file next to the sweep
    import psycopg2

    os.environ["PGPASSFILE"] = str(root / "pgpass")
    port = int(next(a for a in _pg_opts(root) if a.isdigit()))
    with psycopg2.connect(host="127.0.0.1", port=port, user=server.DB_USER, dbname=server.DB_NAME) as conn:
        with conn.cursor() as cur:
            cur.execute("SELECT run_uuid FROM runs")
            rows = {row[0] for row in cur.fetchall()}
    assert {r.info.run_id for r in [*parents, *children]} <= rows
    assert not list(swept.parent.glob("**/*.db"))


def _pg_opts(root: Path) -> list[str]:
    """The arguments the running cluster was started with (postmaster.opts)."""
    return (root / "pg" / "postmaster.opts").read_text().replace('"', " ").split()


@pytest.mark.server
def test_summarize_logs_the_report_to_the_sweeps_parent_run(store, swept, capsys):
    uri, _ = store
    client, parents, _ = _runs(uri)
    args = ["summarize", "--sweep", NAME, "--results_dir", str(swept), "--no_plots", "--uri", uri]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert f"logged to the sweep's parent MLflow run {parents[0].info.run_id} in {uri}" in out, out
    assert {"report/report.json", "report/summary.md"} <= {
        a.path for a in client.list_artifacts(parents[0].info.run_id, "report")
    }


@pytest.mark.server
def test_eval_of_a_run_id_downloads_its_policy_through_the_server(store, swept, tmp_path):
    from bench.cli.eval import main as eval_main

    uri, _ = store
    _, _, children = _runs(uri)
    run = children[0]
    policy = Path(run.data.tags["policy_dir"])
    policy.rename(policy.with_name("policy-moved"))  # not on this machine: the artifact it is
    out = tmp_path / "eval.json"
    args = ["--model", run.info.run_id, "--uri", uri, "--n", "1", "--k", "1", "--num_problems", "4"]
    assert eval_main([*args, "--out", str(out)]) == 0
    import json

    got = json.loads(out.read_text())
    assert got["model"] == f"runs:/{run.info.run_id}/policy" and got["task"] == "arithmetic"
    from mlflow.tracking import MlflowClient

    linked = MlflowClient(uri).get_run(got["mlflow_run_id"])
    assert linked.data.tags["training_run_id"] == run.info.run_id


@pytest.mark.server
def test_ui_of_a_server_prints_its_own_ui_and_the_experiments(store, swept, capsys):
    uri, _ = store
    assert main(["ui", "--uri", uri]) == 0
    out = capsys.readouterr().out
    assert f"MLflow UI of the tracking server: {uri}" in out
    assert f"{uri}/#/experiments/" in out and "workflowType=machine_learning" in out, out


@pytest.mark.parametrize("command", ["sweep", "eval", "ui"])
def test_a_server_that_is_down_is_one_line_and_starts_nothing(tmp_path, command):
    """No server there (nothing listens on the port): one line, exit 2, no results folder."""
    down = f"http://127.0.0.1:{server.free_port()}"
    spec = tmp_path / "down.yaml"
    spec.write_text(yaml.safe_dump({**SPEC, "name": "down", "methods": ["grpo"]}))
    results = tmp_path / "results"
    argv = {
        "sweep": ["sweep", str(spec), "--results_dir", str(results)],
        "eval": ["eval", "--model", "0" * 32, "--task", "arithmetic"],
        "ui": ["ui"],
    }[command]
    env = {**os.environ, "MLFLOW_TRACKING_URI": down}
    cmd = [sys.executable, "-m", "bench.cli", *argv, "--uri", down]
    p = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp_path, env=env)
    err = p.stderr.strip().splitlines()
    assert p.returncode == 2 and len(err) == 1, p.stderr[-2000:]
    assert f"cannot reach MLflow tracking server '{down}'" in err[0], err
    assert not results.exists() and not (tmp_path / "mlflow.db").exists()


def test_missing_postgresql_is_one_line_naming_the_package(monkeypatch, tmp_path):
    monkeypatch.setattr(server, "Path", lambda p: tmp_path / "none" if p == "/usr/lib/postgresql" else Path(p))
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(CreditBenchError) as e:
        server.pg_binary("initdb")
    assert "apt-get install postgresql" in str(e.value) and "\n" not in str(e.value)


@pytest.mark.server
def test_the_command_prints_the_uri_and_stops_with_one_line(tmp_path_factory):
    root = _server_dir(tmp_path_factory)
    port, db_port = server.free_port(), server.free_port()
    cmd = [sys.executable, "-m", "bench.cli", "server", "--dir", str(root), "--port", str(port)]
    p = subprocess.Popen(
        [*cmd, "--db_port", str(db_port), "--workers", "1"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        first = p.stdout.readline().strip()
        assert first == f"MLFLOW_TRACKING_URI=http://127.0.0.1:{port}", (first, p.stderr.read() if p.poll() else "")
        assert main(["ui", "--uri", f"http://127.0.0.1:{port}"]) == 0
        # a second server from the same folder is refused
        again = subprocess.run([*cmd, "--db_port", str(db_port)], capture_output=True, text=True)
        assert again.returncode == 2 and "already runs from" in again.stderr
        stop = subprocess.run([*cmd, "--stop"], capture_output=True, text=True, timeout=120)
        assert stop.returncode == 0 and "stopped" in stop.stdout, stop.stderr
        out, _ = p.communicate(timeout=60)
        assert p.returncode == 0 and out.strip().splitlines()[-1].startswith("stopped MLflow and PostgreSQL")
        assert server.port_free("127.0.0.1", port) and server.port_free("127.0.0.1", db_port)
    finally:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
            p.wait(60)
        time.sleep(0.1)
        if os.geteuid() == 0:
            shutil.rmtree(root, ignore_errors=True)
