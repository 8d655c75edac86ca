"""GRPO-lambda: "Credit Assignment improves LLM Reasoning" (Parthasarathi et al. 2025,
arXiv 2510.00194).

GAE's policy gradient sum_t A_t grad log pi_t, with A_t = sum_l (gamma lambda)^l delta_{t+l}, equals
sum_t delta_t grad z_t after swapping the sums, where z_t = sum_{k<=t} (gamma lambda)^(t-k) log pi_k
is an eligibility trace of log-probs. GRPO-lambda keeps GRPO's critic-free outcome advantage as the
TD error of every token and puts the trace into the importance ratio [S]:

    z_t   = sum_{k<=t} W_{t,k} l_k,     l_k = log pi(y_k) - log pi_old(y_k),   a = gamma * lambda
    W_{t,k} = a^(t-k)                       "recent"  (z_t = l_t + a z_{t-1})
    W_{t,k} = max(a^(t-k), a^k)             "both"    (early tokens keep weight at every position)
    rho_t = exp(z_t),   A_i = max(group-normalised A_i, -0.1)
    L_t   = -min(rho_t A_i, clip(rho_t, 1-eps, 1+eps) A_i)

aggregated per sequence then over sequences, plus GRPO's k3 KL term. The gradient flows through
every l_k in z_t, so token k's gradient is A_i sum_{t>=k} W_{t,k} rho_t / L_i: at ratio 1 and
a = 0.99 that is up to ~100x GRPO's weight on early tokens (credit pushed earlier, as intended),
so gradient norms are not comparable with GRPO's at the same learning rate -- log them.

Sources: the abstract [V]; ICLR 2026 reviews and third-party notes and re-implementations [S]
(lambda = 0.99, negative advantages clamped at -0.1, the two trace styles, "eps-trace" and
"eps-weight"). No official code was found. Reconstructions and open choices:
1. gamma is not known; 1.0 as in the unstoppable-learner re-implementation (allenact uses 0.99).
2. "eps-trace" is read as the PPO clip acting on the traced ratio (unstoppable-learner,
   ``clip_target="traced_ratio"``); ``"token_ratio"`` instead clamps each l_k to
   [log(1-eps), log(1+eps)] before tracing and uses -min(rho A, rho_clamped A).
3. The other re-implementation (allenact) reads eps as a floor on the trace weights,
   W <- max(W, trace_floor); available, off by default.
4. Aggregation (seq-mean-token-mean), clip eps 0.2 and KL beta 0.04 follow the third-party code;
   the paper's values are unknown.
5. Positions are counted within the completion, from 0 as both re-implementations do
   (W = max(a^(t-k), a^k), so the first token keeps weight 1 at every position);
   ``position_origin=1`` counts them from 1 as methods.md 6.3 writes the sum (k = 1..t), which
   makes the first token's early weight a (0-indexed: W = max(a^(t-k), a^(k+1))). Only "both"
   depends on it. Written out, "both" needs an L x L weight matrix; methods/traces.py computes it
   in O(L) memory.
Not to be confused with "GRPO-lambda" of Dai et al. 2025 (a length-penalty switch), with
"lambda-GRPO" (arXiv 2510.06870, learned token preferences), nor with decaying the *advantage* as
A (gamma lambda)^(L-1-t), which moves credit to late tokens.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Literal

import torch
from torch import Tensor

from bench.core import LossOutput, RolloutBatch, check
from bench.registry import METHODS
from methods.common import check_choice, clipped_surrogate
from methods.grpo import GRPO, GRPOConfig
from methods.traces import Style, trace_log_ratio

ClipTarget = Literal["traced_ratio", "token_ratio"]


@dataclass(frozen=True)
class GRPOLambdaConfig(GRPOConfig):
    lam: float = 0.99
    """lambda of the trace (0.99, from the reviews [S])."""
    gamma: float = 1.0
    """Discount; unknown in the paper, 1.0 as the unstoppable-learner re-implementation. The trace
    decays by gamma * lam per token."""
    style: Style = "recent"
    """"recent": W = a^(t-k); "both": W = max(a^(t-k), a^k), which also keeps early tokens."""
    clip_target: ClipTarget = "traced_ratio"
    """What eps clips: the traced ratio exp(z_t) ("traced_ratio", the unstoppable-learner reading
    of eps-trace) or each token's log-ratio before tracing ("token_ratio")."""
    trace_floor: float = 0.0
    """W <- max(W, trace_floor): the allenact re-implementation's reading of eps; 0 disables it."""
    position_origin: int = 0
    """Index of the first completion token in the "both" weights a^k (0, both re-implementations;
    1, methods.md's k = 1..t)."""
    neg_adv_clamp: float | None = -0.1
    """Negative advantages are raised to this value (-0.1, needed for stability [S]); None
    keeps GRPO's advantage."""

    def __post_init__(self) -> None:
        super().__post_init__()
        check(0 <= self.lam <= 1, f"lam must be in [0, 1], got {self.lam}")
        check(0 <= self.gamma <= 1, f"gamma must be in [0, 1], got {self.gamma}")
        check_choice("trace style", self.style, Style)
        check_choice("clip_target", self.clip_target, ClipTarget)
        check(0 <= self.trace_floor < 1, f"trace_floor must be in [0, 1), got {self.trace_floor}")
        check(self.position_origin in (0, 1), f"position_origin must be 0 or 1, got {self.position_origin}")
        check(
            self.neg_adv_clamp is None or self.neg_adv_clamp <= 0,
            f"neg_adv_clamp must be <= 0 or None, got {self.neg_adv_clamp}",
        )


