"""IBPO: "Reducing Credit Assignment Variance via Counterfactual Reasoning Paths" (Ding et al.
2026, arXiv 2605.16302). Neither the paper's method section nor code could be read: the abstract
[V], a co-author's one-line summary [S] and a formula-level account in a survey [S] are the sources
(research notes: methods.md section 9, seed-findings.md 1.2).

The account [S] (code-index file 71620340165, "Reward mechanics of RL for metacognition - a survey
at formula level", compiled 2026-09-14, entry G4; verbatim, transliterated to ASCII):

    "The counterfactual baseline is NOT leave-one-out, NOT prefix ablation, NOT step resampling.
    It pairs the target trajectory with K-1 sibling references, preferring correct siblings.
    phi_i = 0 if tau_i correct, else s_i in [0,1]; R'_i = R(tau_i) + lambda*phi_i then
    A'_i = (R'_i - mean)/std. Concrete instantiation: Delta(x; y, y_ref) = rho*1[r(x,y)=0 and
    r(x,y^)=1], rho = 0.5, where y^ is the revision produced from x~ = (x; y, y_ref).
    lambda ~ 0.6. Mask variant: m_t = 1[t not in U], U = tokens unchanged under Levenshtein
    alignment."  "Shaping happens before centering, so phi_i varies within the group by
    construction - it is nonzero only on incorrect trajectories."  "K=1 collapses to 78.6 -
    essentially all the gain requires >=2 counterfactual siblings."

The summary [S]: IBPO "compares an incorrect trajectory with a reference, generates a corrected
trajectory, and assigns token-level credit only to the edited tokens".

Mode "shaping" (the default). For every incorrect y_i of a group, up to n = num_references
siblings y_ref (correct ones first) each give a revision y^ sampled by the current policy from
x~ = revision_template(x, y_i, y_ref) (``augment``); then

    Delta_ik = rho * 1[y_i wrong and y^_ik correct]          phi_i = mean_k Delta_ik  (0 if y_i correct)
    R'_i = R_i + lambda * phi_i                              A'_i = (R'_i - mean_g R') / (std_g R' + eps)

A'_i on every token, GRPO's clipped token loss (eq. 3 of arXiv 2402.03300). The revisions are
only verified, never trained on: their tokens count in the token budget, their number apart from
the training samples (``extra_samples``), so a sample budget counts the rollouts that train.
Mode "edit_mask": the same A'_i times m_t = 1[t not in U], U the tokens of y_i that the Levenshtein
alignment with its revision keeps unchanged (methods.align.levenshtein).
Mode "diff_credit": the reconstruction this file implemented before the account was found:
A_i on the tokens of a wrong y_i that the ``alignment`` with its nearest correct sibling y+ edits,
unchanged_credit * A_i on the others (correct rows keep A_i); with ``repair`` the policy also
continues y_i[:d] + [y+_d] (d the first divergence) and a correct continuation gets
repair_credit * |A_i| from d on (``repair_advantage="group"``: its own reward's group advantage;
``repair_span="all"``: on every token, the twin's uniform credit).

Checked against the account: shaping before group normalisation; phi_i = 0 on correct rows;
Delta's indicator and rho = 0.5; lambda = 0.6; references are siblings, correct ones preferred;
y^ generated from (x; y, y_ref) and verified; A' broadcast to tokens (no token weights outside the
mask variant); the mask variant's Levenshtein U. The sibling table ("IBPO | No - sibling rollouts")
agrees: no gold solution enters the revision prompt.

Reconstructions and open choices [R]:
1. Who revises: the policy itself, at the training sampling settings (the account does not say;
   inferred). The revisions are not trained on (the account uses y^ only through Delta and U).
2. ``revision_template``: how x~ = (x; y, y_ref) is rendered is unknown. A format string over the
   rendered prompt, the attempt and the reference (methods see prompt strings, not the task); the
   default continues the prompt with both attempts and asks for a revision, in printable ASCII so
   the character-level tiny models tokenise it. Those models were warm-started on bare prompts and
   revise nothing (arithmetic tiny-2m: 0 of 358 revisions correct at 30% first-attempt accuracy,
   with this and two other renderings), so there shaping is GRPO plus the revisions' samples.
   r(x, y) = 1 is the verifier's verdict (``correct``).
3. ``num_references`` = 1: how many siblings pair with each y_i, one revision each (the account's
   K-1; K = 1 "collapses", so n = 1 is the least it reports a gain with [S]). With n > 1 phi_i
   averages the n Deltas: the account's graded s_i in [0, 1], times rho.
4. ``reference_choice`` = "nearest": which siblings, within "correct first": the most similar under
   ``alignment`` (2 * matched / (|y_i| + |y_ref|), ties to the lowest index), "first" (lowest
   index) or "random".
5. ``incorrect_references`` = "fallback": rows with fewer correct siblings than n take incorrect
   ones next ("preferring", not requiring, correct siblings [S]); "never" leaves them unrevised
   (phi = 0). With "fallback" an all-wrong group gets a nonzero advantage when a revision succeeds.
6. ``mask_on`` = "corrected" (edit_mask): the mask applies where a revision succeeded, with U from
   the first successful one ("generates a corrected trajectory" [S]); "revised" uses the first
   revision whatever its verdict. Masked tokens keep their place in the aggregation's denominator.
7. Every other setting is GRPO's (clip 0.2, beta 0.04, seq-mean-token-mean, the group std of
   GroupStdConfig): the account's baselines are GSPO and GSPO+SCoRe, so the paper's objective
   may be GSPO's [?]; group size, KL and aggregation are unknown.
8. diff_credit: the correct sibling itself stands for the corrected trajectory. ``alignment``
   "diff" is the minimal diff (an LCS, methods.align), not difflib's heuristic (~80 ms against
   ~10 ms on two 4k-token sequences); what y+ inserts has no token in y_i, so a pure insertion
   edits nothing, and inside long divergent spans the LCS still matches scattered tokens
   (~18% of unrelated text over 100 token ids); "prefix_suffix" marks the whole span instead.
9. diff_credit: matched tokens get unchanged_credit * A_i (kappa = 0, "credit only to the edited
   tokens"); ``sparsify_correct`` (off) also aligns correct rows with their nearest incorrect
   sibling; incorrect rows without a correct sibling keep A_i on every token.
10. diff_credit repair: one reading of the compare-and-correct operator (splice at the first
   divergence). The repaired rows are off-policy (a forced token after the behaviour policy's
   prefix; their old log-probs are the current policy's, so the ratio starts at 1) and count as
   sequences in the aggregation; the credit unit is |A_i| of the source
   (``repair_advantage="source"``: a paired contrast of equal size and opposite sign); the
   source keeps its credit against y+.
"""

