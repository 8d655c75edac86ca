import math

import pytest
import torch
from test_dapo import make_batch

from bench.errors import CreditBenchError
from bench.numerics import aggregate, masked_mean
from methods.dapo import DAPO
from methods.entropy_top import EntropyTop, EntropyTopConfig

# Two sequences of one group, 6 + 4 = 10 valid tokens; the padding has a high entropy on purpose.
ENTROPY = torch.tensor([[0.1, 0.9, 0.3, 0.5, 0.2, 0.7], [0.8, 0.05, 0.4, 0.6, 5.0, 5.0]])


def hand_batch():
    batch = make_batch([True, False], [0, 0], [6, 4], 100)  # budget 100: no overlong punishment
    batch.entropy = ENTROPY.clone()
    return batch


def test_batch_mask_and_loss_hand_worked():
    """Valid entropies sorted: 0.05 0.1 0.2 0.3 0.4 0.5 0.6 0.7 0.8 0.9. The 0.8-quantile sits at
    position 9 * 0.8 = 7.2: 0.7 + 0.2 * (0.8 - 0.7) = 0.72, so rho = 0.2 keeps the 2 tokens
    H = 0.9 (seq 0, t 1) and H = 0.8 (seq 1, t 0); the padded 5.0s are ignored.
    R = [+1, -1], std sqrt(2): A = +-1 / (sqrt(2) + 1e-4) = +-0.70706 on the kept tokens, 0 elsewhere.
    Ratio 1.1 on the kept token of seq 0, 1 elsewhere: per-token losses -1.1a and +a.
    denominator "all": (-1.1a + a) / 10 = -0.01a, gradient -a/10 and +a/10 at ratio 1;
    denominator "selected": credit x 10/2, so (-1.1a + a) / 2 = -0.05a, gradient -a/2 and +a/2."""
    a = 1 / (math.sqrt(2) + 1e-4)
    batch = hand_batch()
    lp = batch.old_logprobs.clone()
    lp[0, 1] = math.log(1.1)
    for denominator, n in (("all", 10), ("selected", 2)):
        m = EntropyTop(EntropyTopConfig(denominator=denominator))
        keep = m.top_mask(batch)
        assert keep.nonzero().tolist() == [[0, 1], [1, 0]]
        credit = m.credit(batch)
        expected = torch.zeros(2, 6)
        expected[0, 1], expected[1, 0] = a * 10 / n, -a * 10 / n
        assert torch.allclose(credit, expected, atol=1e-6)
        out = m.loss(batch, lp, credit)
        total = aggregate(out.loss, batch.completion_mask, m.config.aggregation)
        assert float(total) == pytest.approx((-1.1 * a + a) / n, abs=1e-6)
        assert float(masked_mean((credit != 0).float(), batch.completion_mask)) == pytest.approx(0.2)

        x = batch.old_logprobs.clone().requires_grad_()
        aggregate(m.loss(batch, x, credit).loss, batch.completion_mask, "token-mean").backward()
        assert x.grad[0, 1] == pytest.approx(-a / n) and x.grad[1, 0] == pytest.approx(a / n)
        assert int((x.grad != 0).sum()) == 2


def test_sequence_population_hand_worked():
    """Per sequence: seq 0 sorted 0.1 0.2 0.3 0.5 0.7 0.9, position 5 * 0.8 = 4 -> tau = 0.7,
    keeps 0.9 and 0.7; seq 1 sorted 0.05 0.4 0.6 0.8, position 3 * 0.8 = 2.4 -> 0.6 + 0.4 * 0.2
    = 0.68, keeps 0.8."""
    keep = EntropyTop(EntropyTopConfig(population="sequence")).top_mask(hand_batch())
    assert keep.nonzero().tolist() == [[0, 1], [0, 5], [1, 0]]


def quantile(values, q):
    """Linear-interpolation quantile, written out."""
    s = sorted(values)
    pos = q * (len(s) - 1)
    lo = int(pos)
    return s[lo] + (s[min(lo + 1, len(s) - 1)] - s[lo]) * (pos - lo)


