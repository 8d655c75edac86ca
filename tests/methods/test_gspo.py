import math

import pytest
import torch
from test_grpo import make_batch

from bench.numerics import aggregate
from methods.dr_grpo import DrGRPO
from methods.gspo import GSPO, GSPOConfig, GSPOToken


def test_dr_grpo_hand_worked():
    """Rewards [1, 0, 0, 0] in one group: A = R - 0.25 = [0.75, -0.25, -0.25, -0.25] (no std).
    On-policy (ratio 1) the per-token loss is -A; seq 0 has 2 valid tokens, the others 3, budget 3:
    seq-mean-token-sum-norm = (-0.75*2 + 0.25*3*3) / (4 * 3) = (-1.5 + 2.25) / 12 = 0.0625."""
    batch = make_batch([1.0, 0.0, 0.0, 0.0], [0, 0, 0, 0], mask=[[1, 1, 0]] + [[1, 1, 1]] * 3)
    m = DrGRPO()
    credit = m.credit(batch)
    assert credit[:, 0].tolist() == pytest.approx([0.75, -0.25, -0.25, -0.25])
    out = m.loss(batch, batch.old_logprobs.clone(), credit)
    total = aggregate(out.loss, batch.completion_mask, m.config.aggregation, max_len=batch.max_new_tokens)
    assert float(total) == pytest.approx(0.0625)
    assert (m.config.kl_coef, m.config.scale_rewards) == (0.0, False)


def test_gspo_sequence_ratio_and_clip_hand_worked():
    """Rewards [1, 0]: A = +-0.5/(sqrt(0.5)+1e-4) = +-0.70700.
    Seq 0 log-ratios [0.1, 0.3] (2 valid tokens): log s = 0.2, s = 1.2214 > 1 + 4e-4, A > 0 ->
    clipped: loss = -(1.0004) * 0.70700. Seq 1 log-ratios [0, 0, 3e-3] (3 tokens): log s = 1e-3,
    s = 1.0010005, A < 0 -> min(-s*0.707, -1.0004*0.707) = -s*0.707 (unclipped): loss = +s*0.70700.
    seq-mean-token-mean: the mean of the two sequence losses."""
    new = torch.tensor([[0.1, 0.3, 9.0], [0.0, 0.0, 3e-3]])
    batch = make_batch([1.0, 0.0], [0, 0], mask=[[1, 1, 0], [1, 1, 1]])
    m = GSPO()
    credit = m.credit(batch)
    out = m.loss(batch, new, credit)
    a = 0.5 / (math.sqrt(0.5) + 1e-4)
    s1 = math.exp(1e-3)
    assert out.loss[0, :2].tolist() == pytest.approx([-1.0004 * a] * 2)
    assert out.loss[1].tolist() == pytest.approx([s1 * a] * 3)
    assert out.stats["clip_frac"][:, 0].tolist() == [1.0, 0.0]
    total = aggregate(out.loss, batch.completion_mask, m.config.aggregation)
    assert float(total) == pytest.approx((-1.0004 * a + s1 * a) / 2, abs=1e-6)


def test_gspo_token_equals_gspo_in_value_and_gradient():
    """GSPO eq. 13-14: with A_it = A_i, GSPO-token is GSPO in objective, clipping and gradient."""
    torch.manual_seed(0)
    for seed in range(5):
        g = torch.Generator().manual_seed(seed)
        B, T = 8, 7
        lengths = torch.randint(1, T + 1, (B,), generator=g)
        mask = (torch.arange(T)[None] < lengths[:, None]).long().tolist()
        batch = make_batch(
            torch.randint(0, 2, (B,), generator=g).float().tolist(),
            torch.arange(2).repeat_interleave(4).tolist(),
            T=T,
            mask=mask,
            old=-torch.rand(B, T, generator=g),
        )
        cfg = GSPOConfig(clip_low=0.05, clip_high=0.05)
        grads, values = [], []
        for cls in (GSPO, GSPOToken):
            m = cls(cfg)
            lp = (batch.old_logprobs + 0.03 * torch.randn(B, T, generator=g.manual_seed(seed + 100))).requires_grad_()
            out = m.loss(batch, lp, m.credit(batch))
            total = aggregate(out.loss, batch.completion_mask, cfg.aggregation)
            total.backward()
            values.append(float(total.detach()))
            grads.append(lp.grad.clone())
        assert values[0] == pytest.approx(values[1], abs=1e-6)
        assert torch.allclose(grads[0], grads[1], atol=1e-6)


