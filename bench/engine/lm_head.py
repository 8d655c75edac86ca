"""The LM head in chunks of tokens: each completion token's log-prob (with gradient) and the entropy
of its distribution (detached) from the last hidden states, without a [tokens x vocabulary] tensor.

With a Hub vocabulary (Qwen: 151,936) the logits of a batch's completion tokens are the largest
tensors of a step: 8 x 1,024 tokens make 5 GB in float32, and the log-softmax and the entropy each
add another copy. :func:`logprobs_entropy` takes the tokens a chunk at a time: a chunk's logits, its
log-probs and entropies, then the next chunk, so at most one chunk's logits exist. Its backward
recomputes each chunk's logits from the saved hidden states and the head's weight (one more matmul
of the head) and forms the gradient of the log-probs in closed form, ``(onehot - softmax) / T``,
so the backward keeps no chunk's logits either. The entropy is a detached signal for every method
(:class:`bench.engine.scoring.Scores` hands it on detached), so it carries no gradient here.

:func:`chunk_tokens` decides when: only where tokens x vocabulary exceed ``rl.lm_head_chunk_elements``
(:data:`CHUNK_ELEMENTS` by default), so the tiny policies, whose logits are small, keep the whole
head and their bits. The result equals the whole head to float precision
(tests/engine/test_lm_head.py).
"""

from __future__ import annotations

import torch
from torch import Tensor
from torch.nn import functional as F

from bench.config import RLConfig
from bench.numerics import entropy_from_logits

CHUNK_ELEMENTS: int = RLConfig.lm_head_chunk_elements
"""Logit elements (tokens x vocabulary) above which the head runs in chunks of at most this many, by
default (2**26: 256 MB of float32 logits a chunk, 441 tokens of a 151,936-word vocabulary)."""

_FAMILIES = frozenset({"Qwen3ForCausalLM", "Qwen2ForCausalLM", "LlamaForCausalLM", "MistralForCausalLM"})
"""Causal LMs whose logits are exactly ``lm_head(decoder(...).last_hidden_state)``: nothing (soft-capping,
scaling) between the decoder's output and the log-softmax."""


