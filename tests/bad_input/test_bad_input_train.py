"""Bad input to ``creditbench train``: flags, a run YAML, missing benchmark data and a checkpoint
directory that cannot take checkpoints are refused in one line before any work starts."""

from __future__ import annotations

from pathlib import Path

import pytest
from bad_input_support import assert_names, error_line, mlflow_runs, train

TRAIN_CASES = [
    # unknown names
    ("eval-task", ["--eval.tasks", "[{name: gsm8kk}]"], ["unknown task 'gsm8kk'", "Did you mean 'gsm8k'", "math500"]),
    ("eval-task-by-name", ["--eval.tasks", "[gsm8kk]"], ["unknown task 'gsm8kk'", "Did you mean 'gsm8k'", "math500"]),
    (
        "eval-task-option",
        ["--eval.tasks", "[{name: gsm8k, options: {levels: [3]}}]"],
        ["task 'gsm8k' has no option 'levels'", "data_dir, grader_timeout, grader_workers, template"],
    ),
    (
        "task-option",
        ["--task.options", "{num_operandz: 3}"],
        ["no option 'num_operandz'", "Did you mean 'num_operands'", "eval_size, high, low"],
    ),
    (
        "task-template",
        ["--task.options", "{template: qwen-math}"],
        ["unknown template 'qwen-math'", "compact, instruct"],
    ),
    (
        "method-option",
        ["--method.name", "dapo", "--method.options", "{clip_eps_high: 0.28}"],
        ["no option 'clip_eps_high'", "Did you mean 'clip_high'", "clip_low"],
    ),
    (
        "aggregation-dapo",
        ["--method.name", "dapo", "--method.options", "{aggregation: sum}"],
        ["unknown aggregation 'sum'", "token-mean, seq-mean-token-mean, seq-mean-token-sum, seq-mean-token-sum-norm"],
    ),
    (
        "arca-normalise",
        ["--method.name", "arca", "--model.lora.rank", "4", "--method.options", "{normalise: max}"],
        ["unknown normalise 'max'", "sum, softmax"],
    ),
    (
        "arca-hidden",
        ["--method.name", "arca", "--model.lora.rank", "4", "--method.options", "{hidden: mid}"],
        ["unknown hidden 'mid'", "post_norm, pre_norm"],
    ),
    (
        "entropy-population",
        ["--method.name", "entropy_top", "--method.options", "{population: group}"],
        ["unknown population 'group'", "batch, minibatch, sequence"],
    ),
    (
        "grpo-lambda-clip-target",
        ["--method.name", "grpo_lambda", "--method.options", "{clip_target: none}"],
        ["unknown clip_target 'none'", "traced_ratio, token_ratio"],
    ),
    (
        "ibpo-repair-advantage",
        ["--method.name", "ibpo", "--method.options", "{repair_advantage: big}"],
        ["unknown repair_advantage 'big'", "source, group"],
    ),
    (
        "p-trace-weights",
        ["--method.name", "p_trace", "--method.options", "{weights: equal}"],
        ["unknown weights 'equal'", "decay, uniform"],
    ),
    (
        "s-trace-distance",
        ["--method.name", "s_trace", "--method.options", "{distance: far}"],
        ["unknown distance 'far'", "raw, selected"],
    ),
    ("rollout-engine", ["--rollout.engine", "sglang"], ["rollout.engine", "sglang", "'hf', 'vllm'"]),
    ("rollout-lora-sync", ["--rollout.lora_sync", "copy"], ["rollout.lora_sync", "'merge', 'adapter'"]),
    (
        "trainer-strategy",
        ["--trainer.strategy", "deepspeed"],
        ["trainer.strategy", "deepspeed", "'auto', 'ddp', 'fsdp'"],
    ),
    ("trainer-accelerator", ["--trainer.accelerator", "tpu"], ["trainer.accelerator", "'auto', 'cpu', 'gpu'"]),
    ("fsdp-sharding", ["--trainer.fsdp_sharding", "FULL"], ["trainer.fsdp_sharding", "'FULL_SHARD', 'SHARD_GRAD_OP'"]),
    ("model-dtype", ["--model.dtype", "fp16"], ["model.dtype", "'float32', 'bfloat16', 'float16'"]),
    ("lr-schedule", ["--rl.schedule", "exponential"], ["rl.schedule", "'constant', 'cosine', 'linear'"]),
    ("setting-in-group", ["--rl.stpes", "3"], ["stpes", "Did you mean", "rl.steps"]),
    ("group", ["--rollouts.engine", "hf"], ["rollouts", "Did you mean", "rollout"]),
    # wrong types
    ("steps-word", ["--rl.steps", "ten"], ["rl.steps", "ten", "int"]),
    ("lr-word", ["--rl.lr", "abc"], ["rl.lr", "abc", "float"]),
    ("lr-list", ["--rl.lr", "[1e-4, 1e-5]"], ["rl.lr", "float"]),
    ("group-size-float", ["--rl.group_size", "4.5"], ["rl.group_size", "4.5"]),
    ("seed-float", ["--seed", "1.5"], ["seed", "1.5"]),
    ("devices-word", ["--trainer.devices", "two"], ["trainer.devices", "two"]),
    ("k-number", ["--eval.k", "4"], ["eval.k", "list"]),
    ("betas-one", ["--rl.betas", "[0.9]"], ["rl.betas", "2 elements"]),
    ("bool-word", ["--allow_code_execution", "maybe"], ["allow_code_execution", "maybe"]),
    ("options-list", ["--method.options", "[clip_eps, 0.3]"], ["method.options", "dict"]),
    ("section-a-string", ["--rl", "fast"], ["rl", "mapping", "fast"]),
    ("method-option-word", ["--method.options", "{kl_coef: abc}"], ["kl_coef", "abc", "float"]),
    ("method-option-list", ["--method.options", "{clip_eps: [0.2, 0.3]}"], ["clip_eps", "float"]),
    ("aggregation-list", ["--method.options", "{aggregation: [token-mean]}"], ["aggregation", "token-mean"]),
    ("task-option-word", ["--task.options", "{num_operands: three}"], ["num_operands", "three", "int"]),
    # out of range
    ("lr-negative", ["--rl.lr", "-0.0001"], ["rl.lr must be > 0, got -0.0001"]),
    ("lr-negative-exponent", ["--rl.lr=-1e-4"], ["rl.lr must be > 0, got -0.0001"]),
    ("lr-zero", ["--rl.lr", "0"], ["rl.lr must be > 0"]),
    ("ppo-epochs", ["--rl.ppo_epochs", "0"], ["rl.ppo_epochs must be >= 1"]),
    ("minibatches", ["--rl.minibatches", "1000"], ["rl.minibatches must be in [1, 128]"]),
    ("grad-clip", ["--rl.grad_clip", "-1"], ["rl.grad_clip must be >= 0"]),
    ("budget", ["--rl.budget_samples", "-10"], ["rl.budget_samples must be >= 0"]),
    ("top-p", ["--rl.sampling.top_p", "0"], ["top_p must be in (0, 1]"]),
    ("temperature", ["--eval.sampling.temperature", "-0.5"], ["temperature must be >= 0"]),
    ("max-new-tokens", ["--eval.sampling.max_new_tokens", "0"], ["max_new_tokens must be >= 1"]),
    ("eval-every", ["--eval.every", "0"], ["eval.every must be >= 1"]),
    ("eval-problems", ["--eval.num_problems", "0"], ["eval.num_problems must be >= 1"]),
    ("lora-dropout", ["--model.lora.dropout", "1"], ["model.lora.dropout must be in [0, 1)"]),
    ("lora-alpha", ["--model.lora.alpha", "0"], ["model.lora.alpha must be > 0"]),
    ("lora-targets", ["--model.lora.targets", "[]"], ["model.lora.targets must name at least one module"]),
    ("warmstart-target", ["--warmstart.target_accuracy", "1.5"], ["warmstart.target_accuracy must be in (0, 1]"]),
    ("threads", ["--threads", "-1"], ["threads must be >= 0"]),
    ("method-option-range", ["--method.options", "{clip_eps: 1.5}"], ["clip_eps must be in (0, 1), got 1.5"]),
    ("entropy-rho", ["--method.name", "entropy_top", "--method.options", "{rho: 0}"], ["rho must be in (0, 1]"]),
    ("task-option-range", ["--task.options", "{low: 50, high: 10}"], ["need 0 <= low <= high"]),
    ("devices-zero", ["--trainer.devices", "0"], ["trainer.devices must be >= 1, got 0"]),
    ("num-nodes-zero", ["--trainer.num_nodes", "0"], ["trainer.num_nodes must be >= 1"]),
    (
        "devices-2-auto",
        ["--trainer.devices", "2"],
        ["trainer.devices x trainer.num_nodes = 2 needs trainer.strategy ddp or fsdp, got 'auto'"],
    ),
    ("nodes-2-auto", ["--trainer.num_nodes", "2"], ["= 2 needs trainer.strategy ddp or fsdp"]),
    (
        "prompts-per-process",
        ["--trainer.devices", "2", "--trainer.strategy", "ddp", "--rl.prompts_per_step", "3"],
        ["rl.prompts_per_step (3) must be divisible by the number of processes"],
    ),
    (
        "eval-problems-per-process",
        ["--trainer.devices", "4", "--trainer.strategy", "ddp", "--eval.num_problems", "2"],
        ["eval.num_problems (2) must be at least the number of processes (4)"],
    ),
    (
        "fsdp-one-process",
        ["--trainer.strategy", "fsdp"],
        ["trainer.strategy fsdp needs trainer.devices x", ">= 2, got 1"],
    ),
    (
        "fsdp-no-shard",
        ["--trainer.strategy", "fsdp", "--trainer.devices", "2", "--trainer.fsdp_sharding", "NO_SHARD"],
        ["trainer.fsdp_sharding NO_SHARD shards nothing: use trainer.strategy ddp"],
    ),
    (
        "vllm-ddp",
        ["--rollout.engine", "vllm", "--trainer.strategy", "ddp", "--trainer.devices", "2"],
        ["rollout.engine vllm runs in one training process", "use rollout.engine hf"],
    ),
    (
        "vllm-fsdp",
        ["--rollout.engine", "vllm", "--trainer.strategy", "fsdp", "--trainer.accelerator", "gpu"],
        ["rollout.engine vllm with trainer.strategy fsdp is not supported"],
    ),
    ("vllm-missing", ["--rollout.engine", "vllm"], ["rollout.engine vllm needs vLLM", "rollout.engine hf"]),
    ("gpu-memory", ["--rollout.gpu_memory_utilization", "1.5"], ["rollout.gpu_memory_utilization must be in (0, 1)"]),
    ("kv-cache", ["--rollout.kv_cache_gb", "0"], ["rollout.kv_cache_gb must be > 0"]),
    ("max-model-len", ["--rollout.max_model_len", "-1"], ["rollout.max_model_len must be >= 0"]),
    ("checkpoint-every", ["--checkpoint.every", "-1"], ["checkpoint.every must be >= 0 (0 disables checkpoints)"]),
    ("checkpoint-every-word", ["--checkpoint.every", "often"], ["checkpoint.every", "often"]),
    ("checkpoint-resume", ["--checkpoint.resume", "maybe"], ["checkpoint.resume", "maybe"]),
    ("max-skipped-updates", ["--rl.max_skipped_updates", "-1"], ["rl.max_skipped_updates must be >= 0"]),
    (
        "budget-not-whole-batches",
        ["--rl.budget_samples", "300"],
        ["rl.budget_samples (300) is not a multiple of one rollout batch", "use 256 or 384"],
    ),
    (
        "repairs-under-sample-budget",
        [
            "--method.name",
            "ibpo",
            "--method.options",
            "{mode: diff_credit, repair: true}",
            "--rl.budget_samples",
            "128",
        ],
        ["'ibpo'", "cannot stop at rl.budget_samples exactly", "rl.budget_tokens", "repair: false"],
    ),
    # missing files
    (
        "model-dir-home",
        ["--model.name", "~/no/such/creditbench-model"],
        ["model directory '~/no/such/creditbench-model' does not exist"],
    ),
    ("config-is-a-directory", ["--config", "results"], ["config", "not a file"]),
]


