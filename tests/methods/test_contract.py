"""Properties every registered method must have; a new method is covered automatically."""

import importlib

import pytest
import torch

from bench.core import RolloutBatch
from bench.numerics import aggregate
from bench.registry import METHODS


def random_batch(B=8, G=4, T=6, seed=0, equal_rewards=False):
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(1, T + 1, (B,), generator=g)
    mask = (torch.arange(T)[None] < lengths[:, None]).long()
    rewards = torch.ones(B) if equal_rewards else torch.randint(0, 2, (B,), generator=g).float()
    return RolloutBatch(
        prompt_ids=torch.zeros(B, 2, dtype=torch.long), prompt_mask=torch.ones(B, 2, dtype=torch.long),
        completion_ids=torch.randint(3, 50, (B, T), generator=g), completion_mask=mask,
        group_ids=torch.arange(B // G).repeat_interleave(G), rewards=rewards, correct=rewards > 0,
        truncated=torch.zeros(B, dtype=torch.bool), max_new_tokens=T,
        old_logprobs=-torch.rand(B, T, generator=g) - 0.1, entropy=torch.rand(B, T, generator=g),
        ref_logprobs=-torch.rand(B, T, generator=g) - 0.1,
    )


@pytest.fixture(params=METHODS.names())
def method(request):
    cls = METHODS.get(request.param)
    return cls(cls.Config())


def test_registered_method_has_docs_and_paper_config(method):
    assert method.description and method.paper
    module = importlib.import_module(type(method).__module__)
    assert module.__doc__ and len(module.__doc__) > 100, "a method file starts with its paper and equations"


def test_shapes(method):
    b = random_batch()
    credit = method.credit(b)
    assert credit.shape == b.completion_mask.shape
    out = method.loss(b, b.old_logprobs.clone().requires_grad_(), credit)
    assert out.loss.shape == b.completion_mask.shape
    for v in out.stats.values():
        assert v.shape == b.completion_mask.shape


def test_masked_tokens_get_zero_gradient(method):
    b = random_batch(seed=1)
    logprobs = (b.old_logprobs + 0.05 * torch.randn_like(b.old_logprobs)).requires_grad_()
    out = method.loss(b, logprobs, method.credit(b))
    aggregate(out.loss, b.completion_mask, method.config.aggregation, max_len=b.max_new_tokens).backward()
    assert torch.all(logprobs.grad[b.completion_mask == 0] == 0)
    assert logprobs.grad[b.completion_mask == 1].abs().sum() > 0


def test_group_with_equal_rewards_gives_zero_credit_and_gradient(method):
    b = random_batch(seed=2, equal_rewards=True)
    credit = method.credit(b)
    assert torch.all(credit * b.completion_mask == 0)
    logprobs = b.old_logprobs.clone().requires_grad_()
    out = method.loss(b, logprobs, credit)
    aggregate(out.loss, b.completion_mask, method.config.aggregation, max_len=b.max_new_tokens).backward()
    assert torch.all(logprobs.grad == 0)


def test_loss_is_differentiable_and_finite(method):
    b = random_batch(seed=3)
    logprobs = b.old_logprobs.clone().requires_grad_()
    out = method.loss(b, logprobs, method.credit(b))
    assert torch.isfinite(out.loss).all()
