import itertools

import pytest
import torch

from methods.traces import discounted_cumsum, floor_horizon, history_log_ratio, trace_log_ratio

DECAYS = [0.0, 0.3, 0.5, 0.9, 0.99, 1.0]


def explicit_W(T: int, a: float, style: str, floor: float, origin: int = 0) -> torch.Tensor:  # [T, T] float64
    """The trace weights written straight from the definition, one entry at a time."""
    rows = [[0.0] * T for _ in range(T)]
    for t in range(T):
        for k in range(t + 1):
            w = a ** (t - k) if style == "recent" else max(a ** (t - k), a ** (k + origin))
            rows[t][k] = max(w, floor)
    return torch.tensor(rows, dtype=torch.float64)


def loop_history(l, a, select, distance):  # [B, T] float64
    """sum over k < t with select[k] of a^d(t, k) l_k, d = t - k or #selected in [k, t)."""
    B, T = l.shape
    out = torch.zeros(B, T, dtype=torch.float64)
    for b in range(B):
        for t in range(T):
            for k in range(t):
                if select[b, k]:
                    d = t - k if distance == "raw" else int(select[b, k:t].sum())
                    out[b, t] += a**d * float(l[b, k])
    return out


def test_discounted_cumsum_hand_worked():
    """x = [1, 2, 3], decay 0.5: y = [1, 2 + 0.5, 3 + 0.5 * 2.5] = [1, 2.5, 4.25].
    decay 0 is the identity; decay 1 the plain cumulative sum [1, 3, 6]."""
    x = torch.tensor([[1.0, 2.0, 3.0]])
    assert discounted_cumsum(x, 0.5).tolist() == [[1.0, 2.5, 4.25]]
    assert discounted_cumsum(x, 0.0).tolist() == [[1.0, 2.0, 3.0]]
    assert discounted_cumsum(x, 1.0).tolist() == [[1.0, 3.0, 6.0]]


def test_trace_log_ratio_hand_worked():
    """a = 0.5, l = [0.1, 0.2, -0.1].
    recent: z = [0.1, 0.2 + 0.5*0.1, -0.1 + 0.5*0.2 + 0.25*0.1] = [0.1, 0.25, 0.025].
    both: W = max(a^(t-k), a^k): row 1 = [max(.5, 1), max(1, .5)] = [1, 1];
          row 2 = [max(.25, 1), max(.5, .5), max(1, .25)] = [1, .5, 1] -> z = [0.1, 0.3, 0.1].
    recent with floor 0.3: W[2, 0] = max(0.25, 0.3) = 0.3 -> z_2 = -0.1 + 0.1 + 0.03 = 0.03."""
    l = torch.tensor([[0.1, 0.2, -0.1]], dtype=torch.float64)
    assert trace_log_ratio(l, 0.5, "recent")[0].tolist() == pytest.approx([0.1, 0.25, 0.025])
    assert trace_log_ratio(l, 0.5, "both")[0].tolist() == pytest.approx([0.1, 0.3, 0.1])
    assert trace_log_ratio(l, 0.5, "recent", 0.3)[0].tolist() == pytest.approx([0.1, 0.25, 0.03])


def test_position_origin_hand_worked():
    """a = 0.5, l = [0.1, 0.2, -0.1], positions counted from 1: W = max(a^(t-k), a^(k+1)):
    row 0 = [1]; row 1 = [max(.5, .5), 1] = [.5, 1]; row 2 = [max(.25, .5), max(.5, .25), 1]
    = [.5, .5, 1] -> z = [0.1, 0.05 + 0.2, 0.05 + 0.1 - 0.1] = [0.1, 0.25, 0.05] (from 0: [0.1,
    0.3, 0.1]). a = 0: from 1 the first token leaves every later trace, z = l; from 0 it stays
    with weight 0^0 = 1. "recent" does not depend on the origin."""
    l = torch.tensor([[0.1, 0.2, -0.1]], dtype=torch.float64)
    assert trace_log_ratio(l, 0.5, "both", origin=1)[0].tolist() == pytest.approx([0.1, 0.25, 0.05])
    assert trace_log_ratio(l, 0.0, "both", origin=1)[0].tolist() == pytest.approx([0.1, 0.2, -0.1])
    assert trace_log_ratio(l, 0.0, "both")[0].tolist() == pytest.approx([0.1, 0.3, 0.0])
    assert torch.equal(trace_log_ratio(l, 0.5, "recent", origin=1), trace_log_ratio(l, 0.5, "recent"))


def test_floor_horizon_exact_powers():
    """0.5^2 = 0.25 >= 0.25 but 0.5^3 < 0.25 -> K = 2; decay 0 keeps only d = 0; no floor: T."""
    assert floor_horizon(0.5, 0.25, 100) == 2
    assert floor_horizon(0.5, 0.26, 100) == 1
    assert floor_horizon(0.0, 0.1, 100) == 0
    assert floor_horizon(0.9, 0.0, 100) == 100 and floor_horizon(1.0, 0.5, 100) == 100


