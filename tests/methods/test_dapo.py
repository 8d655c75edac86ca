import math
import statistics

import pytest
import torch

from bench.core import RolloutBatch
from bench.errors import CreditBenchError
from bench.numerics import aggregate
from methods.dapo import DAPO, DAPOConfig, soft_overlong_punishment


def make_batch(correct, group_ids, lengths, max_new_tokens, truncated=None, T=None, rewards=None):
    B = len(correct)
    T = max(lengths) if T is None else T
    mask = (torch.arange(T)[None] < torch.tensor(lengths)[:, None]).long()
    correct = torch.tensor(correct, dtype=torch.bool)
    return RolloutBatch(
        prompt_ids=torch.zeros(B, 1, dtype=torch.long),
        prompt_mask=torch.ones(B, 1, dtype=torch.long),
        completion_ids=torch.zeros(B, T, dtype=torch.long),
        completion_mask=mask,
        group_ids=torch.tensor(group_ids),
        rewards=correct.float() if rewards is None else torch.tensor(rewards, dtype=torch.float32),
        correct=correct,
        truncated=torch.zeros(B, dtype=torch.bool) if truncated is None else torch.tensor(truncated),
        max_new_tokens=max_new_tokens,
        old_logprobs=torch.zeros(B, T),
        entropy=torch.zeros(B, T),
    )


def test_soft_overlong_punishment_and_credit_hand_worked():
    """Budget L_max = 20, buffer 0.2 -> L_cache = 4, punishment starts after 16 tokens (eq. 13):
    |y| = 15 -> 0; 17 -> (16 - 17)/4 = -0.25; 20 -> (16 - 20)/4 = -1; truncated at 20 -> -1.
    Correct [T, T, F, F] -> R = [1, 1, -1, -1] + R_length = [1, 0.75, -2, -2].
    Group mean -0.5625, deviations [1.5625, 1.3125, -1.4375, -1.4375], unbiased std
    sqrt(8.296875 / 3) = 1.6630168, A = dev / (std + 1e-4) = [0.93950, 0.78918, -0.86434, -0.86434];
    the truncated sample's credit is zeroed by overlong filtering."""
    batch = make_batch([True, True, False, False], [0] * 4, [15, 17, 20, 20], 20, truncated=[False, False, False, True])
    assert soft_overlong_punishment(batch.lengths, 20, 4).tolist() == pytest.approx([0.0, -0.25, -1.0, -1.0])
    m = DAPO()
    assert m.reward(batch).tolist() == pytest.approx([1.0, 0.75, -2.0, -2.0])
    credit = m.credit(batch)
    std = math.sqrt(8.296875 / 3)
    expected = [d / (std + 1e-4) for d in (1.5625, 1.3125, -1.4375)] + [0.0]
    assert credit[:, 0].tolist() == pytest.approx(expected, abs=1e-6)
    assert expected[:3] == pytest.approx([0.93950, 0.78918, -0.86434], abs=1e-5)
    assert torch.all(credit == credit[:, :1])  # the same advantage on every token


def test_unsigned_reward_and_no_shaping():
    """signed_reward=False uses the task's reward; soft_overlong=False leaves it unchanged:
    rewards [1, 0] at lengths [20, 15] of a 20-token budget -> R = [1, 0]."""
    batch = make_batch([True, False], [0, 0], [20, 15], 20, rewards=[1.0, 0.0])
    assert DAPO(DAPOConfig(signed_reward=False, soft_overlong=False)).reward(batch).tolist() == [1.0, 0.0]
    assert DAPO(DAPOConfig(signed_reward=False)).reward(batch).tolist() == [0.0, 0.0]  # 1 - 1 at L_max


def test_overlong_filter_zeroes_truncated_rows():
    """Truncated rows get zero credit and zero gradient; the others keep the unfiltered credit."""
    batch = make_batch([True, False, True, False], [0] * 4, [3, 5, 5, 4], 100, truncated=[False, True, True, False])
    on, off = DAPO().credit(batch), DAPO(DAPOConfig(overlong_filter=False)).credit(batch)
    assert torch.all(on[1:3] == 0) and torch.all(off[1:3] != 0)
    assert torch.equal(on[[0, 3]], off[[0, 3]])
    lp = batch.old_logprobs.clone().requires_grad_()
    out = DAPO().loss(batch, lp, on)
    aggregate(out.loss, out.mask, "token-mean").backward()
    assert torch.all(lp.grad[1:3] == 0) and torch.all(lp.grad[0, :3] != 0)
    assert DAPO(DAPOConfig(overlong_filter=False)).loss(batch, lp, off).mask is None


