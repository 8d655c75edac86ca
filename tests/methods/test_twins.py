"""Each credit method's credit-off twin, and the placebo control (bench.engine.placebo)."""

import dataclasses

import pytest
import torch
from test_contract import loss_grad, random_batch

from bench.engine.blame import alignment
from bench.engine.placebo import PERMUTATION, Placebo, permutation
from bench.numerics import aggregate
from bench.options import build_config
from bench.registry import METHODS

BASELINES = {"grpo", "dr_grpo", "dapo", "gspo", "gspo_token"}
"""Methods whose credit is uniform: no twin."""


def twin_of(name, **options):
    cls = METHODS.get(name)
    method = cls(cls.Config(**options))
    values = method.twin()
    return method, (None if values is None else cls(build_config(cls.Config, {**options, **values}, name)))


@pytest.mark.parametrize("name", METHODS.names())
def test_every_credit_method_declares_a_twin_and_the_baselines_none(name):
    method, twin = twin_of(name)
    assert (twin is None) == (name in BASELINES)


CREDIT_METHODS = [n for n in METHODS.names() if n not in BASELINES]


@pytest.mark.parametrize("name", CREDIT_METHODS)
def test_twin_differs_only_in_credit(name):
    """The twin keeps every option it does not name, and with them the recipe: rewards, the groups
    dynamic sampling keeps, the rollout rounds, the aggregation and the KL term."""
    method, twin = twin_of(name)
    named = set(method.twin())
    for f in dataclasses.fields(method.config):
        if f.name not in named:
            assert getattr(twin.config, f.name) == getattr(method.config, f.name), f.name
    b = random_batch(seed=5)
    assert twin.generation_rounds == method.generation_rounds
    assert (twin.keep_groups(b) is None) == (method.keep_groups(b) is None)
    if method.keep_groups(b) is not None:
        assert torch.equal(twin.keep_groups(b), method.keep_groups(b))
    if hasattr(method, "reward"):
        assert torch.equal(twin.reward(b), method.reward(b))
    assert twin.trust_region == method.trust_region


def _uniform_rows(grad, mask):
    """Each row's |gradient| is one value on every token the loss counts."""
    for g, m in zip(grad, mask.bool()):
        values = g[m].abs()
        if values.numel() and values.max() > 0:
            assert torch.allclose(values, values[0].expand_as(values), rtol=1e-5), values


@pytest.mark.parametrize("name", CREDIT_METHODS)
def test_twin_credit_is_uniform_and_the_method_s_is_not(name):
    """At ratio 1 (the start of an update) the twin puts one weight on every token of a completion;
    the method itself does not (else its twin would change nothing)."""
    method, twin = twin_of(name)
    b = random_batch(B=16, T=8, seed=2)
    out = twin.loss(b, b.old_logprobs, twin.credit(b))
    mask = b.completion_mask if out.mask is None else out.mask
    _uniform_rows(loss_grad(twin, random_batch(B=16, T=8, seed=2), b.old_logprobs), mask)
    if name in ("fipo", "ibpo", "vineppo"):  # FIPO's weights are 1 at ratio 1; IBPO's and VinePPO's signals
        # need their rollouts (revisions, Monte-Carlo values): tests/methods/test_ibpo.py, test_vineppo.py
        return
    g = loss_grad(method, random_batch(B=16, T=8, seed=2), b.old_logprobs)
    spread = [float(x[m].abs().std()) for x, m in zip(g, b.completion_mask.bool()) if m.sum() > 1]
    assert max(spread) > 1e-6


def _loss_and_grad(method, b, logprobs):
    lp = logprobs.clone().requires_grad_()
    out = method.loss(b, lp, method.credit(b))
    mask = b.completion_mask if out.mask is None else out.mask
    loss = aggregate(out.loss, mask, method.config.aggregation, max_len=b.max_new_tokens)
    loss.backward()
    return float(loss.detach()), lp.grad


@pytest.mark.parametrize(
    ("name", "options", "base", "base_options"),
    [
        ("s_trace", {"clip_low": 3e-4, "clip_high": 4e-4}, "gspo", {}),  # the paper: GSPO is the uniform case
        ("p_trace", {"clip_low": 3e-4, "clip_high": 4e-4}, "gspo", {}),
        ("s_trace", {}, "gspo", {"clip_low": 0.2, "clip_high": 0.2}),
        ("entropy_top", {}, "dapo", {}),  # 80/20 with every token kept is DAPO
        ("grpo_lambda", {"neg_adv_clamp": None}, "grpo", {}),  # no trace: GRPO's token ratio
    ],
)
def test_twin_reproduces_its_uniform_base_exactly_off_policy(name, options, base, base_options):
    _, twin = twin_of(name, **options)
    cls = METHODS.get(base)
    ref = cls(cls.Config(**base_options))
    b = random_batch(B=16, T=8, seed=4)
    logprobs = b.old_logprobs + 0.3 * torch.randn(b.old_logprobs.shape, generator=torch.Generator().manual_seed(4))
    got, want = _loss_and_grad(twin, b, logprobs), _loss_and_grad(ref, random_batch(B=16, T=8, seed=4), logprobs)
    assert got[0] == pytest.approx(want[0], rel=1e-5, abs=1e-7)
    assert torch.allclose(got[1], want[1], rtol=1e-4, atol=1e-7)


