"""The result tables of README.md and docs/, generated from results/ so that no number is pasted.

A generated block sits between two HTML comments, which Markdown renders as nothing::

    <!-- results:embedded/summary -->
    (generated: never edit by hand)
    <!-- /results -->

The word after ``results:`` names the source, relative to results/:

- ``SWEEP/summary``: one row per (model, method) of ``results/SWEEP/report.json``, the report a
  sweep writes (bench/report/summary.py): base -> final pass@1 per seed, final pass@1, its paired
  difference to the baseline, sample AUC and its difference, pass@k at the largest k.
- ``SWEEP/run``: one sentence on how the sweep ran: runs, budget, wall time and machine
  (``results/SWEEP/run_all.json``, written by run_all.sh) and the summed run time (report.json).
- ``SWEEP/credit``, ``SWEEP/sequential``, ``SWEEP/comparisons``, ``SWEEP/budget``, ``SWEEP/robust``,
  ``SWEEP/tuning``, ``SWEEP/sensitivity``, ``SWEEP/blame``: that section of the report (the credit
  family, its decisions round by round, the comparisons with GRPO, the budget each label spent,
  rliable's summaries, the learning rates chosen, each pair's comparison at every rate of the grid,
  the blame alignment).
- ``papers/NAME/analogue``: the paper's table beside its embedded analogue's measured values
  (bench/report/papers/analogue.py, from the analogue sweep's report.json).
- ``PATH.md`` or ``PATH.md#N``: every Markdown table of ``results/PATH.md`` (a benchmark's output,
  e.g. ``benchmarks/rl_step.md``), or only its N-th (from 1), copied verbatim.

Each block ends with a link to its source, relative to the page it is in.

    creditbench docs-tables            rewrite every block of README.md and docs/**/*.md
    creditbench docs-tables --check    rewrite nothing; exit 1 naming the pages that differ

Rerun it after a benchmark or sweep rewrote its files under results/; tests/test_docs.py fails while
a page and its sources disagree.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

from bench.errors import CreditBenchError
from bench.stats import format as fmt

ROOT = Path(__file__).resolve().parents[2]
"""The repository: README.md, docs/ and results/ live here."""

BLOCK = re.compile(r"(<!-- results:(?P<source>[^ ]+) -->\n)(?P<body>.*?)(<!-- /results -->)", re.S)


# ---------------------------------------------------------------------------------- formatting
def _ci(ci: dict | None, signed: bool = False) -> str:
    """``mean [lo, hi]`` of a t-interval dict (bench/stats/intervals.py), as summary.md writes it."""
    ci = ci or {}
    return fmt.interval(ci.get("mean"), ci.get("lo"), ci.get("hi"), "+.3f" if signed else ".3f")


def _duration(seconds: float) -> str:
    minutes, s = divmod(round(seconds), 60)
    return f"{minutes} min {s} s" if minutes else f"{s} s"


def _report(results: Path, sweep: str) -> dict[str, Any]:
    from bench.sweep.sweep import report_path

    path = report_path(results, sweep)
    if not path.is_file():
        raise CreditBenchError(f"{path} not found: run the sweep {sweep!r} or `creditbench summarize --sweep {sweep}`")
    return json.loads(path.read_text())


# ---------------------------------------------------------------------------------- sources
def sweep_summary(results: Path, sweep: str) -> tuple[str, str]:
    """The headline table of a sweep's report, and the file it summarises."""
    report = _report(results, sweep)
    base = report["baseline"]
    k = max(max(r["ks"]) for r in report["rows"])
    several = len({r["eval_task"] for r in report["rows"]}) > 1
    per_seed_column = max(len(r["seeds"]) for r in report["rows"]) <= 4  # else the mean base pass@1
    head = [
        "model",
        *(["eval task"] if several else []),
        "method",
        "base → final pass@1 (per seed)" if per_seed_column else "base pass@1",
        "final pass@1",
        "gain over base (points)",
        f"Δ pass@1 vs {base}",
        "AUC samples",
        f"Δ AUC vs {base}",
        f"pass@{k}",
    ]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in report["rows"]:
        m, v = r["metrics"], r["vs_baseline"]
        per_seed = (
            ", ".join(f"{b:.3f}→{f:.3f}" for b, f in zip(m["base_pass_at_1"]["values"], m["pass_at_1"]["values"]))
            if per_seed_column
            else _ci(m["base_pass_at_1"])
        )
        cells = [
            r["model"],
            *([r["eval_task"]] if several else []),
            r["method"],
            per_seed,
            _ci(m["pass_at_1"]),
            _gain(m),
            _ci(v.get("pass_at_1"), True),
            _ci(m["auc_samples"]),
            _ci(v.get("auc_samples"), True),
            _ci(m.get(f"pass_at_{k}")),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines), f"{sweep}/report.json"


