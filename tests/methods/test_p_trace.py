import itertools
import math

import pytest
import torch
from test_grpo import make_batch

from bench.errors import CreditBenchError
from bench.numerics import aggregate
from methods.grpo import GRPO, GRPOConfig
from methods.gspo import GSPO, sequence_log_ratio
from methods.p_trace import PTrace, PTraceConfig, trace_parts

A = 0.5 / (math.sqrt(0.5) + 1e-4)  # GRPO advantage of rewards [1, 0]: +-0.70700
L = torch.tensor([[0.1, 0.2, -0.1], [-0.3, 0.0, 0.0]])  # token log-ratios of the hand examples
E = math.exp


def run(method, batch, log_ratio):
    """Per-token loss, aggregated loss and d(aggregated loss)/d logprobs."""
    logprobs = (batch.old_logprobs + log_ratio).requires_grad_()
    out = method.loss(batch, logprobs, method.credit(batch))
    total = aggregate(out.loss, batch.completion_mask, method.config.aggregation)
    total.backward()
    return out, total.detach(), logprobs.grad


def loop_loss(l, mask, adv, cfg, select=None):  # [B, T], token by token from the equations
    B, T = l.shape
    lo, hi = 1 - cfg.clip_low, 1 + cfg.clip_high
    rows = []
    for i in range(B):
        n = mask[i].sum()
        row = []
        for t in range(T):
            current = l[i, t] if cfg.weights == "decay" else l[i, t] / n
            hist = torch.zeros(())
            for k in range(T):
                if k == t or not mask[i, k] or (select is not None and not select[i, k]):
                    continue
                if cfg.weights == "uniform":
                    hist = hist + l[i, k] / n
                elif k < t:
                    raw = getattr(cfg, "distance", "raw") == "raw" or select is None
                    d = t - k if raw else int(select[i, k:t].sum())
                    hist = hist + cfg.lam**d * l[i, k]
            if cfg.hist_clip is not None:
                hist = hist.clamp(math.log(1 - cfg.hist_clip), math.log(1 + cfg.hist_clip))
            if cfg.detach_history:
                hist = hist.detach()
            if cfg.clip_target == "current_token":  # a tie takes the unclipped term
                r, h = torch.exp(current), torch.exp(hist)
                unclipped, bounded = r * h * adv[i], r.clamp(lo, hi) * adv[i]
                obj = torch.where(bounded < unclipped, bounded, unclipped)
            elif cfg.clip_target == "current_token_weighted":
                r, h = torch.exp(current), torch.exp(hist)
                obj = torch.minimum(r * h * adv[i], r.clamp(lo, hi) * h * adv[i])
            else:
                rho = torch.exp(current + hist)
                obj = torch.minimum(rho * adv[i], rho.clamp(lo, hi) * adv[i])
            if getattr(cfg, "mask_gradient", False):
                obj = obj * select[i, t]
            row.append(-obj)
        rows.append(torch.stack(row))
    return torch.stack(rows)


def random_batch(seed, B=8, T=8):
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(1, T + 1, (B,), generator=g)
    mask = (torch.arange(T)[None] < lengths[:, None]).long()
    rewards = torch.randint(0, 2, (B,), generator=g).float().tolist()
    old = -torch.rand(B, T, generator=g)
    batch = make_batch(rewards, [0] * 4 + [1] * 4, T=T, mask=mask.tolist(), old=old)
    batch.entropy = torch.rand(B, T, generator=g)
    return batch, 0.15 * torch.randn(B, T, generator=g)