def test_grpo_lambda_twin_keeps_its_advantage_clamp():
    _, twin = twin_of("grpo_lambda")
    b = random_batch(B=16, T=8, seed=1)
    assert twin.config.neg_adv_clamp == -0.1 and float(twin.credit(b).min()) == pytest.approx(-0.1)


# ------------------------------------------------------------------ the placebo
def test_permutation_permutes_each_row_s_valid_tokens_and_leaves_padding():
    mask = torch.tensor([[1, 1, 1, 1, 0, 0], [1, 1, 0, 0, 0, 0], [1, 1, 1, 1, 1, 1]])
    perm = permutation(mask, torch.Generator().manual_seed(0))
    for p, m in zip(perm, mask):
        n = int(m.sum())
        assert sorted(p[:n].tolist()) == list(range(n))
        assert p[n:].tolist() == list(range(n, 6))


@pytest.mark.parametrize("name", ["grpo", "entropy_top", "s_trace", "grpo_lambda", "arca", "gcpo", "delta"])
def test_placebo_gradient_is_the_method_s_permuted_within_each_completion(name):
    cls = METHODS.get(name)
    b = random_batch(B=16, T=10, seed=3)
    logprobs = b.old_logprobs + 0.05 * torch.randn(b.old_logprobs.shape, generator=torch.Generator().manual_seed(3))
    loss, grad = _loss_and_grad(cls(cls.Config()), b, logprobs)
    placebo = Placebo(cls(cls.Config()), seed=0)
    b2 = random_batch(B=16, T=10, seed=3)
    p_loss, p_grad = _loss_and_grad(placebo, b2, logprobs)
    perm = b2.extra[PERMUTATION]
    assert p_loss == pytest.approx(loss, rel=1e-5)  # the same loss value: the aggregation's weights kept
    assert torch.allclose(p_grad, grad.gather(-1, perm), atol=1e-7)
    assert torch.allclose(p_grad.abs().sum(-1), grad.abs().sum(-1), atol=1e-6)  # the same credit per completion
    if name == "grpo":  # at ratio 1 uniform credit moved around is uniform credit
        at_one = _loss_and_grad(placebo, random_batch(B=16, T=10, seed=3), b.old_logprobs)[1]
        assert torch.allclose(at_one, _loss_and_grad(cls(cls.Config()), b, b.old_logprobs)[1], atol=1e-7)
    if name == "entropy_top":  # a random subset of the same size
        keep, moved = grad != 0, p_grad != 0
        assert torch.equal(keep.sum(-1), moved.sum(-1)) and not torch.equal(keep, moved)


def test_placebo_draw_is_a_function_of_seed_and_batch():
    cls = METHODS.get("entropy_top")
    perms = []
    for seed in (0, 0, 1):
        b = random_batch(B=16, T=10, seed=3)
        Placebo(cls(cls.Config()), seed=seed).credit(b)
        perms.append(b.extra[PERMUTATION])
    assert torch.equal(perms[0], perms[1]) and not torch.equal(perms[0], perms[2])


def test_placebo_blame_alignment_is_at_chance():
    """80/20's credit sits on its high-entropy tokens; make the blame token each row's highest-entropy
    one and the method is far above chance, its placebo at chance (share = 1/L, rank fraction 0.5)."""
    cls = METHODS.get("entropy_top")
    shares, fracs, uniform, method_share = [], [], [], []
    for seed in range(40):
        b = random_batch(B=16, T=12, seed=seed)
        b.entropy = b.entropy * b.completion_mask
        rows = [r for r in range(16) if b.completion_mask[r].sum() > 2]
        tokens = [int(b.entropy[r].argmax()) for r in rows]
        g = -loss_grad(cls(cls.Config()), b, b.old_logprobs)
        method_share.append(alignment(g, b.completion_mask, rows, tokens)["share"])
        b2 = random_batch(B=16, T=12, seed=seed)
        b2.entropy = b.entropy
        a = alignment(
            -loss_grad(Placebo(cls(cls.Config()), seed=seed), b2, b.old_logprobs), b.completion_mask, rows, tokens
        )
        shares.append(a["share"]), fracs.append(a["rank_frac"]), uniform.append(a["uniform_share"])
    mean = lambda xs: sum(xs) / len(xs)  # noqa: E731
    assert mean(method_share) > 2 * mean(uniform)
    assert mean(shares) == pytest.approx(mean(uniform), rel=0.15)
    assert mean(fracs) == pytest.approx(0.5, abs=0.06)
