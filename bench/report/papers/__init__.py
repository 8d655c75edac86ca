"""Paper tables: a seed paper's own numbers beside what this suite measured in its setting.

Each paper has ``results/papers/<name>.yaml`` (what the paper states, with the research notes'
status of every value) and ``results/papers/<name>.sweep.yaml`` (a sweep spec that re-runs its
setting). ``creditbench table --paper NAME`` prints one Markdown row per paper result::

    creditbench table --paper selective_traces                 # the paper's own sweep
    creditbench table --paper grpo_lambda --sweep my-rerun --sweep paper-grpo_lambda

The paper files and their format: bench/report/papers/data.py.

Measured values come from ``results/<sweep>/report.json`` (bench/report/summary.py): the mean and 95%
t-interval over seeds of the row with the same method, model and eval task. For a delta, the
row's ``vs_baseline`` when the sweep's baseline is the entry's ``vs``, else the paired per-seed
difference of the two rows; an average over benchmarks is taken per seed first. A dash means not
run or not found.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.errors import CreditBenchError
from bench.report.papers.data import (
    AVERAGE,
    SETTING_KEYS,
    STATUSES,
    UNITS,
    Paper,
    PaperResult,
    load_paper,
    load_report,
    sweep_name,
)
from bench.stats import format as fmt


@dataclass(frozen=True)
class Measured:
    """A measured value (a fraction, as in report.json) with its 95% interval over seeds."""

    mean: float
    lo: float | None
    hi: float | None
    n: int
    sweep: str


# ------------------------------------------------------------------------------- measuring


def same_model(measured: Any, paper_model: str) -> bool:
    """``Qwen/Qwen3-1.7B`` (a sweep's model) matches ``Qwen3-1.7B`` (the paper's name): equal as
    given or by the last path component, ignoring case."""
    if not isinstance(measured, str):
        return False
    a, b = measured.strip().rstrip("/").lower(), paper_model.strip().rstrip("/").lower()
    return a == b or a.rsplit("/", 1)[-1] == b.rsplit("/", 1)[-1]


def interval(values: list[float]) -> tuple[float, float | None, float | None]:
    """Mean and 95% t-interval of per-seed values, as report.json computes them (bench.stats.intervals);
    no interval from a single value."""
    from bench.stats.intervals import t_interval

    ci = t_interval(values)
    return (ci["mean"], ci["lo"], ci["hi"]) if len(values) > 1 else (ci["mean"], None, None)


def _groups(report: dict, method: str, model: str, label: str | None) -> list[tuple[str, str, dict[str, dict]]]:
    """Rows of one method and model grouped by (label, training task) -> {eval task: row}; the
    group labelled as the method itself comes first, then report order."""
    groups: dict[tuple[str, str], dict[str, dict]] = {}
    for row in report.get("rows", []):
        if not isinstance(row, dict) or row.get("method_name") != method or not same_model(row.get("model"), model):
            continue
        if label is not None and row.get("method") != label:
            continue
        groups.setdefault((row.get("method"), row.get("task")), {}).setdefault(row.get("eval_task"), row)
    ordered = sorted(groups.items(), key=lambda kv: kv[0][0] != method)
    return [(lab, task, rows) for (lab, task), rows in ordered]


def _per_seed(rows: list[dict], metric: str) -> dict[Any, float] | None:
    """seed -> mean over ``rows`` (benchmarks) of the metric, for seeds every row has a value for."""
    per_row = []
    for row in rows:
        m = (row.get("metrics") or {}).get(metric)
        if not isinstance(m, dict):
            return None
        values, seeds = m.get("values"), row.get("seeds")
        if not isinstance(values, list) or not isinstance(seeds, list) or len(values) != len(seeds):
            return None
        per_row.append({s: v for s, v in zip(seeds, values) if isinstance(v, (int, float))})
    common = set.intersection(*(set(d) for d in per_row)) if per_row else set()
    return {s: sum(d[s] for d in per_row) / len(per_row) for s in common} or None


def _summary(m: Any) -> tuple[float, float | None, float | None, int] | None:
    """(mean, lo, hi, n) of a report metric entry, or None when it has no mean."""
    if not isinstance(m, dict) or not isinstance(m.get("mean"), (int, float)):
        return None
    lo, hi = m.get("lo"), m.get("hi")
    return (
        float(m["mean"]),
        lo if isinstance(lo, (int, float)) else None,
        hi if isinstance(hi, (int, float)) else None,
        int(m.get("n") or len(m.get("values") or []) or 1),
    )


def _baseline_matches(report: dict, vs: str, model: str) -> bool:
    """Whether the sweep's baseline label is ``vs`` or a row labelled with it runs method ``vs``."""
    base = report.get("baseline")
    if base == vs:
        return True
    return any(
        isinstance(r, dict)
        and r.get("method") == base
        and r.get("method_name") == vs
        and same_model(r.get("model"), model)
        for r in report.get("rows", [])
    )


