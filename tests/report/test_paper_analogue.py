"""The embedded analogue of a paper's table (bench/report/papers/analogue.py): the paper's
configurations measured at a scale the suite runs anywhere, set beside the paper's values, and each
comparison the paper claims beside the same comparison in a sweep's report."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from scipy import stats

from bench.report import papers
from bench.report.papers import analogue
from bench.report.papers import data as paper_data
from tests.report.test_papers import _table_row, _write_report

REPO = Path(__file__).resolve().parents[2]


def _analogue_row(label, values):
    """A report row of configuration ``label`` with per-seed values of each metric (3 seeds)."""
    from bench.stats.intervals import t_interval

    return {
        "method": label,
        "method_name": "arca",
        "model": "tiny-500k",
        "task": "arithmetic",
        "eval_task": "arithmetic",
        "seeds": [0, 1, 2],
        "metrics": {m: t_interval(v) for m, v in values.items()},
    }


def test_the_analogue_table_sets_measured_beside_paper_values():
    """uniform-r64 greedy [0.30, 0.32, 0.34]: mean 0.32, t-interval 0.32 +- 4.303 * 0.02 / sqrt(3)
    = [0.270, 0.370]; arca-r4 G(w) [0.1, 0.5, 0.9]: mean 0.5, half-width 4.303 * 0.4 / sqrt(3) =
    0.994, clipped to [0, 1]. The MDD of greedy: the one paired difference arca-r4 - uniform-r64 =
    [0.02, 0.0, 0.01], SD 0.01, Bonferroni alpha 0.05 / 6 (seven configurations):
    (t_{1-0.05/12, 2} + t_{0.8, 2}) * 0.01 / sqrt(3)."""
    from bench.report.papers.analogue import render_analogue

    paper = paper_data.load_paper("arca")
    report = {
        "baseline": "uniform-r64",
        "rows": [
            _analogue_row("uniform-r64", {"greedy": [0.30, 0.32, 0.34], "weight_gini": [0.0, 0.0, 0.0]}),
            _analogue_row("arca-r4", {"greedy": [0.32, 0.32, 0.35], "weight_gini": [0.1, 0.5, 0.9]}),
        ],
    }
    text = render_analogue(paper, report, "paper-arca-embedded")
    lines = {line.split(" | ")[0].strip("| "): line for line in text.splitlines() if line.startswith("| ")}
    assert "0.620 · 0.320 [0.270, 0.370]" in lines["uniform-r64"]
    assert "0.353 · 0.500 [0.000, 1.000]" in lines["arca-r4"]
    assert lines["surprisal-r64"].count("· -") == 5  # not run: the paper's values alone
    mdd = (stats.t.ppf(1 - 0.05 / 12, 2) + stats.t.ppf(0.8, 2)) * 0.01 / math.sqrt(3)
    assert f"greedy acc {mdd:.3f}" in text and "Bonferroni alpha 0.05/6" in text
    assert "tiny-500k on arithmetic, 3 seeds" in text


def test_table_for_arca_prints_the_analogue_section(tmp_path):
    out = papers.table("arca", results_dir=tmp_path)
    assert "| uniform-r64 | 0.620 · - |" in out
    assert "Not run yet (no results/paper-arca-embedded/report.json)" in out


def test_the_arca_analogue_runs_the_papers_configurations():
    """The embedded analogue: every configuration the paper's table has, on a tiny model, >= 3 seeds."""
    sweep = pytest.importorskip("bench.sweep.sweep")
    paper = paper_data.load_paper("arca")
    loaded = sweep.load_spec(REPO / "results" / "papers" / paper.analogue)
    assert {e.label for e in paper.results} == {r.label for r in loaded.runs}
    assert len({r.cfg.seed for r in loaded.runs}) >= 3
    for run in loaded.runs:
        assert run.cfg.model.name.startswith("tiny-") and run.cfg.eval.greedy and run.cfg.model.lora.rank > 0
        assert run.cfg.model.lora.alpha == 2 * run.cfg.model.lora.rank


# ------------------------------------------------------------------------- the paper's claims

CHAIN, ARITH = "chain (tiny-500k)", "arithmetic (tiny-500k)"


