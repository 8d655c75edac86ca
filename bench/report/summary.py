"""A sweep's report from its finished runs (results/<sweep>/runs/*.json): per (method, model, eval
task) the mean and 95% interval over seeds of every metric, the paired difference to the baseline,
mean learning curves, and each method's credit on one fixed completion.

    creditbench summarize --sweep NAME      (re-)writes results/NAME/{report.json, summary.md, summary.csv, *.png}

The definitions (docs/sweeps-and-reports.md, "Metrics") are computed by bench.report.stats; this
module only groups runs.
The report depends on the runs' results alone (no wall-clock or run ids enter a metric other
than ``wall_s``), so a sweep that was interrupted and resumed reports what an uninterrupted one does.
"""

from __future__ import annotations

import csv
import json
import math
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np

from bench.errors import CreditBenchError
from bench.report.comparisons import analyse, blame_markdown, blame_table, difference, interval
from bench.report.stats import cost_to_target, curve_auc
from bench.run.fingerprint import common, describe
from bench.run.result import RunResult
from bench.run.spec import TARGETS, Analysis, SweepSpec
from bench.run.sweep import Sweep

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


def load_runs(results_dir: str, sweep: str, keys: list[str] | None = None) -> list[RunResult]:
    """The finished runs of a sweep (those of ``keys`` only, when given) from results/<sweep>/runs/."""
    folder = Path(results_dir) / sweep / "runs"
    paths = [folder / f"{k}.json" for k in keys] if keys is not None else sorted(folder.glob("*.json"))
    runs = [RunResult.load(p) for p in paths if p.is_file()]
    if not runs:
        root = Path(results_dir)
        have = sorted({q.parent.parent.name for q in root.glob("*/runs/*.json")}) if root.is_dir() else []
        hint = f" (sweeps with finished runs in {results_dir}: {', '.join(have)})" if have else ""
        raise CreditBenchError(f"no finished runs under {folder}; run the sweep first{hint}")
    return runs


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
    groups: dict[tuple, list[RunResult]] = defaultdict(list)
    for r in runs:
        for ev in r.eval_tasks:
            groups[(r.label, r.model, r.task, ev)].append(r)
    # horizons shared by every method of a (model, task, eval task): the budget, or the least any run
    # consumed, so each curve is observed over the whole horizon
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
    # the target pass@1 (means over the baseline's seeds): base + target x (final - base) for
    # target_of="gain" (None when the baseline did not improve), or target x final for "final"
    goal: dict[tuple, float | None] = {}
    if target_of not in TARGETS:
        raise CreditBenchError(f"target_of must be one of {', '.join(TARGETS)}, got {target_of!r}")
    for (label, model, task, ev), rs in groups.items():
        if label == baseline:
            final = float(np.mean([_final(r, ev)["pass_at_1"] for r in rs]))
            start = float(np.mean([r.history[0].eval[ev]["pass_at_1"] for r in rs]))
            if target_of == "final":
                goal[(model, task, ev)] = target * final
            else:
                goal[(model, task, ev)] = start + target * (final - start) if final > start else None

    per_run: dict[tuple, dict[int, dict[str, Any]]] = {}
    for key, rs in groups.items():
        label, model, task, ev = key
        h, g = horizon[(model, task, ev)], goal.get((model, task, ev))
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
                wall_s=r.wall_s,
            )
            v.update({k: (f if k == "greedy" else r.train).get(src) for k, src in OPTIONAL_METRICS.items()})
            vals[r.seed] = {k: (None if isinstance(x, float) and not math.isfinite(x) else x) for k, x in v.items()}
        per_run[key] = vals

    rows = []
    for key in sorted(groups, key=lambda k: (k[3], groups[k][0].params, k[0] != baseline, k[0])):
        label, model, task, ev = key
        rs, vals = groups[key], per_run[key]
        seeds = sorted(vals)
        names = [k for k in vals[seeds[0]] if k.startswith(("pass_at_", "avg_at_"))] + list(RUN_METRICS)
        names += [m for m in OPTIONAL_METRICS if any(vals[s].get(m) is not None for s in seeds)]
        metrics = {m: interval([vals[s].get(m) for s in seeds], m) for m in names}
        vs = {}
        base_vals = per_run.get((baseline, model, task, ev))
        if label != baseline and base_vals:
            paired = [s for s in seeds if s in base_vals]
            for m in names:
                if m in ("samples", "tokens", "steps", "wall_s"):
                    continue
                diffs = [
                    None if vals[s].get(m) is None or base_vals[s].get(m) is None else vals[s][m] - base_vals[s][m]
                    for s in paired
                ]
                vs[m] = difference(diffs, m) | {"seeds": paired}
        ks = sorted(int(m.split("_")[-1]) for m in names if m.startswith("pass_at_"))
        n = next((int(m.split("_")[-1]) for m in names if m.startswith("avg_at_")), max(ks))
        rows.append(
            {
                "target_pass_at_1": goal.get((model, task, ev)),
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
                "metrics": metrics,
                "vs_baseline": vs,
                "curve": _mean_curve([_curves(r, ev) for r in sorted(rs, key=lambda r: r.seed)]),
            }
        )
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
        "blame": blame_table(runs),
        "credit_maps": _credit_maps(runs),
        "fingerprint": common([r.fingerprint for r in runs]),
        "bases": [json.loads(b) for b in sorted({json.dumps(r.base_checkpoint, sort_keys=True) for r in runs})],
    }


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
def _fmt(ci: dict | None, digits: int = 3, scale: float = 1.0) -> str:
    if not ci or ci.get("mean") is None:
        if ci and ci.get("reached") is not None:
            return f"not reached ({ci['reached']}/{ci['n']})"
        return "–"
    if ci.get("lo") is None:
        return f"{ci['mean'] / scale:.{digits}f}"
    m, lo, hi = (ci[k] / scale for k in ("mean", "lo", "hi"))
    return f"{m:.{digits}f} [{lo:.{digits}f}, {hi:.{digits}f}]"


