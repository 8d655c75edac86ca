import itertools
import math

import pytest
import torch
from test_grpo import make_batch
from test_p_trace import loop_loss, random_batch, run

from bench.errors import CreditBenchError
from bench.numerics import aggregate
from methods.common import entropy_top_mask
from methods.gspo import GSPO
from methods.s_trace import STrace, STraceConfig

A = 0.5 / (math.sqrt(0.5) + 1e-4)  # GRPO advantage of rewards [1, 0]: +-0.70700


def hand_batch():
    """Two completions of 5 tokens, both with entropies [0.9, 0.1, 0.8, 0.2, 0.7]."""
    batch = make_batch([1.0, 0.0], [0, 0], T=5)
    batch.entropy = torch.tensor([[0.9, 0.1, 0.8, 0.2, 0.7]] * 2)
    return batch


def test_selected_versus_raw_distance_hand_worked():
    """rho = 0.6: the 0.4-quantile of the 10 entropies (sorted .1 .1 .2 .2 .7 .7 .8 .8 .9 .9,
    position 0.4 * 9 = 3.6) is 0.2 + 0.6 * 0.5 = 0.5, so S = tokens {0, 2, 4}. lam = 0.5,
    seq 0 l = [0.04, 0.08, 0.02, 0.06, -0.04]; only l_0 and l_2 enter any history.
    raw d = t - k:  hist = [0, .5 l0, .25 l0, .5 l2 + .125 l0, .25 l2 + .0625 l0]
                         = [0, 0.02, 0.01, 0.015, 0.0075]
    selected d = #S in [k, t): t = 1, 2 see l_0 at distance 1; t = 3, 4 see l_2 at 1, l_0 at 2:
                    hist = [0, .5 l0, .5 l0, .5 l2 + .25 l0, .5 l2 + .25 l0]
                         = [0, 0.02, 0.02, 0.02, 0.02]
    With the clip on the traced ratio ("full_traced") and no ratio leaving [0.8, 1.2],
    loss_t = -A e^(l_t + hist_t). The low-entropy token 1 gets gradient only from its own loss:
    -A e^(0.08 + 0.02) / 10 (seq-mean-token-mean, L = 5, B = 2)."""
    l = torch.tensor([[0.04, 0.08, 0.02, 0.06, -0.04], [0.0] * 5])
    expected = {"raw": [0, 0.02, 0.01, 0.015, 0.0075], "selected": [0, 0.02, 0.02, 0.02, 0.02]}
    for distance, hist in expected.items():
        m = STrace(STraceConfig(lam=0.5, rho=0.6, distance=distance, clip_target="full_traced"))
        out, _, grad = run(m, hand_batch(), l)
        assert out.stats["trace_frac"][0].tolist() == [1, 0, 1, 0, 1]
        loss = [-A * math.exp(x + h) for x, h in zip(l[0].tolist(), hist)]
        assert out.loss[0].tolist() == pytest.approx(loss)
        assert float(grad[0, 1]) == pytest.approx(-A * math.exp(0.1) / 10)


def test_mask_gradient_restricts_the_loss_to_selected_tokens():
    """mask_gradient=True zeroes the loss (and so the gradient) on the unselected tokens 1 and 3;
    the other tokens keep the same loss as without it."""
    l = torch.tensor([[0.04, 0.08, 0.02, 0.06, -0.04], [0.0] * 5])
    out, _, _ = run(STrace(STraceConfig(lam=0.5, rho=0.6)), hand_batch(), l)
    m = STrace(STraceConfig(lam=0.5, rho=0.6, mask_gradient=True))
    masked, _, grad = run(m, hand_batch(), l)
    kept = out.loss[0] * torch.tensor([1, 0, 1, 0, 1])
    assert masked.loss[0].tolist() == pytest.approx(kept.tolist())
    assert grad[:, 1].tolist() == [0.0, 0.0] and grad[:, 3].tolist() == [0.0, 0.0]


