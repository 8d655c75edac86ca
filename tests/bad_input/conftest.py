"""Bad input, as users make it: every mistake on the command line, in a run YAML or in a sweep spec
stops with exactly one line ``creditbench: error: ...`` and a nonzero exit status, names the valid
choices where there are some, and is refused before any work starts, leaving what is already on
disk exactly as it was (an MLflow store with a run in it, a sweep's results folder, a run's result
JSON: all hashed before and after; no new MLflow run, no partial files).

What other files already check is not repeated in this directory (tests/test_cli.py, tests/run/test_sweep.py,
tests/run/test_eval_cli.py, tests/report/test_papers.py); malformed model output and hostile code are
tests/tasks/test_grader.py's and tests/tasks/test_sandbox*.py's. Every test fails before training starts: a
Lightning Trainer, a sweep's run process or (for ``creditbench eval``) loading a model's weights
fails the test at once, so an input that is wrongly accepted never starts work.

The tests are grouped by command: test_bad_input_train.py (``creditbench train``, its run YAML and
checkpoint directory), test_bad_input_tracking.py (the MLflow tracking URI), test_bad_input_eval.py
and test_bad_input_sweep.py (``sweep``, ``summarize`` and ``table``). The fixtures here apply to all
of them: every test runs in a fresh workspace (``ws``) with training and a sweep's run processes
refused (``no_work``).
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from bad_input_support import RUN_KEY, SWEEP, Workspace, WorkStarted, run_result, snapshot
from tiny_sweep import SPEC


@pytest.fixture(scope="session")
def store_template(tmp_path_factory) -> tuple[Path, str]:
    """An MLflow SQLite store holding one finished run of the sweep ``demo``: built once (MLflow's
    schema migrations take seconds), copied for every test."""
    import mlflow

    db = tmp_path_factory.mktemp("store") / "mlflow.db"
    c = mlflow.MlflowClient(f"sqlite:///{db}")
    exp = c.create_experiment("creditbench")
    run = c.create_run(exp, run_name=RUN_KEY, tags={"kind": "rl", "sweep": SWEEP, "run_key": RUN_KEY})
    c.log_param(run.info.run_id, "rl.lr", 1e-4)
    c.log_metric(run.info.run_id, "eval/arithmetic/pass_at_1", 0.25, step=0)
    c.set_terminated(run.info.run_id, "FINISHED")
    return db, run.info.run_id


@pytest.fixture(autouse=True)
def ws(tmp_path, monkeypatch, store_template) -> Workspace:
    root = tmp_path / "ws"
    (root / "data").mkdir(parents=True)  # an empty benchmark data directory
    db = root / "mlflow.db"
    shutil.copy(store_template[0], db)
    demo = root / "results" / SWEEP
    (demo / "runs").mkdir(parents=True)
    (demo / "configs").mkdir()
    (demo / "logs").mkdir()
    (demo / "sweep.yaml").write_text(yaml.safe_dump({**SPEC, "name": SWEEP}))
    (demo / "summary.md").write_text("| model | method | final pass@1 |\n|---|---|---|\n| tiny-500k | grpo | 0.300 |\n")
    (demo / "summary.csv").write_text("model,method,final_pass_at_1\ntiny-500k,grpo,0.3\n")
    (demo / "report.json").write_text('{"rows": [], "runs": 1}\n')
    (demo / "runs" / f"{RUN_KEY}.json").write_text(json.dumps(run_result(store_template[1]), indent=2))
    (demo / "configs" / f"{RUN_KEY}.yaml").write_text("seed: 0\n")
    (demo / "logs" / f"{RUN_KEY}.log").write_text("step 1 ...\n")
    stale = root / "results" / "stale"
    (stale / "runs").mkdir(parents=True)
    (stale / "summary.md").write_text("| model | method |\n")
    monkeypatch.chdir(root)
    # whatever a wrongly accepted input would write goes under this test's directory
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{db}")
    monkeypatch.setenv("CREDITBENCH_CACHE", str(root / ".creditbench" / "cache"))
    monkeypatch.setenv("CREDITBENCH_CHECKPOINTS", str(root / ".creditbench" / "checkpoints"))
    monkeypatch.delenv("CREDITBENCH_DATA", raising=False)
    monkeypatch.delenv("CREDITBENCH_ALLOW_CODE_EXECUTION", raising=False)
    monkeypatch.delenv("MLFLOW_ALLOW_FILE_STORE", raising=False)
    return Workspace(root, db, store_template[1], snapshot(root))


@pytest.fixture(autouse=True)
def no_work(monkeypatch):
    """Refuse training and a sweep's run processes: bad input must never get that far."""
    import lightning.pytorch

    def trainer(*args, **kwargs):
        raise WorkStarted("a Lightning Trainer was created: the bad input was not refused before work started")

    monkeypatch.setattr(lightning.pytorch.Trainer, "__init__", trainer)
    real_run = subprocess.run

    def run(cmd, *args, **kwargs):
        if isinstance(cmd, (list, tuple)) and "bench.cli" in cmd and "train" in cmd:
            raise WorkStarted(f"a sweep launched a run ({' '.join(map(str, cmd))}): the bad input was not refused")
        return real_run(cmd, *args, **kwargs)

    monkeypatch.setattr(subprocess, "run", run)


@pytest.fixture
def no_weights(monkeypatch):
    """`creditbench eval` must refuse bad input before it loads a model."""
    import bench.models.policy

    def load_policy(*args, **kwargs):
        raise WorkStarted("the model's weights were being loaded: the bad input was not refused before work started")

    monkeypatch.setattr(bench.models.policy, "load_policy", load_policy)
