"""The lean paths sample and compute exactly what the model and ``generate`` do: lean_decode gives the
same tokens for the same seed (and leaves the generator where ``generate`` leaves it), lean_forward
the same logits, cache and gradients to the bit; where they do not apply, the callers use the model."""

from __future__ import annotations

import copy

import pytest
import torch

from bench.config import SamplingConfig
from bench.engine import lean_forward
from bench.engine.rollout import HFRolloutEngine, lean_applies
from bench.models.policy import build_tiny

PROMPTS = ["12+34=", "7*8+1=", "hello world, what", "9", "abc+def+ghi="]


@pytest.fixture(scope="module")
def tiny():
    torch.manual_seed(0)
    model, tok = build_tiny("tiny-500k")
    return model, tok


def _sample(model, tok, lean: bool, sampling: SamplingConfig, calls: int = 3):
    engine = HFRolloutEngine(model, tok, lean=lean)
    torch.manual_seed(7)
    gens = [engine.generate(PROMPTS, 6, sampling) for _ in range(calls)]
    return gens, torch.rand(4)  # where the generator was left


@pytest.mark.parametrize("temperature", [1.0, 0.7, 0.0])
def test_lean_decode_samples_what_generate_samples(tiny, temperature):
    model, tok = tiny
    sampling = SamplingConfig(temperature=temperature, top_p=1.0, top_k=0, max_new_tokens=24)
    assert lean_applies(model, sampling)
    (hf, hf_next), (lean, lean_next) = _sample(model, tok, False, sampling), _sample(model, tok, True, sampling)
    for a, b in zip(hf, lean):
        assert torch.equal(a.completion_ids, b.completion_ids)
        assert torch.equal(a.completion_mask, b.completion_mask)
        assert torch.equal(a.truncated, b.truncated)
        assert a.texts == b.texts
    assert torch.equal(hf_next, lean_next)


def test_lean_decode_drops_finished_rows_with_the_same_tokens(tiny):
    """A model that ends most rows early (eos made likely) exercises the row dropping."""
    model, tok = tiny
    model = copy.deepcopy(model)
    with torch.no_grad():
        model.lm_head.weight[tok.eos_token_id] *= 4.0
    sampling = SamplingConfig(temperature=1.0, top_p=1.0, top_k=0, max_new_tokens=30)
    (hf, hf_next), (lean, lean_next) = _sample(model, tok, False, sampling), _sample(model, tok, True, sampling)
    lengths = torch.cat([g.completion_mask.sum(-1) for g in lean])
    assert lengths.min() < lengths.max()  # rows finished at different steps
    assert bool((lengths < 30).float().mean() > 0.1)  # many before the budget: the batch shrank
    for a, b in zip(hf, lean):
        assert torch.equal(a.completion_ids, b.completion_ids)
    assert torch.equal(hf_next, lean_next)


def test_a_decode_steps_mask_is_the_one_the_model_makes(tiny):
    """lean_decode builds the masks of its steps once: each is what create_causal_mask makes of that
    step's 2D mask (None without a padded row), with and without padding, before and after rows drop."""
    from transformers.cache_utils import DynamicCache
    from transformers.masking_utils import create_causal_mask

    from bench.engine.rollout import _DecodeMask

    model, _ = tiny
    cfg, P, new = model.config, 5, 3
    heads, hd = cfg.num_key_value_heads, cfg.head_dim
    padded = torch.ones(4, P, dtype=torch.long)
    padded[1, :2] = 0  # row 1's prompt is shorter

    def model_mask(mask2d: torch.Tensor, t: int):
        cache = DynamicCache(config=cfg)
        for layer in range(cfg.num_hidden_layers):
            kv = torch.zeros(mask2d.shape[0], heads, P - 1 + t, hd)
            cache.update(kv, kv, layer)
        hidden = torch.zeros(mask2d.shape[0], 1, cfg.hidden_size)
        positions = torch.full((mask2d.shape[0], 1), P - 1 + t)
        return create_causal_mask(
            config=cfg, inputs_embeds=hidden, attention_mask=mask2d, cache=cache, position_ids=positions
        )

    def same(a, b) -> bool:
        return a is None and b is None or a is not None and b is not None and torch.equal(a, b)

    for mask, drops in ((padded, [0, 1]), (padded, [2]), (torch.ones_like(padded), [3])):
        full = torch.cat([mask, torch.ones(4, new, dtype=torch.long)], -1)
        built, rows = _DecodeMask(mask, new, prebuilt=True), torch.arange(4)
        for t in range(new):
            assert same(built.step(t), model_mask(full[rows, : P + t], t))
        kept = torch.tensor([i for i, r in enumerate(rows.tolist()) if r not in drops])
        rows = rows[kept]
        built.keep(kept, rows)
        for t in range(new):
            assert same(built.step(t), model_mask(full[rows, : P + t], t))
    assert _DecodeMask(padded, new, prebuilt=True).step(0) is not None
    assert _DecodeMask(torch.ones_like(padded), new, prebuilt=True).step(0) is None


def test_lean_decode_does_not_apply_where_generate_filters(tiny):
    model, _ = tiny
    assert not lean_applies(model, SamplingConfig(temperature=1.0, top_p=0.9, top_k=0))
    assert not lean_applies(model, SamplingConfig(temperature=1.0, top_p=1.0, top_k=5))
    assert lean_applies(model, SamplingConfig(temperature=0.0, top_p=0.9, top_k=5))  # greedy ignores them
    penalized = copy.deepcopy(model)
    penalized.generation_config.repetition_penalty = 1.2
    assert not lean_applies(penalized, SamplingConfig(temperature=1.0, top_p=1.0, top_k=0))


