"""DelTA as its official code (RUCBM/DelTA, dp_actor.py::compute_log_prob_h, impl "Normal") computes
it: hand-worked weights on a 2-D hidden-state batch, the official loop transcribed, the config."""

import math

import pytest
import torch

import methods.delta as delta_module
from bench.core import RolloutBatch
from bench.errors import CreditBenchError
from bench.numerics import aggregate
from methods.delta import DelTA, DelTAConfig, delta_weights


def sig(x):
    return 1.0 / (1.0 + math.exp(-x))


def hand_batch():
    """Group 0: row 0 correct (A > 0), row 1 wrong (A < 0), two tokens each plus a padded slot
    with a huge hidden state; group 1: rows 2 and 3 both correct (A = 0), one token each.
    Features v = (1 - p) h: row 0 a = 0.5 * (4, 0) = (2, 0), b = 0.1 * (0, 0) = (0, 0);
    row 1 c = 0.25 * (0, 8) = (0, 2), d = (0, 0); rows 2 and 3 arbitrary (weight 0 in the centroids)."""
    h = torch.tensor(
        [
            [[4.0, 0.0], [0.0, 0.0], [1e3, 1e3]],
            [[0.0, 8.0], [0.0, 0.0], [1e3, -1e3]],
            [[5.0, -3.0], [1e3, 1e3], [1e3, 1e3]],
            [[7.0, 7.0], [1e3, 1e3], [1e3, 1e3]],
        ]
    )
    p = torch.tensor([[0.5, 0.9, 0.01], [0.75, 0.3, 0.01], [0.2, 0.01, 0.01], [0.6, 0.01, 0.01]])
    correct = torch.tensor([True, False, True, True])
    return RolloutBatch(
        prompt_ids=torch.zeros(4, 1, dtype=torch.long),
        prompt_mask=torch.ones(4, 1, dtype=torch.long),
        completion_ids=torch.zeros(4, 3, dtype=torch.long),
        completion_mask=torch.tensor([[1, 1, 0], [1, 1, 0], [1, 0, 0], [1, 0, 0]]),
        group_ids=torch.tensor([0, 0, 1, 1]),
        rewards=correct.float(),
        correct=correct,
        truncated=torch.zeros(4, dtype=torch.bool),
        max_new_tokens=100,
        old_logprobs=p.log(),
        hidden_states=h,
    )


A = 1.0 / (math.sqrt(2.0) + 1e-6)  # signed rewards [1, -1]: mean 0, unbiased std sqrt(2), verl's eps 1e-6


def test_weights_hand_worked_one_refinement():
    """mu+ = mean(a, b) = (1, 0), mu- = mean(c, d) = (0, 1) (A+- is constant within a row).
    Margins m = d_other - d_own: a: 5 - 1 = 4, b: 1 - 1 = 0; c: 5 - 1 = 4, d: 0, so g+ = g- =
    std{4, 0} = 2. K = 1: posterior s = sigmoid(m / 2) = [sigmoid(2), 1/2] on (a, b), so
    mu+ = sigmoid(2) (2, 0) / (sigmoid(2) + 1/2) = (mu, 0) with mu = 1.27578, mu- = (0, mu);
    g stays std{4, 0} = 2 (the margins just used). New margins: a: (4 + mu^2) - (2 - mu)^2 = 4 mu
    = 5.10312, b: mu^2 - mu^2 = 0 (the shared direction), likewise c, d. Weights before the
    normaliser: a, c: 0.8 + 0.4 sigmoid(2.55156) = 1.17107; b, d: 0.8 + 0.4 / 2 = 1.0; the
    zero-advantage tokens 0.8. Mean over the 6 valid tokens 0.99035 -> a, c: 1.18247,
    b, d: 1.00974, zero-advantage 0.80779. Padded slots get 0 whatever their hidden state."""
    b = hand_batch()
    mu = 2 * sig(2) / (sig(2) + 0.5)
    assert mu == pytest.approx(1.27578, abs=1e-5)
    w_a = 0.8 + 0.4 * sig(4 * mu / 2)
    mean = (2 * w_a + 2 * 1.0 + 2 * 0.8) / 6
    m = DelTA()
    credit = m.credit(b)
    w = b.extra["delta_weight"]
    expected = [[w_a / mean, 1 / mean, 0], [w_a / mean, 1 / mean, 0], [0.8 / mean, 0, 0], [0.8 / mean, 0, 0]]
    assert w.tolist() == [pytest.approx(r, abs=1e-5) for r in expected]
    assert [w_a / mean, 1 / mean, 0.8 / mean] == pytest.approx([1.18247, 1.00974, 0.80779], abs=1e-5)
    assert float(w[b.completion_mask.bool()].mean()) == pytest.approx(1.0)
    assert credit[0, :2].tolist() == pytest.approx([A * w_a / mean, A / mean], abs=1e-6)
    assert credit[1, :2].tolist() == pytest.approx([-A * w_a / mean, -A / mean], abs=1e-6)
    assert torch.all(credit[2:] == 0)


