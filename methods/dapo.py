"""DAPO: Decoupled Clip and Dynamic sAmpling Policy Optimization (Yu et al. 2025, arXiv 2503.14476).

GRPO's group-normalised advantage (eq. 9) on every token, no KL term, and four changes:

1. Clip-Higher: the token ratio is clipped asymmetrically, eps_low = 0.2, eps_high = 0.28, so
   low-probability tokens can gain more before the clip stops them (objective, eqs. 8 and 10-12):

       L = -1/sum_i |o_i| sum_i sum_t min(r_it A_i, clip(r_it, 1 - eps_low, 1 + eps_high) A_i)

2. Dynamic sampling: train only on groups with 0 < #correct < G; dropped groups are
   replaced by groups of fresh prompts until the batch is full (``keep_groups`` says which, the
   engine refills, up to ``generation_rounds`` rollout batches per step).
3. Token-level loss: the token sum divided by the number of tokens of the batch (eq. 12,
   aggregation ``token-mean``), so long sequences weigh by their length.
4. Overlong reward shaping: *overlong filtering* masks the loss of truncated samples; *soft
   overlong punishment* (eq. 13) adds to the rule reward R = +1 correct / -1 wrong

       R_length(y) = 0                                 if |y| <= L_max - L_cache
                     ((L_max - L_cache) - |y|) / L_cache   if L_max - L_cache < |y| <= L_max
                     -1                                if |y| > L_max

verl's recipe vs the paper: the recipe adds the punishment times ``overlong_buffer.penalty_factor``
(1.0) in its reward manager, as here; it filters groups on the per-sample ``acc`` metric with up to
``max_num_gen_batches`` rollout batches (10 in the 80/20 script); it adds a dual clip (ratio capped
at ``clip_ratio_c`` = 10 for A < 0) that the paper does not describe (``dual_clip``: 10, on here as in
the official code, like every method here whose official code has one; None gives the paper's
objective); it has no overlong filtering (recipe/dapo/dapo_ray_trainer.py trains on truncated samples, which the
punishment gives -1): ``overlong_filter=False`` is the recipe's behaviour.

Deviations and reconstructions:
1. The reward comes from the task's verdict (``batch.correct``): R = 2 * correct - 1; with
   ``signed_reward=False`` the task's own reward is used instead.
2. L_cache is a fraction of this run's budget, round(overlong_buffer * max_new_tokens), the
   paper's 4096 / 20480 = 0.2, and L_max is ``max_new_tokens``; |y| counts the valid tokens.
3. Overlong filtering masks the loss of truncated samples, as the paper says: their tokens leave
   the token-mean denominator (``LossOutput.mask``) and their credit is zeroed.
   ``overlong_denominator="all"`` only zeroes the credit, so their tokens still count in the
   denominator (this suite's earlier reading; it scales every other token's gradient down).
4. The group std is Bessel-corrected with eps = 1e-4 added (TRL, as GRPO here); verl uses 1e-6.
   ``std`` and ``eps_mode`` choose the other forms (methods.grpo.GroupStdConfig).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import torch
from torch import Tensor

from bench.core import LossOutput, Method, RolloutBatch, check
from bench.registry import METHODS
from methods.common import check_choice, clipped_surrogate
from methods.grpo import GroupStdConfig, normalised_advantage

OverlongDenominator = Literal["kept", "all"]


@dataclass(frozen=True)
class DAPOConfig(GroupStdConfig):
    aggregation: str = "token-mean"
    """DAPO eq. 12: token sum over the batch divided by its number of tokens."""
    kl_coef: float = 0.0
    """DAPO removes the KL term."""
    clip_low: float = 0.2
    """eps_low of Clip-Higher (paper: 0.2)."""
    clip_high: float = 0.28
    """eps_high of Clip-Higher (paper: 0.28)."""
    signed_reward: bool = True
    """Rule reward +1 correct / -1 wrong (paper); False uses the task's reward."""
    overlong_filter: bool = True
    """Mask the loss of truncated samples (paper's overlong filtering; verl's recipe has none)."""
    overlong_denominator: OverlongDenominator = "kept"
    """With overlong_filter: "kept" drops the truncated samples' tokens from the token-mean
    denominator (the paper's masking); "all" only zeroes their credit, so they still count."""
    soft_overlong: bool = True
    """Add the soft overlong punishment of eq. 13 to the reward."""
    overlong_buffer: float = 0.2
    """L_cache as a fraction of max_new_tokens (paper: 4096 of 20480 = 0.2)."""
    overlong_penalty: float = 1.0
    """Weight of the soft overlong punishment (verl's overlong_buffer.penalty_factor, 1.0)."""
    dynamic_sampling: bool = True
    """Train only on groups with mixed correctness and refill the batch (paper)."""
    max_gen_batches: int = 10
    """Most rollout batches per step while refilling (80/20 official script: 10)."""
    dual_clip: float | None = 10.0
    """verl's dual clip c: in the loss a ratio counts at most c, capping an A < 0 token's loss at
    -c A (the official recipe's clip_ratio_c: 10; not in the paper: None leaves it out)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        check(0 < self.clip_low < 1 and self.clip_high > 0, "DAPO needs 0 < clip_low < 1 and clip_high > 0")
        check(0 < self.overlong_buffer < 1, f"overlong_buffer must be in (0, 1), got {self.overlong_buffer}")
        check(self.overlong_penalty >= 0, f"overlong_penalty must be >= 0, got {self.overlong_penalty}")
        check(self.max_gen_batches >= 1, f"max_gen_batches must be >= 1, got {self.max_gen_batches}")
        check_choice("overlong_denominator", self.overlong_denominator, OverlongDenominator)
        check(
            self.dual_clip is None or self.dual_clip > 1 + self.clip_high,
            f"dual_clip must be None or > 1 + clip_high = {1 + self.clip_high}, got {self.dual_clip}",
        )


def soft_overlong_punishment(lengths: Tensor, max_len: int, cache_len: int) -> Tensor:  # [B]
    """R_length of eq. 13: 0 up to L_max - L_cache, then linear down to -1 at L_max, -1 beyond."""
    excess = lengths.float() - (max_len - cache_len)
    return -(excess / max(cache_len, 1)).clamp(0.0, 1.0)  # with L_cache = 0 only |y| > L_max is hit


@METHODS.register("dapo")
class DAPO(Method):
    Config = DAPOConfig
    description = "clip-higher token ratio, token-mean loss, overlong shaping, only mixed-correctness groups"
    paper = "DAPO: An Open-Source LLM Reinforcement Learning System at Scale (Yu et al. 2025), arXiv 2503.14476"

    def reward(self, batch: RolloutBatch) -> Tensor:  # [B]
        """The shaped scalar reward whose group-normalised value is every token's credit."""
        cfg = self.config
        r = 2.0 * batch.correct.float() - 1.0 if cfg.signed_reward else batch.rewards.float()
        if cfg.soft_overlong:
            max_len = batch.max_new_tokens  # L_max
            cache_len = round(cfg.overlong_buffer * max_len)  # L_cache
            r = r + cfg.overlong_penalty * soft_overlong_punishment(batch.lengths, max_len, cache_len)
        return r

    def credit(self, batch: RolloutBatch) -> Tensor:  # [B, T]
        adv = normalised_advantage(self.config, self.reward(batch), batch.group_ids)  # [B]
        if self.config.overlong_filter:
            adv = adv * ~batch.truncated  # a cut-off answer is not evidence about its reasoning
        return adv[:, None].expand_as(batch.completion_mask).float()

    @property
    def generation_rounds(self) -> int:
        return self.config.max_gen_batches if self.config.dynamic_sampling else 1

    def keep_groups(self, batch: RolloutBatch) -> Tensor | None:  # [num_groups]
        """Groups whose accuracy is neither 0 nor 1 (verl: filter_groups.metric=acc)."""
        if not self.config.dynamic_sampling:
            return None
        gid = batch.group_ids
        n = int(gid.max()) + 1
        hits = torch.zeros(n, device=gid.device).index_add_(0, gid, batch.correct.float())  # [num_groups]
        return (hits > 0) & (hits < torch.bincount(gid, minlength=n))

    def loss_mask(self, batch: RolloutBatch) -> Tensor | None:  # [B, T]
        """The tokens the loss is aggregated over, when not every valid token: overlong filtering
        drops the truncated samples."""
        cfg = self.config
        if not (cfg.overlong_filter and cfg.overlong_denominator == "kept"):
            return None
        return batch.completion_mask * ~batch.truncated[:, None]

    def loss(self, batch: RolloutBatch, logprobs: Tensor, credit: Tensor) -> LossOutput:
        cfg = self.config
        if cfg.dual_clip is not None:  # the ratio counts at most c: verl's dual clip, given c > 1 + clip_high
            logprobs = torch.minimum(logprobs, batch.old_logprobs + math.log(cfg.dual_clip))
        log_ratio = logprobs - batch.old_logprobs  # [B, T]
        loss, clipped = clipped_surrogate(log_ratio, credit, cfg.clip_low, cfg.clip_high)
        return LossOutput(loss, {"clip_frac": clipped.float()}, mask=self.loss_mask(batch))