def test_decayed_trace_hand_worked():
    """lam = 0.5, clip 0.2, hist_clip 0.2 (log h in [-0.22314, 0.18232]). Credit +-A, A = 0.70700.
    Seq 0, l = [0.1, 0.2, -0.1]: log_hist = [0, 0.5*0.1, 0.5*0.2 + 0.25*0.1] = [0, 0.05, 0.125],
      r = [1.10517, 1.22140, 0.90484], h = [1, 1.05127, 1.13315], rho = r h = e^[0.1, 0.25, 0.025].
      "current_token" (default, methods.md 7.2), -min(rho A, clip(r) A):
        t0: rho = r = 1.10517 (a tie: unclipped); t1: min(1.28403, 1.2) = 1.2 (clipped);
        t2: min(1.02532, 0.90484) = 0.90484 (clipped: for A > 0 a history above 1 never raises
        the objective) -> loss = -A [1.10517, 1.2, 0.90484].
      "current_token_weighted", -min(rho A, clip(r) h A) = -h min(r A, clip(r) A):
        loss = -A [1.10517, 1.2 e^0.05 = 1.26152, e^0.025 = 1.02532] (token 1 exceeds 1.2
        through its history; token 2 differs from the default by 0.12048 A = 0.08518).
      "full_traced": rho -> [1.10517, 1.2 (clipped), 1.02532].
    Seq 1, l = [-0.3, 0, 0], A < 0: log_hist = [0, -0.15, -0.075], r = [0.74082, 1, 1],
      h = [1, 0.86071, 0.92774]. Default: -min(rho A, clip(r) A) = |A| max(rho, clip(r)) =
      |A| [0.8, 1, 1] (all clipped); weighted: |A| max(rho, clip(r) h) = |A| [0.8, e^-0.15, e^-0.075];
      full_traced: rho = [0.74082 -> 0.8, e^-0.15, e^-0.075].
    Gradients (seq-mean-token-mean, B = 2, L = 3 -> /6), d/d l_k:
      default: seq 0 gets -A r_t from each unclipped or inside-range clipped term of its own
      token only: [-A 1.10517, 0 (r_1 > 1.2), -A 0.90484] / 6; seq 1: [0 (r_0 < 0.8), A, A] / 6
      (|A| = -A) -- no gradient reaches the history.
      weighted, seq 0 (d/d l_k of -A r_t h_t): l_0: -A (1.10517 + 0.5 * 1.26152 + 0.25 * 1.02532)
      / 6 (token 1 passes gradient through h_1 although r_1 is clipped); l_1: -A 0.5 * 1.02532 / 6
      (its own ratio is clipped); l_2: -A 1.02532 / 6. With detach_history: l_0 = -A 1.10517 / 6,
      l_1 = 0, l_2 = -A 1.02532 / 6."""
    batch = make_batch([1.0, 0.0], [0, 0])
    out, _, grad = run(PTrace(PTraceConfig(lam=0.5)), batch, L)
    assert out.loss[0].tolist() == pytest.approx([-A * E(0.1), -A * 1.2, -A * E(-0.1)])
    assert out.loss[1].tolist() == pytest.approx([A * 0.8, A, A])
    assert out.stats["clip_frac"].tolist() == [[0, 1, 1], [1, 1, 1]]
    assert grad[0].tolist() == pytest.approx([-A * E(0.1) / 6, 0.0, -A * E(-0.1) / 6])
    assert grad[1].tolist() == pytest.approx([0.0, A / 6, A / 6])

    weighted = PTraceConfig(lam=0.5, clip_target="current_token_weighted")
    seq1 = [A * 0.8, A * E(-0.15), A * E(-0.075)]
    out, _, grad = run(PTrace(weighted), batch, L)
    assert out.loss[0].tolist() == pytest.approx([-A * E(0.1), -A * 1.2 * E(0.05), -A * E(0.025)])
    assert out.loss[1].tolist() == pytest.approx(seq1)
    assert out.stats["clip_frac"].tolist() == [[0, 1, 0], [1, 0, 0]]
    assert grad[0].tolist() == pytest.approx(
        [-A * (E(0.1) + 0.5 * 1.2 * E(0.05) + 0.25 * E(0.025)) / 6, -A * 0.5 * E(0.025) / 6, -A * E(0.025) / 6]
    )
    out, _, _ = run(PTrace(PTraceConfig(lam=0.5, clip_target="full_traced")), batch, L)
    assert out.loss[0].tolist() == pytest.approx([-A * E(0.1), -A * 1.2, -A * E(0.025)])
    assert out.loss[1].tolist() == pytest.approx(seq1)
    _, _, grad = run(PTrace(PTraceConfig(lam=0.5, clip_target="current_token_weighted", detach_history=True)), batch, L)
    assert grad[0].tolist() == pytest.approx([-A * E(0.1) / 6, 0.0, -A * E(0.025) / 6])


