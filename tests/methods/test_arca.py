"""ARCA as its official code (rodlaf/tokenweighting, token_weights.py / run_experiment.py) computes
it, worked by hand, and the earlier reconstruction's options."""

import math

import pytest
import torch

from bench.core import RolloutBatch
from bench.errors import CreditBenchError
from bench.numerics import aggregate
from methods.arca import ARCA, ARCAConfig, entropy_drop, token_weights, weight_concentration


def batch_with(rewards, mask, **fields):
    mask = torch.tensor(mask)
    B, T = mask.shape
    return RolloutBatch(
        prompt_ids=torch.zeros(B, 1, dtype=torch.long),
        prompt_mask=torch.ones(B, 1, dtype=torch.long),
        completion_ids=torch.zeros(B, T, dtype=torch.long),
        completion_mask=mask,
        group_ids=torch.zeros(B, dtype=torch.long),
        rewards=torch.tensor(rewards),
        correct=torch.tensor(rewards) > 0,
        truncated=torch.zeros(B, dtype=torch.bool),
        max_new_tokens=T,
        **fields,
    )


def official_weights(scores, mask, sharpening=2.0, eps=1e-8):
    """The official build_token_weights, transcribed loop by loop: scores already include + eps."""
    out = torch.zeros_like(scores)
    for i in range(scores.shape[0]):
        s = [max(0.0, float(x)) ** sharpening * float(m) for x, m in zip(scores[i], mask[i])]
        total = sum(s)
        L = max(1.0, float(sum(mask[i])))
        out[i] = torch.tensor([x / max(total, eps) if total > eps else float(m) / L for x, m in zip(s, mask[i])])
    return out


def test_official_weighting_hand_worked():
    """Residual norms, sharpening 2, eps 1e-8 (official defaults of the paper's runs):
    row 0 alpha = [3, 4, 0, (9 padded)]: squares [9, 16, 1e-16] / 25 = [0.36, 0.64, 0];
    row 1 alpha = 0 everywhere (step 0: LoRA's B is zero): (1e-8)^2 * 4 = 4e-16 <= eps, so uniform 1/4.
    Rewards [1, 0]: A = +-0.5 / std, std = sqrt(0.5) (unbiased, floored at 1e-8): A = +-0.70711.
    Credit = A * w; weights sum to one per completion."""
    residual = torch.tensor([[3.0, 4.0, 0.0, 9.0], [0.0, 0.0, 0.0, 0.0]])
    b = batch_with([1.0, 0.0], [[1, 1, 1, 0], [1, 1, 1, 1]], hidden_residual=residual)
    a = 0.5 / math.sqrt(0.5)
    credit = ARCA().credit(b)
    assert credit[0].tolist() == pytest.approx([0.36 * a, 0.64 * a, 0.0, 0.0], abs=1e-7)
    assert credit[1].tolist() == pytest.approx([-a / 4] * 4)
    torch.testing.assert_close(ARCA().weights(b), official_weights(residual + 1e-8, b.completion_mask))


def test_the_baselines_signals_hand_worked():
    """One completion of L = 4 (of T = 5), sharpening 2:
    surprisal: log pi = [-1, -2, -0.5, -0.5]: squares [1, 4, .25, .25] / 5.5.
    entropy reduction: H = [2.0, 1.5, 1.7, 0.3, (pad 9)]: drops [0.5, 0, 1.4, 0 (last valid token)]:
      squares [.25, 0, 1.96, 0] / 2.21.
    policy divergence: log pi_ref = [-1, -1, -1, -1]: |diff| = [0, 1, .5, .5]: [0, 1, .25, .25] / 1.5.
    uniform: 1/4, never sharpened."""
    mask = [[1, 1, 1, 1, 0]]
    lp = torch.tensor([[-1.0, -2.0, -0.5, -0.5, 0.0]])
    fields = dict(
        old_logprobs=lp,
        entropy=torch.tensor([[2.0, 1.5, 1.7, 0.3, 9.0]]),
        ref_logprobs=torch.tensor([[-1.0, -1.0, -1.0, -1.0, 0.0]]),
    )
    b = batch_with([1.0], mask, **fields)

    def w(signal):
        return ARCA(ARCAConfig(signal=signal)).weights(b)[0, :4].tolist()

    assert w("surprisal") == pytest.approx([1 / 5.5, 4 / 5.5, 0.25 / 5.5, 0.25 / 5.5])
    assert w("entropy_reduction") == pytest.approx([0.25 / 2.21, 0.0, 1.96 / 2.21, 0.0], abs=1e-7)
    assert w("policy_divergence") == pytest.approx([0.0, 1 / 1.5, 0.25 / 1.5, 0.25 / 1.5], abs=1e-7)
    assert w("uniform") == pytest.approx([0.25] * 4)
    assert entropy_drop(fields["entropy"], b.completion_mask)[0].tolist() == pytest.approx([0.5, 0, 1.4, 0, 0])
    assert ARCA(ARCAConfig(signal="entropy_reduction")).required == {"entropy"}
    assert ARCA(ARCAConfig(signal="policy_divergence")).required == {"ref_logprobs"}
    assert ARCA().required == {"hidden_residual", "hidden_residual_separate"}


