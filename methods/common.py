"""Pieces that several methods share. A method file calls these instead of re-deriving them;
masked means, aggregation and the KL term live in :mod:`bench.numerics`."""

from __future__ import annotations

import typing
from typing import Any, Literal

import torch
from torch import Tensor

from bench.core import RolloutBatch, check
from bench.distributed import all_cat

Population = Literal["batch", "minibatch", "sequence"]  # what an entropy threshold is taken over
Selection = Literal["quantile", "top_k"]  # how the entropy threshold is placed


def check_choice(name: str, value: Any, choices: Any) -> None:
    """Refuse a config value outside the ``Literal[...]`` type ``choices``, naming the valid ones.

    The type already lists the choices, but a config built in Python is never type-checked at run
    time: this check says the same thing however the config was built.
    """
    valid = typing.get_args(choices)
    check(value in valid, f"unknown {name} {value!r}; valid: {', '.join(valid)}")


def group_mean_std(values: Tensor, group_ids: Tensor, unbiased: bool = True) -> tuple[Tensor, Tensor]:
    """Per-element mean and std of its group: the unbiased std (Bessel, n - 1, as torch.std in TRL
    and verl) or the biased one (n, ``unbiased=False``).

    values, group_ids: [B] -> ([B], [B]). A group of one has std 0.
    """
    n_groups = int(group_ids.max()) + 1
    v = values.float()
    count = torch.zeros(n_groups, dtype=v.dtype, device=v.device).index_add_(0, group_ids, torch.ones_like(v))
    mean = torch.zeros(n_groups, dtype=v.dtype, device=v.device).index_add_(0, group_ids, v) / count
    sq = torch.zeros(n_groups, dtype=v.dtype, device=v.device).index_add_(0, group_ids, (v - mean[group_ids]) ** 2)
    std = (sq / ((count - 1).clamp(min=1) if unbiased else count)).sqrt()
    return mean[group_ids], std[group_ids]


def group_advantage(
    rewards: Tensor,
    group_ids: Tensor,
    scale: bool = True,
    eps: float = 1e-4,
    unbiased: bool = True,
    floor: bool = False,
) -> Tensor:
    """Outcome advantage of each completion relative to its group: [B] -> [B].

    scale=True:   (R_i - mean_g R) / (std_g R + eps)        (GRPO; TRL, verl)
      floor=True: (R_i - mean_g R) / max(std_g R, eps)      (torch's clamp_min, as some official codes)
    scale=False:   R_i - mean_g R                            (Dr. GRPO)
    std is unbiased (n - 1) or, with ``unbiased=False``, biased (n). A group whose rewards are all
    equal gets advantage 0 in every case.
    """
    mean, std = group_mean_std(rewards, group_ids, unbiased)
    adv = rewards.float() - mean
    return divide_by_std(adv, std, eps, floor) if scale else adv


def divide_by_std(x: Tensor, std: Tensor, eps: float, floor: bool = False) -> Tensor:
    """x / (std + eps), or x / max(std, eps) with ``floor``: a group advantage's division."""
    return x / (std.clamp(min=eps) if floor else std + eps)


def stored_selection(batch: RolloutBatch, key: str) -> Tensor:  # [B, T] bool
    """The per-token selection ``credit()`` stored in ``batch.extra[key]``.

    The engine calls ``credit()`` once on the whole rollout batch and then cuts it into minibatches
    with ``batch.select``, which carries ``extra`` along: a selection computed there is the rollout
    batch's, whatever the split, and ``loss()`` reads its rows of it here.
    """
    check(key in batch.extra, f"batch.extra has no {key!r}: call the method's credit() on the rollout batch first")
    return batch.extra[key].bool()


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


def entropy_top_mask(
    entropy: Tensor, mask: Tensor, rho: float, population: Population = "batch", selection: Selection = "quantile"
) -> Tensor:
    """[B, T] bool: valid tokens whose entropy is among the top ``rho`` fraction (the 80/20 rule).

    The threshold tau is placed over the entropies of the valid tokens of the whole tensor given
    (``population`` "batch" or "minibatch": which tokens those are is the caller's choice) or of
    each sequence separately ("sequence"); tokens with H >= tau are kept. ``selection``:
      "quantile": tau is the (1 - rho)-quantile, linear interpolation (torch.quantile, as TRL);
      "top_k":    tau is the k-th largest entropy, k = ceil(rho * N) written as the 80/20 code
                  writes it, max(1, int(rho * N + 0.9999)); it keeps k tokens but for ties at tau.
    With several training processes a pooled population is gathered over every process's valid
    tokens (as TRL's gather across processes), so each keeps the tokens one process would.
    Computed by sorting, so it has no size limit (torch.quantile refuses > 16M elements).
    """
    check_choice("entropy population", population, Population)
    check_choice("entropy selection", selection, Selection)
    valid = mask.bool()
    if population == "sequence":
        ordered = torch.sort(entropy.float().masked_fill(~valid, float("inf")), dim=-1).values  # valid first
        tau = _threshold(ordered, valid.sum(-1), rho, selection)  # [B]
        return valid & (entropy >= tau[:, None])
    values = all_cat(entropy[valid].float())  # [N_global]
    if values.numel() == 0:
        return valid
    n = torch.tensor([values.numel()], device=values.device)
    tau = _threshold(torch.sort(values).values[None], n, rho, selection)
    return valid & (entropy >= tau)


def _threshold(ordered: Tensor, n: Tensor, rho: float, selection: Selection) -> Tensor:  # [R]
    """tau of each ascending row of ``ordered`` whose first n[r] entries are the population."""
    if selection == "quantile":
        return _sorted_quantile(ordered, n, 1.0 - rho)
    k = (n.double() * rho + 0.9999).floor().clamp(min=1)  # [R]: the 80/20 code's ceil
    index = (n - k.long()).clamp(min=0)  # the k-th largest of the first n
    return ordered.gather(-1, index[:, None]).squeeze(-1)


def _sorted_quantile(ordered: Tensor, n: Tensor, q: float) -> Tensor:  # [R]
    """Linear-interpolation q-quantile of the first n[r] entries of each ascending row of ``ordered``."""
    pos = q * (n.clamp(min=1) - 1).to(ordered.dtype)  # [R]
    lo = pos.floor().long()
    hi = pos.ceil().long()
    a, b = ordered.gather(-1, lo[:, None]).squeeze(-1), ordered.gather(-1, hi[:, None]).squeeze(-1)
    return a + (pos - lo) * (b - a)
