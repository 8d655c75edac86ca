"""The summary of paired differences, written once: mean, standard error, degrees of freedom, the
Student-t interval and the two-sided p-value.

Two estimators share it. :func:`summarize`: n differences, one unit each (a seed), mean d-bar,
SE = s / sqrt(n), df = n - 1. :func:`nested`: two sampled levels (batches within checkpoints within
trajectories): each trajectory's value is the mean of its checkpoints' means, and the plain summary
of the T trajectory values is the estimate, SE and df = T - 1 (with one trajectory, of its C
checkpoint means, df = C - 1). For a balanced design this is the exact inference of the
random-effects model d = mu + a_t + b_tc + e_tcb: var(mean) = s_a^2 / T + s_b^2 / (T C) +
s_e^2 / (T C n), estimated without bias by the trajectory values' variance / T (the batches and
checkpoints give no degrees of freedom of their own).
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
    ``n`` units; ``sd`` the per-unit sd (None where there is no spread to take one from)."""

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


def nested(units: Mapping[Hashable, Mapping[Hashable, Sequence[float]]]) -> Summary:
    """The two-level summary: ``units[t][c]`` the values of checkpoint c of trajectory t (see the module
    docstring); with fewer than two units at both levels, the mean with no interval (se inf, df 0)."""
    means = [[float(np.mean(v)) for v in mids.values()] for mids in units.values()]
    top = [float(np.mean(m)) for m in means]
    values = top if len(top) > 1 else (means[0] if means else [])
    if len(values) < 2:
        return Summary(float(np.mean(values)) if values else math.nan, math.inf, 0, len(values))
    return summarize(values)
