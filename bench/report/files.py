"""A sweep's report as files -- report.json, summary.md, summary.csv and the figures, each written
atomically -- and the one path from a sweep's finished runs to them: :func:`write_report` at the end
of ``creditbench sweep``, :func:`summarize` for ``creditbench summarize`` (again, later, from the
sweep's folder)."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

from bench.atomic import atomic_path, write_atomic
from bench.environment.fingerprint import describe
from bench.report import per_update, per_update_files
from bench.report.comparisons import blame_markdown
from bench.report.summary import build_report, load_runs
from bench.stats import format as fmt
from bench.sweep import tuning
from bench.sweep.sweep import Sweep


def _fmt(ci: dict | None, digits: int = 3, scale: float = 1.0, signed: bool = False) -> str:
    """A t-interval dict (bench.stats.intervals) divided by ``scale``; a target some seeds never reached
    says how many did."""
    if ci and ci.get("mean") is None and ci.get("reached") is not None and not signed:
        return f"not reached ({ci['reached']}/{ci['n']})"
    if not ci or ci.get("mean") is None:
        return fmt.DASH
    lo, hi = (None, None) if ci.get("lo") is None else (ci["lo"] / scale, ci["hi"] / scale)
    return fmt.interval(ci["mean"] / scale, lo, hi, f"{'+' if signed else ''}.{digits}f")


def _signed(ci: dict | None) -> str:
    return _fmt(ci, signed=True)


def markdown(report: dict[str, Any]) -> str:
    base, inert = report["baseline"], report.get("inert") or {}
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
    if report.get("run_all"):
        w = report["run_all"]
        out += [f"Wall time of the whole sweep (tuning included, `run_all.sh`): {w['wall_s'] / 60:.1f} min with "
                f"{w['jobs']} runs at a time on {w['cpus']} CPUs.", ""]  # fmt: skip
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
            label = r["method"] + (" (inert credit)" if r["method"] in inert else "")
            undefined = r.get("target_pass_at_1", 0) is None
            to_s = "–" if undefined else _fmt(m["samples_to_target"], 2, 1e3)
            to_t = "–" if undefined else _fmt(m["tokens_to_target"], 3, 1e6)
            out.append(
                f"| {r['model']} | {label} | {len(r['seeds'])} | {_fmt(m['pass_at_1'])} "
                f"| {_signed(v.get('pass_at_1'))} | {_fmt(m.get(f'pass_at_{k}'))} | {_fmt(m['auc_samples'])} "
                f"| {_signed(v.get('auc_samples'))} | {_fmt(m['auc_tokens'])} "
                f"| {to_s} | {to_t} "
                f"| {_fmt(m['tokens_per_correct'], 1)} | {_fmt(m['mean_length'], 1)} |"
            )
        out.append("")
    out += [f"Inert credit: `{label}`: {why}." for label, why in inert.items()]
    out += [""] if inert else []
    out += tuning.markdown_lines(report["tuning"]) if report.get("tuning") else []
    out += budget_markdown(report.get("budgets") or [])
    out += _analysis_markdown(report.get("analysis") or {}, base)
    if report.get("robust"):
        out += [
            "## Robust summaries",
            "",
            "rliable's (Agarwal et al. 2021): the interquartile mean of the final pass@1 over seeds (and training "
            "tasks), and the probability that a run of the label beats a run of its control (its twin where it "
            "has one, else the baseline), each with a stratified-bootstrap 95% interval over seeds.",
            "",
            report["robust"]["markdown"],
            "",
        ]
    if report.get("curve_fit"):
        out += ["## Asymptote or efficiency", "", report["curve_fit"]["markdown"], ""]
    if report.get("per_update"):
        out += [
            "## Credit per update",
            "",
            "From the same weights, AdamW state and rollout batch, one update per arm, scored on the exact "
            "objective J (the probability of the reference completion): the credit's effect without the noise "
            "of training a whole run, from checkpoints of several training seeds, which are the sampled units "
            "(`creditbench credit-probe`, docs/results.md).",
            "",
            per_update_files.markdown(report["per_update"]),
        ]
    out += blame_markdown(report.get("blame") or [])
    if report.get("fingerprint"):
        out += ["", f"Numerics: {describe(report['fingerprint'])} (docs/reproducibility.md)."]
    return "\n".join(out)


def _analysis_markdown(a: dict[str, Any], base: str) -> list[str]:
    """The report's comparisons: the credit family, its decisions in rounds, the secondary family."""
    out: list[str] = []
    if a.get("credit"):
        out += [
            "## Credit assignment (primary)",
            "",
            f"`{a['metric']}` at the end of training, each credit method against its own credit-off twin (`-twin`: "
            "the same recipe with uniform credit) and its placebo (`-placebo`: its per-token credit permuted at "
            "random within each completion), on the seeds they share; p-values Holm- (and BH-) adjusted across "
            "this family. A method that does not beat its twin has not shown that its credit helps; one that does "
            "not beat its placebo has shown no token-level signal.",
            "",
            a["credit"]["markdown"],
            "",
        ]
    if a.get("sequential"):
        out += [
            "## Credit assignment, decided in rounds",
            "",
            "The sweep ran its seeds in rounds and gave more only to the comparisons still undecided "
            "(bench.report.sequential): each decision below was taken against group-sequential boundaries "
            "that keep the family-wise error at alpha, so it, not the fixed-design p-values above, is the "
            "verdict of the primary family.",
            "",
            a["sequential"]["markdown"],
            "",
        ]
    if a.get("markdown"):
        secondary = " (secondary: whole recipes, not credit alone)" if a.get("credit") else ""
        out += [
            f"## Comparisons{secondary}",
            "",
            f"Primary metric `{a['metric']}` at the end of training, each label against `{base}` (or its control), "
            "each pair on its own variance (the paired t-test over seeds, the training seed the unit of "
            "replication: the pairs' variances differ, so none is pooled); p-values Holm- (and BH-) adjusted "
            "across the whole family; "
            "'equivalent' only where a TOST bounds the difference within the margin.",
            "",
            a["markdown"],
            "",
        ]
    return out


