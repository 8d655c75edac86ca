"""Paired updates (bench.paired): the pairing holds (every arm trains on the same batch, a broken pairing
is refused), nulls are exactly 0, a credit method and its twin do differ, segments start paired, and the
command writes its records and report."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from bench.errors import CreditBenchError

ROOT = Path(__file__).resolve().parents[2]

SPEC = {
    "name": "probe-tiny",
    "base": str(ROOT / "results/configs/embedded_grpo.yaml"),
    "tasks": ["chain"],
    "methods": ["s_trace"],
    "credit_controls": ["twin", "placebo"],
    "models": ["tiny-500k"],
    "seeds": [0],
    "budget": {"samples": 32},
    "baseline": "s_trace",
    "eval": {"every": 2, "n": 2, "k": [1], "num_problems": 16},
    "overrides": {"rl.prompts_per_step": 4, "rl.group_size": 4, "rl.minibatches": 2},
    "threads": 1,
}


@pytest.fixture(scope="module")
def spec(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("probe") / "probe-tiny.yaml"
    path.write_text(yaml.safe_dump(SPEC))
    return path


@pytest.fixture(scope="module")
def plan(spec, tmp_path_factory):
    from bench.paired.plan import ProbeOptions, probe_plan

    return probe_plan(spec, ProbeOptions(batches=2, phases=(0.0, 1.0), lrs=(2e-4,), placebo=True),
                      tmp_path_factory.mktemp("results"))  # fmt: skip


@pytest.fixture(scope="module")
def checkpoints(plan):
    from bench.paired.trajectory import trajectory

    return trajectory("s_trace-twin", plan.labels["s_trace-twin"], 0, [0.0, 1.0], plan.budget)


def _workspace(plan, checkpoint, arms):
    from bench.paired.update import Workspace

    return Workspace.build(plan.labels["s_trace-twin"], checkpoint, arms, 16, probe_seed=0)


def test_the_reference_trajectory_gives_its_checkpoints(checkpoints):
    """Phase 0 is the base with a fresh AdamW; phase 1 the end of the budget (32 samples: 2 RL steps)."""
    base, end = checkpoints
    assert (base.rl_step, base.samples, base.optimizer) == (0, 0, None)
    assert (end.rl_step, end.samples) == (2, 32) and end.optimizer["state"]
    assert any(not (base.weights[k] == end.weights[k]).all() for k in base.weights)


def test_a_method_against_itself_and_a_twin_against_its_copy_differ_by_exactly_zero(plan, checkpoints):
    """Two arms of the same recipe on the same batch, with the same seeds, from the same weights and AdamW
    state: bit-identical updates, so every paired difference is exactly 0."""
    from bench.paired.plan import Arm, Pair
    from bench.paired.update import paired_batch

    for label in ("s_trace", "s_trace-twin"):
        cfg = plan.arms([label])[0].cfg  # at 2e-4
        arms = [Arm(label, 2e-4, cfg), Arm(f"{label}-copy", 2e-4, cfg)]
        ws = _workspace(plan, checkpoints[1], arms)
        a, b = paired_batch(ws, arms, 0, [Pair(label, f"{label}-copy", "twin")])
        assert a["dj"] == b["dj"] and a["first_order"] == b["first_order"] and a["fingerprint"] == b["fingerprint"]
        assert a["dj"] != 0.0  # the update did move J


def test_a_method_and_its_twin_share_the_batch_but_not_the_update(plan, checkpoints):
    from bench.paired.update import paired_batch

    arms = plan.arms(["s_trace", "s_trace-twin", "s_trace-placebo"])
    ws = _workspace(plan, checkpoints[1], arms)
    records = paired_batch(ws, arms, 1, plan.pairs)
    assert len({r["fingerprint"] for r in records}) == 1
    assert len({r["dj"] for r in records}) == len(records)  # three credits, three different updates
    assert all(r["j_before"] == ws.j0 for r in records)


def test_a_broken_pairing_is_refused(plan, checkpoints, monkeypatch):
    """If one arm draws another batch (here: another sampling seed), the probe stops rather than report a
    difference that carries the batches' noise."""
    from bench.paired import update

    arms = plan.arms(["s_trace", "s_trace-twin"])
    ws = _workspace(plan, checkpoints[0], arms)
    real, calls = update.draw, []

    def other_batch_for_the_twin(ws_, arm, sampler, seed):
        calls.append(arm.label)
        if arm.label == "s_trace-twin":
            sampler = ws_.sampler(ws_.policy, arm.cfg, seed + 1, shared=True)
        return real(ws_, arm, sampler, seed)

    monkeypatch.setattr(update, "draw", other_batch_for_the_twin)
    with pytest.raises(CreditBenchError, match="pairing is broken: s_trace and s_trace-twin"):
        update.paired_batch(ws, arms, 0, plan.pairs)
    assert calls == ["s_trace", "s_trace-twin"]


def test_segments_start_paired(plan, checkpoints):
    """Step 1 of a segment samples from the checkpoint with the same seed in every arm: the same samples."""
    from bench.paired.segment import segment, shared_fraction

    arms = plan.arms(["s_trace", "s_trace-twin"])
    ws = _workspace(plan, checkpoints[1], arms)
    records = segment(ws, arms, 0, steps=2)
    first = {r["label"]: r["rows"] for r in records if r["k"] == 1}
    assert shared_fraction(first["s_trace"], first["s_trace-twin"]) == 1.0
    assert [r["k"] for r in records] == [1, 2, 1, 2]


