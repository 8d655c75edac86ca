"""GCPO: "Guidance Contrastive Token Credit Assignment for Discrete Policy Optimization" (Li,
Kallidromitis, Gokul et al. 2026, arXiv 2605.29198), as its official code runs it
(jacklishufan/gcpo at e0f183d: verl/workers/actor/dp_actor.py::compute_importance_weights,
verl/utils/dataset.py::create_negative_prompt, examples/gcpo_7b.sh, examples/configs/config_vlm.yaml).

Each completion is scored a second time with the prompt turned against the task (a *negative*
prompt: "Note: Intentionally generate an incorrect answer." at the end of the user's turn). The
tokens whose probability the guidance moves most carry the outcome's credit:

    delta_t = clip(log pi(y_t | x-, y_<t) - log pi(y_t | x, y_<t), -20, 20)
    D_t     = clip(e^delta_t - delta_t - 1, -10, 10)            (k3 estimate of KL(pi(.|x) || pi(.|x-)))
    alpha   = log(1 - y) / log(1 - x) - 1                      (x = 0.4, y = 0.8: alpha = 2.1507)
    w_t     = N_i (r_t / N_i)^alpha / sum_k (r_k / N_i)^alpha  ("hist": r_t = rank of D_t, 1..N_i)
    A_it    = A_i w_t

Ranks are taken within each completion over its N_i valid tokens (lowest D rank 1), so the weights
of a completion sum to N_i: with a density ~ r^alpha the top x = 40% of tokens by divergence get
y = 80% of the credit. A_i is the group advantage (R - mean) / (std + 1e-6) of the 0/1 accuracy;
the update is DAPO's without its overlong shaping: clip 0.2/0.28, token-mean, only groups with
0 < #correct < G, no KL.

Checked against the official code (each matches): the k3 form and both clamps; x, y and alpha
(hard-coded there); ranks within each sequence over its valid tokens, percentiles r / N, the
power, the renormalisation to sum N per sequence and weight 0 on padding; the weights computed
without gradient and multiplied into the token advantage; both log-probs at the sampling
temperature; the note's text and place (the user's turn, before the assistant header); the base
recipe of the GCPO scripts (adv_estimator grpo with torch.std and eps 1e-6, clip_ratio 0.2/0.28,
loss_avg_mode token, online_filtering on accuracy in (0.01, 0.99), disable_kl: true so the
configured k3 KL loss never runs, 0/1 accuracy reward without a format term).

Deviations:
1. Both log-probs come from the behaviour policy, once per rollout batch (``augment`` stores the
   negative ones, ``credit`` weighs); the official code recomputes both with the current policy in
   every micro-batch of the update (the scripts take 3 minibatch steps per rollout batch). Equal
   for the single on-policy update.
2. The negative prompt is the rendered prompt with ``negative_suffix`` inserted before the last
   occurrence of the first ``insert_before`` marker it contains (the chat template's end of the
   user turn; in the tiny models' compact template before "; \\boxed{}:", so the completion's
   context is unchanged), else appended. The official dataset renders the problem through the negative template and then
   through the format template again, so its user turn repeats the format instruction after the
   note; the text-to-image code uses the unconditional prompt instead.
3. Equal divergences rank in token order (a stable sort); the official argsort leaves their order
   unspecified.
4. ``entropy_penalty`` (default 0): the scripts add c * mean(-log pi(y_t)) to the loss, c = 0.02
   (Qwen2.5-VL-7B) and 0.16 (Qwen3-VL-8B). It is a recipe term outside the credit and gives
   equal-reward groups a gradient, so it is off by default.
5. Dynamic sampling stops after ``max_gen_batches`` rollout batches (official: no limit). EasyR1's
   dual clip (``clip_ratio_dual`` = 3: the ratio counts at most 3 for A < 0) is on, as the official
   code (``dual_clip``; None leaves it out).
6. ``normalization="none"`` uses w_t = D_t itself, the text-to-image code's fallback; the
   configured default there ("softmax", temperature 0.1) is not implemented by either path.
7. The paper trains vision-language models on math (Qwen2.5-VL-7B, Qwen3-VL-8B) and an
   autoregressive text-to-image model (Janus-Pro); here text LMs. The 8B script names negative
   and format templates that the repository does not contain; the 7B one's are used above.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Literal

import torch
from torch import Tensor

from bench.core import LossOutput, RolloutBatch, Sampler, check
from bench.errors import CreditBenchError
from bench.numerics import k3_kl
from bench.registry import METHODS
from methods.common import check_choice
from methods.dapo import DAPO, DAPOConfig

Normalization = Literal["hist", "none"]
NEGATIVE = "negative_logprobs"  # batch.extra key: [B, T] log pi(y_t | negative prompt, y_<t)
END_OF_USER_TURN = (
    "<|im_end|>\n<|im_start|>assistant",  # ChatML (Qwen)
    "<|eot_id|><|start_header_id|>assistant",  # Llama 3
    "<end_of_turn>\n<start_of_turn>model",  # Gemma
    "; \\boxed{}:",  # the tasks' compact template (tiny character-level models)
)


@dataclass(frozen=True)
class GCPOConfig(DAPOConfig):
    signed_reward: bool = False
    """The task's 0/1 reward (official: accuracy), not DAPO's +-1."""
    overlong_filter: bool = False
    """Off: the official recipe keeps truncated samples."""
    dual_clip: float | None = 3.0
    """EasyR1's dual clip (ActorConfig.clip_ratio_dual: 3.0, never overridden in the scripts)."""
    soft_overlong: bool = False
    """Off: the official recipe has no overlong punishment."""
    adv_eps: float = 1e-6
    """Added to the group std before dividing (EasyR1: 1e-6)."""
    negative_suffix: str = "\n\nNote: Intentionally generate an incorrect answer."
    """Inserted at the end of the user's turn to make the negative prompt (official template)."""
    insert_before: tuple[str, ...] = END_OF_USER_TURN
    """End-of-user-turn markers, tried in order: the suffix goes before the last occurrence of the
    first one found in the rendered prompt, else at its end (default: ChatML, Llama 3, Gemma, compact)."""
    normalization: Normalization = "hist"
    """Divergence to weight: "hist" power-law rank transform (official) or "none" (w = D)."""
    top_fraction: float = 0.4
    """x of "hist": the fraction of tokens, highest divergence first, that gets ``target_mass`` (official: 0.4)."""
    target_mass: float = 0.8
    """y of "hist": the share of a completion's credit its top ``top_fraction`` of tokens get (official: 0.8)."""
    entropy_penalty: float = 0.0
    """c of the official scripts' c * mean(-log pi) loss term (7B: 0.02, 8B: 0.16); 0 = off."""

    def __post_init__(self) -> None:
        super().__post_init__()
        object.__setattr__(self, "insert_before", tuple(self.insert_before))  # YAML gives a list
        check_choice("normalization", self.normalization, Normalization)
        check(self.negative_suffix.strip() != "", "negative_suffix must be non-empty text")
        check(
            0 < self.top_fraction <= self.target_mass < 1,
            f"need 0 < top_fraction <= target_mass < 1, got top_fraction={self.top_fraction}, "
            f"target_mass={self.target_mass} (equal values give uniform weights)",
        )
        check(self.entropy_penalty >= 0, f"entropy_penalty must be >= 0, got {self.entropy_penalty}")

    @property
    def alpha(self) -> float:
        """Exponent of the rank transform: the top x of tokens holds y of the mass."""
        return math.log(1 - self.target_mass) / math.log(1 - self.top_fraction) - 1


