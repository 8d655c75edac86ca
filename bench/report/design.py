"""What a sweep's design can resolve before it runs: ``creditbench sweep SPEC --dry_run`` prints the
minimum detectable difference of its primary comparisons (bench.report.inference.design_mde), so a
user sizes seeds and eval before spending the compute.

The variance comes from the spec's ``analysis`` section: a pilot sweep's finished runs
(``analysis.pilot``: the training and eval-sampling components estimated from their per-problem
counts, per training task) or a prior (``analysis.sd_train`` and ``analysis.sd_item``). The family
is every label against the baseline (or its control) on every model and training task, as the
report forms it (bench.report.comparisons).
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np

from bench.errors import CreditBenchError
from bench.report import inference


def _pilot_components(results_dir: str, pilot: str, task: str, metric: str) -> inference.VarianceComponents | None:
    """The variance components of ``task`` in the pilot sweep's runs (None when it has no runs of
    that task with per-problem counts); an unreadable pilot is a one-line error."""
    from bench.report.summary import load_runs

    try:
        runs = load_runs(results_dir, pilot)
    except CreditBenchError:  # no finished runs there (e.g. a fresh clone of a sweep whose runs/ is not kept)
        return None
    counts: dict[str, dict[int, np.ndarray]] = defaultdict(dict)
    n = 0
    for r in runs:
        point = next((e for e in reversed(r.history) if task in e.eval), None)
        if r.task != task or point is None or not getattr(point, "per_problem", {}).get(task) or not r.eval_n:
            continue
        counts[f"{r.label}/{r.model}"][r.seed] = np.asarray(point.per_problem[task])
        n = r.eval_n
    if len(counts) < 2:
        return None
    try:
        return inference.estimate_variance_components(counts, n)
    except CreditBenchError:
        return None


def design_lines(sweep, results_dir: str = "results") -> list[str]:
    """The dry run's design lines: per training task the family size, the variance used and the MDE
    of the primary metric at the spec's seeds, eval problems and samples (and the seeds a 3-point
    and a 2-point MDE would need)."""
    a = sweep.spec.analysis
    runs = sweep.runs
    labels = list(dict.fromkeys(r.label for r in runs))
    models = list(dict.fromkeys(r.cfg.model.name for r in runs))
    tasks = list(dict.fromkeys(r.cfg.task.name for r in runs))
    seeds = len(sweep.spec.seeds)
    m = (len(labels) - 1) * len(models) * len(tasks)
    n_main = len([lab for lab in labels if lab not in a.controls])
    cfg = runs[0].cfg
    n, problems = cfg.eval.n, cfg.eval.num_problems
    out = [
        f"design: {seeds} seeds x {len(labels)} labels x {len(models)} model(s) x {len(tasks)} task(s); "
        f"{m} comparisons on {a.metric} (Holm, alpha {a.alpha}); eval {problems or 'all'} problems x {n} samples"
    ]
    if not problems:
        out.append("  (eval.num_problems 0: the task's whole eval split; the MDE below assumes 200 problems)")
        problems = 200
    for task in tasks:
        source = None
        if a.pilot:
            comp = _pilot_components(results_dir, a.pilot, task, a.metric)
            if comp is not None:
                sd_train, sd_item = comp.sd_train, comp.sd_item
                source = (
                    f"pilot {a.pilot!r} ({comp.df} residual df): sd_train {sd_train:.4f}, sd_item {sd_item:.3f}, "
                    f"run sd {comp.sd_run:.4f} at {comp.n_problems} problems x {comp.n_samples}"
                )
        if source is None and a.sd_train is not None and a.sd_item is not None:
            sd_train, sd_item = a.sd_train, a.sd_item
            source = f"prior: sd_train {sd_train:.4f}, sd_item {sd_item:.3f}"
        if source is None:
            hint = f" (pilot {a.pilot!r} has no runs of it with per-problem counts)" if a.pilot else ""
            out.append(
                f"  {task}: no variance to size the design with{hint}; give analysis.sd_train and analysis.sd_item, "
                "or analysis.pilot (a finished sweep's name)"
            )
            continue
        args = (sd_train, sd_item)
        mde = inference.design_mde(*args, seeds, problems, n, n_main, m, a.alpha, a.power)
        design = (problems, n, n_main, m, a.alpha, a.power)
        need = [inference.seeds_needed(t, *args, *design, max_seeds=200) for t in (0.03, 0.02)]
        shown = "none (fewer than 2 seeds)" if mde is None else f"{100 * mde:.1f} points"
        out.append(
            f"  {task}: MDE of {a.metric} {shown} at {a.power:.0%} power; {source}; seeds for a 3-point MDE: "
            f"{need[0] or '>200'}, for 2 points: {need[1] or '>200'}"
        )
    return out
