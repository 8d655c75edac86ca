"""A sweep's report from its finished runs (results/<sweep>/runs/*.json): per (method, model, eval
task) the mean and 95% interval over seeds of every metric, the paired difference to the baseline,
mean learning curves, and each method's credit on one fixed completion.

    creditbench summarize --sweep NAME      (re-)writes results/NAME/{report.json, summary.md, summary.csv, *.png}

The definitions (docs/sweeps-and-reports.md, "Metrics") are computed by bench.stats.metrics; this
module only groups runs.
The report depends on the runs' results alone (no wall-clock or run ids enter a metric other
than ``wall_s``), so a sweep that was interrupted and resumed reports what an uninterrupted one does.
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from typing import Any

import numpy as np

from bench.environment.fingerprint import common
from bench.errors import CreditBenchError
from bench.report.comparisons import analyse, blame_table, difference, interval
from bench.run.result import RunResult, load_runs  # noqa: F401 (load_runs: the report's entry point)
from bench.stats.metrics import cost_to_target, curve_auc
from bench.sweep.analysis import Analysis
from bench.sweep.spec import TARGETS, SweepSpec

RUN_METRICS = (
    "auc_samples",
    "auc_tokens",
    "samples_to_target",
    "tokens_to_target",
    "tokens_per_correct",
    "mean_length",
    "truncated_frac",
    "base_pass_at_1",
    "samples",
    "tokens",
    "steps",
    "optimizer_steps",
    "wall_s",
)
"""Per-run values summarised over seeds, besides pass@k and avg@n (their keys come from the runs)."""
OPTIONAL_METRICS = {
    "greedy": "greedy",
    "train_reward": "train_reward",
    "credit_gini": "credit_gini",
    "credit_effective_token_ratio": "credit_effective_token_ratio",
    "weight_gini": "train_weight_gini",
    "weight_effective_n_ratio": "train_weight_effective_n_ratio",
}
"""Per-run values a row has when its runs recorded them -> where: ``greedy`` is the final eval's
greedy accuracy (eval.greedy), the others RunResult.train's means over the RL steps (the average
train reward, the effective credit's and ARCA's weights' Gini and effective-token ratio)."""


def _curves(run: RunResult, eval_task: str) -> tuple[list[float], list[float], list[float]]:
    h = [e for e in run.history if eval_task in e.eval]
    return (
        [float(e.samples) for e in h],
        [float(e.tokens) for e in h],
        [float(e.eval[eval_task]["pass_at_1"]) for e in h],
    )


def build_report(
    runs: list[RunResult],
    baseline: str = SweepSpec.baseline,
    target: float = SweepSpec.target,
    budget: dict[str, int] | None = None,
    sweep: str = "",
    target_of: str = SweepSpec.target_of,
    analysis: Analysis | None = None,
) -> dict[str, Any]:
    """The report dict (INTERFACES: results/<sweep>/report.json) of a sweep's runs; the baseline and
    target settings default to a sweep spec's."""
    if target_of not in TARGETS:
        raise CreditBenchError(f"target_of must be one of {', '.join(TARGETS)}, got {target_of!r}")
    groups: dict[tuple, list[RunResult]] = defaultdict(list)  # (label, model, task, eval task) -> its seeds' runs
    for r in runs:
        for ev in r.eval_tasks:
            groups[(r.label, r.model, r.task, ev)].append(r)
    horizon = _horizons(groups, budget)
    goal = _goals(groups, baseline, target, target_of)
    per_run = {key: _run_values(rs, key[3], horizon[key[1:]], goal.get(key[1:])) for key, rs in groups.items()}
    order = sorted(groups, key=lambda k: (k[3], groups[k][0].params, k[0] != baseline, k[0]))
    rows = [_row(key, groups[key], per_run, baseline, goal.get(key[1:])) for key in order]
    return {
        "sweep": sweep,
        "baseline": baseline,
        "target": target,
        "target_of": target_of,
        "budget": budget or {},
        "runs": len(runs),
        "compute_s": round(sum(r.wall_s for r in runs), 1),
        "horizons": {f"{m}/{t}/{e}": h for (m, t, e), h in horizon.items()},
        "rows": rows,
        "analysis": analyse(runs, baseline, analysis or Analysis()),
        "budgets": budget_rows(runs),
        "robust": _robust(runs, baseline, analysis or Analysis()),
        "curve_fit": _curve_fit(runs),
        "blame": blame_table(runs),
        "credit_maps": _credit_maps(runs),
        "fingerprint": common([r.fingerprint for r in runs]),
        "bases": [json.loads(b) for b in sorted({json.dumps(r.base_checkpoint, sort_keys=True) for r in runs})],
    }


def _robust(runs: list[RunResult], baseline: str, analysis: Analysis) -> dict[str, Any]:
    """rliable's summaries (bench.report.robust): IQM and P(label > its control), the control a credit
    method's first credit control (its twin) where it has one, else its analysis control or the baseline."""
    from bench.report import robust

    controls = {**analysis.controls, **{lab: cs[0] for lab, cs in analysis.credit_controls.items() if cs}}
    rows = robust.summaries(runs, baseline, analysis.metric, controls)
    return {"rows": rows, "markdown": "\n".join(robust.markdown_lines(rows))}