@pytest.mark.parametrize("argv, expected", [pytest.param(a, e, id=i) for i, a, e in TRAIN_CASES])
def test_bad_train_input_is_one_line_and_changes_nothing(capsys, ws, monkeypatch, argv, expected):
    import bench.engine.engines

    monkeypatch.setattr(bench.engine.engines, "vllm_available", lambda: False)  # a missing vLLM, wherever this runs
    code, _, err = train(capsys, ws, *argv)
    assert_names(error_line(code, err), expected)
    ws.assert_unchanged()


CONFIG_CASES = [
    ("section-a-string", "rl: fast\n", ["rl", "mapping", "fast"]),
    ("method-a-name", "method: grpo\n", ["method", "mapping", "grpo"]),
    ("top-level-list", "- rl\n- eval\n", ["bad configuration"]),
    ("list-for-number", "rl:\n  lr: [1.0e-4, 1.0e-5]\n", ["rl.lr", "float"]),
    ("word-for-number", "rl:\n  steps: ten\n", ["rl.steps", "ten"]),
    ("unknown-setting", "rl:\n  stpes: 3\n", ["stpes", "Did you mean", "steps"]),
    ("unknown-section", "rll:\n  lr: 1.0e-4\n", ["rll", "Did you mean", "rl"]),
    ("eval-task-names", "eval:\n  tasks: [math5000]\n", ["unknown task 'math5000'", "Did you mean 'math500'"]),
    ("devices-2-auto", "trainer:\n  devices: 2\n", ["needs trainer.strategy ddp or fsdp, got 'auto'"]),
]


