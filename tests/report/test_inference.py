"""The comparison statistics on simulated sweeps with a known truth (bench.report.inference).

The simulation follows the model of the module docstring at the problem level: P fixed problems
with true pass rates p_i; a run (method m, seed s) shifts every p_i by a_m + b_s + e_ms (method
effect, seed effect shared by methods, training noise of sd ``sd_train``) and is evaluated with
n samples per problem (binomial counts). Every simulation has a fixed seed."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from scipy import stats

from bench.report.inference import FEW_SEEDS_NOTE, RUN_LEVEL_NOTE, assess, compare, markdown, pooled_tests
from bench.stats.family import benjamini_hochberg, holm
from bench.stats.intervals import mean_interval
from bench.stats.metrics import pass_at_k_per_problem
from bench.stats.power import mde
from bench.stats.verdict import Outcome, Verdict

ALPHA = 0.05


def simulate(rng, sims, effects, S, p, n, sd_train=0.02, sd_seed=0.02):
    """Correct counts [sims, M, S, P] and the true run pass rates [sims, M, S] (problem-averaged)."""
    M = len(effects)
    shift = np.asarray(effects)[:, None] + rng.normal(0, sd_seed, (sims, 1, S)) + rng.normal(0, sd_train, (sims, M, S))
    true = np.clip(p + shift[..., None], 0, 1)  # [sims, M, S, P]
    return rng.binomial(n, true), true.mean(-1)


def as_scores(counts, n, labels):
    """counts [M, S, P] -> scores[label][seed] = per-problem pass@1."""
    return {lab: {s: counts[i, s] / n for s in range(counts.shape[1])} for i, lab in enumerate(labels)}


def mc_se(p, sims):
    return math.sqrt(p * (1 - p) / sims)


P_MID = np.random.default_rng(0).uniform(0.1, 0.9, 100)  # the problems of a mid-range task


def test_hand_worked_values():
    # Holm: sorted 0.005*4=0.02, 0.01*3=0.03, 0.03*2=0.06, 0.04*1=0.04 -> running max 0.06
    assert holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    # BH: sorted p*4/i = 0.02, 0.02, 0.04, 0.04 (running min from the top changes nothing)
    assert benjamini_hochberg([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.02, 0.04, 0.04, 0.02])
    assert holm([0.6, 0.9]) == [1.0, 1.0]
    # pass@1 = c/n; pass@2 with c=1 of 8: 1 - C(7,2)/C(8,2) = 1 - 21/28; n-c < k -> 1
    assert pass_at_k_per_problem([0, 1, 5, 8], 8, 1) == pytest.approx([0, 1 / 8, 5 / 8, 1])
    assert pass_at_k_per_problem([0, 1, 7, 8], 8, 2) == pytest.approx([0, 0.25, 1, 1])
    # MDE, m=1, df=5, S=6: (t_.975,5 + t_.8,5) * sigma * sqrt(2/6)
    want = (2.5705818 + 0.9195438) * 0.03 * math.sqrt(2 / 6)
    assert mde(0.03, 6, 5) == pytest.approx(want, rel=1e-6)
    # the same formula for a mean of 6 paired differences of sd 0.03 (df 5): SE = 0.03 / sqrt(6)
    assert mde(0.03, 6, 5, paired=True) == pytest.approx((2.5705818 + 0.9195438) * 0.03 / math.sqrt(6), rel=1e-6)


def test_two_labels_is_the_paired_t_test():
    rng = np.random.default_rng(1)
    y = rng.uniform(0.3, 0.6, (2, 7))
    c = compare({"grpo": dict(enumerate(y[0])), "new": dict(enumerate(y[1]))}, "grpo")
    ref = stats.ttest_rel(y[1], y[0])
    d = c.diffs["new"]
    assert d.p == pytest.approx(ref.pvalue, rel=1e-10) and d.value == pytest.approx(np.mean(y[1] - y[0]))
    half = stats.t.ppf(0.975, 6) * np.std(y[1] - y[0], ddof=1) / math.sqrt(7)
    assert (d.lo, d.hi) == pytest.approx((d.value - half, d.value + half))
    assert c.df == 6


def test_null_sweeps_control_family_wise_error_and_fdr():
    """1000 null sweeps, 5 labels (4 comparisons), 6 seeds: no method differs from the baseline."""
    sims = 1000
    counts, _ = simulate(np.random.default_rng(2), sims, [0.0] * 5, 6, P_MID, 8)
    res = pooled_tests(counts.mean(-1) / 8)
    assert res["df"] == 20
    any_holm = np.mean([min(holm(p)) < ALPHA for p in res["p"]])
    any_bh = np.mean([min(benjamini_hochberg(p)) < ALPHA for p in res["p"]])  # all null: FDR = FWER
    any_raw = np.mean((res["p"] < ALPHA).any(-1))
    bound = ALPHA + 2 * mc_se(ALPHA, sims)
    assert any_holm <= bound and any_bh <= bound
    assert any_raw > 0.10  # without the adjustment four tests err far more often than 5%


def test_bh_controls_fdr_with_some_true_effects():
    sims = 1000
    effects = [0.0, 0.0, 0.0, 0.05, 0.05]
    counts, _ = simulate(np.random.default_rng(3), sims, effects, 6, P_MID, 8)
    q = np.array([benjamini_hochberg(p) for p in pooled_tests(counts.mean(-1) / 8)["p"]])
    rejected = q < ALPHA  # [sims, 4]
    false = rejected[:, :2].sum(-1)
    fdr = np.mean(false / np.maximum(rejected.sum(-1), 1))
    assert fdr <= ALPHA + 2 * mc_se(ALPHA, sims)
    assert rejected[:, 2:].mean() > 0.5  # and it still finds the real effects


def test_power_at_the_mde_single_comparison():
    """m=1: the formula's power at its own MDE is 0.795 (noncentral t); simulated within 0.8 +- 0.06."""
    rng, sims, S, sigma = np.random.default_rng(4), 2000, 6, 0.03
    effect = mde(sigma, S, S - 1)
    y = rng.normal(0.4, 0.02, (sims, 1, S)) + rng.normal(0, sigma, (sims, 2, S)) + np.array([[0.0], [effect]])
    power = np.mean(pooled_tests(y)["p"][:, 0] < ALPHA)
    assert abs(power - 0.8) <= 0.06


