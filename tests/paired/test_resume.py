"""An interrupted probe resumes (bench.paired.journal): what it kept is taken as it is, the rest is trained,
and the records are those of a probe never interrupted; a journal of another plan is refused in one line."""

from __future__ import annotations

import dataclasses
import json

import pytest
import yaml

from bench.errors import CreditBenchError
from tests.paired.test_paired import SPEC


class Interrupted(Exception):
    pass


@pytest.fixture(scope="module")
def plan(tmp_path_factory):
    from bench.paired.plan import ProbeOptions, probe_plan

    spec = tmp_path_factory.mktemp("resume") / "probe-tiny.yaml"
    spec.write_text(yaml.safe_dump(SPEC))
    options = ProbeOptions(batches=2, phases=(0.0, 1.0), lrs=(2e-4,), first=3)
    full = probe_plan(spec, options, tmp_path_factory.mktemp("results"))
    return dataclasses.replace(full, pairs=full.pairs[:1])


@pytest.fixture(scope="module")
def whole(plan, tmp_path_factory):
    from bench.paired.probe import run_probe

    folder = tmp_path_factory.mktemp("whole") / "partial"
    return run_probe(plan, log=lambda _: None, journal=folder), folder


def test_a_probe_interrupted_after_one_trajectory_resumes_to_the_same_records(plan, whole, tmp_path):
    """Stopped once the first of its three trajectories is kept, then run again: the second run trains only
    the other two, and every record is the uninterrupted probe's."""
    from bench.paired.probe import run_probe

    folder, lines = tmp_path / "partial", []

    def stop(line: str) -> None:
        lines.append(line)
        if len(list(folder.glob("trajectory-*.json"))) == 1:
            raise Interrupted

    with pytest.raises(Interrupted):
        run_probe(plan, log=stop, journal=folder)
    kept = json.loads(next(folder.glob("trajectory-*.json")).read_text())
    assert kept["reference"] == "s_trace-twin" and kept["seed"] in (0, 1, 2) and kept["spent_s"] > 0
    assert len(kept["checkpoints"]) == 2 and len(kept["updates"]) == 2 * 2 * 2  # checkpoints x batches x arms

    lines.clear()
    resumed = run_probe(plan, log=lines.append, journal=folder)
    assert "2 reference trajectories" in lines[0] and "(1 more kept from before)" in lines[0]
    full, _ = whole
    for key in ("plan", "checkpoints", "updates", "segments", "rounds", "fingerprint"):
        assert json.dumps(resumed[key]) == json.dumps(full[key]), key
    assert resumed["wall_s"] >= kept["spent_s"]


def test_the_journal_keeps_every_trajectory_with_its_plan(whole):
    """A probe run whole has kept its three trajectories beside the plan it ran (the command removes the folder
    once updates.json is written)."""
    full, folder = whole
    head = json.loads((folder / "plan.json").read_text())
    assert head["plan"]["options"]["first"] == 3 and head["fingerprint"] == full["fingerprint"]["numerics"]
    assert sorted(p.name for p in folder.glob("trajectory-*.json")) == [
        "trajectory-s_trace-twin-seed0.json",
        "trajectory-s_trace-twin-seed1.json",
        "trajectory-s_trace-twin-seed2.json",
    ]


def test_a_journal_of_another_plan_is_refused_in_one_line(plan, whole):
    """Another design (here, three batches) in the same folder: refused before any work, nothing touched."""
    from bench.paired.probe import run_probe

    _, folder = whole
    before = {p.name: p.read_bytes() for p in folder.iterdir()}
    other = dataclasses.replace(plan, options=dataclasses.replace(plan.options, batches=3))
    with pytest.raises(CreditBenchError) as e:
        run_probe(other, log=lambda _: None, journal=folder)
    assert "holds an interrupted probe of another plan" in str(e.value) and "move it away" in str(e.value)
    assert len(str(e.value).splitlines()) == 1
    assert {p.name: p.read_bytes() for p in folder.iterdir()} == before


