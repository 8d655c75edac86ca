"""The 80/20 rule: "Beyond the 80/20 Rule: High-Entropy Minority Tokens Drive Effective
Reinforcement Learning for LLM Reasoning" (Wang et al. 2025, arXiv 2506.01939).

Vanilla DAPO (every DAPO default, dynamic sampling included) with the policy gradient restricted
to the "forking" tokens, the top rho = 20% by entropy H_it of pi_old at the position:

    L = -1/sum_i |o_i| sum_i sum_t 1[H_it >= tau_rho] min(r_it A_i, clip(r_it, 0.8, 1.28) A_i)

where tau_rho is the (1 - rho)-quantile of H over the valid tokens of the batch
(methods.common.entropy_top_mask). The credit is zero on every other token. Training on the top
20% matches full-gradient DAPO on Qwen3-8B and beats it on 14B/32B; the bottom 80% alone hurts.

Deviations and reconstructions:
1. The quantile population defaults to the rollout batch (TRL's ``top_entropy_quantile``); the
   official verl code takes it per micro-batch, and ``population="sequence"`` is offered too.
2. Whether the official loss renormalises over the kept tokens is unknown [?]. ``denominator="all"``
   (default, as TRL) keeps every valid token in the token-mean denominator; ``"selected"`` scales
   the credit by N_valid / N_selected over the batch, which divides by the kept tokens instead
   (exact for token-mean over the whole batch).
   With several training processes the quantile and both counts are the global batch's.
3. The official script's dual clip (``clip_ratio_c`` = 10) is not applied (see methods.dapo).
The kept share of tokens is the engine's ``credit/nonzero_frac`` (about rho on mixed groups).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch
from torch import Tensor

from bench.core import RolloutBatch, check
from bench.distributed import all_sum
from bench.registry import METHODS
from methods.common import Population, check_choice, entropy_top_mask
from methods.dapo import DAPO, DAPOConfig

Denominator = Literal["all", "selected"]


@dataclass(frozen=True)
class EntropyTopConfig(DAPOConfig):
    rho: float = 0.2
    """Fraction of valid tokens kept, the highest-entropy ones (paper: 0.2)."""
    population: Population = "batch"
    """Tokens the entropy quantile is taken over: the rollout "batch" (TRL) or each "sequence"."""
    denominator: Denominator = "all"
    """Token-mean denominator: "all" valid tokens (TRL) or the "selected" ones (official: unknown)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        check(0 < self.rho <= 1, f"rho must be in (0, 1], got {self.rho}")
        check_choice("population", self.population, Population)
        check_choice("denominator", self.denominator, Denominator)


@METHODS.register("entropy_top")
class EntropyTop(DAPO):
    Config = EntropyTopConfig
    needs = frozenset({"entropy"})
    description = "DAPO with the policy gradient only on the top-rho (20%) highest-entropy tokens"
    paper = (
        "Beyond the 80/20 Rule: High-Entropy Minority Tokens Drive Effective Reinforcement "
        "Learning for LLM Reasoning (Wang et al. 2025), arXiv 2506.01939"
    )

    def top_mask(self, batch: RolloutBatch) -> Tensor:  # [B, T] bool
        cfg = self.config
        return entropy_top_mask(batch.entropy, batch.completion_mask, cfg.rho, cfg.population)

    def credit(self, batch: RolloutBatch) -> Tensor:  # [B, T]
        keep = self.top_mask(batch)
        credit = super().credit(batch) * keep
        if self.config.denominator == "selected":
            # token-mean divides by N_valid; this makes it a mean over the N_selected kept tokens
            n_valid, n_kept = all_sum(torch.stack([batch.completion_mask.sum(), keep.sum()]))  # global batch
            n_kept = n_kept.clamp(min=1)
            credit = credit * (n_valid / n_kept)
        return credit
