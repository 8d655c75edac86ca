"""Gradient accumulation by token budget: a PPO minibatch is split into micro-batches whose padded
token count stays within ``rl.micro_batch_tokens``, so a paper-sized minibatch (128 completions of
up to 8k tokens) never goes through one forward.

A micro-batch's padded token count is its rows times (its longest prompt + its longest
completion): what :func:`bench.engine.scoring.score` runs after cutting the columns that are padding
in every row. Rows are sorted by that length before they are packed, so long completions share
micro-batches with long ones and short with short, and little is spent on padding.

The accumulated gradient is the whole minibatch's, for every aggregation: each micro-batch's loss
is normalised by the counts of the whole minibatch (over every process, as under DDP), so the
losses add up to the minibatch's loss and their gradients to its gradient (tested against the
unsplit update in tests/engine/test_microbatch.py). Two things make that hold for every method:

1. The method's ``on_minibatch`` hook runs once on the whole minibatch before the split, so a loss
   that couples rows (the 80/20 rule's top-rho entropy tokens of each minibatch) sees the same
   rows it would unsplit.
2. The counts (the loss mask's tokens and rows) are taken from one no-grad call of the method's
   loss on the whole minibatch before any micro-batch's backward: a loss mask may depend on the
   batch (overlong filtering, the kept tokens), never on the current log-probs.

The scoring passes (behaviour and reference log-probs, entropies, hidden states) are split the
same way, one micro-batch at a time under no_grad, and their outputs written back into the
batch's [B, T] tensors.
"""

from __future__ import annotations

import torch
from torch import Tensor

from bench.core import RolloutBatch
from bench.errors import CreditBenchError

# The batch's fields a scoring pass fills, written back row by row from each micro-batch
SCORED = ("old_logprobs", "entropy", "ref_logprobs", "ref_entropy", "ref_kl", "hidden_residual", "hidden_states")


def lengths(batch: RolloutBatch) -> Tensor:  # [B] long
    """Each row's real length: its prompt tokens plus its completion tokens."""
    return batch.prompt_mask.sum(-1) + batch.completion_mask.sum(-1)


def padded_tokens(batch: RolloutBatch, index: Tensor) -> int:
    """What ``score`` runs for the rows at ``index``: rows x (longest prompt + longest completion)."""
    prompts, completions = batch.prompt_mask[index].sum(-1), batch.completion_mask[index].sum(-1)
    return len(index) * int(prompts.max() + completions.max())


def split(batch: RolloutBatch, budget: int) -> list[Tensor]:
    """The micro-batches of ``batch`` under a token budget: index tensors into it, covering every row
    once. ``budget`` 0 is no split (one micro-batch of every row, in order: the unsplit update
    exactly). Rows are packed in order of length, longest first, each micro-batch as many rows as
    fit: rows x (longest prompt + longest completion among them) <= budget."""
    device = batch.completion_mask.device
    every = torch.arange(batch.size, device=device)
    if budget <= 0:
        return [every]
    prompts, completions = batch.prompt_mask.sum(-1).tolist(), batch.completion_mask.sum(-1).tolist()
    order = sorted(range(batch.size), key=lambda i: (-(prompts[i] + completions[i]), i))
    longest = prompts[order[0]] + completions[order[0]] if order else 0
    if longest > budget:
        raise CreditBenchError(
            f"rl.micro_batch_tokens ({budget}) is smaller than one sequence: a rollout of {longest} tokens "
            f"(prompt + completion); raise it to at least {longest}, or 0 for no split"
        )
    parts: list[list[int]] = []
    current: list[int] = []
    max_p = max_c = 0
    for i in order:
        p, c = max(max_p, prompts[i]), max(max_c, completions[i])
        if current and (len(current) + 1) * (p + c) > budget:
            parts.append(current)
            current, p, c = [], prompts[i], completions[i]
        current.append(i)
        max_p, max_c = p, c
    parts.append(current)
    if len(parts) == 1:  # it all fits: the rows in their own order, as unsplit
        return [every]
    return [torch.tensor(sorted(part), device=device, dtype=torch.long) for part in parts]


def write_back(batch: RolloutBatch, part: RolloutBatch, index: Tensor) -> None:
    """Copy the scored fields (and ``extra`` entries) that ``part`` (the rows of ``batch`` at
    ``index``) holds into ``batch``, allocating the full [B, ...] tensor on the first part."""
    for name in SCORED:
        value = getattr(part, name)
        if value is None:
            continue
        full = getattr(batch, name)
        if full is None or full.shape[1:] != value.shape[1:]:
            full = value.new_zeros((batch.size, *value.shape[1:]))
            setattr(batch, name, full)
        full[index] = value
    for key, value in part.extra.items():
        full = batch.extra.get(key)
        if full is None or full.shape[1:] != value.shape[1:]:
            full = batch.extra[key] = value.new_zeros((batch.size, *value.shape[1:]))
        full[index] = value
