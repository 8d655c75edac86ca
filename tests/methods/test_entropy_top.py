import itertools
import math

import pytest
import torch
from test_dapo import make_batch

from bench.errors import CreditBenchError
from bench.numerics import aggregate
from methods.common import entropy_top_mask
from methods.dapo import DAPO
from methods.entropy_top import EntropyTop, EntropyTopConfig

# Two sequences of one group, 6 + 4 = 10 valid tokens; the padding has a high entropy on purpose.
ENTROPY = torch.tensor([[0.1, 0.9, 0.3, 0.5, 0.2, 0.7], [0.8, 0.05, 0.4, 0.6, 5.0, 5.0]])


def hand_batch():
    batch = make_batch([True, False], [0, 0], [6, 4], 100)  # budget 100: no overlong punishment
    batch.entropy = ENTROPY.clone()
    return batch


def engine_loss(m, batch, logprobs, credit):
    """The scalar the engine differentiates: the loss aggregated over LossOutput.mask when set."""
    out = m.loss(batch, logprobs, credit)
    mask = batch.completion_mask if out.mask is None else out.mask
    return out, aggregate(out.loss, mask, m.config.aggregation)


def test_batch_mask_and_loss_hand_worked():
    """Valid entropies sorted: 0.05 0.1 0.2 0.3 0.4 0.5 0.6 0.7 0.8 0.9; the padded 5.0s are ignored.
    top_k (default): k = int(0.2 * 10 + 0.9999) = 2, tau = the 2nd largest = 0.8; quantile: the
    0.8-quantile at position 9 * 0.8 = 7.2 is 0.7 + 0.2 * (0.8 - 0.7) = 0.72. Either way rho = 0.2
    keeps H = 0.9 (seq 0, t 1) and H = 0.8 (seq 1, t 0).
    R = [+1, -1], std sqrt(2): A = +-1 / (sqrt(2) + 1e-4) = +-0.70706 = +-a; the loss is -A r on
    the kept tokens, 0 elsewhere. Ratio 1.1 on the kept token of seq 0, 1 elsewhere:
    denominator "selected" (default, LossOutput.mask = the kept tokens): (-1.1a + a) / 2 = -0.05a,
    gradient -a/2 and +a/2; "all" (every valid token): (-1.1a + a) / 10 = -0.01a, -a/10 and +a/10.
    Population "minibatch" (default) picks the same tokens here (the batch is one minibatch); its
    credit() leaves the choice to loss(), "batch" zeroes the credit outside the kept tokens."""
    a = 1 / (math.sqrt(2) + 1e-4)
    lp = hand_batch().old_logprobs.clone()
    lp[0, 1] = math.log(1.1)
    kept = torch.zeros(2, 6, dtype=torch.bool)
    kept[0, 1] = kept[1, 0] = True
    for population, selection, denominator in itertools.product(
        ["minibatch", "batch"], ["top_k", "quantile"], ["selected", "all"]
    ):
        batch, n = hand_batch(), 2 if denominator == "selected" else 10
        m = EntropyTop(EntropyTopConfig(population=population, selection=selection, denominator=denominator))
        assert torch.equal(m.top_mask(batch), kept)
        credit = m.credit(batch)
        full = DAPO().credit(batch)
        assert torch.allclose(credit, full if population == "minibatch" else full * kept)
        out, total = engine_loss(m, batch, lp, credit)
        assert float(total) == pytest.approx((-1.1 * a + a) / n, abs=1e-6)
        assert torch.equal(out.mask.bool(), kept if denominator == "selected" else batch.completion_mask.bool())

        x = batch.old_logprobs.clone().requires_grad_()
        engine_loss(m, batch, x, credit)[1].backward()
        assert x.grad[0, 1] == pytest.approx(-a / n) and x.grad[1, 0] == pytest.approx(a / n)
        assert int((x.grad != 0).sum()) == 2


