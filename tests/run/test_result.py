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
        "optimizer_steps": 10,
        "samples": 160,
        "tokens": 1600,
        "base_eval_reused": True,
        "extra_samples": 7,
        "wall_s": 12.3,
        "tags": {"label": "grpo-lora", "run_key": "k"},
        "budget": {"samples": 160, "tokens": 0},
        "base": ev,
        "final": ev,
        "delta_pass_at_1": {"delta": 0.0, "se": 0.0, "z": float("nan")},
        "history": [
            {
                "step": s,
                "samples": 32 * s,
                "tokens": 320 * s,
                "eval": {"arithmetic": ev, "gsm8k": ev},
                "per_problem": {"arithmetic": [1, 0], "gsm8k": [2, s // 5]},
                "blame": {"share": 0.1, "n": 12.0},
            }
            for s in (0, 5)
        ],
        "credit_probe": None,
        "train": {"train_reward": 0.3, "credit_gini": 0.4},
        "eval_n": 2,
        "problem_ids": {"arithmetic": ["12+30", "40-11"], "gsm8k": ["gsm8k/test/0", "gsm8k/test/1"]},
        "fingerprint": {"numerics": {"cpu_capability": "AVX2", "threads": 1}, "machine": {"arch": "x86_64"}},
        "base_checkpoint": {"key": "arithmetic/tiny-500k-0123456789ab", "weights_sha256": "ab" * 32},
        "blame": {"share": 0.1, "rank": 4.5, "rank_frac": 0.5, "top1": 0.0, "uniform_share": 0.1, "n": 12.0},
    }


def test_the_json_round_trips_unchanged(tmp_path):
    data = result_json()
    path = tmp_path / "runs" / "r.json"
    RunResult(**data).write(path)
    text = path.read_text()
    assert json.dumps(json.loads(text)) == json.dumps(data)  # same keys, same order, same values
    assert '"arithmetic": [1, 0]' in text, "a list of numbers stays on one line"
    back = RunResult.load(path)
    assert back.history[1] == EvalPoint(
        5, 160, 1600, data["history"][1]["eval"], {"arithmetic": [1, 0], "gsm8k": [2, 1]}, {"share": 0.1, "n": 12.0}
    )
    assert back.eval_n == 2 and back.problem_ids["gsm8k"][1] == "gsm8k/test/1" and back.blame["rank_frac"] == 0.5
    assert back.label == "grpo-lora" and back.eval_tasks == ["arithmetic", "gsm8k"]
    assert not list(path.parent.glob("*.tmp"))


def test_older_results_without_optional_keys_load():
    data = result_json()
    for key in ("eval_tasks", "lora_rank", "credit_probe", "tags", "train", "eval_n", "problem_ids", "blame",
                "base_eval_reused", "extra_samples"):  # fmt: skip
        data.pop(key)
    for point in data["history"]:
        del point["per_problem"], point["blame"]
    r = RunResult(**data)
    assert (r.eval_tasks, r.lora_rank, r.credit_probe, r.label, r.train) == (["arithmetic"], 0, None, "grpo", {})
    assert (r.eval_n, r.problem_ids, r.blame, r.base_eval_reused, r.extra_samples) == (0, {}, {}, False, 0)
    assert all(p.per_problem == {} and p.blame == {} for p in r.history)


def test_from_history_keeps_correct_counts_and_the_base_blame():
    """The module's eval history: per-problem pass@1 (for the paired delta, left out of the JSON),
    correct counts, problem ids, n and the blame alignment of each point."""
    metrics = {"pass_at_1": 0.5, "pass_at_1_se": 0.1}
    history = [
        {
            "step": s,
            "samples": 8 * s,
            "tokens": 80 * s,
            "eval": {"arithmetic": {**metrics, "per_problem_pass_at_1": [c / 4 for c in counts]}},
            "eval_n": 4,
            "per_problem": {"arithmetic": counts},
            "problem_ids": {"arithmetic": ["a", "b"]},
            "blame": {"share": share, "n": 3.0},
        }
        for s, counts, share in ((0, [1, 2], 0.2), (4, [3, 4], 0.3))
    ]
    common = dict(result_json(), eval_tasks=["arithmetic"])
    for key in ("task", "base", "final", "delta_pass_at_1", "history", "eval_n", "problem_ids", "blame"):
        common.pop(key)
    r = RunResult.from_history(history, "arithmetic", **common)
    assert r.delta_pass_at_1["delta"] == pytest.approx(0.5) and "per_problem_pass_at_1" not in r.final
    assert [p.per_problem for p in r.history] == [{"arithmetic": [1, 2]}, {"arithmetic": [3, 4]}]
    assert [p.blame["share"] for p in r.history] == [0.2, 0.3] and r.blame == {"share": 0.2, "n": 3.0}
    assert (r.eval_n, r.problem_ids) == (4, {"arithmetic": ["a", "b"]})
    old = [{k: v for k, v in h.items() if k in ("step", "samples", "tokens", "eval")} for h in history]
    r = RunResult.from_history(old, "arithmetic", **common)  # a checkpoint's history from before these keys
    assert (r.eval_n, r.problem_ids, r.blame, r.history[0].per_problem) == (0, {}, {}, {})


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
