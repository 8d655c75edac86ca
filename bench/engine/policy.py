"""Policies: the tiny Qwen3 family built from config, a character-level tokenizer that needs no
download, loading through ``transformers``' ordinary ``from_pretrained`` path, and the scoring
forward that turns (prompt, completion) tokens into per-token log-probs and entropies.
"""

from __future__ import annotations

import json
import shutil
import string
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import Tensor

from bench.errors import CreditBenchError, did_you_mean
from bench.numerics import entropy_from_logits, token_logprobs

# name -> (hidden, layers, heads, kv_heads, intermediate); head_dim 32, tied embeddings.
TINY_SIZES = {
    "tiny-500k": (128, 3, 4, 2, 320),
    "tiny-2m": (192, 5, 6, 2, 512),
    "tiny-8m": (320, 6, 10, 5, 1024),
}
SPECIAL_TOKENS = ["<pad>", "<eos>", "<unk>"]
CHARS = [c for c in string.printable if c not in "\t\r\x0b\x0c"]  # letters, digits, punctuation, ' ', '\n'


def char_tokenizer():
    """A character-level tokenizer (one token per printable character plus pad/eos/unk)."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {t: i for i, t in enumerate(SPECIAL_TOKENS + CHARS)}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")
    tok.decoder = decoders.Fuse()
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, pad_token="<pad>", eos_token="<eos>", unk_token="<unk>", padding_side="left"
    )


def tiny_config(size: str, vocab_size: int, max_positions: int = 256):
    from transformers import Qwen3Config

    if size not in TINY_SIZES:
        raise did_you_mean("model size", size, TINY_SIZES)
    hidden, layers, heads, kv, inter = TINY_SIZES[size]
    return Qwen3Config(
        vocab_size=vocab_size,
        hidden_size=hidden,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv,
        head_dim=32,
        intermediate_size=inter,
        max_position_embeddings=max_positions,
        rope_theta=10000.0,
        tie_word_embeddings=True,
        pad_token_id=0,
        eos_token_id=1,
        bos_token_id=None,
    )


def build_tiny(size: str, seed: int = 0, max_positions: int = 256):
    """A randomly initialised tiny Qwen3 policy and its tokenizer."""
    from transformers import Qwen3ForCausalLM

    tokenizer = char_tokenizer()
    torch.manual_seed(seed)
    model = Qwen3ForCausalLM(tiny_config(size, vocab_size=len(tokenizer), max_positions=max_positions))
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    return model, tokenizer


def load_policy(name_or_path: str | Path, dtype: str = "float32", accepts: str | None = None):
    """Load a causal LM and its tokenizer through ``from_pretrained`` (a local directory or a
    Hugging Face Hub id). Padding is on the left, as batched generation needs. ``accepts``: what the
    calling command takes as a model, for the error (default: what a training run takes)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from bench.engine.pretrained import resolve

    name_or_path = resolve(name_or_path)  # a fetched pretrained model's short name -> its cached copy
    adapter = Path(str(name_or_path)).expanduser() / "adapter_config.json"
    if adapter.is_file():  # a trained LoRA policy: its base, the adapter merged in
        return _load_adapter(adapter.parent, dtype)
    from safetensors import SafetensorError

    try:
        tokenizer = AutoTokenizer.from_pretrained(str(name_or_path))
        model = AutoModelForCausalLM.from_pretrained(str(name_or_path), dtype=getattr(torch, dtype))
    except SafetensorError as e:  # a truncated or overwritten weights file
        raise CreditBenchError(
            f"cannot load model {str(name_or_path)!r}: its weights file is damaged ({str(e).splitlines()[0]}); "
            "save or download it again"
        ) from None
    except (OSError, ValueError) as e:  # missing files, unreachable Hub, malformed repo id
        raise CreditBenchError(
            f"cannot load model {str(name_or_path)!r}: {str(e).splitlines()[0]} "
            f"(give {accepts or 'a local directory, a Hub id reachable from this machine, or a tiny size'}"
            f"{'' if accepts else ': ' + ', '.join(TINY_SIZES)})"
        ) from None
    tokenizer.padding_side = "left"
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    return model, tokenizer


