"""Late credit: GRPO whose outcome advantage grows linearly along the completion.

An example of a method kept in its own package and registered through the ``creditbench.methods``
entry point. It is not from a paper; it tests the hypothesis that the tokens nearest the answer
decide it. Token t of a completion with L valid tokens gets the mean-one weight

    w_t = 2 (t + 1) / (L + 1),          A_it = A_i * w_t

(A_i: GRPO's group-normalised advantage), fed to GRPO's clipped token surrogate.

Deviations: none; every other setting is GRPO's.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from bench.core import RolloutBatch, check
from bench.registry import METHODS
from methods.grpo import GRPO, GRPOConfig


@dataclass(frozen=True)
class LateCreditConfig(GRPOConfig):
    slope: float = 1.0
    """How much of the linear ramp to apply: w = 1 + slope * (2 (t + 1) / (L + 1) - 1); 0 gives GRPO."""

    def __post_init__(self) -> None:
        super().__post_init__()
        check(0.0 <= self.slope <= 1.0, f"slope must be in [0, 1] (weights stay >= 0), got {self.slope}")


@METHODS.register("late_credit")
class LateCredit(GRPO):
    Config = LateCreditConfig
    description = "GRPO advantage ramped up linearly towards the end of the completion (example plug-in)"
    paper = "none (example plug-in)"

    def credit(self, batch: RolloutBatch) -> Tensor:  # [B, T]
        mask = batch.completion_mask.float()
        L = mask.sum(-1, keepdim=True)  # [B, 1]
        t = torch.arange(mask.shape[1], device=mask.device, dtype=mask.dtype)  # [T]
        ramp = 2 * (t + 1) / (L + 1)  # mean one over the L valid tokens
        w = 1 + self.config.slope * (ramp - 1)
        return super().credit(batch) * w * mask
