"""What a sweep is: every method x model x seed (x training task) of a YAML spec, each an
independent ``creditbench train`` run, and where its results go (each run's:
results/<sweep>/runs/<run>.json; the report: :func:`report_path`; the credit probe's:
:func:`probe_dir`). How a sweep runs is :mod:`bench.sweep.launch`.

    creditbench sweep results/sweeps/embedded.yaml [--jobs 2] [--dry_run]

The spec's keys are those of :class:`bench.sweep.spec.SweepSpec` (its module docstring shows a whole
spec; results/sweeps/ and results/papers/*.sweep.yaml are examples). A run's configuration is the
``base`` run YAML, then the spec's ``eval`` settings and eval tasks, then its ``overrides``, the
model entry's and the method entry's (``method_overrides`` first), and the budget. Under a sample
budget the eval schedule is in samples: ``eval.every`` rollout batches' worth (``eval.every_samples``,
unless given), so every label is evaluated at the same sample counts however many samples its steps
take (DAPO's refills), and no step generates past an eval point or the budget.

Everything is validated before any run starts: loading a spec builds and resolves every run.
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.config import EvalConfig, RunConfig, TaskSpec
from bench.engine.checkpoint_dir import identity
from bench.errors import CreditBenchError
from bench.run.args import load_yaml, run_config
from bench.run.result import RunResult, result_path
from bench.sweep.spec import MethodEntry, ModelEntry, SweepSpec, read_spec, spec_error

GROUPS = frozenset(f.name for f in dataclasses.fields(RunConfig) if dataclasses.is_dataclass(f.default_factory))
"""Run config fields that are groups of settings (model, rl, eval, ...): always a mapping."""


@dataclass
class SweepRun:
    key: str
    """Run name: <label>-<task>-<model>-seed<seed>; also results/<sweep>/runs/<key>.json."""
    label: str
    cfg: RunConfig
    config_hash: str


@dataclass
class Sweep:
    """A loaded sweep: its spec, the file it was read from and every run it expands to."""

    spec: SweepSpec
    path: Path
    runs: list[SweepRun]
    inert: dict[str, str] = dataclasses.field(default_factory=dict)
    """Label -> why its method's credit cannot differ from its twin's under its runs' settings
    (Method.inert): the sweep warns at expansion and the report marks the label."""

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def baseline(self) -> str:
        return self.spec.baseline

    @property
    def budget(self) -> dict[str, int]:
        return self.spec.budget.as_dict()

    @property
    def labels(self) -> list[str]:
        return list(dict.fromkeys(r.label for r in self.runs))


# ------------------------------------------------------------------ loading and validation
def load_spec(path: str | Path, results_dir: str | Path = "results", tuning: bool = False) -> Sweep:
    """Parse and validate a sweep spec completely (every run's configuration is built and resolved,
    which checks method, task and model names, options and value ranges) without starting anything;
    an error names the file and line it comes from. A spec with ``tune`` gives its runs the grid points
    results/<name>/tuning.json chose (the spec's own settings until it exists); ``tuning`` gives its
    tuning sweep instead (bench.sweep.tuning)."""
    from bench.sweep import tuning as tune

    path = Path(path)
    spec = read_spec(path)
    try:
        if tuning:
            return _load(tune.tuning_spec(spec), path)
        return _load(spec, path, tune.read(results_dir, spec.name) if spec.tune else None)
    except CreditBenchError as e:  # at the line of the spec, else of its base config, that the error names
        raise spec_error(path, str(e).removeprefix(f"sweep spec {path}: "), spec.base) from None


def _load(spec: SweepSpec, path: Path, tuned: dict[str, Any] | None = None) -> Sweep:
    from bench.run.resolve import resolve
    from bench.sweep.tuning import apply

    where = f"sweep spec {path}"
    methods = spec.method_entries() if tuned is None else apply(spec, tuned, spec.method_entries())
    base = _base_config(spec.base, path)
    tasks = spec.tasks or [TaskSpec(base.get("task", {}).get("name", "arithmetic"))]
    runs, inert = [], {}
    for task in tasks:
        for m in methods:
            for model in spec.models:
                first: tuple[dict, RunConfig] | None = None
                for seed in spec.seeds:
                    key = f"{m.label}-{task.name}-{Path(model.name).name}-seed{seed}"
                    d = _run_dict(spec, base, task, m, model, seed, where)
                    if first is not None and {**d, "seed": None} == {**first[0], "seed": None}:
                        # the same run but for its seed: parsed and resolved once (a parse costs ~0.1 s)
                        cfg = dataclasses.replace(copy.deepcopy(first[1]), seed=d["seed"])
                    else:
                        cfg = run_config(d, f"{where}: run {key}")
                        try:
                            why = resolve(cfg).method.inert(cfg.rl)
                        except CreditBenchError as e:
                            raise CreditBenchError(f"{where}: run {key}: {e}") from None
                        if why:
                            inert.setdefault(m.label, why)
                        first = (d, cfg)
                    runs.append(SweepRun(key, m.label, cfg, _hash(cfg)))
    keys = [r.key for r in runs]
    dup = sorted({k for k in keys if keys.count(k) > 1})
    if dup:
        raise CreditBenchError(f"{where}: runs {', '.join(dup)} appear twice; give the methods distinct labels")
    return Sweep(spec, path, runs, inert)


def inert_lines(sweep: Sweep) -> list[str]:
    """One warning line per label whose credit is inert under its settings (Sweep.inert)."""
    return [f"warning: {sweep.name}: label {label!r} has inert credit: {why}" for label, why in sweep.inert.items()]


def _run_dict(
    spec: SweepSpec, base: dict[str, Any], task: TaskSpec, m: MethodEntry, model: ModelEntry, seed: int, where: str
) -> dict[str, Any]:
    """One run's configuration as a nested dict, in the order the module docstring gives."""
    d = copy.deepcopy(base)
    d["seed"] = seed
    d.setdefault("model", {})["name"] = model.name
    d["task"] = dataclasses.asdict(task)
    d["method"] = {"name": m.name, "options": copy.deepcopy(m.options)} | ({"placebo": True} if m.placebo else {})
    if spec.eval:
        d.setdefault("eval", {}).update(copy.deepcopy(spec.eval))
    if spec.eval_tasks:
        d.setdefault("eval", {})["tasks"] = [dataclasses.asdict(t) for t in spec.eval_tasks]
    for k, v in {**spec.overrides, **model.overrides, **m.overrides}.items():
        _set(d, k, v, where)
    budget = spec.budget.as_dict()
    rl = d.setdefault("rl", {})
    rl["budget_samples"], rl["budget_tokens"] = budget.get("samples", 0), budget.get("tokens", 0)
    if "samples" in budget:  # the step ceiling: the budget at one batch per step
        ppp, g = rl.get("prompts_per_step", 16), rl.get("group_size", 8)
        if all(isinstance(x, int) and not isinstance(x, bool) and x > 0 for x in (ppp, g)):
            rl["steps"] = -(-budget["samples"] // (ppp * g))  # else the parser names the bad value
            ev = d.setdefault("eval", {})
            every = ev.get("every", EvalConfig.every)
            if not ev.get("every_samples") and isinstance(every, int) and every > 0:
                ev["every_samples"] = every * ppp * g  # every label evaluated at the same sample counts
    else:
        rl.setdefault("steps", 100_000)
    return d


def _base_config(base: str | None, spec_path: Path) -> dict[str, Any]:
    if base is None:
        return {}
    p = (spec_path.parent / base) if not Path(base).is_absolute() else Path(base)
    if not p.is_file():
        raise CreditBenchError(f"sweep spec {spec_path}: base config {str(p)!r} does not exist")
    d = load_yaml(p) or {}
    if not isinstance(d, dict):
        raise CreditBenchError(f"base config {p}: expected a mapping of run config fields")
    for key, value in d.items():
        if key in GROUPS and not isinstance(value, dict):
            raise CreditBenchError(
                f"base config {p}: {key} must be a mapping of its settings ({key}: {{...}}), got {value!r}"
            )
    return d


def _set(d: dict[str, Any], dotted: str, value: Any, where: str) -> None:
    parts = dotted.split(".")
    if len(parts) == 1 and dotted in GROUPS and not isinstance(value, dict):
        raise CreditBenchError(
            f"{where}: override {dotted!r} is a group of settings: give a mapping or set its "
            f"fields ({dotted}.<field>: value), got {value!r}"
        )
    cur = d
    for p in parts[:-1]:
        nxt = cur.setdefault(p, {})
        if not isinstance(nxt, dict):
            raise CreditBenchError(f"{where}: override {dotted!r}: {p!r} is not a group of settings")
        cur = nxt
    cur[parts[-1]] = copy.deepcopy(value)


def _hash(cfg: RunConfig) -> str:
    d = identity(cfg, ("experiment",))  # where and how a run checkpoints, how fast: not its results
    return hashlib.sha256(json.dumps(d, sort_keys=True, default=str).encode()).hexdigest()[:16]


def report_path(results_dir: str | Path, sweep: str) -> Path:
    """Where a sweep's report lies: results/<sweep>/report.json (its runs: :func:`bench.run.result.runs_dir`)."""
    return Path(results_dir) / sweep / "report.json"


def probe_dir(results_dir: str | Path, sweep: str) -> Path:
    """Where a sweep's credit probe writes its records and report: results/probes/<sweep>."""
    return Path(results_dir) / "probes" / sweep


def result_writer(cfg: RunConfig) -> Callable[[RunResult], None] | None:
    """What a sweep's run does with its result (``bench.run.train.run``'s ``on_result``): write it to
    :func:`bench.run.result.result_path`, before its MLflow run is marked finished (a finished run has it); None for a
    run outside a sweep."""
    from bench.run.resolve import run_name

    if not cfg.tracking.sweep:
        return None
    path = result_path(cfg.tracking.results_dir, cfg.tracking.sweep, run_name(cfg))
    return lambda result: result.write(path)
