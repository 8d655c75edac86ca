"""Scoring: the forward that turns (prompt, completion) tokens into per-token log-probs (and the
entropies, logits and hidden states a method asks for), and the scoring of a rollout batch before
its update -- the behaviour log-probs, the reference pass, ARCA's adapter-off pass -- computing
exactly what the method ``needs`` (:data:`bench.core.NEEDS`).

Under LoRA (a peft model) the reference policy is the base model with the adapter disabled, so the
reference forward and ARCA's adapter-off hidden states are one pass. With a single on-policy update
(1 epoch, 1 minibatch: a *fused* update, :func:`is_fused`) the behaviour log-probs and entropies come
from the training forward itself (detached), so no separate scoring forward is spent; the ratio is
then exactly 1, as in on-policy GRPO. Otherwise they come from the rollout where it recorded them
(``rl.old_logprobs``). What scoring leaves for the update is a :class:`Scored`."""

from __future__ import annotations

import contextlib
import functools
from dataclasses import dataclass

import torch
from torch import Tensor

from bench.config import RLConfig
from bench.core import NEEDS, Method, RolloutBatch
from bench.distributed import all_sum
from bench.engine import lean_forward, lm_head, microbatch
from bench.errors import CreditBenchError
from bench.numerics import entropy_from_logits, token_logprobs

REFERENCE_NEEDS = frozenset({"ref_logprobs", "ref_entropy", "ref_kl", "hidden_residual", "hidden_residual_separate"})


def check_method(method: Method, policy, ref_policy) -> None:
    """Refuse a method whose ``needs`` the step cannot compute for this policy, saying what to change."""
    lora = hasattr(policy, "disable_adapter")  # a peft model: the reference is the adapter-off pass
    unsupported = method.required - NEEDS
    if unsupported:
        raise CreditBenchError(f"method needs {sorted(unsupported)}, which this engine cannot compute")
    if method.required & {"hidden_residual", "hidden_residual_separate"} and not lora:
        raise CreditBenchError(
            "method needs hidden_residual (adapter-on vs adapter-off hidden states): "
            "train with LoRA (set model.lora.rank > 0)"
        )
    if method.required & REFERENCE_NEEDS and ref_policy is None and not lora:
        raise CreditBenchError(
            "method needs the reference policy but none was given (and the policy has no LoRA adapter)"
        )


@dataclass
class Scores:
    logprobs: Tensor  # [B, T] log pi(y_t) at the sampling temperature (with grad if enabled)
    entropy: Tensor | None  # [B, T] detached; None unless asked for
    logits: Tensor | None = None  # [B, T, V] detached, temperature-scaled; None unless asked for
    hidden: Tensor | None = None  # [B, T, H] detached last hidden state the LM head reads (after the final norm)
    hidden_pre: Tensor | None = None  # [B, T, H] detached input of the final norm, when the model has one


def _final_norm(model):
    """The decoder's final norm module (Llama/Qwen/Mistral families), or None."""
    try:
        return getattr(model.get_decoder(), "norm", None)
    except (AttributeError, NotImplementedError):
        return None


def _prompt_groups(prompt_ids: Tensor, prompt_mask: Tensor) -> tuple[Tensor, Tensor] | None:
    """Rows that share their prompt (G samples per prompt): (one representative row per distinct
    prompt [U], each row's prompt index [B]), or None when fewer than half the rows repeat a prompt."""
    B = prompt_ids.shape[0]
    if B < 2:
        return None
    key = torch.cat([prompt_ids, prompt_mask.to(prompt_ids.dtype)], 1)  # equal ids with different padding differ
    uniq, inverse = torch.unique(key, dim=0, return_inverse=True)
    U = uniq.shape[0]
    if 2 * U > B:
        return None
    rows = torch.arange(B, device=prompt_ids.device)
    first = torch.full((U,), B, dtype=rows.dtype, device=rows.device).scatter_reduce(0, inverse, rows, "amin")
    return first, inverse


def _checkpointed(model) -> bool:
    """Whether activation checkpointing is on (its layers drop a KV cache while training)."""
    return model.training and any(getattr(m, "gradient_checkpointing", False) is True for m in model.modules())


