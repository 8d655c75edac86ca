"""The placebo control of a credit method: its own per-token credit, moved to random tokens.

A method's effective credit on token t of completion i is c_it = -dL/d log pi(y_it), the weight its
loss puts on that token's log-prob. The placebo keeps each completion's credit values (and, for a
selection method, how many tokens it selects) but permutes them over the completion's valid tokens
with a random permutation pi_i, drawn once per rollout batch:

    c'_it = c_i,pi_i(t)        mask'_it = mask_i,pi_i(t)
    loss'_it = sg(loss_i,pi_i(t)) + sg(g_i,pi_i(t)) (l_it - sg(l_it))

with g_is = d(sum_t mask_it loss_it)/d l_is taken through the method's own loss at the current
log-probs l. The aggregation's per-row weights depend only on how many tokens a row's mask holds,
which the permutation keeps, so the placebo's aggregated loss has the method's value and its
gradient is the method's effective credit permuted within each completion: the same total credit
per completion and the same magnitudes, on tokens chosen at random (a selection method's kept
tokens become a random subset of the same size). Everything else (rollouts, filters, advantages,
the KL term, the optimizer) is the method's: the KL term is aggregated over the method's own loss
mask (``LossOutput.kl_mask``), not the permuted one. A method that does not beat its placebo has
shown no token-level signal; its blame alignment is at chance by construction.

Choices:
1. The permutation is a function of the run's seed and the rollout batch's tokens (resumed and
   uninterrupted runs draw the same ones), fixed over the batch's epochs and minibatches, and
   stored in ``batch.extra`` so minibatches and micro-batches read their rows.
2. The gradient a method puts on a token outside its loss mask (none of the registered methods
   does) is dropped where the permuted mask is 0.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from bench.core import LossOutput, Method, RolloutBatch

PERMUTATION = "placebo_permutation"  # batch.extra key: [B, T] long, each row's token permutation


def permutation(mask: Tensor, generator: torch.Generator) -> Tensor:  # [B, T] long
    """A uniformly random permutation of each row's valid positions (``mask`` [B, T]); padding maps
    to itself. Row i's valid positions, in order, are sent to the same positions in random order."""
    B, T = mask.shape
    valid = mask.bool().cpu()
    position = torch.arange(T).expand(B, T) / T
    shuffled = torch.argsort(torch.where(valid, torch.rand(B, T, generator=generator), 2 + position), dim=-1)
    ordered = torch.argsort(torch.where(valid, position, 2 + position), dim=-1)
    perm = torch.empty(B, T, dtype=torch.long).scatter_(-1, ordered, shuffled)
    return perm.to(mask.device)


def batch_seed(seed: int, batch: RolloutBatch) -> int:
    """A seed from the run's seed and the batch's completion tokens (the same batch, the same draw)."""
    ids = batch.completion_ids.detach().long().cpu() * batch.completion_mask.detach().long().cpu()
    weights = torch.arange(1, ids.numel() + 1, dtype=torch.long).reshape(ids.shape) % 1_000_003
    return (seed * 1_000_003 + int((ids * weights).sum())) % 2**62


class Placebo:
    """``method`` with its effective credit permuted within each completion (see the module docstring).
    Every attribute but ``credit`` and ``loss`` is the method's."""

    placebo = True

    def __init__(self, method: Method, seed: int):
        self.method, self.seed = method, seed

    def __getattr__(self, name: str) -> Any:
        return getattr(self.method, name)

    def credit(self, batch: RolloutBatch) -> Tensor:  # [B, T]
        credit = self.method.credit(batch)
        g = torch.Generator().manual_seed(batch_seed(self.seed, batch))
        batch.extra[PERMUTATION] = permutation(batch.completion_mask, g)
        return credit

    def loss(self, batch: RolloutBatch, logprobs: Tensor, credit: Tensor) -> LossOutput:
        perm = batch.extra[PERMUTATION]
        track = torch.is_grad_enabled() and logprobs.requires_grad
        lp = logprobs.detach().requires_grad_(track)
        with torch.enable_grad() if track else torch.no_grad():
            out = self.method.loss(batch, lp, credit)
        mask = batch.completion_mask if out.mask is None else out.mask
        moved = out.loss.detach().gather(-1, perm)  # [B, T]
        loss = moved
        if track:
            (g,) = torch.autograd.grad((out.loss * mask.to(out.loss.dtype)).sum(), lp, allow_unused=True)
            if g is not None:
                loss = moved + g.gather(-1, perm) * (logprobs - logprobs.detach())
        permuted_mask = None if out.mask is None else out.mask.gather(-1, perm)
        kl_mask = out.mask if out.kl_mask is None else out.kl_mask  # the KL term stays on the method's tokens
        return LossOutput(loss, out.stats, permuted_mask, out.scalars, kl_mask)


def with_placebo(method: Method, placebo: bool, seed: int) -> Method:
    """``method``, or its placebo when ``placebo`` is set."""
    return Placebo(method, seed) if placebo else method  # type: ignore[return-value]