def budget_markdown(rows: list[dict[str, Any]]) -> list[str]:
    """What each label's runs spent and where they were evaluated (report["budgets"])."""
    if not rows:
        return []

    def span(v: list[int]) -> str:
        return f"{v[0]:,}" if v[0] == v[1] else f"{v[0]:,}–{v[1]:,}"

    out = [
        "## Budget",
        "",
        "What each label's runs spent (least–most over seeds) and the training samples at each eval point.",
        "",
        "| model | task | label | samples | tokens | RL steps | optimizer steps | eval at samples |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        grid = "varies by seed" if r["eval_samples"] is None else ", ".join(f"{x:,}" for x in r["eval_samples"])
        opt = "–" if not r["optimizer_steps"][1] else span(r["optimizer_steps"])
        samples = span(r["samples"]) + (f" (+{span(r['extra_samples'])} own)" if r.get("extra_samples") else "")
        out.append(
            f"| {r['model']} | {r['task']} | {r['label']} | {samples} | {span(r['tokens'])} "
            f"| {span(r['steps'])} | {opt} | {grid} |"
        )
    if any(r.get("extra_samples") for r in rows):
        out += ["", "(+N own): completions the method generated for its own use and only verified (Method.augment): "
                "in the tokens, not in the sample budget, which counts what trains."]  # fmt: skip
    differ = sorted({f"{r['task']} ({r['model']})" for r in rows if not r["same_grid"]})
    if differ:
        out += ["", f"Eval grids differ between labels on {', '.join(differ)}: their curves are not on one grid."]
    return out + [""]


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
        write_atomic(out / "report.json", json.dumps(report, indent=1)),
        write_atomic(out / "summary.md", markdown(report) + "\n"),
    ]
    rows = csv_rows(report)
    fields = list(dict.fromkeys(k for r in rows for k in r))
    with atomic_path(out / "summary.csv") as tmp, open(tmp, "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=fields)
        w.writeheader()
        w.writerows(rows)
    written.append(out / "summary.csv")
    if plots:
        from bench.report.plots import write_plots

        written += write_plots(report, out)
    return written


def _with_inert(report: dict[str, Any], sweep: Sweep) -> None:
    """The labels whose credit is inert under their runs' settings (Sweep.inert), where there are any."""
    if sweep.inert:
        report["inert"] = dict(sweep.inert)


def _with_probe(report: dict[str, Any], results_dir: str, sweep: str) -> None:
    """The sweep's credit probe (results/probes/<sweep>/report.json) beside its runs, where it has one."""
    probe = per_update.read(results_dir, sweep)
    if probe is not None:
        report["per_update"] = probe


def write_report(sweep: Sweep, results_dir: str = "results", plots: bool = True) -> dict[str, Any]:
    """Build and write the report of a loaded sweep from its finished runs."""
    runs = load_runs(results_dir, sweep.name, [r.key for r in sweep.runs])
    spec = sweep.spec
    report = build_report(runs, sweep.baseline, spec.target, sweep.budget, sweep.name, spec.target_of, spec.analysis)
    report["tuning"] = tuning.read(results_dir, sweep.name)
    _with_inert(report, sweep)
    report["run_all"] = _run_all(Path(results_dir) / sweep.name)
    _with_probe(report, results_dir, sweep.name)
    write_files(report, Path(results_dir) / sweep.name, plots)
    return report


def summarize(results_dir: str, sweep: str, plots: bool = True, log=print) -> tuple[dict[str, Any], list[Path]]:
    """(Re)write the report of the sweep in results_dir/sweep/ from its finished runs: (the report, the
    files written). Only the runs of the spec the sweep ran (its copy, sweep.yaml) are reported --
    runs/ may hold an earlier design's runs, which ``log`` names -- with that spec's baseline, target,
    budget and analysis; without a copy, every finished run with a sweep spec's defaults."""
    from bench.sweep.spec import read_spec
    from bench.sweep.sweep import load_spec

    out = Path(results_dir) / sweep
    runs = load_runs(results_dir, sweep)
    if not (out / "sweep.yaml").is_file():
        report = build_report(runs, sweep=sweep)
    else:
        spec = read_spec(out / "sweep.yaml")
        loaded = load_spec(out / "sweep.yaml", results_dir)
        keys = {r.key for r in loaded.runs}
        left = [r.run_name for r in runs if r.run_name not in keys]
        runs = [r for r in runs if r.run_name in keys] or runs
        if left and len(runs) < len(left) + len(runs):
            log(f"left out {len(left)} result(s) in {out}/runs that the sweep's spec does not name (e.g. {left[0]})")
        budget = spec.budget.as_dict()
        report = build_report(runs, spec.baseline, spec.target, budget, sweep, spec.target_of, spec.analysis)
        report["tuning"] = tuning.read(results_dir, sweep)
        _with_inert(report, loaded)
        _with_probe(report, results_dir, sweep)
    report["run_all"] = _run_all(out)
    if report["baseline"] not in {r.label for r in runs}:
        report["baseline"] = ""
    return report, write_files(report, out, plots=plots)


def _run_all(out: Path) -> dict[str, Any] | None:
    """run_all.sh's record of the whole sweep's wall time (results/<sweep>/run_all.json), if any."""
    path = out / "run_all.json"
    return json.loads(path.read_text()) if path.is_file() else None
