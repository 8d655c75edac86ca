"""bench/perf/flagship_cost.py: the FLOP floor's arithmetic, the value-by-value comparison of two runs,
the phase meter of its worker, its committed report rebuilt from its json, and (slow) one measured
flagship-size run end to end."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pytest
import torch

from bench.perf import flagship_cost as fc

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench" / "perf" / "workers"))
import flagship_run  # noqa: E402


def test_model_flops_count_the_tiny_decoders_matrices():
    f = fc.model_flops("tiny-500k")
    # hidden 128, 3 layers, 4 heads and 2 kv heads of 32, MLP 320: q, o 128x128; k, v 128x64; 3 x 128x320
    assert f["matrix_params"] == 3 * (2 * 128 * 128 + 2 * 128 * 64 + 3 * 128 * 320) == 516_096
    assert f["linear"] == 2 * 516_096 and f["attention"] == 4 * 3 * 4 * 32 and f["logits"] == 2 * 128 * f["vocab"]


def test_phase_flops_train_positions_cost_three_forwards():
    f = fc.model_flops("tiny-500k")
    fwd = fc.phase_flops({"fwd": 10, "logits": 10, "context": 55}, f)
    assert fwd == 10 * f["linear"] + 10 * f["logits"] + 55 * f["attention"]
    assert fc.phase_flops({"train": 10}, f) == 3 * fc.phase_flops({"fwd": 10}, f)


def test_same_numbers_compares_what_both_have_and_names_what_differs():
    a = {"final": {"pass_at_1": 0.5, "ref_prob": 0.2}, "history": [{"x": 1}, {"x": 2}], "policy_dir": "/a"}
    b = {"final": {"pass_at_1": 0.5}, "history": [{"x": 1}, {"x": 3}], "policy_dir": "/b"}
    n, bad = fc.same_numbers(a, b)
    assert n == 3 and bad == ["/history[1]/x"]  # paths of the checkout are not numbers


def test_tokens_count_useful_positions_once_per_distinct_prompt():
    meter = flagship_run.Meter()
    tokens = flagship_run.Tokens(meter)
    prompts = torch.tensor([[0, 5, 6], [0, 5, 6], [7, 8, 9]])  # two rows share a left-padded prompt
    mask = torch.tensor([[0, 1, 1], [0, 1, 1], [1, 1, 1]])
    completions = torch.tensor([[1, 1, 0, 0], [1, 1, 1, 1], [1, 0, 0, 0]])
    tokens.add(prompts, mask, completions, grad=False)
    d = tokens.by_phase["fixed"]
    assert d["fwd"] == (1 + 2) + (2 + 4 + 1)  # prompts' first P-1 real tokens once, each completion's tokens
    assert d["logits"] == 7 and d["calls"] == 1
    assert d["padded"] == 2 * 2 + 3 * (1 + 4)  # 2 distinct prompts x 2 columns, 3 rows x (1 + longest)


def test_meter_charges_the_innermost_phase_and_eval_keeps_everything():
    meter = flagship_run.Meter()

    class Engine:
        def work(self, seconds):
            end = time.process_time() + seconds
            while time.process_time() < end:
                pass

        def outer(self):
            self.work(0.02)
            self.inner()

        def inner(self):
            self.work(0.03)

    meter.wrap(Engine, "outer", "update")
    meter.wrap(Engine, "inner", "rollout")
    meter.last, meter.on = time.process_time(), True
    Engine().outer()
    assert meter.seconds["update"] == pytest.approx(0.02, abs=0.01)
    assert meter.seconds["rollout"] == pytest.approx(0.03, abs=0.01)
    meter.wrap(Engine, "outer", "eval")  # inside eval, the inner phase is eval too
    meter.seconds.clear()
    Engine().outer()
    assert set(meter.seconds) <= {"eval", "fixed"} and meter.seconds["eval"] >= 0.05


def test_op_split_times_matrix_products_and_attention_by_phase():
    meter = flagship_run.Meter()

    class Engine:
        def update(self, x):
            y = torch.nn.functional.linear(x, torch.ones(8, 8), torch.ones(8))  # addmm
            q = y.view(1, 1, 4, 8)
            return torch.nn.functional.scaled_dot_product_attention(q, q, q) + (x @ x.T).sum()

    meter.wrap(Engine, "update", "update")
    split = flagship_run.OpSplit(meter)
    meter.last, meter.on = time.process_time(), True
    with split.mode:
        out = Engine().update(torch.ones(4, 8))
        torch.ones(3, 3) @ torch.ones(3, 3)  # outside any phase: fixed
    assert out.shape == (1, 1, 4, 8)
    assert split.seconds["update"]["matmul"] > 0 and split.seconds["update"]["attention"] > 0
    assert split.seconds["fixed"]["matmul"] > 0 and split.seconds["fixed"]["attention"] == 0


def test_the_committed_report_is_rebuilt_from_its_json():
    data = json.loads((ROOT / "results" / "benchmarks" / "flagship_cost.json").read_text())
    committed = (ROOT / "results" / "benchmarks" / "flagship_cost.md").read_text()
    assert fc.markdown(data).rstrip("\n") + "\n" == committed
    assert data["differences"] == [] and data["compared"] > 500  # the engine changes kept every number
    assert set(data["now"]["phases"]) == set(fc.PHASES)
    assert data["ops"]["update"]["matmul"] > 0  # the matrix products were timed
    # the options that move the bits, measured beside it: less time, and only last bits moved
    assert data["settings"] == ["rl.old_logprobs=auto", "rl.packed_update=true"]
    assert (
        data["options"]["cpu_s"] < data["now"]["cpu_s"]
        and data["options"]["phases"]["scoring"] < 0.7 * data["now"]["phases"]["scoring"]
    )
    assert 0 < len(data["options_differences"]) < 0.05 * data["options_compared"]


def test_rl_settings_are_checked_in_one_line():
    from bench.config import RunConfig
    from bench.errors import CreditBenchError
    from bench.perf.rl_settings import with_rl_settings

    cfg = with_rl_settings(RunConfig(), ["rl.old_logprobs=auto", "rl.packed_update=true"])
    assert (cfg.rl.old_logprobs, cfg.rl.packed_update) == ("auto", True)
    for bad in ("old_logprobs=auto", "rl.nope=1", "rl.packed_update="):
        with pytest.raises(CreditBenchError, match="--set takes rl.KEY=VALUE with KEY an RL option"):
            with_rl_settings(RunConfig(), [bad])
    with pytest.raises(CreditBenchError, match="rl.old_logprobs must be one of auto, rescore, rollout, got 'cached'"):
        with_rl_settings(RunConfig(), ["rl.old_logprobs=cached"])


@pytest.mark.slow
def test_one_measured_run_end_to_end(tmp_path):
    """One run of the quick sweep (the flagship's settings, a quarter of its budget), measured by phase
    in its own process (about 30 s)."""
    from argparse import Namespace

    args = Namespace(spec="results/sweeps/embedded-quick.yaml", label="grpo", seed=0, warm_label="s_trace")
    (run,) = fc.measure(ROOT, args, 1)
    assert run["samples"] == 512 and run["run"] == "grpo-chain-tiny-500k-seed0"
    assert sum(run["phases"].values()) == pytest.approx(run["cpu_s"], rel=0.02)
    assert {"rollout", "scoring", "update", "eval"} <= set(run["tokens"])
    assert run["result"]["base_eval_reused"]  # the warm-up computed the seed's base eval


@pytest.mark.parametrize(
    "args, message",
    [
        (["--repeats", "0"], "--repeats must be >= 1, got 0"),
        (["--baseline", "/nonexistent"], "--baseline /nonexistent is not a checkout of this project"),
        (
            ["--label", "grpp", "--no_fusion"],
            "no run of label 'grpp' and seed 0 in results/sweeps/embedded.yaml; labels:",
        ),
    ],
)
def test_bad_input_is_one_line_and_writes_nothing(tmp_path, capsys, monkeypatch, args, message):
    monkeypatch.chdir(ROOT)
    with pytest.raises(SystemExit) as exit_:
        fc.run_script(lambda: fc.main([*args, "--out", str(tmp_path)]), "python -m bench.perf.flagship_cost")
    assert exit_.value.code == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1
    assert not list(tmp_path.iterdir())