from __future__ import annotations

import dataclasses
import string
from dataclasses import dataclass
from typing import Any, Literal

import torch
from torch import Tensor

from bench.core import LossOutput, RolloutBatch, Sampler, check
from bench.registry import METHODS
from methods.align import Alignment, align_to_nearest, common_prefix_suffix, levenshtein_kept, sibling_similarity
from methods.common import check_choice, divide_by_std, group_mean_std
from methods.grpo import GRPO, GRPOConfig, normalised_advantage

Mode = Literal["shaping", "edit_mask", "diff_credit"]
ReferenceChoice = Literal["nearest", "first", "random"]
IncorrectReferences = Literal["fallback", "never"]
MaskOn = Literal["corrected", "revised"]
RepairAdvantage = Literal["source", "group"]
RepairSpan = Literal["edited", "all"]
TEMPLATE_FIELDS = ("prompt", "attempt", "reference")
# batch.extra keys, [B] float / [B, T] bool
REVISIONS, REVISIONS_CORRECT, EDIT_MASK = "revisions", "revisions_correct", "edit_mask"


@dataclass(frozen=True)
class IBPOConfig(GRPOConfig):
    mode: Mode = "shaping"
    """"shaping": R' = R + lambda phi before group normalisation (the account); "edit_mask": that
    advantage only on the tokens a revision edits; "diff_credit": the earlier reconstruction."""
    shaping_coef: float = 0.6
    """lambda of R' = R + lambda * phi (account: ~0.6)."""
    rho: float = 0.5
    """rho of Delta = rho * 1[y wrong and revision correct] (account: 0.5)."""
    num_references: int = 1
    """Siblings paired with each incorrect trajectory, one revision each; phi averages their Deltas."""
    reference_choice: ReferenceChoice = "nearest"
    """Order of siblings within "correct first": "nearest" (most similar under ``alignment``),
    "first" (lowest index) or "random"."""
    incorrect_references: IncorrectReferences = "fallback"
    """"fallback": incorrect siblings serve after the correct ones; "never": only correct ones."""
    revision_template: str = "{prompt}{attempt}\n\nAnother attempt:\n{reference}\n\nRevised attempt:\n"
    """The revision prompt x~, a format string over {prompt} (the rendered prompt), {attempt} (y_i)
    and {reference} (y_ref); literal braces doubled."""
    mask_on: MaskOn = "corrected"
    """edit_mask: mask the rows whose revision succeeded ("corrected") or every revised row."""
    alignment: Alignment = "diff"
    """Similarity for reference_choice="nearest", and diff_credit's edited tokens: "diff" (LCS) or
    "prefix_suffix" (the span between the longest common prefix and suffix)."""
    unchanged_credit: float = 0.0
    """diff_credit: kappa, the fraction of A_i on tokens the alignment matches."""
    sparsify_correct: bool = False
    """diff_credit: also restrict correct trajectories to their edits against the nearest incorrect one."""
    repair: bool = False
    """diff_credit: generate a repaired trajectory per incorrect one and train on its edited tokens."""
    repair_credit: float = 1.0
    """diff_credit repair: scale of the credit on a correct repair's tokens from the divergence on."""
    repair_advantage: RepairAdvantage = "source"
    """diff_credit repair: that credit's unit, "source" (|A| of the incorrect source) or "group"
    (the repair's own reward under the original rows' group statistics)."""
    repair_span: RepairSpan = "edited"
    """diff_credit repair: the tokens of a repair that get its credit, from the divergence on
    ("edited") or every one ("all", the twin's uniform credit)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        check_choice("mode", self.mode, Mode)
        check_choice("reference_choice", self.reference_choice, ReferenceChoice)
        check_choice("incorrect_references", self.incorrect_references, IncorrectReferences)
        check_choice("mask_on", self.mask_on, MaskOn)
        check_choice("alignment", self.alignment, Alignment)
        check_choice("repair_advantage", self.repair_advantage, RepairAdvantage)
        check_choice("repair_span", self.repair_span, RepairSpan)
        check(self.shaping_coef >= 0, f"shaping_coef must be >= 0, got {self.shaping_coef}")
        check(0 <= self.rho <= 1, f"rho must be in [0, 1], got {self.rho}")
        check(self.num_references >= 1, f"num_references must be >= 1, got {self.num_references}")
        check(0 <= self.unchanged_credit <= 1, f"unchanged_credit must be in [0, 1], got {self.unchanged_credit}")
        check(self.repair_credit >= 0, f"repair_credit must be >= 0, got {self.repair_credit}")
        check(not self.repair or self.mode == "diff_credit", "repair is a diff_credit option; set mode: diff_credit")
        try:
            fields = {f for _, f, _, _ in string.Formatter().parse(self.revision_template) if f is not None}
        except ValueError as e:
            fields = {f"malformed: {e}"}
        check(
            fields == set(TEMPLATE_FIELDS),
            "revision_template must use each of {prompt}, {attempt} and {reference} and no other field "
            f"(double literal braces), got {sorted(fields)}",
        )


@METHODS.register("ibpo")
class IBPO(GRPO):
    Config = IBPOConfig
    description = "GRPO on R + lambda*rho for each wrong trajectory the policy revises correctly against a sibling"
    paper = (
        "Reducing Credit Assignment Variance via Counterfactual Reasoning Paths (Ding et al. 2026), arXiv 2605.16302"
    )

    def twin(self) -> dict[str, Any]:
        """Uniform credit on the same rollouts, revisions and repairs: GRPO, no shaping ("shaping");
        the shaped advantage on every token, the edit mask off ("edit_mask"); A_i on every token of
        the original rows ("diff_credit"), and with ``repair`` the repaired rows kept (the same
        training rows) with each one's repair credit on every token, not from the divergence on."""
        if self.config.mode == "shaping":
            return {"shaping_coef": 0.0}
        if self.config.mode == "edit_mask":
            return {"mode": "shaping"}
        options: dict[str, Any] = {"unchanged_credit": 1.0, "sparsify_correct": False}
        if self.config.repair:
            options["repair_span"] = "all"
        return options

    def credit(self, batch: RolloutBatch) -> Tensor:  # [B, T]
        cfg = self.config
        if cfg.mode == "diff_credit":
            return self._diff_credit(batch)
        phi = torch.zeros_like(batch.rewards, dtype=torch.float)  # a batch augment never saw: GRPO
        if REVISIONS in batch.extra:  # phi_i = mean_k rho * 1[y_i wrong and y^_ik correct]
            made, fixed = batch.extra[REVISIONS], batch.extra[REVISIONS_CORRECT]
            phi = torch.where(batch.correct, 0.0, cfg.rho * fixed / made.clamp(min=1))
        shaped = batch.rewards.float() + cfg.shaping_coef * phi  # R'_i = R_i + lambda phi_i
        adv = normalised_advantage(cfg, shaped, batch.group_ids, cfg.scale_rewards)  # A'_i [B]
        credit = adv[:, None].expand_as(batch.completion_mask).float()
        if cfg.mode == "edit_mask" and EDIT_MASK in batch.extra:
            credit = credit * batch.extra[EDIT_MASK]  # m_t = 1[t not in U]
        return credit

    def loss(self, batch: RolloutBatch, logprobs: Tensor, credit: Tensor) -> LossOutput:
        out = super().loss(batch, logprobs, credit)
        made = batch.extra.get(REVISIONS)
        if made is not None and made.sum() > 0:  # the share of revisions the verifier accepts
            out.scalars["revision_success"] = batch.extra[REVISIONS_CORRECT].sum() / made.sum()
        return out

    @property
    def adds_training_rows(self) -> bool:
        return self.config.mode == "diff_credit" and self.config.repair

    def augment(self, batch: RolloutBatch, sampler: Sampler) -> RolloutBatch:
        """shaping / edit_mask: revise the incorrect rows against their references and store the
        verdicts per row; diff_credit with repair: append the repaired rows."""
        cfg = self.config
        if cfg.mode == "diff_credit":
            return self._repair(batch, sampler) if cfg.repair else batch
        src, ref = revision_pairs(batch, cfg)
        B, T = batch.completion_ids.shape
        made = torch.zeros(B, device=batch.rewards.device)
        fixed, mask = torch.zeros_like(made), torch.ones(B, T, dtype=torch.bool, device=made.device)
        if len(src):
            check(len(batch.prompts) == len(batch.completions) == len(batch.rows) == B, "revisions need texts and rows")
            prompts = [
                cfg.revision_template.format(
                    prompt=batch.prompts[i], attempt=batch.completions[i], reference=batch.completions[j]
                )
                for i, j in zip(src.tolist(), ref.tolist())
            ]
            rev = sampler.generate(prompts, [batch.rows[i] for i in src.tolist()])
            ok = rev.correct.to(made.device)
            made.index_add_(0, src, torch.ones_like(made[src]))
            fixed.index_add_(0, src, ok.float())
            if cfg.mode == "edit_mask":
                usable = ok if cfg.mask_on == "corrected" else torch.ones_like(ok)
                k = usable.nonzero().flatten()  # pairs are sorted by source, then preference:
                k = k[src[k].diff(prepend=src.new_tensor([-1])) != 0]  # each source's first usable revision
                if len(k):
                    rows = src[k]
                    kept = levenshtein_kept(
                        batch.completion_ids[rows], batch.lengths[rows], rev.completion_ids[k], rev.lengths[k]
                    )
                    mask[rows] = ~kept.to(mask.device)
        extra = {**batch.extra, REVISIONS: made, REVISIONS_CORRECT: fixed}
        if cfg.mode == "edit_mask":
            extra[EDIT_MASK] = mask
        return dataclasses.replace(batch, extra=extra)

    def _diff_credit(self, batch: RolloutBatch) -> Tensor:  # [B, T]
        cfg, gid = self.config, batch.group_ids
        repaired = batch.extra.get("repair", torch.zeros_like(batch.correct))  # [B] bool
        orig = ~repaired
        mean, std = group_mean_std(batch.rewards[orig], gid[orig], cfg.std == "unbiased")  # the original rows only
        n = int(gid.max()) + 1
        mean = torch.zeros(n, device=gid.device).index_put((gid[orig],), mean)[gid]  # [B]
        std = torch.zeros(n, device=gid.device).index_put((gid[orig],), std)[gid]

        def advantage(r: Tensor) -> Tensor:  # [B]: GRPO's A of reward r in each row's group
            return divide_by_std(r - mean, std, cfg.adv_eps, cfg.eps_mode == "floor") if cfg.scale_rewards else r - mean

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
        start = batch.extra["edit_start"] if cfg.repair_span == "edited" else torch.zeros_like(batch.lengths)
        edits = torch.arange(ids.shape[1], device=ids.device) >= start[:, None]  # [B, T]
        on_repairs = (cfg.repair_credit * unit * batch.correct)[:, None] * edits  # wrong repairs: 0
        return torch.where(repaired[:, None], on_repairs, credit)

    def _repair(self, batch: RolloutBatch, sampler: Sampler) -> RolloutBatch:
        """diff_credit repair: append the policy's continuation of each incorrect row's splice."""
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