def measure_in(entry: PaperResult, report: dict, sweep: str) -> Measured | None:
    """The measured counterpart of ``entry`` in one sweep report, or None when it has no such rows."""
    needed = entry.eval_tasks
    chosen = next(
        (
            (lab, task, rows)
            for lab, task, rows in _groups(report, entry.method, entry.model, entry.label)
            if all(t in rows for t in needed)
        ),
        None,
    )
    if chosen is None:
        return None
    _, task, rows_by_task = chosen
    rows = [rows_by_task[t] for t in needed]
    if entry.kind == "absolute":
        if len(rows) == 1:
            s = _summary((rows[0].get("metrics") or {}).get(entry.metric))
            return Measured(s[0], s[1], s[2], s[3], sweep) if s else None
        per_seed = _per_seed(rows, entry.metric)
        if per_seed is None:
            return None
        mean, lo, hi = interval(list(per_seed.values()))
        return Measured(mean, lo, hi, len(per_seed), sweep)
    assert entry.vs is not None
    if len(rows) == 1 and _baseline_matches(report, entry.vs, entry.model):
        s = _summary((rows[0].get("vs_baseline") or {}).get(entry.metric))
        if s:
            return Measured(s[0], s[1], s[2], s[3], sweep)
    base_groups = [g for g in _groups(report, entry.vs, entry.model, None) if all(t in g[2] for t in needed)]
    base_groups.sort(key=lambda g: g[1] != task)  # the same training task first
    if not base_groups:
        return None
    ours, theirs = _per_seed(rows, entry.metric), _per_seed([base_groups[0][2][t] for t in needed], entry.metric)
    if ours is None or theirs is None:
        return None
    paired = [ours[s] - theirs[s] for s in ours if s in theirs]
    if not paired:
        return None
    mean, lo, hi = interval(paired)
    return Measured(mean, lo, hi, len(paired), sweep)


def measure(entry: PaperResult, reports: list[tuple[str, dict | None]]) -> Measured | None:
    """The first sweep (in the given order) that measured ``entry``."""
    for sweep, report in reports:
        if report is not None:
            found = measure_in(entry, report, sweep)
            if found is not None:
                return found
    return None


# ------------------------------------------------------------------------------- rendering


def _mark(status: str | None) -> str:
    return f" [{STATUSES[status]}]" if status and status != "verified" else ""


def _plain(value: Any) -> str:
    if value is None:
        return "?"
    if isinstance(value, list):
        return ", ".join(_plain(v) for v in value)
    if isinstance(value, dict):
        return ", ".join(f"{k}: {_plain(v)}" for k, v in value.items())
    return str(value)


def setting_line(paper: Paper) -> str:
    """One line: every required setting item with its status mark ([?] unknown)."""
    parts = []
    for key, label in SETTING_KEYS.items():
        item = paper.setting[key]
        mark = "" if item.status == "unknown" else f" [{STATUSES[item.status]}]"
        parts.append(f"{label} {_plain(item.value)}{mark}")
    return "**Setting**: " + "; ".join(parts)


def _spec(entry: PaperResult) -> str:
    """How a value in the entry's unit is written: 2 decimals for percent, 3 for fractions; a delta signed."""
    return f"{'+' if entry.kind == 'delta' else ''}.{2 if entry.unit == 'percent' else 3}f"


