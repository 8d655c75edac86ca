"""bench/studies/probe_design.py: its committed report rebuilt from its json, on the probe's own schedule and
within the error it promises; the study runs on a synthetic probe report and writes a report rebuilt from
its json; a certain effect is always found and its group stops at the first look, while a group runs on as
long as one of its comparisons is open; bad input is refused in one line with nothing written."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from bench.report.sequential import analyse
from bench.stats.verdict import Outcome
from bench.studies import probe_design as pd
from bench.sweep.schedule import SequentialSpec

ROOT = Path(__file__).resolve().parents[2]
SCHEDULE = {"first": 4, "step": 2, "cap": 8, "spending": "obf", "alpha": 0.05, "margin": 0.1}


def test_the_committed_report_is_rebuilt_from_its_json_and_keeps_the_error_at_alpha():
    data = json.loads((ROOT / "results" / "benchmarks" / "probe_design.json").read_text())
    assert pd.markdown(data) == (ROOT / "results" / "benchmarks" / "probe_design.md").read_text()
    se = math.sqrt(data["alpha"] * (1 - data["alpha"]) / data["sims"])
    assert data["results"]["null"]["family_error"] <= data["alpha"] + 2 * se
    probe = json.loads((ROOT / data["probe"] / "report.json").read_text())["options"]
    assert {k: probe[k] for k in ("first", "step", "cap", "spending")} == {
        k: data["schedule"][k] for k in ("first", "step", "cap", "spending")
    }  # the probe's own schedule


def _row(method: str, control: str, lr: float, method_gain: list[float], control_gain: list[float]) -> dict:
    """A report.json row with its per-trajectory values: each arm's gain and their difference."""
    diff = [m - c for m, c in zip(method_gain, control_gain)]
    return {"setting": f"lr {lr:g}", "comparison": f"{method} vs {control} @ {lr:g}", "method": method,
            "control": control, "lr_method": lr, "verdict": "inconclusive at the cap", "n": len(diff),
            "relative_half_width": 0.2,
            "trajectories": {"seeds": list(range(len(diff))), "diff": diff, "control": control_gain,
                             "method": method_gain}}  # fmt: skip


def _report(rows: list[dict]) -> dict:
    return {"options": {**SCHEDULE, "reference": "control"}, "comparisons": rows, "wall_s": 600.0, "jobs": 2}


def _gains(seed: int, mean: float = 2.0, n: int = 8) -> list[float]:
    """One arm's gain on each of ``n`` trajectories."""
    return np.random.default_rng(seed).normal(mean, 0.5, n).tolist()


def test_the_study_runs_on_a_synthetic_report_and_its_markdown_is_rebuilt_from_its_json(tmp_path):
    """Method a against its twin at two rates and its placebo, b against its twin: two trajectory groups
    (each method's), the tuned row repeating a name counted once."""
    a = _gains(0, 2.1)
    rows = [_row("a", "a-twin", 1e-4, a, _gains(1)), _row("a", "a-placebo", 1e-4, a, _gains(2)),
            _row("a", "a-twin", 2e-4, _gains(3, 2.1), _gains(4)),
            _row("b", "b-twin", 1e-4, _gains(5), _gains(6))]  # fmt: skip
    rows.append({**rows[0], "setting": "tuned"})
    (tmp_path / "probe").mkdir()
    (tmp_path / "probe" / "report.json").write_text(json.dumps(_report(rows)))
    pd.main(["--probe", str(tmp_path / "probe"), "--sims", "100", "--out", str(tmp_path / "out")])
    data = json.loads((tmp_path / "out" / "probe_design.json").read_text())
    assert pd.markdown(data) == (tmp_path / "out" / "probe_design.md").read_text()
    assert [g["names"] for g in data["groups"]] == [[r["comparison"] for r in rows[:3]], [rows[3]["comparison"]]]
    assert data["groups"][0]["ridged"]  # a's two pairs share its arm: d_1 + g_1 = d_2 + g_2
    assert set(data["results"]) == {"null", "half", "observed"}
    null = data["results"]["null"]
    assert 0 <= null["family_error"] <= 1 and null["family_error_se"] >= 0
    for r in data["results"].values():
        assert set(r["trajectories"]) == {"a", "b"} and all(4 <= n <= 8 for n in r["trajectories"].values())
        for c in r["comparisons"].values():
            assert c["better"] + c["worse"] + c["equivalent"] + c["at_cap"] == pytest.approx(1)
            assert 0 <= c["coverage"] <= 1


