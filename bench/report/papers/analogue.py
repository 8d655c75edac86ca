"""A paper's results beside their embedded analogues, sweeps this suite can run anywhere.

The configurations table (``render_analogue``): the same configurations (the paper file's result
``label``s) run by a sweep at small scale (the paper file's ``analogue``), one row per
configuration, each metric's cell ``paper · measured``.

A measured value is the mean over seeds with its 95% t-interval, clipped to [0, 1] (every metric
here is a fraction or a rate: the interval of a bounded quantity stays inside its range). Under
the table, the design's minimum detectable difference: for each metric, the smallest paired
difference from the sweep's baseline configuration that a two-sided t-test over the seeds detects
with 80% power at alpha 0.05, Bonferroni-corrected for the comparisons with the baseline, from the
pooled standard deviation of the paired per-seed differences. The table compares nothing itself;
a difference smaller than that line is not one this design can resolve.

The claims table (``render_claims``): each comparison a paper makes (its file's ``analogues``) beside the same
comparison in a sweep's report.json (bench/report/comparisons.py): the primary family
(``analysis.credit``: each credit method against its credit-off twin and placebo) or the secondary
one (``analysis.assessment``: every label against the sweep's baseline), with its difference, 95%
interval, Holm-adjusted verdict and whether it agrees with the paper's sign (``agreement``).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

import yaml

from bench.errors import CreditBenchError
from bench.report.comparisons import where
from bench.report.credit_table import rate
from bench.report.inference import row_pairs
from bench.report.papers.data import METRIC_PATTERN, UNITS, Paper, PaperResult
from bench.stats import format as fmt
from bench.stats.power import mde

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

    def number(x: float) -> str:  # a fraction clipped to [0, 1], in the entry's unit
        return fmt.rounded(min(1.0, max(0.0, x)) * scale, digits)

    m = ((row or {}).get("metrics") or {}).get(entry.metric)
    if not isinstance(m, dict) or not isinstance(m.get("mean"), (int, float)):
        return f"{fmt.rounded(entry.value, digits)} · -"
    text = f"{fmt.rounded(entry.value, digits)} · {number(m['mean'])}"
    lo, hi = m.get("lo"), m.get("hi")
    if isinstance(lo, (int, float)) and isinstance(hi, (int, float)) and (m.get("n") or 0) > 1:
        text += f" [{number(lo)}, {number(hi)}]"
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


# ------------------------------------------------------------------------------- claims


@dataclass(frozen=True)
class Claim:
    """A comparison a paper makes and its embedded analogue: ``label`` vs ``control`` on ``task``
    and ``model`` in results/<sweep>/report.json."""

    text: str
    label: str
    control: str
    what: str
    """What the analogue comparison isolates."""
    method: str | None = None
    vs: str | None = None
    """The paper's method and baseline whose ``kind: delta`` results are the paper's side; None: the
    difference of the paper's absolute values of ``label`` and ``control``."""
    sign: int = 0
    """The direction the paper claims where it states no number (+1: the method is better)."""
    unstated: str = "none stated"
    """The paper cell where it states no number."""
    sweep: str = "embedded"
    task: str = "chain"
    model: str = "tiny-500k"
    paper_label: str | None = None
    paper_control: str | None = None
    """The paper's labels of the comparison where they are not the analogue's (``label``, ``control``): the
    paper's absolute values whose difference is its side."""


def paper_claims(paper: Paper) -> tuple[Claim, ...]:
    """The comparisons ``paper`` makes and the analogue of each: the ``analogues`` list of its YAML
    file (none: no claims table); an entry that is not a Claim's fields is a one-line error."""
    raw = (yaml.safe_load(paper.path.read_text()) or {}).get("analogues") or []
    fields = {f.name for f in dataclasses.fields(Claim)}
    out = []
    for i, c in enumerate(raw if isinstance(raw, list) else [raw]):
        if not isinstance(c, dict) or set(c) - fields or not {"text", "label", "control", "what"} <= set(c):
            raise CreditBenchError(
                f"{paper.path.name}: analogues[{i}] must be a mapping with text, label, control and what "
                f"(optional: {', '.join(sorted(fields - {'text', 'label', 'control', 'what'}))}), got {c!r}"
            )
        out.append(Claim(**c))
    return tuple(out)


@dataclass(frozen=True)
class Found:
    """One row of a report's family of comparisons, with that comparison's MDE and the family."""

    row: dict
    mde: float | None
    alpha: float
    family: str
    repeated: dict | None = None
    """The comparison's repeated interval where the sweep decided it in rounds (valid after the sequential
    stop, which the fixed-design interval of ``row`` is not)."""


def _sign(value: float, relation: str = "=") -> int:
    """The sign a stated value claims: 0 for none, or for a bound that allows either sign."""
    s = (value > 0) - (value < 0)
    return 0 if (relation in ("<", "<=") and s > 0) or (relation in (">", ">=") and s < 0) else s