def test_weights_hand_worked_without_refinement():
    """K = 0: the final margins are the initial ones, a, c: 4 / 2 -> 0.8 + 0.4 sigmoid(2) = 1.15232,
    b, d: 1.0, zero-advantage 0.8; mean over 6 tokens 0.98411 -> 1.17092, 1.01615, 0.81292.
    gamma_time = 2 halves the sigmoid's argument: a, c: 0.8 + 0.4 sigmoid(1) = 1.09242."""
    b = hand_batch()
    DelTA(DelTAConfig(refine_steps=0)).credit(b)
    w = b.extra["delta_weight"]
    w_a = 0.8 + 0.4 * sig(2)
    mean = (2 * w_a + 2 + 1.6) / 6
    assert [float(w[0, 0]), float(w[0, 1]), float(w[2, 0])] == pytest.approx([w_a / mean, 1 / mean, 0.8 / mean])
    assert [w_a / mean, 1 / mean, 0.8 / mean] == pytest.approx([1.17092, 1.01615, 0.81292], abs=1e-5)
    b = hand_batch()
    DelTA(DelTAConfig(refine_steps=0, gamma_time=2.0)).credit(b)
    w_a = 0.8 + 0.4 * sig(1)
    assert float(b.extra["delta_weight"][1, 0]) == pytest.approx(w_a / ((2 * w_a + 3.6) / 6))


def official_weights(v, adv, mask, K, lo, hi, micro=2, eps=1e-8):
    """compute_log_prob_h's "Normal" branch transcribed: running sums over micro-batches of rows in
    four passes (centroids; margin stds; K refinements; final weights), then N / sum w."""
    chunks = [(v[i : i + micro], adv[i : i + micro], mask[i : i + micro].float()) for i in range(0, len(adv), micro)]
    H = v.shape[-1]
    sum_p, sum_n, s_p, s_n = torch.zeros(H, dtype=v.dtype), torch.zeros(H, dtype=v.dtype), 0.0, 0.0
    for x, a, m in chunks:
        w_p, w_n = a.clamp(min=0)[:, None] * m, (-a).clamp(min=0)[:, None] * m
        sum_p, sum_n = sum_p + (w_p[..., None] * x).sum((0, 1)), sum_n + (w_n[..., None] * x).sum((0, 1))
        s_p, s_n = s_p + w_p.sum(), s_n + w_n.sum()
    mu_p, mu_n = sum_p / s_p.clamp(min=eps), sum_n / s_n.clamp(min=eps)

    def margins(x, a, m, mu_p, mu_n):
        d_p, d_n = ((x - mu_p) ** 2).sum(-1), ((x - mu_n) ** 2).sum(-1)
        return d_n - d_p, d_p - d_n, (a > 0).float()[:, None] * m, (a < 0).float()[:, None] * m

    def gammas(mu_p, mu_n):
        acc = torch.zeros(2, 3, dtype=v.dtype)  # per side: sum m, sum m^2, count
        for x, a, m in chunks:
            m_p, m_n, ok_p, ok_n = margins(x, a, m, mu_p, mu_n)
            for side, (mm, ok) in enumerate([(m_p, ok_p), (m_n, ok_n)]):
                acc[side] += torch.stack([(mm * ok).sum(), (mm**2 * ok).sum(), ok.sum()])
        n = acc[:, 2].clamp(min=1.0)
        return ((acc[:, 1] / n - (acc[:, 0] / n) ** 2).clamp(min=eps)).sqrt()

    g_p, g_n = gammas(mu_p, mu_n)
    for _ in range(K):
        num_p, num_n, den_p, den_n = torch.zeros(H, dtype=v.dtype), torch.zeros(H, dtype=v.dtype), 0.0, 0.0
        for x, a, m in chunks:
            m_p, m_n, ok_p, ok_n = margins(x, a, m, mu_p, mu_n)
            w_p = torch.sigmoid(m_p / g_p) * a.clamp(min=0)[:, None] * ok_p
            w_n = torch.sigmoid(m_n / g_n) * (-a).clamp(min=0)[:, None] * ok_n
            num_p, num_n = num_p + (w_p[..., None] * x).sum((0, 1)), num_n + (w_n[..., None] * x).sum((0, 1))
            den_p, den_n = den_p + w_p.sum(), den_n + w_n.sum()
        g_p, g_n = gammas(mu_p, mu_n)  # the margins of this pass, before the centroids move
        mu_p, mu_n = num_p / den_p.clamp(min=eps), num_n / den_n.clamp(min=eps)
    weights = []
    for x, a, m in chunks:
        m_p, m_n, _, _ = margins(x, a, m, mu_p, mu_n)
        pos, neg = (a > 0).float()[:, None], (a < 0).float()[:, None]
        w_p, w_n = lo + (hi - lo) * torch.sigmoid(m_p / g_p), lo + (hi - lo) * torch.sigmoid(m_n / g_n)
        weights.append((w_p * pos + w_n * neg + lo * (1 - pos - neg)) * m)
    w = torch.cat(weights)
    return w * mask.float().sum() / w.sum().clamp(min=eps)