def _load_adapter(directory: Path, dtype: str):
    from peft import PeftModel

    base = json.loads((directory / "adapter_config.json").read_text()).get("base_model_name_or_path")
    if not base:
        raise CreditBenchError(f"{directory}/adapter_config.json names no base model (base_model_name_or_path)")
    model, tokenizer = load_policy(base, dtype)
    return PeftModel.from_pretrained(model, str(directory)).merge_and_unload(), tokenizer


def full_state(model) -> dict[str, Tensor] | None:
    """The whole weights of an FSDP-sharded ``model`` on the first process (on CPU; {} elsewhere), for
    :func:`save_policy`; None for a model that is not sharded. A collective under FSDP: every process
    calls it."""
    from torch.distributed.tensor import DTensor

    if not any(isinstance(p, DTensor) for p in model.parameters()):
        return None
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    return get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))


def save_policy(model, tokenizer, out: Path, state: dict[str, Tensor] | None = None) -> Path:
    """The trained policy through ``save_pretrained`` (under LoRA the adapter alone, whose config
    names its base by absolute path), written beside ``out`` and renamed into place, so a crash
    never leaves half a policy there. :func:`load_policy` reads either kind back. ``state``: the
    whole weights of a sharded model (:func:`full_state`), saved in place of its shards."""
    out = Path(out)
    tmp = out.with_name(out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(str(tmp), **({} if state is None else {"state_dict": dict(state)}))  # it empties the dict
    tokenizer.save_pretrained(str(tmp))
    adapter = tmp / "adapter_config.json"
    if adapter.is_file():
        config = json.loads(adapter.read_text())
        base = config.get("base_model_name_or_path")
        if base and Path(base).expanduser().is_dir():
            config["base_model_name_or_path"] = str(Path(base).expanduser().resolve())
            adapter.write_text(json.dumps(config, indent=2))
    shutil.rmtree(out, ignore_errors=True)
    tmp.rename(out)
    return out


def add_lora(model, rank: int, alpha: float, dropout: float, targets: list[str]):
    """Wrap ``model`` with peft LoRA adapters (B initialised to zero, so the adapted model starts
    equal to the base); only the adapters are trainable."""
    from peft import LoraConfig, get_peft_model

    target = "all-linear" if targets == ["all-linear"] else list(targets)
    try:
        # the adapter's random init must not shift the seeded stream the rollouts draw from, so a
        # LoRA run's step-0 evaluation samples exactly what a full fine-tuning run's does
        with torch.random.fork_rng(devices=[]):
            return get_peft_model(
                model, LoraConfig(r=rank, lora_alpha=alpha, lora_dropout=dropout, target_modules=target, bias="none")
            )
    except ValueError as e:  # no module matched the targets
        raise CreditBenchError(f"model.lora.targets {targets}: {str(e).splitlines()[0]}") from None


def enable_gradient_checkpointing(model) -> None:
    """Activation checkpointing of every decoder layer (transformers' own, non-reentrant, so it
    composes with LoRA's frozen base and with DDP)."""
    kwargs = {"use_reentrant": False}
    if hasattr(model, "activation_checkpointing_enable"):  # transformers >= 5.23 renamed it
        model.activation_checkpointing_enable(activation_checkpointing_kwargs=kwargs)
    else:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs)
    model.config.use_cache = False  # generate() still passes use_cache=True and gets a KV cache