def _sharded(model) -> bool:
    """Whether ``model`` (or the transformers model under its peft wrapper) is FSDP2-sharded."""
    from torch.distributed.fsdp import FSDPModule

    return isinstance(model.get_base_model() if hasattr(model, "get_base_model") else model, FSDPModule)


def shared_prefix_cache(model, prompt_ids, prompt_mask, position_ids, masked: bool):
    """Run the prompts' first P-1 tokens once per distinct prompt and return their KV cache,
    expanded to every row (a differentiable gather: gradients of rows sharing a prompt add up),
    or None where that is not possible or not worth it. The cache is an ordinary transformers
    ``DynamicCache`` of full-attention layers; anything else (sliding windows, recurrent states,
    checkpointed layers, which drop caches) takes the plain path, and so does a forward with gradient
    through FSDP-sharded layers: FSDP2 reduce-scatters a layer's gradient each time the backward leaves
    one of its forward calls, so two calls per layer would reduce partial gradients in an order that
    depends on the rows, and processes with different rows would pair different collectives."""
    from transformers.cache_utils import DynamicCache, DynamicLayer

    P = prompt_ids.shape[1]
    cfg = getattr(model, "config", None)
    layer_types = set(getattr(cfg, "layer_types", None) or ["full_attention"])
    if P < 2 or layer_types != {"full_attention"} or getattr(cfg, "use_sliding_window", False) or _checkpointed(model):
        return None
    if torch.is_grad_enabled() and _sharded(model):
        return None
    groups = _prompt_groups(prompt_ids, prompt_mask)
    if groups is None:
        return None
    first, inverse = groups
    kwargs = (
        {"attention_mask": prompt_mask[first, : P - 1], "position_ids": position_ids[first, : P - 1]} if masked else {}
    )
    out = model(input_ids=prompt_ids[first, : P - 1], use_cache=True, logits_to_keep=1, **kwargs)
    cache = getattr(out, lean_forward.cache_name(), None)
    if type(cache) is not DynamicCache or any(type(layer) is not DynamicLayer for layer in cache.layers):
        return None
    cache.batch_select_indices(inverse)
    return cache


def score(
    model,
    prompt_ids,
    prompt_mask,
    completion_ids,
    completion_mask,
    temperature: float = 1.0,
    with_entropy: bool = True,
    with_logits: bool = False,
    with_hidden: bool = False,
    chunk_elements: int = lm_head.CHUNK_ELEMENTS,
    packed: bool = False,
) -> Scores:
    """Per-token log-probs (and entropies, logits, last hidden states) of the completions under ``model``.

    Prompts are left-padded and completions right-padded; positions count real tokens only, so a
    padded row is scored exactly like an unpadded one. Logits are only computed for the positions
    that predict completion tokens; the entropy (a pass over the vocabulary) only when asked for.
    Where those logits (completion tokens x vocabulary) exceed ``chunk_elements`` (> 0;
    ``rl.lm_head_chunk_elements``), no logits are asked for and the model's head is a plain linear
    layer, the log-probs and entropies come from the last hidden states a chunk of tokens at a time
    (:mod:`bench.engine.lm_head`), without a [tokens x vocabulary] tensor.
    Hidden states are read with a hook on the final norm (its input and output), so the other
    layers' states are never kept; position ``P-1+t`` (the one that predicts token ``t``) is returned.

    No work is spent on padding that no row needs: prompt columns that are padding in every row
    (e.g. a minibatch without the longest prompt) and completion columns past the longest
    completion are cut before the forward; the outputs keep the [B, T] shape (0 at those masked
    positions). When rows repeat prompts (a batch of G samples per prompt), each distinct prompt's
    first P-1 tokens run once and their KV cache is shared by its rows (gradients flow into it), and
    only the last prompt token and the completion run per row: the same function, without computing
    each prompt G times. Without gradient (with it too where ``packed``: ``rl.packed_update``) the lean
    forward runs only on the positions that are read or attended to (``lean_forward.forward``'s ``valid``).
    """
    P, T = prompt_ids.shape[1], completion_ids.shape[1]
    real_p, real_c = prompt_mask.bool().any(0), completion_mask.bool().any(0)
    p0 = min(int(real_p.long().argmax()), P - 1) if bool(real_p.any()) else P - 1  # first prompt column in use
    t1 = int(real_c.nonzero().max()) + 1 if bool(real_c.any()) else 1  # completion columns in use
    asks = _Asks(temperature, with_entropy, with_logits, with_hidden, chunk_elements, packed)
    if p0 == 0 and t1 == T:
        return _score(model, prompt_ids, prompt_mask, completion_ids, completion_mask, asks)
    s = _score(model, prompt_ids[:, p0:], prompt_mask[:, p0:], completion_ids[:, :t1], completion_mask[:, :t1], asks)
    pad = T - t1  # right-pad every [B, t1, ...] output back to [B, T, ...] with zeros (masked positions)
    for name in ("logprobs", "entropy", "logits", "hidden", "hidden_pre"):
        v = getattr(s, name)
        if v is not None and pad:
            setattr(s, name, torch.nn.functional.pad(v, (0, 0) * (v.dim() - 2) + (0, pad)))
    return s