def test_uniform_weights_over_all_tokens_are_gspo():
    """rho = 1 selects every token, so uniform S-trace is uniform P-trace: GSPO's loss and
    gradient."""
    cfg = STraceConfig(
        rho=1.0, weights="uniform", clip_target="full_traced", hist_clip=None, clip_low=3e-4, clip_high=4e-4
    )
    for seed in range(3):
        batch, noise = random_batch(seed)
        noise = noise * torch.tensor([1e-4, 1e-3, 1e-2, 0.3] * 2)[:, None]
        _, total, grad = run(STrace(cfg), batch, noise)
        _, total_gspo, grad_gspo = run(GSPO(), batch, noise)
        assert float(total) == pytest.approx(float(total_gspo), abs=1e-6)
        assert torch.allclose(grad, grad_gspo, atol=1e-6)


def test_loop_versus_vectorised():
    targets = ["current_token", "current_token_weighted", "full_traced"]
    for seed, (weights, distance, population, mask_gradient) in enumerate(
        itertools.product(["decay", "uniform"], ["raw", "selected"], ["batch", "sequence"], [False, True])
    ):
        cfg = STraceConfig(
            lam=0.8,
            rho=0.4,
            weights=weights,
            distance=distance,
            population=population,
            selection=["quantile", "top_k"][seed % 2],
            mask_gradient=mask_gradient,
            clip_target=targets[seed % 3],
        )
        batch, noise = random_batch(seed)
        m = STrace(cfg)
        out, _, grad = run(m, batch, noise)
        mask = batch.completion_mask
        select = entropy_top_mask(batch.entropy, mask, cfg.rho, cfg.population, cfg.selection)
        logprobs = (batch.old_logprobs + noise).requires_grad_()
        l = logprobs - batch.old_logprobs
        expected = loop_loss(l, mask, m.credit(batch)[:, 0], cfg, select)
        aggregate(expected, mask, cfg.aggregation).backward()
        assert torch.allclose(out.loss * mask, expected.detach() * mask, atol=1e-6), cfg
        assert torch.allclose(grad, logprobs.grad, atol=1e-6), cfg


def test_selection_is_the_rollout_batch_s_whatever_the_minibatch_split():
    """The engine calls credit() once on the rollout batch, then loss() on minibatches cut from it
    with batch.select (bench/engine/step.py::update). With population "batch" the tokens the trace
    runs over, and so every row's loss, are the same for any split; with "minibatch" each half
    takes its own top 30%: the first half, whose entropies are all above the second's, holds all of
    the whole batch's top 30% (more than 30% of its own tokens) and the second none of it."""
    batch, noise = random_batch(7)
    halves = [torch.tensor([0, 2, 5, 7]), torch.tensor([1, 3, 4, 6])]
    batch.entropy[halves[0]] += 1.0
    for population in ("batch", "minibatch"):
        m = STrace(STraceConfig(lam=0.8, rho=0.3, population=population))
        credit = m.credit(batch)
        whole = m.loss(batch, batch.old_logprobs + noise, credit)
        parts = [m.loss(batch.select(i), batch.old_logprobs[i] + noise[i], credit[i]) for i in halves]
        same = [torch.equal(p.stats["trace_frac"], whole.stats["trace_frac"][i]) for p, i in zip(parts, halves)]
        if population == "batch":
            assert all(same)
            for p, i in zip(parts, halves):
                assert torch.allclose(p.loss, whole.loss[i])
        else:
            assert same == [False, False]
            assert whole.stats["trace_frac"][halves[1]].sum() == 0
            for p, i in zip(parts, halves):
                own = entropy_top_mask(batch.entropy[i], batch.completion_mask[i], 0.3)
                assert torch.equal(p.stats["trace_frac"], own.float())


def test_loss_needs_the_credit_of_its_rollout_batch():
    batch, noise = random_batch(0)
    with pytest.raises(CreditBenchError, match="s_trace_selected.*credit"):
        STrace().loss(batch, batch.old_logprobs + noise, torch.ones_like(noise))


def test_defaults_and_validation():
    cfg = STraceConfig()
    assert (cfg.rho, cfg.population, cfg.selection, cfg.distance, cfg.mask_gradient, cfg.lam) == (
        0.2,
        "batch",
        "quantile",
        "raw",
        False,
        0.95,
    )
    assert STrace().needs == {"entropy"}
    for bad, match in [
        ({"population": "group"}, "batch, minibatch, sequence"),
        ({"selection": "top"}, "quantile, top_k"),
        ({"distance": "tokens"}, "raw, selected"),
        ({"rho": 0.0}, "rho"),
    ]:
        with pytest.raises(CreditBenchError, match=match):
            STraceConfig(**bad)