def test_weights_against_the_official_transcription_on_random_scores():
    g = torch.Generator().manual_seed(0)
    scores = torch.rand(6, 9, generator=g) * 3
    scores[2] = 0.0
    mask = (torch.arange(9)[None] < torch.randint(1, 10, (6, 1), generator=g)).long()
    for p in (1.0, 2.0, 3.0):
        cfg = ARCAConfig(sharpening=p)
        torch.testing.assert_close(token_weights(scores, mask, cfg), official_weights(scores + 1e-8, mask, p))


def test_the_loss_is_reinforce_summed_over_tokens_and_averaged_over_completions():
    """L = -1/B sum_i A_i sum_t w_t log pi_t, no ratio: with log pi = old log pi the value is the
    hand sum; gradient wrt log pi_t is -A_i w_t / B."""
    residual = torch.tensor([[1.0, 1.0], [1.0, 3.0]])
    b = batch_with([1.0, 0.0], [[1, 1], [1, 1]], hidden_residual=residual, old_logprobs=torch.zeros(2, 2))
    m = ARCA()
    credit = m.credit(b)
    lp = torch.tensor([[-1.0, -2.0], [-0.5, -0.25]], requires_grad=True)
    out = m.loss(b, lp, credit)
    total = aggregate(out.loss, b.completion_mask, m.config.aggregation)
    a = 0.5 / math.sqrt(0.5)
    w1 = [1 / 10, 9 / 10]
    want = -(a * (0.5 * -1.0 + 0.5 * -2.0) + (-a) * (w1[0] * -0.5 + w1[1] * -0.25)) / 2
    assert float(total.detach()) == pytest.approx(want)
    total.backward()
    assert lp.grad.flatten().tolist() == pytest.approx([-a * 0.25, -a * 0.25, a * w1[0] / 2, a * w1[1] / 2])
    assert m.config.kl_coef == 0.0 and "clip_frac" not in out.stats
    assert float(out.scalars["weight_gini"]) == pytest.approx((0.0 + 0.4) / 2)  # [.5,.5]: 0; [.1,.9]: .8/2


def test_the_papers_gini_and_effn_definitions():
    """Sorted-form Gini sum_i (2i - n - 1) w_(i) / (n sum w) and EffN/T = 1 / (T sum w^2), averaged
    over completions (Gini over those of more than one token), as weight_concentration_metrics:
    w = [.5, .5, 0, 0]: Gini = ((2*3-5) .5 + (2*4-5) .5) / 4 = 0.5, EffN/T = 1 / (4 * 0.5) = 0.5;
    uniform [1/3] * 3: Gini 0, EffN/T 1; one token [1]: no Gini, EffN/T 1.
    Means: Gini (0.5 + 0) / 2 = 0.25, EffN/T (0.5 + 1 + 1) / 3."""
    w = torch.tensor([[0.5, 0.5, 0.0, 0.0], [1 / 3, 1 / 3, 1 / 3, 0.0], [1.0, 0.0, 0.0, 0.0]])
    mask = torch.tensor([[1, 1, 1, 1], [1, 1, 1, 0], [1, 0, 0, 0]])
    d = weight_concentration(w, mask)
    assert float(d["weight_gini"]) == pytest.approx(0.25)
    assert float(d["weight_effective_n_ratio"]) == pytest.approx(2.5 / 3)
    assert float(weight_concentration(w * mask.sum(-1, keepdim=True), mask, "mean_one")["weight_gini"]) == (
        pytest.approx(0.25)
    )


