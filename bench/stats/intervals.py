"""Intervals for a mean over seeds: the Student-t interval, and for values on [0, 1] an interval that
stays inside [0, 1] (why this construction: bench.report.inference, item 3)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from bench.stats.paired import summarize


def t_interval(values: Sequence[float | None], level: float = 0.95) -> dict[str, Any]:
    """Mean and two-sided Student-t confidence interval of ``values`` (e.g. one per seed), the plain
    summary of bench.stats.paired.

    ``None`` values (a target never reached) make the mean undefined: mean, lo and hi are then
    None, and ``reached`` counts the defined ones. With one value the interval is that value."""
    vals = list(values)
    defined = [float(v) for v in vals if v is not None and math.isfinite(float(v))]
    out: dict[str, Any] = {"n": len(vals), "values": vals}
    if len(defined) < len(vals) or not vals:
        out.update(mean=None, lo=None, hi=None, reached=len(defined))
        return out
    if len(defined) < 2:
        return {**out, "mean": defined[0], "lo": defined[0], "hi": defined[0]}
    s = summarize(defined)
    half = s.half(level)
    return {**out, "mean": s.mean, "lo": s.mean - half, "hi": s.mean + half}


def mean_interval(y: np.ndarray, level: float = 0.95) -> tuple[np.ndarray, np.ndarray]:
    """An interval for the mean of values ``y`` [..., S] in [0, 1] (e.g. one per seed) that stays in
    [0, 1]: Student-t (df S-1) on the arcsine-square-root scale, asin(sqrt(m)) -+ t * SE_m /
    (2 sqrt(m(1-m))) (delta method), clipped to [0, pi/2] and mapped back by sin^2; (lo, hi) [...]."""
    from scipy import stats

    y = np.asarray(y, dtype=float)
    S, m = y.shape[-1], y.mean(-1)
    theta = np.arcsin(np.sqrt(m))
    with np.errstate(divide="ignore", invalid="ignore"):  # m in {0, 1}: every run there, SE 0
        se = np.nan_to_num(y.std(-1, ddof=1) / (2 * math.sqrt(S) * np.sqrt(m * (1 - m))))
    half = stats.t.ppf(0.5 + level / 2, S - 1) * se
    return np.sin(np.clip(theta - half, 0, np.pi / 2)) ** 2, np.sin(np.clip(theta + half, 0, np.pi / 2)) ** 2
