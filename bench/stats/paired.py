"""The summary of paired differences, written once: mean, standard error, degrees of freedom, the
Student-t interval and the two-sided p-value.

Two estimators share it. :func:`summarize`: n differences, one unit each (a seed), mean d-bar,
SE = s / sqrt(n), df = n - 1. :func:`stratified`: differences grouped in strata (checkpoints), the
mean of the strata's means over C strata, SE = sqrt(sum_c s_c^2 / n_c) / C, df = sum_c (n_c - 1).
The interval is mean -+ t_{(1+level)/2, df} SE; a plain summary computes its half-width as
t * s / sqrt(n), the order every committed report used, so its floats stay those bits
(tests/stats/test_stats.py holds both against the formulas).
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats

MIN_SEEDS = 3
"""No interval and no test from fewer than 3 seeds: a run-to-run sd from so few is too unreliable."""


@dataclass(frozen=True)
class Summary:
    """Paired differences summarised: ``mean``, its standard error ``se`` on ``df`` degrees of freedom,
    ``n`` differences; ``sd`` the per-unit sd of a plain summary (None for a stratified one)."""

    mean: float
    se: float
    df: int
    n: int
    sd: float | None = None

    def half(self, level: float = 0.95) -> float:
        """The Student-t interval's half-width at ``level`` (inf without degrees of freedom)."""
        if self.df <= 0:
            return math.inf
        q = float(stats.t.ppf(0.5 + level / 2, self.df))
        return float(q * self.sd / math.sqrt(self.n)) if self.sd is not None else q * self.se

    def t(self, shift: float = 0.0) -> float:
        """The t-statistic of mean - ``shift`` (+-inf, or 0 when equal, with no spread)."""
        if self.se == 0:
            return 0.0 if self.mean == shift else math.copysign(math.inf, self.mean - shift)
        return (self.mean - shift) / self.se

    def p(self) -> float:
        """Two-sided p of mean = 0 (without spread or degrees of freedom: 1 at a zero mean, else 0)."""
        if self.se > 0 and self.df > 0:
            return float(2 * stats.t.sf(abs(self.mean) / self.se, self.df))
        return 1.0 if self.mean == 0 else 0.0


def summarize(d: Sequence[float] | np.ndarray) -> Summary:
    """The plain summary of n >= 2 paired differences (one per unit, e.g. per seed)."""
    d = np.asarray(d, dtype=float)
    n = len(d)
    sd = float(d.std(ddof=1))
    return Summary(float(d.mean()), float(sd / math.sqrt(n)), n - 1, n, sd)


def stratified(strata: Mapping[Hashable, Sequence[float]]) -> Summary:
    """The stratified summary: each stratum weighs the same however many differences it holds; a
    stratum of one difference adds to the mean but not to the variance or the degrees of freedom."""
    groups = list(strata.values())
    means = [float(np.mean(v)) for v in groups]
    C = len(groups)
    var = sum(float(np.var(v, ddof=1)) / len(v) for v in groups if len(v) > 1)
    df = sum(len(v) - 1 for v in groups)
    return Summary(float(np.mean(means)), math.sqrt(var) / C, df, sum(len(v) for v in groups))
