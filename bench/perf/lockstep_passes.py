"""K tiny policies held three ways, and the three passes bench.perf.lockstep times on them.

- :class:`Separate`: one model through bench.engine.lean_forward (the forward the suite runs); K of them
  run one after another.
- :class:`Batched`: K models' parameters stacked on a leading axis ([K, ...]), run by
  :func:`stacked_forward`, the tiny Qwen3 decoder's maths written once for K seeds: each linear layer one
  batched matrix product, the norms and rotary broadcast over the seeds, attention with the K seeds folded
  into its batch, the KV cache one tensor per layer over the K x B rows.
- :class:`Vmapped`: ``torch.func.vmap`` of ``functional_call`` over the real modules' stacked parameters
  (``stack_module_state``), through lean_forward. No decode: a KV cache cannot outlive a vmapped call.

The passes (:func:`decode`, :func:`train`, :func:`score`) are written once for any of them; :func:`run`
gives K seeds' inputs to K separate policies or to one that holds all K. A batched or vmapped pass
computes the separate passes' function (tests/perf/test_lockstep.py holds them allclose); whether it
gives the same bits depends on the kernels' summation order, which bench.perf.lockstep reports.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import warnings
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import torch
from torch import Tensor
from torch.nn import functional as F

from bench.engine import lean_forward

PHASES = ("decode", "train", "score")
MODES = ("separate", "batched", "vmap")


@dataclass(frozen=True)
class Shapes:
    """A flagship run's shapes: 128 samples a rollout batch, two minibatches of 64, prompts of ~22
    tokens, completions of ~20."""

    decode_rows: int = 128
    train_rows: int = 64
    score_rows: int = 128
    prompt: int = 22
    new: int = 20

    def rows(self, phase: str) -> int:
        return {"decode": self.decode_rows, "train": self.train_rows, "score": self.score_rows}[phase]


@dataclass(frozen=True)
class Batch:
    """One pass's inputs for K seeds."""

    ids: Tensor  # [K, B, S] the prompts (decode) or the whole sequences (train, score)
    tokens: Tensor | None  # [K, B, new] the tokens the decode steps are fed; None elsewhere
    new: int  # the completion's positions (decode steps, or log-probs read)

    def seeds(self, lo: int, hi: int) -> Batch:
        return replace(self, ids=self.ids[lo:hi], tokens=None if self.tokens is None else self.tokens[lo:hi])


@dataclass
class Outputs:
    out: Tensor  # [K, ...] logits (decode) or log-probs (train, score)
    grads: list[Tensor]  # [K, ...] each parameter's gradient, in named_parameters order (train only)


class Separate:
    """One model through lean_forward: ``logits(ids [1, B, S]) -> [1, B, keep, V]``."""

    def __init__(self, model) -> None:
        self.model = model

    def logits(self, ids: Tensor, cache, keep: int) -> Tensor:
        out = lean_forward.forward(self.model, ids[0], cache=cache, use_cache=cache is not None, logits_to_keep=keep)
        return out.logits[None]

    def new_cache(self):
        from transformers.cache_utils import DynamicCache

        return DynamicCache(config=self.model.config)

    def zero_grad(self) -> None:
        self.model.zero_grad(set_to_none=True)

    def grads(self) -> list[Tensor]:
        return [p.grad[None] for p in self.model.parameters()]


class Batched:
    """K models' parameters stacked into leaves of their own ([K, ...], named as the model names them),
    run by :func:`stacked_forward`."""

    def __init__(self, models: list) -> None:
        if not all(m.config.tie_word_embeddings for m in models):
            raise ValueError("Batched: the LM head is read from the embedding, so the models must tie them")
        named = [dict(m.named_parameters()) for m in models]
        self.params = {n: torch.stack([p[n].detach() for p in named]).requires_grad_() for n in named[0]}
        self.config = models[0].config
        self.rotary = models[0].model.rotary_emb  # the same for every seed: a function of the config

    def logits(self, ids: Tensor, cache: list | None, keep: int) -> Tensor:
        return stacked_forward(self.params, self.config, self.rotary, ids, cache, keep)

    def new_cache(self) -> list:
        return []

    def zero_grad(self) -> None:
        for p in self.params.values():
            p.grad = None

    def grads(self) -> list[Tensor]:
        return [p.grad for p in self.params.values()]


class _Lean(torch.nn.Module):
    """A model whose call is lean_forward's, for functional_call."""

    def __init__(self, model) -> None:
        super().__init__()
        self.model = model

    def forward(self, ids: Tensor, keep: int) -> Tensor:
        return lean_forward.forward(self.model, ids, logits_to_keep=keep).logits


