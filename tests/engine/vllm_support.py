"""What the vLLM engine tests share (tests/engine/test_vllm.py: the engine against the HF engine;
tests/engine/test_vllm_training.py: RL steps and runs through it): the prompts, greedy decoding,
the tiny policy they sample from, one open engine at a time, and the comparison of two rollouts."""

import torch

from bench.config import RolloutConfig, SamplingConfig
from bench.engine.vllm_engine import VLLMRolloutEngine
from bench.models.policy import build_tiny

PROMPTS = ["12+3=", "7*8=", "What is 5-2?", "99+1=", "a", "bb", "(4+4)*2=", "0"]
GREEDY = SamplingConfig(temperature=0, max_new_tokens=24)
FIELDS = ("prompt_ids", "prompt_mask", "completion_ids", "completion_mask", "truncated")


def tiny_policy():
    """tiny-500k, random, with the eos embedding (tied to its logit) scaled up so that greedy
    completions end at eos at different lengths and others run to the budget: both paths of the
    mask contract are exercised."""
    model, tok = build_tiny("tiny-500k", seed=0)
    with torch.no_grad():
        model.model.embed_tokens.weight[tok.eos_token_id] *= 3
    return model, tok


class Engines:
    """vLLM keeps one in-process engine at a time: ``open`` returns the open engine when it was
    built with the same rollout options from the tiny base, else closes it and builds another."""

    def __init__(self, base):
        self.base, self.key, self.engine = base, None, None

    def open(self, policy=None, **options) -> VLLMRolloutEngine:
        key = tuple(sorted(options.items())) if policy is None else object()
        if self.engine is None or key != self.key:
            self.close()
            model, tok = (policy, self.base[1]) if policy is not None else self.base
            threads, set_threads, rng = torch.get_num_threads(), torch.set_num_threads, torch.get_rng_state()
            self.engine = VLLMRolloutEngine(model, tok, RolloutConfig(engine="vllm", kv_cache_gb=0.25, **options))
            self.engine.built_cleanly = (
                torch.get_num_threads() == threads
                and torch.set_num_threads is set_threads
                and torch.equal(torch.get_rng_state(), rng)
            )
            self.key = key
        return self.engine

    def close(self) -> None:
        if self.engine is not None:
            self.engine.close()
        self.engine = None


def assert_same(a, b):
    for f in FIELDS:
        x, y = getattr(a, f), getattr(b, f)
        assert x.shape == y.shape and torch.equal(x, y), f
    assert a.texts == b.texts


def perturb(model, scale=0.02, seed=1):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            if p.requires_grad:
                p.add_(torch.randn(p.shape, generator=g) * scale)