def test_top_k_and_quantile_hand_worked():
    """One sequence, entropies 0.1 .. 0.7 (N = 7), rho = 0.3. top_k: k = int(2.1 + 0.9999) = 3
    keeps 0.7, 0.6, 0.5. quantile: position 0.7 * 6 = 4.2, tau = 0.5 + 0.2 * 0.1 = 0.52, which
    keeps 0.7 and 0.6 only (the two rules differ when the fraction of rho N is below rho)."""
    batch = make_batch([True], [0], [7], 100)
    batch.entropy = torch.tensor([[0.3, 0.7, 0.1, 0.5, 0.6, 0.2, 0.4]])
    for selection, kept in (("top_k", [1, 3, 4]), ("quantile", [1, 4])):
        m = EntropyTop(EntropyTopConfig(rho=0.3, selection=selection))
        assert m.top_mask(batch)[0].nonzero().flatten().tolist() == kept


def test_sequence_population_hand_worked():
    """Per sequence, quantile: seq 0 sorted 0.1 0.2 0.3 0.5 0.7 0.9, position 5 * 0.8 = 4 -> tau = 0.7,
    keeps 0.9 and 0.7; seq 1 sorted 0.05 0.4 0.6 0.8, position 3 * 0.8 = 2.4 -> 0.6 + 0.4 * 0.2
    = 0.68, keeps 0.8. top_k: k = int(1.2 + 0.9999) = 2 and int(0.8 + 0.9999) = 1: the same tokens."""
    for selection in ("quantile", "top_k"):
        keep = EntropyTop(EntropyTopConfig(population="sequence", selection=selection)).top_mask(hand_batch())
        assert keep.nonzero().tolist() == [[0, 1], [0, 5], [1, 0]]


def test_minibatch_population_is_each_minibatch_s_and_batch_the_rollout_batch_s():
    """Four sequences; the first two have every entropy above the last two's. With "batch" the
    rollout batch's top 20% (all in the first two) is fixed by credit() and each minibatch reads its
    rows; with "minibatch" (official, per micro-batch) the minibatch of the last two keeps its own
    top 20%. Denominator "selected": each minibatch's loss is a mean over its own kept tokens."""
    g = torch.Generator().manual_seed(0)
    batch = make_batch([True, False, True, False], [0, 0, 1, 1], [5, 5, 5, 5], 100)
    batch.entropy = torch.rand(4, 5, generator=g) + torch.tensor([1.0, 1.0, 0.0, 0.0])[:, None]
    low = torch.tensor([2, 3])
    for population in ("batch", "minibatch"):
        m = EntropyTop(EntropyTopConfig(population=population))
        credit = m.credit(batch)
        out = m.loss(batch.select(low), batch.old_logprobs[low], credit[low])
        own = entropy_top_mask(batch.entropy[low], batch.completion_mask[low], 0.2, selection="top_k")
        if population == "batch":
            assert torch.all(out.loss == 0) and out.mask.sum() == 0
        else:
            assert torch.equal(out.mask.bool(), own) and int(own.sum()) == 2  # ceil(0.2 * 10)
            assert torch.all(out.loss[~own] == 0) and torch.all(out.loss[own] != 0)


def test_overlong_filter_and_selection_masks_combine():
    """A truncated row leaves the denominator (DAPO's overlong filter) and the kept tokens are the
    rest of the mask: the loss mask is valid & not truncated & kept."""
    batch = hand_batch()
    batch.truncated = torch.tensor([False, True])
    m = EntropyTop(EntropyTopConfig(soft_overlong=False))
    out = m.loss(batch, batch.old_logprobs, m.credit(batch))
    assert out.mask.nonzero().tolist() == [[0, 1]]


def quantile(values, q):
    """Linear-interpolation quantile, written out."""
    s = sorted(values)
    pos = q * (len(s) - 1)
    lo = int(pos)
    return s[lo] + (s[min(lo + 1, len(s) - 1)] - s[lo]) * (pos - lo)


