"""The credit map: one fixed group of completions on which every method's effective credit
(-dL/d log pi, as in the credit/* diagnostics of bench.engine.diagnostics) is shown token by token, once
per run. With the same base policy every method finds the same group, so their credit maps are
comparable. (The credit probe, which measures credit per update on a sweep's pairs, is bench.paired.)"""

from __future__ import annotations

import contextlib
import dataclasses
from typing import Any

import torch

from bench.config import RLConfig
from bench.core import Method, RolloutBatch
from bench.distributed import local
from bench.engine.sampling import RolloutSampler
from bench.engine.scoring import forward, score_batch
from bench.engine.seeding import seeded
from bench.numerics import aggregate


@torch.no_grad()
def find_group(
    sampler: RolloutSampler, rows: list[dict], rl: RLConfig, devices: list[int], seed: int = 1234
) -> tuple[RolloutBatch, int] | None:
    """The first of ``rows`` whose G samples (drawn with a fixed ``seed``, the RNGs of the CPU and of
    ``devices`` left as they were) mix correct and wrong answers, and the row of its first
    lowest-reward completion; None when no row's samples mix."""
    with seeded(seed, devices):
        for row in rows:
            batch, _ = sampler.rollout([row], rl.group_size, rl.sampling, details=False)
            if batch.rewards.max() > batch.rewards.min():
                return batch, int(torch.argmin(batch.rewards))
    return None


@contextlib.contextmanager
def moved_to(device: torch.device | None, *models):
    """``models`` (None skipped) on ``device`` for the block, then back where they were; None: as they are."""
    models = [m for m in models if m is not None]
    where = next(models[0].parameters()).device if models else None
    if device is None or device == where:
        yield
        return
    for m in models:
        m.to(device)
    try:
        yield
    finally:
        for m in models:
            m.to(where)


def group_state(probe: tuple[RolloutBatch, int] | None) -> tuple[dict[str, Any], int] | None:
    """The credit map's group as a checkpoint holds it: the batch's fields (plain tensors and lists) and the row."""
    if probe is None:
        return None
    batch, row = probe
    return {f.name: getattr(batch, f.name) for f in dataclasses.fields(batch)}, row


def group_from_state(state: tuple[dict[str, Any], int] | None) -> tuple[RolloutBatch, int] | None:
    return None if state is None else (RolloutBatch(**state[0]), state[1])


def effective_credit(
    policy, ref_policy, method: Method, sampler: RolloutSampler, rl: RLConfig, batch: RolloutBatch, devices: list[int]
) -> tuple[RolloutBatch, torch.Tensor]:
    """The method's effective credit -dL/d log pi on every token of ``batch`` under the current
    policy (ratio 1, as at the start of an update): the batch as the method saw it and the credit
    ``[B, T]`` (0 where the loss takes no token). The batch is its own batch: batch-wide statistics
    are its own in every process. What the method generates for it (``augment``, with a fixed seed)
    is not counted, and its rows come after ``batch``'s, whose indices stay valid."""
    batch = batch.to(next(policy.parameters()).device)  # a group restored from a checkpoint is on the CPU
    with local(), torch.inference_mode(False), torch.enable_grad():  # also inside a validation loop
        counters = sampler.samples, sampler.tokens, sampler.extra
        with seeded(4321, devices):
            batch = method.augment(batch, sampler)  # a method's own generations: not counted in the run
        sampler.samples, sampler.tokens, sampler.extra = counters
        score_batch(policy, ref_policy, method, batch, rl=rl, fused=False)
        credit = method.credit(batch)
        s = forward(policy, batch, rl, with_entropy=False)
        method.on_minibatch(batch)  # the credit map's group is one minibatch
        out = method.loss(batch, s.logprobs, credit)
        mask = batch.completion_mask if out.mask is None else out.mask  # the tokens the loss is taken over
        loss = aggregate(out.loss, mask, method.config.aggregation, max_len=batch.max_new_tokens)
        grad = torch.autograd.grad(loss, s.logprobs, allow_unused=True)[0]
    grad = torch.zeros_like(s.logprobs) if grad is None else grad
    return batch, -grad.detach()  # [B, T]


def credit_map(
    policy,
    ref_policy,
    method: Method,
    sampler: RolloutSampler,
    rl: RLConfig,
    probe: tuple[RolloutBatch, int],
    devices: list[int],
) -> dict[str, Any]:
    """The credit map: the method's effective credit on the group's completion ``probe`` (the batch and
    its row) under the current policy, token texts and one value each. The group is its own batch."""
    batch, row = probe
    batch, credit = effective_credit(policy, ref_policy, method, sampler, rl, batch, devices)
    valid = batch.completion_mask[row].bool()
    ids = batch.completion_ids[row][valid].tolist()
    return {
        "prompt": batch.prompts[row],
        "completion": batch.completions[row],
        "completion_tokens": [sampler.tokenizer.decode([i]) for i in ids],
        "reward": float(batch.rewards[row]),
        "credit": credit[row][valid].float().tolist(),
    }