@dataclass(frozen=True)
class _Asks:
    """What :func:`score` is asked for."""

    temperature: float
    with_entropy: bool
    with_logits: bool
    with_hidden: bool
    chunk_elements: int
    packed: bool = False


def _score(model, prompt_ids, prompt_mask, completion_ids, completion_mask, asks: _Asks) -> Scores:
    P, T = prompt_ids.shape[1], completion_ids.shape[1]
    masked = not bool(prompt_mask.all())
    attn = position_ids = None
    if masked:
        attn = torch.cat([prompt_mask, completion_mask], 1)
        position_ids = (attn.long().cumsum(-1) - 1).clamp(min=0)
    cache = shared_prefix_cache(model, prompt_ids, prompt_mask, position_ids, masked)
    start = P - 1 if cache is not None else 0  # first input position of the pass below
    input_ids = torch.cat([prompt_ids[:, start:], completion_ids], 1)  # [B, P-start+T]
    weight = None if asks.with_logits else lm_head.head_weight(model)
    chunk = 0 if weight is None else lm_head.chunk_tokens(completion_ids.numel(), weight.shape[0], asks.chunk_elements)
    off = P - 1 - start  # where position P-1 sits in that pass
    norm, captured, handle = _norm_hook(model, asks.with_hidden, off, T)
    kwargs = {"output_hidden_states": True} if asks.with_hidden and norm is None else {}
    if cache is not None:
        kwargs.update({lean_forward.cache_name(): cache, "use_cache": True})
    masks = prompt_mask[:, start:], completion_mask
    plain = handle is None and not kwargs.get("output_hidden_states")
    call = _forward_call(model, plain, masks, head=not chunk, packed=asks.packed)
    try:
        if not masked:
            # No left padding: plain causal attention is exact for every real token (right padding
            # only follows them), and lets attention take its unmasked fast path.
            out = call(input_ids=input_ids, logits_to_keep=T + 1, **kwargs)
        else:
            out = call(
                input_ids=input_ids,
                attention_mask=attn,
                position_ids=position_ids[:, start:],
                logits_to_keep=T + 1,
                **kwargs,
            )
    finally:
        if handle is not None:
            handle.remove()
    scores = _head(out, weight, chunk, completion_ids, asks)
    if asks.with_hidden:
        if norm is not None:
            scores.hidden, scores.hidden_pre = captured["post"], captured["pre"]
        else:
            scores.hidden = out.hidden_states[-1][:, off : off + T].detach()
    return scores


def _norm_hook(model, with_hidden: bool, off: int, T: int):
    """(the final norm, what its hook captures, the hook's handle) where hidden states are asked for and
    the model has a final norm: its input and output at positions ``off .. off+T-1``; else (None, {}, None)."""
    norm = _final_norm(model) if with_hidden else None
    captured: dict[str, Tensor] = {}
    if norm is None:
        return None, captured, None

    def hook(_module, args, output):
        captured["pre"], captured["post"] = args[0][:, off : off + T].detach(), output[:, off : off + T].detach()

    return norm, captured, norm.register_forward_hook(hook)


