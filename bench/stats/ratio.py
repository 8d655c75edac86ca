"""Intervals for a ratio of two means from paired samples, R = mean(x) / mean(y): the credit probe's
gain of a method over its control, relative to the control's own gain (x_t the paired difference d_t,
y_t the control's gain g_t, one pair per unit).

Both intervals carry the denominator's uncertainty; the caller gives the critical value q (a
Student-t quantile on n - 1 df, or a larger sequential one), not a level.

- :func:`fieller`: the set of R whose pivot (a - R b) / se(a - R b) lies within q. Its test
  statistic is exactly Student-t when (x, y) are normal, so the set covers R at the nominal level
  whatever the noise in b; it is not symmetric about a / b.
- :func:`delta`: a / b -+ q se_R from the first-order expansion of a / b. Symmetric, and it
  undercovers when b is noisy (|b| / se_b small), where 1 / b is far from linear, and R is far from
  the regression slope v12 / v22 (near that slope it overcovers instead). With a well resolved
  denominator the two agree.

Both print no ratio where the denominator's interval contains 0 (|b| / se_b <= q): Fieller's set is
then unbounded, and a ratio over a denominator that may be 0 says nothing (tests/stats/test_ratio.py
holds the bounds against a hand-worked example and the coverage against a simulation).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from bench.errors import CreditBenchError


@dataclass(frozen=True)
class Ratio:
    """A ratio of means ``estimate`` = a / b with its interval [``lo``, ``hi``]."""

    estimate: float
    lo: float
    hi: float


@dataclass(frozen=True)
class _Moments:
    """Means a, b of x, y and the (co)variances of those means, v11, v22, v12 (ddof 1, over n)."""

    a: float
    b: float
    v11: float
    v22: float
    v12: float


def _moments(x: np.ndarray, y: np.ndarray) -> _Moments:
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if x.ndim != 1 or x.shape != y.shape or len(x) < 3:
        raise CreditBenchError(
            f"a ratio of means needs paired samples x and y of one equal length n >= 3; got shapes "
            f"{x.shape} and {y.shape}."
        )
    n = len(x)
    c = np.cov(x, y, ddof=1) / n  # [2, 2]: the covariance of the two means
    return _Moments(a=float(x.mean()), b=float(y.mean()), v11=float(c[0, 0]), v22=float(c[1, 1]), v12=float(c[0, 1]))


def _resolved(m: _Moments, q: float) -> bool:
    """Whether the denominator's interval b -+ q se_b excludes 0: b^2 > q^2 v22."""
    return m.b * m.b > q * q * m.v22


def fieller(x: np.ndarray, y: np.ndarray, q: float) -> Ratio | None:
    """Fieller's interval for mean(x) / mean(y) from paired samples, at critical value ``q``.

    With a = mean(x), b = mean(y), v11 = var(x) / n, v22 = var(y) / n, v12 = cov(x, y) / n (ddof 1),
    the interval is {R : (a - R b)^2 <= q^2 (v11 - 2 R v12 + R^2 v22)}, i.e. A R^2 - 2 B R + C <= 0
    with A = b^2 - q^2 v22, B = a b - q^2 v12, C = a^2 - q^2 v11, whose roots are
    (B -+ sqrt(B^2 - A C)) / A. The set holds a / b (the left side is 0 there), so B^2 >= A C.

    No ratio (None) where the denominator's interval contains 0, b^2 <= q^2 v22 (A <= 0): the set
    is then unbounded or the whole line. A known denominator (v22 = 0, hence v12 = 0) gives the
    plain interval (a -+ q sqrt(v11)) / b."""
    m = _moments(x, y)
    if not _resolved(m, q):
        return None
    q2 = q * q
    A = m.b * m.b - q2 * m.v22  # b^2 - q^2 v22 > 0
    B = m.a * m.b - q2 * m.v12  # a b - q^2 v12
    C = m.a * m.a - q2 * m.v11  # a^2 - q^2 v11
    root = math.sqrt(max(B * B - A * C, 0.0))  # >= 0 but for rounding
    return Ratio(estimate=m.a / m.b, lo=(B - root) / A, hi=(B + root) / A)


def delta(x: np.ndarray, y: np.ndarray, q: float) -> Ratio | None:
    """The delta-method interval for R = mean(x) / mean(y) from paired samples: R -+ q se_R with
    se_R^2 = (v11 - 2 R v12 + R^2 v22) / b^2 (moments as in :func:`fieller`).

    No ratio (None) where the denominator's interval contains 0 (b^2 <= q^2 v22), the rule of
    :func:`fieller`, so the two print a ratio for the same data."""
    m = _moments(x, y)
    if not _resolved(m, q):
        return None
    r = m.a / m.b
    var = max(m.v11 - 2 * r * m.v12 + r * r * m.v22, 0.0) / (m.b * m.b)  # se_R^2, >= 0 but for rounding
    half = q * math.sqrt(var)
    return Ratio(estimate=r, lo=r - half, hi=r + half)
