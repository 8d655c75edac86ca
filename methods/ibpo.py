"""IBPO: "Reducing Credit Assignment Variance via Counterfactual Reasoning Paths" (Ding et al.
2026, arXiv 2605.16302). Only the abstract [V] and a co-author's one-line summary [S] were
readable (research notes, methods.md section 9): everything below the first paragraph is a
reconstruction [R].

The abstract [V]: several trajectories of one input are sampled and their differences treated as
implicit approximations of alternative decisions, an implicit process-level advantage that turns
the sparse terminal reward into step-sensitive signals with lower gradient variance. The summary
[S]: IBPO "compares an incorrect trajectory with a reference, generates a corrected trajectory,
and assigns token-level credit only to the edited tokens".

Credit (the default). A_i is GRPO's group-normalised advantage. For an incorrect y_i with at
least one correct sibling, y+ is its nearest correct sibling and E_i the tokens of y_i that the
alignment with y+ marks as edited (replaced or deleted); then

    A_it = A_i              t in E_i
    A_it = kappa * A_i      otherwise                  (kappa = unchanged_credit, default 0)

and every other trajectory keeps A_i on every token (kappa = 1 is GRPO). The loss is GRPO's
clipped token surrogate (eq. 3 of arXiv 2402.03300) with these A_it.

Repair mode (``repair=True``). For each such y_i, with d the first position where it differs
from y+, the policy continues the splice  y_hat = y_i[:d] + [y+_d]  (the reference's token at
the divergence is the guidance) and the verified y_hat joins the batch. A correct y_hat gets

    A_hat_t = repair_credit * |A_i|   for t >= d,      0 before d;   a wrong y_hat gets 0,

and the group statistics are those of the original rows only.

Reconstructions and open choices [R]:
1. The default uses the correct sibling itself as the corrected trajectory (no extra
   generation). The compare-and-correct operator is unknown; repair mode is one reading of it.
2. Alignment ``diff``: the minimal diff (a longest common subsequence, methods.align) rather
   than difflib's heuristic, which on two 4k-token sequences takes ~80 ms (autojunk=False; ~35
   ms with autojunk=True, which never matches frequent tokens) against ~10 ms for the
   bit-parallel LCS. What y+ inserts has no token in y_i, so a pure insertion edits nothing;
   inside long divergent spans the LCS still matches scattered common tokens (~18% of unrelated
   text over a 100-token vocabulary), which get kappa * A_i. ``prefix_suffix`` marks the whole
   span between the longest common prefix and suffix instead.
3. "Nearest" = the highest 2 * matched / (|y_i| + |y+|) under the chosen alignment (difflib's
   ratio formula), ties to the lowest index.
4. Unchanged tokens get kappa * A_i with kappa = 0 ("zero or a small credit").
5. Whether correct trajectories are sparsified too is unknown: ``sparsify_correct`` (off) aligns
   them with their nearest incorrect sibling.
6. Incorrect rows without a correct sibling keep A_i on every token (0 with binary rewards, where
   such a group is all wrong).
7. Every other setting is GRPO's (clip 0.2, beta 0.04, seq-mean-token-mean, std-normalised A):
   the paper's are unknown, and equal settings make IBPO vs GRPO a comparison of credit alone.
8. Repair mode: the repaired rows are off-policy (the splice token is forced and y_i[:d] came
   from the behaviour policy; their old log-probs are the current policy's, so the ratio starts
   at 1), and they count as sequences in the aggregation. Their credit unit is |A_i| of the
   source (``repair_advantage="source"``): with repair_credit = 1 the divergent decisions of y_i
   and y_hat get credit of equal size and opposite sign (a paired contrast); "group" uses
   y_hat's own reward under the original group statistics (for binary rewards, the advantage of
   the group's correct rows). The source keeps its credit against y+, not against y_hat, whose
   tokens after d are a new sample rather than an edit.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Literal

import torch
from torch import Tensor

from bench.core import RolloutBatch, Sampler, check
from bench.registry import METHODS
from methods.align import Alignment, align_to_nearest, common_prefix_suffix
from methods.common import check_choice, group_mean_std
from methods.grpo import GRPO, GRPOConfig

RepairAdvantage = Literal["source", "group"]


@dataclass(frozen=True)
class IBPOConfig(GRPOConfig):
    alignment: Alignment = "diff"
    """How edited tokens are found: "diff" (minimal token diff, LCS) or "prefix_suffix" (the span
    between the longest common prefix and suffix)."""
    unchanged_credit: float = 0.0
    """kappa: the fraction of A_i on tokens the alignment matches (0: credit on edits only)."""
    sparsify_correct: bool = False
    """Also restrict correct trajectories to their edits against the nearest incorrect sibling
    (unknown in the paper; off keeps GRPO's credit on them)."""
    repair: bool = False
    """Generate a repaired trajectory per incorrect one and train on its edited tokens."""
    repair_credit: float = 1.0
    """Scale of the positive credit on a correct repair's tokens from the divergence on."""
    repair_advantage: RepairAdvantage = "source"
    """That credit's unit: "source" (|A| of the incorrect source) or "group" (the repair's own
    reward under the original rows' group statistics)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        check_choice("alignment", self.alignment, Alignment)
        check(0 <= self.unchanged_credit <= 1, f"unchanged_credit must be in [0, 1], got {self.unchanged_credit}")
        check(self.repair_credit >= 0, f"repair_credit must be >= 0, got {self.repair_credit}")
        check_choice("repair_advantage", self.repair_advantage, RepairAdvantage)


@METHODS.register("ibpo")
class IBPO(GRPO):
    Config = IBPOConfig
    description = "GRPO advantage of a wrong trajectory only on its tokens edited vs the nearest correct sibling"
    paper = (
        "Reducing Credit Assignment Variance via Counterfactual Reasoning Paths (Ding et al. 2026), arXiv 2605.16302"
    )

    def credit(self, batch: RolloutBatch) -> Tensor:  # [B, T]
        cfg, gid = self.config, batch.group_ids
        repaired = batch.extra.get("repair", torch.zeros_like(batch.correct))  # [B] bool
        orig = ~repaired
        mean, std = group_mean_std(batch.rewards[orig], gid[orig])  # statistics of the original rows only
        n = int(gid.max()) + 1
        mean = torch.zeros(n, device=gid.device).index_put((gid[orig],), mean)[gid]  # [B]
        std = torch.zeros(n, device=gid.device).index_put((gid[orig],), std)[gid]

        def advantage(r: Tensor) -> Tensor:  # [B]: GRPO's A of reward r in each row's group
            return (r - mean) / (std + cfg.adv_eps) if cfg.scale_rewards else r - mean

        wrong, right = orig & ~batch.correct, orig & batch.correct
        ids, lengths = batch.completion_ids, batch.lengths
        _, edited = align_to_nearest(ids, lengths, gid, wrong, right, cfg.alignment)  # [B, T]
        if cfg.sparsify_correct:
            edited &= align_to_nearest(ids, lengths, gid, right, wrong, cfg.alignment)[1]
        credit = advantage(batch.rewards.float())[:, None] * torch.where(edited, 1.0, cfg.unchanged_credit)
        if not repaired.any():
            return credit
        unit = (
            advantage(batch.extra["source_reward"]).abs()
            if cfg.repair_advantage == "source"
            else advantage(batch.rewards.float()).clamp(min=0)
        )  # a repair is only ever reinforced
        edits = torch.arange(ids.shape[1], device=ids.device) >= batch.extra["edit_start"][:, None]  # [B, T]
        on_repairs = (cfg.repair_credit * unit * batch.correct)[:, None] * edits  # wrong repairs: 0
        return torch.where(repaired[:, None], on_repairs, credit)

    def augment(self, batch: RolloutBatch, sampler: Sampler) -> RolloutBatch:
        """Repair mode: append the policy's continuation of each incorrect row's splice."""
        if not self.config.repair:
            return batch
        ids, lengths = batch.completion_ids, batch.lengths
        nearest, _ = align_to_nearest(
            ids, lengths, batch.group_ids, ~batch.correct, batch.correct, self.config.alignment
        )
        src = (nearest >= 0).nonzero().flatten()
        ref = nearest[src]
        d, _ = common_prefix_suffix(ids[src], lengths[src], ids[ref], lengths[ref])  # first divergence
        keep = d < lengths[ref]  # the reference has a token there (it is not a prefix of the source)
        src, ref, d = src[keep], ref[keep], d[keep]
        base = _mark(batch, torch.zeros_like(batch.correct), torch.zeros_like(lengths), torch.zeros_like(batch.rewards))
        if len(src) == 0:
            return base
        prefixes = [
            torch.cat([ids[s, :k], ids[r, k : k + 1]])  # y_i[:d] + [y+_d]
            for s, r, k in zip(src.tolist(), ref.tolist(), d.tolist())
        ]
        new = sampler.complete(batch, src, prefixes)
        new = _mark(new, torch.ones_like(new.correct), d, batch.rewards[src])
        return RolloutBatch.concat([base, new])


def _mark(batch: RolloutBatch, repair: Tensor, edit_start: Tensor, source_reward: Tensor) -> RolloutBatch:
    """The batch with IBPO's per-row extras set ([B] each; concat needs them on every part)."""
    extra = {**batch.extra, "repair": repair, "edit_start": edit_start, "source_reward": source_reward.float()}
    return dataclasses.replace(batch, extra=extra)
