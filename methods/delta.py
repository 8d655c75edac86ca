"""DelTA: "Discriminative Token Credit Assignment" (Zhang, Wu, Lin 2026, arXiv 2605.21467), as its
official code runs it (RUCBM/DelTA at cf048bd11f72: verl-DelTA/verl/workers/actor/dp_actor.py,
``compute_log_prob_h`` with impl="Normal"; verl-DelTA/recipe/dapo/srcs/run_DelTA.sh).

The policy-gradient update acts as a linear discriminator over token-gradient vectors; DelTA
weights each token by how clearly its gradient direction belongs to its own side (positive or
negative advantage) rather than to directions both sides share. With h_t the LM head's input at
the position predicting y_t (``hidden_states``), p_t = pi_old(y_t) and the group advantage A_i
(A+ = max(A, 0), A- = max(-A, 0)), over the valid tokens of the batch:

    v_t     = (1 - p_t) h_t                                    token-gradient feature
    mu_+-   = sum_t A+-_t v_t / sum_t A+-_t                    advantage-weighted centroids
    d_+-(t) = ||v_t - mu_+-||^2                                squared Euclidean (sum over H)
    m_t     = lam_w d_-(t) - d_+(t)  (A > 0),   lam_w d_+(t) - d_-(t)  (A < 0)      margins
    g_+-    = gamma_time * std(m over the tokens of that side)  (population std, var floored at 1e-8)
    K times:  mu_+- <- sum s A+- v / sum s A+-  with s = sigmoid(m / g);  g <- std of those margins;
              m <- margins at the new centroids     (so the final g is one step behind the centroids)
    w_t     = lam_min + (lam_max - lam_min) sigmoid(m_t / g)  (A != 0),   lam_min  (A = 0)
    w_t    <- w_t * N / sum w                                  mean 1 over the N valid tokens
    A~_it   = A_i w_it                                         on DAPO's clipped token surrogate

Checked against the official code (each matches): v from the lm_head forward pre-hook (the
final-norm output) times 1 - exp(log-prob) of the same no-grad forward at the rollout temperature;
the centroid weights A+- on valid tokens and the 1e-8 floor of their sums; the per-dimension scale
d, which the code computes as the pooled variance + 1e-6 and then overwrites with ones (plain
squared distance); lam_w = 1 and gamma_time = 1 (constants there); separate g for each side from
E[m^2] - E[m]^2 over its valid tokens, floored at 1e-8 before the square root; the refinement
weights sigmoid(m / g) A+- and its g update; lam_min for zero-advantage rows, which count in the
normaliser; the normaliser N / sum w over every valid token; W, b and pred = sign(A)(W.v + b) are
computed but do not reach the loss. The population is each data-parallel rank's share of the
rollout batch, computed once before the mini-batches, with no all-reduce (``population``).
run_DelTA.sh: K = 1, lam_min = 0.8, lam_max = 1.2; the DAPO recipe with clip 0.2/0.28, dual clip
c = 10, token-mean, soft overlong punishment (buffer 4096 of 20480, factor 1), no dynamic sampling
(filter_groups off), no overlong filtering, no KL, GRPO advantage with eps 1e-6 (defaults below).

Deviations:
1. verl clamps the log-ratio to [-20, 20] before exp; not done here (changes the gradient only
   beyond |log-ratio| 20, by less than e^-20 |A|).
2. Features are taken in float32 from the engine's hidden states; the code's forward runs under
   bfloat16 autocast, so its h carries bfloat16 rounding.
3. verl's balance_batch deals rows to ranks by length, so a rank may hold part of a group; a
   process here holds whole groups. ``population="global"`` sums the statistics over processes
   (one set of centroids for the whole rollout batch), which the code never does.
4. h and p come from the engine's scoring pass (in the fused update, the training forward) with
   the policy in training mode, so dropout, where the model has any, is on; the code takes them
   from its own no-grad forward in eval mode. Equal without dropout.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import torch
from torch import Tensor

from bench.core import LossOutput, RolloutBatch, check
from bench.distributed import all_sum
from bench.errors import CreditBenchError
from bench.registry import METHODS
from methods.common import check_choice
from methods.dapo import DAPO, DAPOConfig

Population = Literal["process", "global"]
EPS = 1e-8  # the official floor of every sum and variance


@dataclass(frozen=True)
class DelTAConfig(DAPOConfig):
    dynamic_sampling: bool = False
    """run_DelTA.sh turns DAPO's dynamic sampling off (filter_groups.enable=False)."""
    overlong_filter: bool = False
    """verl's DAPO recipe has no overlong filtering (only the soft punishment)."""
    adv_eps: float = 1e-6
    """Added to the group std before dividing (verl's GRPO advantage: 1e-6)."""
    dual_clip: float | None = 10.0
    """verl's dual clip c (run_DelTA.sh: clip_ratio_c = 10), DAPO's option turned on; None drops it."""
    refine_steps: int = 1
    """K: soft-posterior refinements of the centroids (run_DelTA.sh: 1)."""
    lam_min: float = 0.8
    """Weight of the least discriminative tokens, and of every zero-advantage token (official: 0.8)."""
    lam_max: float = 1.2
    """Weight approached by the most discriminative tokens (official: 1.2)."""
    gamma_time: float = 1.0
    """The sigmoid's temperature in units of the margins' std (official constant: 1)."""
    margin_weight: float = 1.0
    """lam_w in the margin lam_w d_other - d_own (official constant: 1)."""
    population: Population = "process"
    """Tokens the centroids, stds and mean-one normaliser are taken over: each training "process"'s
    rollout batch (official: each data-parallel rank's share, no all-reduce) or the "global" one."""

    def __post_init__(self) -> None:
        super().__post_init__()
        check_choice("population", self.population, Population)
        check(self.refine_steps >= 0, f"refine_steps must be >= 0, got {self.refine_steps}")
        check(
            0 <= self.lam_min <= self.lam_max and self.lam_max > 0,
            f"DelTA needs 0 <= lam_min <= lam_max and lam_max > 0, got lam_min={self.lam_min}, lam_max={self.lam_max}",
        )
        check(self.gamma_time > 0, f"gamma_time must be > 0, got {self.gamma_time}")
        check(self.margin_weight > 0, f"margin_weight must be > 0, got {self.margin_weight}")


