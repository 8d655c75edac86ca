"""The report's inference on hand-made runs: intervals inside each metric's range, the family of
comparisons (controls, Holm, the MDE line), the blame table and the dry run's design lines."""

import numpy as np
import pytest

from bench.errors import CreditBenchError
from bench.report.comparisons import analyse, blame_table, difference, interval
from bench.report.design import design_lines
from bench.report.files import markdown
from bench.report.summary import build_report
from bench.run.result import EvalPoint, RunResult
from bench.sweep.analysis import Analysis

P, N = 60, 4


def _run(label: str, seed: int, p: float, rng: np.random.Generator, blame: dict | None = None) -> RunResult:
    """A run whose final eval draws N samples of P problems at per-problem rates around ``p``."""
    rates = np.clip(np.linspace(p - 0.2, p + 0.2, P) + rng.normal(0, 0.01), 0, 1)
    counts = rng.binomial(N, rates)
    base_counts = rng.binomial(N, np.full(P, 0.2))
    points = []
    for step, c in ((0, base_counts), (8, counts)):
        m = {"pass_at_1": float(c.mean() / N), "avg_at_4": float(c.mean() / N), "mean_length": 20.0}
        points.append(EvalPoint(step, step * 100, step * 2000, {"toy": m}, per_problem={"toy": c.tolist()}))
    return RunResult(
        run_name=f"{label}-s{seed}", mlflow_run_id="", method=label.split("-")[0], task="toy", model="m", params=1,
        seed=seed, steps=8, samples=800, tokens=16000, wall_s=1.0, tags={"label": label},
        budget={"samples": 800, "tokens": 0}, base=points[0].eval["toy"], final=points[-1].eval["toy"],
        delta_pass_at_1={}, history=points, eval_n=N, blame=blame or {},
    )  # fmt: skip


def test_intervals_stay_inside_the_range_and_need_three_seeds():
    near_zero = interval([0.0, 0.01, 0.0, 0.02, 0.0], "pass_at_1")
    assert 0.0 <= near_zero["lo"] <= near_zero["mean"] <= near_zero["hi"] <= 1.0
    two = interval([0.3, 0.4], "pass_at_1")
    assert two["mean"] == pytest.approx(0.35) and two["lo"] is None and two["hi"] is None
    length = interval([1.0, 30.0, 2.0], "mean_length")  # unbounded above, >= 0
    assert length["lo"] == 0.0 and length["hi"] > 30
    d = difference([0.9, -0.9, 0.95], "pass_at_1")
    assert -1.0 <= d["lo"] and d["hi"] <= 1.0
    # by hand: mean 0.2, sd 0.1, t(0.975, 2) = 4.3027 -> 0.2 -+ 4.3027 * 0.1 / sqrt(3) = 0.2 -+ 0.2484
    d = difference([0.1, 0.2, 0.3], "pass_at_1")
    assert (d["mean"], d["lo"], d["hi"]) == pytest.approx((0.2, -0.0484, 0.4484), abs=1e-4)


def test_the_family_pairs_controlled_labels_with_their_control_and_prints_the_mde():
    rng = np.random.default_rng(0)
    runs = [
        _run(label, s, p, rng)
        for s in range(5)
        for label, p in (("grpo", 0.4), ("better", 0.6), ("same", 0.4), ("grpo-lora", 0.3), ("arca", 0.3))
    ]
    a = Analysis(margin=0.05, controls={"arca": "grpo-lora"})
    out = analyse(runs, "grpo", a)
    comps = out["assessment"]["comparisons"]
    assert [c["baseline"] for c in comps] == ["grpo", "grpo", "grpo", "grpo-lora"]
    assert [list(c["diffs"]) for c in comps] == [["better"], ["grpo-lora"], ["same"], ["arca"]]
    means = {(r.label, r.seed): float(np.mean(r.history[-1].per_problem["toy"])) / N for r in runs}
    for c in comps:  # each pair on its own variance: the paired t-test's SE, sd(d) / sqrt(S)
        (lab,) = c["diffs"]
        d = np.array([means[(lab, s)] - means[(c["baseline"], s)] for s in range(5)])
        assert c["diffs"][lab]["se"] == pytest.approx(d.std(ddof=1) / np.sqrt(5), rel=1e-9)
    assert comps[0]["n_problems"] == P and comps[0]["n_samples"] == N
    rows = {r["label"]: r for r in out["assessment"]["rows"]}
    assert out["assessment"]["m"] == 4
    assert rows["better"]["verdict"] == "better" and rows["better"]["p_holm"] < 0.05
    assert rows["better"]["p_holm"] >= rows["better"]["diff"]["p"]  # adjusting never lowers a p-value
    assert "detects a difference of" in out["markdown"]
    report = build_report(runs, baseline="grpo", budget={"samples": 800}, sweep="toy", analysis=a)
    text = markdown(report)
    assert "## Comparisons" in text and "p_Holm" in text
    with pytest.raises(CreditBenchError, match=r"metric 'pass_at_2' is not in the runs' eval; valid: avg_at_4"):
        analyse(runs, "grpo", Analysis(metric="pass_at_2"))


