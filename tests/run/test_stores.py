"""A sweep's results folder is known by its store's experiment id and parent run id
(results/<sweep>/store.json), not the store's path: a checkout copied or moved with its mlflow.db goes
on under the new path; a store that does not hold the recorded parent run is refused for a sweep and
never written to by summarize; the older path-only record still works."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from tiny_sweep import SPEC

from bench.errors import CreditBenchError
from bench.tracking.stores import claim_store, log_report, read_record, record_store, store_key

NAME = "mv"


def _store(path: Path, sweep: str = NAME) -> tuple[str, str, str]:
    """A SQLite store at ``path`` holding a parent run of ``sweep``: (uri, experiment id, run id)."""
    import mlflow

    uri = f"sqlite:///{path}"
    c = mlflow.MlflowClient(uri)
    exp = c.create_experiment("creditbench")
    return uri, exp, c.create_run(exp, run_name=sweep, tags={"kind": "sweep", "sweep": sweep}).info.run_id


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    return _store(tmp_path_factory.mktemp("store") / "mlflow.db")


def test_a_folder_is_claimed_by_its_parent_run_wherever_the_store_lies(tmp_path, store):
    uri, exp, run = store
    out = tmp_path / NAME
    out.mkdir()
    assert claim_store(out, uri, NAME) is None and not (out / "store.json").exists()  # claimed once the run exists
    record_store(out, uri, exp, run)
    assert read_record(out) == {"uri": uri, "experiment_id": exp, "parent_run_id": run}
    assert claim_store(out, uri, NAME) == run
    moved = tmp_path / "moved.db"
    shutil.copy(uri[len("sqlite:///") :], moved)
    assert claim_store(out, f"sqlite:///{moved}", NAME) == run  # the same sweep under another path
    before = (out / "store.json").read_bytes()
    record_store(out, f"sqlite:///{moved}", exp, run)  # the same ids: the record stays as it was
    assert (out / "store.json").read_bytes() == before


def test_a_store_without_the_parent_run_is_refused_and_not_created(tmp_path, store):
    uri, exp, run = store
    out = tmp_path / NAME
    out.mkdir()
    record_store(out, uri, exp, run)
    fresh = tmp_path / "fresh.db"
    with pytest.raises(CreditBenchError) as e:
        claim_store(out, f"sqlite:///{fresh}", NAME)
    msg = str(e.value)
    assert "\n" not in msg and run in msg and repr(uri) in msg and "--uri" in msg and "--results_dir" in msg
    assert not fresh.exists()
    other_uri, _, other_run = _store(tmp_path / "other.db", sweep="other")  # a store with another sweep only
    with pytest.raises(CreditBenchError, match="holds no run"):
        claim_store(out, other_uri, NAME)
    record_store(out, uri, exp, other_run)  # a run of the other store, checked there: not this sweep's parent
    with pytest.raises(CreditBenchError, match="is not the parent run of sweep 'mv'"):
        claim_store(out, other_uri, NAME)


def test_the_older_path_record_is_read_and_checked_by_path(tmp_path, store):
    uri, exp, run = store
    out = tmp_path / NAME
    out.mkdir()
    (out / "store.json").write_text(json.dumps({"uri": uri, "store": store_key(uri)}))
    assert claim_store(out, uri, NAME) is None  # accepted: the parent run is found by name, then recorded
    with pytest.raises(CreditBenchError, match="rerun with --uri"):
        claim_store(out, f"sqlite:///{tmp_path / 'other.db'}", NAME)
    (out / "store.json").write_text("[1, 2]")
    with pytest.raises(CreditBenchError, match="is not a store record"):
        claim_store(out, uri, NAME)


def test_summarize_logs_only_to_a_store_holding_the_parent_run(tmp_path, store):
    uri, exp, run = store
    out = tmp_path / NAME
    out.mkdir()
    (out / "report.json").write_text("{}\n")
    record_store(out, uri, exp, run)
    fresh = tmp_path / "fresh.db"
    parent, why = log_report(out, f"sqlite:///{fresh}", "creditbench", NAME)
    assert parent is None and run in why and repr(uri) in why and "--uri" in why and not fresh.exists()
    assert log_report(out, uri, "creditbench", NAME) == (run, "")
    (out / "store.json").write_text(json.dumps({"uri": "sqlite:///elsewhere.db", "store": "sqlite:////elsewhere.db"}))
    parent, why = log_report(out, uri, "creditbench", NAME)  # an older record of another path
    assert parent is None and "'sqlite:///elsewhere.db'" in why


# ------------------------------------------------------------------ a real sweep, copied to another folder
def _sweep(cwd: Path, env: dict, *args: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "bench.cli", "sweep", f"{NAME}.yaml", *args]
    return subprocess.run(cmd, capture_output=True, text=True, cwd=cwd, env=env, timeout=900)


def _summarize(cwd: Path, env: dict) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "bench.cli", "summarize", "--sweep", NAME, "--no-plots"]
    return subprocess.run(cmd, capture_output=True, text=True, cwd=cwd, env=env, timeout=300)


def _files(root: Path) -> dict[Path, bytes]:
    return {p: p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file() and p.name != ".lock"}


@pytest.mark.slow  # two real sweeps and summaries in two folders (about 1-2 minutes; CI runs it)
def test_a_copied_checkout_is_the_same_sweep_and_leaves_the_original_alone(tmp_path, warm_cache):
    env = {k: v for k, v in os.environ.items() if k != "MLFLOW_TRACKING_URI"}
    env["CREDITBENCH_CACHE"] = warm_cache
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    (a / f"{NAME}.yaml").write_text(yaml.safe_dump({**SPEC, "name": NAME, "methods": ["grpo"], "seeds": [0]}))
    first = _sweep(a, env, "--uri", "sqlite:///mlflow.db")
    assert first.returncode == 0, first.stderr[-3000:]
    record = json.loads((a / "results" / NAME / "store.json").read_text())
    assert record["uri"] == "sqlite:///mlflow.db" and set(record) == {"uri", "experiment_id", "parent_run_id"}
    shutil.copytree(a, b)
    original = _files(a)

    again = _sweep(b, env, "--uri", "sqlite:///mlflow.db")  # the same relative URI: B's own store
    assert again.returncode == 0 and "1 finished, 0 to run" in again.stdout, again.stderr[-3000:]
    assert record["parent_run_id"] in again.stdout
    (b / "results" / NAME / "report.json").unlink()
    summary = _summarize(b, env)  # the default store, sqlite:///mlflow.db in B
    assert summary.returncode == 0 and f"parent MLflow run {record['parent_run_id']} in sqlite:///mlflow.db" in (
        summary.stdout
    ), summary.stderr[-3000:]
    assert (b / "results" / NAME / "report.json").is_file()
    assert _files(a) == original  # A's results and store byte for byte

    copied = _files(b)
    refused = _sweep(b, env, "--uri", "sqlite:///fresh.db")
    err = refused.stderr.strip().splitlines()
    assert refused.returncode != 0 and len(err) == 1, refused.stderr[-3000:]
    assert record["parent_run_id"] in err[0] and "'sqlite:///mlflow.db'" in err[0] and "--results_dir" in err[0]
    assert not (b / "fresh.db").exists() and _files(b) == copied and _files(a) == original

    env["MLFLOW_TRACKING_URI"] = "sqlite:///fresh.db"  # summarize against a store without the sweep
    summary = _summarize(b, env)
    assert summary.returncode == 0 and "not logged to MLflow" in summary.stdout, summary.stderr[-3000:]
    assert "'sqlite:///mlflow.db'" in summary.stdout.splitlines()[-1] and not (b / "fresh.db").exists()
    del env["MLFLOW_TRACKING_URI"]

    old = {"uri": "sqlite:///mlflow.db", "store": store_key(f"sqlite:///{b / 'mlflow.db'}")}
    (b / "results" / NAME / "store.json").write_text(json.dumps(old))  # the older record, of B's path
    upgraded = _sweep(b, env, "--uri", "sqlite:///mlflow.db")
    assert upgraded.returncode == 0 and "1 finished, 0 to run" in upgraded.stdout, upgraded.stderr[-3000:]
    assert json.loads((b / "results" / NAME / "store.json").read_text()) == record
    assert _files(a) == original
