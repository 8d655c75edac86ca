"""rliable-style summaries (bench.report.robust): IQM and P(X > Y) on hand-worked arrays, the stratified
bootstrap's strata and determinism, the three-seed rule, and the committed embedded sweep."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from bench.report.robust import iqm, markdown_lines, probability_of_improvement, stratified_bootstrap, summaries
from bench.report.summary import load_runs
from bench.run.result import RunResult

RESULTS = Path(__file__).resolve().parents[2] / "results"


def _run(label: str, task: str, seed: int, score: float) -> RunResult:
    final = {"pass_at_1": score}
    return RunResult(
        run_name=f"{label}-{task}-s{seed}", mlflow_run_id="", method=label, task=task, model="m", params=1,
        seed=seed, steps=1, samples=1, tokens=1, wall_s=1.0, tags={"label": label}, budget={},
        base=final, final=final, delta_pass_at_1={}, history=[],
    )  # fmt: skip


def test_iqm_drops_a_quarter_from_each_end():
    """8 scores 1..8 (4 runs x 2 tasks, unsorted): drop floor(8/4) = 2 from each end -> mean(3, 4, 5, 6) = 4.5.
    10 scores 0..8 and 100: drop floor(10/4) = 2 from each end (0, 1 and 8, 100) -> mean(2..7) = 4.5."""
    assert iqm(np.array([[8, 1], [3, 6], [2, 7], [5, 4]])) == 4.5
    ten = np.array([0, 1, 2, 3, 4, 5, 6, 7, 8, 100]).reshape(5, 2)
    assert iqm(ten) == 4.5
    x = np.random.default_rng(0).random((7, 3))
    assert iqm(x) == pytest.approx(stats.trim_mean(x, 0.25, axis=None))


def test_probability_of_improvement_by_hand():
    """Task 1: x = (2, 3), y = (1, 2): pairs 2>1, 2=2 (1/2), 3>1, 3>2 -> 3.5 / 4 = 0.875.
    Task 2: x = (0, 0), y = (1, 1): no pair won -> 0. Average over tasks: 0.4375."""
    x, y = np.array([[2, 0], [3, 0]]), np.array([[1, 1], [2, 1]])
    assert probability_of_improvement(x, y) == 0.4375
    assert probability_of_improvement(y, x) == 1 - 0.4375  # P(X > Y) + P(Y > X) = 1 with ties split


def test_probability_of_improvement_is_mann_whitney_u_over_nm_and_half_against_itself():
    rng = np.random.default_rng(1)
    x, y = rng.integers(0, 5, (6, 3)), rng.integers(0, 5, (4, 3))  # small integers: many ties
    u = [stats.mannwhitneyu(x[:, m], y[:, m], alternative="greater").statistic / (6 * 4) for m in range(3)]
    assert probability_of_improvement(x, y) == pytest.approx(np.mean(u))
    assert probability_of_improvement(x, x) == 0.5
    with pytest.raises(ValueError, match="same tasks"):
        probability_of_improvement(x, y[:, :2])


def test_matches_rliables_own_metrics():
    """rliable 1.2.0's ``metrics.aggregate_iqm`` and ``metrics.probability_of_improvement`` on these
    arrays give 0.4375 and 0.425 (computed once with the package; it is not a dependency)."""
    rng = np.random.default_rng(2)
    x, y = rng.integers(0, 8, (10, 4)) / 8, rng.integers(0, 8, (7, 4)) / 8
    assert iqm(x) == pytest.approx(0.4375)
    assert probability_of_improvement(x, y) == pytest.approx(0.425)
    assert probability_of_improvement(x, x) == pytest.approx(0.5)


def test_the_bootstrap_resamples_runs_within_each_task_and_each_array_separately():
    """Column 0 holds 0s and 1s, column 1 10s and 11s: a resample that moved a value across tasks
    would show it; the second array (3 runs, not 5) is resampled with its own row count."""
    x = np.array([[0, 10], [1, 11], [0, 11], [1, 10], [0, 10]])
    y = np.array([[5, 50], [6, 60], [7, 70]])
    seen = []

    def fn(a: np.ndarray, b: np.ndarray) -> float:
        assert a.shape == (5, 2) and b.shape == (3, 2)
        assert set(a[:, 0]) <= {0, 1} and set(a[:, 1]) <= {10, 11}
        assert set(b[:, 0]) <= {5, 6, 7} and set(b[:, 1]) <= {50, 60, 70}
        seen.append((a.copy(), b.copy()))
        return float(a.mean() - b.mean())

    stratified_bootstrap(fn, x, y, reps=50)
    # rows are drawn per column: some resample pairs a column-0 value with another row's column-1 value
    assert any(not all(tuple(r) in {tuple(v) for v in y} for r in b) for _, b in seen)


def test_the_bootstrap_interval_is_deterministic_and_covers_the_estimate():
    """One task, 40 normal runs: the percentile interval of the mean is close to mean -+ 1.96 sd / sqrt(n)."""
    x = np.random.default_rng(3).normal(0.5, 0.1, (40, 1))
    lo, hi = stratified_bootstrap(lambda a: float(a.mean()), x, seed=7)
    assert (lo, hi) == stratified_bootstrap(lambda a: float(a.mean()), x, seed=7)
    assert (lo, hi) != stratified_bootstrap(lambda a: float(a.mean()), x, seed=8)
    assert lo < x.mean() < hi
    half = 1.96 * x.std(ddof=1) / np.sqrt(40)
    assert (lo, hi) == pytest.approx((x.mean() - half, x.mean() + half), abs=0.2 * half)
    lo, hi = stratified_bootstrap(iqm, np.random.default_rng(4).random((9, 3)))
    assert lo <= iqm(np.random.default_rng(4).random((9, 3))) <= hi


def test_summaries_need_three_seeds_for_an_interval_and_use_each_labels_control():
    runs = [_run("grpo", t, s, 0.5 + 0.01 * s) for t in ("a", "b") for s in range(4)]
    runs += [_run("better", t, s, 0.9) for t in ("a", "b") for s in range(4)]
    runs += [_run("two", "a", s, 0.1) for s in range(2)]
    runs += [_run("lora", "a", s, 0.3) for s in range(3)] + [_run("arca", "a", s, 0.3) for s in range(3)]
    rows = {r["label"]: r for r in summaries(runs, "grpo", controls={"arca": "lora"})}
    assert list(rows)[0] == "grpo" and rows["grpo"]["control"] is None and rows["grpo"]["p_improvement"] is None
    # grpo's 8 scores 0.50..0.53 twice: drop the two 0.50s and the two 0.53s -> mean(0.51, 0.51, 0.52, 0.52)
    assert rows["grpo"]["iqm"]["value"] == pytest.approx(0.515) and rows["grpo"]["tasks"] == ["a", "b"]
    assert 0 <= rows["grpo"]["iqm"]["lo"] <= 0.515 <= rows["grpo"]["iqm"]["hi"] <= 1
    assert rows["better"]["p_improvement"] == {"value": 1.0, "lo": 1.0, "hi": 1.0}
    assert rows["two"]["seeds"] == 2 and rows["two"]["iqm"]["lo"] is None
    assert rows["two"]["p_improvement"] == {"value": 0.0, "lo": None, "hi": None}  # on task a only
    assert rows["arca"]["control"] == "lora" and rows["arca"]["p_improvement"]["value"] == 0.5
    table = markdown_lines(list(rows.values()))
    assert len(table) == 2 + len(rows) and "| m | two | a | 2 | 0.100 | grpo | 0.000 |" in table


def test_embedded_entropy_top_rarely_beats_grpo():
    """The committed embedded sweep (seeds in rounds on chain: GRPO 6, 80/20 and DAPO to the cap of 48):
    80/20's final pass@1 is below GRPO's, so P(entropy_top > grpo) is well below 1/2; against its twin
    (DAPO) it is a coin flip."""
    runs = load_runs(str(RESULTS), "embedded")
    rows = {r["label"]: r for r in summaries(runs, "grpo")}
    assert {"grpo", "s_trace", "entropy_top", "entropy_top-twin", "entropy_top-placebo"} <= set(rows)
    assert all(r["tasks"] == ["chain"] for r in rows.values())
    assert rows["grpo"]["seeds"] == 6 and rows["entropy_top"]["seeds"] == rows["entropy_top-twin"]["seeds"] == 48
    p = rows["entropy_top"]["p_improvement"]
    assert p["value"] < 0.25 and p["hi"] < 0.5
    grpo = [r.final["pass_at_1"] for r in runs if r.label == "grpo"]
    assert rows["grpo"]["iqm"]["value"] == pytest.approx(stats.trim_mean(grpo, 0.25))
    twin = {r["label"]: r for r in summaries(runs, "grpo", controls={"entropy_top": "entropy_top-twin"})}
    assert twin["entropy_top"]["p_improvement"]["lo"] < 0.5 < twin["entropy_top"]["p_improvement"]["hi"]
