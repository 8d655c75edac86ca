"""Learning rates tuned with an equal budget before a sweep's verdict (the spec's ``tune`` block).

Every label of the sweep -- twins and placebos included, so each gets the same number of tuning
runs -- trains at every point of the grid (``tune.lr`` x its method's one ``tune.knobs`` option, if
any) on each tuning seed, at the sweep's budget, as the sweep ``<name>-tune``. A tuning run is scored
on a validation split, the last ``eval.num_problems`` problems of the train split, held out of its
training (``eval.validation``), so no choice sees an eval problem, and its seeds are disjoint from the
verdict's (checked by the spec).
Each label keeps the point with the best mean final ``analysis.metric`` over its tuning runs (ties:
the smaller learning rate, then the first knob value), written to ``results/<name>/tuning.json``;
the sweep's own runs then use it, and the report shows the choices, every point's mean and the cost.
"""

from __future__ import annotations

import copy
import dataclasses
import json
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np

from bench.atomic import write_atomic
from bench.core import check
from bench.run.result import RunResult, load_runs
from bench.stats import format as fmt
from bench.stats.paired import summarize
from bench.sweep.spec import MethodEntry, SweepSpec

SEP = "@"
"""Between a label and its grid point in a tuning run's label: ``s_trace@lr0.0002@rho0.1``."""


def tuning_path(results_dir: str | Path, name: str) -> Path:
    """Where a sweep's tuning choices go: results/<name>/tuning.json."""
    return Path(results_dir) / name / "tuning.json"


def grid(spec: SweepSpec, entry: MethodEntry) -> list[dict[str, Any]]:
    """The entry's grid points: ``{"lr": x, option: v}`` over ``tune.lr`` x its method's knob values. An
    entry without a knob (its method declares none, or it is a twin, whose value of that option makes
    it the twin) spends as many runs on a finer lr grid, geometric from the least to the largest lr:
    every label gets the same tuning runs."""
    assert spec.tune is not None
    sizes = {m: len(next(iter(k.values()))) for m, k in spec.tune.knobs.items()}
    check(
        len(set(sizes.values())) <= 1,
        f"tune.knobs must all list the same number of values, so every label gets the same tuning runs; got {sizes}",
    )
    knob = {} if spec.analysis.control(entry.label) == "twin" else spec.tune.knobs.get(entry.name, {})
    if knob:
        ((option, values),) = knob.items()
        return [{"lr": lr, option: v} for lr in spec.tune.lr for v in values]
    lrs, size = sorted(spec.tune.lr), max(sizes.values(), default=1)
    fine = [float(x) for x in np.geomspace(lrs[0], lrs[-1], len(lrs) * size)] if len(lrs) > 1 else lrs * size
    return [{"lr": lr} for lr in (lrs if size == 1 else fine)]


def point_label(label: str, point: dict[str, Any]) -> str:
    return SEP.join([label, *(f"{k}{v:g}" if isinstance(v, float) else f"{k}{v}" for k, v in point.items())])


def with_point(entry: MethodEntry, point: dict[str, Any], label: str) -> MethodEntry:
    """``entry`` at a grid point: the lr as an override, the knob as an option."""
    options = {**entry.options, **{k: v for k, v in point.items() if k != "lr"}}
    return dataclasses.replace(entry, label=label, options=options, overrides={**entry.overrides, "rl.lr": point["lr"]})


def tuning_spec(spec: SweepSpec) -> SweepSpec:
    """The tuning sweep ``<name>-tune``: every label x grid point on the tuning seeds, scored on the eval
    problems after the verdict's, at the same budget."""
    assert spec.tune is not None
    entries = [
        with_point(dataclasses.replace(m, credit_controls=[]), p, point_label(m.label, p))
        for m in spec.method_entries()
        if not (spec.tune.pairs and spec.analysis.control(m.label) == "placebo")  # it takes the pair's rate
        for p in grid(spec, m)
    ]
    base_point = point_label(
        spec.baseline, grid(spec, next(m for m in spec.method_entries() if m.label == spec.baseline))[0]
    )
    return dataclasses.replace(
        copy.deepcopy(spec),
        name=f"{spec.name}-tune",
        description=f"learning-rate tuning of sweep {spec.name}",
        methods=entries,
        seeds=list(spec.tune.seeds),
        eval={**spec.eval, "validation": True},
        eval_tasks=[],
        baseline=base_point,
        tune=None,
        sequential=None,  # every tuning run at every point: the choice needs them all
        credit_controls=[],
        analysis=dataclasses.replace(spec.analysis, controls={}, credit_controls={}),
    )