def _signed(ci: dict | None, digits: int = 3, scale: float = 1.0) -> str:
    if not ci or ci.get("mean") is None:
        return "–"
    if ci.get("lo") is None:
        return f"{ci['mean'] / scale:+.{digits}f}"
    m, lo, hi = (ci[k] / scale for k in ("mean", "lo", "hi"))
    return f"{m:+.{digits}f} [{lo:+.{digits}f}, {hi:+.{digits}f}]"


def markdown(report: dict[str, Any]) -> str:
    base = report["baseline"]
    budget = ", ".join(f"{n:,} {k}" for k, n in report["budget"].items()) or "as configured"
    out = [
        f"# Sweep `{report['sweep']}`",
        "",
        f"{report['runs']} runs, budget {budget} per run, {report['compute_s'] / 60:.1f} min of run time. "
        f"Each cell: mean over seeds [95% interval over seeds, inside the metric's range; none with fewer than "
        f"3 seeds]; Δ is the paired (same seed) difference to `{base}`, uncorrected (the corrected comparisons "
        f"are under Comparisons). "
        f"AUC: mean pass@1 over the budget (samples) or over the least tokens any run of that model used; "
        f"to-target: training samples (k) / generated tokens (M) until pass@1 reaches "
        + (
            f"{report['target']:.0%} of `{base}`'s final pass@1"
            if report.get("target_of") == "final"
            else f"its base plus {report['target']:.0%} of `{base}`'s gain over the base (`{base}`'s mean base and "
            f"final pass@1; – where `{base}` did not improve)"
        )
        + ".",
        "",
    ]
    for ev in dict.fromkeys(r["eval_task"] for r in report["rows"]):
        rows = [r for r in report["rows"] if r["eval_task"] == ev]
        k = max(rows[0]["ks"])
        out += [
            f"## Eval task `{ev}`",
            "",
            f"| model | method | seeds | pass@1 | Δ pass@1 vs {base} | pass@{k} | AUC samples | Δ AUC samples "
            f"| AUC tokens | samples to target (k) | tokens to target (M) | tokens / correct | mean length |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
        ]
        for r in rows:
            m, v = r["metrics"], r["vs_baseline"]
            undefined = r.get("target_pass_at_1", 0) is None
            to_s = "–" if undefined else _fmt(m["samples_to_target"], 2, 1e3)
            to_t = "–" if undefined else _fmt(m["tokens_to_target"], 3, 1e6)
            out.append(
                f"| {r['model']} | {r['method']} | {len(r['seeds'])} | {_fmt(m['pass_at_1'])} "
                f"| {_signed(v.get('pass_at_1'))} | {_fmt(m.get(f'pass_at_{k}'))} | {_fmt(m['auc_samples'])} "
                f"| {_signed(v.get('auc_samples'))} | {_fmt(m['auc_tokens'])} "
                f"| {to_s} | {to_t} "
                f"| {_fmt(m['tokens_per_correct'], 1)} | {_fmt(m['mean_length'], 1)} |"
            )
        out.append("")
    a = report.get("analysis")
    if a:
        out += [
            "## Comparisons",
            "",
            f"Primary metric `{a['metric']}` at the end of training, each label against `{base}` (or its control), "
            "analysed with a method x seed model (the training seed is the unit of replication; the residual "
            "variance is pooled across methods); p-values Holm- (and BH-) adjusted across the whole family; "
            "'equivalent' only where a TOST bounds the difference within the margin.",
            "",
            a["markdown"],
            "",
        ]
    out += blame_markdown(report.get("blame") or [])
    if report.get("fingerprint"):
        out += ["", f"Numerics: {describe(report['fingerprint'])} (docs/reproducibility.md)."]
    return "\n".join(out)


