"""Aggregate summaries of a sweep over seeds x training tasks, as rliable computes them (Agarwal et
al., 2021, "Deep Reinforcement Learning at the Edge of the Statistical Precipice"; google-research/rliable):
the interquartile mean (IQM) of the final scores and the probability of improvement P(X > Y), each
with a stratified-bootstrap 95% percentile interval.

A score matrix is ``[runs, tasks]``: one row per training seed, one column per training task (an
rliable "task"). Where a label's tasks have different seeds, its matrix keeps the seeds every task
has. Departures from rliable:

1. The bootstrap draws 2,000 replicates (rliable: 50,000) from numpy's default generator with a fixed
   seed (rliable: arch's ``StratifiedBootstrap``), so intervals agree with rliable's to bootstrap
   noise, not digit for digit.
2. No interval from fewer than 3 seeds (bench.stats.paired.MIN_SEEDS), the report's rule.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from typing import Any

import numpy as np

from bench.errors import CreditBenchError
from bench.report.comparisons import bounded
from bench.run.result import RunResult
from bench.stats import format as fmt
from bench.stats.paired import MIN_SEEDS


def iqm(scores: np.ndarray) -> float:
    """Interquartile mean of every score of a ``[runs, tasks]`` matrix: with the N scores sorted,
    drop the floor(N/4) lowest and highest and average the rest (``scipy.stats.trim_mean(x, 0.25,
    axis=None)``, rliable's ``metrics.aggregate_iqm``)."""
    x = np.sort(np.asarray(scores, dtype=float), axis=None)
    k = int(0.25 * x.size)  # floor(N / 4) from each end
    return float(x[k : x.size - k].mean())


def probability_of_improvement(x: np.ndarray, y: np.ndarray) -> float:
    """P(X > Y) of ``[runs_x, tasks]`` and ``[runs_y, tasks]`` scores, averaged over tasks:

        P = 1/M sum_m 1/(n_x n_y) sum_i sum_j ( [x_im > y_jm] + 1/2 [x_im = y_jm] )

    per task the Mann-Whitney U statistic over n_x n_y (rliable's ``metrics.probability_of_improvement``);
    P(X > X) = 1/2."""
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if x.ndim != 2 or y.ndim != 2 or x.shape[1] != y.shape[1]:
        raise ValueError(f"need [runs, tasks] arrays with the same tasks, got shapes {x.shape} and {y.shape}")
    pairs_x, pairs_y = x[:, None, :], y[None, :, :]  # [n_x, 1, M] against [1, n_y, M]
    per_task = ((pairs_x > pairs_y) + 0.5 * (pairs_x == pairs_y)).mean(axis=(0, 1))  # U_m / (n_x n_y), [M]
    return float(per_task.mean())


def stratified_bootstrap(
    fn: Callable[..., float], *arrays: np.ndarray, reps: int = 2000, level: float = 0.95, seed: int = 0
) -> tuple[float, float]:
    """Percentile interval of ``fn(*arrays)`` under the stratified bootstrap: each replicate redraws,
    for every array separately and every task column separately, that column's runs with replacement
    (rows stay within their task), and the interval is the (1 - level)/2 and (1 + level)/2 quantiles
    of fn over the replicates. The same seed gives the same interval."""
    rng = np.random.default_rng(seed)
    data = [np.asarray(a, dtype=float) for a in arrays]
    # per array: [reps, runs, tasks] row indices, drawn independently per task column
    picks = [a[rng.integers(0, a.shape[0], size=(reps, *a.shape)), np.arange(a.shape[1])] for a in data]
    stats = np.array([fn(*(p[r] for p in picks)) for r in range(reps)])
    lo, hi = np.quantile(stats, [(1 - level) / 2, (1 + level) / 2])
    return float(lo), float(hi)


def _matrix(by_task: dict[str, dict[int, float]], tasks: list[str]) -> np.ndarray:
    """``[seeds, tasks]`` scores over the seeds every one of ``tasks`` has."""
    seeds = sorted(set.intersection(*(set(by_task[t]) for t in tasks)))
    return np.array([[by_task[t][s] for t in tasks] for s in seeds]).reshape(len(seeds), len(tasks))


def _estimate(fn: Callable[..., float], *arrays: np.ndarray, clip: bool) -> dict[str, float | None]:
    """Point estimate and stratified-bootstrap 95% interval (None with fewer than MIN_SEEDS runs);
    no value where some array has no run (a label whose tasks share no seed)."""
    if min(a.shape[0] for a in arrays) == 0:
        return {"value": None, "lo": None, "hi": None}
    value = fn(*arrays)
    if min(a.shape[0] for a in arrays) < MIN_SEEDS:
        return {"value": value, "lo": None, "hi": None}
    lo, hi = stratified_bootstrap(fn, *arrays)
    if clip:  # the metric's range [0, 1]
        lo, hi = max(lo, 0.0), min(hi, 1.0)
    return {"value": value, "lo": lo, "hi": hi}


def _scores(runs: list[RunResult], metric: str) -> dict[tuple[str, str], dict[str, dict[int, float]]]:
    """(model, label) -> training task -> seed -> final value of ``metric``."""
    out: dict[tuple[str, str], dict[str, dict[int, float]]] = defaultdict(lambda: defaultdict(dict))
    for r in runs:
        if metric not in r.final:
            have = ", ".join(sorted(k for k in r.final if not k.endswith("_se")))
            raise CreditBenchError(f"metric {metric!r} is not in run {r.run_name}'s final eval; valid: {have}")
        out[(r.model, r.label)][r.task][r.seed] = float(r.final[metric])
    return out


def summaries(
    runs: list[RunResult], baseline: str, metric: str = "pass_at_1", controls: dict[str, str] | None = None
) -> list[dict[str, Any]]:
    """Per (model, label) of a sweep's finished runs: the IQM of the final ``metric`` over seeds x
    training tasks, and P(label > control) on the tasks both ran, where the control is
    ``controls.get(label, baseline)`` (none for the control itself or where it did not run); each
    ``{value, lo, hi}`` with its stratified-bootstrap 95% interval. Rows by model, baseline first."""
    scores = _scores(runs, metric)
    rows = []
    for model, label in sorted(scores, key=lambda k: (k[0], k[1] != baseline, k[1])):
        mine = scores[(model, label)]
        tasks = sorted(mine)
        x = _matrix(mine, tasks)
        row: dict[str, Any] = {"model": model, "label": label, "metric": metric, "tasks": tasks, "seeds": len(x)}
        row["iqm"] = _estimate(iqm, x, clip=bounded(metric))
        control = (controls or {}).get(label, baseline)
        theirs = scores.get((model, control))
        shared = sorted(set(mine) & set(theirs or {}))
        row["control"] = control if control != label and shared else None
        row["p_improvement"] = None
        if row["control"]:
            pair = _matrix(mine, shared), _matrix(theirs, shared)
            row["p_improvement"] = _estimate(probability_of_improvement, *pair, clip=False)
        rows.append(row)
    return rows


def _ci(e: dict[str, float | None] | None) -> str:
    return fmt.DASH if e is None else fmt.interval(e["value"], e["lo"], e["hi"])


def markdown_lines(rows: list[dict[str, Any]]) -> list[str]:
    """The summaries as a Markdown table: IQM and P(label > control), each with its 95% interval."""
    out = [
        "| model | label | tasks | seeds | IQM [95% CI] | control | P(label > control) [95% CI] |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        out.append(
            f"| {r['model']} | {r['label']} | {', '.join(r['tasks'])} | {r['seeds']} | {_ci(r['iqm'])} "
            f"| {r['control'] or '–'} | {_ci(r['p_improvement'])} |"
        )
    return out