def test_overlong_filter_denominator_hand_worked():
    """Correct [T, F, T, F], lengths [2, 4, 3, 4], the last truncated; no soft punishment.
    R = [1, -1, 1, -1]: mean 0, unbiased std sqrt(4/3) = 1.15470, A = +-1 / (1.15470 + 1e-4)
    = +-0.86596 = +-a; the truncated row's credit is 0. On policy the loss is -A per token:
    token sum over the kept rows -2a + 4a - 3a = -a.
    "kept" (paper: the truncated row's loss is masked): LossOutput.mask drops its 4 tokens, so
    token-mean = -a / 9 and a token of row 0 gets gradient -a / 9.
    "all" (credit zeroed only): every valid token counts, -a / 13 and -a / 13."""
    batch = make_batch([True, False, True, False], [0] * 4, [2, 4, 3, 4], 100, truncated=[False, False, False, True])
    a = 1 / (math.sqrt(4 / 3) + 1e-4)
    for denominator, n in (("kept", 9), ("all", 13)):
        m = DAPO(DAPOConfig(soft_overlong=False, overlong_denominator=denominator))
        credit = m.credit(batch)
        assert credit[:, 0].tolist() == pytest.approx([a, -a, a, 0.0], abs=1e-6)
        lp = batch.old_logprobs.clone().requires_grad_()
        out = m.loss(batch, lp, credit)
        mask = batch.completion_mask if out.mask is None else out.mask
        assert int(mask.sum()) == n
        total = aggregate(out.loss, mask, m.config.aggregation)
        assert float(total.detach()) == pytest.approx(-a / n, abs=1e-6)
        total.backward()
        assert float(lp.grad[0, 0]) == pytest.approx(-a / n, abs=1e-6)


def test_group_std_options_reach_the_credit():
    """Rewards [1, 1, -1, -1] (no shaping at budget 100): deviations +-1; unbiased std
    sqrt(4/3) = 1.15470, biased 1. A = 1 / (1.15470 + 1e-4) = 0.86596 (default), 1 / (1 + 1e-4)
    = 0.99990 (biased), 1 / max(1, 1e-4) = 1 (biased, floor)."""
    batch = make_batch([True, True, False, False], [0] * 4, [3] * 4, 100)
    for options, a in (
        ({}, 1 / (math.sqrt(4 / 3) + 1e-4)),
        ({"std": "biased"}, 1 / (1 + 1e-4)),
        ({"std": "biased", "eps_mode": "floor"}, 1.0),
    ):
        credit = DAPO(DAPOConfig(**options)).credit(batch)
        assert credit[:, 0].tolist() == pytest.approx([a, a, -a, -a], abs=1e-6), options


def test_keep_groups_hand_worked():
    """Group 0 all correct (acc 1) and group 1 all wrong (acc 0) are dropped; groups 2 (1 of 4)
    and 3 (2 of 4) have mixed correctness and are kept. Rows are interleaved on purpose."""
    groups = [0, 1, 2, 3] * 4
    correct = [1, 0, 1, 0, 1, 0, 0, 1, 1, 0, 0, 1, 1, 0, 0, 0]
    batch = make_batch([bool(c) for c in correct], groups, [2] * 16, 100)
    assert DAPO().keep_groups(batch).tolist() == [False, False, True, True]
    assert DAPO().generation_rounds == 10
    off = DAPO(DAPOConfig(dynamic_sampling=False))
    assert off.keep_groups(batch) is None and off.generation_rounds == 1


def test_clip_higher_asymmetry_hand_worked():
    """eps_low 0.2, eps_high 0.28. A = +1: ratio 1.25 < 1.28 is not clipped (loss -1.25); ratio
    1.3 is clipped at 1.28 (loss -1.28, zero gradient). A = -1: ratio 0.75 < 0.8 is clipped at 0.8
    (loss 0.8, zero gradient); 0.85 is inside (loss 0.85); 1.3 is on the pessimistic side, never
    clipped (loss 1.3). Symmetric GRPO (0.2) would have clipped 1.25 at 1.2."""
    batch = make_batch([True, False], [0, 0], [3, 3], 100)
    credit = torch.tensor([[1.0] * 3, [-1.0] * 3])
    lp = torch.log(torch.tensor([[1.25, 1.3, 1.0], [0.75, 0.85, 1.3]])).requires_grad_()
    out = DAPO().loss(batch, lp, credit)
    assert out.loss.tolist() == [pytest.approx([-1.25, -1.28, -1.0]), pytest.approx([0.8, 0.85, 1.3])]
    assert out.stats["clip_frac"].tolist() == [[0.0, 1.0, 0.0], [1.0, 0.0, 0.0]]
    out.loss.sum().backward()
    assert (lp.grad == 0).tolist() == [[False, True, False], [True, False, False]]


