"""Sweeps: every method x model x seed (x training task) of a YAML spec, each an independent
``creditbench train`` run and an MLflow run nested under one parent run for the sweep. The runs go
to ``--jobs`` long-lived worker processes that import everything once (bench.run.worker; a run there
gives the numbers its own process would), or, isolated, each to a process of its own.

    creditbench sweep results/sweeps/embedded.yaml [--jobs 2] [--dry_run]

The spec's keys are those of :class:`bench.run.spec.SweepSpec` (its module docstring shows a whole
spec; results/sweeps/ and results/papers/*.sweep.yaml are examples). A run's configuration is the
``base`` run YAML, then the spec's ``eval`` settings and eval tasks, then its ``overrides``, the
model entry's and the method entry's (``method_overrides`` first), and the budget.

Everything is validated before any run starts. A run is finished when its result JSON
(results/<name>/runs/<run>.json) exists for the same configuration and its MLflow run is FINISHED;
a sweep started again skips finished runs, deletes the MLflow runs that an interrupted attempt
left behind and redoes those runs, so each run appears exactly once in MLflow.
"""

from __future__ import annotations

import copy
import dataclasses
import fcntl
import hashlib
import json
import os
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.config import RunConfig, TaskSpec
from bench.errors import CreditBenchError
from bench.run import tracking
from bench.run.args import load_yaml, run_config
from bench.run.result import RunResult
from bench.run.spec import MethodEntry, ModelEntry, SweepSpec, read_spec, spec_error
from bench.run.stores import claim_store
from bench.run.worker import Isolated, WorkerPool

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
def load_spec(path: str | Path) -> Sweep:
    """Parse and validate a sweep spec completely (every run's configuration is built and resolved,
    which checks method, task and model names, options and value ranges) without starting anything;
    an error names the file and line it comes from."""
    path = Path(path)
    spec = read_spec(path)
    try:
        return _load(spec, path)
    except CreditBenchError as e:  # at the line of the spec, else of its base config, that the error names
        raise spec_error(path, str(e).removeprefix(f"sweep spec {path}: "), spec.base) from None


def _load(spec: SweepSpec, path: Path) -> Sweep:
    from bench.run.train import resolve

    where = f"sweep spec {path}"
    methods = spec.method_entries()
    base = _base_config(spec.base, path)
    tasks = spec.tasks or [TaskSpec(base.get("task", {}).get("name", "arithmetic"))]
    runs = []
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
                            resolve(cfg)
                        except CreditBenchError as e:
                            raise CreditBenchError(f"{where}: run {key}: {e}") from None
                        first = (d, cfg)
                    runs.append(SweepRun(key, m.label, cfg, _hash(cfg)))
    keys = [r.key for r in runs]
    dup = sorted({k for k in keys if keys.count(k) > 1})
    if dup:
        raise CreditBenchError(f"{where}: runs {', '.join(dup)} appear twice; give the methods distinct labels")
    return Sweep(spec, path, runs)


def _run_dict(
    spec: SweepSpec, base: dict[str, Any], task: TaskSpec, m: MethodEntry, model: ModelEntry, seed: int, where: str
) -> dict[str, Any]:
    """One run's configuration as a nested dict, in the order the module docstring gives."""
    d = copy.deepcopy(base)
    d["seed"] = seed
    d.setdefault("model", {})["name"] = model.name
    d["task"] = dataclasses.asdict(task)
    d["method"] = {"name": m.name, "options": copy.deepcopy(m.options)}
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
    d = dataclasses.asdict(cfg)
    d["tracking"] = {k: v for k, v in d["tracking"].items() if k in ("experiment",)}
    d.pop("checkpoint")  # where and how often a run checkpoints does not change its results
    d["rl"].pop("micro_batch_tokens")  # nor does its micro-batch token budget (to float precision)
    return hashlib.sha256(json.dumps(d, sort_keys=True, default=str).encode()).hexdigest()[:16]


