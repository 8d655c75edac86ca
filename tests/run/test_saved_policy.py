"""A run saves its trained policy; ``creditbench eval`` evaluates it by directory or by MLflow run
id and gets the run's own final evaluation back."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.cli.eval import main as eval_main
from bench.config import (
    CheckpointConfig,
    EvalConfig,
    LoRAConfig,
    ModelConfig,
    RLConfig,
    RunConfig,
    SamplingConfig,
    TaskSpec,
    TrackingConfig,
    WarmStartConfig,
)
from bench.run.train import run

# the end-to-end test's task and warm-start (tests/run/test_e2e.py): in one session the base is
# warm-started once, by whichever runs first
OPTIONS = {"num_operands": 2, "high": 30, "train_size": 3000, "eval_size": 200}
WARMSTART = WarmStartConfig(max_steps=400, check_every=50, batch_size=32, target_accuracy=0.25)


def train(tmp_path, cache, lora: int) -> dict:
    cfg = RunConfig(
        model=ModelConfig(name="tiny-500k", lora=LoRAConfig(rank=lora)),
        task=TaskSpec(options=OPTIONS),
        rl=RLConfig(steps=4, prompts_per_step=4, group_size=4, lr=1e-4),
        eval=EvalConfig(every=4, n=1, k=[1], num_problems=20, sampling=SamplingConfig(temperature=0.0)),
        warmstart=WARMSTART,
        checkpoint=CheckpointConfig(every=0, dir=str(tmp_path / "ckpt")),
        tracking=TrackingConfig(uri=f"sqlite:///{tmp_path / 'mlflow.db'}", cache_dir=cache),
    )
    return run(cfg, progress=False)


@pytest.mark.parametrize("lora", [0, 4], ids=["full", "lora"])
def test_the_saved_policy_evaluates_to_the_runs_final_numbers(tmp_path, warm_cache, capsys, lora):
    res = train(tmp_path, warm_cache, lora)
    policy = res["policy_dir"]
    names = {p.name for p in Path(policy).iterdir()}
    assert ("adapter_config.json" in names) == bool(lora) and ("config.json" in names) != bool(lora)
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    args = ["--task", "arithmetic", "--n", "1", "--k", "1", "--temperature", "0", "--num-problems", "20"]
    args += ["--max-new-tokens", "36", "--uri", uri]
    args += [x for k, v in OPTIONS.items() for x in ("--task-option", f"{k}={v}")]
    assert 0 < res["final"]["pass_at_1"] < 1
    # the directory; then, with the directory gone, the run id (the policy comes from its artifact)
    for model in (policy, res["mlflow_run_id"]):
        out = tmp_path / f"eval-{len(model)}.json"
        assert eval_main(["--model", model, *args, "--out", str(out)]) == 0
        if Path(policy).exists():
            Path(policy).rename(tmp_path / "moved")
        got = json.loads(out.read_text())
        assert got["metrics"]["pass_at_1"] == pytest.approx(res["final"]["pass_at_1"]), (got["metrics"], res["final"])
    import mlflow

    artifacts = {a.path for a in mlflow.MlflowClient(uri).list_artifacts(res["mlflow_run_id"], "policy")}
    assert any(p.endswith(("model.safetensors", "adapter_model.safetensors")) for p in artifacts), artifacts
    # the run id alone: the run's own task, options and eval settings, and the eval run linked to it
    out = tmp_path / "eval-own.json"
    assert eval_main(["--model", res["mlflow_run_id"], "--uri", uri, "--out", str(out)]) == 0
    got = json.loads(out.read_text())
    assert (got["task"], got["n"], got["ks"], got["num_problems"]) == ("arithmetic", 1, [1], 20)
    assert got["metrics"]["pass_at_1"] == pytest.approx(res["final"]["pass_at_1"]), (got["metrics"], res["final"])
    linked = mlflow.MlflowClient(uri).get_run(got["mlflow_run_id"])
    assert linked.data.tags["training_run_id"] == res["mlflow_run_id"]
    assert got["model"] == linked.data.params["model"] == f"runs:/{res['mlflow_run_id']}/policy"
    assert linked.info.run_name == f"eval-arithmetic-{res['run_name']}"