def test_shaped_credit_loop_vs_vectorised():
    """Eq. 13 and eq. 9 written per sample with plain Python vs the vectorised credit."""
    g = torch.Generator().manual_seed(0)
    for trial in range(6):
        G, n = 4, 3
        B, budget = G * n, int(torch.randint(5, 40, (1,), generator=g))
        lengths = torch.randint(1, budget + 1, (B,), generator=g).tolist()
        correct = (torch.rand(B, generator=g) < 0.5).tolist()
        truncated = [bool(t) and L == budget for t, L in zip(torch.rand(B, generator=g) < 0.5, lengths)]
        groups = torch.arange(n).repeat_interleave(G)[torch.randperm(B, generator=g)].tolist()
        cfg = DAPOConfig(overlong_buffer=[0.2, 0.5, 0.05][trial % 3], overlong_penalty=[1.0, 0.5][trial % 2])
        batch = make_batch(correct, groups, lengths, budget, truncated=truncated)

        cache = round(cfg.overlong_buffer * budget)
        rewards = []
        for c, L in zip(correct, lengths):
            r = 1.0 if c else -1.0
            if L <= budget - cache:
                pen = 0.0
            elif L <= budget:
                pen = ((budget - cache) - L) / cache
            else:
                pen = -1.0
            rewards.append(r + cfg.overlong_penalty * pen)
        credit = DAPO(cfg).credit(batch)
        for i in range(B):
            same = [rewards[j] for j in range(B) if groups[j] == groups[i]]
            a = (rewards[i] - statistics.mean(same)) / (statistics.stdev(same) + cfg.adv_eps)
            a = 0.0 if truncated[i] else a
            assert credit[i].tolist() == pytest.approx([a] * credit.shape[1], abs=1e-5)


def test_paper_defaults_and_validation():
    cfg = DAPOConfig()
    assert (cfg.aggregation, cfg.kl_coef, cfg.clip_low, cfg.clip_high) == ("token-mean", 0.0, 0.2, 0.28)
    assert (cfg.signed_reward, cfg.overlong_filter, cfg.soft_overlong, cfg.dynamic_sampling) == (True,) * 4
    assert (cfg.overlong_buffer, cfg.overlong_penalty, cfg.max_gen_batches) == (0.2, 1.0, 10)
    assert (cfg.overlong_denominator, cfg.std, cfg.eps_mode, cfg.adv_eps) == ("kept", "unbiased", "add", 1e-4)
    assert DAPO(cfg).required == frozenset()
    with pytest.raises(CreditBenchError, match="overlong_buffer"):
        DAPOConfig(overlong_buffer=1.5)
    with pytest.raises(CreditBenchError, match="clip_low"):
        DAPOConfig(clip_low=0.0)
    with pytest.raises(CreditBenchError, match="max_gen_batches"):
        DAPOConfig(max_gen_batches=0)
    with pytest.raises(CreditBenchError, match="kept, all"):
        DAPOConfig(overlong_denominator="some")


def test_dual_clip_is_the_official_recipe_s_and_an_option():
    """A = -1, ratio 6 (log-ratio ln 6): without the dual clip (the paper) the loss is
    -min(6 * -1, clip(6) * -1) = 6; with dual_clip 5 the ratio counts at most 5: loss 5 and no
    gradient through the token. By default the official recipe's clip_ratio_c, 10."""
    b = _batch_for_dual_clip()
    lp = (b.old_logprobs + math.log(6.0)).requires_grad_()
    credit = -torch.ones_like(lp)
    assert DAPOConfig().dual_clip == 10.0
    assert float(DAPO(DAPOConfig(overlong_filter=False)).loss(b, lp, credit).loss[0, 0]) == pytest.approx(6.0)
    paper = DAPO(DAPOConfig(overlong_filter=False, dual_clip=None))
    lp12 = (b.old_logprobs + math.log(12.0)).requires_grad_()
    assert float(paper.loss(b, lp12, credit).loss[0, 0]) == pytest.approx(12.0)
    assert float(DAPO(DAPOConfig(overlong_filter=False)).loss(b, lp12, credit).loss[0, 0]) == pytest.approx(10.0)
    out = DAPO(DAPOConfig(overlong_filter=False, dual_clip=5.0)).loss(b, lp, credit).loss
    assert float(out[0, 0]) == pytest.approx(5.0)
    out[0, 0].backward()
    assert float(lp.grad[0, 0]) == 0.0
    with pytest.raises(CreditBenchError, match="dual_clip must be None or > 1 \\+ clip_high"):
        DAPOConfig(dual_clip=1.1)


def _batch_for_dual_clip():
    return RolloutBatch(
        prompt_ids=torch.zeros(1, 1, dtype=torch.long),
        prompt_mask=torch.ones(1, 1, dtype=torch.long),
        completion_ids=torch.zeros(1, 1, dtype=torch.long),
        completion_mask=torch.ones(1, 1, dtype=torch.long),
        group_ids=torch.zeros(1, dtype=torch.long),
        rewards=torch.zeros(1),
        correct=torch.zeros(1, dtype=torch.bool),
        truncated=torch.zeros(1, dtype=torch.bool),
        max_new_tokens=10,
        old_logprobs=torch.full((1, 1), -2.0),
    )
