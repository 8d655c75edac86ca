"""The probe's oracle arm (bench.paired with ``oracle``): each twin's oracle is planned beside it (its rates,
its reference trajectory), trains on the pair's batch with the true advantages estimated once per batch,
gives the records it gives without sharing, and the credit-quality scores sit in each label's records;
the report's share of the oracle is Fieller's ratio of the trajectory means (hand-worked)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import yaml

from bench.errors import CreditBenchError

ROOT = Path(__file__).resolve().parents[2]

SPEC = {
    "name": "oracle-tiny",
    "base": str(ROOT / "results/configs/embedded_grpo.yaml"),
    "tasks": ["chain"],
    "methods": ["grpo_lambda"],
    "credit_controls": ["twin"],
    "models": ["tiny-500k"],
    "seeds": [0],
    "budget": {"samples": 32},
    "baseline": "grpo_lambda",
    "eval": {"every": 2, "n": 2, "k": [1], "num_problems": 8},
    "overrides": {"rl.prompts_per_step": 4, "rl.group_size": 4},
    "threads": 1,
}


@pytest.fixture(scope="module")
def plan(tmp_path_factory):
    from bench.paired.plan import ProbeOptions, probe_plan

    path = tmp_path_factory.mktemp("oracle") / "oracle-tiny.yaml"
    path.write_text(yaml.safe_dump(SPEC))
    options = ProbeOptions(batches=2, phases=(0.0,), lrs=(2e-4,), oracle=True, oracle_rollouts=2)
    return probe_plan(path, options, tmp_path_factory.mktemp("results"))


@pytest.fixture(scope="module")
def workspace(plan):
    from bench.paired.trajectory import trajectory
    from bench.paired.update import Workspace

    (base,) = trajectory("grpo_lambda-twin", plan.labels["grpo_lambda-twin"], 0, [0.0], plan.budget)
    arms = plan.arms(["grpo_lambda", "grpo_lambda-twin", "grpo_lambda-twin-oracle"])
    return Workspace.build(plan.labels["grpo_lambda-twin"], base, arms, 8, probe_seed=0), arms


def test_the_plan_sets_each_twins_oracle_beside_it(plan):
    from bench.paired.plan import Pair

    assert plan.pairs == [Pair("grpo_lambda", "grpo_lambda-twin", "twin"),
                          Pair("grpo_lambda-twin-oracle", "grpo_lambda-twin", "oracle")]  # fmt: skip
    oracle = plan.labels["grpo_lambda-twin-oracle"]
    assert oracle.method.oracle and oracle.method.oracle_rollouts == 2
    assert oracle.method.options == plan.labels["grpo_lambda-twin"].method.options  # the twin's recipe
    assert plan.rates["grpo_lambda-twin-oracle"] == plan.rates["grpo_lambda-twin"]
    assert plan.references["grpo_lambda-twin-oracle"] == plan.references["grpo_lambda"] == "grpo_lambda-twin"


def test_the_oracle_trains_on_the_pairs_batch_with_one_estimate_per_batch(plan, workspace, monkeypatch):
    """One estimate of the true advantages per batch (the credit-quality scores and the oracle arm share
    it); the records are those of every arm computing its own; the oracle's update differs from its twin's."""
    from bench.engine import oracle
    from bench.paired.update import paired_batch

    ws, arms = workspace
    ws.truths.clear()
    estimate, calls = oracle.true_advantages, []
    monkeypatch.setattr(oracle, "true_advantages", lambda *a, **k: calls.append(1) or estimate(*a, **k))
    alone = paired_batch(ws, arms, 0, plan.pairs, share=False)
    assert len(calls) == 1 and len(ws.truths) == 1
    ws.truths.clear()
    shared = paired_batch(ws, arms, 0, plan.pairs, share=True)
    assert json.dumps(shared) == json.dumps(alone)
    by = {r["label"]: r for r in shared}
    assert len({r["fingerprint"] for r in shared}) == 1
    assert by["grpo_lambda-twin-oracle"]["dj"] != by["grpo_lambda-twin"]["dj"]
    q = by["grpo_lambda-twin-oracle"]
    assert q["quality_rank_corr"] == pytest.approx(1.0)  # its credit is the truth, scaled: the same ranks
    assert all("quality_worst_share" in r for r in shared)


def test_batches_past_oracle_batches_leave_the_oracle_out(plan, workspace):
    from bench.paired.update import paired_batch

    ws, arms = workspace
    records = paired_batch(ws, arms, 1, plan.pairs, oracle=False)
    assert {r["label"] for r in records} == {"grpo_lambda", "grpo_lambda-twin"}
    assert not any(k.startswith("quality_") for r in records for k in r)


def test_a_task_without_steps_refuses_the_oracle(tmp_path):
    from bench.paired.plan import ProbeOptions, probe_plan

    path = tmp_path / "oracle-arith.yaml"
    path.write_text(yaml.safe_dump({**SPEC, "name": "oracle-arith", "tasks": ["arithmetic"]}))
    with pytest.raises(CreditBenchError, match="cannot say where a completion's steps end"):
        probe_plan(path, ProbeOptions(oracle=True), tmp_path)
    with pytest.raises(CreditBenchError, match="oracle_batches must be in"):
        ProbeOptions(batches=2, oracle_batches=3)


def _record(label: str, seed: int, batch: int, dj: float) -> dict:
    return {"reference": "t", "seed": seed, "phase": 0.0, "batch": batch, "label": label, "lr": 1e-4, "dj": dj}


def test_the_share_of_the_oracle_by_hand():
    """Three trajectories: method - twin = [1, 2, 3] (the second batch of each is the oracle's alone: it
    does not count), oracle - twin = [4, 4, 7]: share 2 / 5, Fieller's interval at t(0.975, 2)."""
    from bench.report.oracle import shares
    from bench.stats.ratio import fieller

    m, o = [1.0, 2.0, 3.0], [4.0, 4.0, 7.0]
    updates = []
    for s in range(3):
        updates += [_record("twin", s, 0, 10.0), _record("m", s, 0, 10 + m[s]), _record("o", s, 0, 10 + o[s])]
        updates += [_record("twin", s, 1, 0.0), _record("m", s, 1, 50.0)]  # no oracle on batch 1
    plan = {"pairs": [{"method": "m", "control": "twin", "kind": "twin"},
                      {"method": "o", "control": "twin", "kind": "oracle"}],
            "options": {"lrs": [1e-4], "reference_seeds": [0, 1, 2], "alpha": 0.05}, "tuned": {}}  # fmt: skip
    (row,) = shares({"plan": plan, "updates": updates})
    from scipy import stats

    q = float(stats.t.ppf(0.975, 2))
    r = fieller(np.array(m), np.array(o), q)
    assert (row["method_effect"], row["oracle_effect"], row["n"], row["batches"]) == (2.0, 5.0, 3, 3)
    assert row["share"] == {"mean": 0.4, "lo": r.lo, "hi": r.hi} and row["critical"] == q
    assert math.isclose(row["oracle_lo"], 5 - q * np.std(o, ddof=1) / 3**0.5)