def _name(metric: str) -> str:
    return NAMES.get(metric, metric.replace("pass_at_", "pass@"))


def paper_side(paper: Paper, claim: Claim) -> tuple[str, int]:
    """The paper's side of ``claim`` in points, grouped by metric, and the sign every one of its
    numbers shares (0: none, or they differ)."""
    if claim.method is not None:
        entries = [e for e in paper.results if e.kind == "delta" and (e.method, e.vs) == (claim.method, claim.vs)]
        # a percent is a point; a fraction x 100
        items = [(e.metric, e.value * 100 / UNITS[e.unit], e.relation, f" {e.model}") for e in entries]
    else:
        value = {(e.label, e.metric): e.value * 100 / UNITS[e.unit] for e in paper.results if e.kind == "absolute"}
        metrics = dict.fromkeys(m for _, m in value if m == "greedy" or METRIC_PATTERN.fullmatch(m))
        label, control = claim.paper_label or claim.label, claim.paper_control or claim.control
        items = [
            (m, value[(label, m)] - value[(control, m)], "=", "")
            for m in metrics
            if (label, m) in value and (control, m) in value
        ]
    if not items:
        return claim.unstated, claim.sign
    groups: dict[str, list[str]] = {}
    for metric, v, rel, who in items:
        groups.setdefault(metric, []).append(f"{'' if rel == '=' else rel + ' '}{v:+.2f}{who}")
    signs = {_sign(v, rel) for _, v, rel, _ in items}
    text = "; ".join(f"{_name(m)}: {', '.join(parts)}" for m, parts in groups.items())
    return text, signs.pop() if len(signs) == 1 else 0


def find(report: dict, claim: Claim) -> Found | None:
    """``claim``'s analogue row in the primary family of ``report``, else its secondary one."""
    analysis = report.get("analysis") or {}
    on = where(claim.model, claim.task)
    for family, a in (
        ("primary", (analysis.get("credit") or {}).get("assessment")),
        ("secondary", analysis.get("assessment")),
    ):
        for label, base, task, row, mdd in row_pairs(a if isinstance(a, dict) else {}):
            if (label, base, task) == (claim.label, claim.control, on) and isinstance(row, dict):
                return Found(row, mdd, a.get("alpha", 0.05), family, _repeated(analysis, claim, on, family))
    return None


def _repeated(analysis: dict, claim: Claim, on: str, family: str) -> dict | None:
    """The repeated interval the sweep's rounds give ``claim``'s comparison (its credit family only)."""
    if family != "primary":
        return None
    rows = ((analysis.get("credit") or {}).get("repeated") or {}).get("rows") or []
    key = (claim.label, claim.control, on)
    found = (r for r in rows if isinstance(r, dict) and (r.get("method"), r.get("control"), r.get("task")) == key)
    return next(found, None)


def agreement(paper_sign: int, diff: float, significant: bool, mdd: float | None) -> str:
    """agrees / disagrees where the analogue's difference is significant and has the paper's sign /
    the opposite one; else not resolved, with the design's MDE (``mdd``, a fraction) in points."""
    if significant and paper_sign:
        return "agrees" if diff * paper_sign > 0 else "disagrees"
    if significant:
        return "no sign to compare (the paper's numbers differ in sign)"
    return f"not resolved (MDE {100 * mdd:.1f} points)" if mdd is not None else "not resolved (no MDE: under 3 seeds)"


def _points(x: float) -> str:
    return fmt.rounded(100 * x, 1, signed=True)


def _analogue_cells(found: Found, paper_sign: int) -> list[str]:
    diff, row = found.row.get("diff") or {}, found.row
    value, lo, hi, p = diff.get("value"), diff.get("lo"), diff.get("hi"), row.get("p_holm")
    if not isinstance(value, (int, float)):
        return ["-", "-", "-"]
    rounds = found.repeated or {}
    sequential = isinstance(rounds.get("lo"), (int, float)) and isinstance(rounds.get("hi"), (int, float))
    if sequential:  # after a sequential stop: the interval and the decision valid for the design, no fixed p
        lo, hi = rounds["lo"], rounds["hi"]
    ci = f" [{_points(lo)}, {_points(hi)}]" if isinstance(lo, (int, float)) and isinstance(hi, (int, float)) else ""
    if sequential:
        decided = rounds.get("verdict", "-")
        significant, verdict = decided in ("better", "worse"), f"{decided} (in rounds)"
        ci += ", repeated"
    else:
        significant = isinstance(p, (int, float)) and p < found.alpha
        verdict = row.get("verdict", "-") + (f" (p_Holm {fmt.p_value(p)})" if isinstance(p, (int, float)) else "")
    return [
        _points(value) + (ci or " (no interval)"),
        f"{verdict}, {found.family}",
        "within its equivalence bound: no direction to compare"
        if verdict.startswith("equivalent")
        else agreement(paper_sign, value, significant, found.mde),
    ]


