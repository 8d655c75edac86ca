"""A method from the user's own package: installed, found through the entry-point group, covered by
the registry-wide contract tests and trained end to end without any edit to creditbench."""

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def plugin_env(tmp_path_factory):
    import shutil

    target = tmp_path_factory.mktemp("site")
    source = tmp_path_factory.mktemp("src") / "plugin"
    shutil.copytree(ROOT / "examples" / "plugin", source)  # building writes build/ next to the sources
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--quiet",
            "--no-deps",
            "--no-build-isolation",
            "--no-index",
            "--target",
            str(target),
            str(source),
        ],
        check=True,
        capture_output=True,
        text=True,
    )
    assert list(target.glob("creditbench_example_plugin-*.dist-info/entry_points.txt"))
    import os

    return {**os.environ, "PYTHONPATH": f"{target}{os.pathsep}{ROOT}", "OMP_NUM_THREADS": "1"}


def _run(env, *argv, **kw):
    return subprocess.run([sys.executable, *argv], env=env, cwd=ROOT, capture_output=True, text=True, **kw)


def test_plugin_is_listed_and_passes_the_contract_tests(plugin_env):
    out = _run(plugin_env, "-c", "from bench.cli import main; raise SystemExit(main(['methods']))")
    assert out.returncode == 0 and "late_credit" in out.stdout and "example plug-in" in out.stdout
    res = _run(
        plugin_env,
        "-m",
        "pytest",
        "tests/methods/test_contract.py",
        "-q",
        "-p",
        "no:cacheprovider",
        "-k",
        "late_credit",
    )
    assert res.returncode == 0, res.stdout[-2000:]
    n_tests = sum(
        1 for line in (ROOT / "tests/methods/test_contract.py").read_text().splitlines() if line.startswith("def test_")
    )
    assert f"{n_tests} passed" in res.stdout, res.stdout[-500:]


def test_plugin_trains_and_lands_in_mlflow(plugin_env, tmp_path):
    from bench.models.policy import build_tiny

    model, tok = build_tiny("tiny-500k", seed=0)
    model.save_pretrained(tmp_path / "policy")
    tok.save_pretrained(tmp_path / "policy")
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    res = _run(
        plugin_env,
        "-c",
        "from bench.cli import main; raise SystemExit(main())",
        "train",
        "--model.name",
        str(tmp_path / "policy"),
        "--method.name",
        "late_credit",
        "--method.options",
        "{slope: 0.5}",
        "--task.options",
        "{train_size: 500}",
        "--rl.steps",
        "2",
        "--rl.prompts_per_step",
        "2",
        "--rl.group_size",
        "2",
        "--rl.sampling.max_new_tokens",
        "8",
        "--eval.num_problems",
        "4",
        "--eval.n",
        "2",
        "--eval.k",
        "[1, 2]",
        "--eval.sampling.max_new_tokens",
        "8",
        "--tracking.uri",
        uri,
        "--no-progress",
        timeout=600,
    )
    assert res.returncode == 0, res.stderr[-3000:]
    import mlflow

    client = mlflow.MlflowClient(uri)
    runs = client.search_runs([client.get_experiment_by_name("creditbench").experiment_id])
    assert len(runs) == 1
    run = runs[0]
    assert run.data.tags["method"] == "late_credit" and run.info.status == "FINISHED"
    assert run.data.params["method.options.slope"] == "0.5"
    assert "credit/nonzero_frac" in run.data.metrics and "eval/arithmetic/pass_at_1" in run.data.metrics
    history = client.get_metric_history(run.info.run_id, "train/samples")
    assert [m.value for m in history] == [4.0, 8.0]
