"""The credit table (bench.report.credit_table, ``creditbench table --credit``): its definition checked in one
line, each cell read from a probe's report at the pair's tuned rate (else its lowest), the rule that says
a cell is resolved, the end-to-end decision, and the judges still to run; hand-made reports, hand-worked
figures. The committed table is the one its reports give."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.errors import CreditBenchError
from bench.report import credit_table as ct
from bench.report import credit_todo, oracle

TWIN = {"method": "m", "control": "m-twin", "n": 8, "mde": 0.3}
PROBE = {
    "comparisons": [
        {**TWIN, "setting": "lr 0.0001", "lr_method": 1e-4, "mean": 0.5, "lo": 0.1, "hi": 0.9, "verdict": "better",
         "gain_control": 2.5, "relative": {"mean": 0.2, "lo": 0.04, "hi": 0.36}},
        {**TWIN, "setting": "tuned", "lr_method": 2e-4, "mean": 0.1, "lo": -0.3, "hi": 0.5,
         "verdict": "inconclusive", "gain_control": 4.0, "relative": {"mean": 0.025, "lo": -0.075, "hi": 0.125}},
        {**TWIN, "setting": "lr 0.0002", "lr_method": 2e-4, "mean": 0.1, "lo": -0.3, "hi": 0.5,
         "verdict": "inconclusive", "gain_control": 4.0},
        {"method": "m", "control": "m-placebo", "setting": "tuned", "lr_method": 2e-4, "mean": 9.0, "lo": 8.0,
         "hi": 10.0, "verdict": "better"},
    ],
    "readings": [{"method": "m", "control": "m-twin", "rates": "better at 0.0001; inconclusive at 0.0002"}],
}  # fmt: skip
SWEEP = {"analysis": {"sequential": {"analysis": {"decisions": [
    {"name": "m vs m-twin (chain, tiny-500k)", "verdict": "better", "seeds": 18, "diff": 0.039, "lo": 0.001,
     "hi": 0.076}]}}}}  # fmt: skip


def _definition(tmp_path: Path, rows: str, sizes: str = "[tiny-500k, tiny-2m]") -> Path:
    path = tmp_path / "credit" / "table.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"task: chain\nsizes: {sizes}\nrows:\n{rows}")
    return path


def _write(path: Path, data: dict) -> None:
    path.mkdir(parents=True, exist_ok=True)
    (path / "report.json").write_text(json.dumps(data))


def test_the_rule_for_a_resolved_cell():
    # a verdict resolves it whatever the width
    assert ct.resolved({"verdict": "worse", "lo": -5.0, "hi": -0.1, "gain_control": 4.0})
    assert ct.resolved({"verdict": "equivalent (±10% of the control's)", "lo": -9.0, "hi": 9.0, "gain_control": 4.0})
    # inconclusive: half-width 0.4 against 10% of a gain of 4 points (0.4): resolved; 0.41 is not
    assert ct.resolved({"verdict": "inconclusive", "lo": -0.3, "hi": 0.5, "gain_control": 4.0})
    assert not ct.resolved({"verdict": "inconclusive", "lo": -0.31, "hi": 0.51, "gain_control": 4.0})
    # a twin gaining under 3 points: ±0.3 points, not 10% of its gain (0.25)
    assert ct.resolved({"verdict": "inconclusive", "lo": -0.2, "hi": 0.39, "gain_control": 2.5})
    assert not ct.resolved({"verdict": "inconclusive at the cap", "lo": -0.2, "hi": 0.42, "gain_control": 2.5})


def test_cells_come_from_the_judges_folders_and_a_row_may_read_another_sweep(tmp_path):
    path = _definition(tmp_path, "  - {method: s_trace, label: m}\n  - method: grpo_lambda\n"
                                 "    sweep: flagship\n    probes: {tiny-500k: probes/flagship}\n")  # fmt: skip
    table = ct.load(path)
    assert [r.label for r in table.rows] == ["m", "grpo_lambda"] and table.rows[0].controls == ("twin", "placebo")
    res = tmp_path / "results"
    _write(res / "probes" / "judge-m", PROBE)  # the judge's first size: its probe folder
    _write(res / "judge-m", SWEEP)
    data = ct.build(table, res)
    m, lam = data["rows"]
    cell = m["per_update"]["tiny-500k"]
    assert cell["setting"] == "tuned" and cell["lr_method"] == 2e-4 and cell["mean"] == 0.1  # the tuned rate's
    assert cell["reading"] == "better at 0.0001; inconclusive at 0.0002" and cell["resolved"]
    assert m["per_update"]["tiny-2m"] is None and lam["per_update"] == {"tiny-500k": None, "tiny-2m": None}
    assert m["end_to_end"]["verdict"] == "better" and lam["end_to_end"] is None
    assert data["cells"] == {"measured": 1, "resolved": 1, "total": 4} and data["decided"] == 1
    md = ct.markdown(data)
    assert ("| `m` (s_trace) | +0.10 [-0.30, +0.50], +2% of the twin's gain at tuned lr 0.0002: **inconclusive**; "
            "better at 0.0001; inconclusive at 0.0002 | not measured yet | +3.9 [+0.1, +7.6], 18 seeds: **better** |"
            ) in md  # fmt: skip
    assert "Measured 1 of 4 per-update cells, 1 resolved; 1 of 2 end-to-end comparisons decided." in md
    # an interrupted probe's journal (bench.paired.journal): the cell says how far it got
    for seed in (0, 1):
        partial = res / "probes" / "judge-m-tiny-2m" / "partial"
        partial.mkdir(parents=True, exist_ok=True)
        (partial / f"trajectory-m-twin-seed{seed}.json").write_text("{}")
    again = ct.build(table, res)
    assert again["rows"][0]["kept"] == {"tiny-2m": 2} and again["rows"][1]["kept"] == {}
    assert "| not measured yet (under way: 2 trajectories kept) | +3.9" in ct.markdown(again)
    (partial / "trajectory-m-twin-seed1.json").unlink()
    assert "| not measured yet (under way: 1 trajectory kept) | +3.9" in ct.markdown(ct.build(table, res))
    # without a tuned setting: the lowest rate's comparison
    _write(res / "probes" / "judge-m-tiny-2m", {"comparisons": PROBE["comparisons"][:1] + PROBE["comparisons"][2:3]})
    assert ct.build(table, res)["rows"][0]["per_update"]["tiny-2m"]["lr_method"] == 1e-4
    # the flagship row reads the flagship's folders at tiny-500k, the judge's at tiny-2m (its first size)
    _write(res / "probes" / "flagship", {"comparisons": [{**c, "method": "grpo_lambda", "control": "grpo_lambda-twin"}
                                                         for c in PROBE["comparisons"][:1]]})  # fmt: skip
    _write(res / "flagship", {"analysis": {}})
    lam = ct.build(table, res)["rows"][1]
    assert lam["per_update"]["tiny-500k"]["verdict"] == "better" and lam["end_to_end"] is None
    assert ct.probe_dir(table.rows[1], "tiny-2m", table, res) == res / "probes" / "judge-grpo_lambda"


def test_what_the_records_cost_comes_from_their_reports_each_folder_once(tmp_path):
    rows = "  - {method: s_trace, label: m}\n"
    rows += "  - {method: p_trace, label: n, sweep: judge-n, probes: {tiny-500k: probes/judge-m}}\n"
    table = ct.load(_definition(tmp_path, rows, "[tiny-500k]"))
    res = tmp_path / "results"
    _write(res / "probes" / "judge-m", {**PROBE, "wall_s": 5400.0})  # both rows read it: counted once
    _write(res / "judge-m", {**SWEEP, "tuning": {"wall_s": 720.0}, "compute_s": 3600.0})
    _write(res / "judge-n", {**SWEEP, "compute_s": 1800.0})  # no tuning
    cost = ct.build(table, res)["cost"]
    assert cost == {"probes_wall_s": 5400.0, "tuning_wall_s": 720.0, "rounds_run_s": 5400.0}
    assert ct._cost_text(cost, True)[1] == (
        "What these records cost (each report's own times): the probes 1.5 h of wall time, the tuning 0.2 h of "
        "wall time and the rounds 1.5 h of run time (the sum of their runs' seconds, which a sweep's workers share)."
    )
    assert ct._cost_text(cost, False)[1].endswith("the probes 1.5 h of wall time.")


def test_a_rate_tuned_after_the_probe_picks_its_common_rate_where_both_arms_share_it(tmp_path):
    """The probe ran before the sweep tuned its rates (no ``tuned`` rows): the cell is at the rate tuned for
    the method and its twin alike where the probe has it among its common rates; else at the lowest."""
    table = ct.load(_definition(tmp_path, "  - {method: s_trace, label: m}\n", "[tiny-500k]"))
    res = tmp_path / "results"
    common = [c for c in PROBE["comparisons"] if c["setting"] != "tuned"]
    oracle = [{"setting": f"lr {lr:g}", "method": "m", "lr": lr, "n": 6, "method_effect": e, "oracle_effect": 2.0,
               "oracle_lo": 1.0, "oracle_hi": 3.0, "share": None} for lr, e in ((1e-4, 0.5), (2e-4, 0.1))]  # fmt: skip
    _write(res / "probes" / "judge-m", {"comparisons": common, "oracle": oracle})
    assert ct.tuned_later(table.rows[0], res) is None  # no tuning.json
    tuning = {"labels": {"m": {"chosen": {"lr": 2e-4}}, "m-twin": {"chosen": {"lr": 2e-4}}}}
    (res / "judge-m" / "tuning.json").parent.mkdir(parents=True)
    (res / "judge-m" / "tuning.json").write_text(json.dumps(tuning))
    assert ct.tuned_later(table.rows[0], res) == 2e-4
    cell = ct.build(table, res)["rows"][0]["per_update"]["tiny-500k"]
    assert cell["lr_method"] == 2e-4 and cell["tuned_later"] and cell["oracle"]["method_effect"] == 0.1
    text = ct._update_text(cell)  # a cell without the share of the twin's gain names the twin's own gain
    assert text.startswith(
        "+0.10 [-0.30, +0.50], the twin gaining +4.00 (not resolved above 0) at tuned lr 0.0002: **inconclusive**"
    )
    tuning["labels"]["m-twin"]["chosen"]["lr"] = 1e-4  # the arms tuned apart: no common rate is the pair's
    (res / "judge-m" / "tuning.json").write_text(json.dumps(tuning))
    cell = ct.build(table, res)["rows"][0]["per_update"]["tiny-500k"]
    assert ct.tuned_later(table.rows[0], res) is None and cell["lr_method"] == 1e-4 and "tuned_later" not in cell
    assert ct._update_text(cell).startswith("+0.50 [+0.10, +0.90], +20% of the twin's gain at lr 0.0001")


def test_a_cell_ends_with_its_share_of_the_oracle_read_from_the_ceiling_probe(tmp_path):
    """The row's own probe has no oracle: the table's ceiling probe gives the share, at the tuned rates."""
    path = _definition(tmp_path, "  - {method: s_trace, label: m}\n", "[tiny-500k]")
    path.write_text(path.read_text() + "ceiling: {tiny-500k: probes/ceiling}\n")
    table = ct.load(path)
    res = tmp_path / "results"
    _write(res / "probes" / "judge-m", PROBE)
    share = {"mean": 0.25, "lo": 0.05, "hi": 0.6}
    oracle = [{"setting": "lr 0.0001", "method": "m", "lr": 1e-4, "n": 6, "method_effect": 0.5, "oracle_effect": 2.0,
               "oracle_lo": 1.0, "oracle_hi": 3.0, "share": share},
              {"setting": "tuned", "method": "m", "lr": 2e-4, "n": 6, "method_effect": 0.1, "oracle_effect": 0.4,
               "oracle_lo": -0.2, "oracle_hi": 1.0, "share": None}]  # fmt: skip
    _write(res / "probes" / "ceiling", {"sweep": "flagship", "oracle": oracle})
    cell = ct.build(table, res)["rows"][0]["per_update"]["tiny-500k"]
    assert cell["oracle"]["setting"] == "tuned" and cell["oracle"]["probe"] == "flagship"
    assert ct._update_text(cell).endswith("; the oracle's gain +0.40 [-0.20, +1.00]: no share")
    cell["oracle"] = {**oracle[0], "probe": "flagship"}
    assert ct._update_text(cell).endswith("; +25% [+5, +60] of the oracle's gain")
    with pytest.raises(CreditBenchError, match="ceiling names sizes the table does not have"):
        path.write_text(path.read_text() + "ceiling: {tiny-8m: probes/ceiling}\n")
        ct.load(path)


def test_the_judges_still_to_run(tmp_path):
    path = _definition(
        tmp_path,
        "  - {method: ibpo, label: ibpo_diff, options: {mode: diff_credit}}\n"
        "  - {method: grpo_lambda, sweep: flagship, probes: {tiny-500k: probes/flagship}}\n",
    )
    table, res = ct.load(path), tmp_path / "results"
    todo = {row.label: args for row, args in credit_todo.missing(table, res)}
    assert todo["ibpo_diff"] == ["ibpo", "--label", "ibpo_diff", "--task", "chain", "--sizes", "tiny-500k,tiny-2m",
                                 "--options", "{mode: diff_credit}", "--controls", "twin"]  # fmt: skip
    assert todo["grpo_lambda"][-3:] == ["tiny-2m", "--controls", "twin", "--per_update_only"][-3:]
    assert "--per_update_only" in todo["grpo_lambda"] and "tiny-500k" not in " ".join(todo["grpo_lambda"])
    # up to the first size, per update only: the flagship row has nothing there; the other a prefix, no sweep
    first = credit_todo.missing(table, res, upto="tiny-500k", per_update_only=True)
    assert [(r.label, a[a.index("--sizes") + 1], a[-1]) for r, a in first] == [
        ("ibpo_diff", "tiny-500k", "--per_update_only")]  # fmt: skip
    with pytest.raises(CreditBenchError, match="--upto tiny-8m is not one of the table's sizes"):
        credit_todo.missing(table, res, upto="tiny-8m")
    _write(res / "probes" / "judge-grpo_lambda", PROBE)
    _write(res / "probes" / "judge-ibpo_diff", PROBE)
    _write(res / "probes" / "judge-ibpo_diff-tiny-2m", PROBE)
    assert [r.label for r, _ in credit_todo.missing(table, res)] == ["ibpo_diff"]  # its sweep still to run
    _write(res / "judge-ibpo_diff", SWEEP)
    assert credit_todo.missing(table, res) == []


def test_a_table_that_asks_for_the_oracle_runs_it_in_every_judge_and_reruns_a_probe_without_it(tmp_path):
    rows = "  - {method: delta}\n  - {method: s_trace, sweep: f, probes: {tiny-500k: probes/f}}\n"
    path = _definition(tmp_path, rows)
    path.write_text("oracle: true\n" + path.read_text())
    table, res = ct.load(path), tmp_path / "results"
    todo = {row.label: args for row, args in credit_todo.missing(table, res, per_update_only=True)}
    assert todo["delta"][-2:] == ["--oracle", "--per_update_only"] and "--oracle" in todo["s_trace"]
    _write(res / "probes" / "judge-delta", PROBE)  # a probe made without the oracle: still to run
    _write(res / "probes" / "judge-delta-tiny-2m", {**PROBE, "oracle": [{"method": "delta"}]})
    _write(res / "probes" / "judge-s_trace", {**PROBE, "oracle": [{"method": "s_trace"}]})  # its first own size
    assert [r.label for r, _ in credit_todo.missing(table, res, per_update_only=True)] == ["delta"]
    _write(res / "probes" / "judge-delta", {**PROBE, "oracle": [{"method": "delta"}]})
    assert credit_todo.missing(table, res, per_update_only=True) == []
    path.write_text(path.read_text().replace("oracle: true", "oracle: yes please"))
    with pytest.raises(CreditBenchError, match="oracle must be true or false"):
        ct.load(path)


def test_a_size_with_its_own_rates_gets_them_and_a_probe_at_other_rates_is_not_its(tmp_path):
    """``rates``: the judge gets the size's rates (--rates), a probe made at other rates is still to run and
    shows no cell, and the cell of one at the size's rates sits at the size's rate."""
    path = _definition(tmp_path, "  - {method: s_trace, label: m}\n")
    path.write_text("rates: {tiny-2m: {lr: 5.0e-5, lrs: [2.5e-5, 5.0e-5], tuned: rate-tiny-2m}}\n" + path.read_text())
    table, res = ct.load(path), tmp_path / "results"
    assert table.rates == {"tiny-2m": {"lr": 5e-5, "lrs": [2.5e-5, 5e-5], "tuned": "rate-tiny-2m"}}
    ((_, args),) = credit_todo.missing(table, res)
    assert args[-2:] == ["--rates", "{tiny-2m: {lr: 5.0e-05, lrs: [2.5e-05, 5.0e-05]}}"]

    def at(lr: float) -> dict:
        return {**TWIN, "setting": f"lr {lr:g}", "lr_method": lr, "mean": 0.02, "lo": -0.01, "hi": 0.05,
                "verdict": "inconclusive", "gain_control": 0.3}  # fmt: skip

    old = {"comparisons": [at(1e-4), at(2e-4)], "options": {"lrs": [1e-4, 2e-4], "trajectory_lr": None}}
    _write(res / "probes" / "judge-m", PROBE)
    _write(res / "probes" / "judge-m-tiny-2m", old)
    assert [r.label for r, _ in credit_todo.missing(table, res, per_update_only=True)] == ["m"]
    assert ct.build(table, res)["rows"][0]["per_update"]["tiny-2m"] is None
    own = {"comparisons": [at(2.5e-5), at(5e-5)], "options": {"lrs": [2.5e-5, 5e-5], "trajectory_lr": 5e-5}}
    _write(res / "probes" / "judge-m-tiny-2m", own)
    assert credit_todo.missing(table, res, per_update_only=True) == []
    cell = ct.build(table, res)["rows"][0]["per_update"]["tiny-2m"]
    assert cell["lr_method"] == 5e-5 and cell["size_rate"] == "size" and "tuned_later" not in cell
    assert ct._update_text(cell).startswith(
        "+0.02 [-0.01, +0.05], the twin gaining +0.30 (not resolved above 0) at the size's lr 5e-05: **inconclusive**"
    )
    (res / "rate-tiny-2m").mkdir()  # the tuning it names chose another rate: refused in one line
    (res / "rate-tiny-2m" / "tuning.json").write_text(json.dumps({"labels": {"m": {"chosen": {"lr": 1e-4}}}}))
    with pytest.raises(CreditBenchError, match=r"tiny-2m.s lr 5e-05 is not what .*chose \(\[0.0001\]\)"):
        ct.build(table, res)
    for bad, match in [("{tiny-8m: {lr: 1.0e-4, lrs: [1.0e-4]}}", "rates names size 'tiny-8m', not one of"),
                       ("{tiny-2m: {lr: 5e-5, lrs: [1.0e-4]}}", r"tiny-2m must be \{lr: R, lrs: \[A, B\]\} with"),
                       ("{tiny-2m: {lr: 1.0e-4}}", "tiny-2m must be"), ("[1]", "rates must map a size")]:  # fmt: skip
        path.write_text(f"rates: {bad}\n" + path.read_text().split("\n", 1)[1])
        with pytest.raises(CreditBenchError, match=match):
            ct.load(path)


def test_a_row_with_its_own_rates_at_a_size_gets_them_in_place_of_the_tables(tmp_path):
    """A row's ``rates`` (a LoRA row's): its judge gets them, the other rows the table's; its cell is read
    from a probe at its rates and says whose rate it sits at; a tuning it names must have chosen it."""
    rows = "  - {method: s_trace, label: m, rates: {tiny-2m: {lr: 1.0e-4, lrs: [5.0e-5, 1.0e-4], tuned: own}}}\n"
    path = _definition(tmp_path, rows + "  - {method: p_trace, label: p}\n")
    path.write_text("rates: {tiny-2m: {lr: 5.0e-5, lrs: [2.5e-5, 5.0e-5]}}\n" + path.read_text())
    table, res = ct.load(path), tmp_path / "results"
    assert table.rows[0].rates == {"tiny-2m": {"lr": 1e-4, "lrs": [5e-5, 1e-4], "tuned": "own"}}
    assert ct.row_rates(table.rows[1], table) == table.rates
    args = {row.label: a for row, a in credit_todo.missing(table, res, per_update_only=True)}
    assert args["m"][-3:] == ["--rates", "{tiny-2m: {lr: 0.0001, lrs: [5.0e-05, 0.0001]}}", "--per_update_only"]
    assert args["p"][-3:] == ["--rates", "{tiny-2m: {lr: 5.0e-05, lrs: [2.5e-05, 5.0e-05]}}", "--per_update_only"]
    comps = [{**TWIN, "setting": f"lr {lr:g}", "lr_method": lr, "mean": 0.1, "lo": -0.1, "hi": 0.3,
              "verdict": "inconclusive", "gain_control": 0.5} for lr in (5e-5, 1e-4)]  # fmt: skip
    _write(res / "probes" / "judge-m", PROBE)
    table_rates = {"comparisons": comps, "options": {"lrs": [2.5e-5, 5e-5], "trajectory_lr": 5e-5}}
    _write(res / "probes" / "judge-m-tiny-2m", table_rates)  # at the table's rates, not the row's: not its cell
    assert ct.build(table, res)["rows"][0]["per_update"]["tiny-2m"] is None
    _write(res / "probes" / "judge-m-tiny-2m", {**table_rates, "options": {"lrs": [5e-5, 1e-4], "trajectory_lr": 1e-4}})
    cell = ct.build(table, res)["rows"][0]["per_update"]["tiny-2m"]
    assert (cell["lr_method"], cell["size_rate"]) == (1e-4, "row")
    text = "+0.10 [-0.10, +0.30], the twin gaining +0.50 (not resolved above 0) at the row's own lr 0.0001: **incon"
    assert text in ct._update_text(cell)
    (res / "own").mkdir()
    (res / "own" / "tuning.json").write_text(json.dumps({"labels": {"m": {"chosen": {"lr": 2e-4}}}}))
    with pytest.raises(CreditBenchError, match=r"tiny-2m.s lr 0.0001 is not what .*own.*chose \(\[0.0002\]\)"):
        ct.build(table, res)
    path.write_text(path.read_text().replace("lrs: [5.0e-5, 1.0e-4], tuned: own", "lrs: []"))
    with pytest.raises(CreditBenchError, match=r"row m's rates: tiny-2m must be \{lr: R, lrs: \[A, B\]\}"):
        ct.load(path)


def test_a_table_per_update_only_runs_no_sweep_and_shows_no_end_to_end(tmp_path):
    path = _definition(
        tmp_path,
        "  - {method: p_trace, label: p-control}\n  - {method: s_trace, probes: {tiny-500k: probes/control}}\n",
        "[tiny-500k]",
    )
    path.write_text("end_to_end: false\ntemplate: results/sweeps/embedded-control.yaml\n" + path.read_text())
    table, res = ct.load(path), tmp_path / "results"  # the row reading another probe needs no sweep here
    assert credit_todo.missing(table, res)[0][1] == [
        "p_trace", "--label", "p-control", "--task", "chain", "--sizes", "tiny-500k",
        "--template", "results/sweeps/embedded-control.yaml", "--controls", "twin", "--per_update_only"]  # fmt: skip
    first = {**PROBE["comparisons"][0], "method": "p-control", "control": "p-control-twin"}
    _write(res / "probes" / "judge-p-control", {"comparisons": [first]})
    _write(res / "judge-p-control", SWEEP)  # a sweep of that name is not read
    data = ct.build(table, res)
    assert credit_todo.missing(table, res) == [] and data["rows"][0]["end_to_end"] is None
    md = ct.markdown(data)
    assert "| method | per update, tiny-500k |\n" in md and "End to end" not in md
    assert md.count(
        "| `p-control` (p_trace) | +0.50 [+0.10, +0.90], +20% of the twin's gain at lr 0.0001: **better** |"
    )
    assert "Measured 1 of 2 per-update cells, 1 resolved.\n" in md


@pytest.mark.parametrize(
    ("rows", "sizes", "match"),
    [
        ("  - {method: grpo}\n", "[tiny-500k]", "grpo has no credit-off twin"),
        ("  - {method: nope}\n", "[tiny-500k]", "nope"),
        ("  - {method: s_trace, options: {nope: 1}}\n", "[tiny-500k]", "nope"),
        ("  - {method: s_trace, colour: red}\n", "[tiny-500k]", "a row needs method and may have"),
        ("  - {method: s_trace}\n  - {method: s_trace}\n", "[tiny-500k]", "two rows share a label"),
        ("  - {method: s_trace, probes: {tiny-500k: probes/x}}\n", "[tiny-500k]", "name its sweep too"),
        ("  - {method: s_trace, probes: {tiny-8m: probes/x}}\n", "[tiny-500k]", "sizes the table does not have"),
        ("  - {method: s_trace}\n", "[]", "sizes needs at least one"),
        ("  - {method: s_trace}\nend_to_end: maybe\n", "[tiny-500k]", "end_to_end must be true or false"),
        ("  - {method: s_trace}\ncolour: red\n", "[tiny-500k]", "unknown key.*valid: task, sizes, rows"),
    ],
)
def test_a_bad_definition_fails_in_one_line(tmp_path, rows, sizes, match):
    with pytest.raises(CreditBenchError, match=match) as e:
        ct.load(_definition(tmp_path, rows, sizes))
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("stem", ["table", "control"])
def test_the_committed_tables_are_the_ones_their_reports_give(stem):
    """results/credit/<stem>.md is what its definition and the committed reports give now."""
    data = ct.build(ct.load(Path(f"results/credit/{stem}.yaml")))
    committed = json.loads(Path(f"results/credit/{stem}.json").read_text())
    assert committed == json.loads(json.dumps(data))
    assert Path(f"results/credit/{stem}.md").read_text() == ct.markdown(data)


def test_credit_quality_beside_the_effect_across_methods():
    """Pearson's r of x = [1, 2, 3, 4] and y = [1, 3, 2, 4] is 0.8; Fisher's z: atanh(0.8) -+ 1.96 / sqrt(1)."""
    import math

    from bench.report.oracle import correlation

    c = correlation([1, 2, 3, 4], [1, 3, 2, 4])
    assert c["r"] == pytest.approx(0.8) and c["n"] == 4
    assert c["lo"] == pytest.approx(math.tanh(math.atanh(0.8) - 1.959964), abs=1e-6)
    assert correlation([1, 2, 3], [1, 2, 3]) is None and correlation([1, 1, 1, 1], [1, 2, 3, 4]) is None
    rows = [{"label": f"m{i}", "per_update": {"tiny-500k": {"mean": y, "lo": y - 1, "hi": y + 1, "quality": {
             "rank_corr": x, "worst_share": 0.5, "worst_uniform": 0.25 if i else 0.5}}}} for i, (x, y) in
            enumerate(zip([0.1, 0.2, 0.3, 0.4], [1.0, 3.0, 2.0, 4.0]))]  # fmt: skip
    rows.append({"label": "none", "per_update": {"tiny-500k": None}})
    q = oracle.across(rows, "tiny-500k", "t-quality-tiny-500k.png")
    assert [p["label"] for p in q["points"]] == ["m0", "m1", "m2", "m3"]
    assert q["rank_corr"]["r"] == pytest.approx(0.8) and q["worst_excess"]["r"] == pytest.approx(0.7745967)
    # at 97.5% (Bonferroni over the two scores): atanh(0.8) -+ 2.241403 / sqrt(1)
    assert q["rank_corr"]["lo"] == pytest.approx(math.tanh(math.atanh(0.8) - 2.241403), abs=1e-6)
    assert q["rank_corr"]["without"] is None  # three methods left: too few for a correlation
    text = "\n".join(oracle.across_text(q))
    assert (
        "rank correlation: r = +0.80 [-0.82, +1.00] over 4 methods;" in text
        and "| `m0` | +1.00 | +0.100 | +0.000 |" in text
    )
    # five methods: leaving out m4 (the point that carries it) leaves r = 0.8 of the four above
    rows.append({"label": "m4", "per_update": {"tiny-500k": {"mean": 9.0, "lo": 8.0, "hi": 10.0, "quality": {
                 "rank_corr": 0.9, "worst_share": 0.5, "worst_uniform": 0.25}}}})  # fmt: skip
    five = oracle.across(rows, "tiny-500k", "t.png")["rank_corr"]
    assert five["n"] == 5 and five["r"] > 0.9 and five["without"]["label"] == "m4"
    assert five["without"]["r"] == pytest.approx(0.8)
    assert "over 5 methods (at least +0.80 with one left out, without `m4`)" in "\n".join(
        oracle.across_text(oracle.across(rows, "tiny-500k", "t.png"))
    )
    assert text.endswith("![credit quality against the per-update effect at tiny-500k](t-quality-tiny-500k.png)")


def test_the_table_draws_each_sizes_credit_quality_as_a_scatter(tmp_path):
    """`creditbench table --credit` writes beside the table one scatter per size whose methods have scores."""
    import shutil

    from bench.cli.table import credit_table

    definition = tmp_path / "credit" / "t.yaml"
    definition.parent.mkdir()
    shutil.copy("results/credit/table.yaml", definition)
    assert credit_table(["--credit", "--definition", str(definition), "--results_dir", "results"]) == 0
    data = json.loads((tmp_path / "credit" / "t.json").read_text())
    measured = [s for s in data["sizes"] if any(r["per_update"][s] for r in data["rows"])]
    assert [q["size"] for q in data["quality"]] == measured and measured[0] == "tiny-500k"  # a size with probes
    png = tmp_path / "credit" / "t-quality-tiny-500k.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "](t-quality-tiny-500k.png)" in (tmp_path / "credit" / "t.md").read_text()
