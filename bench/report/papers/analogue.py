"""A paper's table beside its embedded analogue: the same configurations (the paper file's result
``label``s) run by a sweep at a scale this suite can run anywhere (the paper file's ``analogue``),
one row per configuration, each metric's cell ``paper · measured``.

A measured value is the mean over seeds with its 95% t-interval, clipped to [0, 1] (every metric
here is a fraction or a rate: the interval of a bounded quantity stays inside its range). Under
the table, the design's minimum detectable difference: for each metric, the smallest paired
difference from the sweep's baseline configuration that a two-sided t-test over the seeds detects
with 80% power at alpha 0.05, Bonferroni-corrected for the comparisons with the baseline, from the
pooled standard deviation of the paired per-seed differences. The table compares nothing itself;
a difference smaller than that line is not one this design can resolve.
"""

from __future__ import annotations

import math
from typing import Any

from bench.report.papers.data import UNITS, Paper, PaperResult
from bench.report.stats import mde

NAMES = {
    "greedy": "greedy acc",
    "pass_at_4": "pass@4",
    "train_reward": "avg train reward",
    "weight_gini": "G(w)",
    "weight_effective_n_ratio": "EffN/T",
}
"""Column headers of the metrics the paper tables use; any other metric is shown by its name."""


def _row_of(report: dict, label: str, method: str) -> dict | None:
    """The report row of configuration ``label`` on its own training task's eval split."""
    rows = [
        r
        for r in report.get("rows", [])
        if isinstance(r, dict) and r.get("method") == label and r.get("method_name") == method
    ]
    return next((r for r in rows if r.get("eval_task") == r.get("task")), rows[0] if rows else None)


def _cell(entry: PaperResult, row: dict | None) -> str:
    scale, digits = UNITS[entry.unit], 2 if entry.unit == "percent" else 3

    def fmt(x: float) -> str:
        return f"{round(x, digits) + 0.0:.{digits}f}"  # + 0.0: no "-0.000" from rounding

    m = ((row or {}).get("metrics") or {}).get(entry.metric)
    if not isinstance(m, dict) or not isinstance(m.get("mean"), (int, float)):
        return f"{fmt(entry.value)} · -"
    text = f"{fmt(entry.value)} · {fmt(min(1.0, max(0.0, m['mean'])) * scale)}"
    lo, hi = m.get("lo"), m.get("hi")
    if isinstance(lo, (int, float)) and isinstance(hi, (int, float)) and (m.get("n") or 0) > 1:
        text += f" [{fmt(min(1.0, max(0.0, lo)) * scale)}, {fmt(min(1.0, max(0.0, hi)) * scale)}]"
    return text


def _mdd(report: dict, paper: Paper, metric: str, alpha: float) -> tuple[float | None, int]:
    """Pooled-SD minimum detectable paired difference vs the report's baseline, and the seeds."""
    base = next((r for r in report.get("rows", []) if r.get("method") == report.get("baseline")), None)
    if base is None:
        return None, 0
    b = dict(zip(base.get("seeds", []), (base.get("metrics", {}).get(metric) or {}).get("values", [])))
    variances, n = [], 0
    for label in {e.label or e.method for e in paper.results} - {report.get("baseline")}:
        row = next((r for r in report.get("rows", []) if r.get("method") == label), None)
        if row is None:
            continue
        mine = dict(zip(row.get("seeds", []), (row.get("metrics", {}).get(metric) or {}).get("values", [])))
        diffs = [mine[s] - b[s] for s in mine if s in b and mine[s] is not None and b[s] is not None]
        if len(diffs) > 1:
            mean = sum(diffs) / len(diffs)
            variances.append(sum((d - mean) ** 2 for d in diffs) / (len(diffs) - 1))
            n = len(diffs)
    sd = math.sqrt(sum(variances) / len(variances)) if variances else math.nan
    if n < 2 or not math.isfinite(sd):
        return None, n
    return mde(sd, n, n - 1, alpha=alpha, paired=True), n


def render_analogue(paper: Paper, report: dict | None, sweep: str) -> str:
    """The configurations x metrics table of ``paper``'s results beside the analogue ``report``."""
    entries = [e for e in paper.results if e.kind == "absolute"]
    labels = list(dict.fromkeys(e.label or e.method for e in entries))
    metrics = list(dict.fromkeys(e.metric for e in entries))
    by_key: dict[tuple[str, str], PaperResult] = {(e.label or e.method, e.metric): e for e in entries}
    first = report["rows"][0] if report and report.get("rows") else {}
    design = (
        f" Analogue: {first.get('model')} on {first.get('task')}, {len(first.get('seeds', []))} seeds per "
        f"configuration; the paper: {entries[0].model} on {entries[0].benchmark}, one seed."
        if first and entries
        else ""
    )
    lines = [
        f"### Beside the embedded analogue ({sweep})",
        "",
        "Each cell: the paper's value · the analogue's mean over seeds [95% t-interval, clipped to the "
        "metric's range]." + design,
        "",
        "| configuration | " + " | ".join(NAMES.get(m, m) for m in metrics) + " |",
        "|---|" + "---|" * len(metrics),
    ]
    for label in labels:
        method = next(e.method for e in entries if (e.label or e.method) == label)
        row = _row_of(report, label, method) if report else None
        cells = [_cell(by_key[(label, m)], row) if (label, m) in by_key else "-" for m in metrics]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    if report is None:
        lines += ["", f"Not run yet (no results/{sweep}/report.json)."]
        return "\n".join(lines)
    k = max(1, len(labels) - 1)  # comparisons with the baseline configuration
    parts, seeds = [], 0
    for m in metrics:
        d, seeds = _mdd(report, paper, m, alpha=0.05 / k)
        parts.append(f"{NAMES.get(m, m)} {d:.3f}" if d is not None else f"{NAMES.get(m, m)} -")
    lines += [
        "",
        f"Minimum detectable paired difference from {report.get('baseline')} (80% power, two-sided, "
        f"Bonferroni alpha 0.05/{k} for the {k} comparisons with it, {seeds} seeds, pooled SD): "
        + ", ".join(parts)
        + ".",
    ]
    return "\n".join(lines)


def analogue_section(paper: Paper, results_dir: Any) -> str:
    """The analogue table of ``paper`` from results/<analogue sweep>/report.json, or '' without one."""
    from bench.report.papers.data import load_report, sweep_name

    if paper.analogue is None:
        return ""
    name = sweep_name(paper, paper.analogue)
    return render_analogue(paper, load_report(results_dir, name), name)
