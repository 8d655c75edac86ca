"""Paired updates (bench.paired): the pairing holds (every arm trains on the same batch, a broken pairing
is refused), nulls are exactly 0, a credit method and its twin do differ, segments start paired, and the
command writes its records and report."""

from __future__ import annotations

import dataclasses
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


@pytest.mark.parametrize("phase", [0, 1])
def test_arms_that_share_their_work_give_the_records_they_give_alone(plan, checkpoints, phase, monkeypatch):
    """The arms share their scoring passes and, among one label's rates, the first minibatch's gradient:
    the records (J after, the alignment, the blame shares, the losses) are those of every arm computing
    its own, to the bit -- from the base (a fresh AdamW) and from a checkpoint with AdamW state -- and
    one label's second rate does compute fewer minibatch gradients."""
    from bench.engine import step
    from bench.paired.plan import Arm
    from bench.paired.update import paired_batch

    labels = ["s_trace", "s_trace-twin", "s_trace-placebo"]
    rate = lambda cfg, lr: dataclasses.replace(cfg, rl=dataclasses.replace(cfg.rl, lr=lr))  # noqa: E731
    arms = [Arm(a.label, lr, rate(a.cfg, lr)) for a in plan.arms(labels) for lr in (1e-4, 2e-4)]
    ws = _workspace(plan, checkpoints[phase], arms)
    gradient, calls = step._gradient, []
    monkeypatch.setattr(step, "_gradient", lambda *a, **k: calls.append(1) or gradient(*a, **k))
    alone = paired_batch(ws, arms, 0, plan.pairs, share=False)
    n = len(calls)
    shared = paired_batch(ws, arms, 0, plan.pairs, share=True)
    assert json.dumps(shared) == json.dumps(alone)
    assert len(calls) - n == n - len(labels)  # one first gradient a label is loaded, not computed
    assert len({r["dj"] for r in alone}) == len(arms) and alone[0]["blame_share"] is not None


def test_a_broken_pairing_is_refused(plan, checkpoints, monkeypatch):
    """If one arm draws another batch (here: another sampling seed), the probe stops rather than report a
    difference that carries the batches' noise."""
    from bench.paired import update

    arms = plan.arms(["s_trace", "s_trace-twin"])
    ws = _workspace(plan, checkpoints[0], arms)
    real, calls = update.draw, []

    def other_batch_for_the_twin(ws_, arm, sampler, seed, augmented=None):
        calls.append(arm.label)
        if arm.label == "s_trace-twin":
            sampler = ws_.sampler(ws_.policy, arm.cfg, seed + 1, shared=True)
        return real(ws_, arm, sampler, seed, augmented)

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


def test_another_probe_seed_draws_other_batches(plan, checkpoints):
    """A validation is new data: its own probe seed draws other batches from the same checkpoint (the
    nulls above stay exactly 0 under any seed)."""
    from bench.paired.update import Workspace, paired_batch

    arms = plan.arms(["s_trace", "s_trace-twin"])
    prints = []
    for seed in (0, 1):
        ws = Workspace.build(plan.labels["s_trace-twin"], checkpoints[1], arms, 16, probe_seed=seed)
        prints.append({r["fingerprint"] for r in paired_batch(ws, arms, 0, plan.pairs[:1])})
    assert len(prints[0]) == len(prints[1]) == 1 and prints[0] != prints[1]


def test_the_trajectory_values_by_hand():
    """One pair's records on two trajectories (seeds 5 and 3, added in that order) of two checkpoints:
    seed 5: phase 0 [1, 3] -> 2, phase 1 [4] -> 4: 3; seed 3: [0, 2] -> 1 and [2, 4] -> 3: 2. The values
    come in the rounds' order, and the two-level summary has 1 df (two trajectories)."""
    from bench.paired.stats import Unit, nested, per_trajectory

    values = {Unit("r", 5, 0.0, 0): 1.0, Unit("r", 5, 0.0, 1): 3.0, Unit("r", 5, 1.0, 0): 4.0,
              Unit("r", 3, 0.0, 0): 0.0, Unit("r", 3, 0.0, 1): 2.0, Unit("r", 3, 1.0, 0): 2.0,
              Unit("r", 3, 1.0, 1): 4.0}  # fmt: skip
    assert per_trajectory(values, [5, 3]) == {5: 3.0, 3: 2.0}
    s = nested(values)
    assert (s.mean, s.df, s.n) == (2.5, 1, 2) and s.se == pytest.approx(0.5)


