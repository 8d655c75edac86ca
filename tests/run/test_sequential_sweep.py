"""A sequential sweep (``sequential`` in the spec): its spec checks, the rounds (which labels get
which seeds, decided comparisons none more, the baseline only the first round's), and (slow) a real
one end to end, resumed to the same runs."""

from __future__ import annotations

import dataclasses
import json
import subprocess
from pathlib import Path

import numpy as np
import pytest
import yaml
from tiny_sweep import SPEC

from bench.cli.sweep import rounds
from bench.errors import CreditBenchError
from bench.report import sequential as seq
from bench.sweep.schedule import SequentialSpec
from bench.sweep.sweep import load_spec

SEQ = {"first": 3, "step": 1, "cap": 5}


def write(tmp_path: Path, **changes) -> Path:
    spec = {**SPEC, "name": "seq", "methods": ["grpo", "entropy_top", "grpo_lambda"], "credit_controls": ["twin"],
            "seeds": [0, 1, 2, 3, 4], "sequential": SEQ, **changes}  # fmt: skip
    path = tmp_path / "seq.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


@pytest.mark.parametrize(
    "change, message",
    [
        ({"credit_controls": []}, "sequential needs credit comparisons to decide: give credit_controls"),
        ({"seeds": [0, 1, 2, 3]}, "sequential.cap 5 needs at least as many seeds; seeds lists 4"),
        ({"sequential": {**SEQ, "first": 2}}, "sequential.first must be >= 3 seeds"),
        ({"sequential": {**SEQ, "spending": "linear"}}, "sequential.spending must be one of obf, pocock"),
        ({"sequential": {**SEQ, "cap": 2}}, "sequential.cap must be >= sequential.first"),
        ({"sequential": {**SEQ, "frist": 3}}, "unknown sequential key 'frist'"),
    ],
)
def test_a_bad_sequential_spec_is_one_line(tmp_path, change, message):
    with pytest.raises(CreditBenchError, match=message) as e:
        load_spec(write(tmp_path, **change))
    assert "\n" not in str(e.value)


def test_rounds_give_seeds_only_to_the_undecided_comparisons(tmp_path):
    """The round loop with the analysis the report makes, on per-seed differences drawn in advance:
    entropy_top's is large (decided at the first look), grpo_lambda's none (runs to the cap)."""
    sweep = load_spec(write(tmp_path))
    assert sweep.spec.analysis.sequential is sweep.spec.sequential == SequentialSpec(**SEQ, spending="obf")
    rng = np.random.default_rng(0)
    truth = {"entropy_top": 0.5 + rng.normal(0, 0.01, 5), "grpo_lambda": rng.normal(0, 0.05, 5)}
    ran: list[set[tuple[str, int]]] = []

    def run(subset):
        runs = {(r.label, r.cfg.seed) for r in subset.runs}
        ran.append(runs)
        diffs = {
            f"{m} vs {m}-twin": [truth[m][s] for s in sorted({s for lab, s in runs if lab == f"{m}-twin"})]
            for m in truth
        }
        res = seq.analyse(diffs, SequentialSpec(**SEQ), 0.05, 0.03)
        pairs = {name: {"method": name.split(" vs ")[0], "control": name.split(" vs ")[1]} for name in diffs}
        needs = seq.per_label(seq.seeds_to_run(res), pairs)
        return {"analysis": {"sequential": {"analysis": res.to_dict(), "needs": needs}}}

    logs: list[str] = []
    subset, report = rounds(sweep, run, log=logs.append)
    decisions = {d["name"]: d for d in report["analysis"]["sequential"]["analysis"]["decisions"]}
    assert decisions["entropy_top vs entropy_top-twin"]["verdict"] == "better"
    assert decisions["entropy_top vs entropy_top-twin"]["seeds"] == 3
    assert decisions["grpo_lambda vs grpo_lambda-twin"]["verdict"] in ("inconclusive at the cap", "equivalent (±0.03)")
    seeds = {lab: sorted(s for lab_, s in ran[-1] if lab_ == lab) for lab in sweep.labels}
    assert seeds["grpo"] == [0, 1, 2] and seeds["entropy_top"] == [0, 1, 2] and seeds["entropy_top-twin"] == [0, 1, 2]
    assert (
        seeds["grpo_lambda"]
        == seeds["grpo_lambda-twin"]
        == list(range(decisions["grpo_lambda vs grpo_lambda-twin"]["seeds"]))
    )
    assert [len(r) for r in ran] == sorted(len(r) for r in ran)  # each round's runs include the last round's
    assert "every credit comparison decided or at the cap" in logs[-1]
    assert subset.runs == [r for r in sweep.runs if (r.label, r.cfg.seed) in ran[-1]]


@pytest.mark.slow  # about 15 tiny runs (a minute): CI runs it (-m slow)
def test_a_sequential_sweep_runs_in_rounds_and_resumes_to_the_same_runs(tmp_path, warm_cache):
    import os
    import sys

    root = tmp_path / "out"
    root.mkdir()
    env = {**os.environ, "CREDITBENCH_CACHE": warm_cache, "MLFLOW_TRACKING_URI": f"sqlite:///{root / 'm.db'}"}
    spec = write(tmp_path, methods=["grpo", "entropy_top"], budget={"samples": 64})
    cmd = [sys.executable, "-m", "bench.cli", "sweep", str(spec), "--results-dir", str(root / "results")]
    first = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)
    assert first.returncode == 0, first.stderr[-2000:]
    report = json.loads((root / "results" / "seq" / "report.json").read_text())
    family = report["analysis"]["sequential"]
    (decision,) = family["analysis"]["decisions"]
    assert decision["verdict"] != "open" and decision["seeds"] in (3, 4, 5)
    runs = sorted(p.stem for p in (root / "results" / "seq" / "runs").glob("*.json"))
    by_label = {lab: sum(r.startswith(f"{lab}-arithmetic") for r in runs) for lab in ("grpo", "entropy_top-twin")}
    assert by_label["grpo"] == 3 and by_label["entropy_top-twin"] == decision["seeds"]
    assert "## Credit assignment, decided in rounds" in (root / "results" / "seq" / "summary.md").read_text()
    again = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)
    assert again.returncode == 0 and " 0 to run" in again.stdout
    assert sorted(p.stem for p in (root / "results" / "seq" / "runs").glob("*.json")) == runs
    assert dataclasses.is_dataclass(SequentialSpec(3, 1, 5))


def test_the_dry_run_prints_the_expected_cost_of_the_rounds(tmp_path):
    """Without a pilot the prior's paired SD is simulated: the expected runs lie between the first
    round's and the cap's, and a difference on the margin needs no more seeds than none at all."""
    from bench.report.design import sequential_lines

    spec = write(tmp_path, analysis={"margin": 0.03, "sd_train": 0.02, "sd_item": 0.4})
    lines = sequential_lines(load_spec(spec), str(tmp_path), jobs=2, sims=100)
    assert lines[0].startswith("sequential: 3 seeds first, 1 more per round for the undecided, at most 5")
    assert "sd from the prior" in lines[0]
    runs = [float(line.split(": ")[1].split(" runs")[0]) for line in lines[1:3]]
    first, cap = 5 * 3, 4 * 5 + 3  # 5 labels (grpo, 2 methods, 2 twins) at 3 seeds; the 4 of the family at 5
    assert all(first <= r <= cap for r in runs)
    assert lines[3] == f"  at most {cap} runs (every comparison to the cap)"
