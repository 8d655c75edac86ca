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

from bench.core import check
from bench.run.result import RunResult, load_runs
from bench.run.spec import MethodEntry, SweepSpec

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
    twins = {c for cs in spec.analysis.credit_controls.values() for c in cs if c.endswith("-twin")}
    knob = {} if entry.label in twins else spec.tune.knobs.get(entry.name, {})
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
        credit_controls=[],
        analysis=dataclasses.replace(spec.analysis, controls={}, credit_controls={}),
    )


def select(spec: SweepSpec, runs: list[RunResult]) -> dict[str, Any]:
    """Each label's best grid point from its finished tuning runs (see the module docstring): the JSON
    of results/<name>/tuning.json."""
    metric = spec.analysis.metric
    scores: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for r in runs:
        label, _, point = r.label.partition(SEP)
        scores[label][point].append(float(r.final[metric]))
    labels, points = {}, {m.label: grid(spec, m) for m in spec.method_entries()}
    for label, grid_points in points.items():
        table = []
        for p in grid_points:
            vals = scores[label].get(point_label(label, p).partition(SEP)[2], [])
            table.append({"point": p, "runs": len(vals), "mean": float(np.mean(vals)) if vals else None,
                          "sd": float(np.std(vals, ddof=1)) if len(vals) > 1 else None})  # fmt: skip
        done = [t for t in table if t["mean"] is not None]
        best = max(done, key=lambda t: t["mean"]) if done else None  # max keeps the first of equals: the grid's order
        lrs = sorted({t["point"]["lr"] for t in table})
        edge = best is not None and len(lrs) > 2 and best["point"]["lr"] in (lrs[0], lrs[-1])
        labels[label] = {"chosen": best["point"] if best else None, "edge": edge, "grid": table}
    return {
        "metric": metric,
        "seeds": list(spec.tune.seeds) if spec.tune else [],
        "validation": f"the last {spec.eval.get('num_problems', 200)} problems of each task's train split (held out of "
        "the tuning runs' training)",
        "runs": len(runs),
        "samples": sum(r.samples for r in runs),
        "wall_s": round(sum(r.wall_s for r in runs), 1),
        "labels": labels,
    }


def apply(spec: SweepSpec, tuning: dict[str, Any], entries: list[MethodEntry]) -> list[MethodEntry]:
    """``entries`` with each label's chosen grid point (the lr as an override, the knob as an option)."""
    chosen = {label: v["chosen"] for label, v in tuning.get("labels", {}).items() if v.get("chosen")}
    return [with_point(m, chosen[m.label], m.label) if m.label in chosen else m for m in entries]


def read(results_dir: str | Path, name: str) -> dict[str, Any] | None:
    path = tuning_path(results_dir, name)
    return json.loads(path.read_text()) if path.is_file() else None


def markdown(tuning: dict[str, Any]) -> list[str]:
    """The tuning section of a report: each label's chosen point, every point's mean, the cost."""
    out = [
        "## Tuning",
        "",
        f"Each label's learning rate (and knob) chosen on seeds {tuning['seeds']} -- none of the verdict's -- by the "
        f"mean final `{tuning['metric']}` on {tuning['validation']}, at the sweep's budget: {tuning['runs']} runs, "
        f"{tuning['samples']:,} training samples, {tuning['wall_s'] / 60:.1f} min of run time.",
        "",
        "| label | chosen | every point: mean (runs) |",
        "|---|---|---|",
    ]
    for label, v in tuning["labels"].items():
        cells = ", ".join(f"{_point(t['point'])}: {_mean(t['mean'])} ({t['runs']})" for t in v["grid"])
        chosen = (_point(v["chosen"]) + (" (grid edge)" if v.get("edge") else "")) if v["chosen"] else "–"
        out.append(f"| {label} | {chosen} | {cells} |")
    edges = [label for label, v in tuning["labels"].items() if v.get("edge")]
    if edges:
        out += [
            "",
            f"At the grid's edge ({', '.join(edges)}): the best learning rate may lie beyond it; widen `tune.lr`.",
        ]
    return out + [""]


def _mean(x: float | None) -> str:
    return "–" if x is None else f"{x:.3f}"


def _point(p: dict[str, Any]) -> str:
    return " ".join(f"{k} {v:g}" if isinstance(v, float) else f"{k} {v}" for k, v in p.items())


def write(spec: SweepSpec, tuned, results_dir: str | Path) -> dict[str, Any]:
    """Choose from the tuning sweep ``tuned``'s finished runs and write results/<name>/tuning.json."""

    choice = select(spec, load_runs(str(results_dir), tuned.name, [r.key for r in tuned.runs]))
    path = tuning_path(results_dir, spec.name)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(choice, indent=1))
    tmp.replace(path)
    return choice
