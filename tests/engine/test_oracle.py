"""The oracle (bench.engine.oracle): a twin's credit moved onto the Monte-Carlo step advantages, the same
mass, on a tree of completions whose true advantage is known exactly (every continuation of a state
finishes alike, so each value is 0 or 1 whatever K); its credit scored against that truth
(bench.engine.credit_quality); its one-line refusals."""

from __future__ import annotations

import pytest
import torch

from bench.config import RunConfig
from bench.engine.credit_quality import credit_quality
from bench.engine.oracle import ADVANTAGE, Oracle, oracle_credit, with_oracle
from bench.errors import CreditBenchError
from methods.grpo import GRPO, GRPOConfig
from tests.methods.test_vineppo import TreeSampler, batch_of

# Every continuation of a state gives the same reward: V is exact. From the prompt the policy succeeds
# half the time (K = 2: one of each), after "1" always, after "1,2" never, after "1,5" always.
EXACT = {"": [1.0, 0.0], "1": [1.0, 1.0], "1,2": [0.0, 0.0], "1,5": [1.0, 1.0]}


def test_the_oracle_credit_keeps_the_twins_mass_and_puts_it_on_the_true_advantage():
    """Row 0 "1,2,3" (R = 1): A = [V1 - V0, V2 - V1, R - V2] = [1/2, -1, 1] by step, tokens [1/2, -1, -1, 1, 1];
    row 1 "1,5,7" (R = 0): [1/2, 0, -1] by step, tokens [1/2, 0, 0, -1, -1]. GRPO's twin credit (R - mean)
    / std = +-(1/2) / (1/sqrt(2) + 1e-4) = +-a on each of the 10 tokens (the unbiased std of [1, 0] and
    GRPO's eps): mass 10 a; |A| sums to 4.5 + 2.5 = 7, so lambda = 10 a / 7."""
    b = batch_of(["1,2,3", "1,5,7"], [1.0, 0.0])
    twin = GRPO(GRPOConfig())
    sampler = TreeSampler(EXACT)
    oracle = Oracle(twin, rollouts=2, delimiter=",")
    out = oracle.augment(b, sampler)
    assert out.extra[ADVANTAGE].tolist() == [[0.5, -1.0, -1.0, 1.0, 1.0], [0.5, 0.0, 0.0, -1.0, -1.0]]
    assert sampler.calls == [(["", "", "1", "1", "1,2", "1,2", "1,5", "1,5"], True)]  # extra samples, once each
    c, lam = oracle.credit(out), 10 * (0.5 / (0.5**0.5 + 1e-4)) / 7
    torch.testing.assert_close(c, out.extra[ADVANTAGE] * lam)
    assert float(c.abs().sum()) == pytest.approx(float(twin.credit(out).abs().sum()))
    assert oracle.loss is not None and oracle.config is twin.config  # the rest is the twin's


def test_a_batch_that_carries_its_estimates_is_not_estimated_again():
    b = batch_of(["1,2,3"], [1.0])
    oracle = Oracle(GRPO(GRPOConfig()), rollouts=2, delimiter=",")
    calls = []
    oracle.estimates = lambda batch, sampler: calls.append(1) or torch.ones(batch.completion_ids.shape)
    sampler = TreeSampler(EXACT)
    out = oracle.augment(b, sampler)
    assert calls == [1] and sampler.calls == [] and out.extra[ADVANTAGE].tolist() == [[1.0] * 5]
    b.extra[ADVANTAGE] = torch.zeros(1, 5)
    assert oracle.augment(b, sampler).extra[ADVANTAGE].tolist() == [[0.0] * 5] and calls == [1]


def test_no_mass_or_no_advantage_gives_no_credit():
    mask = torch.tensor([[1, 1, 0]])
    assert oracle_credit(torch.zeros(1, 3), torch.tensor([[1.0, -1.0, 5.0]]), mask).tolist() == [[0.0, 0.0, 0.0]]
    assert oracle_credit(torch.ones(1, 3), torch.tensor([[0.0, 0.0, 5.0]]), mask).tolist() == [[0.0, 0.0, 0.0]]
    # the padding's credit and advantage count for nothing: mass 2 over |A| = 1 + 3
    assert oracle_credit(torch.tensor([[1.0, -1.0, 9.0]]), torch.tensor([[1.0, -3.0, 5.0]]), mask).tolist() == [
        [0.5, -1.5, 0.0]
    ]


def test_the_oracles_credit_scores_as_the_truth_and_the_twins_as_uniform():
    """Against the exact advantages: the oracle's credit ranks the tokens as the truth does (rho 1) and puts
    all of a failed completion's negative credit on its worst step (row 1's last, 2 of its 5 tokens); the
    twin's credit is constant in a row (no rank correlation) and puts 2/5 there, the uniform share."""
    b = batch_of(["1,2,3", "1,5,7"], [1.0, 0.0])
    twin = GRPO(GRPOConfig())
    oracle = Oracle(twin, rollouts=2, delimiter=",")
    out = oracle.augment(b, TreeSampler(EXACT))
    truth, mask = out.extra[ADVANTAGE], out.completion_mask
    q = credit_quality(oracle.credit(out), truth, mask, out.correct)
    assert q["rank_corr"] == pytest.approx(1.0) and q["worst_share"] == 1.0
    assert q["worst_uniform"] == pytest.approx(0.4)
    # row 0's positive mass 1/2 + 1 + 1, 2 of it on its best step (2 of 5 tokens): 0.8 against uniform's 0.4
    assert q["best_share"] == pytest.approx(0.8) and q["best_uniform"] == pytest.approx(0.4)
    u = credit_quality(twin.credit(out), truth, mask, out.correct)
    assert u["n_rank"] == 0 and u["worst_share"] == pytest.approx(0.4) and u["best_share"] == pytest.approx(0.4)


def test_the_refusals_are_one_line():
    from bench.registry import TASKS

    grpo = GRPO(GRPOConfig())
    chain, arithmetic = TASKS.get("chain")(), TASKS.get("arithmetic")()
    assert with_oracle(grpo, False, 9, arithmetic) is grpo
    with pytest.raises(CreditBenchError, match="cannot say where a completion's steps end.*tasks that can: .*chain"):
        with_oracle(grpo, True, 9, arithmetic)
    with pytest.raises(CreditBenchError, match="oracle_rollouts must be >= 1"):
        with_oracle(grpo, True, 0, chain)
    placebo = type("P", (), {"placebo": True})()
    with pytest.raises(CreditBenchError, match="two controls"):
        with_oracle(placebo, True, 9, chain)
    assert isinstance(with_oracle(grpo, True, 9, chain), Oracle)


def test_a_run_config_builds_the_oracle():
    from bench.run.resolve import resolve

    cfg = RunConfig()
    cfg.task.name, cfg.method.name, cfg.method.oracle, cfg.method.oracle_rollouts = "chain", "dr_grpo", True, 3
    m = resolve(cfg).method
    assert isinstance(m, Oracle) and (m.rollouts, m.delimiter) == (3, ",") and m.config.aggregation