@torch.no_grad()
def delta_weights(
    v: Tensor,  # [B, T, H] features (1 - p_t) h_t
    adv: Tensor,  # [B] advantage of each row
    mask: Tensor,  # [B, T]
    cfg: DelTAConfig,
    reduce: Callable[[Tensor], Tensor] = lambda x: x,
) -> Tensor:  # [B, T], mean 1 over the valid tokens (of every process when ``reduce`` sums over them)
    valid = mask.bool()
    v = torch.where(valid[..., None], v.float(), 0.0)
    pos, neg = valid & (adv > 0)[:, None], valid & (adv < 0)[:, None]  # [B, T]
    a_pos = adv.float().clamp(min=0)[:, None] * pos  # [B, T] A+ on the positive side's tokens
    a_neg = (-adv.float()).clamp(min=0)[:, None] * neg

    def centroid(weight: Tensor) -> Tensor:  # [B, T] -> [H]
        return reduce(torch.einsum("bt,bth->h", weight, v)) / reduce(weight.sum()).clamp(min=EPS)

    def margins(mu_pos: Tensor, mu_neg: Tensor) -> tuple[Tensor, Tensor]:  # ([B, T], [B, T])
        d_pos, d_neg = (v - mu_pos).pow(2).sum(-1), (v - mu_neg).pow(2).sum(-1)
        return cfg.margin_weight * d_neg - d_pos, cfg.margin_weight * d_pos - d_neg

    def spread(m: Tensor, side: Tensor) -> Tensor:  # 0-dim: gamma_time * population std over ``side``
        n = reduce(side.sum().float()).clamp(min=1.0)
        mean = reduce((m * side).sum()) / n
        return cfg.gamma_time * (reduce((m * m * side).sum()) / n - mean**2).clamp(min=EPS).sqrt()

    mu_pos, mu_neg = centroid(a_pos), centroid(a_neg)
    m_pos, m_neg = margins(mu_pos, mu_neg)
    g_pos, g_neg = spread(m_pos, pos), spread(m_neg, neg)
    for _ in range(cfg.refine_steps):
        mu_pos = centroid(torch.sigmoid(m_pos / g_pos) * a_pos)
        mu_neg = centroid(torch.sigmoid(m_neg / g_neg) * a_neg)
        g_pos, g_neg = spread(m_pos, pos), spread(m_neg, neg)  # of the margins just used, as the code
        m_pos, m_neg = margins(mu_pos, mu_neg)
    span = cfg.lam_max - cfg.lam_min
    w = torch.full_like(m_pos, cfg.lam_min)  # zero-advantage rows
    w = torch.where(pos, cfg.lam_min + span * torch.sigmoid(m_pos / g_pos), w)
    w = torch.where(neg, cfg.lam_min + span * torch.sigmoid(m_neg / g_neg), w) * valid
    return w * reduce(valid.sum().float()) / reduce(w.sum()).clamp(min=EPS)


@METHODS.register("delta")
class DelTA(DAPO):
    Config = DelTAConfig
    needs = frozenset({"hidden_states"})
    description = "DAPO advantage x mean-one token weights from a two-centroid discriminator on (1-p)h"
    placebo_control = True  # its credit selects or weights tokens: the placebo moves them
    twin_options = {"lam_min": 1.0, "lam_max": 1.0}  # every weight 1: DAPO with this recipe's settings
    paper = "DelTA: Discriminative Token Credit Assignment (Zhang, Wu, Lin 2026), arXiv 2605.21467"

    def credit(self, batch: RolloutBatch) -> Tensor:  # [B, T]
        if batch.hidden_states is None:
            raise CreditBenchError("method 'delta' needs the batch's hidden_states (needs={'hidden_states'})")
        adv = super().credit(batch)  # [B, T], the same value on every token of a row
        v = (1.0 - batch.old_logprobs.detach().float().exp())[..., None] * batch.hidden_states.detach().float()
        reduce = all_sum if self.config.population == "global" else (lambda x: x)
        w = delta_weights(v, adv[:, 0], batch.completion_mask, self.config, reduce)  # [B, T]
        batch.extra["delta_weight"] = w  # carried to the minibatches, for the loss's diagnostics
        return adv * w

    def loss(self, batch: RolloutBatch, logprobs: Tensor, credit: Tensor) -> LossOutput:
        out = super().loss(batch, logprobs, credit)  # DAPO's, with its dual clip on
        w = batch.extra.get("delta_weight")
        if w is not None:
            valid = batch.completion_mask.bool()
            out.scalars["delta_weight_std"] = w[valid].std(correction=0) if valid.any() else w.new_zeros(())
        return out
