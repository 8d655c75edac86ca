"""FIPO as ms-swift computes it (grpo_trainer.py::_compute_fipo_influence, loss_type "fipo"):
FutureKL and the influence weight worked by hand, a loop against the vectorised sum, the config."""

import math

import pytest
import torch

from bench.core import RolloutBatch
from bench.errors import CreditBenchError
from bench.numerics import aggregate
from methods.dapo import DAPO, DAPOConfig
from methods.fipo import FIPO, FIPOConfig, future_kl, influence_weight

HALF = {"decay_rate": 1.0}  # gamma = 2^(-1/1) = 0.5
D = [0.1, -0.6, 0.4]  # the hand examples' log-ratios Delta


def batch_with(correct, log_ratio_rows, mask=None):
    """One group; old log-probs -1 everywhere, so the current ones are -1 + Delta."""
    delta = torch.tensor(log_ratio_rows, dtype=torch.float32)
    B, T = delta.shape
    correct = torch.tensor(correct)
    b = RolloutBatch(
        prompt_ids=torch.zeros(B, 1, dtype=torch.long),
        prompt_mask=torch.ones(B, 1, dtype=torch.long),
        completion_ids=torch.zeros(B, T, dtype=torch.long),
        completion_mask=torch.ones(B, T, dtype=torch.long) if mask is None else torch.tensor(mask),
        group_ids=torch.zeros(B, dtype=torch.long),
        rewards=correct.float(),
        correct=correct,
        truncated=torch.zeros(B, dtype=torch.bool),
        max_new_tokens=100,
        old_logprobs=torch.full((B, T), -1.0),
    )
    return b, b.old_logprobs + delta


def test_future_kl_hand_worked():
    """gamma = 0.5, Delta = [0.1, -0.6, 0.4]: FutureKL_2 = 0.4, FutureKL_1 = -0.6 + 0.5 * 0.4 = -0.4,
    FutureKL_0 = 0.1 + 0.5 * -0.4 = -0.1 (each token counts itself, undiscounted). A padded slot
    adds nothing to the tokens before it and reads 0."""
    out = future_kl(torch.tensor([D]), torch.ones(1, 3), 0.5)
    assert out.tolist()[0] == pytest.approx([-0.1, -0.4, 0.4])
    out = future_kl(torch.tensor([D + [5.0]]), torch.tensor([[1.0, 1.0, 1.0, 0.0]]), 0.5)
    assert out.tolist()[0] == pytest.approx([-0.1, -0.4, 0.4, 0.0])


def test_future_kl_loop_vs_vectorised():
    """sum_{k >= t} gamma^(k - t) M_k Delta_k, by a double loop, on ragged rows longer than a chunk."""
    g = torch.Generator().manual_seed(0)
    B, T, gamma = 4, 37, 2.0 ** (-1 / 3.0)
    delta = torch.randn(B, T, generator=g, dtype=torch.float64)
    mask = (torch.arange(T)[None] < torch.tensor([37, 20, 1, 30])[:, None]).double()
    loop = torch.zeros(B, T, dtype=torch.float64)
    for i in range(B):
        for t in range(T):
            if mask[i, t]:
                loop[i, t] = sum(gamma ** (k - t) * mask[i, k] * delta[i, k] for k in range(t, T))
    assert torch.allclose(future_kl(delta, mask, gamma), loop, atol=1e-10)


def test_influence_weight_clip_modes_hand_worked():
    """FutureKL [-0.1, -0.4, 0.4] -> exp = [0.904837, 0.670320, 1.491825].
    Clip-high-only (default) [1, 1.2]: [1, 1, 1.2]; symmetric [0.8, 1.2]: [0.904837, 0.8, 1.2];
    a clip range of None or 0 leaves exp(FutureKL) as it is (ms-swift's falsy check)."""
    log_ratio, adv, mask = torch.tensor([D]), torch.ones(1, 3), torch.ones(1, 3)
    raw = [math.exp(x) for x in (-0.1, -0.4, 0.4)]
    f, fkl = influence_weight(log_ratio, adv, mask, FIPOConfig(**HALF))
    assert f.tolist()[0] == pytest.approx([1.0, 1.0, 1.2]) and fkl.tolist()[0] == pytest.approx([-0.1, -0.4, 0.4])
    f, _ = influence_weight(log_ratio, adv, mask, FIPOConfig(**HALF, influence_clip_high_only=False))
    assert f.tolist()[0] == pytest.approx([raw[0], 0.8, 1.2])
    for off in (None, 0.0):
        f, _ = influence_weight(log_ratio, adv, mask, FIPOConfig(**HALF, influence_clip=off))
        assert f.tolist()[0] == pytest.approx(raw)