def test_blame_table_means_over_seeds():
    rng = np.random.default_rng(1)
    b = {"share": 0.2, "uniform_share": 0.05, "rank_frac": 0.1, "top1": 0.5, "n": 12}
    runs = [_run("grpo", s, 0.4, rng, blame={**b, "share": 0.2 + 0.01 * s}) for s in range(3)]
    runs.append(_run("other", 0, 0.4, rng))  # no blame: not tabulated
    rows = blame_table(runs)
    assert len(rows) == 1 and rows[0]["method"] == "grpo" and rows[0]["seeds"] == 3
    assert rows[0]["share"]["mean"] == pytest.approx(0.21) and 0 <= rows[0]["share"]["lo"] <= 0.21


def test_dry_run_design_lines(tmp_path):
    from bench.sweep.sweep import load_spec

    spec = tmp_path / "s.yaml"
    spec.write_text(
        "name: d\ntasks: [arithmetic]\nmethods: [grpo, s_trace, gspo]\nmodels: [tiny-500k]\nseeds: [0, 1, 2, 3, 4, 5]\n"
        "budget: {samples: 256}\neval: {n: 8, num_problems: 200}\nanalysis: {sd_train: 0.02, sd_item: 0.4}\n"
    )
    lines = design_lines(load_spec(spec), str(tmp_path))
    assert "6 seeds x 3 labels" in lines[0] and "2 comparisons" in lines[0]
    # 18 x 256 samples; 18 x 2 eval points x 200 x 8 completions, less the 12 base evals the labels of a seed reuse
    assert lines[1] == "cost: 18 runs, 4,608 training samples and 38,400 eval completions"
    spec.write_text(spec.read_text().replace("num_problems: 200", "num_problems: 200, reuse_base: false"))
    assert design_lines(load_spec(spec), str(tmp_path))[1].endswith("and 57,600 eval completions")
    assert "arithmetic, vs the baseline: MDE of pass_at_1" in lines[2] and "seeds for a 3-point MDE" in lines[2]
    assert "prior: sd_train 0.0200" in lines[3]
    spec.write_text(spec.read_text().replace("analysis: {sd_train: 0.02, sd_item: 0.4}", "analysis: {}"))
    assert "no variance to size the design with" in design_lines(load_spec(spec), str(tmp_path))[2]


def test_dry_run_falls_back_to_the_prior_when_the_pilot_has_no_runs(tmp_path):
    from bench.sweep.sweep import load_spec

    spec = tmp_path / "s.yaml"
    spec.write_text(
        "name: d\ntasks: [chain]\nmethods: [grpo, s_trace]\nmodels: [tiny-500k]\nseeds: [0, 1, 2]\n"
        "budget: {samples: 256}\neval: {n: 4, num_problems: 50}\n"
        "analysis: {pilot: never-run, sd_train: 0.02, sd_item: 0.4}\n"
    )
    lines = design_lines(load_spec(spec), str(tmp_path))[2:]
    assert lines[0].startswith("  chain, vs the baseline: MDE of pass_at_1") and "prior: sd_train 0.0200" in lines[1]


def test_the_dry_run_sizes_each_credit_comparison_as_its_report_will():
    """With the committed flagship as its pilot, the dry run's MDE for each method-vs-twin or placebo
    comparison (from that comparison's paired spread) is the one the flagship's report printed for it."""
    import dataclasses
    import json
    import re
    from pathlib import Path

    from bench.sweep.sweep import load_spec

    results = Path(__file__).resolve().parents[2] / "results"
    sweep = load_spec(results / "sweeps" / "embedded.yaml", results)
    credit = json.loads((results / "embedded" / "report.json").read_text())["analysis"]["credit"]
    report = credit["markdown"]
    printed = {f"{a} vs {b}": v for a, b, v in re.findall(r"`(\S+)` vs `(\S+)`: .*? of ([\d.]+) points", report)}
    seeds = {f"{list(c['diffs'])[0]} vs {c['baseline']}": len(c["seeds"]) for c in credit["assessment"]["comparisons"]}
    dry = {}
    for pair, n in seeds.items():  # a sequential sweep's pairs ran their own numbers of seeds: each at its own
        at_n = dataclasses.replace(sweep, spec=dataclasses.replace(sweep.spec, seeds=list(range(n)), sequential=None))
        lines = dict(
            re.findall(r"^    (\S+ vs \S+): MDE ([\d.]+) points", "\n".join(design_lines(at_n, str(results))), re.M)
        )
        dry[pair] = lines[pair]
    assert len(dry) == 5 and dry == printed
