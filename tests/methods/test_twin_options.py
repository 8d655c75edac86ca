"""Each credit method's twin over its options, not only its defaults: for every combination of the
options the method adds to its base (every choice of a Literal, both values of a bool, a default and
None of an optional, and the numeric values below that switch a behaviour on), the twin's credit is
uniform within each completion and equal to its stated base, or the combination is refused in one
line. A new option of one of these types is covered without touching this file."""

import dataclasses
import itertools
import types
import typing

import pytest
import torch
from test_contract import loss_grad, random_batch
from test_twins import BASELINES

from bench.core import RolloutBatch
from bench.errors import CreditBenchError
from bench.numerics import aggregate
from bench.options import build_config
from bench.registry import METHODS
from methods.dapo import DAPOConfig
from methods.grpo import GroupAdvantageConfig, GRPOConfig
from methods.ibpo import EDIT_MASK, REVISIONS, REVISIONS_CORRECT

SHARED = {"arca": GRPOConfig, "grpo_lambda": GRPOConfig, "ibpo": GRPOConfig}
"""The config whose options a method shares with its base (the rest are its own); DAPO's by default."""
SHARED.update(dict.fromkeys(["s_trace", "p_trace"], GroupAdvantageConfig))
NUMERIC = {
    "s_trace": {"lam": [0.95, 0.5]},
    "p_trace": {"lam": [0.95, 0.5]},
    "grpo_lambda": {"lam": [0.99, 0.5], "gamma": [1.0, 0.9], "trace_floor": [0.0, 0.3], "position_origin": [0, 1]},
    "entropy_top": {"rho": [0.2, 0.5]},
    "ibpo": {"unchanged_credit": [0.0, 0.5], "repair_credit": [1.0, 0.5]},
}
"""Numeric options whose values change the credit's shape, with a value beside the default."""
GENERATION_ONLY = {"ibpo": {"reference_choice", "incorrect_references", "mask_on"}}
"""Options that act only where the method generates (augment), whose output the tests here stand in for."""
BASE = {"s_trace": "gspo", "p_trace": "gspo", "grpo_lambda": "grpo", "entropy_top": "dapo", "delta": "dapo"}
"""The registered method each twin reproduces (on its shared options), docs/methods.md's twin table."""
BASE["fipo"] = "dapo"  # with FIPO's dual clip, a DAPO option
CREDIT_METHODS = [n for n in METHODS.names() if n not in BASELINES]


def option_grid(name: str) -> list[dict]:
    """Every combination of ``name``'s own options' values (see the module docstring)."""
    cls = METHODS.get(name)
    hints = typing.get_type_hints(cls.Config)
    skip = {f.name for f in dataclasses.fields(SHARED.get(name, DAPOConfig))} | GENERATION_ONLY.get(name, set())
    grid = {}
    for f in dataclasses.fields(cls.Config):
        hint, args = hints[f.name], typing.get_args(hints[f.name])
        optional = typing.get_origin(hint) in (typing.Union, types.UnionType) and type(None) in args
        if f.name in skip:
            continue
        if typing.get_origin(hint) is typing.Literal:
            grid[f.name] = list(args)
        elif hint is bool:
            grid[f.name] = [False, True]
        elif optional and f.default is not None:
            grid[f.name] = [f.default, None]
    grid.update(NUMERIC.get(name, {}))
    return [dict(zip(grid, values)) for values in itertools.product(*grid.values())]


def twins(name: str) -> list:
    """(method, twin) of every combination of the grid, one per distinct twin config; a refused
    combination must say why in one line."""
    cls, seen, pairs = METHODS.get(name), set(), []
    for options in option_grid(name):
        try:
            method = cls(build_config(cls.Config, options, name))
            twin = cls(build_config(cls.Config, {**options, **method.twin()}, f"{name}'s twin"))
        except CreditBenchError as e:
            assert "\n" not in str(e) and str(e), (options, str(e))
            continue
        if repr(twin.config) not in seen:
            seen.add(repr(twin.config))
            pairs.append((method, twin))
    assert pairs
    return pairs


def _uniform_rows(grad: torch.Tensor, mask: torch.Tensor, what) -> None:
    for g, m in zip(grad, mask.bool()):
        values = g[m].abs()
        if values.numel() and values.max() > 0:
            assert torch.allclose(values, values[0].expand_as(values), rtol=1e-5), (what, values)


def _loss_and_grad(method, b: RolloutBatch, logprobs: torch.Tensor, credit: torch.Tensor):
    lp = logprobs.clone().requires_grad_()
    out = method.loss(b, lp, credit)
    mask = b.completion_mask if out.mask is None else out.mask
    loss = aggregate(out.loss, mask, method.config.aggregation, max_len=b.max_new_tokens)
    loss.backward()
    return float(loss.detach()), lp.grad