def select(spec: SweepSpec, runs: list[RunResult]) -> dict[str, Any]:
    """Each label's best grid point from its finished tuning runs (see the module docstring), with its
    margin over the runner-up in standard errors; under ``tune.pairs`` each pair's shared point and its
    comparison at every point of the grid: the JSON of results/<name>/tuning.json."""
    metric = spec.analysis.metric
    scores: dict[str, dict[str, dict[int, float]]] = defaultdict(lambda: defaultdict(dict))
    for r in runs:
        label, _, point = r.label.partition(SEP)
        scores[label][point][r.seed] = float(r.final[metric])
    labels, points = {}, {m.label: grid(spec, m) for m in spec.method_entries()}
    for label, grid_points in points.items():
        per_seed = [scores[label].get(point_label(label, p).partition(SEP)[2], {}) for p in grid_points]
        if not any(per_seed):
            continue  # not tuned on its own (a pair's placebo)
        table = []
        for p, vals in zip(grid_points, per_seed):
            v = list(vals.values())
            table.append({"point": p, "runs": len(v), "mean": float(np.mean(v)) if v else None,
                          "sd": float(np.std(v, ddof=1)) if len(v) > 1 else None})  # fmt: skip
        best, margin = _best(per_seed)
        lrs = sorted({t["point"]["lr"] for t in table})
        chosen = None if best is None else grid_points[best]
        edge = chosen is not None and len(lrs) > 2 and chosen["lr"] in (lrs[0], lrs[-1])
        labels[label] = {"chosen": chosen, "edge": edge, "margin_se": margin, "grid": table}
    out = {
        "metric": metric,
        "seeds": list(spec.tune.seeds) if spec.tune else [],
        "validation": f"the last {spec.eval.get('num_problems', 200)} problems of each task's train split (held out of "
        "the tuning runs' training)",
        "runs": len(runs),
        "samples": sum(r.samples for r in runs),
        "wall_s": round(sum(r.wall_s for r in runs), 1),
        "labels": labels,
    }
    if spec.tune is not None and spec.tune.pairs:
        out["pairs"] = _pairs(spec, scores, points, labels)
    return out


def _best(per_seed: list[dict[int, float]]) -> tuple[int | None, float | None]:
    """The grid point with the best mean (ties: the first) and its margin over the runner-up in
    standard errors of their paired (same seed) difference; None where it cannot be had."""
    means = [float(np.mean(list(v.values()))) if v else -np.inf for v in per_seed]
    if not any(np.isfinite(means)):
        return None, None
    order = sorted(range(len(means)), key=lambda i: (-means[i], i))
    best = order[0]
    if len(order) < 2 or not np.isfinite(means[order[1]]):
        return best, None
    a, b = per_seed[best], per_seed[order[1]]
    d = [a[s] - b[s] for s in sorted(set(a) & set(b))]
    if len(d) < 2:
        return best, None
    s = summarize(d)
    return best, (s.mean / s.se if s.se > 0 else None)


def _pairs(spec: SweepSpec, scores, points, labels: dict[str, Any]) -> dict[str, Any]:
    """Each credit method with its twin: one point for the pair (and its placebo), where the mean of
    method and twin is best, its margin in SEs, and method - twin at every point (the sensitivity row)."""
    out = {}
    for method, controls in spec.analysis.credit_controls.items():
        twin = next((c for c in controls if spec.analysis.control(c) == "twin"), None)
        if twin is None or method not in labels or twin not in labels:
            continue
        grid_points = points[method]
        m = [scores[method].get(point_label(method, p).partition(SEP)[2], {}) for p in grid_points]
        t = [scores[twin].get(point_label(twin, p).partition(SEP)[2], {}) for p in grid_points]
        both = [{s: (a[s] + b[s]) / 2 for s in set(a) & set(b)} for a, b in zip(m, t)]
        best, margin = _best(both)
        if best is None:
            continue
        lrs = sorted({p["lr"] for p in grid_points})
        edge = len(lrs) > 2 and grid_points[best]["lr"] in (lrs[0], lrs[-1])
        for lab in (method, *controls):
            labels.setdefault(lab, {"grid": []}).update(chosen=grid_points[best], pair=method, margin_se=margin,
                                                         edge=edge)  # fmt: skip
        rows = []
        for p, a, b in zip(grid_points, m, t):
            d = [a[s] - b[s] for s in sorted(set(a) & set(b))]
            s = summarize(d) if len(d) > 1 else None
            diff = s.mean if s else (float(d[0]) if d else None)
            rows.append({"point": p, "n": len(d), "diff": diff, "se": s.se if s else None})
        out[method] = {"twin": twin, "chosen": grid_points[best], "margin_se": margin, "by_point": rows}
    return out