@METHODS.register("grpo_lambda")
class GRPOLambda(GRPO):
    Config = GRPOLambdaConfig
    description = "GRPO with an eligibility trace of token log-ratios in the clipped ratio"
    twin_options = {"lam": 0.0}  # no trace: GRPO's token ratio, with this recipe's advantage clamp
    paper = "Credit Assignment improves LLM Reasoning (Parthasarathi et al. 2025), arXiv 2510.00194"

    def twin(self) -> dict[str, Any]:
        """``lam: 0``, and the "recent" style without a floor where the config has "both" or a
        ``trace_floor``: with either, lam = 0 still leaves earlier log-ratios in z_t ("both" the first
        token's weight a^0 = 1, the floor every earlier token's), so the credit is not uniform."""
        options: dict[str, Any] = dict(self.twin_options)
        if self.config.style != "recent":
            options["style"] = "recent"
        if self.config.trace_floor > 0:
            options["trace_floor"] = 0.0
        return options

    def credit(self, batch: RolloutBatch) -> Tensor:  # [B, T]
        adv = super().credit(batch)
        clamp = self.config.neg_adv_clamp
        return adv if clamp is None else adv.clamp(min=clamp)

    def loss(self, batch: RolloutBatch, logprobs: Tensor, credit: Tensor) -> LossOutput:
        cfg = self.config
        a, eps = cfg.gamma * cfg.lam, cfg.clip_eps
        log_ratio = (logprobs - batch.old_logprobs) * batch.completion_mask  # [B, T]; 0 on padding
        z = trace_log_ratio(log_ratio, a, cfg.style, cfg.trace_floor, cfg.position_origin)  # [B, T]
        if cfg.clip_target == "traced_ratio":
            loss, clipped = clipped_surrogate(z, credit, eps, eps)
        else:
            bounded = log_ratio.clamp(math.log(1 - eps), math.log(1 + eps))
            obj = torch.exp(z) * credit  # [B, T]
            z_bounded = trace_log_ratio(bounded, a, cfg.style, cfg.trace_floor, cfg.position_origin)  # [B, T]
            obj_bounded = torch.exp(z_bounded) * credit
            loss, clipped = -torch.minimum(obj, obj_bounded), obj_bounded < obj
        return LossOutput(loss, {"clip_frac": clipped.float(), "trace_log_ratio": z.detach()})
