"""FIPO: "Future-KL Influenced Policy Optimization" (Ma et al., COLM 2026, arXiv 2603.19835), as
ms-swift implements it (modelscope/ms-swift at 3602360a562: swift/rlhf_trainers/grpo_trainer.py,
``_compute_fipo_influence`` and ``_compute_loss_and_metrics`` with loss_type="fipo";
docs/source_en/Instruction/GRPO/AdvancedResearch/FIPO.md).

DAPO's recipe with each token's advantage scaled by how the current update moves the tokens from
there to the end of the completion. With Delta_k = log pi_theta(y_k) - log pi_old(y_k), the
completion mask M_k and gamma = 2^(-1 / decay_rate) (the weight halves every decay_rate tokens):

    FutureKL_t = sum_{k >= t} gamma^(k - t) M_k Delta_k            forward-looking discounted sum
    f_t        = clip(exp(FutureKL_t), 1 - eps_f, 1 + eps_f)        [1, 1 + eps_f] when clip_high_only
    f_t        = clip(f_t, 0.8, 1.0)      where A_i < 0 and r_t > safety_threshold
    A~_it      = A_i sg(f_it)             in DAPO's clipped token surrogate (token-mean)

FutureKL mirrors GRPO-lambda's backward trace sum_{k <= t} lambda^(t - k) Delta_k (methods.traces
computes both with the same discounted sum). It needs the current log-probs, so f is computed in
``loss()``. In a single on-policy update (the engine's fused update) Delta = 0, so f = 1 and FIPO
is exactly its base, DAPO with the dual clip; it differs only from the second minibatch or PPO epoch on.

Checked against ms-swift (each matches; its Megatron trainer's copy is the same): Delta masked by
the completion mask, and zeroed where the token ratio r = exp(Delta) exceeds the dual-clip
threshold delta; the sum over k >= t including t (ms-swift's chunked matmul with decay
gamma^(k-t)); FutureKL set to 0 off the mask; the clip skipped when the range is None or 0; f
detached; the safety cap to [0.8, 1.0] (0.8 is a constant there) for negative-advantage tokens
whose uncapped ratio exceeds the threshold; the loss -f min(r A, clip(r, 1 - eps_low, 1 + eps_high) A)
with r capped at delta (INTELLECT-2's two-sided clip, equal to verl's dual clip for delta > 1 +
eps_high); the token sum over every process's completion tokens (DAPO's normalisation); no KL term.
Defaults are ms-swift's argument defaults: decay_rate 32, clip range 0.2, clip-high-only, safety
threshold 4.0. Its example (examples/train/grpo/internal/fipo.sh) runs clip-high-only false, safety
threshold 3.0, delta 10, eps_high 0.28, dynamic sampling and 3 PPO epochs per batch.

Deviations and choices:
1. ms-swift's ``delta`` defaults to None (no dual clip); its FIPO docs say 10.0 matches the
   official 32B script, which its example uses: ``dual_clip`` = 10.0 here, None gives ms-swift's
   default.
2. [R] Everything else is the suite's DAPO with its defaults: eps_high 0.28 and dynamic sampling
   (as ms-swift's example), overlong filtering and the soft overlong punishment (separate options
   in ms-swift, off unless set). Which of these the FIPO paper's runs used is not checked.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from bench.core import LossOutput, RolloutBatch, check
from bench.registry import METHODS
from methods.dapo import DAPO, DAPOConfig
from methods.traces import discounted_cumsum

SAFETY_CAP = (0.8, 1.0)  # ms-swift's fixed range for negative-advantage, high-ratio tokens


@dataclass(frozen=True)
class FIPOConfig(DAPOConfig):
    decay_rate: float = 32.0
    """Half-life of the Future-KL discount in tokens: gamma = 2^(-1/decay_rate) (ms-swift fipo_decay_rate: 32)."""
    influence: bool = True
    """False: f = 1 on every token (the credit-off twin: DAPO with this recipe's dual clip)."""
    influence_clip: float | None = 0.2
    """eps_f: f is clipped to [1 - eps_f, 1 + eps_f]; None or 0 leaves it unclipped (ms-swift fipo_clip_range: 0.2)."""
    influence_clip_high_only: bool = True
    """Clip f to [1, 1 + eps_f] instead (ms-swift fipo_clip_high_only: true)."""
    safety_threshold: float | None = 4.0
    """Negative-advantage tokens with ratio above this get f capped to [0.8, 1]; None disables
    (ms-swift fipo_safety_threshold: 4.0)."""
    dual_clip: float | None = 10.0
    """delta: DAPO's dual clip (the ratio counts at most delta in the loss), and tokens above it add
    nothing to FutureKL (official 32B script: 10; ms-swift's default None disables both)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        check(self.decay_rate > 0, f"decay_rate must be > 0, got {self.decay_rate}")
        eps = self.influence_clip
        check(eps is None or 0 <= eps < 1, f"influence_clip must be None or in [0, 1), got {eps}")
        s = self.safety_threshold
        check(s is None or s > 0, f"safety_threshold must be None or > 0, got {s}")


def future_kl(delta: Tensor, mask: Tensor, gamma: float) -> Tensor:  # [B, T]
    """sum_{k >= t} gamma^(k - t) M_k Delta_k: the backward discounted sum run over the reversed row."""
    x = (delta * mask).flip(-1)
    return discounted_cumsum(x, gamma).flip(-1) * mask


@torch.no_grad()
def influence_weight(log_ratio: Tensor, adv: Tensor, mask: Tensor, cfg: FIPOConfig) -> tuple[Tensor, Tensor]:
    """(f, FutureKL), both [B, T] and detached, from the current log-ratio, advantage and mask."""
    ratio = log_ratio.exp()
    delta = log_ratio if cfg.dual_clip is None else torch.where(ratio > cfg.dual_clip, 0.0, log_ratio)
    fkl = future_kl(delta, mask.to(log_ratio.dtype), 2.0 ** (-1.0 / cfg.decay_rate))
    f = fkl.exp()
    if cfg.influence_clip:  # None or 0: unclipped, as ms-swift
        low = 1.0 if cfg.influence_clip_high_only else 1.0 - cfg.influence_clip
        f = f.clamp(low, 1.0 + cfg.influence_clip)
    if cfg.safety_threshold is not None:  # do not amplify the push-down of tokens already far up
        unsafe = (adv < 0) & (ratio > cfg.safety_threshold)
        f = torch.where(unsafe, f.clamp(*SAFETY_CAP), f)
    return f, fkl


@METHODS.register("fipo")
class FIPO(DAPO):
    Config = FIPOConfig
    description = "DAPO advantage x clip(exp(discounted future log-ratio sum)): credit from the update's future"
    twin_options = {"influence": False}  # f = 1: DAPO with FIPO's dual clip
    paper = "FIPO: Future-KL Influenced Policy Optimization (Ma et al., COLM 2026), arXiv 2603.19835"

    def inert(self, rl) -> str | None:
        if self.config.influence and rl.ppo_epochs * rl.minibatches == 1:
            return (
                "FIPO's influence f is exactly 1 in a single on-policy update (rl.ppo_epochs x rl.minibatches = 1),"
                " so it trains as its twin: give it several minibatches or PPO epochs"
            )
        return None

    def loss(self, batch: RolloutBatch, logprobs: Tensor, credit: Tensor) -> LossOutput:
        cfg = self.config
        log_ratio = logprobs.detach() - batch.old_logprobs  # [B, T]
        f, fkl = influence_weight(log_ratio, credit, batch.completion_mask, cfg)
        f = f if cfg.influence else torch.ones_like(f)
        out = super().loss(batch, logprobs, credit * f)  # DAPO's dual clip: ms-swift's clamp(coef_1, max=delta)
        out.stats.update({"fipo_future_kl": fkl, "fipo_weight": f})
        return out