def _curve_fit(runs: list[RunResult]) -> dict[str, Any]:
    """ScaleRL's saturating curve per label (bench.report.curve_fit): asymptote vs efficiency."""
    from bench.report import curve_fit

    fits = curve_fit.fit_sweep(runs)
    text = "\n".join(curve_fit.markdown_lines(fits))
    if fits and not any(f["identifiable"] for f in fits):  # one sentence, not a table of the same reason
        text = (
            "Not fitted: ScaleRL's curve R(C) = R0 + (A - R0) / (1 + (C_mid / C)^B) has 3 free parameters and no "
            f"label was evaluated at more than {max(f['points'] for f in fits)} sample counts after C = 0; a sweep "
            "evaluated more often over a longer budget can tell the asymptote A from the efficiency C_mid."
        )
    return {"fits": [curve_fit.to_json(f) for f in fits], "markdown": text}


def budget_rows(runs: list[RunResult]) -> list[dict[str, Any]]:
    """Per (model, task, label): what its runs spent (samples, tokens, RL and optimizer steps: least
    and most over seeds; ``extra_samples`` where the method generated any for its own use) and where
    they were evaluated (the training samples at each eval point, one grid when every seed shares
    it); ``same_grid`` says whether every label of the (model, task) was evaluated at the same sample
    counts, as a matched-budget comparison needs."""
    groups: dict[tuple, list[RunResult]] = defaultdict(list)
    for r in runs:
        groups[(r.model, r.task, r.label)].append(r)
    rows = []
    for (model, task, label), rs in sorted(groups.items()):
        grids = {tuple(h.samples for h in r.history) for r in rs}
        spent = {
            k: [min(v), max(v)]
            for k, v in (
                ("samples", [r.samples for r in rs]),
                ("tokens", [r.tokens for r in rs]),
                ("steps", [r.steps for r in rs]),
                ("optimizer_steps", [r.optimizer_steps for r in rs]),
            )
        }
        extra = [r.extra_samples for r in rs]  # a method's own generations, only verified (IBPO's revisions)
        spent |= {"extra_samples": [min(extra), max(extra)]} if any(extra) else {}
        rows.append({"model": model, "task": task, "label": label, "seeds": len(rs), **spent,
                     "eval_samples": list(grids.pop()) if len(grids) == 1 else None})  # fmt: skip
    for row in rows:
        same = [x["eval_samples"] for x in rows if (x["model"], x["task"]) == (row["model"], row["task"])]
        row["same_grid"] = all(g is not None and g == same[0] for g in same)
    return rows


def _horizons(groups: dict[tuple, list[RunResult]], budget: dict[str, int] | None) -> dict[tuple, dict[str, float]]:
    """Per (model, task, eval task), the horizons every method's curve is observed over: the budget,
    or the least any run consumed."""
    horizon: dict[tuple, dict[str, float]] = {}
    for (_, model, task, ev), rs in groups.items():
        h = horizon.setdefault((model, task, ev), {"samples": math.inf, "tokens": math.inf})
        for r in rs:
            h["samples"] = min(h["samples"], r.samples)
            h["tokens"] = min(h["tokens"], r.tokens)
    for h in horizon.values():
        for kind in ("samples", "tokens"):
            if budget and kind in budget:
                h[kind] = float(budget[kind])
    return horizon


def _goals(groups: dict[tuple, list[RunResult]], baseline: str, target: float, target_of: str) -> dict[tuple, Any]:
    """Per (model, task, eval task), the target pass@1 (means over the baseline's seeds):
    base + target x (final - base) for target_of="gain" (None when the baseline did not improve), or
    target x final for "final"."""
    goal: dict[tuple, float | None] = {}
    for (label, model, task, ev), rs in groups.items():
        if label != baseline:
            continue
        final = float(np.mean([_final(r, ev)["pass_at_1"] for r in rs]))
        start = float(np.mean([r.history[0].eval[ev]["pass_at_1"] for r in rs]))
        if target_of == "final":
            goal[(model, task, ev)] = target * final
        else:
            goal[(model, task, ev)] = start + target * (final - start) if final > start else None
    return goal


def _run_values(rs: list[RunResult], ev: str, h: dict[str, float], g: float | None) -> dict[int, dict[str, Any]]:
    """Per seed, every per-run value of eval task ``ev`` (non-finite ones as None), with the curves'
    areas over the horizons ``h`` and the costs to the target ``g``."""
    vals = {}
    for r in rs:
        xs, xt, y = _curves(r, ev)
        f = _final(r, ev)
        v = {k: f[k] for k in f if k.startswith(("pass_at_", "avg_at_")) and not k.endswith("_se")}
        v.update(
            auc_samples=curve_auc(xs, y, h["samples"]),
            auc_tokens=curve_auc(xt, y, h["tokens"]),
            samples_to_target=cost_to_target(xs, y, g) if g is not None else None,
            tokens_to_target=cost_to_target(xt, y, g) if g is not None else None,
            tokens_per_correct=f.get("tokens_per_correct"),
            mean_length=f.get("mean_length"),
            truncated_frac=f.get("truncated_frac"),
            base_pass_at_1=r.history[0].eval[ev]["pass_at_1"],
            samples=r.samples,
            tokens=r.tokens,
            steps=r.steps,
            optimizer_steps=r.optimizer_steps or None,  # None: a result from before they were recorded
            wall_s=r.wall_s,
        )
        v.update({k: (f if k == "greedy" else r.train).get(src) for k, src in OPTIONAL_METRICS.items()})
        vals[r.seed] = {k: (None if isinstance(x, float) and not math.isfinite(x) else x) for k, x in v.items()}
    return vals