def test_stratified_difference_by_hand():
    """Two checkpoints with differences [1, 3] and [2, 2, 5]: stratum means 2 and 3, mean 2.5; variances
    2/2 and 3/3, SE = sqrt(1 + 1) / 2 = 0.7071; df = 1 + 2 = 3."""
    from bench.paired.stats import Unit, stratified

    diffs = {Unit("r", 0, 0.0, 0): 1.0, Unit("r", 0, 0.0, 1): 3.0, Unit("r", 0, 1.0, 0): 2.0,
             Unit("r", 0, 1.0, 1): 2.0, Unit("r", 0, 1.0, 2): 5.0}  # fmt: skip
    s = stratified(diffs)
    assert s["mean"] == pytest.approx(2.5) and s["se"] == pytest.approx(0.5**0.5) and s["df"] == 3
    assert s["checkpoints"] == 2 and Unit("r", 0, 1.0, 2).checkpoint == ("r", 0, 1.0)
    assert s["lo"] == pytest.approx(2.5 - 3.182446 * 0.5**0.5, abs=1e-5)


def test_the_command_writes_records_and_report(spec, tmp_path):
    from bench.cli import main

    out = tmp_path / "out"
    argv = [str(spec), "--batches", "2", "--phases", "0,1", "--lrs", "2e-4", "--results_dir", str(tmp_path),
            "--out", str(out), "--target", "0"]  # fmt: skip
    assert main(["credit-probe", *argv]) == 0
    probe = json.loads((out / "updates.json").read_text())
    assert len(probe["updates"]) == 2 * 2 * 2  # checkpoints x batches x arms (twin pair, one rate)
    rep = json.loads((out / "report.json").read_text())
    (c,) = rep["comparisons"]
    assert (c["method"], c["control"], c["setting"], c["n"]) == ("s_trace", "s_trace-twin", "lr 0.0002", 4)
    assert (out / "per_update.png").stat().st_size > 0 and "s_trace-twin" in (out / "report.md").read_text()
    assert main(["credit-probe", *argv, "--report"]) == 0  # the analysis redone from the records
    assert json.loads((out / "report.json").read_text()) == rep


@pytest.mark.parametrize(
    "args, message",
    [
        (["--batches", "1"], "batches must be >= 2"),
        (["--reference", "nope"], "reference 'nope' is not a label of sweep 'probe-tiny'; valid: control, s_trace"),
        (["--phases", "0,2"], "phases must be fractions of the budget"),
        (["--jobs", "0"], "--jobs must be >= 1, got 0"),
        (["--model", "tiny-5m"], "unknown model 'tiny-5m': give a tiny size (tiny-500k, tiny-2m, tiny-8m)"),
        (["--report", "--out", "nowhere"], "nowhere/updates.json not found: run the probe first"),
    ],
)
def test_bad_options_are_one_line(spec, tmp_path, capsys, args, message):
    from bench.cli import main

    assert main(["credit-probe", str(spec), "--dry_run", "--results_dir", str(tmp_path), *args]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1


def test_allocation_by_hand():
    """Two checkpoints of one pair, 4 batches each, the control gaining 10 points per update; the method's
    differences +-1 at checkpoint A (sd 1.1547) and +-0.1 at B (sd 0.11547). For a half-width of 2% of the
    gain (h = 0.2) with t(0.975, 6) = 2.4469: scale = (t / (h C))^2 (s_A + s_B) = 37.42 x 1.2702 = 47.53,
    so A needs ceil(1.1547 x 47.53) = 55 batches and B ceil(0.11547 x 47.53) = 6; a cap of 40 holds A."""
    from bench.paired.stats import allocation

    updates = []
    for phase, step in ((0.0, 1.0), (1.0, 0.1)):
        for b, sign in enumerate((1, -1, 1, -1)):
            unit = {"reference": "r", "seed": 0, "phase": phase, "batch": b}
            updates += [{**unit, "label": "c", "lr": 1.0, "dj": 10.0},
                        {**unit, "label": "m", "lr": 1.0, "dj": 10.0 + sign * step}]  # fmt: skip
    probe = {"plan": {"pairs": [{"method": "m", "control": "c", "kind": "twin"}], "options": {"lrs": [1.0]},
                      "tuned": {}}, "updates": updates}  # fmt: skip
    assert allocation(probe, 0.02, 100) == {("r", 0, 0.0): 55, ("r", 0, 1.0): 6}
    assert allocation(probe, 0.02, 40) == {("r", 0, 0.0): 40, ("r", 0, 1.0): 6}
    assert allocation(probe, 0.10, 100) == {("r", 0, 0.0): 4, ("r", 0, 1.0): 4}  # met already: what it has


def test_the_sweep_prints_its_probe_cost(spec, tmp_path, capsys):
    """`creditbench sweep SPEC --dry_run --credit_probe`: the sweep's plan, then the probe's."""
    from bench.cli import main

    assert main(["sweep", str(spec), "--dry_run", "--credit_probe", "--results_dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "credit probe of probe-tiny: 1 pair, 2 reference RL steps, 480 paired updates" in out


def test_a_task_without_references_is_refused(tmp_path, capsys):
    """J needs one reference completion per problem: free-form arithmetic has none, and the probe says so
    before any work."""
    from bench.cli import main

    spec = tmp_path / "free.yaml"
    spec.write_text(yaml.safe_dump({**SPEC, "name": "free", "tasks": [{"name": "arithmetic",
                                    "options": {"template": "instruct"}}]}))  # fmt: skip
    assert main(["credit-probe", str(spec), "--dry_run", "--results_dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert "has no reference completion per problem (Task.reference)" in err and len(err.splitlines()) == 1