def test_trace_log_ratio_matches_explicit_matrix():
    g = torch.Generator().manual_seed(0)
    for T, a, style, floor, origin in itertools.product(
        [1, 2, 5, 16, 37], DECAYS + [0.5**0.5], ["recent", "both"], [0.0, 0.1, 0.25, 0.5], [0, 1]
    ):
        l = torch.randn(3, T, generator=g, dtype=torch.float64)
        expected = l @ explicit_W(T, a, style, floor, origin).T
        got = trace_log_ratio(l, a, style, floor, origin)
        assert torch.allclose(got, expected, atol=1e-12), (T, a, style, floor, origin)
        if style == "recent" and floor == 0:
            assert torch.allclose(discounted_cumsum(l, a), expected, atol=1e-12)


def test_history_log_ratio_matches_loop():
    g = torch.Generator().manual_seed(1)
    for T, a, distance in itertools.product([1, 4, 11, 26], DECAYS, ["raw", "selected"]):
        l = torch.randn(3, T, generator=g, dtype=torch.float64)
        select = torch.rand(3, T, generator=g) < 0.4
        got = history_log_ratio(l, a, select, distance)
        expected = loop_history(l, a, select, distance)
        assert torch.allclose(got, expected, atol=1e-12), (T, a, distance)
        everything = torch.ones(3, T, dtype=torch.bool)
        expected = loop_history(l, a, everything, "raw")
        assert torch.allclose(history_log_ratio(l, a), expected, atol=1e-12)


def test_gradients_match_explicit_versions():
    """Backward through the chunked sums and gathers equals backward through W @ l."""
    g = torch.Generator().manual_seed(2)
    T = 23
    weights = torch.randn(2, T, generator=g, dtype=torch.float64)
    for a, style, floor, origin in itertools.product([0.0, 0.6, 1.0], ["recent", "both"], [0.0, 0.2], [0, 1]):
        l = torch.randn(2, T, generator=g, dtype=torch.float64, requires_grad=True)
        (trace_log_ratio(l, a, style, floor, origin) * weights).sum().backward()
        got, l.grad = l.grad, None
        ((l @ explicit_W(T, a, style, floor, origin).T) * weights).sum().backward()
        assert torch.allclose(got, l.grad, atol=1e-12)
    select = torch.rand(2, T, generator=g) < 0.5
    for distance in ["raw", "selected"]:
        l = torch.randn(2, T, generator=g, dtype=torch.float64, requires_grad=True)
        assert torch.autograd.gradcheck(lambda x, d=distance: history_log_ratio(x, 0.7, select, d), (l,))


@pytest.mark.parametrize("a", [0.99, 0.5])
def test_long_sequences_stay_finite_and_accurate(a):
    """T = 8192 in float32 against a float64 recursion (recent) and direct sums (both)."""
    T = 8192
    l = 0.1 * torch.randn(2, T, generator=torch.Generator().manual_seed(3))
    ref = torch.zeros(2, T, dtype=torch.float64)
    rows = l.double().tolist()
    for b in range(2):
        y = 0.0
        for t in range(T):
            y = rows[b][t] + a * y
            ref[b, t] = y
    z = trace_log_ratio(l, a, "recent")
    assert torch.isfinite(z).all()
    assert torch.allclose(z.double(), ref, atol=1e-4)
    both = trace_log_ratio(l, a, "both")
    assert torch.isfinite(both).all()
    for t in [0, 1, 100, 4095, 8191]:
        k = torch.arange(t + 1, dtype=torch.float64)
        w = torch.maximum(a ** (t - k), a**k)
        assert float(both[0, t]) == pytest.approx(float(w @ l[0, : t + 1].double()), abs=1e-4)


def test_both_style_runs_at_262k_tokens_without_a_T_by_T_tensor():
    """B = 2, T = 2^18 with a floor: a [T, T] float32 weight matrix would need 256 GiB, so
    finishing at all shows the memory is O(T); sampled positions match a float64 direct sum."""
    B, T, a, floor = 2, 2**18, 0.999, 0.05
    l = 0.1 * torch.randn(B, T, generator=torch.Generator().manual_seed(4))
    z = trace_log_ratio(l, a, "both", floor)
    for t in [0, 7, 5000, 100_000, T - 1]:
        k = torch.arange(t + 1, dtype=torch.float64)
        w = torch.maximum(a ** (t - k), a**k).clamp(min=floor)
        assert float(z[1, t]) == pytest.approx(float(w @ l[1, : t + 1].double()), abs=1e-4)
