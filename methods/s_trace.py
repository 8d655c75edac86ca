"""S-trace: "Beyond Uniform Credit Assignment: Selective Eligibility Traces for RLVR" (Mou et al.
2026, arXiv 2605.05965). P-trace (methods/p_trace.py) with a sparse trace "by selectively masking
low-entropy tokens" [V, abstract]; everything else is a reconstruction [R] (methods.md 7.2).

The history runs only over the high-entropy tokens S_i = {k : H_k >= tau_rho}, tau_rho the
(1 - rho)-quantile of the old policy's token entropies over the rollout batch (80/20's rule,
rho = 0.2), chosen once per rollout batch in ``credit()``:

    log_hist_t = sum_{k<t, k in S_i} lam^d(t,k) l_k,     h_t = exp(clamp(log_hist_t, ...))
    L_t = -min(r_t h_t A_i, clip(r_t, 1-eps_l, 1+eps_h) A_i)        (P-trace's "current_token")

so a low-entropy token's log-ratio enters only its own ratio r_t: it neither re-weights later
tokens nor receives gradient from their losses through the trace. With ``weights="uniform"``
the weights are 1/L_i on the current token and on the tokens of S_i (P-trace's uniform weights
with the others zeroed).

Reconstructions and open choices (all [R]; see also p_trace.py):
1. rho = 0.2 and the (1 - rho)-quantile over the valid tokens of the rollout batch are TRL's
   reading of 80/20 (``population="batch"``); the paper's are unknown. The selection is made
   once per rollout batch, so with several PPO minibatches it does not depend on the split.
   ``population="minibatch"`` takes it over each minibatch in ``loss()`` instead (what 80/20's
   official code does per micro-batch), "sequence" per completion; ``selection="top_k"`` keeps
   the ceil(rho N) highest entropies, as 80/20's official code.
2. d(t, k) is the raw distance t - k by default; ``distance="selected"`` counts the selected
   tokens in [k, t), so the trace decays per decision point rather than per token.
3. The loss stays on every token (``mask_gradient=False``); True also restricts the
   policy-gradient term to the high-entropy tokens, as 80/20 does (the per-token loss is zeroed
   on the others but they still count in the aggregation's denominator, as in TRL).
"""

from __future__ import annotations

from dataclasses import dataclass

from torch import Tensor

from bench.core import LossOutput, RolloutBatch, check
from bench.registry import METHODS
from methods.common import Population, Selection, check_choice, entropy_top_mask, stored_selection
from methods.p_trace import PTrace, PTraceConfig
from methods.traces import Distance

SELECTED = "s_trace_selected"  # batch.extra key: the rollout batch's selection S, [B, T]


@dataclass(frozen=True)
class STraceConfig(PTraceConfig):
    rho: float = 0.2
    """Fraction of tokens with the highest entropy that the trace runs over (80/20's 0.2)."""
    population: Population = "batch"
    """Tokens the entropy threshold is taken over: the rollout "batch" (once per step, as TRL's
    80/20), each PPO "minibatch" (in loss()) or each "sequence"."""
    selection: Selection = "quantile"
    """Threshold: the (1 - rho)-"quantile" (TRL) or the ceil(rho N)-th largest entropy ("top_k")."""
    distance: Distance = "raw"
    """Trace distance d(t, k): "raw" = t - k; "selected" = selected tokens in [k, t)."""
    mask_gradient: bool = False
    """True: the loss is also restricted to the high-entropy tokens, as in 80/20."""

    def __post_init__(self) -> None:
        super().__post_init__()
        check(0 < self.rho <= 1, f"rho must be in (0, 1], got {self.rho}")
        check_choice("population", self.population, Population)
        check_choice("selection", self.selection, Selection)
        check_choice("distance", self.distance, Distance)


@METHODS.register("s_trace")
class STrace(PTrace):
    Config = STraceConfig
    needs = frozenset({"entropy"})
    placebo_control = True  # its credit selects or weights tokens: the placebo moves them
    twin_options = {"rho": 1.0, "weights": "uniform", "clip_target": "full_traced", "hist_clip": None}
    """Every token traced with uniform weights, the whole traced ratio clipped: GSPO's sequence ratio
    (the paper's uniform-credit special case) with this recipe's clip."""
    description = "P-trace whose eligibility trace runs only over the top-rho entropy tokens"
    paper = PTrace.paper

    def trace_tokens(self, batch: RolloutBatch) -> Tensor:  # [B, T] bool
        """S: the valid tokens whose entropy is in the top rho of the config's population."""
        cfg = self.config
        return entropy_top_mask(batch.entropy, batch.completion_mask, cfg.rho, cfg.population, cfg.selection)

    def credit(self, batch: RolloutBatch) -> Tensor:  # [B, T]
        if self.config.population != "minibatch":  # the rollout batch's selection, carried to its minibatches
            batch.extra[SELECTED] = self.trace_tokens(batch).to(batch.completion_mask.dtype)
        return super().credit(batch)

    def loss(self, batch: RolloutBatch, logprobs: Tensor, credit: Tensor) -> LossOutput:
        cfg = self.config
        select = self.trace_tokens(batch) if cfg.population == "minibatch" else stored_selection(batch, SELECTED)
        out = self.traced_loss(batch, logprobs, credit, select, cfg.distance)
        if cfg.mask_gradient:
            out.loss = out.loss * select
        out.stats["trace_frac"] = select.float()
        return out