def test_a_journal_moves_to_a_machine_whose_numerics_agree_and_not_to_another(plan, whole, tmp_path):
    """The journal is keyed on the numerics, not the machine: one made elsewhere (another CPU model; here in the
    older form that kept the whole fingerprint) resumes whole, with nothing trained; one of another CPU vendor
    (MKL dispatches on it) is refused in one line that names the field, nothing touched."""
    import shutil

    from bench.paired.probe import run_probe

    full, folder = whole
    moved = tmp_path / "partial"
    shutil.copytree(folder, moved)
    head = json.loads((moved / "plan.json").read_text())
    elsewhere = {"numerics": head["fingerprint"], "machine": {"cpu": "another CPU", "hardware_capability": "AVX2"}}
    (moved / "plan.json").write_text(json.dumps({**head, "fingerprint": elsewhere}))
    lines = []
    resumed = run_probe(plan, log=lines.append, journal=moved)
    assert "(3 more kept from before)" in lines[0] and json.dumps(resumed["updates"]) == json.dumps(full["updates"])

    vendor = {**head["fingerprint"], "cpu_vendor": "AnotherVendor"}
    (moved / "plan.json").write_text(json.dumps({**head, "fingerprint": vendor}))
    before = {p.name: p.read_bytes() for p in moved.iterdir()}
    with pytest.raises(CreditBenchError) as e:
        run_probe(plan, log=lambda _: None, journal=moved)
    said = str(e.value)
    assert "another numerics (cpu_vendor: AnotherVendor -> " in said and len(said.splitlines()) == 1
    assert {p.name: p.read_bytes() for p in moved.iterdir()} == before


def test_the_dry_run_says_what_an_interrupted_probe_kept_and_refuses_another_plans(tmp_path, capsys):
    """``credit-probe --dry_run`` on a folder whose journal is of its own plan says how many trajectories a
    run would resume from and costs only the rest; a journal of other options is refused in one line,
    before any work."""
    from bench.cli import credit_probe, main
    from bench.paired.journal import Journal
    from bench.paired.plan import describe
    from bench.paired.probe import _fingerprint

    spec = tmp_path / "probe-tiny.yaml"
    spec.write_text(yaml.safe_dump(SPEC))
    out = tmp_path / "probe"
    args = [str(spec), "--out", str(out), "--results_dir", str(tmp_path), "--first", "3"]
    plan = credit_probe.planned(args)[1]
    journal = Journal(out / "partial", describe(plan), _fingerprint(plan))
    journal.add("s_trace-twin", 0, [], [], [])  # a hand-made journal: one trajectory of three kept
    assert main(["credit-probe", *args, "--dry_run"]) == 0
    said = capsys.readouterr().out
    assert f"resuming: 1 reference trajectories kept by an interrupted run ({out / 'partial'})" in said
    assert "first round 4 reference RL steps" in said  # the 2 trajectories left of 3, 2 RL steps each
    assert not (out / "updates.json").exists()
    assert main(["credit-probe", *args[:-1], "4", "--dry_run"]) == 2  # four in the first round: another plan
    err = capsys.readouterr().err.strip()
    assert "holds an interrupted probe of another plan" in err and len(err.splitlines()) == 1


def test_the_cost_left_is_the_trajectories_not_kept(plan):
    """Each kept trajectory takes its share of the first round's work off the cost (and of the cap's)."""
    from bench.paired.probe import cost

    whole, less = cost(plan), cost(plan, kept=1)
    assert whole["update"] == 3 * 2 * 2 * 2 and less["update"] == 2 * 2 * 2 * 2  # trajectories x phases x batches x arm
    assert less["core_s"] == pytest.approx(whole["core_s"] * 2 / 3, rel=0.01)
    assert less["cap_update"] == whole["cap_update"] * 11 // 12 and cost(plan, kept=99)["core_s"] == 0


def test_a_folder_without_a_journal_resumes_nothing(plan, tmp_path):
    from bench.paired.probe import journaled

    assert journaled(plan, tmp_path) == 0 and journaled(plan, tmp_path / "absent") == 0
    assert not (tmp_path / "absent").exists()  # nothing written


