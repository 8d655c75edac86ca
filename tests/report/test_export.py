"""A sweep's comparisons as Markdown, CSV and LaTeX (bench.report.export) on the committed embedded
report, ``creditbench table --sweep`` and ``creditbench curves``, and their one-line errors."""

from __future__ import annotations

import copy
import csv
import io
import json
import re
from pathlib import Path

import pytest
from PIL import Image

from bench.cli import main
from bench.errors import CreditBenchError
from bench.report.export import COLUMNS, comparison_rows, latex_escape, to_csv, to_latex, to_markdown

RESULTS = Path(__file__).resolve().parents[2] / "results"
REPORT = json.loads((RESULTS / "embedded" / "report.json").read_text())
CREDIT = REPORT["analysis"]["credit"]["assessment"]["rows"]
ASSESSED = CREDIT + REPORT["analysis"]["assessment"]["rows"]  # the credit family first
REPEATED = REPORT["analysis"]["credit"]["repeated"]  # the credit family was decided in rounds


def _decided(got: dict) -> dict | None:
    """The sequential decision of a credit row (by its label, control and "task (model)"), None for a recipe."""
    key = (got["label"], got["control"], f"{got['task']} ({got['model']})")
    by = {(r["method"], r["control"], r["task"]): r for r in REPEATED["rows"]}
    return by.get(key) if got["family"] == "credit" else None


