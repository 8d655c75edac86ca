"""Where a method puts its credit, measured the same way for every method.

A method's *effective credit* on token t is -dL/d log pi(y_t): how strongly the update pushes that
token's log-probability up (positive) or down (negative). It is read off the loss by autograd at
the start of the update (ratio 1), so it includes everything a method does to the per-token signal:
advantage weights, masks, traces that move credit to earlier tokens, sequence-level ratios and the
aggregation's 1/L factors. The diagnostics below use its magnitude w_t = |credit_t| per trajectory
(methods.md section 8.2):

    Gini(w)                  = sum_{a,b} |w_a - w_b| / (2 L sum_a w_a)      0 uniform, -> 1 concentrated
    effective-token ratio    = (sum_a w_a)^2 / (L sum_a w_a^2)              in [1/L, 1]
    nonzero fraction         = share of valid tokens with w_t != 0
    mass early/middle/late   = share of sum_t w_t in each third of the trajectory

Gini, the ratio and the mass shares are averaged over trajectories that receive any credit (a
group whose rewards are all equal gets none and says nothing about the shape); the nonzero fraction
is over all valid tokens.
"""

from __future__ import annotations

import torch
from torch import Tensor

from bench.numerics import effective_token_ratio, gini

__all__ = ["credit_diagnostics", "effective_token_ratio", "gini", "mass_by_thirds"]


def mass_by_thirds(w: Tensor, mask: Tensor) -> Tensor:  # [B, 3]
    """Share of each row's weight in the first, middle and last third of its valid tokens (token t of
    a length-L row sits at (t + 0.5) / L)."""
    m = mask.to(w.dtype)
    L = m.sum(-1, keepdim=True).clamp(min=1)
    pos = (torch.arange(w.shape[-1], device=w.device, dtype=w.dtype) + 0.5) / L  # [B, T]
    third = (pos * 3).floor().clamp(max=2).long()  # 0, 1, 2
    wm = w * m
    mass = torch.zeros(w.shape[0], 3, dtype=w.dtype, device=w.device).scatter_add_(1, third, wm)
    return mass / wm.sum(-1, keepdim=True)


def credit_diagnostics(credit: Tensor, mask: Tensor) -> dict[str, float]:
    """The ``credit/*`` metrics of a [B, T] effective credit (sign ignored)."""
    w = credit.detach().abs().float()
    m = mask.bool()
    has = (w * m).sum(-1) > 0  # [B] rows that receive any credit
    out = {"credit/nonzero_frac": float(((w > 0) & m).sum() / m.sum().clamp(min=1))}
    if not bool(has.any()):
        return out
    w, m = w[has], m[has]
    thirds = mass_by_thirds(w, m).mean(0)
    out.update(
        {
            "credit/gini": float(gini(w, m).mean()),
            "credit/effective_token_ratio": float(effective_token_ratio(w, m).mean()),
            "credit/mass_early": float(thirds[0]),
            "credit/mass_middle": float(thirds[1]),
            "credit/mass_late": float(thirds[2]),
        }
    )
    return out
