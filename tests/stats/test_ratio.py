"""bench.stats.ratio: Fieller's and the delta-method interval for a ratio of paired means against a
hand-worked example, the rule that prints no ratio over an unresolved denominator, a known
denominator, and the coverage of both in a simulation."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from bench.errors import CreditBenchError
from bench.stats.ratio import delta, fieller


def test_both_intervals_match_the_hand_worked_example():
    """x = [0, 2, 4], y = [4, 3, 5], n = 3, q = 2.

    a = 2, b = 4; var(x) = (4 + 0 + 4) / 2 = 4, var(y) = (0 + 1 + 1) / 2 = 1,
    cov = ((-2)(0) + (0)(-1) + (2)(1)) / 2 = 1; so v11 = 4/3, v22 = 1/3, v12 = 1/3.
    Fieller: A = 16 - 4/3 = 44/3, B = 8 - 4/3 = 20/3, C = 4 - 16/3 = -4/3,
    B^2 - A C = 400/9 + 176/9 = 64, roots (20/3 -+ 8) / (44/3) = (20 -+ 24) / 44: [-1/11, 1].
    Delta: R = 1/2, se_R^2 = (4/3 - 2 (1/2)(1/3) + (1/4)(1/3)) / 16 = (13/12) / 16 = 13/192,
    q se_R = sqrt(13/48): [1/2 - sqrt(13/48), 1/2 + sqrt(13/48)] = [-0.0204, 1.0204].
    Fieller's is not symmetric about 1/2: it reaches further below, less far above."""
    x, y = np.array([0.0, 2.0, 4.0]), np.array([4.0, 3.0, 5.0])
    f, d = fieller(x, y, 2.0), delta(x, y, 2.0)
    assert f is not None and d is not None
    assert f.estimate == d.estimate == 0.5
    assert f.lo == pytest.approx(-1 / 11, abs=1e-9) and f.hi == pytest.approx(1.0, abs=1e-9)
    half = math.sqrt(13 / 48)
    assert d.lo == pytest.approx(0.5 - half, abs=1e-9) and d.hi == pytest.approx(0.5 + half, abs=1e-9)


def test_no_ratio_where_the_denominators_interval_contains_zero():
    """y = [-1, 0, 2]: b = 1/3, v22 = (16/9 + 1/9 + 25/9) / 2 / 3 = 7/9, b^2 = 1/9 <= 4 v22 at q = 2.
    y = [1, 2, 3]: b = 2, se_b = 1 / sqrt(3), |b| / se_b = 2 sqrt(3) = 3.46: a ratio at q = 3.4, none
    at q = 3.5, for both methods."""
    x = np.array([1.0, 2.0, 3.0])
    assert fieller(x, np.array([-1.0, 0.0, 2.0]), 2.0) is None
    assert delta(x, np.array([-1.0, 0.0, 2.0]), 2.0) is None
    y = np.array([1.0, 2.0, 3.0])
    assert fieller(x, y, 3.4) is not None and delta(x, y, 3.4) is not None
    assert fieller(x, y, 3.5) is None and delta(x, y, 3.5) is None


def test_a_known_denominator_gives_the_plain_interval_over_it():
    """y = [2, 2, 2]: v22 = v12 = 0; x = [1, 2, 3]: a = 2, v11 = 1/3; at q = 2 both give
    (2 -+ 2 / sqrt(3)) / 2 = 1 -+ 1 / sqrt(3). A denominator known to be 0 gives no ratio."""
    x, y = np.array([1.0, 2.0, 3.0]), np.array([2.0, 2.0, 2.0])
    for method in (fieller, delta):
        r = method(x, y, 2.0)
        assert r is not None and r.estimate == 1.0
        assert r.lo == pytest.approx(1 - 1 / math.sqrt(3), abs=1e-12)
        assert r.hi == pytest.approx(1 + 1 / math.sqrt(3), abs=1e-12)
        assert method(x, np.zeros(3), 2.0) is None


def test_samples_must_be_paired_and_at_least_three():
    with pytest.raises(CreditBenchError, match="n >= 3"):
        fieller(np.arange(3.0), np.arange(4.0), 2.0)
    with pytest.raises(CreditBenchError, match="n >= 3"):
        delta(np.arange(2.0), np.arange(2.0), 2.0)


def _coverage(z: float, seed: int, reps: int = 4000, n: int = 8) -> tuple[float, float, float]:
    """Among ``reps`` draws of n pairs (x, y), bivariate normal with sd 1, correlation 0.6,
    mean(y) / se(y) = ``z`` and true ratio 2 (far from the regression slope 0.6, where the delta
    method errs): the share printed, and Fieller's and the delta method's coverage of 2 among the
    ratios printed, at q = t_{0.975, n - 1}."""
    rng = np.random.default_rng(seed)
    my = z / math.sqrt(n)
    xy = rng.multivariate_normal([2 * my, my], [[1.0, 0.6], [0.6, 1.0]], size=(reps, n))  # [reps, n, 2]
    q = float(stats.t.ppf(0.975, n - 1))
    f = [fieller(s[:, 0], s[:, 1], q) for s in xy]
    d = [delta(s[:, 0], s[:, 1], q) for s in xy]
    printed = [(a, b) for a, b in zip(f, d) if a is not None and b is not None]
    assert len(printed) == sum(r is not None for r in f) == sum(r is not None for r in d)  # one rule
    covered = np.array([(a.lo <= 2 <= a.hi, b.lo <= 2 <= b.hi) for a, b in printed])  # [printed, 2]
    return len(printed) / reps, float(covered[:, 0].mean()), float(covered[:, 1].mean())


def test_fieller_covers_at_the_nominal_level_and_the_delta_method_no_better():
    """A resolved denominator (mean(y) / se(y) = 6): Fieller covers 0.95 -+ 0.015. A noisy one (3,
    about a quarter of draws print no ratio): Fieller's printed intervals still cover >= 0.93, the
    delta method's no more than Fieller's (+ 0.01); with seed 0 it gets about 0.90."""
    shown, f_cov, d_cov = _coverage(z=6.0, seed=0)
    print(f"\nmean(y)/se(y) = 6: printed {shown:.4f}, Fieller {f_cov:.4f}, delta {d_cov:.4f}")
    assert shown > 0.99 and abs(f_cov - 0.95) <= 0.015
    shown, f_cov, d_cov = _coverage(z=3.0, seed=0)
    print(f"mean(y)/se(y) = 3: printed {shown:.4f}, Fieller {f_cov:.4f}, delta {d_cov:.4f}")
    assert f_cov >= 0.93 and d_cov <= f_cov + 0.01
