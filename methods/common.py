"""Pieces that several methods share. A method file calls these instead of re-deriving them;
masked means, aggregation and the KL term live in :mod:`bench.numerics`."""

from __future__ import annotations

import typing
from typing import Any, Literal

import torch
from torch import Tensor

from bench.core import check
from bench.distributed import all_cat

Population = Literal["batch", "sequence"]  # what an entropy quantile is taken over


def check_choice(name: str, value: Any, choices: Any) -> None:
    """Refuse a config value outside the ``Literal[...]`` type ``choices``, naming the valid ones.

    The type already lists the choices, but a config built in Python is never type-checked at run
    time: this check says the same thing however the config was built.
    """
    valid = typing.get_args(choices)
    check(value in valid, f"unknown {name} {value!r}; valid: {', '.join(valid)}")


def group_mean_std(values: Tensor, group_ids: Tensor) -> tuple[Tensor, Tensor]:
    """Per-element mean and unbiased std (Bessel, as torch.std in TRL and verl) of its group.

    values, group_ids: [B] -> ([B], [B]). A group of one has std 0.
    """
    n_groups = int(group_ids.max()) + 1
    v = values.float()
    count = torch.zeros(n_groups, dtype=v.dtype, device=v.device).index_add_(0, group_ids, torch.ones_like(v))
    mean = torch.zeros(n_groups, dtype=v.dtype, device=v.device).index_add_(0, group_ids, v) / count
    sq = torch.zeros(n_groups, dtype=v.dtype, device=v.device).index_add_(0, group_ids, (v - mean[group_ids]) ** 2)
    std = (sq / (count - 1).clamp(min=1)).sqrt()
    return mean[group_ids], std[group_ids]


def group_advantage(rewards: Tensor, group_ids: Tensor, scale: bool = True, eps: float = 1e-4) -> Tensor:
    """Outcome advantage of each completion relative to its group: [B] -> [B].

    scale=True:  (R_i - mean_g R) / (std_g R + eps)    (GRPO)
    scale=False:  R_i - mean_g R                        (Dr. GRPO)
    A group whose rewards are all equal gets advantage 0 either way.
    """
    mean, std = group_mean_std(rewards, group_ids)
    adv = rewards.float() - mean
    return adv / (std + eps) if scale else adv


def clipped_surrogate(
    log_ratio: Tensor, advantages: Tensor, clip_low: float, clip_high: float
) -> tuple[Tensor, Tensor]:
    """PPO's clipped surrogate as a loss, -min(r A, clip(r, 1-eps_l, 1+eps_h) A), elementwise.

    Returns (loss, clipped) where ``clipped`` marks elements whose gradient the clip removed.
    """
    ratio = torch.exp(log_ratio)
    unclipped = ratio * advantages
    clipped_obj = torch.clamp(ratio, 1.0 - clip_low, 1.0 + clip_high) * advantages
    loss = -torch.minimum(unclipped, clipped_obj)
    clipped = ((ratio < 1.0 - clip_low) & (advantages < 0)) | ((ratio > 1.0 + clip_high) & (advantages > 0))
    return loss, clipped


def entropy_top_mask(entropy: Tensor, mask: Tensor, rho: float, population: Population = "batch") -> Tensor:
    """[B, T] bool: valid tokens whose entropy is among the top ``rho`` fraction (the 80/20 rule).

    The threshold is the (1 - rho)-quantile (linear interpolation, as torch.quantile in TRL) of the
    entropies of the valid tokens of the whole batch (``population="batch"``, as TRL and the 80/20
    code) or of each sequence separately (``"sequence"``); tokens with H >= threshold are kept.
    With several training processes "batch" is the global batch: every process's valid tokens are
    gathered (as TRL's gather across processes), so each keeps the tokens one process would.
    Computed by sorting, so it has no size limit (torch.quantile refuses > 16M elements).
    """
    valid = mask.bool()
    if population == "batch":
        values = all_cat(entropy[valid].float())  # [N_global]
        if values.numel() == 0:
            return valid
        n = torch.tensor([values.numel()], device=values.device)
        tau = _sorted_quantile(torch.sort(values).values[None], n, 1.0 - rho)
        return valid & (entropy >= tau)
    if population == "sequence":
        ordered = torch.sort(entropy.float().masked_fill(~valid, float("inf")), dim=-1).values  # valid first
        tau = _sorted_quantile(ordered, valid.sum(-1), 1.0 - rho)  # [B]
        return valid & (entropy >= tau[:, None])
    valid = ", ".join(typing.get_args(Population))
    raise ValueError(f"unknown entropy quantile population {population!r}; valid: {valid}")


def _sorted_quantile(ordered: Tensor, n: Tensor, q: float) -> Tensor:  # [R]
    """Linear-interpolation q-quantile of the first n[r] entries of each ascending row of ``ordered``."""
    pos = q * (n.clamp(min=1) - 1).to(ordered.dtype)  # [R]
    lo = pos.floor().long()
    hi = pos.ceil().long()
    a, b = ordered.gather(-1, lo[:, None]).squeeze(-1), ordered.gather(-1, hi[:, None]).squeeze(-1)
    return a + (pos - lo) * (b - a)
