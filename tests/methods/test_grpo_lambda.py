import itertools
import math

import pytest
import torch
from test_grpo import make_batch

from bench.errors import CreditBenchError
from bench.numerics import aggregate
from methods.grpo_lambda import GRPOLambda, GRPOLambdaConfig

A = 0.5 / (math.sqrt(0.5) + 1e-4)  # GRPO advantage of rewards [1, 0]: +-0.70700
L = torch.tensor([[0.1, 0.2, -0.1], [-0.3, 0.0, 0.0]])  # token log-ratios of the hand examples


def hand_loss(config: GRPOLambdaConfig, log_ratio=L, requires_grad=False):
    batch = make_batch([1.0, 0.0], [0, 0])
    m = GRPOLambda(config)
    logprobs = (batch.old_logprobs + log_ratio).requires_grad_(requires_grad)
    credit = m.credit(batch)
    out = m.loss(batch, logprobs, credit)
    total = aggregate(out.loss, batch.completion_mask, config.aggregation)
    return credit, out, total, logprobs


def test_recent_trace_hand_worked():
    """a = gamma * lam = 0.5, eps = 0.2. Credit: A = [+0.70700, max(-0.70700, -0.1) = -0.1].
    Seq 0, l = [0.1, 0.2, -0.1]: z = [0.1, 0.25, 0.025], rho = [1.10517, 1.28403, 1.02532];
    A > 0 clips rho_1 to 1.2 -> loss = -0.70700 * [1.10517, 1.2, 1.02532].
    Seq 1, l = [-0.3, 0, 0]: z = [-0.3, -0.15, -0.075], rho = [0.74082, 0.86071, 0.92774];
    A < 0 clips rho_0 up to 0.8 -> loss = 0.1 * [0.8, 0.86071, 0.92774].
    seq-mean-token-mean: the mean of the two per-sequence token means."""
    credit, out, total, _ = hand_loss(GRPOLambdaConfig(lam=0.5))
    assert credit[:, 0].tolist() == pytest.approx([A, -0.1])
    seq0 = [-A * math.exp(0.1), -A * 1.2, -A * math.exp(0.025)]
    seq1 = [0.1 * 0.8, 0.1 * math.exp(-0.15), 0.1 * math.exp(-0.075)]
    assert out.loss.tolist() == [pytest.approx(seq0), pytest.approx(seq1)]
    assert out.stats["clip_frac"].tolist() == [[0, 1, 0], [1, 0, 0]]
    assert out.stats["trace_log_ratio"][0].tolist() == pytest.approx([0.1, 0.25, 0.025])
    assert float(total) == pytest.approx((sum(seq0) / 3 + sum(seq1) / 3) / 2)


def test_both_trace_hand_worked():
    """ "both", a = 0.5: W = [[1], [1, 1], [1, .5, 1]] (max(a^(t-k), a^k)).
    Seq 0: z = [0.1, 0.3, 0.1 + 0.1 - 0.1 = 0.1] -> rho = [1.10517, 1.34986 -> 1.2, 1.10517].
    Seq 1: z = [-0.3, -0.3, -0.3] -> rho = 0.74082 < 0.8 everywhere, A < 0: loss 0.1 * 0.8."""
    _, out, _, _ = hand_loss(GRPOLambdaConfig(lam=0.5, style="both"))
    assert out.loss[0].tolist() == pytest.approx([-A * math.exp(0.1), -A * 1.2, -A * math.exp(0.1)])
    assert out.loss[1].tolist() == pytest.approx([0.08] * 3)


def test_position_origin_hand_worked():
    """ "both", a = 0.5, positions counted from 1: W = max(a^(t-k), a^(k+1)) = [[1], [.5, 1],
    [.5, .5, 1]]. Seq 0: z = [0.1, 0.25, 0.05] -> rho = [1.10517, 1.28403 -> 1.2, 1.05127].
    Seq 1: z = [-0.3, -0.15, -0.15] -> rho = [0.74082 -> 0.8 (A < 0), 0.86071, 0.86071], A = -0.1.
    "recent" is the same for either origin."""
    _, out, _, _ = hand_loss(GRPOLambdaConfig(lam=0.5, style="both", position_origin=1))
    assert out.stats["trace_log_ratio"][0].tolist() == pytest.approx([0.1, 0.25, 0.05])
    assert out.loss[0].tolist() == pytest.approx([-A * math.exp(0.1), -A * 1.2, -A * math.exp(0.05)])
    assert out.loss[1].tolist() == pytest.approx([0.08, 0.1 * math.exp(-0.15), 0.1 * math.exp(-0.15)])
    recent = [hand_loss(GRPOLambdaConfig(lam=0.5, position_origin=o))[1].loss for o in (0, 1)]
    assert torch.equal(recent[0], recent[1])


def test_trace_floor_and_token_ratio_clip_hand_worked():
    """Floor 0.3 (a = 0.5, recent): W[2, 0] = max(0.25, 0.3) -> z_2 = -0.1 + 0.1 + 0.03 = 0.03.
    clip_target "token_ratio": l is clamped to [log 0.8, log 1.2] = [-0.22314, 0.18232] before
    tracing. Seq 0: bounded l = [0.1, 0.18232, -0.1], z' = [0.1, 0.23232, 0.01616] while
    z = [0.1, 0.25, 0.025]; A > 0 takes min(e^z, e^z') = e^z' -> loss = -A e^z', and tokens 1 and
    2 count as clipped (the clamp on token 1 carries on into token 2's trace)."""
    _, out, _, _ = hand_loss(GRPOLambdaConfig(lam=0.5, trace_floor=0.3))
    assert out.stats["trace_log_ratio"][0].tolist() == pytest.approx([0.1, 0.25, 0.03])
    _, out, _, _ = hand_loss(GRPOLambdaConfig(lam=0.5, clip_target="token_ratio"))
    b1 = math.log(1.2)
    z_bounded = [0.1, b1 + 0.05, -0.1 + 0.5 * b1 + 0.025]
    assert out.loss[0].tolist() == pytest.approx([-A * math.exp(z) for z in z_bounded])
    assert out.stats["clip_frac"][0].tolist() == [0, 1, 1]