def _gain(m: dict) -> str:
    """The mean over seeds of final minus base pass@1, in points (each seed against its own base)."""
    pairs = list(zip(m["base_pass_at_1"]["values"], m["pass_at_1"]["values"]))
    return f"{100 * sum(f - b for b, f in pairs) / len(pairs):+.1f}" if pairs else "–"


def sweep_run(results: Path, sweep: str) -> tuple[str, str]:
    """One sentence: how many runs, what budget, how long, on what machine."""
    report = _report(results, sweep)
    budget = ", ".join(f"{n:,} {kind}" for kind, n in report["budget"].items()) or "as configured"
    text = f"{report['runs']} runs of {budget} each; {report['compute_s'] / 60:.1f} min of run time in all"
    tuning = report.get("tuning")
    if tuning:  # the learning rates were tuned first (bench.sweep.tuning): its runs are part of the cost
        text = (
            f"{tuning['runs']} tuning runs ({tuning['wall_s'] / 60:.1f} min of run time), then {report['runs']} "
            f"runs of {budget} each ({report['compute_s'] / 60:.1f} min)"
        )
    info_path = results / sweep / "run_all.json"
    if info_path.is_file():
        info = json.loads(info_path.read_text())
        text += (
            f", {_duration(info['wall_s'])} of wall time with {info['jobs']} runs at a time on "
            f"{info['cpus']} CPUs ({info['machine']}, Python {info['python']})"
        )
    return text + ".", f"{sweep}/report.json"


def sweep_comparisons(results: Path, sweep: str) -> tuple[str, str]:
    """The report's family of comparisons on its primary metric (Holm, BH, TOST) and its MDE lines."""
    report = _report(results, sweep)
    if not report.get("analysis"):
        raise CreditBenchError(f"results/{sweep}/report.json has no comparisons (one label, or an older report)")
    return report["analysis"]["markdown"], f"{sweep}/report.json"


def sweep_credit(results: Path, sweep: str) -> tuple[str, str]:
    """The report's primary family: each credit method against its twin and its placebo, and its MDE lines."""
    return _analysis_part(results, sweep, "credit", "no credit comparisons (no credit_controls)")


def sweep_sequential(results: Path, sweep: str) -> tuple[str, str]:
    """A sequential sweep's credit family as decided round by round: the decisions and the design."""
    return _analysis_part(results, sweep, "sequential", "no sequential decisions (its spec has no sequential)")


def _analysis_part(results: Path, sweep: str, key: str, missing: str) -> tuple[str, str]:
    part = (_report(results, sweep).get("analysis") or {}).get(key)
    if not part:
        raise CreditBenchError(f"results/{sweep}/report.json has {missing}")
    return part["markdown"], f"{sweep}/report.json"


def sweep_section(results: Path, sweep: str, kind: str) -> tuple[str, str]:
    """The tables of one of the report's sections (``budget``, ``robust``, ``tuning``)."""
    from bench.report.files import budget_markdown
    from bench.sweep import tuning

    report = _report(results, sweep)
    lines = budget_markdown(report.get("budgets") or []) if kind == "budget" else []
    if kind in ("tuning", "sensitivity") and report.get("tuning"):
        lines = tuning.markdown_lines(report["tuning"])
    if kind == "sensitivity":  # the tuning section's second table: each pair's comparison at every rate
        start = next((i for i, line in enumerate(lines) if line.startswith("| method vs twin |")), len(lines))
        lines = lines[start:]
    lines = lines or (report.get(kind) or {}).get("markdown", "").split("\n")
    blocks: list[list[str]] = []
    for i, line in enumerate(lines):  # each table apart from the next by one blank line
        if line.startswith("|"):
            if i == 0 or not lines[i - 1].startswith("|"):
                blocks.append([])
            blocks[-1].append(line)
    if not blocks:
        raise CreditBenchError(f"results/{sweep}/report.json has no {kind} section")
    return "\n\n".join("\n".join(b) for b in blocks), f"{sweep}/report.json"