class Vmapped:
    """K models' parameters stacked by ``torch.func.stack_module_state``, the real module's forward
    vmapped over them (``functional_call``; the tied LM head follows the embedding)."""

    def __init__(self, models: list) -> None:
        from torch.func import stack_module_state

        wrapped = [_Lean(m) for m in models]
        self.params, self.buffers = stack_module_state(wrapped)
        self.base = wrapped[0]

    def logits(self, ids: Tensor, cache, keep: int) -> Tensor:
        from torch.func import functional_call, vmap

        if cache is not None:
            raise ValueError("Vmapped: a KV cache cannot outlive a call of a vmapped function")

        def one(params, buffers, x):
            return functional_call(self.base, (params, buffers), (x, keep))

        with warnings.catch_warnings():  # SDPA has no batching rule: vmap runs it seed by seed
            warnings.filterwarnings("ignore", message="There is a performance drop")
            return vmap(one)(self.params, self.buffers, ids)

    def zero_grad(self) -> None:
        for p in self.params.values():
            p.grad = None

    def grads(self) -> list[Tensor]:
        return [p.grad for p in self.params.values()]


def _rms_norm(x: Tensor, weight: Tensor, eps: float) -> Tensor:
    """transformers' RMSNorm op for op, ``weight`` broadcast over ``x``'s middle axes ([K, 1, ..., d])."""
    h = x.to(torch.float32)
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)  # x / sqrt(mean(x^2) + eps)
    return weight * h.to(x.dtype)


def _linear(x: Tensor, weight: Tensor) -> Tensor:
    """K linear layers at once: x [K, N, in], weight [K, out, in] -> [K, N, out]."""
    return torch.bmm(x, weight.transpose(1, 2))


def stacked_forward(
    params: dict[str, Tensor], config, rotary, ids: Tensor, cache: list | None, keep: int
) -> Tensor:  # [K, B, keep, V]
    """The tiny Qwen3 decoder's forward (lean_forward's maths: no padding, no mask) for K seeds at once:
    ``params`` the models' parameters stacked ([K, ...], by name), ``ids`` [K, B, S]. ``cache``: a list of
    each layer's (keys, values) over the K x B rows, extended in place (empty before the prefill), or None.
    The logits of the last ``keep`` positions (the LM head is the tied embedding)."""
    K, B, S = ids.shape
    embed = params["model.embed_tokens.weight"]  # [K, V, d]
    V, d = embed.shape[1:]
    eps, hd = config.rms_norm_eps, config.head_dim
    past = cache[0][0].shape[2] if cache else 0
    cos, sin = rotary(embed, (torch.arange(S) + past)[None])  # [1, S, hd]: the same positions for every row
    cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
    offsets = (torch.arange(K) * V)[:, None, None]  # seed k's vocabulary rows in the flattened tables
    h = F.embedding((ids + offsets).view(K, B * S), embed.reshape(K * V, d))  # [K, N, d]
    for i in range(config.num_hidden_layers):

        def w(name: str, i: int = i) -> Tensor:  # layer i's stacked parameter
            return params[f"model.layers.{i}.{name}.weight"]

        x = _rms_norm(h, w("input_layernorm")[:, None], eps)
        q, k, v = (_linear(x, w(f"self_attn.{n}_proj")).view(K, B, S, -1, hd) for n in "qkv")  # [K, B, S, H, hd]
        q = _rms_norm(q, w("self_attn.q_norm")[:, None, None, None], eps)
        k = _rms_norm(k, w("self_attn.k_norm")[:, None, None, None], eps)
        q, k, v = (t.view(K * B, S, -1, hd).transpose(1, 2) for t in (q, k, v))  # [K*B, H, S, hd]
        q = q * cos + lean_forward._rotate_half(q) * sin
        k = k * cos + lean_forward._rotate_half(k) * sin
        if cache is not None:
            if len(cache) > i:  # DynamicCache.update's concatenation
                k, v = torch.cat([cache[i][0], k], dim=-2), torch.cat([cache[i][1], v], dim=-2)
                cache[i] = (k, v)
            else:
                cache.append((k, v))
        a = F.scaled_dot_product_attention(q, k, v, is_causal=S > 1, scale=hd**-0.5, enable_gqa=True)
        h = h + _linear(a.transpose(1, 2).reshape(K, B * S, -1), w("self_attn.o_proj"))
        x = _rms_norm(h, w("post_attention_layernorm")[:, None], eps)
        h = h + _linear(F.silu(_linear(x, w("mlp.gate_proj"))) * _linear(x, w("mlp.up_proj")), w("mlp.down_proj"))
    h = _rms_norm(h, params["model.norm.weight"][:, None], eps).view(K, B, S, d)[:, :, -keep:]
    return torch.bmm(h.reshape(K, -1, d), embed.transpose(1, 2)).view(K, B, -1, V)


