"""Running a sweep (what a sweep *is* is :mod:`bench.run.sweep`): every unfinished run goes to
``--jobs`` long-lived worker processes that import everything once (:mod:`bench.run.worker`; a run
there gives the numbers its own process would), or, isolated, each to a process of its own; each run
is an MLflow run nested under one parent run for the sweep, and the sweep's report is written and
logged to that parent when they are done.

A run is finished when its result JSON (:func:`bench.run.sweep.result_path`) exists for the same
configuration and its MLflow run is FINISHED; a sweep started again skips finished runs, deletes the
MLflow runs that an interrupted attempt left behind and redoes those runs, so each run appears
exactly once in MLflow.
"""

from __future__ import annotations

import copy
import dataclasses
import fcntl
import json
import os
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path
from typing import Any

from bench.config import RunConfig
from bench.errors import CreditBenchError
from bench.run import sweep_runs, tracking
from bench.run.result import RunResult
from bench.run.stores import claim_store, record_store
from bench.run.sweep import Sweep, SweepRun, result_path
from bench.run.worker import Isolated, WorkerPool


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
    ``report(sweep, results_dir)`` (bench.report.files.write_report) and log it to the parent run.
    The runs go to ``jobs`` long-lived worker processes (bench.run.worker), or with ``isolate``
    each to a ``creditbench train`` process of its own."""
    uri = uri or tracking.default_uri()
    tracking.check_tracking_uri(uri, write=True)  # before results/<sweep>/, its lock or the parent run exist
    out = Path(results_dir) / sweep.name
    out.mkdir(parents=True, exist_ok=True)
    lock = _lock(out, sweep.name)
    recorded = claim_store(out, uri, sweep.name)  # before anything in results/<sweep>/ or either store is touched
    t0 = time.perf_counter()
    client = tracking.client(uri)
    parent = _parent_run(client, sweep, recorded)
    record_store(out, uri, client.get_run(parent).info.experiment_id, parent)
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
        return _launched(r, sweep, threads, uri, results_dir, parent)

    for r in todo:  # what an earlier, unfinished attempt left: its MLflow runs but the one it resumes into
        sweep_runs.delete_sweep_runs(client, sweep.spec.experiment, sweep.name, r.key, keep=_resumable(launched(r)))
        result_path(results_dir, sweep.name, r.key).unlink(missing_ok=True)

    def launch(r: SweepRun) -> tuple[SweepRun, int, float]:
        from bench.run.args import config_yaml

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
    sweep_runs.log_files(client, parent, _report_files(out), "report")
    sweep_runs.end_run(
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


def _lock(out: Path, name: str):
    """The sweep's lock (results/<sweep>/.lock), held until closed; refused while another holds it."""
    lock = open(out / ".lock", "w")
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        lock.close()
        raise CreditBenchError(f"sweep {name!r} is already running (results/{name}/.lock is held)") from None
    return lock


def _launched(r: SweepRun, sweep: Sweep, threads: int, uri: str, results_dir: str, parent: str) -> RunConfig:
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


def _report_files(out: Path) -> list[Path]:
    """The report files of a sweep's folder (not the per-run configs, logs and results)."""
    return [p for p in sorted(out.iterdir()) if p.is_file() and not p.name.startswith(".")]


def log_report(uri: str, experiment: str, sweep: str, out: Path) -> str | None:
    """Log a sweep's (rewritten) report to its parent MLflow run's ``report/`` artifacts; the run's
    id, or None where the store has no such run or cannot be used."""
    try:
        client = tracking.client(uri)
        run_id = sweep_runs.sweep_run(client, experiment, sweep)
    except CreditBenchError:
        return None
    if run_id is not None:
        sweep_runs.log_files(client, run_id, _report_files(out), "report")
    return run_id


def _budget_text(budget: dict[str, int]) -> str:
    return ", ".join(f"{n} {k}" for k, n in budget.items())


def _parent_run(client, sweep: Sweep, run_id: str | None = None) -> str:
    """The sweep's parent MLflow run: ``run_id`` (the one results/<sweep>/store.json records), else the
    existing one for this sweep name, else a new one."""
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
    spec_text = sweep.path.read_text()
    return sweep_runs.open_sweep_run(client, sweep.spec.experiment, sweep.name, tags, params, spec_text, run_id)


def _finished(client, out: Path, r: SweepRun) -> bool:
    try:
        res = RunResult.load(out / "runs" / f"{r.key}.json")  # result_path(results_dir, sweep, key)
    except CreditBenchError:  # missing, or not a run's result
        return False
    return sweep_runs.is_finished(client, res.mlflow_run_id) and res.tags.get("config_hash") == r.config_hash


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