def negative_prompt(prompt: str, suffix: str, markers: tuple[str, ...] | list[str]) -> str:
    """``prompt`` with ``suffix`` before the last occurrence of the first marker it contains, else at the end."""
    for marker in markers:
        at = prompt.rfind(marker)
        if at >= 0:
            return prompt[:at] + suffix + prompt[at:]
    return prompt + suffix


def guidance_divergence(logprobs: Tensor, negative_logprobs: Tensor) -> Tensor:  # [B, T]
    """D_t = clip(k3(delta_t), max 10), delta_t = clip(log pi(y_t | x-) - log pi(y_t | x), +-20).

    D >= 0, so the official lower clamp at -10 never acts."""
    delta = (negative_logprobs - logprobs).float().clamp(-20.0, 20.0)
    return k3_kl(torch.zeros_like(delta), delta).clamp(max=10.0)


def rank_weights(divergence: Tensor, mask: Tensor, alpha: float) -> Tensor:  # [B, T]
    """The "hist" transform: (rank / N)^alpha within each row's N valid tokens, rescaled to sum to N,
    0 on padding. Ranks run from 1 (lowest divergence) to N; equal values rank in token order."""
    valid = mask.bool()
    n = valid.sum(-1, keepdim=True)  # [B, 1]
    order = divergence.float().masked_fill(~valid, float("inf")).argsort(dim=-1, stable=True)  # padding last
    positions = torch.arange(1, divergence.shape[-1] + 1, device=divergence.device).expand_as(order)
    ranks = torch.empty_like(order).scatter_(-1, order, positions)  # 1..N on valid tokens
    w = (ranks / n.clamp(min=1)).pow(alpha) * valid
    return w / w.sum(-1, keepdim=True).clamp(min=1.0) * n  # the sum is >= 1 when N >= 1 (top token: 1)


