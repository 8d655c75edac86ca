"""The report's inference: per-row intervals that respect each metric's range, the family of method
comparisons on the primary metric (bench.report.inference: method x seed model, Holm and BH, TOST,
the design's minimum detectable difference) and the blame-alignment table.

Which comparisons form the family: on every (model, training task) of the sweep, every label
against the baseline, each pair on its own variance (a paired t-test over seeds; no variance is
pooled across pairs, whose variances differ), except labels the spec's ``analysis.controls`` pairs
with their own control (e.g. a LoRA method with the rank-matched LoRA baseline), which are compared
with that control. The
primary metric is read per problem where the runs kept per-problem counts (pass@k from the unbiased
estimator), else per run.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from bench.errors import CreditBenchError
from bench.report import inference, sequential
from bench.run.result import RunResult
from bench.stats import format as fmt
from bench.stats.intervals import mean_interval, t_interval
from bench.stats.metrics import pass_at_k_per_problem
from bench.stats.paired import MIN_SEEDS
from bench.sweep.analysis import Analysis

BOUNDED = ("pass_at_", "avg_at_", "auc_", "base_pass_at_1", "truncated_frac", "greedy", "train_reward", "credit_")
"""Metrics on [0, 1] (their differences on [-1, 1]); every other report metric is >= 0."""


def bounded(metric: str) -> bool:
    return metric.startswith(BOUNDED) or metric in ("weight_gini", "weight_effective_n_ratio")


def interval(values: Sequence[float | None], metric: str, level: float = 0.95) -> dict[str, Any]:
    """Mean and interval over seeds of one metric, inside its range: for [0, 1] metrics the
    arcsine-root t-interval (bench.stats.intervals.mean_interval), else the Student-t interval cut at 0.
    Fewer than 3 defined values: the mean alone (lo and hi None), as the report's standards require."""
    out = t_interval(values, level)
    defined = [float(v) for v in values if v is not None and math.isfinite(float(v))]
    if out["mean"] is None:
        return out
    if len(defined) < MIN_SEEDS:
        return {**out, "lo": None, "hi": None}
    if bounded(metric) and all(0 <= v <= 1 for v in defined):
        lo, hi = mean_interval(np.asarray(defined), level)
        return {**out, "lo": float(lo), "hi": float(hi)}
    return {**out, "lo": max(0.0, out["lo"]) if min(defined) >= 0 else out["lo"]}


def difference(diffs: Sequence[float | None], metric: str, level: float = 0.95) -> dict[str, Any]:
    """Paired (same seed) difference to the baseline: Student-t over seeds, cut to [-1, 1] for
    bounded metrics; the mean alone with fewer than 3 pairs."""
    out = {k: v for k, v in t_interval(diffs, level).items() if k != "values"}
    if out["mean"] is None:
        return out
    if out["n"] < MIN_SEEDS:
        return {**out, "lo": None, "hi": None}
    if bounded(metric):
        out["lo"], out["hi"] = max(-1.0, out["lo"]), min(1.0, out["hi"])
    return out


def _final_point(run: RunResult, ev: str):
    return next(e for e in reversed(run.history) if ev in e.eval)


def scores(run: RunResult, ev: str, metric: str) -> Any:
    """The run's primary-metric score on ``ev``: per-problem values where the run kept per-problem
    counts and the metric is pass@k or avg@n, else the run's final value."""
    point = _final_point(run, ev)
    counts = getattr(point, "per_problem", {}).get(ev)
    n = getattr(run, "eval_n", 0)
    if counts and n and metric.startswith(("pass_at_", "avg_at_")):
        k = 1 if metric.startswith("avg_at_") else int(metric.rsplit("_", 1)[-1])
        return pass_at_k_per_problem(np.asarray(counts), n, k)
    return float(point.eval[ev][metric])


def where(model: str, task: str) -> str:
    """How a comparison names the model and training task it was made on: "task (model)"."""
    return f"{task} ({model})"


