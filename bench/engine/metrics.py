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
