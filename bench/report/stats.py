"""The statistics of a report: the efficiency of a learning curve (normalised area, cost to a
target), the Student-t interval over seeds, per-problem pass@k, multiplicity adjustments and the
minimum detectable difference (the model they serve: bench.report.inference)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

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


def holm(pvalues: Sequence[float]) -> list[float]:
    """Holm's step-down adjusted p-values of a family, in its order: the i-th smallest p times
    (m - i + 1), made non-decreasing, capped at 1."""
    p = np.asarray(pvalues, dtype=float)
    order, m = np.argsort(p), len(p)
    adj = np.minimum(1.0, np.maximum.accumulate(p[order] * (m - np.arange(m))))
    out = np.empty(m)
    out[order] = adj
    return out.tolist()


def benjamini_hochberg(pvalues: Sequence[float]) -> list[float]:
    """Benjamini-Hochberg step-up adjusted p-values (q-values) of a family, in its order: the
    i-th smallest p times m / i, made non-decreasing from the largest down, capped at 1."""
    p = np.asarray(pvalues, dtype=float)
    order, m = np.argsort(p), len(p)
    adj = np.minimum.accumulate((p[order] * m / np.arange(1, m + 1))[::-1])[::-1]
    out = np.empty(m)
    out[order] = np.minimum(adj, 1.0)
    return out.tolist()


def mde(
    sigma: float, n_seeds: int, df: int, alpha: float = 0.05, m: int = 1, power: float = 0.8, paired: bool = False
) -> float:
    """The minimum detectable difference, the one formula of every report: the smallest true difference
    that a two-sided t-test with ``df`` degrees of freedom at alpha/m (Bonferroni over m comparisons)
    finds with probability ``power``, (t_{1-alpha/(2m), df} + t_{power, df}) * SE, where SE is that of
    the difference over ``n_seeds`` seeds: sigma * sqrt(2/n_seeds) for two means of runs of sd ``sigma``
    (bench.report.inference), sigma / sqrt(n_seeds) for a mean of ``paired`` differences of sd ``sigma``
    (df n_seeds - 1; bench.report.papers.analogue)."""
    from scipy import stats

    a = alpha / max(m, 1)
    spread = (stats.t.ppf(1 - a / 2, df) + stats.t.ppf(power, df)) * sigma
    return float(spread / math.sqrt(n_seeds) if paired else spread * math.sqrt(2 / n_seeds))


def mean_interval(y: np.ndarray, level: float = 0.95) -> tuple[np.ndarray, np.ndarray]:
    """An interval for the mean of values ``y`` [..., S] in [0, 1] (e.g. one per seed) that stays in
    [0, 1]: Student-t (df S-1) on the arcsine-square-root scale, asin(sqrt(m)) -+ t * SE_m /
    (2 sqrt(m(1-m))) (delta method), clipped to [0, pi/2] and mapped back by sin^2; (lo, hi) [...].
    Why this construction: bench.report.inference, item 3."""
    from scipy import stats

    y = np.asarray(y, dtype=float)
    S, m = y.shape[-1], y.mean(-1)
    theta = np.arcsin(np.sqrt(m))
    with np.errstate(divide="ignore", invalid="ignore"):  # m in {0, 1}: every run there, SE 0
        se = np.nan_to_num(y.std(-1, ddof=1) / (2 * math.sqrt(S) * np.sqrt(m * (1 - m))))
    half = stats.t.ppf(0.5 + level / 2, S - 1) * se
    return np.sin(np.clip(theta - half, 0, np.pi / 2)) ** 2, np.sin(np.clip(theta + half, 0, np.pi / 2)) ** 2


def seed_span(seeds: Sequence[int]) -> str:
    """Seeds as runs of consecutive ones: ``[0, 1, 2, 5, 7, 8]`` -> ``0-2, 5, 7-8``."""
    out: list[str] = []
    for s in sorted(seeds):
        if out and s == int(out[-1].rpartition("-")[2]) + 1:
            out[-1] = f"{out[-1].partition('-')[0]}-{s}"
        else:
            out.append(str(s))
    return ", ".join(out)