def test_the_engines_credit_diagnostics_see_the_same_concentration():
    """The effective credit -dL/dlog pi = A_i w_t / B: on rows with A != 0 its per-row Gini and
    effective-token ratio are the weights' own."""
    from bench.engine.diagnostics import credit_diagnostics

    residual = torch.tensor([[1.0, 2.0, 3.0], [4.0, 0.5, 0.5]])
    b = batch_with([1.0, 0.0], [[1, 1, 1], [1, 1, 1]], hidden_residual=residual, old_logprobs=torch.zeros(2, 3))
    m = ARCA()
    lp = torch.zeros(2, 3, requires_grad=True)
    total = aggregate(m.loss(b, lp, m.credit(b)).loss, b.completion_mask, m.config.aggregation)
    (grad,) = torch.autograd.grad(total, lp)
    diag = credit_diagnostics(-grad, b.completion_mask)
    mine = weight_concentration(m.weights(b), b.completion_mask)
    assert diag["credit/gini"] == pytest.approx(float(mine["weight_gini"]), rel=1e-5)
    assert diag["credit/effective_token_ratio"] == pytest.approx(float(mine["weight_effective_n_ratio"]), rel=1e-5)


def test_reconstruction_options():
    """mean_one: L * w; softmax: L * softmax(s / tau) ... here sum-one softmax; clipped objective is
    GRPO's surrogate; all_zero=zero gives no credit; the earlier entropy/divergence readings."""
    residual = torch.tensor([[1.0, 3.0, 0.0], [0.0, 0.0, 0.0]])
    b = batch_with([1.0, 0.0], [[1, 1, 1], [1, 1, 1]], hidden_residual=residual, old_logprobs=torch.zeros(2, 3))
    base = ARCA().weights(b)
    torch.testing.assert_close(ARCA(ARCAConfig(scale="mean_one")).weights(b), base * 3)
    soft = ARCA(ARCAConfig(normalise="softmax")).weights(b)
    assert soft[0].tolist() == pytest.approx(torch.softmax(torch.tensor([1.0, 3.0, 0.0]), 0).tolist())
    assert ARCA(ARCAConfig(all_zero="zero")).weights(b)[1].tolist() == [0.0, 0.0, 0.0]
    assert ARCA(ARCAConfig(sharpening=1.0)).weights(b)[0].tolist() == pytest.approx([0.25, 0.75, 0.0], abs=1e-7)
    clipped = ARCA(ARCAConfig(objective="clipped"))
    assert "clip_frac" in clipped.loss(b, torch.zeros(2, 3), clipped.credit(b)).stats
    assert ARCA(ARCAConfig(signal="entropy_reduction", entropy_signal="ref_minus_policy")).required == {
        "entropy",
        "ref_entropy",
    }
    assert ARCA(ARCAConfig(signal="policy_divergence", divergence_signal="full_kl")).required == {"ref_kl"}
    neg = batch_with([1.0], [[1, 1]], entropy=torch.tensor([[1.0, 2.0]]), ref_entropy=torch.tensor([[2.0, 1.0]]))
    cfg = dict(signal="entropy_reduction", entropy_signal="ref_minus_policy", sharpening=1.0)
    assert ARCA(ARCAConfig(**cfg)).weights(neg)[0].tolist() == pytest.approx([1.0, 0.0], abs=1e-7)
    assert ARCA(ARCAConfig(**cfg, negative="abs")).weights(neg)[0].tolist() == pytest.approx([0.5, 0.5])


def test_pre_norm_choice_and_bad_values():
    b = batch_with([1.0, 0.0], [[1, 1], [1, 1]], hidden_residual=torch.ones(2, 2))
    with pytest.raises(CreditBenchError, match="pre_norm"):
        ARCA(ARCAConfig(hidden="pre_norm")).credit(b)
    b.extra["hidden_residual_prenorm"] = torch.tensor([[1.0, 0.0], [1.0, 1.0]])
    assert ARCA(ARCAConfig(hidden="pre_norm")).weights(b)[0].tolist() == pytest.approx([1.0, 0.0], abs=1e-7)
    for bad in [
        {"signal": "kl"},
        {"scale": "sum"},
        {"objective": "ppo"},
        {"sharpening": 0.0},
        {"adapted_pass": "both"},
        {"all_zero": "skip"},
        {"weight_eps": 0.0},
    ]:
        with pytest.raises(CreditBenchError):
            ARCAConfig(**bad)
    with pytest.raises(CreditBenchError, match="valid: residual, uniform"):
        ARCAConfig(signal="kl")