@pytest.mark.parametrize("K", [0, 1, 3])
def test_matches_the_official_loop(K):
    """Random features, advantages with zero rows, ragged masks: the vectorised weights equal the
    official micro-batch loop's for K = 0, 1, 3."""
    g = torch.Generator().manual_seed(K)
    B, T, H = 7, 5, 3
    v = torch.randn(B, T, H, generator=g, dtype=torch.float64)
    adv = torch.tensor([1.2, -0.4, 0.0, 0.7, -1.1, 0.0, 0.3], dtype=torch.float64)
    mask = (torch.arange(T)[None] < torch.tensor([5, 3, 2, 4, 1, 5, 2])[:, None]).long()
    cfg = DelTAConfig(refine_steps=K, lam_min=0.7, lam_max=1.5)
    ours = delta_weights(v, adv, mask, cfg).double()
    theirs = official_weights(v * mask[..., None], adv, mask, K, 0.7, 1.5)
    assert torch.allclose(ours, theirs, atol=1e-5)


def test_global_population_reduces_every_statistic(monkeypatch):
    """Two processes holding the same rows: summing every statistic over them must give the same
    weights as one process (a sum left unreduced would halve or double something)."""
    b = hand_batch()
    local = DelTA().credit(b)
    monkeypatch.setattr(delta_module, "all_sum", lambda x: 2 * x)
    assert torch.allclose(DelTA(DelTAConfig(population="global")).credit(hand_batch()), local)


def test_dual_clip_caps_negative_advantage_tokens():
    """A = -0.5, ratio 12 (verl's clip_ratio_c = 10): loss -min(12 * -0.5, 1.28 * -0.5) = 6 without
    the dual clip, min(6, 10 * 0.5) = 5 with it, and its gradient is zero there. A ratio of 1.1 is
    below c: the same loss -1.1 * -0.5 = 0.55 either way."""
    b = hand_batch()
    b.old_logprobs = torch.zeros(4, 3)
    credit = torch.full((4, 3), -0.5)
    lp = torch.tensor([math.log(12.0), math.log(1.1), 0.0]).expand(4, 3).clone().requires_grad_()
    on = DelTA().loss(b, lp, credit).loss
    off = DelTA(DelTAConfig(dual_clip=None)).loss(b, lp, credit).loss
    assert on[0, :2].tolist() == pytest.approx([5.0, 0.55]) and off[0, :2].tolist() == pytest.approx([6.0, 0.55])
    aggregate(on, b.completion_mask, "token-mean").backward()
    assert lp.grad[0, 0] == 0 and lp.grad[0, 1] != 0


def test_defaults_are_the_run_script():
    """run_DelTA.sh: K 1, lam 0.8/1.2, clip 0.2/0.28, clip_ratio_c 10, token-mean, no KL, no
    dynamic sampling, soft overlong punishment without overlong filtering, verl's eps 1e-6."""
    cfg = DelTAConfig()
    assert (cfg.refine_steps, cfg.lam_min, cfg.lam_max, cfg.gamma_time, cfg.margin_weight) == (1, 0.8, 1.2, 1.0, 1.0)
    assert (cfg.clip_low, cfg.clip_high, cfg.dual_clip) == (0.2, 0.28, 10.0)
    assert (cfg.aggregation, cfg.kl_coef) == ("token-mean", 0.0)
    assert not cfg.dynamic_sampling and not cfg.overlong_filter and cfg.soft_overlong and cfg.adv_eps == 1e-6
    assert DelTA().generation_rounds == 1 and DelTA.needs == {"hidden_states"}


def test_needs_hidden_states():
    b = hand_batch()
    b.hidden_states = None
    with pytest.raises(CreditBenchError, match="hidden_states"):
        DelTA().credit(b)


@pytest.mark.parametrize(
    "bad, message",
    [
        ({"population": "minibatch"}, "unknown population 'minibatch'; valid: process, global"),
        ({"refine_steps": -1}, "refine_steps must be >= 0"),
        ({"lam_min": 1.3}, "lam_min <= lam_max"),
        ({"lam_min": -0.1}, "0 <= lam_min"),
        ({"gamma_time": 0.0}, "gamma_time must be > 0"),
        ({"margin_weight": -1.0}, "margin_weight must be > 0"),
        ({"dual_clip": 1.2}, "dual_clip must be None or > 1 \\+ clip_high"),
    ],
)
def test_bad_config(bad, message):
    with pytest.raises(CreditBenchError, match=message):
        DelTAConfig(**bad)