def paper_cell(entry: PaperResult) -> str:
    rel = "" if entry.relation == "=" else f"{entry.relation} "
    text = fmt.number(entry.value, _spec(entry)) + _mark(entry.statuses.get("value"))
    return f"{rel}{text}" + (f" vs {entry.vs}" if entry.kind == "delta" else "")


def measured_cell(entry: PaperResult, m: Measured | None) -> str:
    if m is None:
        return "-"
    scale, spec = UNITS[entry.unit], _spec(entry)
    if m.n > 1 and m.lo is not None and m.hi is not None:
        return f"{fmt.interval(m.mean * scale, m.lo * scale, m.hi * scale, spec)} (n={m.n})"
    return f"{fmt.number(m.mean * scale, spec)} (n={m.n})"


def benchmark_cell(entry: PaperResult) -> str:
    if entry.benchmark == AVERAGE:
        return f"average of {', '.join(entry.over)}{_mark(entry.statuses.get('over'))}"
    return entry.benchmark + _mark(entry.statuses.get("benchmark"))


def render(paper: Paper, reports: list[tuple[str, dict | None]]) -> str:
    """The Markdown table of ``paper`` against the given sweep reports (first match wins)."""
    lines = [
        f"## {paper.title} (arXiv {paper.arxiv})",
        "",
        f"Methods: {', '.join(paper.methods)}; research notes: methods.md {paper.methods_md}; "
        f"sweep spec: results/papers/{paper.sweep}.",
        "",
        setting_line(paper),
        "",
    ]
    if paper.results:
        lines += [
            "| method | model | benchmark | metric | paper | measured | sweep | source |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for e in paper.results:
            m = measure(e, reports)
            lines.append(
                f"| {e.method}{_mark(e.statuses.get('method'))} | {e.model}{_mark(e.statuses.get('model'))} "
                f"| {benchmark_cell(e)} | {e.metric}{_mark(e.statuses.get('metric'))} | {paper_cell(e)} "
                f"| {measured_cell(e, m)} | {m.sweep if m else '-'} | {' '.join(e.source.split())} |"
            )
        lines += [
            "",
            "Paper values and measured values in percent points where the unit is percent; "
            "measured: mean [95% t-interval] over n seeds (a delta: paired per seed, or the report's "
            "vs_baseline); [S] second-hand, [R] reconstructed attribution; - not run or not found.",
        ]
    else:
        lines.append(f"No verified numbers: {' '.join(paper.results_note.split())}")
    if paper.claims:
        lines += ["", "Claims without numbers:"] + [f"- {' '.join(c.split())}" for c in paper.claims]
    missing = [s for s, r in reports if r is None]
    if missing:
        lines += ["", "Not run yet (no report.json): " + ", ".join(missing) + "."]
    return "\n".join(lines)


def table(
    paper_name: str,
    sweeps: list[str] | None = None,
    results_dir: Path | str = "results",
    papers_dir: Path | str | None = None,
) -> str:
    """Load the paper and the sweeps' reports (default: the paper's own sweep) and render the table,
    then its embedded analogues (bench/report/papers/analogue.py)."""
    from bench.report.papers.analogue import analogue_section, claims_section
    from bench.sweep.sweep import report_path

    paper = load_paper(paper_name, papers_dir)
    names = list(sweeps) if sweeps else [sweep_name(paper)]
    if sweeps and not any(report_path(results_dir, n).is_file() for n in sweeps):
        # sweeps named on the command line of which none has a report: a typo, or the wrong folder
        from bench.errors import suggestion

        reported = sorted(p.parent.name for p in Path(results_dir).glob("*/report.json"))
        raise CreditBenchError(
            f"no report.json for sweep {', '.join(map(repr, sweeps))} in {results_dir}/."
            f"{suggestion(sweeps[0], reported)} Sweeps with a report: {', '.join(reported) or '(none)'}."
        )
    sections = [analogue_section(paper, results_dir), claims_section(paper, results_dir)]
    tables = [render(paper, [(s, load_report(results_dir, s)) for s in names])] + [s for s in sections if s]
    return "\n\n".join(tables)