def _cli(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def test_rows_split_task_and_model_and_name_each_control():
    rows = comparison_rows(REPORT)
    assert len(rows) == len(ASSESSED) == 11
    assert {(r["task"], r["model"]) for r in rows} == {("chain", "tiny-500k")}
    assert {r["control"] for r in rows[: len(CREDIT)]} == {
        "s_trace-twin", "s_trace-placebo", "grpo_lambda-twin", "entropy_top-twin", "entropy_top-placebo"
    }  # fmt: skip
    assert {r["control"] for r in rows[len(CREDIT) :]} == {"grpo"}
    assert [r["label"] for r in rows] == [r["label"] for r in ASSESSED]


def test_the_csv_reads_back_to_the_reports_numbers():
    back = list(csv.DictReader(io.StringIO(to_csv(comparison_rows(REPORT)))))
    assert len(back) == len(ASSESSED) and tuple(back[0]) == COLUMNS
    for got, want in zip(back, ASSESSED):
        d = _decided(got)  # a credit pair shows its decision: difference, repeated interval, verdict
        shown = {"value": d["value"], "lo": d["lo"], "hi": d["hi"]} if d else want["diff"]
        assert f"{got['task']} ({got['model']})" == want["task"]
        assert got["verdict"] == (d["verdict"] if d else want["verdict"])
        assert got["interval"] == (REPEATED["label"] if d else "95% CI")
        assert float(got["mean"]) == want["mean"]["value"]
        assert (float(got["mean_lo"]), float(got["mean_hi"])) == (want["mean"]["lo"], want["mean"]["hi"])
        assert (float(got["diff"]), float(got["diff_lo"]), float(got["diff_hi"])) == (
            shown["value"],
            shown["lo"],
            shown["hi"],
        )
        assert (float(got["p"]), float(got["p_holm"])) == (want["diff"]["p"], want["p_holm"])
    assert sum(_decided(g) is not None for g in back) == len(CREDIT)


def test_the_latex_has_one_row_per_comparison_with_underscores_escaped():
    report = copy.deepcopy(REPORT)
    report["analysis"]["credit"]["assessment"]["rows"][1]["verdict"] = "equivalent (±0.03)"
    tex = to_latex(comparison_rows(report))
    lines = tex.splitlines()
    assert lines[0].startswith(r"\begin{tabular}") and r"\toprule" in lines and lines[-1] == r"\end{tabular}"
    body = [line for line in lines[lines.index(r"\midrule") + 1 :] if line.endswith(r"\\")]
    assert len(body) == len(ASSESSED)
    assert all(not re.search(r"(?<!\\)_", line) for line in body)  # every _ escaped outside the header's math
    first = ASSESSED[0]
    mean = f"{first['mean']['value']:.3f} [{first['mean']['lo']:.3f}, {first['mean']['hi']:.3f}]"
    assert body[0].startswith(
        rf"credit & s\_trace & chain & tiny-500k & s\_trace-twin & {mean} & {first['diff']['value']:+.3f}"
    )
    assert r"equivalent ($\pm$0.03)" in tex and r"$<$0.001" in tex
    assert (
        latex_escape("a_b & 50% #1 {x} ~^\\")
        == r"a\_b \& 50\% \#1 \{x\} \textasciitilde{}\textasciicircum{}\textbackslash{}"
    )


def test_the_markdown_rounds_and_shows_missing_values_as_dashes():
    report = copy.deepcopy(REPORT)
    del report["analysis"]["credit"]["repeated"]  # a family not decided in rounds: its fixed-design rows
    row = report["analysis"]["credit"]["assessment"]["rows"][0]  # as with fewer than 3 seeds: no interval, no test
    row["mean"] |= {"lo": None, "hi": None}
    row["diff"] |= {"lo": None, "hi": None, "p": None}
    row["p_holm"] = None
    rows = comparison_rows(report)
    md = to_markdown(rows).splitlines()
    assert len(md) == 2 + len(ASSESSED)
    first = ASSESSED[0]
    values = f"{first['mean']['value']:.3f} | {first['diff']['value']:+.3f}"
    assert md[2] == f"| credit | s_trace | chain | tiny-500k | s_trace-twin | {values} | – | – | {first['verdict']} |"
    back = next(csv.DictReader(io.StringIO(to_csv(rows))))
    assert back["mean_lo"] == back["p"] == back["p_holm"] == ""
    report["analysis"] = None
    with pytest.raises(CreditBenchError, match="no comparisons"):
        comparison_rows(report)


def test_a_credit_family_comes_first_with_a_family_column():
    rows = comparison_rows(REPORT)
    assert [r["family"] for r in rows] == ["credit"] * 5 + ["recipe"] * 6
    md = to_markdown(rows).splitlines()
    assert md[0].startswith("| family | label |") and md[2].startswith("| credit | s_trace |")
    assert "| diff to control [interval] | interval |" in md[0]  # the credit pairs' intervals are repeated ones
    tex = to_latex(rows).splitlines()
    assert tex[0] == r"\begin{tabular}{llllllllrrl}" and sum(line.endswith(r"\\") for line in tex) == 1 + 11
    one = copy.deepcopy(REPORT)
    del one["analysis"]["credit"]
    assert to_latex(comparison_rows(one)).startswith(r"\begin{tabular}{llllllrrl}")  # one family: no column


def test_table_cli_writes_the_formats_asked_for(capsys, tmp_path):
    code, out, _ = _cli(capsys, "table", "--sweep", "embedded", "--results_dir", str(RESULTS), "--out", str(tmp_path))
    assert code == 0 and "| entropy_top | chain | tiny-500k | grpo |" in out
    assert sorted(p.name for p in tmp_path.iterdir()) == ["comparisons.csv", "comparisons.md", "comparisons.tex"]
    assert (tmp_path / "comparisons.md").read_text() == to_markdown(comparison_rows(REPORT))
    only = tmp_path / "tex"
    code, _, _ = _cli(
        capsys, "table", "--sweep", "embedded", "--results", str(RESULTS), "--format", "tex", "--out", str(only)
    )
    assert code == 0 and [p.name for p in only.iterdir()] == ["comparisons.tex"]


@pytest.mark.parametrize(
    "argv, expected",
    [
        (
            ["table", "--sweep", "embeded"],
            ["no report.json for sweep 'embeded'", "Did you mean 'embedded'", "embedded-quick"],
        ),
        (["table"], ["--paper", "--sweep", "required"]),
        (["table", "--sweep", "embedded", "--format", "pdf"], ["md", "csv", "tex", "all"]),
        (
            ["curves", "--sweep", "embedded", "--labels", "grpo", "entropy_tp", "--task", "chain"],
            [
                "unknown label 'entropy_tp'",
                "Did you mean 'entropy_top'",
                "entropy_top, entropy_top-placebo, entropy_top-twin, grpo, grpo_lambda",
            ],
        ),
        (["curves", "--sweep", "embeded", "--labels", "grpo", "s_trace", "--task", "chain"], ["Sweeps with a report:"]),
        (["curves", "--sweep", "embedded", "--labels", "grpo", "s_trace", "--task", "chian"], ["chain"]),
        (["curves", "--sweep", "embedded", "--labels", "grpo", "grpo", "--task", "chain"], ["two or more"]),
    ],
)
def test_bad_sweeps_labels_and_tasks_get_one_line_naming_the_choices(capsys, argv, expected):
    code, out, err = _cli(capsys, *argv, "--results_dir", str(RESULTS))
    lines = err.strip().splitlines()
    assert code == 2 and not out and len(lines) == 1 and lines[0].startswith("creditbench: error:")
    assert all(e in lines[0] for e in expected), lines[0]


def test_curves_overlays_two_labels_as_a_png(capsys, tmp_path):
    png = tmp_path / "overlay.png"
    argv = ["curves", "--sweep", "embedded", "--labels", "grpo", "entropy_top", "--task", "chain"]
    code, out, _ = _cli(capsys, *argv, "--results_dir", str(RESULTS), "--out", str(png))
    assert code == 0 and out.strip() == str(png)
    with Image.open(png) as im:
        assert im.format == "PNG" and im.width > 300 and im.height > 200
        assert len(set(im.convert("RGB").getdata())) > 10  # lines and bands were drawn