def test_power_under_holm_at_the_bonferroni_mde():
    rng, sims, S, sigma = np.random.default_rng(5), 1000, 6, 0.03
    effect = mde(sigma, S, 4 * (S - 1), m=4)
    y = rng.normal(0, sigma, (sims, 5, S)) + np.array([0.0, effect, effect, effect, effect])[:, None] + 0.4
    adj = np.array([holm(p) for p in pooled_tests(y)["p"]])
    assert np.mean(adj < ALPHA) >= 0.78


def test_recovers_a_known_effect_and_intervals_cover():
    """3 labels, 5 seeds, problem-level data: unbiased differences, ~95% coverage of means and diffs."""
    sims, S, effects = 1000, 5, [0.0, 0.05, -0.03]
    counts, true = simulate(np.random.default_rng(6), sims, effects, S, P_MID, 8)
    y = counts.mean(-1) / 8
    res = pooled_tests(y)
    truth = np.array(effects[1:])
    assert np.abs(res["diff"].mean(0) - truth).max() < 3 * res["diff"].std(0).max() / math.sqrt(sims)
    cover = (res["lo"] <= truth) & (truth <= res["hi"])
    assert (cover.mean(0) >= 0.92).all() and (cover.mean(0) <= 0.98).all()
    # per-label means: the truth is the expected run pass rate (seed and training noise averaged out)
    mean_truth = P_MID.mean() + np.array(effects)
    lo, hi = mean_interval(y)
    assert (((lo <= mean_truth) & (mean_truth <= hi)).mean(0) >= 0.92).all()
    hits = []
    for i in range(200):
        c = compare(as_scores(counts[i], 8, ["a", "b", "c"]), "a")
        hits.append([c.means[lab].lo <= t <= c.means[lab].hi for lab, t in zip("abc", mean_truth)])
    assert np.mean(hits) >= 0.92
    one = compare(as_scores(counts[0], 8, ["a", "b", "c"]), "a")
    assert one.diffs["b"].value == pytest.approx(res["diff"][0, 0]) and one.n_problems == 100


def test_mean_intervals_cover_near_the_boundary_and_stay_in_range():
    """A true pass@1 near 0.005-0.015: run means are skewed, the arcsine-root interval still covers."""
    for hi_p, problems, sd in [(0.01, 50, 0.003), (0.03, 100, 0.005)]:
        rng = np.random.default_rng(7)
        p_low = rng.uniform(0.0, hi_p, problems)
        counts, true = simulate(rng, 1000, [0.0, 0.0], 5, p_low, 8, sd_train=sd, sd_seed=sd)
        truth = true.mean((0, 2))  # the expected run pass rate of each label (clipped at 0)
        lo, hi = mean_interval(counts.mean(-1) / 8)
        assert ((lo <= truth) & (truth <= hi)).mean() >= 0.92
        assert (lo >= 0).all() and (hi <= 1).all()
    # the module's intervals, on data at the edges of the range
    near0 = {"a": {0: 0.0, 1: 0.0, 2: 0.01, 3: 0.0, 4: 0.02}, "b": {0: 0.99, 1: 1.0, 2: 0.97, 3: 1.0, 4: 1.0}}
    c = compare(near0, "a")
    a_ = c.means["a"]
    assert 0.0 <= a_.lo < a_.value < a_.hi and a_.hi - a_.value > a_.value - a_.lo  # asymmetric near 0
    assert c.means["b"].value < c.means["b"].hi <= 1.0 and c.means["b"].lo < c.means["b"].value
    assert -1.0 <= c.diffs["b"].lo <= c.diffs["b"].hi <= 1.0
    wide = compare({"a": {0: 0.0, 1: 0.3, 2: 0.0}, "b": {0: 1.0, 1: 0.7, 2: 1.0}}, "a")
    assert wide.diffs["b"].hi == 1.0 and wide.means["a"].lo == 0.0 and wide.means["b"].hi == 1.0