def _family(comparisons: list[tuple[str, str, dict[str, tuple], float | None]]) -> dict:
    """A report family (``analysis.assessment``) from (baseline, task, {label: (value, lo, hi, p_holm,
    verdict)}, mde) per comparison; its rows in the comparisons' order, as bench/report/inference.py
    writes them."""
    rows, out = [], []
    for baseline, task, diffs, _ in comparisons:
        out.append({"baseline": baseline, "task": task, "diffs": {lab: {"value": d[0]} for lab, d in diffs.items()}})
        for lab, (value, lo, hi, p_holm, verdict) in diffs.items():
            diff = {"value": value, "lo": lo, "hi": hi, "p": p_holm, "p_tost": None}
            rows.append({"label": lab, "task": task, "diff": diff, "p_holm": p_holm, "verdict": verdict})
    return {"alpha": 0.05, "m": len(rows), "rows": rows, "mde": [c[3] for c in comparisons], "comparisons": out}


def _flagship(credit: bool = True) -> dict:
    """An embedded report: S-trace worse than GRPO on chain (p_Holm 0.044) but better than its twin
    (p_Holm 0.004); on arithmetic S-trace's numbers differ, so a wrong task would show."""
    worse = {
        "entropy_top": (-0.070, -0.089, -0.052, 1e-9, "worse"),
        "s_trace": (-0.026, -0.044, -0.008, 0.044, "worse"),
    }
    secondary = [
        ("grpo", CHAIN, worse, 0.034),
        ("grpo", ARITH, {"s_trace": (-0.0125, -0.026, 0.001, 0.40, "equivalent (±0.03)")}, 0.025),
    ]
    primary = [
        ("entropy_top-twin", CHAIN, {"entropy_top": (-0.015, -0.034, 0.004, 0.30, "inconclusive")}, 0.028),
        ("s_trace-twin", CHAIN, {"s_trace": (0.031, 0.012, 0.050, 0.004, "better")}, 0.028),
        ("s_trace-placebo", CHAIN, {"s_trace": (0.002, -0.017, 0.021, 1.0, "inconclusive")}, 0.028),
    ]
    analysis = {"metric": "pass_at_1", "assessment": _family(secondary)}
    if credit:
        analysis["credit"] = {"assessment": _family(primary)}
    return {"sweep": "embedded", "baseline": "grpo", "rows": [], "analysis": analysis}


def test_selective_traces_analogue_names_both_comparisons(tmp_path):
    """S-trace vs GRPO: -2.6 [-4.4, -0.8] points, significant against the paper's +0.49..+3.16, so
    it disagrees; vs its twin (GSPO's uniform trace): +3.1 [+1.2, +5.0], significant and the
    direction the paper claims, so it agrees. The placebo and arithmetic rows are not taken."""
    _write_report(tmp_path, _flagship())
    out = papers.table("selective_traces", results_dir=tmp_path)
    assert "### Embedded analogue (tiny-500k, chain; not a reproduction)" in out
    assert _table_row(out, "`s_trace` vs `grpo`") == [
        "S-trace vs GRPO",
        "pass@16: +0.49 Qwen3-1.7B, +3.16 Qwen3-4B, +2.98 Qwen3-8B",
        "`s_trace` vs `grpo`: the whole recipe",
        "-2.6 [-4.4, -0.8]",
        "worse (p_Holm 0.044), secondary",
        "disagrees",
        "-",  # no credit probe in tmp_path
    ]
    cells = _table_row(out, "`s_trace` vs `s_trace-twin`")
    assert cells[0] == "S-trace vs GSPO (its uniform-credit special case)" and cells[1].startswith("none stated")
    assert cells[3:] == ["+3.1 [+1.2, +5.0]", "better (p_Holm 0.004), primary", "agrees", "-"]
    probe = {"model": "tiny-500k", "comparisons": [
        {"method": "s_trace", "control": "s_trace-twin", "setting": "lr 0.0001", "lr_method": 1e-4, "mean": -0.43,
         "lo": -0.74, "hi": -0.11, "verdict": "worse"},
        {"method": "s_trace", "control": "s_trace-twin", "setting": "lr 0.0002", "lr_method": 2e-4, "mean": 0.1,
         "lo": -0.2, "hi": 0.4, "verdict": "inconclusive"}]}  # fmt: skip
    for folder, model in (("embedded", "tiny-500k"), ("embedded-tiny-2m", "tiny-2m")):
        (tmp_path / "probes" / folder).mkdir(parents=True)
        (tmp_path / "probes" / folder / "report.json").write_text(json.dumps({**probe, "model": model}))
    cells = _table_row(papers.table("selective_traces", results_dir=tmp_path), "`s_trace` vs `s_trace-twin`")
    assert cells[6] == (
        "tiny-500k, lr 0.0001: -0.43 [-0.74, -0.11] worse; tiny-2m, lr 0.0001: -0.43 [-0.74, -0.11] worse"
    )  # the lowest rate: no tuned setting
    # with the credit table's row for s_trace, its cells at every size it measured, each at the table's rate
    cell = {"lr_method": 1e-4, "mean": -0.43, "lo": -0.74, "hi": -0.11, "verdict": "worse"}
    table = {"rows": [{"label": "s_trace", "per_update": {
        "tiny-500k": {**cell, "setting": "tuned", "lr_method": 2e-4},
        "tiny-2m": {**cell, "setting": "lr 5e-05", "lr_method": 5e-5, "mean": 0.0, "lo": -0.02, "hi": 0.02,
                    "verdict": "undecided (resolved)", "size_rate": "size"},
        "tiny-8m": None}}]}  # fmt: skip
    (tmp_path / "credit").mkdir()
    (tmp_path / "credit" / "table.json").write_text(json.dumps(table))
    out = papers.table("selective_traces", results_dir=tmp_path)
    assert _table_row(out, "`s_trace` vs `s_trace-twin`")[6] == (
        "tiny-500k, tuned lr 0.0002: -0.43 [-0.74, -0.11] worse; "
        "tiny-2m, the size's lr 5e-05: +0.00 [-0.02, +0.02] undecided (resolved)"
    )
    assert _table_row(out, "`p_trace` vs `p_trace-twin`")[6] == "-"  # no row in the table, no probe of the pair