@pytest.mark.parametrize("text, expected", [pytest.param(t, e, id=i) for i, t, e in CONFIG_CASES])
def test_bad_run_yaml_is_one_line_and_changes_nothing(capsys, ws, tmp_path, text, expected):
    path = tmp_path / "run.yaml"
    path.write_text(text)
    code, _, err = train(capsys, ws, "--config", path)
    assert_names(error_line(code, err), expected)
    ws.assert_unchanged()


def test_missing_benchmark_file_stops_training_before_anything_is_written(capsys, ws, monkeypatch):
    """GSM8K from a data directory without its files: the tiny model's warm-start must not leave a
    cache folder or lock behind, nor the run a checkpoint folder, before the file is found missing."""
    monkeypatch.setenv("CREDITBENCH_DATA", str(ws.root / "data"))
    code, _, err = train(capsys, ws, "--task.name", "gsm8k", "--task.options", "{template: compact}")
    assert_names(error_line(code, err), ["task 'gsm8k'", "gsm8k/train.jsonl", "not found", str(ws.root / "data")])
    ws.assert_unchanged()


def test_missing_eval_benchmark_file_stops_training_before_an_mlflow_run_exists(capsys, ws, monkeypatch, policy_dir):
    """An eval task (MATH-500) whose file is missing: refused before the MLflow run is created."""
    monkeypatch.setenv("CREDITBENCH_DATA", str(ws.root / "data"))
    code, _, err = train(
        capsys, ws, "--model.name", policy_dir, "--eval.tasks", "[{name: math500, options: {template: compact}}]"
    )
    assert_names(error_line(code, err), ["task 'math500'", "math500/test.jsonl", "not found"])
    ws.assert_unchanged()
    assert mlflow_runs(ws.db) == [ws.run_id]