def revision_pairs(batch: RolloutBatch, cfg: IBPOConfig) -> tuple[Tensor, Tensor]:
    """(source, reference) row pairs, [R] each: every incorrect row with up to ``num_references``
    siblings, correct ones first and ``reference_choice`` order within each kind; sorted by source,
    then preference."""
    B, gid, right = batch.size, batch.group_ids, batch.correct
    dev = gid.device
    sibling = (gid[:, None] == gid[None, :]) & ~right[:, None] & ~torch.eye(B, dtype=torch.bool, device=dev)
    if cfg.incorrect_references == "never":
        sibling &= right[None, :]
    if cfg.reference_choice == "nearest":
        score = sibling_similarity(batch.completion_ids, batch.lengths, gid, ~right, cfg.alignment)  # [B, B] in [0, 1]
    elif cfg.reference_choice == "first":
        score = -torch.arange(B, device=dev).float()[None, :].expand(B, B) / B  # in (-1, 0]
    else:
        score = torch.rand(B, B, device=dev)
    key = (score + 3.0 * right[None, :]).masked_fill(~sibling, -float("inf"))  # correct siblings first
    order = key.argsort(dim=-1, descending=True, stable=True)[:, : cfg.num_references]  # ties: lowest index
    valid = sibling.gather(1, order)  # [B, n]
    return torch.arange(B, device=dev)[:, None].expand_as(order)[valid], order[valid]


def _mark(batch: RolloutBatch, repair: Tensor, edit_start: Tensor, source_reward: Tensor) -> RolloutBatch:
    """The batch with the repair mode's per-row extras set ([B] each; concat needs them on every part)."""
    extra = {**batch.extra, "repair": repair, "edit_start": edit_start, "source_reward": source_reward.float()}
    return dataclasses.replace(batch, extra=extra)