def _forward_call(model, plain: bool, masks: tuple[Tensor, Tensor], head: bool, packed: bool = False):
    """The forward :func:`_score` calls: the lean one where the model supports it and nothing is read
    off the model's modules (``plain``), else the model's own; without the LM head when ``head`` is
    False (the output's ``hidden`` then holds what the head reads). ``masks``: the pass's prompt and
    completion masks."""
    if plain and lean_forward.supports(model):
        # the same operations without the module machinery; without gradient (or ``packed``), only on
        # the positions that are read or attended to (the prompts' real tokens and each row's completion)
        kept = torch.cat(masks, 1).bool() if packed or not torch.is_grad_enabled() else None
        return functools.partial(lean_forward.forward, model, valid=kept, head=head)
    return model if head else functools.partial(lm_head.decoder_forward, model)


def _head(out, weight: Tensor | None, chunk: int, completion_ids: Tensor, asks: _Asks) -> Scores:
    """The log-probs (and entropies, logits) of the completion tokens from the forward's output: from
    its logits, or from its last hidden states ``chunk`` tokens at a time (``chunk`` > 0)."""
    if chunk:
        hidden = out.hidden[:, :-1]  # [B, T, H]: position P-1+t predicts completion token t
        logprobs, entropy = lm_head.logprobs_entropy(
            hidden.reshape(-1, hidden.shape[-1]),
            weight,
            completion_ids.reshape(-1),
            asks.temperature,
            chunk,
            asks.with_entropy,
        )
        shape = completion_ids.shape
        return Scores(logprobs.view(shape), None if entropy is None else entropy.view(shape))
    logits = out.logits[:, :-1]  # [B, T, V]: position P-1+t predicts completion token t
    scores = Scores(token_logprobs(logits, completion_ids, asks.temperature), None)
    if asks.with_entropy or asks.with_logits:
        with torch.no_grad():
            scaled = logits.detach().float() / asks.temperature
            if asks.with_entropy:
                scores.entropy = entropy_from_logits(scaled)
            if asks.with_logits:
                scores.logits = scaled
    return scores


@dataclass
class Scored:
    """What :func:`score_batch` leaves for :func:`bench.engine.step.update`: whether the update is
    fused (its training forward gives the behaviour log-probs), and, when ARCA's residual is taken
    against that training forward, the adapter-off pass it is taken against."""

    fused: bool
    adapter_off: Scores | None = None
    from_rollout: bool = False  # the behaviour log-probs are the rollout's (rl.old_logprobs), not a pass's


def forward(model, batch: RolloutBatch, rl: RLConfig, with_entropy: bool, **kw) -> Scores:
    """``model``'s log-probs (and what ``kw`` asks for) of the batch's completions, at the sampling temperature."""
    ids = (batch.prompt_ids, batch.prompt_mask, batch.completion_ids, batch.completion_mask)
    temperature, chunk = rl.sampling.temperature or 1.0, rl.lm_head_chunk_elements
    return score(model, *ids, temperature, with_entropy, chunk_elements=chunk, packed=rl.packed_update, **kw)


def reference(policy, ref_policy):
    """The reference policy: the base model with the adapter disabled under LoRA, else the frozen copy."""
    if hasattr(policy, "disable_adapter"):

        @contextlib.contextmanager
        def disabled():
            with policy.disable_adapter():
                yield policy

        return disabled()
    return contextlib.nullcontext(ref_policy)


@torch.no_grad()
def score_batch(
    policy, ref_policy, method: Method, batch: RolloutBatch, *, rl: RLConfig, fused: bool | None = None
) -> Scored:
    """Fill what the method needs that the training forward cannot provide, for an update that is
    ``fused`` or not (by default :func:`is_fused` decides). When the method needs ``hidden_residual``
    and the update is fused, the residual is taken against the training forward: the returned
    :class:`Scored` then carries the adapter-off pass.

    Under a token budget (``rl.micro_batch_tokens``) the passes run one micro-batch at a time and
    their outputs are written back into the batch's tensors (a fused update never splits)."""
    fused = is_fused(batch, rl) if fused is None else fused
    rollout = not fused and _from_rollout(method, batch, rl)
    parts = microbatch.split(batch, 0 if fused else rl.micro_batch_tokens)
    if len(parts) == 1:
        return Scored(fused, _score_part(policy, ref_policy, method, batch, rl, fused, rollout), rollout)
    for index in parts:
        part = batch.select(index)
        _score_part(policy, ref_policy, method, part, rl, False, rollout)
        microbatch.write_back(batch, part, index)
    return Scored(fused, from_rollout=rollout)


