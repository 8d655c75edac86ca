"""Credit against the true advantage (bench.engine.credit_quality): Spearman's rho with mid-ranks, the share
of a failed completion's negative credit on its lowest-advantage step and of a correct one's positive credit
on its highest, beside what uniform credit gives; hand-worked."""

from __future__ import annotations

import math

import pytest
import torch

from bench.engine.credit_quality import credit_quality, mid_ranks, spearman


def test_mid_ranks_and_spearman_hand_worked():
    assert mid_ranks(torch.tensor([3.0, 1.0, 3.0, 2.0])).tolist() == [3.5, 1.0, 3.5, 2.0]
    assert spearman(torch.tensor([1.0, 2.0, 3.0]), torch.tensor([10.0, 20.0, 30.0])) == pytest.approx(1.0)
    assert spearman(torch.tensor([1.0, 2.0, 3.0]), torch.tensor([3.0, 2.0, 1.0])) == pytest.approx(-1.0)
    # ranks [1, 2, 3, 4] against [1, 2.5, 2.5, 4]: centred [-1.5, -.5, .5, 1.5] and [-1.5, 0, 0, 1.5],
    # rho = 4.5 / sqrt(5 * 4.5) = 0.9487
    got = spearman(torch.tensor([1.0, 2.0, 3.0, 4.0]), torch.tensor([0.0, 5.0, 5.0, 9.0]))
    assert got == pytest.approx(4.5 / math.sqrt(5 * 4.5))
    assert math.isnan(spearman(torch.ones(3), torch.tensor([1.0, 2.0, 3.0])))  # uniform credit: undefined


def test_shares_on_the_steps_where_the_value_moves_hand_worked():
    """Row 0 failed, A = [0.5, -1, -1, 0.2] (its lowest step: tokens 1, 2, half the tokens); its credit
    [-1, -2, -1, 0] puts 3 of its 4 negative units there: 0.75. Row 1 correct, A = [0, 0, 1, 1]: credit
    [1, 1, 1, 3] puts 4 of 6 positive units on the highest step: 2/3 (uniform: 1/2). Row 2 is uniform credit
    on a failed row: no rank correlation, share = the uniform share 1/2. Row 3's A is one value: no share."""
    credit = torch.tensor(
        [[-1.0, -2.0, -1.0, 0.0], [1.0, 1.0, 1.0, 3.0], [-1.0, -1.0, -1.0, -1.0], [1.0, 2.0, 0.0, 0.0]]
    )
    truth = torch.tensor([[0.5, -1.0, -1.0, 0.2], [0.0, 0.0, 1.0, 1.0], [0.3, -0.4, -0.4, 0.1], [0.2, 0.2, 0.0, 0.0]])
    mask = torch.tensor([[1, 1, 1, 1], [1, 1, 1, 1], [1, 1, 1, 1], [1, 1, 0, 0]])
    q = credit_quality(credit, truth, mask, torch.tensor([False, True, False, True]))
    assert q["n_worst"] == 2 and q["worst_share"] == pytest.approx((0.75 + 0.5) / 2) and q["worst_uniform"] == 0.5
    assert q["n_best"] == 1 and q["best_share"] == pytest.approx(4 / 6) and q["best_uniform"] == 0.5
    # rho row 0: credit ranks [2.5, 1, 2.5, 4], A ranks [4, 1.5, 1.5, 3]; row 1: [2, 2, 2, 4] vs [1.5, 1.5, 3.5, 3.5]
    r0 = spearman(credit[0], truth[0])
    r1 = spearman(credit[1], truth[1])
    assert q["n_rank"] == 2 and q["rank_corr"] == pytest.approx((r0 + r1) / 2)
    assert r1 == pytest.approx((-0.5 * -1 + -0.5 * -1 + -0.5 * 1 + 1.5 * 1) / math.sqrt(3.0 * 4.0))
