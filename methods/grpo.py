"""GRPO: Group Relative Policy Optimization (DeepSeekMath, Shao et al. 2024, arXiv 2402.03300).

Outcome supervision (eq. 3), every token of completion i gets the group-normalised advantage

    A_i = (R_i - mean_j R_j) / (std_j R_j + eps)

and the loss is PPO's clipped token surrogate, averaged per sequence then over the group
(seq-mean-token-mean), with a k3 KL-to-reference term of weight beta = 0.04 (eq. 4):

    L = -1/G sum_i 1/|o_i| sum_t [ min(r_it A_i, clip(r_it, 1-eps, 1+eps) A_i) - beta KL_it ]

Deviations and choices not fixed by the paper:
1. The clip eps is never given a value in the paper; 0.2 (PPO, TRL, verl) is the default.
2. The paper does not say which std: here the unbiased (Bessel) group std plus eps = 1e-4, as
   TRL (verl: unbiased, eps 1e-6). ``std="biased"`` divides by n instead of n - 1 and
   ``eps_mode="floor"`` divides by max(std, eps) (torch's clamp_min) instead of std + eps, the
   forms other official codes use; every method built on this advantage has both fields.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from torch import Tensor

from bench.core import LossOutput, Method, MethodConfig, RolloutBatch, check
from bench.registry import METHODS
from methods.common import check_choice, clipped_surrogate, group_advantage

Std = Literal["unbiased", "biased"]
EpsMode = Literal["add", "floor"]


@dataclass(frozen=True)
class GroupStdConfig(MethodConfig):
    """How a group-normalised advantage divides by the group's reward std (GRPO, DAPO and every
    method built on them)."""

    adv_eps: float = 1e-4
    """eps of the std division (TRL's 1e-4; verl's 1e-6)."""
    std: Std = "unbiased"
    """Group std estimator: "unbiased" (n - 1, torch.std as TRL and verl) or "biased" (n)."""
    eps_mode: EpsMode = "add"
    """"add": (R - mean) / (std + eps), as TRL and verl; "floor": (R - mean) / max(std, eps)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        check(self.adv_eps > 0, f"adv_eps must be > 0, got {self.adv_eps}")
        check_choice("std", self.std, Std)
        check_choice("eps_mode", self.eps_mode, EpsMode)


def normalised_advantage(cfg: GroupStdConfig, rewards: Tensor, group_ids: Tensor, scale: bool = True) -> Tensor:
    """The group advantage of ``rewards`` [B] with the config's std estimator and eps: [B]."""
    return group_advantage(rewards, group_ids, scale, cfg.adv_eps, cfg.std == "unbiased", cfg.eps_mode == "floor")


@dataclass(frozen=True)
class GroupAdvantageConfig(GroupStdConfig):
    """What ``GRPO.credit`` reads. Every method that inherits it has a config derived from this
    one: ``GRPOConfig`` where the method keeps GRPO's symmetric token clip, this one directly where
    it clips with its own (clip_low, clip_high) instead (GSPO, P-trace)."""

    scale_rewards: bool = True
    """Divide the group-centred reward by the group std (GRPO); False gives Dr. GRPO's advantage."""


@dataclass(frozen=True)
class GRPOConfig(GroupAdvantageConfig):
    aggregation: str = "seq-mean-token-mean"
    """GRPO eq. 3: mean over tokens of each sequence, then over sequences."""
    kl_coef: float = 0.04
    """beta of the k3 KL term (paper: 0.04)."""
    clip_eps: float = 0.2
    """PPO clip range on the token ratio."""

    def __post_init__(self) -> None:
        super().__post_init__()
        check(0 < self.clip_eps < 1, f"clip_eps must be in (0, 1), got {self.clip_eps}")


@METHODS.register("grpo")
class GRPO(Method):
    Config = GRPOConfig
    description = "group-normalised outcome advantage on every token, clipped token ratio, k3 KL"
    paper = "DeepSeekMath (Shao et al. 2024), arXiv 2402.03300"

    def credit(self, batch: RolloutBatch) -> Tensor:  # [B, T]
        adv = normalised_advantage(self.config, batch.rewards, batch.group_ids, self.config.scale_rewards)  # [B]
        return adv[:, None].expand_as(batch.completion_mask).float()

    def loss(self, batch: RolloutBatch, logprobs: Tensor, credit: Tensor) -> LossOutput:
        eps = self.config.clip_eps
        loss, clipped = clipped_surrogate(logprobs - batch.old_logprobs, credit, eps, eps)
        return LossOutput(loss, {"clip_frac": clipped.float()})
