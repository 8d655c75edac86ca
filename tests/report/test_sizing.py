"""Design-time sizing on simulated sweeps with a known truth (bench.report.sizing): the MDE a design
resolves, the variance components it reads from a pilot, and the seeds a target MDE needs. The
simulation is test_inference's (problem-level, fixed seeds)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from bench.report.inference import pooled_tests
from bench.report.sizing import design_mde, estimate_variance_components, seeds_needed
from tests.report.test_inference import ALPHA, P_MID, simulate


def test_design_mde_by_hand():
    """Without sampling noise (sd_item 0), two labels, m=1, 6 seeds (df 5): design_mde is the run-level
    MDE, (t_.975,5 + t_.8,5) * sd_train * sqrt(2/6)."""
    want = (2.5705818 + 0.9195438) * 0.03 * math.sqrt(2 / 6)
    assert design_mde(0.03, 0.0, 6, 100, 8, 2, 1) == pytest.approx(want, rel=1e-6)


def test_design_mde_matches_the_simulated_mde():
    """The effect that the simulated two-label, 6-seed, problem-level sweep detects 80% of the time is
    design_mde's at the true variance components (sd_item^2 = mean p_i(1-p_i))."""
    rng, sims, S, n, sd_train = np.random.default_rng(11), 1000, 6, 4, 0.015
    sd_item = math.sqrt(np.mean(P_MID * (1 - P_MID)))
    planned = design_mde(sd_train, sd_item, S, len(P_MID), n, 2, 1)
    effects = planned * np.linspace(0.6, 1.4, 9)
    power = []
    for e in effects:
        counts, _ = simulate(rng, sims, [0.0, e], S, P_MID, n, sd_train=sd_train)
        power.append(np.mean(pooled_tests(counts.mean(-1) / n)["p"][:, 0] < ALPHA))
    empirical = float(np.interp(0.8, np.maximum.accumulate(power), effects))
    assert abs(empirical / planned - 1) < 0.15


def test_variance_components_are_recovered():
    rng, sims, n, sd_train = np.random.default_rng(12), 100, 8, 0.03
    counts, _ = simulate(rng, sims, [0.0, 0.02, -0.01, 0.0], 10, P_MID, n, sd_train=sd_train)
    est = [estimate_variance_components({lab: dict(enumerate(counts[i, m])) for m, lab in enumerate("abcd")}, n)
           for i in range(sims)]  # fmt: skip
    assert np.mean([e.sd_item for e in est]) == pytest.approx(math.sqrt(np.mean(P_MID * (1 - P_MID))), rel=0.02)
    assert np.mean([e.sd_train**2 for e in est]) == pytest.approx(sd_train**2, rel=0.1)
    assert est[0].df == 27 and est[0].n_problems == 100


def test_seeds_needed_is_the_smallest_design_that_reaches_the_target():
    args = dict(sd_train=0.02, sd_item=0.45, n_problems=200, n_samples=8, n_labels=5, m_comparisons=4)
    s = seeds_needed(0.03, **args)
    assert design_mde(n_seeds=s, **args) <= 0.03 < design_mde(n_seeds=s - 1, **args)
    assert seeds_needed(0.0, **args) is None
