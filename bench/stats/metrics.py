"""What a report computes from a run's evals: the efficiency of a learning curve (normalised area,
cost to a target) and the unbiased per-problem pass@k."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from bench.errors import CreditBenchError


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


def pass_at_k_per_problem(correct: Sequence[int] | np.ndarray, n: int, k: int) -> np.ndarray:
    """The unbiased pass@k of each problem from its correct count c out of n samples:
    1 - C(n-c, k) / C(n, k) (Chen et al. 2021), computed in log space; 1 where n - c < k."""
    from scipy.special import gammaln

    c = np.asarray(correct, dtype=float)
    if not 1 <= k <= n or np.any((c < 0) | (c > n)):
        raise CreditBenchError(f"pass@k needs 1 <= k <= n and 0 <= correct <= n, got k={k}, n={n}")
    w = n - c  # wrong samples
    ok = w >= k
    ratio = np.exp(
        gammaln(np.where(ok, w, k) + 1) - gammaln(np.where(ok, w - k, 0) + 1) + gammaln(n - k + 1) - gammaln(n + 1)
    )
    return np.where(ok, 1.0 - ratio, 1.0)
