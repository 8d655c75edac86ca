"""VinePPO: "VinePPO: Refining Credit Assignment in RL Training of LLMs" (Kazemnejad et al. 2024,
arXiv 2410.01679; official code McGill-NLP/VinePPO, ``MathEpisodeGeneratorWithMCAdvantages`` and
``PPOTrainer``). PPO without a critic: the value of each state is a Monte-Carlo estimate.

A completion y is cut into reasoning steps s_0 .. s_{S-1} (the official GSM8K task: at each newline,
the delimiter starting the next step). The states are the prompt (k = 0) and the prompt followed by
the first k steps; from each of the first ``max_value_steps`` + 1 states, K = ``mc_rollouts``
continuations are sampled by the current policy and verified, and

    V_k = mean of the K rewards                  (k = 0 .. min(S - 1, max_value_steps))
    V_S = 0;  V_k = r_k + V_{k+1} beyond those   (r_k = 0 except r_{S-1} = R(y), the completion's reward)
    A_k = r_k + V_{k+1} - V_k                    (the advantage of step k)

every token of step k gets A_k (the step holding the token's first character), and the advantages
are whitened, (A - mean) / sqrt(var + 1e-8) over the tokens (unbiased variance), before PPO's clipped
token surrogate (eps 0.2), averaged over every token of the batch, with a k3 KL term of weight 1e-4
(the official configs' ``refKl0.0001``, ``klLoss``). The continuations are only verified, never
trained on: they count apart from the training samples (``extra_samples``) and in the token budget.
Identical states (the prompt, shared by a group's rows; equal prefixes) are estimated once, as the
official code deduplicates its value requests.

Twin: ``segmentation: whole``, the completion as one step: A = R(y) - V_0 on every token, with the
same Monte-Carlo baseline at the prompt, whitening and loss (the credit spread uniformly).

A batch ``augment`` has not seen (the contract tests) takes V_0 = its group's mean reward and no
other value: A = R - mean on every token, Dr. GRPO's advantage, whitened.

Deviations from the official code, each an option or a stated consequence:
1. Steps are found in the text by ``step_delimiter`` (the official GSM8K split, "\\n"; chain's
   partial sums: ","), leading and trailing whitespace-only pieces merged into their neighbours. The
   official GSM8K task also merges the final answer ("\\n#### ...") into the last step; a task here
   that writes its answer after a delimiter keeps it as its own step.
2. A state's prefix is the completion's tokens before the step's first character (a token across a
   boundary stays with the step of its first character, as the official token advantages do); the
   official code re-tokenises the prefix text, which can split a token.
3. Whitening over the rollout batch (``whiten: batch``) where the official code whitens each training
   batch of 64 episodes across devices; ``grayen`` only divides by the std (its ``grayen_advantages``),
   ``none`` leaves A as it is.
4. The k3 KL term is the engine's, with the method's aggregation and no clamp; the official loss sums
   a k3 clamped to [0, 10] over each sequence's tokens and averages over sequences.
5. Truncated completions and continuations take the task's reward (0 for an unfinished answer here)
   where the official code gives its unfinished-response penalty; the official trainer also skips a
   batch whose mean ratio exceeds a threshold (not here).
6. The sampling settings are the run's (the official GSM8K runs: temperature 0.6, top-p 0.9, K = 9,
   25 value steps; its default ``max_step_for_value_estimation`` is 20, used here).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

import torch
from torch import Tensor

from bench.core import RolloutBatch, Sampler, check
from bench.mc_values import split_steps, step_advantages, step_values  # noqa: F401 (re-exported)
from bench.numerics import masked_mean, masked_sum
from bench.registry import METHODS
from methods.common import check_choice
from methods.grpo import GRPO, GRPOConfig, normalised_advantage

Segmentation = Literal["delimiter", "whole"]
Whiten = Literal["batch", "grayen", "none"]
ADVANTAGE = "vine_advantage"  # batch.extra: [B, T] each token's A_k before whitening
VALUES = "vine_values"  # batch.extra: [B, V] the estimated V_k (NaN where not estimated), for reports
VALUE_SE = "vine_value_se"  # batch.extra: [B, V] each estimate's Monte-Carlo SE, sd of its K rewards / sqrt(K)
STEP = "vine_step"  # batch.extra: [B, T] each token's step index (-1 outside the completion)


@dataclass(frozen=True)
class VinePPOConfig(GRPOConfig):
    aggregation: str = "token-mean"
    """The official loss: the mean over every token of the batch (masked_mean)."""
    kl_coef: float = 1e-4
    """beta of the k3 KL term (the official configs' init_kl_coef 1e-4)."""
    scale_rewards: bool = False
    """Only where ``augment`` has not run (V_0 = the group's mean): False, R - mean, not divided by the std."""
    mc_rollouts: int = 9
    """K: continuations sampled from each state to estimate its value (official: 9)."""
    max_value_steps: int = 20
    """States after at most this many steps are estimated; later ones take the completion's return (official
    default max_step_for_value_estimation 20; its GSM8K runs 25)."""
    segmentation: Segmentation = "delimiter"
    """"delimiter": steps end before each ``step_delimiter``; "whole": the completion is one step (the twin)."""
    step_delimiter: str = "\n"
    """The text that starts a new step (official GSM8K: a newline; chain: ",")."""
    whiten: Whiten = "batch"
    """"batch": (A - mean) / sqrt(var + 1e-8) over the batch's tokens (official whiten_advantages); "grayen":
    A / sqrt(var + 1e-8); "none": A as estimated."""

    def __post_init__(self) -> None:
        super().__post_init__()
        check(self.mc_rollouts >= 1, f"mc_rollouts must be >= 1, got {self.mc_rollouts}")
        check(self.max_value_steps >= 0, f"max_value_steps must be >= 0, got {self.max_value_steps}")
        check(self.step_delimiter != "", "step_delimiter must not be empty (segmentation: whole for one step)")
        check_choice("segmentation", self.segmentation, Segmentation)
        check_choice("whiten", self.whiten, Whiten)


@METHODS.register("vineppo")
class VinePPO(GRPO):
    Config = VinePPOConfig
    description = "Monte-Carlo values from K rollouts at each reasoning step; each step's A = V(next) - V(this)"
    paper = "VinePPO (Kazemnejad et al. 2024), arXiv 2410.01679"
    twin_options: ClassVar[dict[str, Any] | None] = {"segmentation": "whole"}  # R - V_0 on every token
    group_relative = False  # its baseline is the Monte-Carlo value, not the group's mean
    placebo_control = True  # its credit weights tokens (by step) at the first update: the placebo moves them
    summary = ("vine_value", "vine_value_se")  # the mean estimated value and its Monte-Carlo SE, per run

    @property
    def augment_rollouts(self) -> int:
        """K at every step; the twin's one state per completion (its V_0) is a tenth of that, not charged."""
        return self.config.mc_rollouts if self.config.segmentation == "delimiter" else 0

    def credit(self, batch: RolloutBatch) -> Tensor:  # [B, T]
        mask = batch.completion_mask.float()
        if ADVANTAGE in batch.extra:
            adv = batch.extra[ADVANTAGE].float() * mask
        else:  # a batch augment never saw: V_0 = the group's mean reward
            adv = normalised_advantage(self.config, batch.rewards, batch.group_ids, self.config.scale_rewards)
            adv = adv[:, None] * mask
        return whiten(adv, mask, self.config.whiten)

    def augment(self, batch: RolloutBatch, sampler: Sampler) -> RolloutBatch:
        """Estimate the value of every state of every completion by K verified continuations, and keep
        each token's step advantage (and the values) in ``batch.extra``."""
        cfg = self.config
        delimiter = None if cfg.segmentation == "whole" else cfg.step_delimiter
        v = step_values(batch, sampler, cfg.mc_rollouts, delimiter, cfg.max_value_steps)
        found = {ADVANTAGE: v.advantage, STEP: v.step, VALUES: v.values, VALUE_SE: v.se}
        return dataclasses.replace(batch, extra={**batch.extra, **found})  # the drawn batch is shared by arms

    def loss(self, batch: RolloutBatch, logprobs: Tensor, credit: Tensor):
        out = super().loss(batch, logprobs, credit)
        if VALUES in batch.extra:  # the minibatch's estimated values and their Monte-Carlo SE
            v, se = batch.extra[VALUES], batch.extra[VALUE_SE]
            out.scalars["vine_value"] = v[~v.isnan()].mean() if (~v.isnan()).any() else v.new_tensor(0.0)
            out.scalars["vine_value_se"] = se[~se.isnan()].mean() if (~se.isnan()).any() else se.new_tensor(0.0)
        return out


def whiten(adv: Tensor, mask: Tensor, how: str) -> Tensor:
    """The official masked whitening over the valid tokens (unbiased variance, + 1e-8 under the root)."""
    if how == "none":
        return adv * mask
    n = mask.sum()
    mean = masked_mean(adv, mask)
    var = masked_sum((adv - mean) ** 2, mask) / (n - 1).clamp(min=1)
    centred = adv - mean if how == "batch" else adv
    return centred * torch.rsqrt(var + 1e-8) * mask