# ------------------------------------------------------------------ running
def run_sweep(
    sweep: Sweep,
    report: Callable[[Sweep, str], dict[str, Any]],
    jobs: int = 1,
    results_dir: str = "results",
    uri: str | None = None,
    log=print,
    isolate: bool = False,
) -> dict[str, Any]:
    """Run every unfinished run of the sweep, ``jobs`` at a time, then write its report with
    ``report(sweep, results_dir)`` (bench.report.summary.write_report) and log it to the parent run.
    The runs go to ``jobs`` long-lived worker processes (bench.run.worker), or with ``isolate``
    each to a ``creditbench train`` process of its own."""
    uri = uri or tracking.default_uri()
    tracking.check_tracking_uri(uri, write=True)  # before results/<sweep>/, its lock or the parent run exist
    out = Path(results_dir) / sweep.name
    out.mkdir(parents=True, exist_ok=True)
    lock = open(out / ".lock", "w")
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        raise CreditBenchError(
            f"sweep {sweep.name!r} is already running (results/{sweep.name}/.lock is held)"
        ) from None
    claim_store(out, uri)  # before anything in results/<sweep>/ or either store is touched
    t0 = time.perf_counter()
    client = tracking.client(uri)
    parent = _parent_run(client, sweep)
    (out / "sweep.yaml").write_text(sweep.path.read_text())
    threads = sweep.spec.threads or max(1, (os.cpu_count() or 1) // jobs)

    todo, done = [], []
    for r in sweep.runs:
        (done if _finished(client, out, r) else todo).append(r)
    log(
        f"sweep {sweep.name}: {len(sweep.runs)} runs, {len(done)} finished, {len(todo)} to run "
        f"({jobs} at a time, {threads} threads each); MLflow parent run {parent}"
    )

    def launched(r: SweepRun) -> RunConfig:
        """The run's config as its process gets it: tracking into this sweep."""
        cfg = copy.deepcopy(r.cfg)
        cfg.threads = threads
        cfg.tracking = dataclasses.replace(
            cfg.tracking,
            uri=uri,
            experiment=sweep.spec.experiment,
            run_name=r.key,
            sweep=sweep.name,
            results_dir=results_dir,
            parent_run_id=parent,
            tags={
                **cfg.tracking.tags,
                "run_key": r.key,
                "label": r.label,
                "config_hash": r.config_hash,
                "budget": _budget_text(sweep.budget),
            },
        )
        return cfg

    for r in todo:  # what an earlier, unfinished attempt left: its MLflow runs but the one it resumes into
        tracking.delete_sweep_runs(client, sweep.spec.experiment, sweep.name, r.key, keep=_resumable(launched(r)))
        (out / "runs" / f"{r.key}.json").unlink(missing_ok=True)

    def launch(r: SweepRun) -> tuple[SweepRun, int, float]:
        from bench.run.train import config_yaml

        cfg_path = out / "configs" / f"{r.key}.yaml"
        cfg_path.parent.mkdir(exist_ok=True)
        cfg_path.write_text(config_yaml(launched(r)))
        log_path = out / "logs" / f"{r.key}.log"
        start = time.perf_counter()
        # a multi-process run's launcher starts its other processes by re-running this process's command
        alone = isolate or r.cfg.trainer.world_size > 1
        return r, (isolated if alone else workers).run(cfg_path, log_path), time.perf_counter() - start

    failed = []
    (out / "logs").mkdir(exist_ok=True)
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}
    isolated, workers = Isolated(env), WorkerPool(jobs, env, out / "logs")  # workers start when first needed
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        try:
            futures = [pool.submit(launch, r) for r in todo]
            for i, fut in enumerate(as_completed(futures), 1):
                r, rc, wall = fut.result()
                ok = rc == 0 and _finished(client, out, r)
                outcome = "done" if ok else f"FAILED (exit {rc}), see {out}/logs/{r.key}.log"
                log(f"[{i}/{len(todo)}] {r.key}: {outcome} in {wall:.1f} s")
                if not ok:
                    failed.append(r.key)
        finally:  # while the pool's threads, which started the workers, live (see _die_with_parent)
            workers.close()
    wall = time.perf_counter() - t0
    written = report(sweep, results_dir)
    tracking.log_files(client, parent, _report_files(out), "report")
    tracking.end_run(
        client,
        parent,
        {"sweep/wall_s": wall, "sweep/finished_runs": len(sweep.runs) - len(failed)},
        "FAILED" if failed else "FINISHED",
    )
    lock.close()
    if failed:
        raise CreditBenchError(
            f"{len(failed)} of {len(sweep.runs)} runs failed ({', '.join(failed[:5])}"
            f"{', ...' if len(failed) > 5 else ''}); their logs are in {out}/logs; "
            "run the sweep again to redo them"
        )
    return written


def _report_files(out: Path) -> list[Path]:
    """The report files of a sweep's folder (not the per-run configs, logs and results)."""
    return [p for p in sorted(out.iterdir()) if p.is_file() and not p.name.startswith(".")]


def log_report(uri: str, experiment: str, sweep: str, out: Path) -> str | None:
    """Log a sweep's (rewritten) report to its parent MLflow run's ``report/`` artifacts; the run's
    id, or None where the store has no such run or cannot be used."""
    try:
        client = tracking.client(uri)
        run_id = tracking.sweep_run(client, experiment, sweep)
    except CreditBenchError:
        return None
    if run_id is not None:
        tracking.log_files(client, run_id, _report_files(out), "report")
    return run_id


def _budget_text(budget: dict[str, int]) -> str:
    return ", ".join(f"{n} {k}" for k, n in budget.items())


def _parent_run(client, sweep: Sweep) -> str:
    """The sweep's parent MLflow run: the existing one for this sweep name, else a new one."""
    runs = sweep.runs
    tags = {
        "kind": "sweep",
        "sweep": sweep.name,
        "git_commit": tracking.git_commit(),
        "baseline": sweep.baseline,
        "budget": _budget_text(sweep.budget),
        "methods": ", ".join(sweep.labels),
        "models": ", ".join(dict.fromkeys(r.cfg.model.name for r in runs)),
        "tasks": ", ".join(dict.fromkeys(r.cfg.task.name for r in runs)),
        "mlflow.note.content": sweep.spec.description if sweep.spec.description is not None else f"sweep {sweep.name}",
    }
    params = {
        "runs": len(runs),
        "seeds": ", ".join(dict.fromkeys(str(r.cfg.seed) for r in runs)),
        "target": sweep.spec.target,
    }
    return tracking.open_sweep_run(client, sweep.spec.experiment, sweep.name, tags, params, sweep.path.read_text())


def _finished(client, out: Path, r: SweepRun) -> bool:
    try:
        res = RunResult.load(out / "runs" / f"{r.key}.json")
    except CreditBenchError:  # missing, or not a run's result
        return False
    return tracking.is_finished(client, res.mlflow_run_id) and res.tags.get("config_hash") == r.config_hash


def _resumable(cfg: RunConfig) -> str | None:
    """The MLflow run an interrupted attempt of this run can resume into (it left a checkpoint)."""
    from bench.engine.checkpoint import run_dir

    d = run_dir(cfg, cfg.tracking.run_name)
    if not cfg.checkpoint.every or not cfg.checkpoint.resume or not (d / "run.json").is_file():
        return None
    try:
        return json.loads((d / "run.json").read_text())["mlflow_run_id"]
    except (ValueError, KeyError, TypeError):
        return None