def top_k_threshold(values, rho):
    """The k-th largest value, k = max(1, int(rho * N + 0.9999)) as the 80/20 code writes ceil."""
    k = max(1, int(len(values) * rho + 0.9999))
    return sorted(values, reverse=True)[k - 1]


@pytest.mark.parametrize("population", ["batch", "sequence"])
@pytest.mark.parametrize("selection", ["quantile", "top_k"])
@pytest.mark.parametrize("denominator", ["all", "selected"])
def test_mask_credit_and_loss_loop_vs_vectorised(population, selection, denominator):
    g = torch.Generator().manual_seed(0)
    for _ in range(5):
        B, T = 8, int(torch.randint(3, 30, (1,), generator=g))
        lengths = torch.randint(1, T + 1, (B,), generator=g).tolist()
        batch = make_batch((torch.rand(B, generator=g) < 0.5).tolist(), [0] * 4 + [1] * 4, lengths, 4 * T, T=T)
        batch.entropy = torch.rand(B, T, generator=g) * 3
        rho = float(torch.rand(1, generator=g)) * 0.9 + 0.05
        cfg = EntropyTopConfig(rho=rho, population=population, selection=selection, denominator=denominator)
        m = EntropyTop(cfg)

        h = batch.entropy.tolist()
        valid = [[t < lengths[i] for t in range(T)] for i in range(B)]
        everything = [h[i][t] for i in range(B) for t in range(T) if valid[i][t]]
        keep = []
        for i in range(B):
            pool = everything if population == "batch" else [h[i][t] for t in range(lengths[i])]
            tau = quantile(pool, 1 - rho) if selection == "quantile" else top_k_threshold(pool, rho)
            keep.append([valid[i][t] and h[i][t] >= tau for t in range(T)])
        assert m.top_mask(batch).tolist() == keep

        adv = DAPO(cfg).credit(batch)[:, 0].tolist()
        expected = [[adv[i] if keep[i][t] else 0.0 for t in range(T)] for i in range(B)]
        credit = m.credit(batch)
        assert credit.tolist() == [pytest.approx(row, abs=1e-5) for row in expected]

        new = batch.old_logprobs + 0.2 * torch.randn(B, T, generator=g)  # token-mean of the clipped surrogate
        terms, count = 0.0, 0
        for i in range(B):
            for t in range(lengths[i]):
                r = math.exp(float(new[i, t] - batch.old_logprobs[i, t]))
                if keep[i][t]:
                    terms -= min(r * adv[i], min(max(r, 0.8), 1.28) * adv[i])
                count += keep[i][t] if denominator == "selected" else 1
        assert float(engine_loss(m, batch, new, credit)[1]) == pytest.approx(terms / max(count, 1), abs=1e-5)


def test_one_sequence_batch_equals_sequence_population():
    g = torch.Generator().manual_seed(1)
    batch = make_batch([True], [0], [17], 100, T=20)
    batch.entropy = torch.rand(1, 20, generator=g)
    masks = [EntropyTop(EntropyTopConfig(population=p)).top_mask(batch) for p in ("batch", "minibatch", "sequence")]
    assert torch.equal(masks[0], masks[1]) and torch.equal(masks[0], masks[2])


def test_defaults_are_the_official_code_s_and_validation():
    cfg = EntropyTopConfig()
    assert (cfg.rho, cfg.population, cfg.selection, cfg.denominator) == (0.2, "minibatch", "top_k", "selected")
    assert (cfg.aggregation, cfg.clip_low, cfg.clip_high, cfg.kl_coef) == ("token-mean", 0.2, 0.28, 0.0)
    assert cfg.dual_clip == 10.0  # the official script's clip_ratio_c
    m = EntropyTop(cfg)
    assert m.required == frozenset({"entropy"}) and m.generation_rounds == 10
    with pytest.raises(CreditBenchError, match="batch, minibatch, sequence"):
        EntropyTopConfig(population="micro-batch")
    with pytest.raises(CreditBenchError, match="quantile, top_k"):
        EntropyTopConfig(selection="topk")
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
