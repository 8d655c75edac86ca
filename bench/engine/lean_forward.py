"""A causal LM's forward without its module machinery, for the dense Qwen3 decoders the benchmark trains
(the tiny policies and Qwen3 checkpoints: RMSNorm, rotary attention with q/k norms, a SiLU-gated MLP).

At the tiny sizes most of a forward's time is not arithmetic but the calls around it: every submodule's
``__call__``, the output-capturing and argument-merging decorators, the keyword plumbing. :func:`forward`
runs the same tensor operations, in the same order, on the model's own parameters (gradients reach
them as usual): the RMSNorm of transformers' modelling code op for op, the same linear layers, the
model's own rotary embedding, its mask function (``create_causal_mask``) and its attention function
(``sdpa_attention_forward``), and the cache's own ``update``. So its outputs are the model's to the bit
(tests/engine/test_lean.py compares logits and gradients); where a model is anything else,
:func:`supports` says no and the callers use the model itself.
"""

from __future__ import annotations

import functools
import inspect

import torch
from torch import Tensor
from torch.nn import functional as F

_LAYER_ATTRS = ("input_layernorm", "post_attention_layernorm", "self_attn", "mlp")
_ATTN_ATTRS = ("q_proj", "k_proj", "v_proj", "o_proj")


def supports(model) -> bool:
    """Whether :func:`forward` computes exactly what ``model`` does: a transformers causal LM whose
    decoder is plain (full attention through SDPA, RMSNorms of transformers' form, a SiLU-gated MLP,
    no biases, no sliding window, no gradient checkpointing, no adapters or hooks)."""
    return _check(model)


@functools.lru_cache(maxsize=1)
def _transformers_api() -> bool:
    """Whether the installed transformers has the functions :func:`forward` calls, with the arguments it
    passes (the modelling code it replicates is transformers 5's: another version's model runs itself)."""
    try:
        import transformers
        from transformers.cache_utils import DynamicCache
        from transformers.integrations import sdpa_attention
        from transformers.masking_utils import create_causal_mask
    except ImportError:
        return False
    mask_args = inspect.signature(create_causal_mask).parameters
    return (
        int(transformers.__version__.split(".")[0]) >= 5
        and {"config", "inputs_embeds", "attention_mask", "cache", "position_ids"} <= set(mask_args)
        and hasattr(sdpa_attention, "sdpa_attention_forward")
        and hasattr(DynamicCache, "update")
        and cache_name() == "cache"
    )


@functools.lru_cache(maxsize=1)
def cache_name() -> str:
    """The keyword a transformers model's forward (and ``generate``) takes its KV cache by, and the
    attribute its output returns it in: ``cache`` since transformers renamed it (the old name still
    works there until 5.40, with a deprecation warning), ``past_key_values`` before."""
    from transformers.modeling_outputs import CausalLMOutputWithPast

    return "cache" if "cache" in getattr(CausalLMOutputWithPast, "__dataclass_fields__", {}) else "past_key_values"


def _check(model) -> bool:
    if not _transformers_api():
        return False
    cfg, inner = getattr(model, "config", None), getattr(model, "model", None)
    if cfg is None or inner is None or type(model).__name__ != "Qwen3ForCausalLM":
        return False  # a peft wrapper, a subclass, another family: anything that may change the forward
    plain = {
        "_attn_implementation": "sdpa",
        "hidden_act": "silu",
        "use_sliding_window": False,
        "attention_bias": False,
        "mlp_bias": False,
    }
    if any(getattr(cfg, k, v) != v for k, v in plain.items()) or getattr(inner, "gradient_checkpointing", False):
        return False
    if set(getattr(cfg, "layer_types", None) or ["full_attention"]) != {"full_attention"}:
        return False
    if (getattr(cfg, "rope_parameters", None) or {}).get("rope_type", "default") != "default":
        return False
    modules = _modules(model)
    if modules is None or any(m._forward_hooks or m._forward_pre_hooks or m._backward_hooks for m in modules):
        return False  # hooks (FSDP, offloading, capturing) change what a call does
    return all(type(p) is torch.nn.Parameter for p in model.parameters())


def _modules(model) -> list | None:
    """Every module :func:`forward` replaces the call of, or None where a layer lacks one."""
    inner = model.model
    modules = [model, inner, model.lm_head, inner.embed_tokens, inner.norm, inner.rotary_emb]
    for layer in inner.layers:
        if not all(hasattr(layer, a) for a in _LAYER_ATTRS):
            return None
        attn, mlp = layer.self_attn, layer.mlp
        if not all(hasattr(attn, a) for a in _ATTN_ATTRS):
            return None
        modules += [layer, layer.input_layernorm, layer.post_attention_layernorm, attn, mlp]
        modules += [getattr(attn, a) for a in (*_ATTN_ATTRS, "q_norm", "k_norm") if getattr(attn, a, None) is not None]
        modules += [mlp.gate_proj, mlp.up_proj, mlp.down_proj]
    return modules


def _rms_norm(x: Tensor, norm) -> Tensor:
    """transformers' RMSNorm, op for op."""
    dtype = x.dtype
    h = x.to(torch.float32)
    variance = h.pow(2).mean(-1, keepdim=True)
    h = h * torch.rsqrt(variance + norm.variance_epsilon)
    return norm.weight * h.to(dtype)


