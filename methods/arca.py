"""ARCA: "Adapter-Residual Credit Assignment When Token Signals Degenerate" (Lafuente-Mercado
2026, arXiv 2606.00257).

Under LoRA the policy stays in a low-rank neighbourhood of the reference, and per-token signals of
the output distribution (surprisal, entropy reduction, policy divergence) degenerate after
within-trajectory normalisation: near-uniform, or piled on a few task-agnostic positions. ARCA's
salience is instead the size of what the adapter changes in the last hidden state:

    s_it = || h_it(adapter on) - h_it(adapter off) ||_2
    w_it = L_i * s_it / sum_t' s_it'                  (mean-one weights over the L_i valid tokens)
    A_it = A_i * w_it                                  (A_i: GRPO's group-normalised advantage)

fed to GRPO's clipped token surrogate. The adapter-off pass is a single no-grad forward, the same
one as the KL reference forward (under LoRA the reference is the base model); the engine computes
s_it (need ``hidden_residual``). h_it is the state at the position that predicts token t.

The three intrinsic signals the paper argues degenerate are selectable with the same normalisation
(``signal``): surprisal -log pi_old(y_t); entropy reduction H(pi_ref(.|s_t)) - H(pi_old(.|s_t));
policy divergence KL(pi_old(.|s_t) || pi_ref(.|s_t)) over the whole vocabulary. Compare them with
the credit/gini and credit/effective_token_ratio diagnostics, which every method logs.

Only the salience and the diagnostics' names are verified (methods.md section 8); reconstructions:
1. The normalisation into weights (methods.md 8.2): ``sum`` (w = L s / sum s, default: the plain
   mean-one rescaling) or ``softmax`` (w = L softmax(s / tau)).
2. Which hidden state: ``post_norm`` (default; the final-norm output the LM head reads) or
   ``pre_norm`` (the residual stream entering the final norm).
3. Negative signal values (entropy reduction can be < 0) are clamped to 0 before normalising, so a
   weight is never negative and never flips the advantage's sign.
4. A trajectory whose salience is all zero gets uniform weights (GRPO). This is exactly the first
   step: LoRA's B starts at zero, so the adapter changes nothing yet.
5. Everything else is GRPO's (clip 0.2, beta 0.04 k3 KL, seq-mean-token-mean): the paper runs a
   GRPO sweep with matched rollout budgets and LoRA rank-matched baselines.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch
from torch import Tensor

from bench.core import RolloutBatch, check
from bench.errors import CreditBenchError
from bench.registry import METHODS
from methods.common import check_choice
from methods.grpo import GRPO, GRPOConfig

Signal = Literal["residual", "surprisal", "entropy_reduction", "policy_divergence"]
Normalise = Literal["sum", "softmax"]
Hidden = Literal["post_norm", "pre_norm"]
# What the engine computes for each signal (added to ``required``).
SIGNALS: dict[str, frozenset[str]] = {
    "residual": frozenset({"hidden_residual"}),
    "surprisal": frozenset(),
    "entropy_reduction": frozenset({"entropy", "ref_entropy"}),
    "policy_divergence": frozenset({"ref_kl"}),
}


@dataclass(frozen=True)
class ARCAConfig(GRPOConfig):
    signal: Signal = "residual"
    """Token salience: residual (ARCA) or one of the intrinsic baselines surprisal, entropy_reduction,
    policy_divergence."""
    normalise: Normalise = "sum"
    """How salience becomes mean-one weights: sum (L s / sum s) or softmax (L softmax(s / temperature))."""
    temperature: float = 1.0
    """tau of the softmax normalisation (unused by sum)."""
    hidden: Hidden = "post_norm"
    """Hidden state compared: post_norm (what the LM head reads) or pre_norm (input of the final norm)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        check_choice("ARCA signal", self.signal, Signal)
        check_choice("normalise", self.normalise, Normalise)
        check(self.temperature > 0, f"temperature must be > 0, got {self.temperature}")
        check_choice("hidden", self.hidden, Hidden)


def salience_weights(s: Tensor, mask: Tensor, normalise: Normalise, temperature: float = 1.0) -> Tensor:  # [B, T]
    """Mean-one weights over each row's valid tokens; rows with no salience get weight 1."""
    m = mask.bool()
    s = s.float().clamp(min=0).masked_fill(~m, 0.0)
    L = m.sum(-1, keepdim=True).float()
    if normalise == "softmax":
        w = L * torch.softmax((s / temperature).masked_fill(~m, float("-inf")), dim=-1)
    else:
        total = s.sum(-1, keepdim=True)
        w = torch.where(total > 0, L * s / total.clamp(min=torch.finfo(s.dtype).tiny), torch.ones_like(s))
    return w.masked_fill(~m, 0.0)


@METHODS.register("arca")
class ARCA(GRPO):
    Config = ARCAConfig
    description = "GRPO advantage weighted by the LoRA adapter's hidden-state residual (needs LoRA)"
    paper = "Adapter-Residual Credit Assignment When Token Signals Degenerate (Lafuente-Mercado 2026), arXiv 2606.00257"

    @property
    def required(self) -> frozenset[str]:
        return super().required | SIGNALS[self.config.signal]

    def salience(self, batch: RolloutBatch) -> Tensor:  # [B, T]
        signal = self.config.signal
        if signal == "residual":
            if self.config.hidden == "pre_norm":
                if "hidden_residual_prenorm" not in batch.extra:
                    raise CreditBenchError(
                        "hidden=pre_norm needs a model whose decoder has a final norm; use post_norm"
                    )
                return batch.extra["hidden_residual_prenorm"]
            return batch.hidden_residual
        if signal == "surprisal":
            return -batch.old_logprobs
        if signal == "entropy_reduction":
            return batch.ref_entropy - batch.entropy
        return batch.ref_kl

    def credit(self, batch: RolloutBatch) -> Tensor:  # [B, T]
        cfg = self.config
        w = salience_weights(self.salience(batch), batch.completion_mask, cfg.normalise, cfg.temperature)
        return super().credit(batch) * w
