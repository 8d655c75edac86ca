"""An update handed its first minibatch's gradient (bench.engine.step.FirstGradient) by an update at
another learning rate, from the same weights on the same batch under the same seed, is the update that
computes it, to the bit: the weights after, the optimizer's state and every statistic, for every method
of the registry (2 epochs x 2 minibatches in random order, so the later minibatches follow the shared one's
RNG). GCPO's negative-prompt log-probs, which its augment scores, are given."""

import copy

import pytest
import torch

from bench.config import RLConfig
from bench.engine import step
from bench.engine.scoring import score_batch
from bench.engine.step import FirstGradient, Optimization, make_optimizer, update
from bench.models.policy import add_lora, build_tiny, char_tokenizer
from bench.registry import METHODS
from methods.gcpo import NEGATIVE
from tests.engine.test_step import GROUPS, G, fixed_batch

RATES = (1e-3, 3e-4)


def _update(base, ref, name: str, lr: float, shared: FirstGradient | None):
    cls, tok = METHODS.get(name), char_tokenizer()
    policy, batch = copy.deepcopy(base).train(), fixed_batch(tok)
    batch.extra[NEGATIVE] = -torch.rand(batch.completion_ids.shape, generator=torch.Generator().manual_seed(2))
    rl = RLConfig(steps=2, prompts_per_step=GROUPS, group_size=G, ppo_epochs=2, minibatches=2, lr=lr)
    opt, sched = make_optimizer(policy, rl)
    with torch.random.fork_rng():
        torch.manual_seed(7)  # the minibatch order, a method's own draws
        method = cls(cls.Config())
        scored = score_batch(policy, ref, method, batch, rl=rl)
        stats = update(policy, method, batch, rl, opt=Optimization(opt, sched, first_gradient=shared), scored=scored)
    return policy.state_dict(), opt.state_dict()["state"], stats


@pytest.mark.parametrize("name", METHODS.names())
def test_a_shared_first_gradient_gives_the_same_updates(name, monkeypatch):
    base = build_tiny("tiny-500k", seed=0)[0]
    if "hidden_residual" in METHODS.get(name)(METHODS.get(name).Config()).required:
        base = add_lora(base, rank=4, alpha=8.0, dropout=0.0, targets=["all-linear"])
    ref = build_tiny("tiny-500k", seed=1)[0].requires_grad_(False).eval()
    alone = [_update(base, ref, name, lr, None) for lr in RATES]

    computed = []
    gradient = step._gradient
    monkeypatch.setattr(step, "_gradient", lambda *a, **k: computed.append(1) or gradient(*a, **k))
    shared = FirstGradient()
    together = [_update(base, ref, name, lr, shared) for lr in RATES]

    assert len(computed) == 2 * 4 - 1  # 4 minibatch gradients an update; the second's first one is loaded
    for (w, s, stats), (w2, s2, stats2) in zip(alone, together):
        assert stats == stats2
        assert all(torch.equal(v, w2[k]) for k, v in w.items())
        assert all(torch.equal(v, s2[i][k]) for i, state in s.items() for k, v in state.items())
    assert any(not torch.equal(v, alone[1][0][k]) for k, v in alone[0][0].items())  # the rates moved differently
