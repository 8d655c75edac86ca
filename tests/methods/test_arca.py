import math

import pytest
import torch

from bench.core import RolloutBatch
from bench.errors import CreditBenchError
from methods.arca import ARCA, ARCAConfig, salience_weights


def batch_with(rewards, residual, mask, **fields):
    B, T = residual.shape
    return RolloutBatch(
        prompt_ids=torch.zeros(B, 1, dtype=torch.long),
        prompt_mask=torch.ones(B, 1, dtype=torch.long),
        completion_ids=torch.zeros(B, T, dtype=torch.long),
        completion_mask=torch.tensor(mask),
        group_ids=torch.zeros(B, dtype=torch.long),
        rewards=torch.tensor(rewards),
        correct=torch.tensor(rewards) > 0,
        truncated=torch.zeros(B, dtype=torch.bool),
        max_new_tokens=T,
        old_logprobs=torch.zeros(B, T),
        hidden_residual=residual,
        **fields,
    )


def test_arca_credit_hand_worked():
    """Group rewards [1, 0]: A = +-0.5 / (sqrt(0.5) + 1e-4) = +-0.70700.
    Row 0 residual [1, 3, 0, (9 padded)], L = 3: w = 3 * [1, 3, 0] / 4 = [0.75, 2.25, 0], mean 1.
    Row 1 residual [0, 0, 0, 0] (the adapter changes nothing yet, as at step 0): uniform w = 1.
    Credit = A * w."""
    residual = torch.tensor([[1.0, 3.0, 0.0, 9.0], [0.0, 0.0, 0.0, 0.0]])
    b = batch_with([1.0, 0.0], residual, [[1, 1, 1, 0], [1, 1, 1, 1]])
    a = 0.5 / (math.sqrt(0.5) + 1e-4)
    credit = ARCA().credit(b)
    assert credit[0, :3].tolist() == pytest.approx([0.75 * a, 2.25 * a, 0.0])
    assert credit[1].tolist() == pytest.approx([-a] * 4)


def test_softmax_normalisation_hand_worked():
    """s = [0, ln 3], tau = 1: softmax = [1/4, 3/4], times L = 2 -> [0.5, 1.5]; tau = 2 halves the
    log-odds: softmax([0, ln 3 / 2]) = [1, sqrt 3] / (1 + sqrt 3)."""
    s = torch.tensor([[0.0, math.log(3.0)]])
    m = torch.ones(1, 2)
    assert salience_weights(s, m, "softmax").tolist()[0] == pytest.approx([0.5, 1.5])
    r3 = math.sqrt(3)
    assert salience_weights(s, m, "softmax", 2.0).tolist()[0] == pytest.approx([2 / (1 + r3), 2 * r3 / (1 + r3)])


def test_weights_loop_vs_vectorised_and_mean_one():
    g = torch.Generator().manual_seed(0)
    for normalise in ("sum", "softmax"):
        s = torch.rand(6, 9, generator=g) * (torch.rand(6, 9, generator=g) > 0.2) - 0.1
        lengths = torch.randint(1, 10, (6,), generator=g)
        mask = torch.arange(9)[None] < lengths[:, None]
        w = salience_weights(s, mask, normalise, 0.5)
        for i in range(6):
            v = s[i, : lengths[i]].clamp(min=0)
            L = len(v)
            if normalise == "sum":
                want = [1.0] * L if v.sum() == 0 else [L * float(x) / float(v.sum()) for x in v]
            else:
                e = [math.exp(float(x) / 0.5) for x in v]
                want = [L * x / sum(e) for x in e]
            assert w[i, :L].tolist() == pytest.approx(want, rel=1e-5)
            assert float(w[i, :L].mean()) == pytest.approx(1.0, rel=1e-5)
            assert torch.all(w[i, L:] == 0)


def test_intrinsic_signals_read_the_right_fields():
    """Surprisal is -log pi_old; entropy reduction H_ref - H (negative parts clamped); divergence the
    exact KL. Each needs what it reads."""
    T = 2
    b = batch_with(
        [1.0, 0.0],
        torch.zeros(2, T),
        [[1, 1], [1, 1]],
        entropy=torch.tensor([[1.0, 2.0], [1.0, 1.0]]),
        ref_entropy=torch.tensor([[2.0, 1.0], [1.0, 1.0]]),
        ref_kl=torch.tensor([[0.1, 0.3], [0.0, 0.0]]),
    )
    b.old_logprobs = torch.log(torch.tensor([[0.5, 0.25], [1.0, 1.0]]))
    a = 0.5 / (math.sqrt(0.5) + 1e-4)
    surprisal = ARCA(ARCAConfig(signal="surprisal")).credit(b)[0]  # s = [ln 2, ln 4] -> w = [2/3, 4/3]
    assert surprisal.tolist() == pytest.approx([a * 2 / 3, a * 4 / 3])
    reduction = ARCA(ARCAConfig(signal="entropy_reduction")).credit(b)[0]  # s = [1, -1 -> 0] -> w = [2, 0]
    assert reduction.tolist() == pytest.approx([2 * a, 0.0])
    divergence = ARCA(ARCAConfig(signal="policy_divergence")).credit(b)[0]  # w = 2 * [0.25, 0.75]
    assert divergence.tolist() == pytest.approx([0.5 * a, 1.5 * a])
    assert ARCA().required >= {"hidden_residual", "ref_logprobs"}
    assert ARCA(ARCAConfig(signal="entropy_reduction")).required >= {"entropy", "ref_entropy"}
    assert "ref_kl" in ARCA(ARCAConfig(signal="policy_divergence")).required


def test_pre_norm_choice_and_bad_values():
    b = batch_with([1.0, 0.0], torch.ones(2, 2), [[1, 1], [1, 1]])
    with pytest.raises(CreditBenchError, match="post_norm"):
        ARCA(ARCAConfig(hidden="pre_norm")).credit(b)
    b.extra["hidden_residual_prenorm"] = torch.tensor([[1.0, 3.0], [1.0, 1.0]])
    assert ARCA(ARCAConfig(hidden="pre_norm")).credit(b)[0, 1] > ARCA().credit(b)[0, 1]
    with pytest.raises(CreditBenchError, match="residual, surprisal"):
        ARCAConfig(signal="gradient")