def analyse(runs: list[RunResult], baseline: str, analysis: Analysis) -> dict[str, Any] | None:
    """The family of comparisons on the primary metric (see the module docstring) as a JSON-ready
    dict: ``assessment`` (bench.report.inference.Assessment.to_dict) and its markdown; None when no
    comparison can be formed (one label only)."""
    groups: dict[tuple[str, str], dict[str, dict[int, Any]]] = defaultdict(lambda: defaultdict(dict))
    n_samples: dict[tuple[str, str], int] = {}
    for r in runs:
        if analysis.metric not in _final_point(r, r.task).eval[r.task]:
            continue
        groups[(r.model, r.task)][r.label][r.seed] = scores(r, r.task, analysis.metric)
        n_samples[(r.model, r.task)] = getattr(r, "eval_n", 0) or None
    comparisons, credit = [], []
    for (model, task), by_label in groups.items():
        on = where(model, task)
        controlled = {lab: c for lab, c in analysis.controls.items() if lab in by_label and c in by_label}
        main = {lab: s for lab, s in by_label.items() if lab not in controlled and analysis.control(lab) != "placebo"}
        settings = (on, analysis.metric, analysis.margin, 0.95, n_samples[(model, task)])
        pairs = [(baseline, lab) for lab in sorted(main) if lab != baseline] if baseline in main else []
        for control, lab in pairs + [(c, lab) for lab, c in controlled.items()]:  # each pair on its own variance
            comparisons.append(inference.compare({control: by_label[control], lab: by_label[lab]}, control, *settings))
        credit += _credit_family(by_label, analysis.credit_controls, settings)
    if not comparisons and not credit:
        if runs and not groups:  # a metric no run has: say which it has rather than drop the comparisons
            have = sorted(k for k in _final_point(runs[0], runs[0].task).eval[runs[0].task] if not k.endswith("_se"))
            valid = ", ".join(have)
            raise CreditBenchError(f"analysis.metric {analysis.metric!r} is not in the runs' eval; valid: {valid}")
        return None
    out: dict[str, Any] = {"metric": analysis.metric}
    if comparisons:
        a = inference.assess(comparisons, analysis.alpha, analysis.power)
        out |= {"assessment": a.to_dict(), "markdown": inference.markdown(a)}
    if credit:
        out |= _primary(credit, runs, analysis)
    return out


def _primary(credit: list, runs: list[RunResult], analysis: Analysis) -> dict[str, Any]:
    """The primary family: each credit method against its own credit controls, adjusted on its own; in a
    sequential sweep also decided round by round (``sequential``), and then its table prints each pair's
    repeated confidence interval, the one valid after the sequential stop (``credit.repeated``), where the
    assessment keeps the fixed-design one."""
    a = inference.assess(credit, analysis.alpha, analysis.power)
    out: dict[str, Any] = {"credit": {"assessment": a.to_dict(), "markdown": inference.markdown(a)}}
    if analysis.sequential:
        pairs = credit_pairs(runs, analysis)
        result = sequential_family(pairs, analysis)
        needs = sequential.per_label(sequential.seeds_to_run(result), pairs)
        out["sequential"] = {"analysis": result.to_dict(), "markdown": sequential.markdown(result), "needs": needs}
        rows, label = repeated(result, pairs), sequential.label(analysis.alpha)
        out["credit"]["markdown"] = inference.markdown(_with_repeated(a, result, pairs), label, "verdict (rounds)")
        out["credit"]["repeated"] = {"label": label, "rows": rows}
    return out


def sequential_family(pairs: dict[str, dict[str, Any]], analysis: Analysis) -> sequential.Sequential:
    """The primary family decided by the group-sequential analysis (bench.report.sequential) of each
    pair's differences (:func:`credit_pairs`) in ascending seed order, the seeds both labels have from
    the first on."""
    diffs = {name: [p["diffs"][s] for s in sorted(p["diffs"])] for name, p in pairs.items()}
    return sequential.analyse(diffs, analysis.sequential, analysis.alpha, analysis.margin)