def test_safety_cap_and_dual_clip_filter_hand_worked():
    """Delta = [ln 5, 0, 0], gamma 0.5: FutureKL = [ln 5, 0, 0], exp -> [5, 1, 1], clipped high-only
    to [1.2, 1, 1]. Where A < 0 the ratio 5 > 4 (safety threshold) caps token 0 to [0.8, 1] -> 1.0;
    where A > 0 it stays 1.2; threshold None keeps 1.2 for both.
    Delta = [ln 20, 0.1, 0]: ratio 20 > delta = 10, so token 0 adds nothing to FutureKL:
    [0 + 0.5 * 0.1, 0.1, 0] = [0.05, 0.1, 0]; without the dual clip FutureKL_0 = ln 20 + 0.05."""
    log_ratio, mask = torch.tensor([[math.log(5.0), 0.0, 0.0]] * 2), torch.ones(2, 3)
    adv = torch.tensor([[-1.0] * 3, [1.0] * 3])
    f, _ = influence_weight(log_ratio, adv, mask, FIPOConfig(**HALF))
    assert f.tolist() == [pytest.approx([1.0, 1.0, 1.0]), pytest.approx([1.2, 1.0, 1.0])]
    f, _ = influence_weight(log_ratio, adv, mask, FIPOConfig(**HALF, safety_threshold=None))
    assert f[:, 0].tolist() == pytest.approx([1.2, 1.2])
    log_ratio = torch.tensor([[math.log(20.0), 0.1, 0.0]])
    _, fkl = influence_weight(log_ratio, torch.ones(1, 3), torch.ones(1, 3), FIPOConfig(**HALF))
    assert fkl.tolist()[0] == pytest.approx([0.05, 0.1, 0.0])
    _, fkl = influence_weight(log_ratio, torch.ones(1, 3), torch.ones(1, 3), FIPOConfig(**HALF, dual_clip=None))
    assert float(fkl[0, 0]) == pytest.approx(math.log(20.0) + 0.05)


def test_loss_hand_worked():
    """Rewards [1, 0], signed [+1, -1]: A = +-1 / (sqrt(2) + 1e-4) = +-0.70706. Row 0, Delta = D:
    f = [1, 1, 1.2]; ratio r = [1.10517, 0.54881, 1.49182]; loss = -min(r f A, clip(r, 0.8, 1.28) f A)
    = -A [1.10517, 0.54881, 1.28 * 1.2 = 1.536]. Row 1 (A < 0), Delta = [0, 0, -0.5]:
    FutureKL = [-0.125, -0.25, -0.5] -> f = 1 (clip-high-only); r_2 = 0.60653 < 0.8 clips:
    loss = A [1, 1, 0.8]. The stats are f and FutureKL."""
    b, lp = batch_with([True, False], [D, [0.0, 0.0, -0.5]])
    m = FIPO(FIPOConfig(**HALF))
    A = 1.0 / (math.sqrt(2.0) + 1e-4)
    out = m.loss(b, lp, m.credit(b))
    assert out.loss[0].tolist() == pytest.approx([-A * math.exp(0.1), -A * math.exp(-0.6), -A * 1.536], abs=1e-6)
    assert out.loss[1].tolist() == pytest.approx([A, A, 0.8 * A], abs=1e-6)
    assert out.stats["fipo_weight"].tolist() == [pytest.approx([1, 1, 1.2]), pytest.approx([1, 1, 1])]
    assert out.stats["fipo_future_kl"][1].tolist() == pytest.approx([-0.125, -0.25, -0.5])


def test_weight_is_detached_and_scales_the_advantage():
    """The gradient of FIPO's loss is DAPO's with the credit multiplied by the constant f."""
    b, lp = batch_with([True, False], [D, [0.3, -0.2, 0.1]])
    m, base = FIPO(FIPOConfig(**HALF, influence_clip_high_only=False)), DAPO()
    credit = m.credit(b)
    x, y = lp.clone().requires_grad_(), lp.clone().requires_grad_()
    out = m.loss(b, x, credit)
    aggregate(out.loss, b.completion_mask, "token-mean").backward()
    aggregate(base.loss(b, y, credit * out.stats["fipo_weight"]).loss, b.completion_mask, "token-mean").backward()
    assert torch.allclose(x.grad, y.grad) and not torch.allclose(out.stats["fipo_weight"], torch.ones(2, 3))


