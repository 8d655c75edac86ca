"""The oracle of a credit-off twin: the twin's credit moved onto each step's true advantage.

On a task that says where a completion's steps end (``Task.step_delimiter``), the value of every
state under the current policy, V(prefix) = P(the policy finishes it correctly), is estimated by K
verified continuations, and each token's step advantage A_t = V_{k+1} - V_k follows
(bench.mc_values). The oracle keeps everything of the method it wraps (rollouts, filters,
clip, KL, aggregation, optimizer) and replaces its per-token credit c_t by

    c'_t = lambda * A_t,    lambda = sum_t |c_t| / sum_t |A_t|    (over the valid tokens of the batch)

the same total credit mass as the method's, put where the value moves: against a twin, whose credit
is uniform over each completion, the two differ only in where the credit sits. A twin that trails
its oracle has room for a credit method to gain; a method's per-update effect over its twin is read
as a share of the oracle's, (dJ method - dJ twin) / (dJ oracle - dJ twin) (bench.report.oracle).

Choices:
1. The credit mass is matched over the batch the credit is computed on (the rollout batch; a fused
   single update's, the same), not per completion: a completion whose group the twin zeroes (every
   sample equally rewarded) keeps its step advantages, which need not sum to 0.
2. Where the batch's true advantages are all 0 (every state's estimate equals its reward) or the
   method's credit is all 0, the oracle's credit is 0.
3. The values are the policy's at the rollout (the behaviour policy), estimated once per batch in
   ``augment``: a batch that already carries them (the credit probe estimates them once for every arm
   of a batch) is not estimated again. States after ``MAX_VALUE_STEPS`` steps take the completion's
   return, as VinePPO's official fill does.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

from bench.core import Method, RolloutBatch, Sampler
from bench.errors import CreditBenchError
from bench.mc_values import step_values

ADVANTAGE = "oracle_advantage"  # batch.extra: [B, T] each token's Monte-Carlo step advantage
MAX_VALUE_STEPS = 20  # VinePPO's official max_step_for_value_estimation


class Oracle:
    """``method`` with its credit moved onto the Monte-Carlo step advantages (see the module docstring).
    Every attribute but ``augment`` and ``credit`` is the method's."""

    oracle = True

    def __init__(self, method: Method, rollouts: int, delimiter: str):
        self.method, self.rollouts, self.delimiter = method, rollouts, delimiter
        self.estimates: Callable[[RolloutBatch, Sampler], Tensor] | None = None
        """Where set (the credit probe's workspace), what gives a batch's true advantages in place of
        estimating them here: one estimate shared by the arms of a batch."""

    def __getattr__(self, name: str) -> Any:
        return getattr(self.method, name)

    def augment(self, batch: RolloutBatch, sampler: Sampler) -> RolloutBatch:
        batch = self.method.augment(batch, sampler)
        if ADVANTAGE not in batch.extra:
            if self.estimates is not None:
                batch.extra[ADVANTAGE] = self.estimates(batch, sampler)
            else:
                batch.extra[ADVANTAGE] = true_advantages(batch, sampler, self.rollouts, self.delimiter)
        return batch

    def credit(self, batch: RolloutBatch) -> Tensor:  # [B, T]
        return oracle_credit(self.method.credit(batch), batch.extra[ADVANTAGE], batch.completion_mask)


def true_advantages(batch: RolloutBatch, sampler: Sampler, rollouts: int, delimiter: str) -> Tensor:
    """Each completion token's Monte-Carlo step advantage [B, T] under the sampler's policy."""
    return step_values(batch, sampler, rollouts, delimiter, MAX_VALUE_STEPS).advantage


def oracle_credit(credit: Tensor, truth: Tensor, mask: Tensor) -> Tensor:
    """``truth`` scaled to the total credit mass of ``credit`` over ``mask`` (choices 1 and 2)."""
    m = mask.to(credit.dtype)
    a = truth.to(credit.dtype) * m
    mass, scale = (credit * m).abs().sum(), a.abs().sum()
    if float(scale) == 0.0 or float(mass) == 0.0:
        return torch.zeros_like(credit)
    return a * (mass / scale)


def with_oracle(method: Method, oracle: bool, rollouts: int, task) -> Method:
    """``method``, or its oracle on ``task`` when ``oracle`` is set (one line naming what is missing)."""
    if not oracle:
        return method
    if rollouts < 1:
        raise CreditBenchError(f"method.oracle_rollouts must be >= 1, got {rollouts}")
    if getattr(method, "placebo", False):
        raise CreditBenchError("method.oracle and method.placebo are two controls: set one of them")
    if task.step_delimiter is None:
        from bench.registry import TASKS

        able = sorted(n for n in TASKS.names() if TASKS.get(n).step_delimiter is not None)
        raise CreditBenchError(
            f"task {task.name!r} cannot say where a completion's steps end (Task.step_delimiter), so the oracle "
            f"has no steps to value; tasks that can: {', '.join(able)}"
        )
    return Oracle(method, rollouts, task.step_delimiter)  # type: ignore[return-value]