def _rotate_half(x: Tensor) -> Tensor:
    x1 = x[..., : x.shape[-1] // 2]
    x2 = x[..., x.shape[-1] // 2 :]
    return torch.cat((-x2, x1), dim=-1)


def forward(
    model,
    input_ids: Tensor,
    attention_mask: Tensor | None = None,
    position_ids: Tensor | None = None,
    cache=None,
    use_cache: bool = False,
    logits_to_keep: int = 0,
    valid: Tensor | None = None,
    head: bool = True,
):
    """``model(input_ids=..., attention_mask=..., position_ids=..., cache=..., use_cache=...,
    logits_to_keep=...)``, for a model :func:`supports`: an object with ``logits`` and ``cache``.

    ``valid`` ([B, S] bool): the positions whose outputs are read and which later positions attend
    to. Everything computed a position at a time (norms, projections, rotary, MLP, logits) then runs
    on those positions only, and attention on the padded layout (zeros at the other positions, which no
    valid position attends to): the valid positions' outputs are the same bits (a row of a matrix
    product does not depend on the other rows), the others' logits are 0. A backward sums the weight
    gradients over fewer rows, in another order, so they differ from the padded layout's in the last
    bits (``rl.packed_update``); the input gradients are the same.

    ``head=False``: the LM head is left out; the output's ``hidden`` holds the final norm's output at
    the kept positions (what the head would read), and its ``logits`` are None."""
    from transformers.cache_utils import DynamicCache
    from transformers.masking_utils import create_causal_mask

    inner = model.model
    cfg = model.config
    hidden = inner.embed_tokens(input_ids)
    if use_cache and cache is None:
        cache = DynamicCache(config=cfg)
    if position_ids is None:
        past = cache.get_seq_length() if cache is not None else 0
        position_ids = (torch.arange(hidden.shape[1], device=hidden.device) + past).unsqueeze(0)
    mask = create_causal_mask(
        config=cfg, inputs_embeds=hidden, attention_mask=attention_mask, cache=cache, position_ids=position_ids
    )
    cos, sin = inner.rotary_emb(hidden, position_ids)
    shape = hidden.shape[:-1]  # [B, S]
    if valid is not None:
        index = valid.expand(shape)
        hidden = hidden[index]  # [N, d]
        cos, sin = cos.expand(*shape, -1)[index].unsqueeze(1), sin.expand(*shape, -1)[index].unsqueeze(1)  # [N, 1, hd]
    else:
        cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)  # [B, 1, S, hd]
    for i, layer in enumerate(inner.layers[: cfg.num_hidden_layers]):
        hidden = _layer(layer, i, hidden, (cos, sin), mask, cache, index if valid is not None else None, shape)
    hidden = _rms_norm(hidden, inner.norm)
    cache = cache if use_cache else None
    if valid is None:
        kept = hidden[:, -logits_to_keep:, :] if logits_to_keep else hidden
        return _Output(F.linear(kept, model.lm_head.weight), cache) if head else _Output(None, cache, kept)
    keep = torch.zeros_like(index)
    keep[:, -logits_to_keep if logits_to_keep else 0 :] = True
    out = hidden[keep[index]]  # the kept valid positions
    out = F.linear(out, model.lm_head.weight) if head else out
    logits = out.new_zeros(*shape, out.shape[-1])  # out's dtype: bf16 under autocast, where hidden is fp32
    logits[index & keep] = out
    kept = logits[:, -logits_to_keep:, :] if logits_to_keep else logits
    return _Output(kept, cache) if head else _Output(None, cache, kept)


def _layer(layer, i: int, hidden: Tensor, rotary, mask, cache, index: Tensor | None, shape) -> Tensor:
    """One decoder layer, as its own forward computes it; ``index`` ([B, S] bool): ``hidden`` holds those
    positions only ([N, d]) and attention runs on the padded layout ``shape``."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    cos, sin = rotary
    attn = layer.self_attn
    residual = hidden
    h = _rms_norm(hidden, layer.input_layernorm)
    split = (*hidden.shape[:-1], -1, attn.head_dim)
    q, k = F.linear(h, attn.q_proj.weight).view(split), F.linear(h, attn.k_proj.weight).view(split)
    if getattr(attn, "q_norm", None) is not None:
        q, k = _rms_norm(q, attn.q_norm), _rms_norm(k, attn.k_norm)
    v = F.linear(h, attn.v_proj.weight).view(split)
    if index is None:
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
    q = (q * cos) + (_rotate_half(q) * sin)
    k = (k * cos) + (_rotate_half(k) * sin)
    if index is not None:  # to the padded layout [B, S, heads, hd], viewed as [B, heads, S, hd]
        q, k, v = (_scatter(t, index) for t in (q, k, v))
    if cache is not None:
        k, v = cache.update(k, v, i)
    out, _ = sdpa_attention_forward(attn, q, k, v, mask, dropout=0.0, scaling=attn.scaling, sliding_window=None)
    out = out.reshape(*shape, -1).contiguous()
    if index is not None:
        out = out[index]
    hidden = residual + F.linear(out, attn.o_proj.weight)
    residual = hidden
    h = _rms_norm(hidden, layer.post_attention_layernorm)
    mlp = layer.mlp
    h = F.linear(F.silu(F.linear(h, mlp.gate_proj.weight)) * F.linear(h, mlp.up_proj.weight), mlp.down_proj.weight)
    return residual + h


def _scatter(t: Tensor, index: Tensor) -> Tensor:
    """[N, heads, hd] at the positions of ``index`` ([B, S]) -> [B, heads, S, hd], zeros elsewhere (the
    layout of the model's own ``view(B, S, heads, hd).transpose(1, 2)``)."""
    full = t.new_zeros(*index.shape, *t.shape[1:])
    full[index] = t
    return full.transpose(1, 2)


class _Output:
    __slots__ = ("logits", "cache", "hidden")

    def __init__(self, logits: Tensor | None, cache, hidden: Tensor | None = None) -> None:
        self.logits, self.cache, self.hidden = logits, cache, hidden