def test_a_method_s_own_continuations_are_costed(plan):
    """VinePPO samples K continuations from every step's state in ``augment``: the dry run charges them at the
    oracle's pace, once for the method and its placebo (they augment alike), nothing for the twin's V_0."""
    from bench.paired.probe import PACE_S, cost

    def vine(cfg, options):
        return dataclasses.replace(cfg, method=dataclasses.replace(cfg.method, name="vineppo", options=options))

    twin = {"segmentation": "whole"}
    labels = {k: vine(c, twin if k.endswith("twin") else {"mc_rollouts": 3}) for k, c in plan.labels.items()}
    whole, vineppo = cost(plan), cost(dataclasses.replace(plan, labels=labels))
    assert whole["oracle_rollout"] == 0 and vineppo["oracle_rollout"] == 3 * 2 * 2 * 3  # K x batches x phases x n
    assert vineppo["update"] == whole["update"] and vineppo["cap_oracle_rollout"] == 3 * 2 * 2 * 12
    scale = whole["core_s"] / sum(PACE_S[k] * whole[k] for k in PACE_S)  # the model's size against tiny-500k
    assert scale > 0
    assert vineppo["core_s"] - whole["core_s"] == pytest.approx(36 * PACE_S["oracle_rollout"] * scale)


def under_arca(plan):
    """``plan`` with its method ARCA and its twin ARCA's (uniform weights), both under a LoRA adapter."""

    def arca(cfg, options):
        model = dataclasses.replace(cfg.model, lora=dataclasses.replace(cfg.model.lora, rank=16))
        method = dataclasses.replace(cfg.method, name="arca", options=options)
        return dataclasses.replace(cfg, model=model, method=method)

    labels = {k: arca(c, {"signal": "uniform"} if k.endswith("twin") else {}) for k, c in plan.labels.items()}
    return dataclasses.replace(plan, labels=labels)


def test_an_update_is_charged_at_its_label_s_pace(plan):
    """ARCA's update costs 1.55x GRPO's under the same LoRA adapter, and that adapter 1.17x the full model
    (results/benchmarks/methods_update.md): the dry run charges each arm's updates and the reference's RL
    steps at their label's pace; a label without either at 1."""
    from bench.paired.probe import LORA_PACE, PACE_S, cost, label_pace

    adapted = under_arca(plan)
    assert LORA_PACE == 1.17 and label_pace(plan, "s_trace") == label_pace(plan, "s_trace-twin") == 1.0
    assert label_pace(adapted, "s_trace") == pytest.approx(1.55 * 1.17) and label_pace(adapted, "s_trace-twin") == 1.17
    plain, paced = cost(plan), cost(adapted)
    assert paced["update"] == plain["update"] == 24 and paced["trajectory_step"] == plain["trajectory_step"] == 6
    scale = plain["core_s"] / sum(PACE_S[k] * plain[k] for k in PACE_S)  # the model's size against tiny-500k
    by_hand = 0.75 * 6 * 1.17 + 0.45 * 12 * (1.55 * 1.17 + 1.17)  # the twin's 3 x 2 steps; 12 updates an arm
    assert paced["core_s"] == pytest.approx(by_hand * scale)


def _library_levels() -> tuple[int, int]:
    import logging

    import lightning.pytorch  # noqa: F401  (sets its loggers to INFO on import)

    return tuple(
        logging.getLogger(n).getEffectiveLevel() for n in ("transformers", "lightning.pytorch.utilities.rank_zero")
    )


def test_the_probe_s_worker_processes_are_quiet_as_the_command_line():
    """Each spawned worker silences the libraries' INFO logging (Lightning's tips, ``fit`` stopped at
    max_steps) as the command line does, so a probe's log holds what the probe says."""
    import logging

    from bench.paired.probe import _pool

    with _pool(2) as pool:
        assert pool.submit(_library_levels).result() == (logging.WARNING, logging.WARNING)
