import pytest
import torch

from bench.engine.diagnostics import credit_diagnostics, effective_token_ratio, gini, mass_by_thirds


def test_hand_worked():
    """Row 0: w = [1, 1, 1, 1] (uniform): Gini 0, ratio 16 / (4 * 4) = 1, thirds of 4 tokens at
    positions 0.125, 0.375, 0.625, 0.875 -> bins 0, 1, 1, 2: mass [1/4, 2/4, 1/4].
    Row 1: w = [0, 0, 3] (+ one padded token): all credit on one token. Pairwise |diffs| sum
    2 * (3 + 3 + 0) = 12, Gini = 12 / (2 * 3 * 3) = 2/3 (= 1 - 1/L, the maximum for L = 3); ratio
    9 / (3 * 9) = 1/3 = 1/L; mass [0, 0, 1].
    Row 2: w = [1, 3]: Gini = 2 * 2 / (2 * 2 * 4) = 0.25; ratio 16 / (2 * 10) = 0.8; positions
    0.25, 0.75 -> bins 0 and 2: mass [1/4, 0, 3/4]."""
    w = torch.tensor([[1.0, 1, 1, 1], [0, 0, 3, 7], [1, 3, 5, 5]])
    mask = torch.tensor([[1, 1, 1, 1], [1, 1, 1, 0], [1, 1, 0, 0]])
    assert gini(w, mask).tolist() == pytest.approx([0.0, 2 / 3, 0.25])
    assert effective_token_ratio(w, mask).tolist() == pytest.approx([1.0, 1 / 3, 0.8])
    expected = [[0.25, 0.5, 0.25], [0, 0, 1], [0.25, 0, 0.75]]
    for got, want in zip(mass_by_thirds(w, mask).tolist(), expected):
        assert got == pytest.approx(want)


def test_gini_matches_pairwise_definition_on_random_rows():
    g = torch.Generator().manual_seed(0)
    for _ in range(20):
        B, T = 5, int(torch.randint(1, 12, (), generator=g))
        w = torch.rand(B, T, generator=g) * (torch.rand(B, T, generator=g) > 0.3)
        lengths = torch.randint(1, T + 1, (B,), generator=g)
        mask = torch.arange(T)[None] < lengths[:, None]
        got = gini(w, mask)
        for i in range(B):
            v = w[i, : lengths[i]]
            if v.sum() == 0:
                assert torch.isnan(got[i])
                continue
            pairwise = (v[:, None] - v[None, :]).abs().sum() / (2 * len(v) * v.sum())
            assert float(got[i]) == pytest.approx(float(pairwise), abs=1e-6)


def test_credit_diagnostics_skip_rows_without_credit_and_ignore_sign():
    """Row 1 has no credit (an all-equal group): it counts in the nonzero fraction's denominator
    (3 of 6 valid tokens nonzero) but not in the shape metrics, which are those of row 0 alone."""
    credit = torch.tensor([[-1.0, -1.0, -1.0], [0.0, 0.0, 0.0]])
    d = credit_diagnostics(credit, torch.ones(2, 3))
    assert d["credit/nonzero_frac"] == pytest.approx(0.5)
    assert d["credit/gini"] == pytest.approx(0.0)
    assert d["credit/effective_token_ratio"] == pytest.approx(1.0)
    assert [d[f"credit/mass_{k}"] for k in ("early", "middle", "late")] == pytest.approx([1 / 3] * 3)
    assert set(credit_diagnostics(torch.zeros(2, 3), torch.ones(2, 3))) == {"credit/nonzero_frac"}