def test_readings_agree_on_policy():
    """At ratio 1 (l = 0, so r = h = 1) the two terms tie; the default takes the unclipped one, so
    the gradient is the full trace -A sum_{t>=k} lam^(t-k) / 6 = -A [1.75, 1.5, 1] / 6 (lam 0.5)
    in all three readings (torch.minimum would halve the history's share in the default)."""
    batch = make_batch([1.0, 0.0], [0, 0])
    trace = torch.tensor([1.75, 1.5, 1.0]) / 6
    for target in ("current_token", "current_token_weighted", "full_traced"):
        _, _, grad = run(PTrace(PTraceConfig(lam=0.5, clip_target=target)), batch, torch.zeros(2, 3))
        assert torch.allclose(grad, torch.stack([-A * trace, A * trace]), atol=1e-6), target


def test_history_clip_hand_worked():
    """lam = 1, seq 0 l = [0.3, 0.1, 0]: log_hist = [0, 0.3, 0.4], both above log 1.2 = 0.18232,
    so h = [1, 1.2, 1.2]; r = [1.34986, 1.10517, 1], rho = r h = [1.34986, 1.32620, 1.2].
    Default -min(rho A, clip(r) A): every token takes clip(r) = [1.2, 1.10517, 1]: loss
    -A [1.2, 1.10517, 1]; l_0 gets no gradient (r_0 is clipped), l_1 gets -A 1.10517 / 6 and
    l_2 gets -A / 6. Weighted -h min(r A, clip(r) A): loss -A [1.2, 1.2 * 1.10517, 1.2], gradient
    [0, -A 1.2 * 1.10517 / 6, -A 1.2 / 6] (l_0 reaches no history: both are clipped)."""
    batch = make_batch([1.0, 0.0], [0, 0])
    l = torch.tensor([[0.3, 0.1, 0.0], [0.0] * 3])
    out, _, grad = run(PTrace(PTraceConfig(lam=1.0)), batch, l)
    assert out.loss[0].tolist() == pytest.approx([-A * 1.2, -A * E(0.1), -A])
    assert out.stats["hist_clip_frac"][0].tolist() == [0, 1, 1]
    assert grad[0].tolist() == pytest.approx([0.0, -A * E(0.1) / 6, -A / 6])
    out, _, grad = run(PTrace(PTraceConfig(lam=1.0, clip_target="current_token_weighted")), batch, l)
    assert out.loss[0].tolist() == pytest.approx([-A * 1.2, -A * 1.2 * E(0.1), -A * 1.2])
    assert grad[0].tolist() == pytest.approx([0.0, -A * 1.2 * E(0.1) / 6, -A * 1.2 / 6])


def test_lam_zero_is_grpo_token_surrogate():
    """lam = 0: no history (h = 1), so the loss is GRPO's -min(r A, clip(r, 0.8, 1.2) A).
    Hand: seq 0 r = e^[0.1, 0.2, -0.1] -> loss -A [1.10517, 1.2, 0.90484]. Then on random
    off-policy batches the loss and gradient equal GRPO's (without its KL term)."""
    batch = make_batch([1.0, 0.0], [0, 0])
    out, _, _ = run(PTrace(PTraceConfig(lam=0.0)), batch, L)
    assert out.loss[0].tolist() == pytest.approx([-A * E(0.1), -A * 1.2, -A * E(-0.1)])
    for seed in range(3):
        batch, noise = random_batch(seed)
        _, total, grad = run(PTrace(PTraceConfig(lam=0.0)), batch, noise)
        _, total_grpo, grad_grpo = run(GRPO(GRPOConfig(kl_coef=0.0)), batch, noise)
        assert float(total) == pytest.approx(float(total_grpo), abs=1e-6)
        assert torch.allclose(grad, grad_grpo, atol=1e-7)