def test_the_command_writes_records_and_report(spec, tmp_path):
    from bench.cli import main

    out = tmp_path / "out"
    argv = [str(spec), "--batches", "2", "--phases", "0,1", "--lrs", "2e-4", "--results_dir", str(tmp_path),
            "--out", str(out), "--first", "3", "--step", "1", "--cap", "4"]  # fmt: skip
    assert main(["credit-probe", *argv]) == 0
    probe = json.loads((out / "updates.json").read_text())
    trajectories = len(probe["checkpoints"]) // 2
    assert probe["rounds"][0] == {"s_trace-twin": 3} and trajectories in (3, 4)
    assert len(probe["updates"]) == trajectories * 2 * 2 * 2  # trajectories x checkpoints x batches x arms
    rep = json.loads((out / "report.json").read_text())
    (c,) = rep["comparisons"]
    assert (c["method"], c["control"], c["setting"]) == ("s_trace", "s_trace-twin", "lr 0.0002")
    assert c["n"] == len(c["trajectories"]["diff"]) in (3, 4) and c["df"] == c["n"] - 1
    assert c["batches"] == 4 * c["n"] and c["lo"] <= c["mean"] <= c["hi"]  # 2 checkpoints x 2 batches each
    assert c["mean"] == pytest.approx(sum(c["trajectories"]["diff"]) / c["n"])
    assert c["verdict"] in ("better", "worse", "inconclusive at the cap") or c["verdict"].startswith("equivalent")
    assert (out / "per_update.png").stat().st_size > 0 and "s_trace-twin" in (out / "report.md").read_text()
    assert main(["credit-probe", *argv, "--report"]) == 0  # the analysis redone from the records
    assert json.loads((out / "report.json").read_text()) == rep


