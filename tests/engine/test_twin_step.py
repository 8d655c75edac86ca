"""A credit method and its credit-off twin on the same seed: the same first rollout batch, the same
groups kept (DAPO's refills too), the same behaviour log-probs and entropies and the same advantage
signs -- only the per-token credit differs (a real tiny policy, the arithmetic task, the engine's own
rollout and scoring; the untrained policy's rewards are then set to mixed groups)."""

import itertools

import pytest
import torch

from bench.config import RLConfig, SamplingConfig
from bench.engine.rollout import HFRolloutEngine
from bench.engine.sampling import RolloutSampler, train_rollouts
from bench.engine.scoring import score_batch
from bench.models.policy import build_tiny
from bench.numerics import aggregate
from bench.options import build_config
from bench.registry import METHODS, TASKS


@pytest.fixture(scope="module")
def setup():
    policy, tok = build_tiny("tiny-500k", seed=0)
    ref, _ = build_tiny("tiny-500k", seed=0)  # the frozen reference of the KL term
    task = TASKS.get("arithmetic")()
    rl = RLConfig(prompts_per_step=4, group_size=4, minibatches=2, sampling=SamplingConfig(max_new_tokens=8))
    return policy, ref, tok, task, rl


def _step(setup, method):
    """The first RL step's batch as the method trains on it, scored, and its effective credit at ratio 1."""
    policy, ref, tok, task, rl = setup
    rows = list(task.load("train").select(range(40)))
    fresh = itertools.count(rl.prompts_per_step)
    refill = lambda n: [rows[next(fresh)] for _ in range(n)]  # noqa: E731
    sampler = RolloutSampler(HFRolloutEngine(policy, tok), tok, task, rl.sampling, policy=policy)
    torch.manual_seed(0)
    batch = train_rollouts(sampler, method, rows[: rl.prompts_per_step], rl, refill).batch
    batch.rewards = torch.arange(batch.size).remainder(2).float()  # an untrained policy solves nothing: mix
    batch.correct = batch.rewards > 0
    score_batch(policy, ref, method, batch, rl=rl, fused=False)
    credit = method.credit(batch)
    logprobs = batch.old_logprobs.clone().requires_grad_()
    out = method.loss(batch, logprobs, credit)
    mask = batch.completion_mask if out.mask is None else out.mask
    aggregate(out.loss, mask, method.config.aggregation, max_len=batch.max_new_tokens).backward()
    return batch, -logprobs.grad


@pytest.mark.parametrize(
    ("name", "options"),
    [("entropy_top", {"max_gen_batches": 2}), ("s_trace", {}), ("grpo_lambda", {}), ("p_trace", {})],
)
def test_the_twin_sees_the_same_batch_and_differs_only_in_credit(setup, name, options):
    cls = METHODS.get(name)
    method = cls(cls.Config(**options))
    twin = cls(build_config(cls.Config, {**options, **method.twin()}, name))
    b, c = _step(setup, method)
    tb, tc = _step(setup, twin)
    for key in ("completion_ids", "completion_mask", "group_ids", "rewards", "old_logprobs", "entropy"):
        assert torch.equal(getattr(b, key), getattr(tb, key)), key  # rollouts, filtering, behaviour: the same
    assert torch.equal(cls.credit.__get__(method)(b).sign(), cls.credit.__get__(twin)(tb).sign())
    mixed = c.abs().sum(-1) > 0
    assert torch.equal(mixed, tc.abs().sum(-1) > 0)  # the same rows get credit
    valid = b.completion_mask.bool()
    spread = lambda g: max(float(g[i][valid[i]].abs().std()) for i in range(len(g)) if mixed[i] and valid[i].sum() > 1)  # noqa: E731
    assert spread(tc) < 1e-6 < spread(c)  # the twin's credit is uniform within each completion, the method's is not