def apply(spec: SweepSpec, tuning: dict[str, Any], entries: list[MethodEntry]) -> list[MethodEntry]:
    """``entries`` with each label's chosen grid point (the lr as an override, the knob as an option)."""
    chosen = {label: v["chosen"] for label, v in tuning.get("labels", {}).items() if v.get("chosen")}
    return [with_point(m, chosen[m.label], m.label) if m.label in chosen else m for m in entries]


def read(results_dir: str | Path, name: str) -> dict[str, Any] | None:
    path = tuning_path(results_dir, name)
    return json.loads(path.read_text()) if path.is_file() else None


def markdown_lines(tuning: dict[str, Any]) -> list[str]:
    """The tuning section of a report: each label's chosen point, its margin over the runner-up, every
    point's mean, the cost; under ``tune.pairs`` each pair's comparison at every point."""
    pairs = tuning.get("pairs") or {}
    how = (
        "each credit method and its controls at one shared point, where the mean of method and twin is best"
        if pairs
        else "each label at its own best point"
    )
    out = [
        "## Tuning",
        "",
        f"Learning rates (and knobs) chosen on seeds {tuning['seeds']} -- none of the verdict's -- by the "
        f"mean final `{tuning['metric']}` on {tuning['validation']}, at the sweep's budget ({how}): "
        f"{tuning['runs']} runs, {tuning['samples']:,} training samples, {tuning['wall_s'] / 60:.1f} min of run time. "
        "Margin: the chosen point's lead over the runner-up, in standard errors of their paired difference "
        "over the tuning seeds (below 2, the choice is not resolved).",
        "",
        "| label | chosen | margin (SE) | every point: mean (runs) |",
        "|---|---|---|---|",
    ]
    for label, v in tuning["labels"].items():
        cells = (
            ", ".join(f"{_point(t['point'])}: {fmt.number(t['mean'])} ({t['runs']})" for t in v["grid"])
            or "(its pair's)"
        )
        chosen = (_point(v["chosen"]) + (" (grid edge)" if v.get("edge") else "")) if v["chosen"] else "–"
        margin = "–" if v.get("margin_se") is None else f"{v['margin_se']:.1f}"
        via = f" (pair of {v['pair']})" if v.get("pair") and v["pair"] != label else ""
        out.append(f"| {label}{via} | {chosen} | {margin} | {cells} |")
    edges = [label for label, v in tuning["labels"].items() if v.get("edge")]
    if edges:
        out += [
            "",
            f"At the grid's edge ({', '.join(edges)}): the best learning rate may lie beyond it; widen `tune.lr`.",
        ]
    if pairs:
        first = next(iter(pairs.values()))["by_point"]
        out += [
            "",
            "Sensitivity: each method minus its twin at every point of the grid, on the tuning seeds and "
            "problems (mean ± SE over seeds; * the point the verdict uses). A verdict that changes sign "
            "across the points at which both learn hangs on the learning rate.",
            "",
            "| method vs twin | " + " | ".join(_point(r["point"]) for r in first) + " |",
            "|---|" + "---|" * len(first),
        ]
        for method, pr in pairs.items():
            cells = [
                fmt.with_se(r["diff"], r["se"], "+.3f") + (" *" if r["point"] == pr["chosen"] else "")
                for r in pr["by_point"]
            ]
            out.append(f"| {method} vs {pr['twin']} | " + " | ".join(cells) + " |")
    return out + [""]


def _point(p: dict[str, Any]) -> str:
    return " ".join(f"{k} {v:g}" if isinstance(v, float) else f"{k} {v}" for k, v in p.items())


def write(spec: SweepSpec, tuned, results_dir: str | Path) -> dict[str, Any]:
    """Choose from the tuning sweep ``tuned``'s finished runs and write results/<name>/tuning.json."""

    choice = select(spec, load_runs(str(results_dir), tuned.name, [r.key for r in tuned.runs]))
    path = tuning_path(results_dir, spec.name)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, json.dumps(choice, indent=1))
    return choice
