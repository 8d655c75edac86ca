"""Evaluation metrics: the unbiased pass@k estimator (Chen et al. 2021), its torchmetrics
Metric with standard errors over problems, and MLflow-safe metric names."""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from torch import Tensor
from torchmetrics import Metric


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k for one problem with ``n`` samples of which ``c`` are correct:
    1 - C(n-c, k) / C(n, k), in the stable product form of openai/human-eval."""
    if not 0 <= c <= n or not 1 <= k <= n:
        raise ValueError(f"pass@k needs 0 <= c <= n and 1 <= k <= n, got n={n}, c={c}, k={k}")
    if n - c < k:
        return 1.0
    return float(1.0 - np.prod(1.0 - k / np.arange(n - c + 1, n + 1)))


def metric_key(*parts: str | int) -> str:
    """MLflow-safe, namespaced metric name: metric_key("eval", "arith", "pass@4") -> eval/arith/pass_at_4."""
    out = []
    for p in parts:
        p = str(p).replace("@", "_at_")
        out.append(re.sub(r"[^A-Za-z0-9_\-. ]", "_", p))
    return "/".join(out)


class PassAtK(Metric):
    """pass@k for several k (pass@1 always), and avg@n, with standard errors over problems.

    ``update(correct)`` takes a [P, n] bool tensor: n samples for each of P problems. ``compute``
    returns {"pass_at_{k}": mean, "pass_at_{k}_se": std/sqrt(P), "avg_at_{n}": ...} and the
    per-problem estimates stay available through :meth:`per_problem` for paired comparisons.
    """

    full_state_update = False

    def __init__(self, ks: Sequence[int], **kwargs):
        super().__init__(**kwargs)
        self.ks = sorted({1} | {int(k) for k in ks})  # pass@1 (= mean accuracy) is always reported
        self.add_state("n", default=[], dist_reduce_fx="cat")
        self.add_state("c", default=[], dist_reduce_fx="cat")

    def update(self, correct: Tensor) -> None:  # [P, n]
        correct = torch.as_tensor(correct).bool()
        if correct.ndim != 2:
            raise ValueError(f"PassAtK.update expects [problems, samples], got shape {tuple(correct.shape)}")
        self.n.append(torch.full((correct.shape[0],), correct.shape[1], dtype=torch.long))
        self.c.append(correct.sum(-1).long())

    def per_problem(self) -> dict[int, np.ndarray]:
        n = torch.cat(self.n).tolist() if self.n else []
        c = torch.cat(self.c).tolist() if self.c else []
        return {k: np.array([pass_at_k(ni, ci, k) for ni, ci in zip(n, c)]) for k in self.ks}

    def compute(self) -> dict[str, float]:
        n = torch.cat(self.n) if self.n else torch.zeros(0, dtype=torch.long)
        if len(n) == 0:
            return {}
        if int(n.min()) < max(self.ks):
            raise ValueError(f"pass@{max(self.ks)} needs at least {max(self.ks)} samples per problem, got {int(n.min())}")
        out = {}
        for k, vals in self.per_problem().items():
            out[f"pass_at_{k}"] = float(vals.mean())
            out[f"pass_at_{k}_se"] = standard_error(vals)
        c = torch.cat(self.c).float()
        if bool((n == n[0]).all()):
            out[f"avg_at_{int(n[0])}"] = float((c / n).mean())
        out["num_problems"] = float(len(n))
        return out


def standard_error(values: np.ndarray) -> float:
    """Standard error of the mean (sample std with Bessel's correction / sqrt(count))."""
    values = np.asarray(values, dtype=float)
    if len(values) < 2:
        return float("nan")
    return float(values.std(ddof=1) / math.sqrt(len(values)))


# ------------------------------------------------------------------ efficiency (README: "Metrics")
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
