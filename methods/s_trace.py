"""S-trace: "Beyond Uniform Credit Assignment: Selective Eligibility Traces for RLVR" (Mou et al.
2026, arXiv 2605.05965). P-trace (methods/p_trace.py) with a sparse trace "by selectively masking
low-entropy tokens" [V, abstract]; everything else is a reconstruction [R] (methods.md 7.2).

The history runs only over the high-entropy tokens S_i = {k : H_k >= tau_rho}, tau_rho the
(1 - rho)-quantile of the old policy's token entropies (80/20's rule, rho = 0.2):

    log_hist_t = sum_{k<t, k in S_i} lam^d(t,k) l_k,     h_t = exp(clamp(log_hist_t, ...))
    L_t = -min(r_t h_t A_i, clip(r_t, 1-eps_l, 1+eps_h) h_t A_i)        (P-trace's "current_token")

so a low-entropy token's log-ratio enters only its own ratio r_t: it neither re-weights later
tokens nor receives gradient from their losses through the trace. With ``weights="uniform"``
the weights are 1/L_i on the current token and on the tokens of S_i (P-trace's uniform weights
with the others zeroed).

Reconstructions and open choices (all [R]; see also p_trace.py):
1. rho = 0.2 and the batch-wide quantile are 80/20's; the paper's are unknown.
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
from methods.common import Population, check_choice, entropy_top_mask
from methods.p_trace import PTrace, PTraceConfig
from methods.traces import Distance


@dataclass(frozen=True)
class STraceConfig(PTraceConfig):
    rho: float = 0.2
    """Fraction of tokens with the highest entropy that the trace runs over (80/20's 0.2)."""
    population: Population = "batch"
    """Entropy quantile over all valid tokens of the batch ("batch", as 80/20) or per sequence."""
    distance: Distance = "raw"
    """Trace distance d(t, k): "raw" = t - k; "selected" = selected tokens in [k, t)."""
    mask_gradient: bool = False
    """True: the loss is also restricted to the high-entropy tokens, as in 80/20."""

    def __post_init__(self) -> None:
        super().__post_init__()
        check(0 < self.rho <= 1, f"rho must be in (0, 1], got {self.rho}")
        check_choice("population", self.population, Population)
        check_choice("distance", self.distance, Distance)


@METHODS.register("s_trace")
class STrace(PTrace):
    Config = STraceConfig
    needs = frozenset({"entropy"})
    description = "P-trace whose eligibility trace runs only over the top-rho entropy tokens"
    paper = PTrace.paper

    def loss(self, batch: RolloutBatch, logprobs: Tensor, credit: Tensor) -> LossOutput:
        cfg = self.config
        select = entropy_top_mask(batch.entropy, batch.completion_mask, cfg.rho, cfg.population)
        out = self.traced_loss(batch, logprobs, credit, select, cfg.distance)
        if cfg.mask_gradient:
            out.loss = out.loss * select
        out.stats["trace_frac"] = select.float()
        return out
