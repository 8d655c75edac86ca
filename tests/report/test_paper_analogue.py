"""The embedded analogue of a paper's table (bench/report/papers/analogue.py): the paper's
configurations measured at a scale the suite runs anywhere, set beside the paper's values."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from scipy import stats

from bench.report import papers
from bench.report.papers import data as paper_data

REPO = Path(__file__).resolve().parents[2]


def _analogue_row(label, values):
    """A report row of configuration ``label`` with per-seed values of each metric (3 seeds)."""
    from bench.report.stats import t_interval

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
    sweep = pytest.importorskip("bench.run.sweep")
    paper = paper_data.load_paper("arca")
    loaded = sweep.load_spec(REPO / "results" / "papers" / paper.analogue)
    assert {e.label for e in paper.results} == {r.label for r in loaded.runs}
    assert len({r.cfg.seed for r in loaded.runs}) >= 3
    for run in loaded.runs:
        assert run.cfg.model.name.startswith("tiny-") and run.cfg.eval.greedy and run.cfg.model.lora.rank > 0
        assert run.cfg.model.lora.alpha == 2 * run.cfg.model.lora.rank
