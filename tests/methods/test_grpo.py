import math

import pytest
import torch

from bench.core import RolloutBatch
from methods.common import clipped_surrogate, group_advantage, group_mean_std
from methods.grpo import GRPO, GRPOConfig


def make_batch(rewards, group_ids, T=3, mask=None, old=None):
    B = len(rewards)
    mask = torch.ones(B, T, dtype=torch.long) if mask is None else torch.tensor(mask)
    return RolloutBatch(
        prompt_ids=torch.zeros(B, 1, dtype=torch.long),
        prompt_mask=torch.ones(B, 1, dtype=torch.long),
        completion_ids=torch.zeros(B, T, dtype=torch.long),
        completion_mask=mask,
        group_ids=torch.tensor(group_ids),
        rewards=torch.tensor(rewards, dtype=torch.float32),
        correct=torch.tensor(rewards) > 0,
        truncated=torch.zeros(B, dtype=torch.bool),
        max_new_tokens=T,
        old_logprobs=torch.zeros(B, T) if old is None else old,
    )


def test_group_advantage_hand_worked():
    """Group 0 rewards [1, 0, 0, 1]: mean 0.5, unbiased std sqrt(4 * 0.25 / 3) = 0.57735,
    so A = +-0.5 / (0.57735 + 1e-4) = +-0.86588. Group 1 rewards [1, 1]: all equal, A = 0.
    Dr. GRPO (scale=False): A = R - mean = +-0.5."""
    rewards = torch.tensor([1.0, 0.0, 0.0, 1.0, 1.0, 1.0])
    groups = torch.tensor([0, 0, 0, 0, 1, 1])
    a = group_advantage(rewards, groups)
    expected = 0.5 / (math.sqrt(1 / 3) + 1e-4)
    assert a.tolist() == pytest.approx([expected, -expected, -expected, expected, 0.0, 0.0], abs=1e-6)
    assert group_advantage(rewards, groups, scale=False).tolist() == pytest.approx([0.5, -0.5, -0.5, 0.5, 0, 0])


def test_group_std_estimator_and_eps_hand_worked():
    """Group [1, 0, 0, 1]: deviations +-0.5; unbiased std 0.57735, biased sqrt(4 * 0.25 / 4) = 0.5.
    std + eps: 0.5 / (0.5 + 1e-4) = 0.99980 (biased); max(std, eps): 0.5 / 0.5 = 1 (biased),
    0.5 / 0.57735 = 0.86603 (unbiased). With eps = 0.8 the floor binds: 0.5 / max(0.57735, 0.8)
    = 0.625, where adding gives 0.5 / 1.37735 = 0.36302. A group of one has std 0 either way."""
    rewards = torch.tensor([1.0, 0.0, 0.0, 1.0, 1.0])
    groups = torch.tensor([0, 0, 0, 0, 1])
    sign = torch.tensor([1.0, -1.0, -1.0, 1.0])
    assert group_mean_std(rewards, groups, unbiased=False)[1].tolist() == pytest.approx([0.5] * 4 + [0.0])
    assert group_mean_std(rewards, groups)[1].tolist() == pytest.approx([math.sqrt(1 / 3)] * 4 + [0.0])
    for kwargs, a in [
        ({"unbiased": False}, 0.5 / (0.5 + 1e-4)),
        ({"unbiased": False, "floor": True}, 1.0),
        ({"floor": True}, 0.5 / math.sqrt(1 / 3)),
        ({"eps": 0.8, "floor": True}, 0.625),
        ({"eps": 0.8}, 0.5 / (math.sqrt(1 / 3) + 0.8)),
    ]:
        adv = group_advantage(rewards, groups, **kwargs)
        assert adv.tolist() == pytest.approx((a * sign).tolist() + [0.0], abs=1e-6), kwargs
    m = GRPO(GRPOConfig(std="biased", eps_mode="floor"))
    credit = m.credit(make_batch(rewards[:4].tolist(), [0] * 4))
    assert credit[:, 0].tolist() == pytest.approx(sign.tolist())


def test_group_stats_loop_vs_vectorised():
    torch.manual_seed(0)
    for _ in range(5):
        G, n = int(torch.randint(2, 6, ())), int(torch.randint(1, 5, ()))
        rewards = torch.rand(G * n)
        groups = torch.arange(n).repeat_interleave(G)[torch.randperm(G * n)]
        for unbiased in (True, False):
            mean, std = group_mean_std(rewards, groups, unbiased)
            for i in range(G * n):
                same = rewards[groups == groups[i]]
                assert mean[i] == pytest.approx(float(same.mean()), abs=1e-6)
                assert std[i] == pytest.approx(float(same.std(unbiased=unbiased)), abs=1e-6)


def test_clipped_surrogate_hand_worked():
    """eps = 0.2. ratio e^{log 1.5} = 1.5 with A = +1: min(1.5, 1.2) = 1.2 -> loss -1.2, clipped.
    ratio 0.5 with A = -1: min(-0.5, -0.8) = -0.8 -> loss 0.8, clipped.
    ratio 1.5 with A = -1: min(-1.5, -1.2) = -1.5 -> loss 1.5, not clipped (pessimistic side).
    ratio 1.0 with A = 2: loss -2, not clipped."""
    lr = torch.log(torch.tensor([1.5, 0.5, 1.5, 1.0]))
    adv = torch.tensor([1.0, -1.0, -1.0, 2.0])
    loss, clipped = clipped_surrogate(lr, adv, 0.2, 0.2)
    assert loss.tolist() == pytest.approx([-1.2, 0.8, 1.5, -2.0])
    assert clipped.tolist() == [True, True, False, False]