@METHODS.register("gcpo")
class GCPO(DAPO):
    Config = GCPOConfig
    description = "DAPO with A_i scaled per token by the rank of its divergence under a 'wrong answer' prompt"
    placebo_control = True  # its credit selects or weights tokens: the placebo moves them
    twin_options = {"normalization": "hist", "top_fraction": 0.5, "target_mass": 0.5}  # alpha 0: every weight 1
    paper = (
        "Guidance Contrastive Token Credit Assignment for Discrete Policy Optimization "
        "(Li, Kallidromitis, Gokul et al. 2026), arXiv 2605.29198"
    )

    update_pace = 1.31  # its negative-prompt forward: results/benchmarks/methods_update.md, against GRPO

    def augment(self, batch: RolloutBatch, sampler: Sampler) -> RolloutBatch:
        """Score every completion under its negative prompt (one no-grad forward, no generation)."""
        cfg = self.config
        if len(batch.prompts) != batch.size:
            raise CreditBenchError(f"gcpo needs the prompt text of every row; got {len(batch.prompts)} of {batch.size}")
        prompts = [negative_prompt(p, cfg.negative_suffix, cfg.insert_before) for p in batch.prompts]
        negative = sampler.logprobs(batch, prompts).float()  # [B, T]
        return dataclasses.replace(batch, extra={**batch.extra, NEGATIVE: negative})

    def weights(self, batch: RolloutBatch) -> Tensor:  # [B, T], detached
        if NEGATIVE not in batch.extra:
            raise CreditBenchError(
                f"gcpo weighs tokens with batch.extra[{NEGATIVE!r}], which its augment() stores; "
                "it is missing (was the batch built without calling method.augment?)"
            )
        mask = batch.completion_mask
        div = guidance_divergence(batch.old_logprobs.detach(), batch.extra[NEGATIVE]) * mask
        if self.config.normalization == "none":
            return div
        return rank_weights(div, mask, self.config.alpha)

    def credit(self, batch: RolloutBatch) -> Tensor:  # [B, T]
        return super().credit(batch) * self.weights(batch)

    def loss(self, batch: RolloutBatch, logprobs: Tensor, credit: Tensor) -> LossOutput:
        out = super().loss(batch, logprobs, credit)
        if self.config.entropy_penalty > 0:  # + c * (-log pi(y_t)), aggregated with the loss (official: token mean)
            out.loss = out.loss - self.config.entropy_penalty * logprobs
        if NEGATIVE in batch.extra:
            out.stats["guidance_divergence"] = guidance_divergence(batch.old_logprobs, batch.extra[NEGATIVE])
        return out
