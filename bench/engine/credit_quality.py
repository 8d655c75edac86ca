"""Credit against the true advantage: how a method's effective credit c_t = -dL/d log pi(y_t)
(:func:`bench.engine.credit_map.effective_credit`) ranks a completion's tokens against a Monte-Carlo estimate
of each token's advantage A_t (Monte-Carlo step advantages, A_k = V_{k+1} - V_k of the
step holding the token), on the same batch. Over a completion's valid tokens:

    rank_corr    Spearman's rho of c_t and A_t (mid-ranks for ties); undefined where either is constant;
                 the mean over the completions where it is defined
    worst_share  a failed completion: the share of its negative credit mass, sum_t max(-c_t, 0), on the
                 tokens of its lowest A_t (the step that lost the most value); the mean over the failed
                 completions with any negative credit and a lowest step that is not every token
    best_share   a correct completion: the share of its positive credit mass on the tokens of its highest
                 A_t, likewise
    *_uniform    what credit spread evenly gives: the share of the tokens those steps hold

A credit that sits where the value moves has rank_corr near 1 and shares near 1; uniform credit has no
rank correlation (undefined: constant) and the uniform shares.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

TIE_RTOL = 1e-6
"""Advantages within this fraction of a completion's largest |A| of its extreme count as that extreme."""


def mid_ranks(x: Tensor) -> Tensor:
    """The 1-based ranks of ``x`` (1-D), ties sharing the mean of their ranks."""
    order = torch.argsort(x, stable=True)
    ranks = torch.empty_like(x, dtype=torch.float64)
    ranks[order] = torch.arange(1, len(x) + 1, dtype=torch.float64)
    out = ranks.clone()
    for v in torch.unique(x):
        tied = x == v
        out[tied] = ranks[tied].mean()
    return out


def spearman(a: Tensor, b: Tensor) -> float:
    """Spearman's rho of two 1-D tensors (Pearson's r of their mid-ranks); NaN where either is constant."""
    ra, rb = mid_ranks(a.double()), mid_ranks(b.double())
    ra, rb = ra - ra.mean(), rb - rb.mean()
    den = float((ra.pow(2).sum() * rb.pow(2).sum()).sqrt())
    return float((ra * rb).sum()) / den if den > 0 else math.nan


def _extreme(truth: Tensor, lowest: bool) -> Tensor:
    """The tokens at the row's lowest (or highest) advantage, to TIE_RTOL of its largest |A|."""
    edge = truth.min() if lowest else truth.max()
    tol = TIE_RTOL * float(truth.abs().max().clamp(min=1e-12))
    return (truth - edge).abs() <= tol


def _share(credit: Tensor, truth: Tensor, negative: bool) -> tuple[float, float] | None:
    """(share of the row's negative / positive credit mass on its lowest / highest-advantage tokens, the
    share of its tokens those are), or None where there is no such mass or the extreme is every token."""
    mass = (-credit if negative else credit).clamp(min=0)
    at = _extreme(truth, lowest=negative)
    if float(mass.sum()) <= 0 or bool(at.all()):
        return None
    return float(mass[at].sum() / mass.sum()), float(at.float().mean())


def credit_quality(credit: Tensor, truth: Tensor, mask: Tensor, correct: Tensor) -> dict[str, float]:
    """The module's scores of ``credit`` [B, T] against ``truth`` [B, T] over ``mask`` [B, T], with the
    rows' verdicts ``correct`` [B] (NaN where no completion defines a score; ``n_*`` how many did)."""
    rho, worst, best = [], [], []
    for c, a, m, ok in zip(credit, truth, mask.bool(), correct.bool().tolist()):
        c, a = c[m].double(), a[m].double()
        if len(c) < 2:
            continue
        r = spearman(c, a)
        if not math.isnan(r):
            rho.append(r)
        s = _share(c, a, negative=not ok)
        if s is not None:
            (best if ok else worst).append(s)

    def mean(xs: list[float]) -> float:
        return sum(xs) / len(xs) if xs else math.nan

    return {
        "rank_corr": mean(rho),
        "worst_share": mean([s for s, _ in worst]),
        "worst_uniform": mean([u for _, u in worst]),
        "best_share": mean([s for s, _ in best]),
        "best_uniform": mean([u for _, u in best]),
        "n_rank": len(rho),
        "n_worst": len(worst),
        "n_best": len(best),
    }
