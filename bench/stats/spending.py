"""Group-sequential alpha spending: how much of a level a look may spend, and the z boundaries that
spend it over a schedule's looks (the design: bench.report.sequential)."""

from __future__ import annotations

import math
from functools import lru_cache
from typing import Literal

import numpy as np
from scipy import special, stats

from bench.errors import CreditBenchError

Spending = Literal["obf", "pocock"]
SPENDING: tuple[str, ...] = ("obf", "pocock")


def spent(t: float, a: float, kind: str) -> float:
    """Alpha spent by information fraction ``t`` (0..1) of a (one-sided) level ``a``."""
    t = min(max(t, 0.0), 1.0)
    if t == 0:
        return 0.0
    if kind == "obf":
        return float(2 - 2 * stats.norm.cdf(stats.norm.ppf(1 - a / 2) / math.sqrt(t)))
    if kind == "pocock":
        return float(a * math.log(1 + (math.e - 1) * t))
    raise CreditBenchError(f"spending must be one of {', '.join(SPENDING)}, got {kind!r}")


def _pdf(z: np.ndarray) -> np.ndarray:
    return np.exp(-0.5 * z * z) / math.sqrt(2 * math.pi)


@lru_cache(maxsize=4096)
def boundaries(fractions: tuple[float, ...], a: float, kind: str, grid: int = 801) -> tuple[float, ...]:
    """One-sided z boundaries c_1..c_K for looks at information ``fractions`` (increasing, the last
    1) spending level ``a`` with ``kind``: P(Z_1 >= c_1 or ... or Z_k >= c_k) = spent(t_k) under H0
    for every k, where Z_k is the standardised sum of independent increments (the score process).
    Computed by the recursion of Armitage, McPherson and Rowe: the density of the score S_k on the
    continuation region, carried from look to look on a grid, the next boundary solved so that the
    probability of crossing it first equals that look's increment of spent alpha."""
    if not fractions or any(b <= a_ for a_, b in zip(fractions, fractions[1:])) or fractions[0] <= 0:
        raise CreditBenchError(f"look fractions must increase from above 0, got {list(fractions)}")
    out: list[float] = []
    # the score S_k = Z_k sqrt(I_k), I_k = t_k; S_1 ~ N(0, t_1)
    prev_x: np.ndarray | None = None
    prev_f: np.ndarray | None = None
    prev_t = 0.0
    prev_spent = 0.0
    for t in fractions:
        target = spent(t, a, kind) - prev_spent
        dt = t - prev_t
        if prev_x is None:
            c = stats.norm.isf(max(target, 1e-300))
            out.append(float(c))
            hi = c * math.sqrt(t)
            x = np.linspace(-10 * math.sqrt(t), hi, grid)
            f = _pdf(x / math.sqrt(t)) / math.sqrt(t)
        else:
            sd = math.sqrt(dt)

            def cross(c: float, px=prev_x, pf=prev_f, sd=sd, t=t) -> float:
                # P(S_k >= c sqrt(t_k), still continuing at k-1)
                tail = special.ndtr((px - c * math.sqrt(t)) / sd)  # P(N(0,1) > (c sqrt t - x) / sd)
                return float(np.trapezoid(pf * tail, px))

            c = _solve(cross, target)
            out.append(float(c))
            top = (c if math.isfinite(c) else 40.0) * math.sqrt(t)
            x = np.linspace(-10 * math.sqrt(t), top, grid)
            # density of S_k on the continuation region: the old density convolved with N(0, dt)
            kernel = _pdf((x[:, None] - prev_x[None, :]) / sd) / sd
            f = np.trapezoid(kernel * prev_f[None, :], prev_x, axis=1)
        prev_x, prev_f, prev_t = x, f, t
        prev_spent += max(target, 0.0)
    return tuple(out)


def _solve(cross, target: float) -> float:
    """The c where ``cross(c)``, which falls as c rises, equals ``target``: bisection on [-10, 40]."""
    if target <= 0:
        return math.inf
    lo, hi = -10.0, 40.0
    if cross(lo) < target:
        return lo
    for _ in range(80):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if cross(mid) > target else (lo, mid)
    return (lo + hi) / 2


@lru_cache(maxsize=4096)
def nominal(fractions: tuple[float, ...], a: float, kind: str) -> tuple[float, ...]:
    """The nominal one-sided p-value threshold of each look: 1 - Phi(c_k)."""
    return tuple(float(stats.norm.sf(c)) for c in boundaries(fractions, a, kind))
