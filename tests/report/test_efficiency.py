"""Sample and token efficiency on hand-made learning curves with known answers."""

import math

import pytest

from bench.report.files import markdown
from bench.report.summary import build_report
from bench.run.result import EvalPoint, RunResult
from bench.stats.intervals import t_interval
from bench.stats.metrics import cost_to_target, curve_auc


def test_auc_of_a_linear_curve_is_its_mean():
    assert curve_auc([0, 10], [0.0, 1.0], 10) == pytest.approx(0.5)
    assert curve_auc([0, 5, 10], [0.4, 0.4, 0.4], 10) == pytest.approx(0.4)


def test_auc_holds_the_ends_and_clips_to_the_horizon():
    # 0-5: (0.2+0.6)/2*5 = 2; 5-10: 0.6*5 = 3; 10-20 held at 0.6: 6  -> 11 / 20
    assert curve_auc([0, 5, 10], [0.2, 0.6, 0.6], 20) == pytest.approx(0.55)
    # horizon inside the curve: only [0, 5] counts, y(5) = 0.5 by interpolation
    assert curve_auc([0, 10], [0.0, 1.0], 5) == pytest.approx(0.25)
    # a first eval after 0 is held back to 0
    assert curve_auc([2, 4], [0.5, 0.5], 4) == pytest.approx(0.5)


def test_learning_earlier_gives_more_area():
    fast = curve_auc([0, 10, 20, 30], [0.2, 0.5, 0.5, 0.5], 30)
    slow = curve_auc([0, 10, 20, 30], [0.2, 0.2, 0.2, 0.5], 30)
    assert fast == pytest.approx((3.5 + 5 + 5) / 30) and slow == pytest.approx((2 + 2 + 3.5) / 30)


def test_cost_to_target():
    assert cost_to_target([0, 10, 20], [0.0, 0.5, 1.0], 0.75) == pytest.approx(15.0)
    assert cost_to_target([0, 10, 20], [0.0, 0.5, 1.0], 0.5) == pytest.approx(10.0)
    assert cost_to_target([0, 10], [0.6, 0.7], 0.5) == 0.0  # already there at the start
    assert cost_to_target([0, 10, 20], [0.1, 0.3, 0.2], 0.4) is None  # never reached
    # the first crossing counts, not a later one
    assert cost_to_target([0, 10, 20, 30], [0.0, 0.8, 0.2, 0.9], 0.4) == pytest.approx(5.0)


def test_curves_must_be_well_formed():
    with pytest.raises(ValueError, match="non-decreasing"):
        curve_auc([0, 10, 5], [0, 1, 2], 10)
    with pytest.raises(ValueError, match="matching"):
        cost_to_target([0, 1], [0.5], 0.1)


def test_t_interval():
    ci = t_interval([1.0, 2.0, 3.0])
    half = 4.302652729911275 / math.sqrt(3)  # t(0.975, 2) * sd 1 / sqrt(3)
    assert ci["mean"] == 2.0 and ci["lo"] == pytest.approx(2 - half) and ci["hi"] == pytest.approx(2 + half)
    one = t_interval([0.3])
    assert one["mean"] == one["lo"] == one["hi"] == 0.3
    missing = t_interval([100.0, None])
    assert missing["mean"] is None and missing["reached"] == 1 and missing["n"] == 2


def _run(label, seed, samples, pass1, tokens_per_sample=10.0, params=1000) -> RunResult:
    history = [
        EvalPoint(
            i,
            s,
            s * tokens_per_sample,
            {
                "toy": {
                    "pass_at_1": p,
                    "pass_at_2": min(1.0, 1.5 * p),
                    "avg_at_2": p,
                    "mean_length": tokens_per_sample,
                    "tokens_per_correct": tokens_per_sample / max(p, 1e-9),
                    "truncated_frac": 0.0,
                }
            },
        )
        for i, (s, p) in enumerate(zip(samples, pass1))
    ]
    return RunResult(
        run_name=f"{label}-toy-m-seed{seed}",
        mlflow_run_id="",
        method=label,
        task="toy",
        eval_tasks=["toy"],
        model="m",
        params=params,
        lora_rank=0,
        seed=seed,
        steps=len(samples) - 1,
        samples=samples[-1],
        tokens=samples[-1] * tokens_per_sample,
        wall_s=1.0,
        tags={"label": label},
        budget={"samples": samples[-1], "tokens": 0},
        base=history[0].eval["toy"],
        final=history[-1].eval["toy"],
        delta_pass_at_1={},
        history=history,
        credit_probe=None,
    )


