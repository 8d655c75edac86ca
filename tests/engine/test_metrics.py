import itertools
import math

import numpy as np
import pytest
import torch

from bench.engine.metrics import PassAtK, eval_summary, metric_key, pass_at_k, standard_error


def brute_force_pass_at_k(n: int, c: int, k: int) -> float:
    """Fraction of all k-subsets of n samples (c of them correct) that contain a correct one."""
    samples = [True] * c + [False] * (n - c)
    subsets = list(itertools.combinations(range(n), k))
    return sum(any(samples[i] for i in s) for s in subsets) / len(subsets)


@pytest.mark.parametrize("n", [1, 2, 5, 8, 10])
def test_pass_at_k_matches_enumeration(n):
    for c in range(n + 1):
        for k in range(1, n + 1):
            assert pass_at_k(n, c, k) == pytest.approx(brute_force_pass_at_k(n, c, k), abs=1e-12)


def test_pass_at_1_is_fraction_correct_and_naive_estimator_is_biased():
    assert pass_at_k(16, 4, 1) == pytest.approx(0.25)
    # naive 1-(1-p)^k differs from the unbiased value: 1 - C(12,4)/C(16,4) = 1 - 495/1820
    assert pass_at_k(16, 4, 4) == pytest.approx(1 - 495 / 1820)
    assert 1 - (1 - 0.25) ** 4 != pytest.approx(pass_at_k(16, 4, 4))


def test_pass_at_k_rejects_k_above_n():
    with pytest.raises(ValueError, match="k <= n"):
        pass_at_k(4, 1, 5)


def test_pass_at_k_metric_mean_and_standard_error():
    m = PassAtK(ks=[1, 2])
    # problem A: 1 of 4 correct, B: 4 of 4, C: 0 of 4
    m.update(torch.tensor([[1, 0, 0, 0], [1, 1, 1, 1]], dtype=torch.bool))
    m.update(torch.tensor([[0, 0, 0, 0]], dtype=torch.bool))
    out = m.compute()
    p1 = np.array([0.25, 1.0, 0.0])
    p2 = np.array([1 - 3 / 6, 1.0, 0.0])  # C(3,2)/C(4,2) = 3/6 for problem A
    assert out["pass_at_1"] == pytest.approx(p1.mean())
    assert out["pass_at_2"] == pytest.approx(p2.mean())
    assert out["pass_at_1_se"] == pytest.approx(p1.std(ddof=1) / math.sqrt(3))
    assert out["avg_at_4"] == pytest.approx(p1.mean())
    assert out["num_problems"] == 3


def test_pass_at_k_metric_needs_enough_samples():
    m = PassAtK(ks=[4])
    m.update(torch.ones(2, 2, dtype=torch.bool))
    with pytest.raises(ValueError, match="at least 4 samples"):
        m.compute()


def test_metric_keys_are_mlflow_safe():
    assert metric_key("eval", "math500", "pass@16") == "eval/math500/pass_at_16"
    assert metric_key("eval", "a,b(c)", "x") == "eval/a_b_c_/x"
    assert math.isnan(standard_error(np.array([1.0])))


def test_pass_at_1_is_always_reported():
    m = PassAtK(ks=[2])
    m.update(torch.tensor([[1, 0], [0, 0]], dtype=torch.bool))
    out = m.compute()
    assert out["pass_at_1"] == pytest.approx(0.25) and out["pass_at_2"] == pytest.approx(0.5)


def test_eval_summary_by_hand():
    """Two problems, n = 3: [1, 0, 0] and [1, 1, 0], completions of 4, 6, 2 and 8, 6, 10 tokens, the
    last truncated, flexible verdicts [1, 1, 0, 1, 1, 0]. pass@1 = (1/3 + 2/3) / 2 = 0.5; mean
    length 36 / 6 = 6; 3 correct completions, so 36 / 3 = 12 tokens per correct one (the count of
    correct completions, not pass@1 x problems x n); truncated 1/6; flexible 4/6. None correct: nan."""
    m = PassAtK(ks=[2])
    m.update(torch.tensor([[1, 0, 0], [1, 1, 0]], dtype=torch.bool))
    out = eval_summary(m, [4, 6, 2, 8, 6, 10], [False] * 5 + [True], [True, True, False, True, True, False])
    assert out["pass_at_1"] == pytest.approx(0.5) and out["num_problems"] == 2
    assert out["mean_length"] == 6.0 and out["tokens_per_correct"] == 12.0
    assert out["truncated_frac"] == pytest.approx(1 / 6) and out["flexible_avg_at_n"] == pytest.approx(4 / 6)
    assert list(out)[-4:] == ["mean_length", "truncated_frac", "flexible_avg_at_n", "tokens_per_correct"]
    none = PassAtK(ks=[1])
    none.update(torch.zeros(1, 2, dtype=torch.bool))
    assert math.isnan(eval_summary(none, [3, 5], [False, False], [False, False])["tokens_per_correct"])


def test_greedy_accuracy_beside_pass_at_k():
    """eval.greedy: one greedy completion per problem, its accuracy reported as ``greedy``."""
    from types import SimpleNamespace

    from bench.config import EvalConfig
    from bench.engine.metrics import EvalEpoch

    epoch = EvalEpoch(["t"], EvalConfig(n=2, k=[1, 2], greedy=True), samples_to_log=0)
    epoch.start()
    rows = [{"answer": "1"}, {"answer": "2"}]
    sampled = SimpleNamespace(
        correct=torch.tensor([True, False, False, False]),
        lengths=torch.tensor([3, 3, 3, 3]),
        truncated=torch.zeros(4, dtype=torch.bool),
        size=4,
    )
    epoch.add("t", rows, sampled, [{"correct_flexible": False}] * 4, ref_probs=[])
    epoch.add_greedy("t", SimpleNamespace(correct=torch.tensor([True, True])))
    summary = epoch.results()["t"].summary
    assert summary["greedy"] == 1.0 and summary["pass_at_1"] == 0.25
    assert "ref_prob" not in summary  # a task without references reports no J


def test_reference_probability_beside_pass_at_k():
    """A task with references: ``ref_prob`` is J, the mean of the problems' p(reference). Two chunks of
    one problem each (as two eval batches or two processes add them), p = 0.5 and 0.1: J = 0.3, its
    SE std([0.5, 0.1]) / sqrt(2) = 0.2828 / 1.4142 = 0.2; the history entry keeps each p in order."""
    from types import SimpleNamespace

    from bench.config import EvalConfig
    from bench.engine.metrics import EvalEpoch

    epoch = EvalEpoch(["t"], EvalConfig(n=2, k=[1]), samples_to_log=0)
    epoch.start()
    for p in (0.5, 0.1):
        sampled = SimpleNamespace(
            correct=torch.tensor([True, False]), lengths=torch.tensor([3, 3]), truncated=torch.zeros(2, dtype=bool)
        )
        epoch.add("t", [{"answer": "1"}], sampled, [{"correct_flexible": False}] * 2, ref_probs=[p])
    res = epoch.results()["t"]
    assert res.summary["ref_prob"] == pytest.approx(0.3) and res.summary["ref_prob_se"] == pytest.approx(0.2)
    assert res.entry()["per_problem_ref_prob"] == [0.5, 0.1] and res.summary["pass_at_1"] == 0.5