def test_on_policy_update_is_dapo():
    """Delta = 0 (the single on-policy update): FutureKL = 0, f = 1, and the loss and its gradient
    are DAPO's exactly."""
    b, lp = batch_with([True, False, True], [[0.0] * 4] * 3, mask=[[1, 1, 1, 1], [1, 1, 0, 0], [1, 0, 0, 0]])
    x, y = lp.clone().requires_grad_(), lp.clone().requires_grad_()
    m = FIPO()
    out, ref = m.loss(b, x, m.credit(b)), DAPO().loss(b, y, DAPO().credit(b))
    assert torch.equal(out.loss, ref.loss) and torch.all(out.stats["fipo_weight"] == 1)
    aggregate(out.loss, b.completion_mask, "token-mean").backward()
    aggregate(ref.loss, b.completion_mask, "token-mean").backward()
    assert torch.equal(x.grad, y.grad)


def test_dual_clip_in_the_loss():
    """A < 0, ratio 12 > delta = 10: ms-swift caps coef_1 at 10, loss -min(10 * -A', 1.28 * -A') = 10 A'
    with A' = |A| f, and no gradient. FutureKL ignores the token (f = 1, and the safety cap would
    keep it <= 1 anyway). Without the dual clip: f = 1 (ratio 12 > 4 caps it) and loss 12 |A|."""
    b, lp = batch_with([True, False], [[0.0], [math.log(12.0)]])
    A = 1.0 / (math.sqrt(2.0) + 1e-4)
    x = lp.clone().requires_grad_()
    m = FIPO()
    out = m.loss(b, x, m.credit(b))
    assert float(out.loss[1, 0].detach()) == pytest.approx(10 * A)
    aggregate(out.loss, b.completion_mask, "token-mean").backward()
    assert x.grad[1, 0] == 0
    off = FIPO(FIPOConfig(dual_clip=None))
    assert float(off.loss(b, lp, off.credit(b)).loss[1, 0]) == pytest.approx(12 * A)


def test_defaults_are_ms_swift():
    """ms-swift's fipo_* defaults; delta 10 (its docs' official 32B setting); DAPO's clip and token-mean."""
    cfg = FIPOConfig()
    assert (cfg.decay_rate, cfg.influence_clip, cfg.influence_clip_high_only) == (32.0, 0.2, True)
    assert (cfg.safety_threshold, cfg.dual_clip, cfg.clip_low, cfg.clip_high) == (4.0, 10.0, 0.2, 0.28)
    assert (cfg.aggregation, cfg.kl_coef) == ("token-mean", 0.0)
    assert issubclass(FIPOConfig, DAPOConfig) and FIPO.needs == frozenset()


@pytest.mark.parametrize(
    "bad, message",
    [
        ({"decay_rate": 0.0}, "decay_rate must be > 0"),
        ({"influence_clip": 1.0}, "influence_clip must be None or in \\[0, 1\\)"),
        ({"influence_clip": -0.1}, "influence_clip must be None or in \\[0, 1\\)"),
        ({"safety_threshold": 0.0}, "safety_threshold must be None or > 0"),
        ({"dual_clip": 1.1}, "dual_clip must be None or > 1 \\+ clip_high"),
    ],
)
def test_bad_config(bad, message):
    with pytest.raises(CreditBenchError, match=message):
        FIPOConfig(**bad)


def test_inert_in_a_single_on_policy_update():
    """f = 1 whenever every update is the first on its rollouts (one PPO epoch, one minibatch): FIPO says
    so (Method.inert), and not once a second minibatch or epoch moves the ratios, nor as its own twin."""
    from bench.config import RLConfig

    assert "rl.ppo_epochs x rl.minibatches = 1" in FIPO().inert(RLConfig())
    assert FIPO().inert(RLConfig(minibatches=2)) is None and FIPO().inert(RLConfig(ppo_epochs=3)) is None
    assert FIPO(FIPOConfig(influence=False)).inert(RLConfig()) is None  # the twin is DAPO, not inert credit
    assert DAPO().inert(RLConfig()) is None