def test_a_certain_effect_is_always_found_and_only_an_open_comparison_keeps_its_group_running():
    """Group a: a difference of +5 with no spread (t infinite at the first look) beside a noisy null, so a
    runs on while the null is open; group b: the certain effect alone, which stops at the first look."""
    rows = [_row("a", "a-twin", 1e-4, [6.0] * 8, [1.0] * 8), _row("a", "a-placebo", 1e-4, _gains(0), _gains(1)),
            _row("b", "b-twin", 1e-4, [6.0] * 8, [1.0] * 8)]  # fmt: skip
    family = pd.groups(_report(rows))
    names = [r["comparison"] for r in rows]
    r = pd.simulate(family, names, SequentialSpec(4, 2, 8, "obf"), 0.05, 0.1, 1.0, sims=20, seed=0)
    for n in (names[0], names[2]):
        assert r["comparisons"][n]["power"] == 1 and r["comparisons"][n]["trajectories"] == 4
        assert r["comparisons"][n]["coverage"] == 1  # no spread: the interval is the point, the truth
    assert r["trajectories"]["b"] == 4 and r["trajectories"]["a"] > 4
    assert r["family_error"] is None  # no true null in the observed scenario


def test_one_analysis_of_every_trajectory_decides_as_the_rounds_do():
    """The rounds as the probe runs them (per_update.needs: a group gets the next look's trajectories while
    one of its comparisons is open) end with the decisions of one analysis of all ``cap`` draws."""
    a = _gains(0, 3.0)  # effects that stop a group at look 1, 2 or 3 (or never) in these draws
    rows = [_row("a", "a-twin", 1e-4, a, _gains(1)), _row("a", "a-placebo", 1e-4, a, _gains(2)),
            _row("b", "b-twin", 1e-4, _gains(3, 2.7), _gains(4))]  # fmt: skip
    family, names = pd.groups(_report(rows)), [r["comparison"] for r in rows]
    schedule = SequentialSpec(4, 2, 8, "obf")
    rng = np.random.default_rng(0)
    for _ in range(30):
        diffs, gains = pd.draw(family, rng, 1.0, schedule.cap)
        whole = analyse(diffs, schedule, 0.05, 0.1, scale=gains).decisions
        have = {g.reference: schedule.first for g in family}
        while True:
            cut = {n: have[g.reference] for g in family for n in g.names}
            res = analyse({n: diffs[n][: cut[n]] for n in names}, schedule, 0.05, 0.1,
                          scale={n: gains[n][: cut[n]] for n in names})  # fmt: skip
            need = {d.name: schedule.next_look(d.seeds) if d.verdict.outcome is Outcome.OPEN else d.seeds
                    for d in res.decisions}  # fmt: skip
            want = {g.reference: max(have[g.reference], *(need[n] for n in g.names)) for g in family}
            if want == have:
                break
            have = want
        assert [(str(d.verdict), d.seeds, d.lo) for d in res.decisions] == [
            (str(d.verdict), d.seeds, d.lo) for d in whole
        ]


@pytest.mark.parametrize(
    "report, message",
    [
        (None, "no probe report at"),
        ({"options": {"first": 4}, "comparisons": []}, "predates trajectories in rounds"),
    ],
)
def test_bad_input_is_one_line_and_writes_nothing(tmp_path, capsys, report, message):
    probe = tmp_path / "probe"
    if report is not None:
        probe.mkdir()
        (probe / "report.json").write_text(json.dumps(report))
    with pytest.raises(SystemExit) as exit_:
        pd.run_script(lambda: pd.main(["--probe", str(probe), "--out", str(tmp_path / "out")]), "probe_design")
    assert exit_.value.code == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1
    assert not Path(tmp_path / "out").exists()