def test_fewer_than_three_seeds_gives_values_only():
    c = compare({"a": {0: 0.4, 1: 0.5}, "b": {0: 0.45, 1: 0.6, 2: 0.5}}, "a", task="math")
    assert c.seeds == [0, 1] and c.dropped == {"b": [2]}
    assert c.means["a"].value == pytest.approx(0.45) and c.means["a"].lo is None and c.means["a"].hi is None
    assert c.diffs["b"].value == pytest.approx(0.075) and c.diffs["b"].lo is None and c.diffs["b"].p is None
    assert FEW_SEEDS_NOTE.format(min=3, s=2) in c.notes and any("seeds 2 left out" in n for n in c.notes)
    a = assess([c])
    assert a.m == 0 and a.mde == [None] and str(a.rows[0].verdict) == "inconclusive"
    assert "resolves no difference" in markdown(a)


def test_run_level_values_give_the_same_tests_and_say_so():
    rng = np.random.default_rng(8)
    per_problem = {lab: {s: rng.binomial(8, 0.4 + 0.02 * i, 50) / 8 for s in range(4)} for i, lab in enumerate("abc")}
    run_level = {lab: {s: float(v.mean()) for s, v in runs.items()} for lab, runs in per_problem.items()}
    full, short = compare(per_problem, "a"), compare(run_level, "a")
    assert full.diffs["c"].p == pytest.approx(short.diffs["c"].p)
    assert short.n_problems is None and RUN_LEVEL_NOTE in short.notes and RUN_LEVEL_NOTE not in full.notes


def test_tost_equivalence():
    rng, S = np.random.default_rng(9), 6
    seed = rng.normal(0, 0.02, S)
    tight = {
        "base": dict(enumerate(0.5 + seed + rng.normal(0, 0.004, S))),
        "same": dict(enumerate(0.5 + seed + rng.normal(0, 0.004, S))),
        "far": dict(enumerate(0.55 + seed + rng.normal(0, 0.004, S))),
    }
    a = assess([compare(tight, "base", task="t", delta=0.02)])
    verdicts = {r.label: str(r.verdict) for r in a.rows}
    assert verdicts == {"far": "better", "same": "better, within ±0.02"}  # significant and inside the margin
    # a real but small difference (+0.005, significant) shown to lie inside the margin: both said
    small = {
        "base": {s: 0.5 + 0.01 * s for s in range(5)},
        "new": {s: 0.505 + 0.01 * s + 1e-4 * (-1) ** s for s in range(5)},
    }
    (row,) = assess([compare(small, "base", task="t", delta=0.02)]).rows
    assert row.diff.p < 1e-6 and str(row.verdict) == "better, within ±0.02"
    assert assess([compare(small, "base", task="t")]).rows[0].verdict == Verdict(Outcome.BETTER)  # no margin, no TOST
    # a true difference at the margin: TOST claims equivalence at most alpha of the time
    y = 0.5 + rng.normal(0, 0.01, (2000, 2, S)) + np.array([[0.0], [0.02]])
    p_tost = pooled_tests(y, delta=0.02)["p_tost"][:, 0]
    assert np.mean(p_tost < ALPHA) <= ALPHA + 2 * mc_se(ALPHA, 2000)
    # beyond the margin with noisy data: never equivalent
    noisy = {"base": {s: 0.5 + 0.03 * (s % 2) for s in range(4)}, "worse": {s: 0.45 + 0.02 * (s % 3) for s in range(4)}}
    (row,) = assess([compare(noisy, "base", task="t", delta=0.02)]).rows
    assert row.verdict.outcome is not Outcome.EQUIVALENT


def test_assessment_table_mde_line_and_json():
    rng = np.random.default_rng(10)
    counts, _ = simulate(rng, 2, [0.0, 0.08, 0.0], 6, P_MID, 8)
    comps = [compare(as_scores(counts[i], 8, ["grpo", "vineppo", "rloo"]), "grpo", task=t, delta=0.02, n_samples=8)
             for i, t in enumerate(["arith", "countdown"])]  # fmt: skip
    a = assess(comps)
    assert a.m == 4 and len(a.rows) == 4
    raw = [r.diff.p for r in a.rows]
    assert [r.p_holm for r in a.rows] == pytest.approx(holm(raw))
    assert [r.p_bh for r in a.rows] == pytest.approx(benjamini_hochberg(raw))
    assert a.mde[0] == pytest.approx(mde(comps[0].sigma, 6, 10, m=4))
    text = markdown(a)
    assert "| label | task | mean [CI] | diff to baseline [CI] | p | p_Holm | p_BH | TOST verdict |" in text
    line = (
        f"`arith`, each label vs `{comps[0].baseline}`: this design (6 seeds, 100 problems x 8 samples, 4 comparisons, "
        f"Holm) detects a difference of {100 * a.mde[0]:.1f} points of pass@1 with 80% power; differences smaller "
        "than that are not resolved."
    )
    assert line in text
    assert json.loads(json.dumps(a.to_dict()))["rows"][0]["label"] == "rloo"