def repeated(result: sequential.Sequential, pairs: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """Each decision's difference and repeated confidence interval, keyed as the credit table's rows are:
    ``{method, control, task: "task (model)", value, lo, hi, verdict}``."""
    out = []
    for d in result.decisions:
        p = pairs[d.name]
        on = where(p["model"], p["task"])
        out.append({"method": p["method"], "control": p["control"], "task": on, "value": d.diff, "lo": d.lo,
                    "hi": d.hi, "verdict": str(d.verdict)})  # fmt: skip
    return out


def _with_repeated(
    a: inference.Assessment, result: sequential.Sequential, pairs: dict[str, dict[str, Any]]
) -> inference.Assessment:
    """``a`` with each pair's difference, interval and verdict those of its sequential decision."""
    by = {}
    for d in result.decisions:
        p = pairs[d.name]
        by[(p["method"], p["control"], where(p["model"], p["task"]))] = d
    order = [(c, lab) for c in a.comparisons for lab in c.diffs]  # the rows' order (inference.assess)
    shown = []
    for row, (c, lab) in zip(a.rows, order):
        d = by.get((lab, c.baseline, c.task))
        if d is not None and d.diff is not None:
            row = replace(row, diff=replace(row.diff, value=d.diff, lo=d.lo, hi=d.hi), verdict=d.verdict)
        shown.append(row)
    return replace(a, rows=shown)


def _credit_family(by_label: dict, credit_controls: dict[str, list[str]], settings: tuple) -> list:
    """Each credit method's comparisons with its credit controls (twin, placebo) that have runs."""
    pairs = [(lab, c) for lab, cs in credit_controls.items() for c in cs if lab in by_label and c in by_label]
    return [inference.compare({c: by_label[c], lab: by_label[lab]}, c, *settings) for lab, c in pairs]


def credit_pairs(runs: list[RunResult], analysis: Analysis) -> dict[str, dict[str, Any]]:
    """The primary family's comparisons (each credit method against each of its credit controls, per
    model and training task) with their paired differences on the primary metric, per seed both
    labels have: ``{name: {method, control, model, task, diffs: {seed: method - control}}}``, the
    name "<method> vs <control> (<task>, <model>)"."""
    by: dict[tuple[str, str], dict[str, dict[int, float]]] = defaultdict(lambda: defaultdict(dict))
    for r in runs:
        if analysis.metric in _final_point(r, r.task).eval[r.task]:
            by[(r.model, r.task)][r.label][r.seed] = float(np.mean(scores(r, r.task, analysis.metric)))
    out = {}
    for (model, task), labels in sorted(by.items()):
        for lab, controls in analysis.credit_controls.items():
            for c in controls:
                if lab in labels and c in labels:
                    common = sorted(set(labels[lab]) & set(labels[c]))
                    out[f"{lab} vs {c} ({task}, {model})"] = {
                        "method": lab, "control": c, "model": model, "task": task,
                        "diffs": {s: labels[lab][s] - labels[c][s] for s in common},
                    }  # fmt: skip
    return out


BLAME_KEYS = ("share", "uniform_share", "rank_frac", "top1", "n")


def blame_table(runs: list[RunResult]) -> list[dict[str, Any]]:
    """Per (model, task, label): blame alignment at the base policy (RunResult.blame), mean over
    seeds with its interval where there are 3 or more."""
    groups: dict[tuple[str, str, str], list[dict[str, float]]] = defaultdict(list)
    for r in runs:
        b = getattr(r, "blame", None) or {}
        if b.get("n"):
            groups[(r.model, r.task, r.label)].append(b)
    out = []
    for (model, task, label), bs in sorted(groups.items()):
        row: dict[str, Any] = {"model": model, "task": task, "method": label, "seeds": len(bs)}
        for k in BLAME_KEYS:
            vals = [b.get(k) for b in bs]
            row[k] = interval(vals, "credit_" if k != "n" else "n")
        out.append(row)
    return out


def blame_markdown(rows: list[dict[str, Any]]) -> list[str]:
    """The blame-alignment table: where each method puts its credit on failed completions."""
    if not rows:
        return []

    def f(ci: dict) -> str:  # the probe and the base policy are the same for every seed: one value, no interval
        return fmt.number(ci.get("mean"))

    out = [
        "## Blame alignment",
        "",
        "On a fixed probe set of failed completions sampled once from the base policy: the share of each method's "
        "effective credit |−∂L/∂log π| on the first wrong token (uniform credit gives the uniform share), that "
        "token's rank among the completion's tokens as a fraction (0: the most credited) and how often it is "
        "the most credited. Measured at the base policy on completions sampled with a fixed seed, so every method "
        "sees the same completions and every seed gives the same value.",
        "",
        "| model | task | method | seeds | share on first wrong token | uniform share | rank fraction | top-1 "
        "| probes |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        out.append(
            f"| {r['model']} | {r['task']} | {r['method']} | {r['seeds']} | {f(r['share'])} | {f(r['uniform_share'])} "
            f"| {f(r['rank_frac'])} | {f(r['top1'])} | {r['n']['mean']:.0f} |"
        )
    out.append("")
    return out
