"""Properties every registered method must have; a new method is covered automatically."""

import dataclasses
import importlib
import re
import typing

import pytest
import torch

from bench.core import Method, RolloutBatch
from bench.errors import CreditBenchError
from bench.numerics import aggregate
from bench.options import build_config
from bench.registry import METHODS


def random_batch(B=8, G=4, T=6, seed=0, equal_rewards=False):
    """Rewards in {0, 1}, groups of G, every optional field filled, and a generation budget far above
    T (so no length shaping applies)."""
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(1, T + 1, (B,), generator=g)
    mask = (torch.arange(T)[None] < lengths[:, None]).long()
    if equal_rewards:
        rewards = torch.ones(B)
    else:  # every group mixed, so every row has a nonzero advantage
        rewards = torch.randint(0, 2, (B,), generator=g).float()
        rewards[0::G], rewards[1::G] = 1.0, 0.0
    return RolloutBatch(
        prompt_ids=torch.zeros(B, 2, dtype=torch.long),
        prompt_mask=torch.ones(B, 2, dtype=torch.long),
        completion_ids=torch.randint(3, 50, (B, T), generator=g),
        completion_mask=mask,
        group_ids=torch.arange(B // G).repeat_interleave(G),
        rewards=rewards,
        correct=rewards > 0,
        truncated=torch.zeros(B, dtype=torch.bool),
        max_new_tokens=100 * T,
        old_logprobs=-torch.rand(B, T, generator=g) - 0.1,
        entropy=torch.rand(B, T, generator=g),
        ref_logprobs=-torch.rand(B, T, generator=g) - 0.1,
        ref_entropy=torch.rand(B, T, generator=g),
        ref_kl=torch.rand(B, T, generator=g),
        hidden_residual=torch.rand(B, T, generator=g),
        hidden_states=torch.randn(B, T, 4, generator=g),
        extra={"negative_logprobs": -torch.rand(B, T, generator=g) - 0.1},
    )


def group_relative_sign(b):
    """+1 / -1 / 0: the sign of each row's reward minus its group's mean."""
    mean = torch.zeros(int(b.group_ids.max()) + 1).index_add_(0, b.group_ids, b.rewards)
    mean = mean / torch.bincount(b.group_ids).float()
    return torch.sign(b.rewards - mean[b.group_ids])


def loss_mask(b, out):
    """What the engine aggregates over: the method's loss mask, which must lie within the completion."""
    if out.mask is None:
        return b.completion_mask
    assert not (out.mask.bool() & ~b.completion_mask.bool()).any()
    return out.mask


def loss_grad(method, b, logprobs):
    logprobs = logprobs.clone().requires_grad_()
    out = method.loss(b, logprobs, method.credit(b))
    aggregate(out.loss, loss_mask(b, out), method.config.aggregation, max_len=b.max_new_tokens).backward()
    return logprobs.grad


@pytest.fixture(params=METHODS.names())
def method(request):
    cls = METHODS.get(request.param)
    return cls(cls.Config())


def _default(name):
    cls = METHODS.get(name)
    return cls(cls.Config())


def _split_independent(name):
    """Methods whose default selects nothing per minibatch (80/20's official default does)."""
    return getattr(_default(name).config, "population", None) != "minibatch"


def _std_normalised(name):
    from methods.grpo import GroupStdConfig

    cfg = _default(name).config
    return isinstance(cfg, GroupStdConfig) and getattr(cfg, "scale_rewards", True)


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
    noise = torch.randn(b.old_logprobs.shape, generator=torch.Generator().manual_seed(1))  # seeded: no flakes
    logprobs = (b.old_logprobs + 0.05 * noise).requires_grad_()
    out = method.loss(b, logprobs, method.credit(b))
    aggregate(out.loss, loss_mask(b, out), method.config.aggregation, max_len=b.max_new_tokens).backward()
    assert torch.all(logprobs.grad[b.completion_mask == 0] == 0)
    assert logprobs.grad[b.completion_mask == 1].abs().sum() > 0


def test_group_with_equal_rewards_gives_zero_credit_and_gradient(method):
    b = random_batch(seed=2, equal_rewards=True)
    credit = method.credit(b)
    assert torch.all(credit * b.completion_mask == 0)
    logprobs = b.old_logprobs.clone().requires_grad_()
    out = method.loss(b, logprobs, credit)
    aggregate(out.loss, loss_mask(b, out), method.config.aggregation, max_len=b.max_new_tokens).backward()
    assert torch.all(logprobs.grad == 0)


def test_loss_is_differentiable_and_finite(method):
    b = random_batch(seed=3)
    logprobs = b.old_logprobs.clone().requires_grad_()
    out = method.loss(b, logprobs, method.credit(b))
    assert torch.isfinite(out.loss).all()


def test_gradient_sign_follows_the_advantage(method):
    """At ratio 1, the update pushes every token of a better-than-its-group completion up (or
    leaves it), and every token of a worse one down (or leaves it); for a method with a baseline of
    its own (``group_relative`` False), the same against the credit's own sign."""
    if not method.group_relative:
        b = random_batch(seed=10, T=9)
        push, credit = -loss_grad(method, b, b.old_logprobs), method.credit(b)
        valid = b.completion_mask.bool()
        assert torch.all(push[valid] * credit[valid] >= -1e-7) and push[valid].abs().sum() > 0
        return
    for seed in range(3):
        b = random_batch(seed=10 + seed, T=9)
        push = -loss_grad(method, b, b.old_logprobs)  # [B, T]
        sign = group_relative_sign(b)[:, None].expand_as(push)
        valid = b.completion_mask.bool()
        assert torch.all(push[valid & (sign > 0)] >= -1e-7)
        assert torch.all(push[valid & (sign < 0)] <= 1e-7)
        assert push[valid].abs().sum() > 0


def test_clip_boundaries_hold(method):
    """Far outside any trust region in the direction the advantage pushes (log-ratio +3 where the
    advantage is positive, -3 where negative), the default config stops pushing: zero gradient.
    A method without a trust region (``trust_region`` False: plain REINFORCE) keeps pushing."""
    b = random_batch(seed=4, T=9)
    shift = 3.0 * group_relative_sign(b)[:, None]
    grad = loss_grad(method, b, b.old_logprobs + shift)
    if method.trust_region:
        assert torch.all(grad == 0)
    else:
        valid = b.completion_mask.bool()
        assert torch.all(grad[valid] * group_relative_sign(b)[:, None].expand_as(grad)[valid] <= 0)
        assert grad[valid].abs().sum() > 0


def test_every_open_choice_is_documented(method):
    """Each config field carries a docstring in its file, so it shows up as CLI help."""
    import dataclasses
    import inspect

    src = "".join(inspect.getsource(c) for c in type(method.config).__mro__ if dataclasses.is_dataclass(c))
    for f in dataclasses.fields(method.config):
        assert re.search(rf"\b{f.name}:[^\n]*\n\s+\"\"\"", src), f"{f.name} has no docstring"


def test_every_choice_is_a_literal_that_is_checked(method):
    """A field with a fixed set of values is typed ``Literal[...]``: each value builds a config the
    method runs with, and any other is refused naming the valid values, whether the config is
    built in Python or from YAML options (``build_config``)."""
    cls = type(method.config)
    hints = typing.get_type_hints(cls)
    for name, hint in hints.items():
        if typing.get_origin(hint) is not typing.Literal:
            continue
        for value in typing.get_args(hint):
            assert type(method)(cls(**{name: value})).required >= method.needs
        valid = ", ".join(typing.get_args(hint))
        with pytest.raises(CreditBenchError, match=rf"unknown .*'bogus'; valid: {re.escape(valid)}$"):
            cls(**{name: "bogus"})
        with pytest.raises(CreditBenchError, match=rf"'bogus'.*{re.escape(valid)}"):
            build_config(cls, {name: "bogus"}, "method")


def test_config_hierarchy_follows_the_method_hierarchy(method):
    """A method's config derives from its parent method's config, so what the inherited code reads
    is there with the same default and meaning; where the method replaces a field of it (GSPO and
    P-trace clip with clip_low/clip_high instead of GRPO's clip_eps), from the nearest config up
    that hierarchy whose fields it all has (``GroupAdvantageConfig``, what ``GRPO.credit`` reads)."""
    parent = next(c for c in type(method).__mro__[1:] if issubclass(c, Method))
    fields = {f.name for f in dataclasses.fields(type(method).Config)}
    base = next(c for c in parent.Config.__mro__ if {f.name for f in dataclasses.fields(c)} <= fields)
    assert issubclass(type(method).Config, base), f"{type(method).Config.__name__} should derive from {base.__name__}"


@pytest.mark.parametrize("name", [n for n in METHODS.names() if _split_independent(n)])
def test_loss_rows_do_not_depend_on_the_minibatch_split(name):
    """The engine calls credit() once on the rollout batch and loss() on minibatches cut from it
    with batch.select: a row's per-token loss (and loss mask) is the same whatever the split, for
    every method whose default does not choose a per-minibatch population."""
    method = _default(name)
    b = random_batch(B=8, G=4, T=6, seed=5)
    lp = b.old_logprobs + 0.05 * torch.randn(b.old_logprobs.shape, generator=torch.Generator().manual_seed(0))
    credit = method.credit(b)
    whole = method.loss(b, lp, credit)
    for idx in (torch.tensor([0, 2, 5, 7]), torch.tensor([1, 3, 4, 6])):
        part = method.loss(b.select(idx), lp[idx], credit[idx])
        valid = b.completion_mask[idx].bool()
        assert torch.allclose(part.loss[valid], whole.loss[idx][valid], atol=1e-6)
        if whole.mask is not None:
            assert torch.equal(part.mask.bool(), whole.mask[idx].bool())


@pytest.mark.parametrize("name", [n for n in METHODS.names() if _std_normalised(n)])
def test_the_group_std_options_reach_the_credit(name):
    """Every method on a group-normalised advantage honours ``std``: on mixed groups of 4 the
    biased std (n) differs from the unbiased one (n - 1), so the credit changes."""
    method = _default(name)
    base = method.credit(random_batch(seed=6))
    other = type(method)(dataclasses.replace(method.config, std="biased")).credit(random_batch(seed=6))
    assert not torch.allclose(base, other)