def test_gspo_objective_loop_vs_vectorised():
    """GSPO eq. 5-7 as a plain loop: s_i = exp(mean_t l_it), loss -1/G sum_i min(s_i A_i, clip(s_i,
    1-3e-4, 1+4e-4) A_i), against the vectorised method + seq-mean-token-mean aggregation."""

    from methods.grpo import GRPO, GRPOConfig

    g = torch.Generator().manual_seed(1)
    B, G, T = 12, 4, 6
    lengths = torch.randint(1, T + 1, (B,), generator=g)
    mask = (torch.arange(T)[None] < lengths[:, None]).long()
    batch = make_batch(
        [float(x) for x in torch.randint(0, 2, (B,), generator=g)],
        torch.arange(B // G).repeat_interleave(G).tolist(),
        T=T,
        mask=mask.tolist(),
        old=-torch.rand(B, T, generator=g),
    )
    new = batch.old_logprobs + 1e-3 * torch.randn(B, T, generator=g)  # around the tiny clip range
    m = GSPO()
    got = aggregate(m.loss(batch, new, m.credit(batch)).loss, mask, m.config.aggregation)
    adv = GRPO(GRPOConfig()).credit(batch)[:, 0]
    total = 0.0
    for i in range(B):
        L = int(lengths[i])
        s = math.exp(sum(float(new[i, t] - batch.old_logprobs[i, t]) for t in range(L)) / L)
        a = float(adv[i])
        total += -min(s * a, min(max(s, 1 - 3e-4), 1 + 4e-4) * a)
    assert float(got) == pytest.approx(total / B, rel=1e-5, abs=1e-7)


def test_log_ratio_clamp_hand_worked():
    """Rewards [1, 0]: A = +-0.70700 = +-a. Seq 1 (A < 0) has log-ratios [12, 12, 12], log s = 12:
    far above the clip, but A < 0 takes the unclipped term, loss = e^12 a with gradient e^12 a / 3
    per token / 2 sequences. verl's clamp (log_ratio_max = 10) caps log s at 10: loss e^10 a and no
    gradient, in the sequence and the token form alike. Seq 0 (ratio 1) is untouched."""
    a = 0.5 / (math.sqrt(0.5) + 1e-4)
    batch = make_batch([1.0, 0.0], [0, 0])
    shift = torch.tensor([[0.0] * 3, [12.0] * 3])
    for cls in (GSPO, GSPOToken):
        for bound, value, grad in ((None, math.exp(12), math.exp(12) * a / 6), (10.0, math.exp(10), 0.0)):
            m = cls(GSPOConfig(log_ratio_max=bound))
            lp = (batch.old_logprobs + shift).requires_grad_()
            out = m.loss(batch, lp, m.credit(batch))
            assert out.loss[1].tolist() == pytest.approx([value * a] * 3, rel=1e-5)
            aggregate(out.loss, batch.completion_mask, m.config.aggregation).backward()
            assert lp.grad[1].tolist() == pytest.approx([grad] * 3, rel=1e-5)
            assert lp.grad[0].tolist() == pytest.approx([-a / 6] * 3)


def test_config_shares_grpo_advantage_fields():
    """GSPO's config derives from GroupAdvantageConfig (what GRPO.credit reads), not GRPOConfig:
    it has no clip_eps, and its advantage fields are checked as GRPO's are."""
    from bench.errors import CreditBenchError
    from bench.options import build_config
    from methods.grpo import GroupAdvantageConfig

    assert issubclass(GSPOConfig, GroupAdvantageConfig)
    with pytest.raises(CreditBenchError, match="has no option 'clip_eps'"):
        build_config(GSPOConfig, {"clip_eps": 0.2}, "method 'gspo'")
    with pytest.raises(CreditBenchError, match="adv_eps must be > 0"):
        GSPOConfig(adv_eps=0.0)
    with pytest.raises(CreditBenchError, match="log_ratio_max"):
        GSPOConfig(log_ratio_max=0.0)
    assert GSPOConfig().log_ratio_max is None
