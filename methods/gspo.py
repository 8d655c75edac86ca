"""GSPO: Group Sequence Policy Optimization (Zheng et al. 2025, arXiv 2507.18071).

The importance ratio is taken per sequence, as the length-normalised likelihood ratio

    s_i = (pi(y_i|x) / pi_old(y_i|x))^(1/|y_i|) = exp(1/|y_i| sum_t l_it),   l_it = log-ratio,

and clipped per sequence with a very small range (eps_low, eps_high) = (3e-4, 4e-4) (eq. 5-7):

    L = -1/G sum_i min(s_i A_i, clip(s_i, 1-eps_low, 1+eps_high) A_i)

Every token of a sequence gets the same weight s_i A_i / |y_i| in the gradient (eq. 10): the
uniform credit that S-trace generalises. GSPO-token (eq. 13-14) writes the same objective per
token with s_it = sg[s_i] * pi(y_it) / sg[pi(y_it)], which equals GSPO in value, clipping and
gradient when A_it = A_i, and allows per-token advantages.

Here the sequence loss is placed on each valid token and averaged with ``seq-mean-token-mean``,
which gives exactly the sequence mean above. A is the GRPO group-normalised advantage.
Deviations and implementation choices:
1. The paper omits the KL term (beta = 0 here).
2. verl (core_algos.py::compute_policy_loss_gspo) clamps the log of the GSPO-token ratio,
   sg[log s_i] + log pi - sg[log pi] (value log s_i), from above at 10 before exponentiating;
   TRL (importance_sampling_level="sequence") and the paper do not. ``log_ratio_max`` = 10 does
   verl's clamp on log s_i (the same value and, beyond the bound, the same zero gradient in both
   forms); the default None does not clamp. It only matters far outside the clip range, where a
   negative advantage takes the unclipped term: the clamp then removes that row's gradient.
"""

from __future__ import annotations

from dataclasses import dataclass

from torch import Tensor

from bench.core import LossOutput, RolloutBatch, check
from bench.numerics import masked_mean
from bench.registry import METHODS
from methods.common import clipped_surrogate
from methods.grpo import GRPO, GroupAdvantageConfig


@dataclass(frozen=True)
class GSPOConfig(GroupAdvantageConfig):
    """GRPO's advantage (``scale_rewards``, ``adv_eps``); the sequence clip replaces ``clip_eps``."""

    aggregation: str = "seq-mean-token-mean"
    """Mean over sequences (each sequence's loss sits on all its tokens)."""
    kl_coef: float = 0.0
    """Omitted in the paper."""
    clip_low: float = 3e-4
    """Lower clip range of the sequence ratio (paper: 3e-4)."""
    clip_high: float = 4e-4
    """Upper clip range of the sequence ratio (paper: 4e-4)."""
    log_ratio_max: float | None = None
    """log s_i is clamped from above at this value (verl: 10); None, as the paper and TRL, does not."""

    def __post_init__(self) -> None:
        super().__post_init__()
        check(0 < self.clip_low < 1 and self.clip_high > 0, "GSPO needs 0 < clip_low < 1 and clip_high > 0")
        check(
            self.log_ratio_max is None or self.log_ratio_max > 0,
            f"log_ratio_max must be > 0 or None, got {self.log_ratio_max}",
        )


def sequence_log_ratio(logprobs: Tensor, old_logprobs: Tensor, mask: Tensor) -> Tensor:  # [B]
    """log s_i = mean over valid tokens of log pi - log pi_old."""
    return masked_mean(logprobs - old_logprobs, mask, dim=-1)


def bounded(log_ratio: Tensor, bound: float | None) -> Tensor:
    """verl's clamp of a GSPO log-ratio from above (none when ``bound`` is None)."""
    return log_ratio if bound is None else log_ratio.clamp(max=bound)


@METHODS.register("gspo")
class GSPO(GRPO):
    Config = GSPOConfig
    description = "sequence-level (length-normalised) importance ratio, clipped per sequence"
    paper = "Group Sequence Policy Optimization (Zheng et al. 2025), arXiv 2507.18071"

    def loss(self, batch: RolloutBatch, logprobs: Tensor, credit: Tensor) -> LossOutput:
        mask = batch.completion_mask
        log_s = bounded(sequence_log_ratio(logprobs, batch.old_logprobs, mask), self.config.log_ratio_max)  # [B]
        adv = credit[:, 0]  # outcome advantage: the same on every token
        loss, clipped = clipped_surrogate(log_s, adv, self.config.clip_low, self.config.clip_high)  # [B]
        shape = mask.shape
        return LossOutput(loss[:, None].expand(shape), {"clip_frac": clipped[:, None].expand(shape).float()})


@METHODS.register("gspo_token")
class GSPOToken(GSPO):
    description = "GSPO with per-token ratios sg[s_i] * pi/sg[pi], allowing per-token advantages"
    paper = "Group Sequence Policy Optimization (Zheng et al. 2025), arXiv 2507.18071, eq. 13-14"

    def loss(self, batch: RolloutBatch, logprobs: Tensor, credit: Tensor) -> LossOutput:
        mask = batch.completion_mask
        log_s = sequence_log_ratio(logprobs, batch.old_logprobs, mask).detach()  # [B]
        log_ratio = log_s[:, None] + logprobs - logprobs.detach()  # [B, T]: value log s_i, gradient of log pi_t
        log_ratio = bounded(log_ratio, self.config.log_ratio_max)
        loss, clipped = clipped_surrogate(log_ratio, credit, self.config.clip_low, self.config.clip_high)
        return LossOutput(loss, {"clip_frac": clipped.float()})
