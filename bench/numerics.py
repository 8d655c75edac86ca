"""Numerics shared by the engine and every method: loss aggregation, masked statistics,
log-probs and entropies from logits, the k3 KL estimator, and the concentration of per-token weights
(Gini, effective-token ratio). Each exists once and is tested once.
"""

from __future__ import annotations

import torch
from torch import Tensor

# How a [B, T] per-token loss becomes the scalar that is differentiated. With L_i the number of
# valid tokens of sequence i, N = sum_i L_i, B the number of sequences and L_max the generation
# budget (max_new_tokens):
AGGREGATIONS = {
    "token-mean": "sum_{i,t} l_it / N  (DAPO eq. 12, 80/20, verl's default)",
    "seq-mean-token-mean": "1/B sum_i 1/L_i sum_t l_it  (GRPO eq. 3, GSPO)",
    "seq-mean-token-sum": "1/B sum_i sum_t l_it  (Dr. GRPO as written)",
    "seq-mean-token-sum-norm": "sum_{i,t} l_it / (B * L_max)  (Dr. GRPO as implemented in Oat)",
}


def aggregate(
    loss: Tensor,  # [B, T]
    mask: Tensor,  # [B, T]
    mode: str,
    *,
    max_len: int | None = None,
    num_tokens: float | None = None,
    num_seqs: float | None = None,
) -> Tensor:
    """Reduce a per-token loss to a scalar, in one of the named ``AGGREGATIONS`` modes.

    ``num_tokens``/``num_seqs`` are the normalisers' counts. They default to this batch's; pass
    the counts of the whole optimizer batch when it is split into micro-batches (or across
    processes), so the sum of the parts' gradients equals the whole batch's gradient.
    """
    mask = mask.to(loss.dtype)
    masked = loss * mask
    n_seqs = float(loss.shape[0]) if num_seqs is None else float(num_seqs)
    if mode == "token-mean":
        n_tok = mask.sum() if num_tokens is None else torch.as_tensor(num_tokens, dtype=loss.dtype)
        return masked.sum() / n_tok.clamp(min=1.0)
    if mode == "seq-mean-token-mean":
        per_seq = masked.sum(-1) / mask.sum(-1).clamp(min=1.0)  # [B]
        return per_seq.sum() / max(n_seqs, 1.0)
    if mode == "seq-mean-token-sum":
        return masked.sum() / max(n_seqs, 1.0)
    if mode == "seq-mean-token-sum-norm":
        if max_len is None:
            raise ValueError("aggregation 'seq-mean-token-sum-norm' needs max_len")
        return masked.sum() / (max(n_seqs, 1.0) * max_len)
    raise ValueError(f"unknown aggregation {mode!r}; valid: {', '.join(AGGREGATIONS)}")


def masked_sum(x: Tensor, mask: Tensor, dim: int | None = None) -> Tensor:
    x = x * mask.to(x.dtype)
    return x.sum() if dim is None else x.sum(dim)


def masked_mean(x: Tensor, mask: Tensor, dim: int | None = None) -> Tensor:
    """Mean of ``x`` over ``mask``; 0 where the mask is empty."""
    m = mask.to(x.dtype)
    return masked_sum(x, m, dim) / (m.sum() if dim is None else m.sum(dim)).clamp(min=1.0)


def token_logprobs(logits: Tensor, tokens: Tensor, temperature: float = 1.0) -> Tensor:
    """log softmax(logits / temperature)[token]: [B, T, V], [B, T] -> [B, T]."""
    logits = logits.float() / temperature
    return logits.gather(-1, tokens.unsqueeze(-1)).squeeze(-1) - torch.logsumexp(logits, -1)


def entropy_from_logits(logits: Tensor, temperature: float = 1.0) -> Tensor:
    """H(softmax(logits / temperature)) per position: [B, T, V] -> [B, T]."""
    logp = torch.log_softmax(logits.float() / temperature, -1)
    return -(logp.exp() * logp).sum(-1)


def k3_kl(logprobs: Tensor, ref_logprobs: Tensor) -> Tensor:
    """k3 estimator of KL(pi || pi_ref) per token (GRPO eq. 4): e^d - d - 1, d = log pi_ref - log pi."""
    d = ref_logprobs - logprobs
    return torch.exp(d) - d - 1.0


def gini(w: Tensor, mask: Tensor) -> Tensor:  # [B]
    """Per-row Gini coefficient of non-negative weights ``w`` over the valid tokens: [B, T] -> [B].

    Uses the sorted form sum_i (2i - L - 1) w_(i) / (L sum w), i = 1..L, equal to the pairwise form.
    Rows whose weights sum to 0 give nan.
    """
    valid = mask.bool()
    L = valid.sum(-1, keepdim=True).to(w.dtype)  # [B, 1]
    ordered = torch.sort(w.masked_fill(~valid, float("inf")), dim=-1).values.masked_fill(
        ~torch.sort(valid.float(), dim=-1, descending=True).values.bool(), 0.0
    )  # valid weights first, ascending
    rank = torch.arange(1, w.shape[-1] + 1, dtype=w.dtype, device=w.device)  # [T]
    coeff = (2 * rank - L - 1) * (rank <= L)  # [B, T]
    total = (w * valid).sum(-1)
    return (coeff * ordered).sum(-1) / (L.squeeze(-1) * total)


def effective_token_ratio(w: Tensor, mask: Tensor) -> Tensor:  # [B]
    """(sum w)^2 / (L sum w^2) over valid tokens: 1 for uniform weights, 1/L for a single token."""
    m = mask.to(w.dtype)
    L = m.sum(-1)
    return (w * m).sum(-1) ** 2 / (L * (w * w * m).sum(-1))