def test_lean_forward_is_the_model_to_the_bit(tiny):
    model, _ = tiny
    assert lean_forward.supports(model)
    torch.manual_seed(1)
    x = torch.randint(3, 90, (12, 30))
    mask = torch.ones_like(x)
    mask[:3, :4] = 0  # left padding
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    for kw in ({}, {"attention_mask": mask, "position_ids": positions}):
        model.zero_grad()
        a = model(input_ids=x, logits_to_keep=17, **kw).logits
        a.square().mean().backward()
        ga = [p.grad.clone() for p in model.parameters()]
        model.zero_grad()
        b = lean_forward.forward(model, x, logits_to_keep=17, **kw).logits
        b.square().mean().backward()
        gb = [p.grad.clone() for p in model.parameters()]
        assert torch.equal(a, b)
        assert all(torch.equal(u, v) for u, v in zip(ga, gb))
    model.zero_grad()
    with torch.no_grad():  # a prefill, then a decode step with the cache
        ca = model(input_ids=x[:, :-1], attention_mask=mask[:, :-1], use_cache=True).cache
        cb = lean_forward.forward(model, x[:, :-1], attention_mask=mask[:, :-1], use_cache=True).cache
        for u, v in zip(ca.layers, cb.layers):
            assert torch.equal(u.keys, v.keys) and torch.equal(u.values, v.values)
        step = {"attention_mask": mask, "position_ids": positions[:, -1:], "use_cache": True, "logits_to_keep": 1}
        la = model(input_ids=x[:, -1:], cache=ca, **step).logits
        lb = lean_forward.forward(model, x[:, -1:], cache=cb, **step).logits
        assert torch.equal(la, lb)


def test_lean_forward_refuses_what_it_does_not_replicate(tiny):
    model, _ = tiny
    hooked = copy.deepcopy(model)
    hooked.model.layers[0].mlp.register_forward_hook(lambda *a: None)
    assert not lean_forward.supports(hooked)
    checkpointed = copy.deepcopy(model)
    checkpointed.gradient_checkpointing_enable()
    assert not lean_forward.supports(checkpointed)
    eager = copy.deepcopy(model)
    eager.config._attn_implementation = "eager"
    assert not lean_forward.supports(eager)
    pytest.importorskip("peft")
    from peft import LoraConfig, get_peft_model

    adapted = get_peft_model(copy.deepcopy(model), LoraConfig(r=2, target_modules=["q_proj"]))
    assert not lean_forward.supports(adapted)


@pytest.mark.parametrize("budget", [1, 2])
def test_lean_decode_at_the_smallest_budgets_and_one_row(tiny, budget):
    model, tok = tiny
    sampling = SamplingConfig(temperature=1.0, top_p=1.0, top_k=0, max_new_tokens=budget)
    out = {}
    for lean in (False, True):
        torch.manual_seed(3)
        engine = HFRolloutEngine(model, tok, lean=lean)
        out[lean] = (engine.generate(PROMPTS[:1], 1, sampling), engine.generate(PROMPTS, 3, sampling), torch.rand(2))
    for a, b in zip(out[False][:2], out[True][:2]):
        assert a.completion_ids.shape[1] <= budget
        assert torch.equal(a.completion_ids, b.completion_ids) and torch.equal(a.truncated, b.truncated)
    assert torch.equal(out[False][2], out[True][2])


@pytest.mark.parametrize("dtype", [None, torch.bfloat16])
def test_lean_forward_on_the_valid_positions_is_the_model_there(tiny, dtype):
    """The scoring passes' ``valid=`` path, in fp32 and under bf16 autocast (where its logits are bf16 and its
    hidden states fp32): the model's logits at the valid positions, zeros elsewhere."""
    model, _ = tiny
    torch.manual_seed(2)
    x = torch.randint(3, 90, (6, 20))
    mask = torch.ones_like(x)
    mask[:2, :5] = 0  # left padding: not valid
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    valid = mask.bool()
    with torch.no_grad(), torch.autocast("cpu", dtype=dtype or torch.float32, enabled=dtype is not None):
        a = model(input_ids=x, attention_mask=mask, position_ids=positions, logits_to_keep=12).logits
        b = lean_forward.forward(
            model, x, attention_mask=mask, position_ids=positions, logits_to_keep=12, valid=valid
        ).logits
    assert b.dtype == a.dtype == (dtype or torch.float32)
    kept = valid[:, -12:]
    assert torch.equal(a[kept], b[kept])
    assert not b[~kept].any()


@pytest.mark.parametrize("lean", [False, True])
def test_the_cache_goes_by_the_installed_transformers_name(tiny, lean):
    """The prompt cache and the decode steps pass the KV cache by the name the installed transformers
    takes (no deprecation warning from the model's forward or ``generate``), on both decode paths."""
    import warnings

    model, tok = tiny
    hooked = copy.deepcopy(model)
    hooked.model.norm.register_forward_hook(lambda *a: None)  # the model's own forward in lean_decode
    assert not lean_forward.supports(hooked)
    sampling = SamplingConfig(temperature=1.0, top_p=1.0, top_k=0, max_new_tokens=5)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        HFRolloutEngine(hooked, tok, lean=lean).generate(PROMPTS, 2, sampling)
    assert not [w for w in caught if "past_key_values" in str(w.message)]