def num_parameters(model, trainable: bool = False) -> int:
    if trainable:
        return sum(p.numel() for p in model.parameters() if p.requires_grad)
    return sum(p.numel() for p in model.parameters())


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
    cache = getattr(out, "past_key_values", None)
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
) -> Scores:
    """Per-token log-probs (and entropies, logits, last hidden states) of the completions under ``model``.

    Prompts are left-padded and completions right-padded; positions count real tokens only, so a
    padded row is scored exactly like an unpadded one. Logits are only computed for the positions
    that predict completion tokens; the entropy (a pass over the vocabulary) only when asked for.
    Hidden states are read with a hook on the final norm (its input and output), so the other
    layers' states are never kept; position ``P-1+t`` (the one that predicts token ``t``) is returned.

    No work is spent on padding that no row needs: prompt columns that are padding in every row
    (e.g. a minibatch without the longest prompt) and completion columns past the longest
    completion are cut before the forward; the outputs keep the [B, T] shape (0 at those masked
    positions). When rows repeat prompts (a batch of G samples per prompt), each distinct prompt's
    first P-1 tokens run once and their KV cache is shared by its rows (gradients flow into it), and
    only the last prompt token and the completion run per row: the same function, without computing
    each prompt G times.
    """
    P, T = prompt_ids.shape[1], completion_ids.shape[1]
    real_p, real_c = prompt_mask.bool().any(0), completion_mask.bool().any(0)
    p0 = min(int(real_p.long().argmax()), P - 1) if bool(real_p.any()) else P - 1  # first prompt column in use
    t1 = int(real_c.nonzero().max()) + 1 if bool(real_c.any()) else 1  # completion columns in use
    if p0 == 0 and t1 == T:
        return _score(
            model,
            prompt_ids,
            prompt_mask,
            completion_ids,
            completion_mask,
            temperature,
            with_entropy,
            with_logits,
            with_hidden,
        )
    s = _score(
        model,
        prompt_ids[:, p0:],
        prompt_mask[:, p0:],
        completion_ids[:, :t1],
        completion_mask[:, :t1],
        temperature,
        with_entropy,
        with_logits,
        with_hidden,
    )
    pad = T - t1  # right-pad every [B, t1, ...] output back to [B, T, ...] with zeros (masked positions)
    for name in ("logprobs", "entropy", "logits", "hidden", "hidden_pre"):
        v = getattr(s, name)
        if v is not None and pad:
            setattr(s, name, torch.nn.functional.pad(v, (0, 0) * (v.dim() - 2) + (0, pad)))
    return s


def _score(
    model,
    prompt_ids,
    prompt_mask,
    completion_ids,
    completion_mask,
    temperature: float,
    with_entropy: bool,
    with_logits: bool,
    with_hidden: bool,
) -> Scores:
    P, T = prompt_ids.shape[1], completion_ids.shape[1]
    masked = not bool(prompt_mask.all())
    attn = position_ids = None
    if masked:
        attn = torch.cat([prompt_mask, completion_mask], 1)
        position_ids = (attn.long().cumsum(-1) - 1).clamp(min=0)
    cache = shared_prefix_cache(model, prompt_ids, prompt_mask, position_ids, masked)
    start = P - 1 if cache is not None else 0  # first input position of the pass below
    input_ids = torch.cat([prompt_ids[:, start:], completion_ids], 1)  # [B, P-start+T]
    off = P - 1 - start  # where position P-1 sits in that pass
    captured: dict[str, Tensor] = {}
    norm = _final_norm(model) if with_hidden else None
    handle = None
    if norm is not None:

        def hook(_module, args, output):
            captured["pre"], captured["post"] = args[0][:, off : off + T].detach(), output[:, off : off + T].detach()

        handle = norm.register_forward_hook(hook)
    kwargs = {"output_hidden_states": True} if with_hidden and norm is None else {}
    if cache is not None:
        kwargs.update(past_key_values=cache, use_cache=True)
    try:
        if not masked:
            # No left padding: plain causal attention is exact for every real token (right padding
            # only follows them), and lets attention take its unmasked fast path.
            out = model(input_ids=input_ids, logits_to_keep=T + 1, **kwargs)
        else:
            out = model(
                input_ids=input_ids,
                attention_mask=attn,
                position_ids=position_ids[:, start:],
                logits_to_keep=T + 1,
                **kwargs,
            )
    finally:
        if handle is not None:
            handle.remove()
    logits = out.logits[:, :-1]  # [B, T, V]: position P-1+t predicts completion token t
    logprobs = token_logprobs(logits, completion_ids, temperature)
    scores = Scores(logprobs, None)
    if with_hidden:
        if norm is not None:
            scores.hidden, scores.hidden_pre = captured["post"], captured["pre"]
        else:
            scores.hidden = out.hidden_states[-1][:, off : off + T].detach()
    if with_entropy or with_logits:
        with torch.no_grad():
            scaled = logits.detach().float() / temperature
            if with_entropy:
                scores.entropy = entropy_from_logits(scaled)
            if with_logits:
                scores.logits = scaled
    return scores