def test_on_policy_gradient_is_the_trace_sum():
    """At ratio 1 every token is unclipped and d loss_t / d l_k = -A W_{t,k}; with
    seq-mean-token-mean over B = 2, L = 3, a = 0.5 the gradient on token k of seq 0 is
    -A (sum_{t>=k} 0.5^(t-k)) / 6 = -A [1.75, 1.5, 1] / 6 (early tokens get more: the
    gradient-scale effect), and +0.1 [1.75, 1.5, 1] / 6 on seq 1."""
    cfg = GRPOLambdaConfig(lam=0.5, kl_coef=0.0)
    _, _, total, logprobs = hand_loss(cfg, torch.zeros(2, 3), requires_grad=True)
    total.backward()
    trace = torch.tensor([1.75, 1.5, 1.0]) / 6
    assert torch.allclose(logprobs.grad, torch.stack([-A * trace, 0.1 * trace]), atol=1e-6)


def loop_loss(l, mask, adv, a, style, floor, eps, clip_target, origin=0):  # [B, T], token by token
    """GRPO-lambda's per-token loss written straight from the equations."""
    B, T = l.shape
    rows = []
    for i in range(B):
        row = []
        for t in range(T):
            z, zb = 0.0, 0.0
            for k in range(t + 1):
                w = a ** (t - k) if style == "recent" else max(a ** (t - k), a ** (k + origin))
                w = max(w, floor) * mask[i, k]
                z = z + w * l[i, k]
                zb = zb + w * l[i, k].clamp(math.log(1 - eps), math.log(1 + eps))
            rho, A_i = torch.exp(z), adv[i]
            other = rho.clamp(1 - eps, 1 + eps) if clip_target == "traced_ratio" else torch.exp(zb)
            row.append(-torch.minimum(rho * A_i, other * A_i))
        rows.append(torch.stack(row))
    return torch.stack(rows)


def test_loop_versus_vectorised():
    g = torch.Generator().manual_seed(0)
    B, T = 8, 9
    lengths = torch.randint(1, T + 1, (B,), generator=g)
    mask = (torch.arange(T)[None] < lengths[:, None]).long()
    rewards = torch.randint(0, 2, (B,), generator=g).float().tolist()
    old = -torch.rand(B, T, generator=g)
    batch = make_batch(rewards, [0] * 4 + [1] * 4, T=T, mask=mask.tolist(), old=old)
    noise = 0.2 * torch.randn(B, T, generator=g)
    for style, clip_target, floor, lam in itertools.product(
        ["recent", "both"], ["traced_ratio", "token_ratio"], [0.0, 0.4], [0.6, 1.0]
    ):
        origin = int(lam == 1.0)
        cfg = GRPOLambdaConfig(
            lam=lam, gamma=0.9, style=style, clip_target=clip_target, trace_floor=floor, position_origin=origin
        )
        m = GRPOLambda(cfg)
        credit = m.credit(batch)
        grads = []
        for fn in ("vectorised", "loop"):
            logprobs = (batch.old_logprobs + noise).requires_grad_()
            if fn == "vectorised":
                loss = m.loss(batch, logprobs, credit).loss
            else:
                l = logprobs - batch.old_logprobs
                loss = loop_loss(l, mask, credit[:, 0], 0.9 * lam, style, floor, cfg.clip_eps, clip_target, origin)
            aggregate(loss, batch.completion_mask, cfg.aggregation).backward()
            grads.append((loss * mask).detach())
            grads.append(logprobs.grad)
        assert torch.allclose(grads[0], grads[2], atol=1e-5), (style, clip_target, floor, lam)
        assert torch.allclose(grads[1], grads[3], atol=1e-6), (style, clip_target, floor, lam)


def test_defaults_and_validation():
    cfg = GRPOLambdaConfig()
    assert (cfg.lam, cfg.gamma, cfg.style, cfg.clip_target, cfg.trace_floor) == (
        0.99,
        1.0,
        "recent",
        "traced_ratio",
        0.0,
    )
    assert (cfg.clip_eps, cfg.neg_adv_clamp, cfg.aggregation, cfg.kl_coef) == (0.2, -0.1, "seq-mean-token-mean", 0.04)
    assert cfg.position_origin == 0
    batch = make_batch([1.0, 0.0], [0, 0])
    credit = GRPOLambda(GRPOLambdaConfig(neg_adv_clamp=None)).credit(batch)
    assert credit[:, 0].tolist() == pytest.approx([A, -A])
    with pytest.raises(CreditBenchError, match="recent, both"):
        GRPOLambdaConfig(style="old")
    with pytest.raises(CreditBenchError, match="traced_ratio, token_ratio"):
        GRPOLambdaConfig(clip_target="weight")
    with pytest.raises(CreditBenchError, match="lam"):
        GRPOLambdaConfig(lam=1.5)
    with pytest.raises(CreditBenchError, match="neg_adv_clamp"):
        GRPOLambdaConfig(neg_adv_clamp=0.1)
    with pytest.raises(CreditBenchError, match="position_origin must be 0 or 1"):
        GRPOLambdaConfig(position_origin=2)
