"""ARCA: "Adapter-Residual Credit Assignment When Token Signals Degenerate" (Lafuente-Mercado 2026,
arXiv 2606.00257), as its official code runs it (rodlaf/tokenweighting at d34239a:
experiment/hf/token_weights.py, run_experiment.py, configs/base/qwen3-1.7b-base-math-deadline.yaml).

Under LoRA, per-token signals of the output distribution degenerate into spuriously sparse weights.
ARCA's salience is what the adapter changes in the last hidden state (paper section 3.5 [V]):

    alpha_t = || h_t(adapter on) - h_t(adapter off) ||_2           (hidden_states[-1], float32)
    w_t     = (alpha_t + eps)^p / sum_k (alpha_k + eps)^p          (per completion, detached; eps 1e-8,
                                                                    p = sharpening = 2.0 in the paper's runs)
    L       = -1/B sum_i A_i sum_t w_t log pi(y_t)                 (plain REINFORCE: no ratio, no clip, no KL)

with A_i = (R_i - mean) / max(std_unbiased, 1e-8) over the group, and uniform weights where
sum (alpha + eps)^p <= eps. The paper's baselines are the same estimator with other saliences
(``signal``), sharpened alike: uniform (1/L), surprisal -log pi(y_t), entropy reduction
max(0, H_t - H_{t+1}) (0 for the last token) and policy divergence |log pi(y_t) - log pi_ref(y_t)|
(pi_ref: the adapter disabled). The weights' Gini and EffN/T = 1 / (L sum_t w_t^2) are logged as
train/weight_gini and train/weight_effective_n_ratio, averaged over completions as the code does.

Checked against the official code (each matches): the normalisation above, including the +eps
before sharpening, the clamp of negative scores to 0, the uniform fallback and the detach; the
adapted hidden states from their own no-grad forward and the base ones under disable_adapter(),
the difference taken in float32 at the position predicting token t; surprisal from the current
(= behaviour) log-probs, detached; entropy reduction against the next position; divergence
against the adapter-off log-probs; the loss's sum over tokens and mean over every completion of
the optimizer step; the GRPO advantage with torch's unbiased std floored at 1e-8; the setting
(results/papers/arca.sweep.yaml: LoRA r/alpha 2r/dropout 0.05 on attention and MLP, AdamW lr 5e-6,
weight decay 0, clip 1.0, 10-step warm-up then cosine, K = 4, 8 prompts per step, 100 steps).

Remaining differences from the official code (all outside this file's options):
1. The completion mask: the code drops the first eos and what follows when pad = eos (Qwen3-Base);
   here the first eos is a completion token (it is trained on, and the last token's entropy
   reduction is the eos's, 0, rather than the token before it).
2. Entropy and surprisal come from logits at the sampling temperature; the code uses raw logits.
   Equal at the paper's T = 1.0.
3. Prompts: the code draws each with replacement; here an epoch-wise shuffled order per seed.
4. Warm-up: transformers' cosine schedule starts at lr 0 (factor s / 10); here (s + 1) / 10.
5. The grader: math-verify, not the code's own; the data: the math task's MATH files (the
   same train/test split as the code's DigitalLearningGmbH/MATH-lighteval, possibly another order).

Reconstructions kept as options, from before the paper and code could be read:
6. ``scale="mean_one"``: w_t * L (mean-one weights), which with seq-mean-token-mean is the same update.
7. ``normalise="softmax"``: w = softmax(score / temperature) over the completion.
8. ``entropy_signal="ref_minus_policy"``: H(pi_ref) - H(pi_old) per position.
9. ``divergence_signal="full_kl"``: KL(pi_old || pi_ref) over the vocabulary.
10. ``objective="clipped"``: GRPO's clipped token surrogate on A_i w_t (with ``kl_coef``'s k3 KL).
11. ``adapted_pass="training"``: the adapter-on states of the training forward (equal without dropout).
12. ``hidden="pre_norm"``: the residual stream entering the final norm.
13. ``negative="abs"`` (|score|, not clamped) and ``all_zero="zero"`` (no credit, not uniform).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch
from torch import Tensor

from bench.core import LossOutput, RolloutBatch, check
from bench.errors import CreditBenchError
from bench.numerics import effective_token_ratio, gini
from bench.registry import METHODS
from methods.common import check_choice
from methods.grpo import GRPO, EpsMode, GRPOConfig

Signal = Literal["residual", "uniform", "surprisal", "entropy_reduction", "policy_divergence"]
Scale = Literal["sum_one", "mean_one"]
Normalise = Literal["sum", "softmax"]
Objective = Literal["reinforce", "clipped"]
EntropySignal = Literal["temporal_drop", "ref_minus_policy"]
DivergenceSignal = Literal["sampled_token", "full_kl"]
AdaptedPass = Literal["separate", "training"]
Hidden = Literal["post_norm", "pre_norm"]
Negative = Literal["clamp", "abs"]
AllZero = Literal["uniform", "zero"]
WEIGHTS = "arca_weights"  # batch.extra key: the [B, T] weights credit() computed


@dataclass(frozen=True)
class ARCAConfig(GRPOConfig):
    aggregation: str = "seq-mean-token-sum"
    """-1/B sum_i A_i sum_t w_t log pi_t: the official loss's sum over tokens, mean over completions."""
    kl_coef: float = 0.0
    """The official runs have no KL term."""
    adv_eps: float = 1e-8
    """The official floor of the group std."""
    eps_mode: EpsMode = "floor"
    """(R - mean) / max(std, adv_eps), as the official code's clamp_min."""
    signal: Signal = "residual"
    """Token salience: residual (ARCA), or the paper's baselines uniform, surprisal, entropy_reduction,
    policy_divergence."""
    sharpening: float = 2.0
    """p: salience raised to this power before normalising (the paper's runs: 2.0; not for uniform)."""
    weight_eps: float = 1e-8
    """eps added to every salience, and the sum at or below which a completion gets uniform weights."""
    scale: Scale = "sum_one"
    """sum_one (the paper: sum_t w_t = 1) or mean_one (w * L; the earlier reconstruction)."""
    normalise: Normalise = "sum"
    """sum (score / sum of scores, official) or softmax (softmax(score / temperature))."""
    temperature: float = 1.0
    """tau of the softmax normalisation (unused by sum)."""
    objective: Objective = "reinforce"
    """reinforce (official: -A w log pi, no ratio or clip) or clipped (GRPO's clipped surrogate)."""
    entropy_signal: EntropySignal = "temporal_drop"
    """entropy_reduction as max(0, H_t - H_{t+1}) (paper) or H(pi_ref) - H(pi_old) per position."""
    divergence_signal: DivergenceSignal = "sampled_token"
    """policy_divergence as |log pi - log pi_ref| of the sampled token (paper) or the full-vocabulary KL."""
    adapted_pass: AdaptedPass = "separate"
    """Adapter-on hidden states from their own no-grad forward (official) or the training forward."""
    hidden: Hidden = "post_norm"
    """Hidden state compared: post_norm (hidden_states[-1], what the LM head reads) or pre_norm."""
    negative: Negative = "clamp"
    """Negative saliences (only the ref_minus_policy signal has them): clamped to 0 (official) or abs."""
    all_zero: AllZero = "uniform"
    """A completion whose scores sum to <= weight_eps: uniform weights (official) or no credit."""

    def __post_init__(self) -> None:
        super().__post_init__()
        for name, value, choices in [
            ("ARCA signal", self.signal, Signal),
            ("scale", self.scale, Scale),
            ("normalise", self.normalise, Normalise),
            ("objective", self.objective, Objective),
            ("entropy_signal", self.entropy_signal, EntropySignal),
            ("divergence_signal", self.divergence_signal, DivergenceSignal),
            ("adapted_pass", self.adapted_pass, AdaptedPass),
            ("hidden", self.hidden, Hidden),
            ("negative", self.negative, Negative),
            ("all_zero", self.all_zero, AllZero),
        ]:
            check_choice(name, value, choices)
        check(self.sharpening > 0, f"sharpening must be > 0, got {self.sharpening}")
        check(self.weight_eps > 0, f"weight_eps must be > 0, got {self.weight_eps}")
        check(self.temperature > 0, f"temperature must be > 0, got {self.temperature}")


