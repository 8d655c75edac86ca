"""A run's result JSON (bench/run/result.py): written as train.py always wrote it, read back."""

import json

import pytest

from bench.errors import CreditBenchError
from bench.run.result import EvalPoint, RunResult


def result_json() -> dict:
    """A run's result JSON with its keys in the order bench/run/train.py writes them."""
    ev = {"pass_at_1": 0.25, "pass_at_1_se": 0.05, "avg_at_2": 0.25, "mean_length": 9.0}
    return {
        "run_name": "grpo-arithmetic-tiny-500k-seed0",
        "mlflow_run_id": "abc",
        "method": "grpo",
        "task": "arithmetic",
        "eval_tasks": ["arithmetic", "gsm8k"],
        "model": "tiny-500k",
        "params": 500_000,
        "lora_rank": 0,
        "seed": 0,
        "steps": 5,
        "samples": 160,
        "tokens": 1600,
        "wall_s": 12.3,
        "tags": {"label": "grpo-lora", "run_key": "k"},
        "budget": {"samples": 160, "tokens": 0},
        "base": ev,
        "final": ev,
        "delta_pass_at_1": {"delta": 0.0, "se": 0.0, "z": float("nan")},
        "history": [
            {"step": s, "samples": 32 * s, "tokens": 320 * s, "eval": {"arithmetic": ev, "gsm8k": ev}} for s in (0, 5)
        ],
        "credit_probe": None,
        "train": {"train_reward": 0.3, "credit_gini": 0.4},
    }


def test_the_json_round_trips_unchanged(tmp_path):
    data = result_json()
    path = tmp_path / "runs" / "r.json"
    RunResult(**data).write(path)
    assert path.read_text() == json.dumps(data, indent=2)  # same keys, same order, same values
    back = RunResult.load(path)
    assert back.history[1] == EvalPoint(5, 160, 1600, data["history"][1]["eval"])
    assert back.label == "grpo-lora" and back.eval_tasks == ["arithmetic", "gsm8k"]
    assert not list(path.parent.glob("*.tmp"))


def test_older_results_without_optional_keys_load():
    data = result_json()
    for key in ("eval_tasks", "lora_rank", "credit_probe", "tags", "train"):
        data.pop(key)
    r = RunResult(**data)
    assert (r.eval_tasks, r.lora_rank, r.credit_probe, r.label, r.train) == (["arithmetic"], 0, None, "grpo", {})


@pytest.mark.parametrize(
    "text, message",
    [
        ('{"run_name": "x", "meth', "is not valid JSON"),
        ('{"run_name": "x"}', "is not a run's result"),
        ("[1, 2]", "is not a run's result"),
    ],
)
def test_a_broken_result_is_one_line_naming_the_file(tmp_path, text, message):
    path = tmp_path / "r.json"
    path.write_text(text)
    with pytest.raises(CreditBenchError, match=message) as e:
        RunResult.load(path)
    assert str(path) in str(e.value) and "\n" not in str(e.value)
