"""tune.pairs: a credit method and its controls tuned to one shared learning rate, with the choice's
margin and the pair's comparison at every rate of the grid."""

import json
from types import SimpleNamespace

import pytest
from test_sweep import write_spec

from bench.errors import CreditBenchError
from bench.sweep.sweep import load_spec


def test_paired_tuning_gives_a_pair_one_rate_its_margin_and_the_comparison_at_every_rate(tmp_path):
    """tune.pairs: the method, its twin and its placebo share the point where the mean of method and
    twin is best (the placebo runs no tuning); the margin over the runner-up is in SEs of the paired
    difference over the tuning seeds; each point's method - twin is the sensitivity row."""
    from bench.sweep import tuning

    lrs = [1.0e-4, 2.0e-4, 4.0e-4]
    tune = {"lr": lrs, "seeds": [7, 8, 9], "pairs": True}
    spec = write_spec(tmp_path, methods=["grpo", "entropy_top"], credit_controls=["twin", "placebo"], tune=tune)
    tuned = load_spec(spec, tmp_path, tuning=True)
    assert {r.label.split("@")[0] for r in tuned.runs} == {"grpo", "entropy_top", "entropy_top-twin"}
    # method best alone at 4e-4, twin at 1e-4; their mean best at 2e-4
    table = {"grpo": [0.3, 0.2, 0.1], "entropy_top": [0.30, 0.40, 0.42], "entropy_top-twin": [0.40, 0.36, 0.20]}
    noise = {7: 0.0, 8: 0.01, 9: -0.005}
    runs = [
        SimpleNamespace(label=r.label, seed=r.cfg.seed, samples=64, wall_s=1.0,
                        final={"pass_at_1": table[r.label.split("@")[0]][lrs.index(r.cfg.rl.lr)] + noise[r.cfg.seed]})
        for r in tuned.runs
    ]  # fmt: skip
    choice = tuning.select(load_spec(spec, tmp_path).spec, runs)
    labels = choice["labels"]
    assert [labels[x]["chosen"] for x in ("entropy_top", "entropy_top-twin", "entropy_top-placebo")] == [
        {"lr": 2e-4}
    ] * 3
    assert labels["grpo"]["chosen"] == {"lr": 1e-4} and "pair" not in labels["grpo"]
    pair = choice["pairs"]["entropy_top"]
    assert [r["diff"] for r in pair["by_point"]] == pytest.approx([-0.10, 0.04, 0.22])
    assert pair["margin_se"] is None or pair["margin_se"] > 2  # the same noise for both points: SE 0
    text = "\n".join(tuning.markdown_lines(choice))
    assert "| entropy_top vs entropy_top-twin | -0.100 ± 0.000 | +0.040 ± 0.000 * | +0.220 ± 0.000 |" in text
    assert "| entropy_top-placebo (pair of entropy_top) | lr 0.0002 |" in text
    sweep = load_spec(spec, tmp_path)
    tuning.tuning_path(tmp_path, sweep.name).parent.mkdir(parents=True, exist_ok=True)
    tuning.tuning_path(tmp_path, sweep.name).write_text(json.dumps(choice))
    lr = {r.label: r.cfg.rl.lr for r in load_spec(spec, tmp_path).runs}
    assert lr == {"grpo": 1e-4, "entropy_top": 2e-4, "entropy_top-twin": 2e-4, "entropy_top-placebo": 2e-4}
    with pytest.raises(CreditBenchError, match="tune.pairs and tune.knobs cannot be combined"):
        load_spec(write_spec(tmp_path, tune={**tune, "knobs": {"entropy_top": {"rho": [0.1, 0.2]}}}))
