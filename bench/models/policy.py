"""Policies: the tiny Qwen3 family built from config, a character-level tokenizer that needs no
download, loading and saving through ``transformers``' and ``peft``'s ordinary paths, LoRA and
activation checkpointing. The forward that scores completions is :mod:`bench.engine.scoring`.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import string
from pathlib import Path

import torch
from torch import Tensor

from bench.errors import CreditBenchError, did_you_mean

# name -> (hidden, layers, heads, kv_heads, intermediate); head_dim 32, tied embeddings.
TINY_SIZES = {
    "tiny-500k": (128, 3, 4, 2, 320),
    "tiny-2m": (192, 5, 6, 2, 512),
    "tiny-8m": (320, 6, 10, 5, 1024),
}
SIZE_LR = {"tiny-8m": 3e-4}
"""The warm-start's rate where a size's is not 1e-3: tiny-8m's loss stays at 0.58 for 500 steps at 1e-3
(check accuracy 0.10, where tiny-2m's left that plateau by step 575); its base is built at 3e-4."""


def sized(cfg, size: str):
    """``cfg`` with its rate resolved for ``size`` (:data:`SIZE_LR`, else 1e-3) where it gives none; the
    resolved settings are the ones a base's key is made of, so tiny-500k's and tiny-2m's keys are those
    of their pinned bases."""
    return cfg if cfg.lr is not None else dataclasses.replace(cfg, lr=SIZE_LR.get(size, 1e-3))


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


def matrix_params(config) -> int:
    """A decoder's matrix parameters, the ones every position multiplies by (attention's q, k, v, o and
    the gated MLP's three; no embedding, no norm): from a transformers config."""
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    h, heads, kv = config.hidden_size, config.num_attention_heads, config.num_key_value_heads
    per_layer = 2 * h * heads * head_dim + 2 * h * kv * head_dim + 3 * h * config.intermediate_size
    return per_layer * config.num_hidden_layers


def tiny_matrix_params(size: str) -> int:
    """:func:`matrix_params` of a tiny size (with the character vocabulary; the vocabulary does not enter)."""
    return matrix_params(tiny_config(size, len(SPECIAL_TOKENS) + len(CHARS)))


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

    from bench.models.pretrained import resolve

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