def test_report_on_hand_made_curves():
    x = [0, 100, 200]
    runs = [
        _run("grpo", 0, x, [0.2, 0.3, 0.4]),
        _run("grpo", 1, x, [0.2, 0.3, 0.6]),
        _run("fast", 0, x, [0.2, 0.5, 0.5], tokens_per_sample=20.0),
        _run("fast", 1, x, [0.2, 0.6, 0.6], tokens_per_sample=20.0),
    ]
    report = build_report(runs, baseline="grpo", target=0.9, budget={"samples": 200}, sweep="toy", target_of="final")
    rows = {r["method"]: r for r in report["rows"]}
    assert [r["method"] for r in report["rows"]] == ["grpo", "fast"]  # the baseline first
    g, f = rows["grpo"]["metrics"], rows["fast"]["metrics"]
    assert g["pass_at_1"]["mean"] == pytest.approx(0.5) and g["pass_at_1"]["values"] == [0.4, 0.6]
    # AUC over 200 samples: grpo seed 0 = (0.25*100 + 0.35*100)/200 = 0.30, seed 1 = (25 + 45)/200 = 0.35
    assert g["auc_samples"]["values"] == pytest.approx([0.30, 0.35])
    assert f["auc_samples"]["values"] == pytest.approx([0.425, 0.5])  # (35+50)/200, (40+60)/200
    # target = 0.9 * mean grpo final = 0.45; fast seed 0 crosses 0.45 on 0.2 -> 0.5 at 100*(0.25/0.3)
    assert f["samples_to_target"]["values"] == pytest.approx([100 * 0.25 / 0.3, 100 * 0.25 / 0.4])
    # grpo seed 0 never reaches 0.45 (final 0.4): its mean over seeds is undefined
    assert g["samples_to_target"]["values"][0] is None and g["samples_to_target"]["mean"] is None
    assert g["samples_to_target"]["values"][1] == pytest.approx(200 - 100 * 0.15 / 0.3)
    # the token horizon is the least any run used (grpo: 2000 tokens); fast uses 20 tokens a sample,
    # so over 2000 tokens it sees its first 100 samples: (0.2+0.5)/2 = 0.35, (0.2+0.6)/2 = 0.4
    assert f["auc_tokens"]["values"] == pytest.approx([0.35, 0.40])
    assert f["tokens_to_target"]["values"] == pytest.approx([2000 * 0.25 / 0.3, 2000 * 0.25 / 0.4])
    # the paired difference to the baseline, seed by seed: 0.1 and 0.0; two seeds give no interval
    d = rows["fast"]["vs_baseline"]["pass_at_1"]
    assert d["mean"] == pytest.approx(0.05) and d["lo"] is None and d["hi"] is None and d["seeds"] == [0, 1]
    assert rows["grpo"]["vs_baseline"] == {}
    assert rows["fast"]["curve"]["pass_at_1"] == pytest.approx([0.2, 0.55, 0.55])
    assert rows["fast"]["curve"]["tokens"] == pytest.approx([0, 2000, 4000])
    text = markdown(report)
    assert "| m | fast | 2 | 0.550 | +0.050 |" in text and "not reached (1/2)" in text


def test_target_as_a_share_of_the_baseline_gain():
    x = [0, 100, 200]
    runs = [
        _run("grpo", 0, x, [0.2, 0.3, 0.4]),
        _run("grpo", 1, x, [0.2, 0.3, 0.6]),
        _run("fast", 0, x, [0.2, 0.5, 0.5]),
        _run("flat", 0, x, [0.2, 0.2, 0.2]),
    ]
    report = build_report(runs, baseline="grpo", target=0.5, budget={"samples": 200}, sweep="toy")
    rows = {r["method"]: r for r in report["rows"]}
    # base 0.2, final 0.5 (means over grpo's seeds): the target is 0.2 + 0.5 * 0.3 = 0.35
    assert rows["grpo"]["target_pass_at_1"] == pytest.approx(0.35)
    assert rows["fast"]["metrics"]["samples_to_target"]["values"] == pytest.approx([50.0])  # 0.2 -> 0.5 over 100
    assert rows["grpo"]["metrics"]["samples_to_target"]["values"] == pytest.approx([150.0, 100 + 100 * 0.05 / 0.3])
    assert rows["flat"]["metrics"]["samples_to_target"]["values"] == [None]
    # a baseline that did not improve leaves the target undefined: a dash, not zero
    worse = [_run("grpo", 0, x, [0.3, 0.2, 0.2]), _run("fast", 0, x, [0.3, 0.5, 0.5])]
    r2 = build_report(worse, baseline="grpo", target=0.9, budget={"samples": 200})
    assert all(r["target_pass_at_1"] is None for r in r2["rows"])
    assert "| m | fast | 1 | 0.500 | +0.300 |" in markdown(r2)


def test_the_report_carries_greedy_accuracy_and_training_means_when_runs_have_them():
    """A run's final greedy accuracy and its training means (RunResult.train) become report metrics
    over seeds; a row whose runs have none of them has no such metric."""
    x = [0, 100]
    runs = [_run("grpo", s, x, [0.2, 0.3]) for s in (0, 1)] + [_run("arca", s, x, [0.2, 0.3]) for s in (0, 1)]
    for r, greedy, gini in zip(runs[2:], (0.5, 0.7), (0.3, 0.5)):
        r.history[-1].eval["toy"]["greedy"] = greedy
        r.train = {"train_reward": 0.25, "train_weight_gini": gini, "credit_gini": 0.6}
    rows = {r["method"]: r for r in build_report(runs, baseline="grpo", target=0.9, sweep="toy")["rows"]}
    m = rows["arca"]["metrics"]
    assert m["greedy"]["mean"] == pytest.approx(0.6) and m["weight_gini"]["values"] == [0.3, 0.5]
    assert m["train_reward"]["mean"] == pytest.approx(0.25) and m["credit_gini"]["mean"] == pytest.approx(0.6)
    assert "greedy" not in rows["grpo"]["metrics"] and "weight_gini" not in rows["grpo"]["metrics"]