def csv_rows(report: dict[str, Any]) -> list[dict[str, Any]]:
    out = []
    for r in report["rows"]:
        row = {k: r[k] for k in ("model", "params", "method", "method_name", "lora_rank", "task", "eval_task")}
        row["seeds"] = len(r["seeds"])
        for name, ci in r["metrics"].items():
            row[name], row[f"{name}_lo"], row[f"{name}_hi"] = ci["mean"], ci["lo"], ci["hi"]
        for name, ci in r["vs_baseline"].items():
            row[f"delta_{name}"], row[f"delta_{name}_lo"], row[f"delta_{name}_hi"] = ci["mean"], ci["lo"], ci["hi"]
        out.append(row)
    return out


def write_files(report: dict[str, Any], out: Path, plots: bool = True) -> list[Path]:
    """report.json, summary.md, summary.csv and the figures, each written atomically."""
    out.mkdir(parents=True, exist_ok=True)
    written = [
        _atomic(out / "report.json", json.dumps(report, indent=1)),
        _atomic(out / "summary.md", markdown(report) + "\n"),
    ]
    rows = csv_rows(report)
    fields = list(dict.fromkeys(k for r in rows for k in r))
    tmp = out / "summary.csv.tmp"
    with open(tmp, "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=fields)
        w.writeheader()
        w.writerows(rows)
    tmp.replace(out / "summary.csv")
    written.append(out / "summary.csv")
    if plots:
        from bench.report.plots import write_plots

        written += write_plots(report, out)
    return written


def _atomic(path: Path, text: str) -> Path:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    tmp.replace(path)
    return path


def write_report(sweep: Sweep, results_dir: str = "results", plots: bool = True) -> dict[str, Any]:
    """Build and write the report of a loaded sweep from its finished runs."""
    runs = load_runs(results_dir, sweep.name, [r.key for r in sweep.runs])
    spec = sweep.spec
    report = build_report(runs, sweep.baseline, spec.target, sweep.budget, sweep.name, spec.target_of, spec.analysis)
    write_files(report, Path(results_dir) / sweep.name, plots)
    return report