@pytest.mark.parametrize(
    "sign, diff, significant, mdd, expected",
    [
        (1, 0.03, True, 0.02, "agrees"),
        (-1, -0.03, True, 0.02, "agrees"),
        (1, -0.03, True, 0.02, "disagrees"),
        (1, 0.03, False, 0.0337, "not resolved (MDE 3.4 points)"),
        (1, -0.03, False, None, "not resolved (no MDE: under 3 seeds)"),
        (0, 0.03, True, 0.02, "no sign to compare (the paper's numbers differ in sign)"),
    ],
)
def test_agreement(sign, diff, significant, mdd, expected):
    assert analogue.agreement(sign, diff, significant, mdd) == expected


def test_agreement_needs_holm_significance_and_the_papers_sign(tmp_path):
    """GRPO-lambda vs GRPO: +1.0 points with raw p 0.01 but p_Holm 0.20 is not resolved; ARCA's
    paper numbers differ in sign (greedy 0.590 - 0.620 = -3.00, pass@4 0.680 - 0.675 = +0.50), so a
    significant analogue has no sign to agree with."""
    report = _flagship()
    report["analysis"]["assessment"] = _family(
        [("grpo", CHAIN, {"grpo_lambda": (0.010, 0.001, 0.019, 0.20, "inconclusive")}, 0.034)]
    )
    _write_report(tmp_path, report)
    cells = _table_row(papers.table("grpo_lambda", results_dir=tmp_path), "`grpo_lambda` vs `grpo`")
    assert cells[1] == "pass@1: +4.50 DeepSeek-R1-Distill-Qwen-7B, > +3.00 all models (1.5B-7B)"
    assert cells[3:] == ["+1.0 [+0.1, +1.9]", "inconclusive (p_Holm 0.200), secondary", "not resolved (MDE 3.4 points)",
                         "-"]  # fmt: skip

    arca = {"sweep": "paper-arca-embedded", "baseline": "uniform-r64", "rows": []}
    better = {"arca-r64": (0.05, 0.02, 0.08, 0.01, "better")}
    arca["analysis"] = {"metric": "pass_at_1", "assessment": _family([("uniform-r64", ARITH, better, 0.07)])}
    _write_report(tmp_path, arca)
    cells = _table_row(papers.table("arca", results_dir=tmp_path), "`arca-r64` vs `uniform-r64`")
    assert cells[1] == "greedy acc: -3.00; pass@4: +0.50"
    assert cells[5] == "no sign to compare (the paper's numbers differ in sign)"