def _score_part(
    policy, ref_policy, method: Method, batch: RolloutBatch, rl: RLConfig, fused: bool, rollout: bool
) -> Scores | None:
    req = method.required
    separate = "hidden_residual_separate" in req  # the adapter-on states from their own pass even when fused
    hidden = "hidden_residual" in req or separate
    pol = None
    if rollout:  # the behaviour log-probs and entropies the rollout recorded: no pass of the policy
        batch.old_logprobs, batch.entropy = batch.extra["behaviour_logprobs"], batch.extra["behaviour_entropy"]
    elif not fused or "ref_kl" in req or separate:
        with_hidden = hidden or "hidden_states" in req
        pol = forward(policy, batch, rl, with_entropy=True, with_logits="ref_kl" in req, with_hidden=with_hidden)
        batch.old_logprobs, batch.entropy = pol.logprobs, pol.entropy
        if "hidden_states" in req:
            batch.hidden_states = pol.hidden
    if not req & REFERENCE_NEEDS:
        return None
    with reference(policy, ref_policy) as ref:
        r = forward(ref, batch, rl, with_entropy="ref_entropy" in req, with_logits="ref_kl" in req, with_hidden=hidden)
    batch.ref_logprobs = r.logprobs
    batch.ref_entropy = r.entropy
    if "ref_kl" in req:  # exact KL(pi_old || pi_ref) over the vocabulary at each position
        logp, logq = torch.log_softmax(pol.logits, -1), torch.log_softmax(r.logits, -1)
        batch.ref_kl = (logp.exp() * (logp - logq)).sum(-1)
    if hidden and pol is not None:
        set_residual(batch, pol, r)
    return r if hidden and fused and not separate else None


def _from_rollout(method: Method, batch: RolloutBatch, rl: RLConfig) -> bool:
    """Whether the behaviour log-probs and entropies come from what the rollout recorded (sampling.BEHAVIOUR;
    ``rl.old_logprobs``): it recorded them for every completion token, and the method asks for nothing
    only a pass of the policy gives (the exact KL's logits, hidden states)."""
    own = method.required & {"ref_kl", "hidden_residual", "hidden_residual_separate", "hidden_states"}
    lp, ent = batch.extra.get("behaviour_logprobs"), batch.extra.get("behaviour_entropy")
    if own or rl.old_logprobs == "rescore" or lp is None or ent is None or lp.shape != batch.completion_mask.shape:
        return False
    return bool(torch.isfinite(lp[batch.completion_mask.bool()]).all())


def is_fused(batch: RolloutBatch, rl: RLConfig) -> bool:
    """Whether the update is one on-policy optimizer step whose training forward also gives the
    behaviour log-probs (no scoring pass): one epoch, one minibatch, and the batch in one micro-batch
    on every process (they agree, so every process runs the same passes)."""
    if rl.ppo_epochs != 1 or rl.minibatches != 1:
        return False
    split = len(microbatch.split(batch, rl.micro_batch_tokens)) > 1
    return not bool(all_sum(torch.tensor([float(split)], device=batch.completion_mask.device))[0])


def set_residual(batch: RolloutBatch, on: Scores, off: Scores) -> None:
    """ARCA's salience input: ||h_adapter_on - h_adapter_off||_2 per token, after and before the final norm."""
    batch.hidden_residual = (on.hidden - off.hidden).float().norm(dim=-1)
    if on.hidden_pre is not None and off.hidden_pre is not None:
        batch.extra["hidden_residual_prenorm"] = (on.hidden_pre - off.hidden_pre).float().norm(dim=-1)