def test_grpo_loss_hand_worked():
    """Two completions in one group, rewards [1, 0]: std = sqrt(0.5) = 0.70711, A = +-0.5/0.70721
    = +-0.70700. Completion 0 has 2 valid tokens with ratio [1, 1.5]; completion 1 has 3 tokens with
    ratio 1. Per-token losses: seq 0 [-0.70700, -1.2*0.70700], seq 1 [0.70700]*3.
    seq-mean-token-mean: ((-0.70700 - 0.84840)/2 + 0.70700) / 2 = -0.03535."""
    from bench.numerics import aggregate

    old = torch.zeros(2, 3)
    new = torch.tensor([[0.0, math.log(1.5), 0.0], [0.0, 0.0, 0.0]])
    batch = make_batch([1.0, 0.0], [0, 0], mask=[[1, 1, 0], [1, 1, 1]], old=old)
    m = GRPO(GRPOConfig())
    credit = m.credit(batch)
    a = 0.5 / (math.sqrt(0.5) + 1e-4)
    assert credit[0].tolist() == pytest.approx([a] * 3)
    assert credit[1].tolist() == pytest.approx([-a] * 3)
    out = m.loss(batch, new, credit)
    assert out.loss[0, :2].tolist() == pytest.approx([-a, -1.2 * a])
    assert out.stats["clip_frac"][0].tolist() == [0.0, 1.0, 0.0]
    total = aggregate(out.loss, batch.completion_mask, m.config.aggregation)
    assert float(total) == pytest.approx(((-a - 1.2 * a) / 2 + a) / 2, abs=1e-6)


def test_grpo_paper_defaults_and_validation():
    cfg = GRPOConfig()
    assert (cfg.aggregation, cfg.kl_coef, cfg.clip_eps) == ("seq-mean-token-mean", 0.04, 0.2)
    assert (cfg.scale_rewards, cfg.adv_eps, cfg.std, cfg.eps_mode) == (True, 1e-4, "unbiased", "add")
    assert "ref_logprobs" in GRPO(cfg).required
    assert "ref_logprobs" not in GRPO(GRPOConfig(kl_coef=0.0)).required
    from bench.errors import CreditBenchError

    with pytest.raises(CreditBenchError, match="clip_eps"):
        GRPOConfig(clip_eps=1.5)
    with pytest.raises(CreditBenchError, match="token-mean"):
        GRPOConfig(aggregation="mean")
    with pytest.raises(CreditBenchError, match="unbiased, biased"):
        GRPOConfig(std="population")
    with pytest.raises(CreditBenchError, match="add, floor"):
        GRPOConfig(eps_mode="max")


@pytest.mark.parametrize("name", ["grpo", "dr_grpo"])
def test_objective_loop_vs_vectorised(name):
    """The aggregated loss written as the papers' double sums over completions and tokens, in plain
    Python, against the vectorised method + aggregate, on random shapes and off-policy ratios.
    GRPO eq. 3: -1/G sum_i 1/|o_i| sum_t min(r A, clip(r) A); Dr. GRPO: -1/(G L_max) sum_i sum_t
    min(r A, clip(r) A) with A = R - mean R."""
    from bench.numerics import aggregate
    from bench.registry import METHODS

    g = torch.Generator().manual_seed(0)
    for _ in range(5):
        G, n, T = int(torch.randint(2, 5, (), generator=g)), int(torch.randint(1, 4, (), generator=g)), 7
        B = G * n
        lengths = torch.randint(1, T + 1, (B,), generator=g)
        mask = (torch.arange(T)[None] < lengths[:, None]).long()
        rewards = torch.randint(0, 2, (B,), generator=g).float()
        batch = make_batch(
            rewards.tolist(),
            torch.arange(n).repeat_interleave(G).tolist(),
            T=T,
            mask=mask.tolist(),
            old=-torch.rand(B, T, generator=g),
        )
        new = batch.old_logprobs + 0.3 * torch.randn(B, T, generator=g)
        m = METHODS.get(name)()
        cfg = m.config
        got = aggregate(m.loss(batch, new, m.credit(batch)).loss, mask, cfg.aggregation, max_len=T)
        total = 0.0
        for i in range(B):
            same = [float(rewards[j]) for j in range(B) if j // G == i // G]
            mean = sum(same) / G
            std = math.sqrt(sum((x - mean) ** 2 for x in same) / (G - 1))
            adv = float(rewards[i]) - mean
            if cfg.scale_rewards:
                adv /= std + cfg.adv_eps
            seq = 0.0
            for t in range(int(lengths[i])):
                r = math.exp(float(new[i, t] - batch.old_logprobs[i, t]))
                seq += min(r * adv, min(max(r, 1 - cfg.clip_eps), 1 + cfg.clip_eps) * adv)
            total += -seq / (int(lengths[i]) if name == "grpo" else T)
        assert float(got) == pytest.approx(total / B, rel=1e-5, abs=1e-6)