def per_update(probes: dict[str, dict], claim: Claim, table: dict[str, dict] | None = None) -> str:
    """``claim``'s comparison per update: a credit method against its twin where the credit table has the
    method's row (``table``: label -> size -> its cell, results/credit/table.json) reads the table's cell
    at every size it measured (the rate by the table's rule: the pair's tuned rate, or the size's own);
    else each probe of its sweep (size -> the probe's report.json) at the pair's tuned rates where the
    probe has them, else its lowest common rate. The difference in points of J [its interval] and its
    verdict; "-" where nothing compared the pair."""
    cells = []
    own = (table or {}).get(claim.label) if claim.control == f"{claim.label}-twin" else None
    for size, c in (own or {}).items():
        if c:
            cells.append(f"{size}, {rate(c)}: {c['mean']:+.2f} [{c['lo']:+.2f}, {c['hi']:+.2f}] {c['verdict']}")
    if own:
        return "; ".join(cells) or "-"
    for size, rep in probes.items():
        comps = [c for c in rep.get("comparisons", []) if (c["method"], c["control"]) == (claim.label, claim.control)]
        if not comps:
            continue
        tuned = [c for c in comps if c.get("setting") == "tuned"]
        c = tuned[0] if tuned else min(comps, key=lambda c: c["lr_method"])
        lr = "tuned" if tuned else f"lr {c['lr_method']:g}"
        cells.append(f"{size}, {lr}: {c['mean']:+.2f} [{c['lo']:+.2f}, {c['hi']:+.2f}] {c['verdict']}")
    return "; ".join(cells) or "-"


def render_claims(
    paper: Paper,
    reports: dict[str, dict | None],
    probes: dict[str, dict[str, dict]] | None = None,
    table: dict[str, dict] | None = None,
) -> str:
    """The claims table of ``paper`` against ``reports`` (sweep -> report.json or None), the sweeps'
    credit probes (sweep -> size -> report.json) and the credit table's cells (label -> size -> cell);
    '' without claims."""
    claims = paper_claims(paper)
    if not claims:
        return ""
    where = "; ".join(dict.fromkeys(f"{c.model}, {c.task}" for c in claims))
    metric = next((r["analysis"].get("metric") for r in reports.values() if r and r.get("analysis")), None)
    lines = [
        f"### Embedded analogue ({where}; not a reproduction)",
        "",
        "Each claim beside the same comparison in a tiny model's sweep on a synthetic task "
        f"({', '.join(f'results/{s}/report.json' for s in reports)}): the difference in points [95% "
        "interval over seeds; repeated: the sweep decided it in seeds by rounds, and the interval and the "
        "decision are the rounds', valid after the sequential stop] and its verdict after Holm within its "
        "family (primary: each credit "
        "method against its own controls, vs twin = the credit alone; secondary: every label against "
        "the sweep's baseline, vs GRPO = the whole recipe). agrees / disagrees: significant, with the "
        "paper's sign / against it; not resolved: not significant, beside the smallest difference the "
        "design detects with 80% power (MDE). Agreement says the direction holds at this scale; it "
        "reproduces no number of the paper. Per update: a credit method against its twin as the credit table "
        "has it at each size it measured (results/credit/table.md), another pair in the sweep's credit probe "
        "(one update from the same weights and batch, points of J [repeated interval over reference "
        "trajectories], its verdict in rounds).",
        "",
        f"| paper claim | paper Δ, points | analogue | analogue Δ{' ' + _name(metric) if metric else ''}, points "
        "| verdict, family | agrees? | per update, points of J |",
        "|---|---|---|---|---|---|---|",
    ]
    for c in claims:
        text, sign = paper_side(paper, c)
        report = reports.get(c.sweep)
        found = find(report, c) if report is not None else None
        if found is None:
            why = "no report.json" if report is None else f"no `{c.label}` vs `{c.control}` on {c.task}"
            cells = [f"not run in results/{c.sweep} ({why})", "-", "-"]
        else:
            cells = _analogue_cells(found, sign)
        cells.append(per_update((probes or {}).get(c.sweep) or {}, c, table))
        lines.append(f"| {c.text} | {text} | `{c.label}` vs `{c.control}`: {c.what} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def claims_section(paper: Paper, results_dir: Any) -> str:
    """The claims table of ``paper`` from its claims' sweeps' report.json files, or '' without claims."""
    from bench.report.papers.data import credit_table_cells, load_report, sweep_probes

    sweeps = dict.fromkeys(c.sweep for c in paper_claims(paper))
    reports = {s: load_report(results_dir, s) for s in sweeps}
    probes = {s: sweep_probes(results_dir, s) for s in sweeps}
    return render_claims(paper, reports, probes, credit_table_cells(results_dir))
