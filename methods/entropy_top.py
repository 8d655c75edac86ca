"""The 80/20 rule: "Beyond the 80/20 Rule: High-Entropy Minority Tokens Drive Effective
Reinforcement Learning for LLM Reasoning" (Wang et al. 2025, arXiv 2506.01939).

Vanilla DAPO (every DAPO default, dynamic sampling included) with the policy gradient restricted
to the "forking" tokens, the top rho = 20% by entropy H_it of the policy at the position:

    K = {(i, t) : H_it >= tau_rho},    L = -1/|K| sum_{(i,t) in K} min(r_it A_i, clip(r_it, 0.8, 1.28) A_i)

Training on the top 20% matches full-gradient DAPO on Qwen3-8B and beats it on 14B/32B; the
bottom 80% alone hurts. The official code (Shenzhi-Wang/Beyond-the-80-20-Rule-RLVR, commit
9273158: verl/workers/actor/dp_actor.py::update_policy, verl/trainer/ppo/core_algos.py) builds
the mask in each micro-batch of the update with ``get_global_entropy_top_mask``: the
k = ceil(rho N) highest entropies among the micro-batch's N response tokens (torch.topk, k
written max(1, int(rho N + 0.9999))), and aggregates the loss over response_mask * mask, so the
token-mean divides by the kept tokens. Those are the defaults here (methods.common.entropy_top_mask).

Deviations and reconstructions:
1. The population is each PPO minibatch of the update (chosen in on_minibatch, gathered over
   processes and before any split into micro-batches under ``rl.micro_batch_tokens``, so the
   selection depends on neither the number of processes nor the memory budget); the official one is
   each GPU's micro-batch. ``population="batch"`` takes it once over the rollout batch (TRL's
   ``top_entropy_quantile``), "sequence" per completion.
2. The official mask ranks the entropies of the policy being updated (its training forward);
   here those of the behaviour policy pi_old (the scoring pass), the same in a single on-policy
   update but fixed over the epochs and minibatches of several.
3. ``selection="top_k"`` keeps every token tied with the k-th entropy, where torch.topk keeps
   exactly k; ``"quantile"`` uses TRL's (1 - rho)-quantile with linear interpolation instead.
4. ``denominator="selected"`` aggregates over the kept tokens (``LossOutput.mask``), as the official
   code; ``"all"`` keeps every valid token in the denominator, as TRL multiplies the loss by the mask.
The official script's dual clip (``clip_ratio_c`` = 10) is DAPO's default here (``dual_clip``).
The kept share of tokens is the engine's ``credit/nonzero_frac`` (about rho on mixed groups).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from torch import Tensor

from bench.core import LossOutput, RolloutBatch, check
from bench.registry import METHODS
from methods.common import Population, Selection, check_choice, entropy_top_mask, stored_selection
from methods.dapo import DAPO, DAPOConfig

Denominator = Literal["all", "selected"]
KEPT = "entropy_top_kept"  # batch.extra key: the rollout batch's selection (population "batch"/"sequence")
KEPT_MINIBATCH = "entropy_top_kept_minibatch"  # the minibatch's (population "minibatch"), set by on_minibatch


@dataclass(frozen=True)
class EntropyTopConfig(DAPOConfig):
    rho: float = 0.2
    """Fraction of valid tokens kept, the highest-entropy ones (paper: 0.2)."""
    population: Population = "minibatch"
    """Tokens the threshold is taken over: each PPO "minibatch" (official: per micro-batch), the
    rollout "batch" (TRL) or each "sequence"."""
    selection: Selection = "top_k"
    """Threshold: the ceil(rho N)-th largest entropy ("top_k", official) or TRL's (1 - rho)-"quantile"."""
    denominator: Denominator = "selected"
    """Token-mean denominator: the "selected" tokens (official) or "all" valid tokens (TRL)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        check(0 < self.rho <= 1, f"rho must be in (0, 1], got {self.rho}")
        check_choice("population", self.population, Population)
        check_choice("selection", self.selection, Selection)
        check_choice("denominator", self.denominator, Denominator)


@METHODS.register("entropy_top")
class EntropyTop(DAPO):
    Config = EntropyTopConfig
    needs = frozenset({"entropy"})
    placebo_control = True  # its credit selects or weights tokens: the placebo moves them
    twin_options = {"rho": 1.0}  # every token kept: DAPO with this recipe
    description = "DAPO with the policy gradient only on the top-rho (20%) highest-entropy tokens"
    paper = (
        "Beyond the 80/20 Rule: High-Entropy Minority Tokens Drive Effective Reinforcement "
        "Learning for LLM Reasoning (Wang et al. 2025), arXiv 2506.01939"
    )

    def top_mask(self, batch: RolloutBatch) -> Tensor:  # [B, T] bool
        cfg = self.config
        return entropy_top_mask(batch.entropy, batch.completion_mask, cfg.rho, cfg.population, cfg.selection)

    def credit(self, batch: RolloutBatch) -> Tensor:  # [B, T]
        credit = super().credit(batch)
        if self.config.population == "minibatch":  # chosen per minibatch in on_minibatch()
            return credit
        keep = self.top_mask(batch)
        batch.extra[KEPT] = keep.to(batch.completion_mask.dtype)  # carried to the minibatches
        return credit * keep

    def on_minibatch(self, batch: RolloutBatch) -> None:
        if self.config.population == "minibatch":  # the minibatch's own tokens, whatever its micro-batches
            batch.extra[KEPT_MINIBATCH] = self.top_mask(batch).to(batch.completion_mask.dtype)

    def loss(self, batch: RolloutBatch, logprobs: Tensor, credit: Tensor) -> LossOutput:
        if self.config.population != "minibatch":
            keep = stored_selection(batch, KEPT)
        elif KEPT_MINIBATCH in batch.extra:  # the whole minibatch's choice (its micro-batches read their rows)
            keep = stored_selection(batch, KEPT_MINIBATCH)
        else:  # a loss() outside the update: the batch given is the minibatch
            keep = self.top_mask(batch)
        out = super().loss(batch, logprobs, credit * keep)
        if self.config.denominator == "selected":
            out.mask = (batch.completion_mask if out.mask is None else out.mask) * keep
        return out
