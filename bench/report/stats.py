"""The statistics of a report: the efficiency of a learning curve (normalised area, cost to a
target) and the Student-t interval over seeds."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np


def _curve(x: Sequence[float], y: Sequence[float]) -> tuple[np.ndarray, np.ndarray]:
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if x.ndim != 1 or x.shape != y.shape or len(x) == 0:
        raise ValueError(f"a learning curve needs matching non-empty 1-d x and y, got shapes {x.shape} and {y.shape}")
    if np.any(np.diff(x) < 0):
        raise ValueError("a learning curve's x (samples or tokens consumed) must be non-decreasing")
    return x, y


def curve_auc(x: Sequence[float], y: Sequence[float], horizon: float) -> float:
    """Normalised area under a learning curve: the mean of y over x in [0, horizon].

    y is linear between eval points, held at its first value before the first point and at its
    last value after the last one; the area is divided by ``horizon``, so the result is on y's
    scale (a curve flat at 0.4 gives 0.4; learning earlier gives more)."""
    x, y = _curve(x, y)
    if horizon <= 0:
        raise ValueError(f"horizon must be > 0, got {horizon}")
    grid = np.union1d(np.clip(x, 0, horizon), [0.0, horizon])
    vals = np.interp(grid, x, y)  # np.interp holds the end values outside [x0, xn]
    return float(np.sum((grid[1:] - grid[:-1]) * (vals[1:] + vals[:-1]) / 2) / horizon)


def cost_to_target(x: Sequence[float], y: Sequence[float], target: float) -> float | None:
    """The smallest x at which the piecewise-linear curve reaches ``target`` (samples or tokens
    needed), or None if it never does."""
    x, y = _curve(x, y)
    if y[0] >= target:
        return float(x[0])
    for i in range(1, len(x)):
        if y[i] >= target:
            x0, x1, y0, y1 = x[i - 1], x[i], y[i - 1], y[i]
            return float(x0 + (target - y0) / (y1 - y0) * (x1 - x0))
    return None


def t_interval(values: Sequence[float | None], level: float = 0.95) -> dict[str, Any]:
    """Mean and two-sided Student-t confidence interval of ``values`` (e.g. one per seed).

    ``None`` values (a target never reached) make the mean undefined: mean, lo and hi are then
    None, and ``reached`` counts the defined ones. With one value the interval is that value."""
    from scipy import stats

    vals = list(values)
    defined = [float(v) for v in vals if v is not None and math.isfinite(float(v))]
    out: dict[str, Any] = {"n": len(vals), "values": vals}
    if len(defined) < len(vals) or not vals:
        out.update(mean=None, lo=None, hi=None, reached=len(defined))
        return out
    a = np.asarray(defined)
    mean = float(a.mean())
    if len(a) < 2:
        return {**out, "mean": mean, "lo": mean, "hi": mean}
    half = float(stats.t.ppf(0.5 + level / 2, len(a) - 1) * a.std(ddof=1) / math.sqrt(len(a)))
    return {**out, "mean": mean, "lo": mean - half, "hi": mean + half}


def min_detectable_difference(sd: float, n: int, alpha: float = 0.05, power: float = 0.8) -> float | None:
    """The smallest true paired difference a two-sided t-test at level ``alpha`` over ``n`` seeds
    detects with probability ``power``, for paired differences of standard deviation ``sd``:
    (t_{1-alpha/2, n-1} + t_{power, n-1}) * sd / sqrt(n). None with fewer than 2 seeds."""
    from scipy import stats

    if n < 2 or not math.isfinite(sd):
        return None
    return float((stats.t.ppf(1 - alpha / 2, n - 1) + stats.t.ppf(power, n - 1)) * sd / math.sqrt(n))
