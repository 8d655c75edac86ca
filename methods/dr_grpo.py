"""Dr. GRPO: "Understanding R1-Zero-Like Training: A Critical Perspective" (Liu et al. 2025,
arXiv 2503.20783). GRPO with both normalisations removed:

    A_i = R_i - mean_j R_j                       (no division by the group std)
    L   = -1/(B * L_max) sum_i sum_t min(r_it A_i, clip(r_it, 1-eps, 1+eps) A_i)

Dividing by |o_i| favours short correct and long wrong answers; dividing by the std over-weights
questions that are too easy or too hard. The paper writes the objective as a per-sequence token
sum; its code (Oat, ``critic_type="drgrpo"``) divides the masked token sum by a constant, the
generation budget, which is the default here (aggregation ``seq-mean-token-sum-norm``).
Paper settings: clip 0.2, no KL, G = 8.

Deviations: none beyond the aggregation choice above (``seq-mean-token-sum`` gives the written form).
"""

from __future__ import annotations

from dataclasses import dataclass

from bench.registry import METHODS
from methods.grpo import GRPO, GRPOConfig


@dataclass(frozen=True)
class DrGRPOConfig(GRPOConfig):
    aggregation: str = "seq-mean-token-sum-norm"
    """Oat's constant normaliser: token sum / (B * max_new_tokens)."""
    kl_coef: float = 0.0
    """The paper trains without a KL term."""
    scale_rewards: bool = False
    """No division by the group std."""


@METHODS.register("dr_grpo")
class DrGRPO(GRPO):
    Config = DrGRPOConfig
    description = "GRPO without the std and length normalisers (constant generation-budget normaliser)"
    paper = "Understanding R1-Zero-Like Training (Liu et al. 2025), arXiv 2503.20783"