def entropy_drop(entropy: Tensor, mask: Tensor) -> Tensor:  # [B, T]
    """max(0, H_t - H_{t+1}) over each completion, 0 at its last valid token."""
    nxt = torch.nn.functional.pad(entropy[:, 1:], (0, 1))
    has_next = torch.nn.functional.pad(mask[:, 1:], (0, 1)).bool() & mask.bool()
    return torch.where(has_next, (entropy - nxt).clamp(min=0), torch.zeros_like(entropy))


def token_weights(score: Tensor, mask: Tensor, cfg: ARCAConfig, uniform: bool = False) -> Tensor:  # [B, T]
    """Per-completion weights summing to one (official ``build_token_weights``), or to L (mean_one)."""
    m = mask.bool()
    s = score.float().clamp(min=0) if cfg.negative == "clamp" else score.float().abs()
    if uniform:
        s = torch.ones_like(s)
    elif cfg.normalise == "sum":
        s = (s + cfg.weight_eps).pow(cfg.sharpening)
    s = s.masked_fill(~m, 0.0)
    total = s.sum(-1, keepdim=True)
    L = m.sum(-1, keepdim=True).float()
    if cfg.normalise == "softmax" and not uniform:
        w = torch.softmax((s / cfg.temperature).masked_fill(~m, float("-inf")), dim=-1).nan_to_num(0.0)
    else:
        fallback = m.float() / L.clamp(min=1) if cfg.all_zero == "uniform" else torch.zeros_like(s)
        w = torch.where(total > cfg.weight_eps, s / total.clamp(min=cfg.weight_eps), fallback)
    w = w.masked_fill(~m, 0.0)
    return w * L if cfg.scale == "mean_one" else w