def test_missing_data_directory_names_the_variable(capsys, ws, monkeypatch):
    monkeypatch.setenv("CREDITBENCH_DATA", str(ws.root / "no-such-data"))
    code, _, err = train(capsys, ws, "--task.name", "math", "--task.options", "{template: compact}")
    assert_names(error_line(code, err), ["data directory", "no-such-data", "does not exist", "CREDITBENCH_DATA"])
    ws.assert_unchanged()


def unwritable_directory(tmp_path: Path) -> Path:
    """A read-only directory; where permissions do not bind (root), a place no one can create
    directories in (sysfs), which fails the same way a read-only or full disk does."""
    import os

    d = tmp_path / "read-only"
    d.mkdir()
    d.chmod(0o555)
    return d / "checkpoints" if not os.access(d, os.W_OK) else Path("/sys/creditbench-checkpoints")


def test_unwritable_checkpoint_directory_is_refused_before_anything_is_written(capsys, ws, tmp_path, policy_dir):
    d = unwritable_directory(tmp_path)
    code, _, err = train(capsys, ws, "--model.name", policy_dir, "--checkpoint.dir", d)
    assert_names(error_line(code, err), [f"cannot write checkpoints to '{d}/", "checkpoint.dir", "checkpoint.every 0"])
    ws.assert_unchanged()
    assert mlflow_runs(ws.db) == [ws.run_id]  # no MLflow run was started