def chunk_tokens(tokens: int, vocab: int, elements: int) -> int:
    """Tokens per chunk of the head for ``tokens`` positions over ``vocab`` words: 0 (the whole head)
    unless ``tokens x vocab`` exceeds ``elements`` (> 0), else as many tokens as ``elements`` holds."""
    if elements <= 0 or tokens * vocab <= elements:
        return 0
    return max(1, elements // vocab)


def head_weight(model) -> Tensor | None:
    """The weight of ``model``'s LM head where the logits are exactly ``hidden @ weight.T`` of the
    decoder's last hidden state (a bias-free ``nn.Linear`` without hooks, of a known family, under a
    LoRA adapter or not, not FSDP-sharded), else None: the model's own forward gives the logits."""
    from torch.distributed.fsdp import FSDPModule

    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    if type(base).__name__ not in _FAMILIES or isinstance(base, FSDPModule):
        return None
    head = getattr(base, "lm_head", None)
    if type(head) is not torch.nn.Linear or head.bias is not None:
        return None
    if any(m._forward_hooks or m._forward_pre_hooks for m in (model, base, head)):
        return None  # offloading, capturing or sharding hooks change what the model's call does
    return head.weight


class _Output:
    __slots__ = ("hidden", "hidden_states")

    def __init__(self, hidden: Tensor, hidden_states) -> None:
        self.hidden, self.hidden_states = hidden, hidden_states


def decoder_forward(model, input_ids: Tensor, logits_to_keep: int, **kwargs) -> _Output:
    """``model(input_ids=..., logits_to_keep=..., **kwargs)`` without the LM head, for a model whose
    :func:`head_weight` is not None: the decoder's last hidden states at the last ``logits_to_keep``
    positions (``hidden``) and its ``hidden_states`` when ``output_hidden_states`` is asked for."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    out = base.get_decoder()(input_ids=input_ids, **kwargs)
    return _Output(out.last_hidden_state[:, -logits_to_keep:], getattr(out, "hidden_states", None))


def logprobs_entropy(
    hidden: Tensor, weight: Tensor, tokens: Tensor, temperature: float, chunk: int, with_entropy: bool
) -> tuple[Tensor, Tensor | None]:
    """log softmax(hidden @ weight.T / temperature)[token] ([N] float32, differentiable in ``hidden`` and
    ``weight``) and, when asked for, the entropy of that softmax ([N] float32, detached), computed
    ``chunk`` tokens at a time: ``hidden`` [N, H], ``weight`` [V, H], ``tokens`` [N]."""
    grad = torch.is_grad_enabled() and (hidden.requires_grad or weight.requires_grad)
    if not grad:
        logprobs, entropy, _ = _chunks(hidden, weight, tokens, temperature, chunk, with_entropy)
        return logprobs, entropy
    logprobs, entropy = _ChunkedHead.apply(hidden, weight, tokens, temperature, chunk, with_entropy)
    return logprobs, entropy if with_entropy else None


def _chunks(
    hidden: Tensor, weight: Tensor, tokens: Tensor, temperature: float, chunk: int, with_entropy: bool
) -> tuple[Tensor, Tensor | None, Tensor]:
    """The chunked forward: (log-probs, entropies or None, each row's logsumexp of the scaled logits)."""
    N = hidden.shape[0]
    logprobs = torch.empty(N, dtype=torch.float32, device=hidden.device)
    lse = torch.empty_like(logprobs)
    entropy = torch.empty_like(logprobs) if with_entropy else None
    with torch.no_grad():
        for start in range(0, N, chunk):
            end = min(start + chunk, N)
            scaled = F.linear(hidden[start:end], weight).float() / temperature  # [C, V]
            lse[start:end] = torch.logsumexp(scaled, -1)
            logprobs[start:end] = scaled.gather(-1, tokens[start:end, None]).squeeze(-1) - lse[start:end]
            if entropy is not None:
                entropy[start:end] = entropy_from_logits(scaled)
            del scaled
    return logprobs, entropy, lse


class _ChunkedHead(torch.autograd.Function):
    """:func:`_chunks` with a backward that recomputes each chunk's logits instead of keeping them."""

    @staticmethod
    def forward(ctx, hidden, weight, tokens, temperature, chunk, with_entropy):
        logprobs, entropy, lse = _chunks(hidden, weight, tokens, temperature, chunk, with_entropy)
        # the dtype the head's matmul ran in: the weight's, or autocast's (bf16 under bf16-mixed)
        ctx.compute_dtype = torch.get_autocast_dtype(hidden.device.type) if _autocast(hidden) else weight.dtype
        ctx.temperature, ctx.chunk = temperature, chunk
        ctx.save_for_backward(hidden, weight, tokens, lse)
        if entropy is None:
            entropy = logprobs.new_zeros(0)
        ctx.mark_non_differentiable(entropy)
        return logprobs, entropy

    @staticmethod
    def backward(ctx, grad_logprobs, _grad_entropy):
        hidden, weight, tokens, lse = ctx.saved_tensors
        want_h, want_w = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
        dtype, T, C = ctx.compute_dtype, ctx.temperature, ctx.chunk
        grad_h = torch.empty_like(hidden) if want_h else None
        grad_w = torch.zeros(weight.shape, dtype=torch.float32, device=weight.device) if want_w else None
        w = weight.to(dtype)
        with torch.autocast(hidden.device.type, enabled=False):
            for start in range(0, hidden.shape[0], C):
                end = min(start + C, hidden.shape[0])
                h = hidden[start:end].to(dtype)
                # d logprob / d scaled logits = onehot - softmax; times the incoming gradient, over T
                g = F.linear(h, w).float().div_(T).sub_(lse[start:end, None]).exp_().neg_()  # -softmax
                g.scatter_add_(-1, tokens[start:end, None], torch.ones_like(lse[start:end, None]))
                g = g.mul_(grad_logprobs[start:end, None] / T).to(dtype)
                if want_h:
                    grad_h[start:end] = (g @ w).to(hidden.dtype)
                if want_w and dtype == torch.float32:
                    grad_w.addmm_(g.t(), h)
                elif want_w:
                    grad_w.add_(g.t() @ h)
                del g
        return grad_h, None if grad_w is None else grad_w.to(weight.dtype), None, None, None, None


def _autocast(t: Tensor) -> bool:
    return torch.is_autocast_enabled(t.device.type)