def test_the_oracles_are_a_family_of_their_own():
    """The credit method's verdict, interval and MDE are what they are without the oracle arm (the ceiling
    does not widen the methods' family); the oracle's open comparison still asks for trajectories."""
    from bench.report.per_update import comparisons, needs
    from tests.paired.test_paired import _records

    alone = _records({1e-4: [5.0, 5.1, 4.9], 2e-4: [5.0, 4.8, 5.2]})
    with_oracle = _records({1e-4: [5.0, 5.1, 4.9], 2e-4: [5.0, 4.8, 5.2]})
    with_oracle["plan"]["pairs"].append({"method": "o", "control": "c", "kind": "oracle"})
    with_oracle["plan"]["references"]["o"] = "c"
    for lr, effects in ((1e-4, [1.0, -1.0, 2.0]), (2e-4, [1.0, -1.0, 2.0])):
        for seed, e in enumerate(effects):
            for b in (0, 1):
                unit = {"reference": "c", "seed": seed, "phase": 1.0, "batch": b, "lr": lr}
                with_oracle["updates"].append({**unit, "label": "o", "dj": 10.0 + e})
    mine = [r for r in comparisons(with_oracle) if r["kind"] == "twin"]
    assert json.dumps(mine) == json.dumps(comparisons(alone))
    assert needs(alone) == {"c": 3} and needs(with_oracle) == {"c": 5}


def test_arms_that_augment_alike_take_one_augment(plan, workspace, monkeypatch):
    """VinePPO at two rates on one batch: its Monte-Carlo values are computed once for both (the same seed,
    batch and policy) and the records are those of each arm computing its own."""
    import dataclasses

    import methods.vineppo as vineppo
    from bench.paired.plan import Arm, Pair
    from bench.paired.update import Workspace, paired_batch

    ws, _ = workspace
    cfg = plan.labels["grpo_lambda-twin"]
    vine = dataclasses.replace(cfg, method=dataclasses.replace(cfg.method, name="vineppo",
                               options={"step_delimiter": ",", "mc_rollouts": 2}))  # fmt: skip
    arms = [Arm("vine", lr, dataclasses.replace(vine, rl=dataclasses.replace(vine.rl, lr=lr))) for lr in (1e-4, 2e-4)]
    vs = Workspace.build(cfg, ws.checkpoint, arms, 8, probe_seed=0)
    real, calls = vineppo.step_values, []
    monkeypatch.setattr(vineppo, "step_values", lambda *a, **k: calls.append(1) or real(*a, **k))
    pairs = [Pair("vine", "vine", "twin")]
    alone = paired_batch(vs, arms, 0, pairs, blame=False, share=False)
    assert len(calls) == 2
    shared = paired_batch(vs, arms, 0, pairs, blame=False, share=True)
    assert len(calls) == 3 and json.dumps(shared) == json.dumps(alone)
    assert alone[0]["dj"] != alone[1]["dj"]
