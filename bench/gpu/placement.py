"""Where a benchmark's model runs its forwards: a model of more than ``LARGE`` parameters only on a GPU.

A forward of a Hub-sized model on 2 CPU threads takes minutes where a GPU takes a fraction of a second,
so one that runs there by mistake spends a whole GPU pass (the Qwen3-1.7B check timed out twice while its
credit map sampled on the CPU). The scripts that train a Hub architecture (``bench.perf.scale``,
``bench.perf.trl``) resolve their device and model shape with :func:`place`, which counts the model's
parameters on the meta device (no memory, no weights):

* ``cuda``: any model, its shape as asked;
* ``cpu``: a model of at most ``LARGE`` parameters (the tiny sizes, a ``--shrink``-ed copy);
* ``cpu`` for a larger one: refused in one line, unless ``GPU_CHECK_DEVICE=cpu`` (bench/perf/gpu_check.sh
  tried on the CPU), where :data:`SMOKE_SHAPE` replaces its shape: the same architecture, one narrow layer.

tests/gpu/test_checks.py builds every GPU check's model on the meta device and holds each to this.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.errors import CreditBenchError

LARGE = 100_000_000
# One layer of width 64 and a 4,096-token vocabulary: a smoke run's forwards take milliseconds on the CPU, and
# 128 rows' [tokens x vocab] logits (the TRL comparison's batch) stay small.
SMOKE_SHAPE: dict[str, int] = {
    "num_hidden_layers": 1,
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_attention_heads": 2,
    "num_key_value_heads": 1,
    "head_dim": 32,
    "vocab_size": 4096,
}


@dataclass(frozen=True)
class Placement:
    """Where a model's forwards run and the config fields replaced in it (``overrides``)."""

    device: str
    params: int
    overrides: dict[str, Any] = field(default_factory=dict)


def meta_model(name: str, **overrides: Any):
    """``name`` (a tiny size of bench.models.policy or an architecture of bench.models.hub_archs) as a causal
    LM on the meta device, ``overrides`` replacing config fields."""
    import torch
    from transformers import AutoModelForCausalLM

    from bench.models.hub_archs import architecture
    from bench.models.policy import TINY_SIZES, char_tokenizer, tiny_config

    if name in TINY_SIZES:
        config = tiny_config(name, vocab_size=len(char_tokenizer()))
        for key, value in overrides.items():
            setattr(config, key, value)
    else:
        config = architecture(name, **overrides)
    with torch.device("meta"):
        return AutoModelForCausalLM.from_config(config)


def parameters(name: str, **overrides: Any) -> int:
    """``name``'s parameter count (``overrides`` applied), counted on the meta device."""
    return sum(p.numel() for p in meta_model(name, **overrides).parameters())


def place(name: str, device: str, overrides: Mapping[str, Any] | None = None, env: Mapping[str, str] | None = None):
    """The :class:`Placement` of ``name`` asked to run on ``device`` (see the module docstring); ``env``: the
    environment that may hold GPU_CHECK_DEVICE (default: this process's)."""
    overrides = dict(overrides or {})
    params = parameters(name, **overrides)
    if device == "cuda" or params <= LARGE:
        return Placement(device, params, overrides)
    if device != "cpu":
        raise CreditBenchError(f"unknown device {device!r}; valid: cuda, cpu")
    if (os.environ if env is None else env).get("GPU_CHECK_DEVICE") == "cpu":
        shape = {**overrides, **SMOKE_SHAPE}
        return Placement("cpu", parameters(name, **shape), shape)
    raise CreditBenchError(
        f"{name} has {params / 1e9:.2f}B parameters: its forwards on the CPU would take minutes (over "
        f"{LARGE / 1e6:.0f}M runs on --device cuda only); for a smoke run on the CPU cut it down with --shrink "
        f"(e.g. --shrink num_hidden_layers=1 hidden_size=64), or set GPU_CHECK_DEVICE=cpu for its smoke shape"
    )


def parse_overrides(items: list[str]) -> dict[str, int | float]:
    """``--shrink``'s ``key=value`` items as config fields (numbers)."""
    out: dict[str, int | float] = {}
    for item in items:
        key, _, value = item.partition("=")
        out[key] = int(value) if value.lstrip("-").isdigit() else float(value)
    return out


def save_model(name: str, where: Placement, out: str | Path, seed: int = 0, max_positions: int = 256) -> Path:
    """``name``'s random weights and a tokenizer saved to ``out`` in the shape ``where`` holds (a tiny size
    through bench.models.policy.build_tiny, an architecture through bench.models.hub_archs.random_checkpoint,
    drawn on ``where.device``), loadable with ``from_pretrained``."""
    import torch

    from bench.models.hub_archs import random_checkpoint
    from bench.models.policy import TINY_SIZES, build_tiny

    out = Path(out)
    if name in TINY_SIZES:
        model, tok = build_tiny(name, seed=seed, max_positions=max_positions)
        model.save_pretrained(out)
        tok.save_pretrained(out)
        return out
    random_checkpoint(
        name, out, dtype="float32", seed=seed, max_positions=max_positions, device=where.device, **where.overrides
    )
    if where.device == "cuda":
        torch.cuda.empty_cache()  # the measured processes get the memory
    return out