@pytest.mark.parametrize(
    "args, message",
    [
        (["--batches", "0"], "batches must be >= 1"),
        (["--first", "2"], "first must be >= 3 trajectories"),
        (["--cap", "2"], "cap must be >= first (4), got 2"),
        (["--margin", "0"], "margin must be > 0 (a fraction of the control's gain), got 0.0"),
        (["--spending", "nope"], "spending must be one of obf, pocock, got 'nope'"),
        (["--cap", "20"], "reference_seeds must list at least cap = 20 distinct seeds, got 12"),
        (["--reference", "nope"], "reference 'nope' is not a label of sweep 'probe-tiny'; valid: control, s_trace"),
        (["--phases", "0,2"], "phases must be fractions of the budget"),
        (["--jobs", "0"], "--jobs must be >= 1, got 0"),
        (["--model", "tiny-5m"], "unknown model 'tiny-5m': give a tiny size (tiny-500k, tiny-2m, tiny-8m)"),
        (["--until", "done"], "until must be one of decided, resolved, got 'done'"),
        (["--report", "--out", "nowhere"], "nowhere/updates.json not found: run the probe first"),
    ],
)
def test_bad_options_are_one_line(spec, tmp_path, capsys, args, message):
    from bench.cli import main

    assert main(["credit-probe", str(spec), "--dry_run", "--results_dir", str(tmp_path), *args]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1


def _records(effects: dict[float, list[float]], gain: float = 10.0, until: str | None = None) -> dict:
    """A probe's records: one pair ("m" vs its twin "c") at each rate, one trajectory per listed effect
    (seeds 0, 1, ...), one checkpoint, two batches whose differences are effect -+ 0.1; the control gains
    ``gain`` points per update (``until``: the probe's option, absent in records made before it)."""
    updates = []
    for lr, per_seed in effects.items():
        for seed, e in enumerate(per_seed):
            for b, noise in enumerate((0.1, -0.1)):
                unit = {"reference": "c", "seed": seed, "phase": 1.0, "batch": b, "lr": lr}
                updates += [{**unit, "label": "c", "dj": gain}, {**unit, "label": "m", "dj": gain + e + noise}]
    options = {"lrs": list(effects), "reference_seeds": list(range(12)), "first": 3, "step": 2, "cap": 7,
               "spending": "obf", "alpha": 0.05, "margin": 0.10} | ({"until": until} if until else {})  # fmt: skip
    plan = {"pairs": [{"method": "m", "control": "c", "kind": "twin"}], "options": options, "tuned": {},
            "references": {"m": "c"}}  # fmt: skip
    return {"plan": plan, "updates": updates}


def test_trajectories_are_added_while_a_comparison_is_open():
    """At 1e-4 the effect (+5 points on a gain of 10, sd 0.1 across trajectories) is decided better at
    the first look; at 2e-4 the trajectories disagree (+1, -1, +2): still open, so the pair's reference
    needs the next look's 5 trajectories. With that rate decided too, it needs no more."""
    from bench.report.per_update import comparisons, needs

    open_ = _records({1e-4: [5.0, 5.1, 4.9], 2e-4: [1.0, -1.0, 2.0]})
    assert needs(open_) == {"c": 5}
    rows = {r["setting"]: r for r in comparisons(open_)}
    assert rows["lr 0.0001"]["verdict"] == "better" and rows["lr 0.0001"]["look"] == 1
    assert rows["lr 0.0002"]["verdict"] == "open" and rows["lr 0.0002"]["relative"]["lo"] < 0  # not resolved
    assert rows["lr 0.0001"]["relative"]["lo"] < 0.5 < rows["lr 0.0001"]["relative"]["hi"]
    done = _records({1e-4: [5.0, 5.1, 4.9], 2e-4: [0.01, -0.01, 0.0]})
    assert needs(done) == {"c": 3}
    assert {r["verdict"] for r in comparisons(done)} == {"better", "equivalent (±10% of the control's)"}


@pytest.mark.parametrize(
    "gain, effects, half",
    [
        # the control gains 1 point (< 3): the target is +-0.3 points. Three trajectories 0.215, 0.2, 0.185:
        # SE 0.015 / sqrt 3 = 0.00866, the first look's repeated critical value 28.43 (O'Brien-Fleming over
        # looks 3, 5, 7 at alpha 0.05, t with 2 df): half-width 0.246 <= 0.3; t = 23.1 crosses no boundary
        (1.0, [0.215, 0.2, 0.185], 0.2462),
        # the control gains 10 points: the target is 10% of it, +-1 point. 0.96, 0.9, 0.84: SE 0.0346,
        # half-width 0.985 <= 1; t = 26.0 < 28.43, and 0.9 is too near the margin (1) to be shown inside it
        (10.0, [0.96, 0.9, 0.84], 0.9848),
    ],
)
def test_a_probe_until_resolved_stops_a_pair_whose_interval_is_within_the_target(gain, effects, half):
    """``until: resolved``: an undecided comparison whose repeated interval is within the credit table's
    target takes no more trajectories and says so; ``until: decided`` (and a record made before the option)
    asks for the next look's."""
    from bench.report.credit_table import resolved
    from bench.report.per_update import comparisons, needs, within_target

    for until in (None, "decided"):
        assert needs(_records({1e-4: effects}, gain, until)) == {"c": 5}
        assert comparisons(_records({1e-4: effects}, gain, until))[0]["verdict"] == "open"
    stopped = _records({1e-4: effects}, gain, "resolved")
    assert needs(stopped) == {"c": 3}
    (row,) = comparisons(stopped)
    assert row["verdict"] == "undecided (resolved)" and row["why"].startswith("stopped at 3 trajectories")
    assert abs((row["hi"] - row["lo"]) / 2 - half) < 1e-3 and within_target(row["lo"], row["hi"], gain)
    assert row["lo"] < 0 < row["hi"] and resolved(row)  # the table's cell reads it by the same rule
    wider = [0.2 + 1.5 * (e - 0.2) for e in effects] if gain == 1.0 else [0.9 + 1.5 * (e - 0.9) for e in effects]
    assert needs(_records({1e-4: wider}, gain, "resolved")) == {"c": 5}  # 1.5x the half-width: beyond it


def test_the_sweep_prints_its_probe_cost(spec, tmp_path, capsys):
    """`creditbench sweep SPEC --dry_run --credit_probe`: the sweep's plan, then the probe's."""
    from bench.cli import main

    assert main(["sweep", str(spec), "--dry_run", "--credit_probe", "--results_dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "credit probe of probe-tiny: 1 pair, first round 8 reference RL steps, 384 paired updates" in out
    assert "at the cap (12 trajectories per pair) 1152 paired updates" in out


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


@pytest.mark.slow
def test_worker_processes_give_the_records_of_one_process(plan):
    """Two spawned workers, trajectories and checkpoints' work interleaved as each trajectory is trained,
    give the records that one process gives: a probe's numbers do not depend on ``--jobs``."""
    from bench.paired.probe import run_probe

    small = dataclasses.replace(plan, pairs=plan.pairs[:1],
                                options=dataclasses.replace(plan.options, batches=3, phases=(0.5, 1.0)))  # fmt: skip
    one, two = (run_probe(small, jobs=jobs, log=lambda _: None) for jobs in (1, 2))
    assert one["updates"] and json.dumps(one["updates"]) == json.dumps(two["updates"])
    assert one["checkpoints"] == two["checkpoints"] and (one["jobs"], two["jobs"]) == (1, 2)
