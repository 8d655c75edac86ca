"""The TRL comparison benchmark (bench/perf/trl.py, its runs in bench/perf/trl_runs.py) measures sane figures
on both sides."""

import importlib.util

import pytest

from bench.perf import trl_runs


@pytest.fixture(scope="module")
def model_dir(policy_dir):
    return str(policy_dir)


def _check(res: dict, steps: int, warmup: int) -> None:
    assert len(res["step_times_s"]) == len(res["step_tokens"]) == warmup + steps
    assert all(t > 0 for t in res["step_times_s"])
    assert res["step_s"] > 0 and res["cpu_s"] > 0 and res["tokens_per_s"] > 0 and res["peak_rss_mib"] > 0
    # 16 prompts x 8 completions, each 1..32 tokens (up to and including eos)
    assert all(128 <= n <= 128 * 32 for n in res["step_tokens"])
    assert res["tokens_per_s"] == pytest.approx(sum(res["step_tokens"][warmup:]) / sum(res["step_times_s"][warmup:]))


def test_creditbench_side_measures_steps_and_tokens(model_dir):
    res = trl_runs.measure("creditbench", "matched", model_dir, steps=1, warmup=0)
    _check(res, 1, 0)
    b = res["breakdown_s"]
    assert b["time/rollout_s"] > 0 and b["time/update_s"] > 0


@pytest.mark.skipif(
    importlib.util.find_spec("trl") is None, reason="trl is not installed (the trl extra: pip install -e '.[trl]')"
)
def test_trl_side_measures_one_step(model_dir):
    res = trl_runs.measure("trl", "matched", model_dir, steps=1, warmup=0)
    _check(res, 1, 0)
    assert res["trl_loss_type"] == "grpo" and res["trl_bf16"] is False
    assert res["trl_optim"] == trl_runs.creditbench_adamw()  # the same AdamW code as creditbench's


def test_trl_settings_match_creditbench_grpo():
    if importlib.util.find_spec("trl") is None:
        pytest.skip("trl is not installed (the trl extra: pip install -e '.[trl]')")
    from methods.grpo import GRPOConfig

    args = trl_runs.trl_args("matched", 3, "/tmp/unused")
    assert GRPOConfig().aggregation == "seq-mean-token-mean" and args.loss_type == "grpo"
    assert (args.per_device_train_batch_size, args.num_generations, args.steps_per_generation) == (128, 8, 1)
    assert args.beta == 0 and args.num_iterations == 1 and args.max_completion_length == 32
    assert not args.bf16 and not args.gradient_checkpointing
    defaults = trl_runs.trl_args("defaults", 3, "/tmp/unused")
    assert defaults.bf16 and defaults.gradient_checkpointing and defaults.loss_type == "dapo"