def logprobs(logits: Tensor, ids: Tensor, new: int) -> Tensor:  # [K, B, new]
    """The log-probs of the last ``new`` tokens of ``ids`` [K, B, S] from the logits of the last
    ``new + 1`` positions [K, B, new + 1, V] (a position's logits predict the next token)."""
    lp = torch.log_softmax(logits[:, :, :-1].float(), dim=-1)
    return lp.gather(-1, ids[:, :, -new:, None]).squeeze(-1)


def decode(policies, batch: Batch) -> Outputs:
    """The prompts prefilled, then ``batch.new`` decode steps: the logits of each [K, B, new + 1, V]."""
    with torch.no_grad():
        cache = policies.new_cache()
        out = [policies.logits(batch.ids, cache, 1)]
        for t in range(batch.new):
            out.append(policies.logits(batch.tokens[:, :, t : t + 1], cache, 1))
    return Outputs(torch.cat(out, dim=2), [])


def train(policies, batch: Batch) -> Outputs:
    """Forward and backward of each seed's mean negative log-prob of its completions: the log-probs and
    every parameter's gradient (the loss is the seeds' sum, so a seed's gradient is its own loss's)."""
    policies.zero_grad()
    lp = logprobs(policies.logits(batch.ids, None, batch.new + 1), batch.ids, batch.new)  # [K, B, new]
    (-lp.mean(dim=(1, 2))).sum().backward()
    return Outputs(lp.detach(), policies.grads())


def score(policies, batch: Batch) -> Outputs:
    """The log-probs of the completions, without gradient."""
    with torch.no_grad():
        return Outputs(logprobs(policies.logits(batch.ids, None, batch.new + 1), batch.ids, batch.new), [])


PASSES: dict[str, Callable[[Any, Batch], Outputs]] = {"decode": decode, "train": train, "score": score}


def run(phase: str, policies: list, batch: Batch) -> Outputs:
    """One pass over K seeds held by ``policies`` (K separate ones, or one holding all K), in order."""
    n = batch.ids.shape[0] // len(policies)
    outs = [PASSES[phase](p, batch.seeds(i * n, (i + 1) * n)) for i, p in enumerate(policies)]
    return Outputs(torch.cat([o.out for o in outs]), [torch.cat(g) for g in zip(*(o.grads for o in outs))])


def make_batch(phase: str, k: int, rows: int, shapes: Shapes, vocab: int, seed: int = 0) -> Batch:
    """Random token ids (no special tokens) for ``k`` seeds, each seed its own."""
    g = torch.Generator().manual_seed(seed)
    width = shapes.prompt + (0 if phase == "decode" else shapes.new)
    ids = torch.randint(3, vocab, (k, rows, width), generator=g)
    tokens = torch.randint(3, vocab, (k, rows, shapes.new), generator=g) if phase == "decode" else None
    return Batch(ids, tokens, shapes.new)


def policies_for(mode: str, models: list) -> list:
    """The K ``models`` held as ``mode`` (one of :data:`MODES`) holds them, for :func:`run`."""
    if mode == "separate":
        return [Separate(m) for m in models]
    return [Batched(models) if mode == "batched" else Vmapped(models)]


def difference(a: Outputs, b: Outputs) -> dict[str, Any]:
    """The largest absolute difference of the outputs and of the gradients, and whether every bit agrees."""
    grads = [float((x - y).abs().max()) for x, y in zip(a.grads, b.grads)]
    return {
        "out": float((a.out - b.out).abs().max()),
        "grad": max(grads) if grads else None,
        "equal": torch.equal(a.out, b.out) and all(torch.equal(x, y) for x, y in zip(a.grads, b.grads)),
    }


def keep_freed_memory() -> bool:
    """Have glibc's malloc keep what is freed (no allocation mapped on its own, no heap trimming), from
    now on in this process; False where the C library has no ``mallopt``."""
    try:
        mallopt = ctypes.CDLL(ctypes.util.find_library("c")).mallopt
    except (OSError, AttributeError, TypeError):
        return False
    m_trim_threshold, m_mmap_max = -1, -4  # glibc's malloc.h
    return bool(mallopt(m_mmap_max, 0)) and bool(mallopt(m_trim_threshold, 2**31 - 1))