def test_a_comparison_decided_in_rounds_quotes_its_repeated_interval_and_the_paper_s_own_labels(tmp_path):
    """ARCA's judge (arca vs arca-twin, r16) beside the paper's r64 comparison (greedy 0.590 - 0.620 = -3.00,
    pass@4 0.680 - 0.675 = +0.50, the paper's labels arca-r64 and uniform-r64): decided worse in rounds, so
    the cell quotes the repeated interval (-6.7 to -1.4), not the fixed-design one (-5.7 to -2.4); a
    comparison with no repeated row keeps its own."""
    judge = {"sweep": "judge-arca", "baseline": "grpo", "rows": []}
    primary = _family([("arca-twin", CHAIN, {"arca": (-0.041, -0.057, -0.024, 0.0005, "worse")}, 0.02)])
    repeated = {"rows": [{"method": "arca", "control": "arca-twin", "task": CHAIN, "value": -0.041, "lo": -0.067,
                          "hi": -0.014, "verdict": "worse"}]}  # fmt: skip
    judge["analysis"] = {"metric": "pass_at_1", "assessment": _family([]), "credit": {"assessment": primary}}
    (tmp_path / "judge-arca").mkdir()
    (tmp_path / "judge-arca" / "report.json").write_text(json.dumps(judge))
    cells = _table_row(papers.table("arca", results_dir=tmp_path), "`arca` vs `arca-twin`")
    assert cells[1] == "greedy acc: -3.00; pass@4: +0.50"  # the paper's r64 labels, not the judge's
    assert cells[3:6] == ["-4.1 [-5.7, -2.4]", "worse (p_Holm <0.001), primary", "no sign to compare "
                          "(the paper's numbers differ in sign)"]  # fmt: skip
    judge["analysis"]["credit"]["repeated"] = repeated
    (tmp_path / "judge-arca" / "report.json").write_text(json.dumps(judge))
    cells = _table_row(papers.table("arca", results_dir=tmp_path), "`arca` vs `arca-twin`")
    assert cells[3:6] == ["-4.1 [-6.7, -1.4], repeated", "worse (in rounds), primary", "no sign to compare "
                          "(the paper's numbers differ in sign)"]  # fmt: skip
    repeated["rows"][0]["verdict"] = "inconclusive at the cap"  # the rounds' decision, not the fixed p, says it
    (tmp_path / "judge-arca" / "report.json").write_text(json.dumps(judge))
    cells = _table_row(papers.table("arca", results_dir=tmp_path), "`arca` vs `arca-twin`")
    assert cells[4:6] == ["inconclusive at the cap (in rounds), primary", "not resolved (MDE 2.0 points)"]
    repeated["rows"][0]["verdict"] = "equivalent (±0.03)"  # a bound, not an unresolved difference
    (tmp_path / "judge-arca" / "report.json").write_text(json.dumps(judge))
    cells = _table_row(papers.table("arca", results_dir=tmp_path), "`arca` vs `arca-twin`")
    assert cells[5] == "within its equivalence bound: no direction to compare"


def test_missing_analogue_is_said_in_words(tmp_path):
    """No report: both rows say so; a report without the credit family (or without any analysis)
    names the comparison it lacks; neither is an error."""
    out = papers.table("selective_traces", results_dir=tmp_path)
    for pair in ("`s_trace` vs `grpo`", "`s_trace` vs `s_trace-twin`"):
        assert _table_row(out, pair)[3:] == ["not run in results/embedded (no report.json)", "-", "-", "-"]
    _write_report(tmp_path, _flagship(credit=False))
    out = papers.table("selective_traces", results_dir=tmp_path)
    assert _table_row(out, "`s_trace` vs `grpo`")[5] == "disagrees"
    assert _table_row(out, "`s_trace` vs `s_trace-twin`")[3] == (
        "not run in results/embedded (no `s_trace` vs `s_trace-twin` on chain)"
    )
    (tmp_path / "embedded" / "report.json").write_text(json.dumps({"sweep": "embedded", "rows": []}))
    out = papers.table("grpo_lambda", results_dir=tmp_path)
    assert _table_row(out, "`grpo_lambda` vs `grpo`")[3].startswith("not run in results/embedded (no `grpo_lambda`")
    assert "analogue Δ , points" not in out and "| analogue Δ, points |" in out


def test_a_paper_file_names_its_analogues_and_a_malformed_one_is_one_line(tmp_path):
    import shutil

    from bench.errors import CreditBenchError
    from bench.report.papers.analogue import paper_claims
    from bench.report.papers.data import PAPERS_DIR, load_paper

    claims = paper_claims(load_paper("grpo_lambda"))
    assert [(c.label, c.control) for c in claims] == [("grpo_lambda", "grpo"), ("grpo_lambda", "grpo_lambda-twin")]
    for f in ("grpo_lambda.yaml", "grpo_lambda.sweep.yaml"):
        shutil.copy(PAPERS_DIR / f, tmp_path / f)
    path = tmp_path / "grpo_lambda.yaml"
    path.write_text(path.read_text() + "  - {text: x, label: grpo_lambda, controll: grpo}\n")
    with pytest.raises(CreditBenchError, match=r"grpo_lambda.yaml: analogues\[2\] must be a mapping with text"):
        paper_claims(load_paper("grpo_lambda", tmp_path))