def _row(key: tuple, rs: list[RunResult], per_run: dict, baseline: str, goal: float | None) -> dict[str, Any]:
    """One report row: a (label, model, task, eval task)'s intervals over seeds and its paired
    differences to the baseline's same seeds."""
    label, model, task, ev = key
    vals = per_run[key]
    seeds = sorted(vals)
    names = [k for k in vals[seeds[0]] if k.startswith(("pass_at_", "avg_at_"))] + list(RUN_METRICS)
    names += [m for m in OPTIONAL_METRICS if any(vals[s].get(m) is not None for s in seeds)]
    base_vals = per_run.get((baseline, model, task, ev))
    vs = _versus(vals, base_vals, seeds, names) if label != baseline and base_vals else {}
    ks = sorted(int(m.split("_")[-1]) for m in names if m.startswith("pass_at_"))
    n = next((int(m.split("_")[-1]) for m in names if m.startswith("avg_at_")), max(ks))
    return {
        "target_pass_at_1": goal,
        "method": label,
        "method_name": rs[0].method,
        "lora_rank": rs[0].lora_rank,
        "model": model,
        "params": rs[0].params,
        "task": task,
        "eval_task": ev,
        "seeds": seeds,
        "ks": ks,
        "n": n,
        "metrics": {m: interval([vals[s].get(m) for s in seeds], m) for m in names},
        "vs_baseline": vs,
        "curve": _mean_curve([_curves(r, ev) for r in sorted(rs, key=lambda r: r.seed)]),
    }


def _versus(vals: dict, base_vals: dict, seeds: list[int], names: list[str]) -> dict[str, Any]:
    """Per metric, the paired difference to the baseline over the seeds both have (not for costs)."""
    paired = [s for s in seeds if s in base_vals]
    vs = {}
    for m in names:
        if m in ("samples", "tokens", "steps", "wall_s"):
            continue
        diffs = [
            None if vals[s].get(m) is None or base_vals[s].get(m) is None else vals[s][m] - base_vals[s][m]
            for s in paired
        ]
        vs[m] = difference(diffs, m) | {"seeds": paired}
    return vs


def _final(run: RunResult, eval_task: str) -> dict[str, float]:
    return next(e for e in reversed(run.history) if eval_task in e.eval).eval[eval_task]


def _mean_curve(curves: list[tuple[list[float], list[float], list[float]]]) -> dict[str, list]:
    """Seeds' curves on a common grid (the eval points of the first seed; the others interpolated):
    mean x and pass@1 with a 95% interval."""
    xs0, xt0, _ = curves[0]
    out: dict[str, list] = {"samples": xs0, "tokens": [], "pass_at_1": [], "pass_at_1_lo": [], "pass_at_1_hi": []}
    tok = np.mean([np.interp(xs0, xs, xt) for xs, xt, _ in curves], axis=0)
    out["tokens"] = [float(t) for t in tok]
    for x in xs0:
        ci = interval([float(np.interp(x, xs, y)) for xs, _, y in curves], "pass_at_1")
        out["pass_at_1"].append(ci["mean"])
        out["pass_at_1_lo"].append(ci["lo"])
        out["pass_at_1_hi"].append(ci["hi"])
    return out


def _credit_maps(runs: list[RunResult]) -> dict[str, Any]:
    """Per model (per model and training task, ``MODEL-TASK``, when the sweep trains on several
    tasks): every method's credit on the same probe completion (from each method's run with the
    lowest seed; methods whose probe differs from the most common one are left out)."""
    maps: dict[str, Any] = {}
    several = len({r.task for r in runs}) > 1
    by_key: dict[str, list[RunResult]] = defaultdict(list)
    for r in runs:
        if r.credit_probe:
            by_key[f"{r.model}-{r.task}" if several else r.model].append(r)
    for key, rs in by_key.items():
        first: dict[str, dict] = {}
        for r in sorted(rs, key=lambda r: r.seed):
            first.setdefault(r.label, r.credit_probe)
        texts = [p["completion"] for p in first.values()]
        common = max(set(texts), key=texts.count)
        probe = next(p for p in first.values() if p["completion"] == common)
        maps[key] = {
            "prompt": probe["prompt"],
            "completion_tokens": probe["completion_tokens"],
            "reward": probe["reward"],
            "blame": probe.get("blame"),
            "methods": {label: p["credit"] for label, p in sorted(first.items()) if p["completion"] == common},
        }
    return maps


# ------------------------------------------------------------------ writing
