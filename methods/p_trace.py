"""P-trace: "Beyond Uniform Credit Assignment: Selective Eligibility Traces for RLVR" (Mou et al.
2026, arXiv 2605.05965). Only the abstract and summaries were readable: everything below the
first sentence is a reconstruction [R] (research notes, methods.md section 7.2).

Per-decision off-policy correction would weight token t by the historical ratio
prod_{k<=t} r_k; PPO/GRPO keep only r_t. P-trace approximates the history with an eligibility
trace of earlier log-ratios l_k = log pi(y_k) - log pi_old(y_k) (the "approximate historical
importance weights" of the summaries) and keeps the trust region on the current token ("partial
trust region preservation"):

    log_hist_t = sum_{k<t} lam^(t-k) l_k,    h_t = exp(clamp(log_hist_t, log(1-c), log(1+c))),    rho_t = r_t h_t
    "current_token":          L_t = -min(rho_t A_i, clip(r_t, 1-eps_l, 1+eps_h) A_i)
    "current_token_weighted": L_t = -min(rho_t A_i, clip(r_t, 1-eps_l, 1+eps_h) h_t A_i)
    "full_traced":            L_t = -min(rho_t A_i, clip(rho_t, 1-eps_l, 1+eps_h) A_i)

with A_i GRPO's group-normalised advantage. "current_token" is methods.md 7.2's pseudocode: the
history multiplies the unclipped term only, so the min is PPO's pessimistic bound with the trust
region on r_t alone -- where the traced ratio would push past clip(r_t) A the clipped term caps
the objective and the history gets no gradient from that token. "current_token_weighted" makes
h_t an importance weight on the whole token surrogate, -h_t min(r_t A, clip(r_t) A), so a token
can gain up to (1+eps_h) h_t A through its history. At a tie of the two terms (on policy, every
l = 0) the unclipped term is taken, as PPO's inside the trust region, so the history gets its
full gradient (torch.minimum would split it in half); the three readings then agree.
With ``weights="uniform"`` every token of the completion (current, past and future) has weight
1/L_i, so log rho_t = mean_k l_k = log s_i, GSPO's sequence ratio, for every t (the current part
is l_t / L_i, the history the rest): with "full_traced" and no history clip this is GSPO exactly,
the paper's claim that GSPO is the uniform-credit case. With lam = 0 and the decay weights,
P-trace is GRPO's token surrogate.

Reconstructions and open choices (all [R]; the paper's values are unknown):
1. The trace form, the reading of "partial trust region" (clip on r_t only; ``clip_target``
   chooses among the three forms above, default methods.md's "current_token") and the bounded
   history h_t in [1-c, 1+c]. With ``hist_clip=None`` and a current-token clip the trust region
   is only partial: h_t is unbounded and can drift far from 1 over a long completion.
2. Gradient flows through h_t into earlier tokens (an eligibility trace) wherever the term that
   holds h_t is taken (with "current_token_weighted" also where r_t itself is clipped);
   ``detach_history`` makes h_t a fixed importance weight instead.
3. lam = 0.95, the middle of the suggested sweep {0.9, 0.95, 0.99, 1.0}; clip 0.2/0.2 (PPO).
4. Aggregation seq-mean-token-mean and no KL term, as GSPO (the uniform special case).
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
from methods.grpo import GRPO, GroupAdvantageConfig
from methods.traces import Distance, history_log_ratio

Weights = Literal["decay", "uniform"]
ClipTarget = Literal["current_token", "current_token_weighted", "full_traced"]


@dataclass(frozen=True)
class PTraceConfig(GroupAdvantageConfig):
    """GRPO's advantage (``scale_rewards``, ``adv_eps``); (clip_low, clip_high) replace ``clip_eps``."""

    aggregation: str = "seq-mean-token-mean"
    """Unknown in the paper; GSPO's (the uniform-credit special case): per sequence, then mean."""
    kl_coef: float = 0.0
    """Unknown in the paper; 0 as GSPO, which the uniform special case must reproduce exactly."""
    lam: float = 0.95
    """Trace decay per token; unknown, the middle of the suggested sweep {0.9, 0.95, 0.99, 1.0}."""
    weights: Weights = "decay"
    """"decay": lam^(t-k) on earlier tokens; "uniform": 1/L_i on every token (GSPO's ratio)."""
    detach_history: bool = False
    """True: h_t is a fixed importance weight; False: gradient flows into earlier tokens."""
    clip_target: ClipTarget = "current_token"
    """Where the clip acts: on the current token's ratio r_t, the history only in the unclipped
    term ("current_token", methods.md 7.2) or in both terms ("current_token_weighted"); or on the
    whole traced ratio rho_t ("full_traced")."""
    hist_clip: float | None = 0.2
    """h_t is clamped to [1-c, 1+c] (0.2, as the token clip); None leaves the history unbounded."""
    clip_low: float = 0.2
    """eps_low of the clip (PPO's 0.2; unknown in the paper)."""
    clip_high: float = 0.2
    """eps_high of the clip (PPO's 0.2; unknown in the paper)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        check(0 <= self.lam <= 1, f"lam must be in [0, 1], got {self.lam}")
        check_choice("weights", self.weights, Weights)
        check_choice("clip_target", self.clip_target, ClipTarget)
        check(
            self.hist_clip is None or 0 < self.hist_clip < 1,
            f"hist_clip must be in (0, 1) or None, got {self.hist_clip}",
        )
        check(0 < self.clip_low < 1 and self.clip_high > 0, "P-trace needs 0 < clip_low < 1 and clip_high > 0")


def trace_parts(
    log_ratio: Tensor,
    mask: Tensor,
    lam: float,
    weights: Weights,
    select: Tensor | None = None,
    distance: Distance = "raw",
) -> tuple[Tensor, Tensor]:
    """(current, history) log-ratio parts, [B, T] each, with log rho_t = current_t + history_t.

    ``log_ratio`` is already zero on padding; ``select`` [B, T] bool restricts the history to a
    token subset S (S-trace), with distances as in ``methods.traces.history_log_ratio``.
    """
    if weights == "decay":
        return log_ratio, history_log_ratio(log_ratio, lam, select, distance)
    length = mask.sum(-1, keepdim=True).clamp(min=1).to(log_ratio.dtype)  # [B, 1]
    traced = log_ratio if select is None else log_ratio * select.to(log_ratio.dtype)  # [B, T]
    others = traced.sum(-1, keepdim=True) - traced  # [B, T]: every traced token but t itself
    return log_ratio / length, others / length


@METHODS.register("p_trace")
class PTrace(GRPO):
    Config = PTraceConfig
    description = "token ratio times a bounded trace of earlier log-ratios, clipped on r_t only"
    twin_options = {"weights": "uniform", "clip_target": "full_traced", "hist_clip": None}
    """Uniform weights, the whole traced ratio clipped: GSPO's sequence ratio with this recipe's clip."""
    paper = (
        "Beyond Uniform Credit Assignment: Selective Eligibility Traces for RLVR (Mou et al. 2026), arXiv 2605.05965"
    )

    def twin(self) -> dict[str, Any]:
        """``twin_options``, and with ``detach_history`` the history attached again: a detached one
        leaves gradient on l_t / L_i alone, GSPO's credit divided by L_i (rows reweighted), not GSPO."""
        options = dict(self.twin_options)
        if self.config.detach_history:
            options["detach_history"] = False
        return options

    def loss(self, batch: RolloutBatch, logprobs: Tensor, credit: Tensor) -> LossOutput:
        return self.traced_loss(batch, logprobs, credit, select=None, distance="raw")

    def traced_loss(
        self, batch: RolloutBatch, logprobs: Tensor, credit: Tensor, select: Tensor | None, distance: Distance
    ) -> LossOutput:
        cfg = self.config
        mask = batch.completion_mask
        log_ratio = (logprobs - batch.old_logprobs) * mask  # [B, T]; padding adds nothing
        current, history = trace_parts(log_ratio, mask, cfg.lam, cfg.weights, select, distance)
        stats = {}
        if cfg.hist_clip is not None:
            lo, hi = math.log(1 - cfg.hist_clip), math.log(1 + cfg.hist_clip)
            stats["hist_clip_frac"] = ((history < lo) | (history > hi)).float()
            history = history.clamp(lo, hi)
        if cfg.detach_history:
            history = history.detach()
        if cfg.clip_target == "current_token":
            ratio, hist = current.exp(), history.exp()  # [B, T]: r_t, h_t
            unclipped = ratio * hist * credit  # rho_t A
            bounded = ratio.clamp(1 - cfg.clip_low, 1 + cfg.clip_high) * credit  # clip(r_t) A
            clipped = bounded < unclipped  # a tie takes the unclipped term (full gradient to the history)
            loss = -torch.where(clipped, bounded, unclipped)
        elif cfg.clip_target == "current_token_weighted":  # h_t > 0 scales A without changing its sign
            weighted = credit * history.exp()  # [B, T]
            loss, clipped = clipped_surrogate(current, weighted, cfg.clip_low, cfg.clip_high)
        else:
            traced = current + history  # [B, T]: log rho_t
            loss, clipped = clipped_surrogate(traced, credit, cfg.clip_low, cfg.clip_high)
        return LossOutput(loss, {"clip_frac": clipped.float(), **stats})
