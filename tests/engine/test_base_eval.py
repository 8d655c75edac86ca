"""The base policy's eval, computed once per seed and reused (bench.engine.base_eval): a run that
reuses it is bit-identical to one that computes it -- its eval history, its training and its final
numbers -- for its own method and for another method of the same seed; another seed, other weights or
another eval setting is another entry."""

import dataclasses
import json

import pytest
import torch

from bench.config import (
    EvalConfig,
    MethodSpec,
    ModelConfig,
    RLConfig,
    RunConfig,
    SamplingConfig,
    TaskSpec,
    TrackingConfig,
)
from bench.engine import base_eval
from bench.run.train import run
from tests.engine.test_blame import NoCapitals  # noqa: F401  (registers "no-capitals": a random policy earns rewards)

NUMERICS = {"cpu": "test"}


@pytest.fixture
def spy(monkeypatch):
    """Each base-eval lookup's outcome, in order: True for a reused eval, False for one computed."""
    seen = []
    lookup = base_eval.BaseEvalCache.lookup

    def recording(self, module):
        out = lookup(self, module)
        if not module.rl_step:
            seen.append(out is not None)
        return out

    monkeypatch.setattr(base_eval.BaseEvalCache, "lookup", recording)
    return seen


def _cfg(policy_dir, root, method="grpo", reuse=True, seed=0, **eval_kw):
    return RunConfig(
        seed=seed,
        model=ModelConfig(name=str(policy_dir)),
        task=TaskSpec(name="no-capitals", options={"train_size": 200}),
        method=MethodSpec(name=method),
        rl=RLConfig(steps=2, prompts_per_step=4, group_size=4, lr=1e-3, sampling=SamplingConfig(max_new_tokens=8)),
        eval=EvalConfig(**{"every": 1, "n": 2, "k": [1], "num_problems": 6, "reuse_base": reuse} | eval_kw),
        tracking=TrackingConfig(uri=f"sqlite:///{root / 'mlflow.db'}", cache_dir=str(root / "cache")),
        threads=1,
    )


def _numbers(result: dict) -> tuple:
    """What a run computed: every eval point's numbers and per-problem counts, and its training means."""
    history = [(p["step"], p["samples"], p["eval"], p["per_problem"]) for p in result["history"]]
    return json.dumps([history, result["train"], result["tokens"]], sort_keys=True)  # NaN equals NaN here


def test_a_reused_base_eval_leaves_every_number_unchanged(policy_dir, tmp_path, spy):
    computed = run(_cfg(policy_dir, tmp_path, reuse=False), progress=False)
    stored = run(_cfg(policy_dir, tmp_path), progress=False)
    reused = run(_cfg(policy_dir, tmp_path), progress=False)
    assert spy == [False, True]  # the first reusing run stores it, the second takes it
    assert len(list((tmp_path / "cache" / base_eval.FOLDER).glob("*.pt"))) == 1
    assert _numbers(stored) == _numbers(computed) == _numbers(reused)

    other = run(_cfg(policy_dir, tmp_path, method="s_trace"), progress=False)  # another method, the same seed
    other_computed = run(_cfg(policy_dir, tmp_path, method="s_trace", reuse=False), progress=False)
    assert spy == [False, True, True]
    assert _numbers(other) == _numbers(other_computed)
    base = [{k: run["history"][0][k] for k in ("eval", "per_problem")} for run in (other, computed)]
    assert json.dumps(base[0]) == json.dumps(base[1])  # the same base eval (its blame alignment is the method's)
    assert _numbers(other) != _numbers(computed)  # it trained differently from the same base eval
    assert computed["train"]["train_reward"] > 0 and computed["history"][0]["eval"]["no-capitals"]["pass_at_1"] > 0

    run(_cfg(policy_dir, tmp_path, seed=1), progress=False)  # another seed: its own eval
    run(_cfg(policy_dir, tmp_path, num_problems=5), progress=False)  # another eval setting
    assert spy == [False, True, True, False, False]
    assert len(list((tmp_path / "cache" / base_eval.FOLDER).glob("*.pt"))) == 3


def test_the_key_covers_the_weights_the_random_state_and_the_problems(policy_dir, tmp_path):
    from bench.models.policy import load_policy

    policy, _ = load_policy(str(policy_dir), "float32")
    cache = base_eval.BaseEvalCache.for_run(_cfg(policy_dir, tmp_path), NUMERICS)
    rows = [[{"id": "a", "prompt": "1+1", "answer": "2"}]]
    torch.manual_seed(0)
    key = cache._key(policy, rows)
    torch.manual_seed(0)
    assert cache._key(policy, rows) == key
    torch.rand(1)
    assert cache._key(policy, rows) != key  # one draw later
    torch.manual_seed(1)
    assert cache._key(policy, rows) != key  # another seed
    torch.manual_seed(0)
    assert cache._key(policy, [[{"id": "a", "prompt": "1+1", "answer": "3"}]]) != key
    with torch.no_grad():
        next(policy.parameters()).view(-1)[0] += 1e-6
    torch.manual_seed(0)
    assert cache._key(policy, rows) != key
    other = base_eval.BaseEvalCache.for_run(_cfg(policy_dir, tmp_path, n=3, k=[1]), NUMERICS)
    later = base_eval.BaseEvalCache.for_run(_cfg(policy_dir, tmp_path, every=7), NUMERICS)
    assert other.settings != cache.settings and later.settings == cache.settings  # when later evals fall: no matter


def test_it_applies_to_one_cpu_process_sampling_with_generate(policy_dir, tmp_path):
    cfg = _cfg(policy_dir, tmp_path)
    assert base_eval.applies(cfg, engine_separate=False) == (not torch.cuda.is_available())
    assert not base_eval.applies(cfg, engine_separate=True)  # vLLM keeps its own sampler state
    assert not base_eval.applies(dataclasses.replace(cfg, eval=dataclasses.replace(cfg.eval, reuse_base=False)), False)
    two = dataclasses.replace(cfg, trainer=dataclasses.replace(cfg.trainer, devices=2))
    assert not base_eval.applies(two, False)