@METHODS.register("arca")
class ARCA(GRPO):
    Config = ARCAConfig
    description = "REINFORCE on the group advantage with per-token weights from the LoRA adapter's hidden residual"
    paper = "Adapter-Residual Credit Assignment When Token Signals Degenerate (Lafuente-Mercado 2026), arXiv 2606.00257"
    summary = ("weight_gini", "weight_effective_n_ratio")  # the paper's diagnostics, kept per run
    placebo_control = True  # its credit selects or weights tokens: the placebo moves them
    run_settings = {"model.lora.rank": 16, "model.lora.alpha": 32}  # its official code's r, alpha 2r
    twin_options = {"signal": "uniform"}  # every token weighted 1/L under the same LoRA and loss

    @property
    def required(self) -> frozenset[str]:
        cfg = self.config
        need = {
            "residual": {"hidden_residual"}
            | ({"hidden_residual_separate"} if cfg.adapted_pass == "separate" else set()),
            "uniform": set(),
            "surprisal": set(),
            "entropy_reduction": {"entropy"} if cfg.entropy_signal == "temporal_drop" else {"entropy", "ref_entropy"},
            "policy_divergence": {"ref_logprobs"} if cfg.divergence_signal == "sampled_token" else {"ref_kl"},
        }[cfg.signal]
        return super().required | need

    @property
    def trust_region(self) -> bool:
        return self.config.objective == "clipped"

    @property
    def update_pace(self) -> float:
        """The residual's adapter-off (and, separate, adapter-on) passes: 1.55x GRPO's update under the same
        LoRA adapter, measured at the default config (results/benchmarks/methods_update.md)."""
        return 1.55 if self.config.signal == "residual" else 1.0

    def salience(self, batch: RolloutBatch) -> Tensor:  # [B, T]
        cfg = self.config
        if cfg.signal == "residual":
            if cfg.hidden == "pre_norm":
                if "hidden_residual_prenorm" not in batch.extra:
                    raise CreditBenchError(
                        "hidden=pre_norm needs a model whose decoder has a final norm; use post_norm"
                    )
                return batch.extra["hidden_residual_prenorm"]
            return batch.hidden_residual
        if cfg.signal == "surprisal":
            return -batch.old_logprobs
        if cfg.signal == "entropy_reduction":
            if cfg.entropy_signal == "temporal_drop":
                return entropy_drop(batch.entropy, batch.completion_mask)
            return batch.ref_entropy - batch.entropy
        if cfg.signal == "policy_divergence":
            if cfg.divergence_signal == "sampled_token":
                return (batch.old_logprobs - batch.ref_logprobs).abs()
            return batch.ref_kl
        return torch.ones_like(batch.completion_mask, dtype=torch.float32)  # uniform

    def weights(self, batch: RolloutBatch) -> Tensor:  # [B, T]
        uniform = self.config.signal == "uniform"
        return token_weights(self.salience(batch), batch.completion_mask, self.config, uniform).detach()

    def credit(self, batch: RolloutBatch) -> Tensor:  # [B, T]
        w = self.weights(batch)
        batch.extra[WEIGHTS] = w  # carried to the minibatches for the loss's diagnostics
        return super().credit(batch) * w

    def loss(self, batch: RolloutBatch, logprobs: Tensor, credit: Tensor) -> LossOutput:
        if self.config.objective == "clipped":
            out = super().loss(batch, logprobs, credit)
        else:
            out = LossOutput(-credit * logprobs)
        w = batch.extra.get(WEIGHTS)
        if w is not None:
            out.scalars.update(weight_concentration(w, batch.completion_mask, self.config.scale))
        return out


def weight_concentration(w: Tensor, mask: Tensor, scale: Scale = "sum_one") -> dict[str, Tensor]:
    """The paper's diagnostics of per-completion weights, averaged as ``weight_concentration_metrics``
    does: Gini over completions of more than one token, EffN/T = 1 / (L sum w^2) over all."""
    m = mask.bool()
    L = m.sum(-1).float()
    w = w.float() / (L[:, None].clamp(min=1) if scale == "mean_one" else 1.0)  # back to sum-one weights
    several = L > 1
    g = gini(w[several], m[several]).nan_to_num(0.0).mean() if bool(several.any()) else w.new_zeros(())
    return {"weight_gini": g, "weight_effective_n_ratio": effective_token_ratio(w, m).nan_to_num(0.0).mean()}