def sweep_blame(results: Path, sweep: str) -> tuple[str, str]:
    """The report's blame-alignment table (without its heading and explanation)."""
    from bench.report.comparisons import blame_markdown

    report = _report(results, sweep)
    lines = blame_markdown(report.get("blame") or [])
    if not lines:
        raise CreditBenchError(f"results/{sweep}/report.json has no blame alignment (its tasks report no blame)")
    return "\n".join(line for line in lines if line.startswith("|")), f"{sweep}/report.json"


def markdown_tables(results: Path, name: str) -> tuple[str, str]:
    """The Markdown tables of a results file (``PATH.md``), or its N-th (``PATH.md#N``)."""
    rel, _, nth = name.partition("#")
    path = results / rel
    if not path.is_file():
        raise CreditBenchError(f"{path} not found (named by a results block); its benchmark writes it")
    tables: list[list[str]] = []
    previous = ""
    for line in path.read_text().splitlines():
        if line.startswith("|"):
            if not previous.startswith("|"):
                tables.append([])
            tables[-1].append(line)
        previous = line
    if not tables:
        raise CreditBenchError(f"{path} has no Markdown table")
    if nth:
        if not nth.isdigit() or not 1 <= int(nth) <= len(tables):
            raise CreditBenchError(f"{path} has {len(tables)} tables; '#{nth}' must be a number in 1..{len(tables)}")
        tables = [tables[int(nth) - 1]]
    return "\n\n".join("\n".join(t) for t in tables), rel


def paper_analogue(results: Path, name: str) -> tuple[str, str]:
    from bench.report.papers.analogue import render_analogue
    from bench.report.papers.data import load_paper, load_report, sweep_name

    paper = load_paper(name)
    if paper.analogue is None:
        raise CreditBenchError(f"paper {name!r} has no analogue sweep (results/papers/{name}.yaml)")
    sweep = sweep_name(paper, paper.analogue)
    report = load_report(results, sweep)
    if report is None:
        raise CreditBenchError(
            f"results/{sweep}/report.json is missing: run ./run_all.sh results/papers/{paper.analogue}"
        )
    body = render_analogue(paper, report, sweep).split("\n", 2)[2]  # without its heading
    return body, f"{sweep}/report.json"


def generate(source: str, results: Path) -> tuple[str, str]:
    """The Markdown a block of ``source`` holds, and the results file it comes from (relative)."""
    if source.endswith(".md") or ".md#" in source:
        return markdown_tables(results, source)
    sweep, _, kind = source.rpartition("/")
    if kind == "analogue" and sweep.startswith("papers/"):
        return paper_analogue(results, sweep[len("papers/") :])
    if kind == "summary" and sweep:
        return sweep_summary(results, sweep)
    if kind == "run" and sweep:
        return sweep_run(results, sweep)
    if kind == "comparisons" and sweep:
        return sweep_comparisons(results, sweep)
    if kind == "blame" and sweep:
        return sweep_blame(results, sweep)
    if kind == "credit" and sweep:
        return sweep_credit(results, sweep)
    if kind == "sequential" and sweep:
        return sweep_sequential(results, sweep)
    if kind in ("budget", "robust", "tuning", "sensitivity") and sweep:
        return sweep_section(results, sweep, kind)
    raise CreditBenchError(
        f"unknown results block source {source!r}: use SWEEP/summary, SWEEP/run, SWEEP/credit, SWEEP/sequential, "
        "SWEEP/comparisons, SWEEP/sensitivity, "
        "SWEEP/budget, SWEEP/robust, SWEEP/tuning, SWEEP/blame, papers/NAME/analogue or PATH.md[#N]"
    )


# ---------------------------------------------------------------------------------- pages
def render(page: Path, results: Path) -> str:
    """The page's text with every results block regenerated."""

    def block(match: re.Match) -> str:
        body, source_file = generate(match["source"], results)
        link = Path(os.path.relpath(results / source_file, page.parent)).as_posix()
        return f"{match[1]}{body}\n\n<sub>Generated from [results/{source_file}]({link}).</sub>\n{match[4]}"

    return BLOCK.sub(block, page.read_text())


def pages(root: Path) -> list[Path]:
    """README.md and every Markdown page under docs/."""
    return [p for p in [root / "README.md", *sorted((root / "docs").rglob("*.md"))] if p.is_file()]