def test_uniform_weights_are_gspo():
    """weights="uniform": every token has weight 1/L_i, so log rho_t = mean_k l_k = log s_i for
    every t. With "full_traced", no history clip and GSPO's clip (3e-4, 4e-4), the aggregated
    loss and its gradient equal GSPO's: GSPO is the uniform-credit trace. Per-sequence log-ratio
    scales from 1e-5 to 5e-2 put some sequences inside the tiny clip range and some outside."""
    cfg = PTraceConfig(weights="uniform", clip_target="full_traced", hist_clip=None, clip_low=3e-4, clip_high=4e-4)
    for seed in range(4):
        batch, noise = random_batch(seed)
        noise = noise * torch.tensor([1e-4, 1e-3, 1e-2, 0.3] * 2)[:, None]
        mask = batch.completion_mask
        current, history = trace_parts(noise * mask, mask, cfg.lam, cfg.weights)
        log_s = sequence_log_ratio(noise, torch.zeros_like(noise), mask)  # [B]
        valid = mask.bool()
        per_token = log_s[:, None].expand_as(noise)  # [B, T]
        assert torch.allclose((current + history)[valid], per_token[valid], atol=1e-7)
        _, total, grad = run(PTrace(cfg), batch, noise)
        _, total_gspo, grad_gspo = run(GSPO(), batch, noise)
        assert float(total) == pytest.approx(float(total_gspo), abs=1e-6)
        assert torch.allclose(grad, grad_gspo, atol=1e-6)
        assert grad.abs().sum() > 0


def test_loop_versus_vectorised():
    for seed, (weights, clip_target, hist_clip, detach) in enumerate(
        itertools.product(
            ["decay", "uniform"], ["current_token", "current_token_weighted", "full_traced"], [0.2, None], [False, True]
        )
    ):
        cfg = PTraceConfig(
            lam=0.8, weights=weights, clip_target=clip_target, hist_clip=hist_clip, detach_history=detach
        )
        batch, noise = random_batch(seed)
        m = PTrace(cfg)
        out, _, grad = run(m, batch, noise)
        logprobs = (batch.old_logprobs + noise).requires_grad_()
        mask = batch.completion_mask
        expected = loop_loss(logprobs - batch.old_logprobs, mask, m.credit(batch)[:, 0], cfg)
        aggregate(expected, mask, cfg.aggregation).backward()
        assert torch.allclose(out.loss * mask, expected.detach() * mask, atol=1e-6), cfg
        assert torch.allclose(grad, logprobs.grad, atol=1e-6), cfg


def test_defaults_and_validation():
    cfg = PTraceConfig()
    assert (cfg.lam, cfg.weights, cfg.detach_history, cfg.clip_target, cfg.hist_clip) == (
        0.95,
        "decay",
        False,
        "current_token",
        0.2,
    )
    assert (cfg.clip_low, cfg.clip_high, cfg.aggregation, cfg.kl_coef) == (0.2, 0.2, "seq-mean-token-mean", 0.0)
    for bad, match in [
        ({"weights": "flat"}, "decay, uniform"),
        ({"clip_target": "all"}, "current_token, current_token_weighted, full_traced"),
        ({"hist_clip": 1.0}, "hist_clip"),
        ({"lam": -0.1}, "lam"),
    ]:
        with pytest.raises(CreditBenchError, match=match):
            PTraceConfig(**bad)