@pytest.mark.parametrize("population", ["batch", "sequence"])
@pytest.mark.parametrize("denominator", ["all", "selected"])
def test_mask_and_credit_loop_vs_vectorised(population, denominator):
    g = torch.Generator().manual_seed(0)
    for _ in range(5):
        B, T = 8, int(torch.randint(3, 30, (1,), generator=g))
        lengths = torch.randint(1, T + 1, (B,), generator=g).tolist()
        batch = make_batch((torch.rand(B, generator=g) < 0.5).tolist(), [0] * 4 + [1] * 4, lengths, 4 * T, T=T)
        batch.entropy = torch.rand(B, T, generator=g) * 3
        rho = float(torch.rand(1, generator=g)) * 0.9 + 0.05
        m = EntropyTop(EntropyTopConfig(rho=rho, population=population, denominator=denominator))

        h = batch.entropy.tolist()
        valid = [[t < lengths[i] for t in range(T)] for i in range(B)]
        everything = [h[i][t] for i in range(B) for t in range(T) if valid[i][t]]
        keep = []
        for i in range(B):
            pool = everything if population == "batch" else [h[i][t] for t in range(lengths[i])]
            tau = quantile(pool, 1 - rho)
            keep.append([valid[i][t] and h[i][t] >= tau for t in range(T)])
        assert m.top_mask(batch).tolist() == keep

        n_kept = sum(map(sum, keep))
        scale = len(everything) / n_kept if denominator == "selected" else 1.0
        adv = DAPO(m.config).credit(batch)[:, 0].tolist()
        expected = [[adv[i] * scale if keep[i][t] else 0.0 for t in range(T)] for i in range(B)]
        assert m.credit(batch).tolist() == [pytest.approx(row, abs=1e-5) for row in expected]


def test_one_sequence_batch_equals_sequence_population():
    g = torch.Generator().manual_seed(1)
    batch = make_batch([True], [0], [17], 100, T=20)
    batch.entropy = torch.rand(1, 20, generator=g)
    masks = [EntropyTop(EntropyTopConfig(population=p)).top_mask(batch) for p in ("batch", "sequence")]
    assert torch.equal(masks[0], masks[1])


def test_defaults_are_dapo_and_validation():
    cfg = EntropyTopConfig()
    assert (cfg.rho, cfg.population, cfg.denominator) == (0.2, "batch", "all")
    assert (cfg.aggregation, cfg.clip_low, cfg.clip_high, cfg.kl_coef) == ("token-mean", 0.2, 0.28, 0.0)
    m = EntropyTop(cfg)
    assert m.required == frozenset({"entropy"}) and m.generation_rounds == 10
    with pytest.raises(CreditBenchError, match="batch, sequence"):
        EntropyTopConfig(population="micro-batch")
    with pytest.raises(CreditBenchError, match="all, selected"):
        EntropyTopConfig(denominator="kept")
    with pytest.raises(CreditBenchError, match="rho"):
        EntropyTopConfig(rho=0.0)


def test_sorted_quantile_matches_torch_quantile():
    """The mask's threshold is computed by sorting (no 16M-element limit); it equals torch.quantile /
    nanquantile with linear interpolation."""
    import torch

    from methods.common import entropy_top_mask

    g = torch.Generator().manual_seed(0)
    for _ in range(50):
        B, T = 4, int(torch.randint(1, 20, (), generator=g))
        e = torch.rand(B, T, generator=g)
        lengths = torch.randint(1, T + 1, (B,), generator=g)
        m = torch.arange(T)[None] < lengths[:, None]
        rho = float(torch.rand((), generator=g)) * 0.9 + 0.05
        assert torch.equal(entropy_top_mask(e, m, rho), m & (e >= torch.quantile(e[m], 1 - rho)))
        per_seq = torch.nanquantile(e.masked_fill(~m, float("nan")), 1 - rho, dim=-1, keepdim=True)
        assert torch.equal(entropy_top_mask(e, m, rho, "sequence"), m & (e >= per_seq))