@pytest.mark.parametrize("name", [n for n in CREDIT_METHODS if n != "ibpo"])
def test_every_twin_puts_one_weight_on_every_token(name):
    """At ratio 1 each completion's gradient has one magnitude on every token the loss counts."""
    for _, twin in twins(name):
        b = random_batch(B=16, T=8, seed=2)
        out = twin.loss(b, b.old_logprobs, twin.credit(b))
        mask = b.completion_mask if out.mask is None else out.mask
        _uniform_rows(loss_grad(twin, random_batch(B=16, T=8, seed=2), b.old_logprobs), mask, twin.config)


@pytest.mark.parametrize("name", sorted(BASE))
def test_every_twin_is_its_base(name):
    """Off policy, the twin's credit on the valid tokens, loss and gradient are its base's on the
    options they share; GRPO-lambda's twin keeps its advantage clamp, so the base gets its credit."""
    base_cls = METHODS.get(BASE[name])
    names = {f.name for f in dataclasses.fields(base_cls.Config)}
    for _, twin in twins(name):
        base = base_cls(base_cls.Config(**{k: v for k, v in vars(twin.config).items() if k in names}))
        b, b2 = random_batch(B=16, T=8, seed=4), random_batch(B=16, T=8, seed=4)
        logprobs = b.old_logprobs + 0.3 * torch.randn(b.old_logprobs.shape, generator=torch.Generator().manual_seed(4))
        credit, base_credit = twin.credit(b), base.credit(b2)
        if name == "grpo_lambda":
            base_credit = credit
        valid = b.completion_mask.bool()
        assert torch.allclose(credit[valid], base_credit[valid], atol=1e-6), twin.config
        loss, grad = _loss_and_grad(twin, b, logprobs, credit)
        want, want_grad = _loss_and_grad(base, b2, logprobs, base_credit)
        assert loss == pytest.approx(want, rel=1e-5, abs=1e-7), twin.config
        assert torch.allclose(grad, want_grad, rtol=1e-4, atol=1e-7), twin.config


def ibpo_batch(repairs: bool) -> RolloutBatch:
    """Two groups of four with each wrong row's revision verdict and an edit mask (what "shaping" and
    "edit_mask" store), and with ``repairs`` four repaired rows after them (what "diff_credit" with
    ``repair`` appends: a correct and a wrong one per group, each with its divergence)."""
    b = random_batch(B=12 if repairs else 8, G=4, T=8, seed=6)
    B, T = b.completion_mask.shape
    g = torch.Generator().manual_seed(6)
    made = (~b.correct).float()
    b.extra.update({REVISIONS: made, REVISIONS_CORRECT: made * (torch.rand(B, generator=g) < 0.5)})
    b.extra[EDIT_MASK] = torch.rand(B, T, generator=g) < 0.5
    if repairs:
        repair = torch.arange(B) >= 8
        b.group_ids = torch.tensor([0] * 4 + [1] * 4 + [0, 0, 1, 1])
        b.rewards[8:] = torch.tensor([1.0, 0.0, 1.0, 0.0])
        b.correct = b.rewards > 0
        b.completion_mask[8:] = (torch.arange(T) < torch.tensor([6, 5, 7, 4])[:, None]).long()
        start = torch.tensor([0] * 8 + [2, 1, 3, 1])  # each repair's divergence, inside the row
        b.extra.update(repair=repair, edit_start=start, source_reward=torch.zeros(B))
    return b


def test_every_ibpo_twin_is_uniform_and_its_base():
    """The twin's credit, at every combination: uniform within each row; GRPO's A_i on every token of
    the rollouts ("shaping", "diff_credit"), the shaped advantage without the edit mask ("edit_mask"),
    and on a repaired row the method's repair credit on every token ("diff_credit" with ``repair``)."""
    names = {f.name for f in dataclasses.fields(GRPOConfig)}
    for method, twin in twins("ibpo"):
        b = ibpo_batch(twin.config.repair)
        valid, credit = b.completion_mask.bool(), twin.credit(b)
        _uniform_rows(loss_grad(twin, ibpo_batch(twin.config.repair), b.old_logprobs), b.completion_mask, twin.config)
        if method.config.mode == "edit_mask":
            plain = ibpo_batch(False)
            del plain.extra[EDIT_MASK]
            want = method.credit(plain)
        else:
            grpo = METHODS.get("grpo")(GRPOConfig(**{k: v for k, v in vars(twin.config).items() if k in names}))
            want = torch.zeros_like(credit)
            rollouts = torch.arange(8)
            want[rollouts] = grpo.credit(b.select(rollouts))
            if twin.config.repair:
                at_divergence = method.credit(b).gather(-1, b.extra["edit_start"][:, None])  # [B, 1]
                want = torch.where(b.extra["repair"][:, None], at_divergence, want)
        assert torch.allclose(credit[valid], want[valid], atol=1e-6), (twin.config, credit, want)
