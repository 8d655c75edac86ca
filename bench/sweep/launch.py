"""Running a sweep (what a sweep *is* is :mod:`bench.sweep.sweep`): every unfinished run goes to
``--jobs`` long-lived worker processes that import everything once (:mod:`bench.sweep.worker`; a run
there gives the numbers its own process would), or, isolated, each to a process of its own; each run
is an MLflow run nested under one parent run for the sweep, and the sweep's report is written and
logged to that parent when they are done.

A run is finished when its result JSON (:func:`bench.run.result.result_path`) exists for the same
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
import signal
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path
from typing import Any

from bench.config import RunConfig, default_uri
from bench.engine.checkpoint_dir import run_dir
from bench.errors import CreditBenchError
from bench.run.result import RunResult, result_path
from bench.sweep.ray_engine import MAX_ATTEMPTS, RunLost
from bench.sweep.sweep import Sweep, SweepRun
from bench.sweep.worker import Isolated, WorkerPool
from bench.tracking import sweep_runs, tracking
from bench.tracking.stores import claim_store, record_store

LOST = -1000
"""A run's outcome when its node left the cluster on every attempt."""


def run_sweep(
    sweep: Sweep,
    report: Callable[[Sweep, str], dict[str, Any]],
    jobs: int | None = 1,
    results_dir: str = "results",
    uri: str | None = None,
    log=print,
    isolate: bool = False,
    ray: str | None = None,
) -> dict[str, Any]:
    """Run every unfinished run of the sweep, ``jobs`` at a time, then write its report with
    ``report(sweep, results_dir)`` (bench.report.files.write_report) and log it to the parent run.
    The runs go to ``jobs`` long-lived worker processes (bench.sweep.worker), or with ``isolate``
    each to a ``creditbench train`` process of its own, or with ``ray`` (a cluster's address, or
    "local") to actors on a Ray cluster (bench.sweep.ray_engine; ``jobs`` None: as many as it holds).
    Ctrl-C stops the runs, marks them and the parent run KILLED, says so in one line and raises
    :class:`SweepInterrupted`; the same call again resumes."""
    uri = uri or default_uri()
    tracking.check_tracking_uri(uri, write=True)  # before results/<sweep>/, its lock or the parent run exist
    plan = plan_engine(sweep, jobs, isolate, ray, results_dir)  # the cluster and what it can run, likewise
    out = Path(results_dir) / sweep.name
    out.mkdir(parents=True, exist_ok=True)
    lock = _lock(out, sweep.name)
    recorded = claim_store(out, uri, sweep.name)  # before anything in results/<sweep>/ or either store is touched
    t0 = time.perf_counter()
    (out / "logs").mkdir(exist_ok=True)
    engine = plan.engine(out / "logs")
    # the workers start now and import while the store is set up below (runs with a result may be finished)
    engine.warm([r.cfg for r in sweep.runs if not result_path(results_dir, sweep.name, r.key).is_file()])
    try:
        client = tracking.client(uri)
        parent = _parent_run(client, sweep, recorded)
        record_store(out, uri, client.get_run(parent).info.experiment_id, parent)
        (out / "sweep.yaml").write_text(sweep.path.read_text())
        attempt = _Attempt(sweep, plan, client, out, parent, uri, results_dir, log, engine=engine)
        try:
            failed = attempt.execute()
        except KeyboardInterrupt:
            attempt.interrupted(lock)
            raise SweepInterrupted from None
    finally:
        engine.close()  # closed already when the runs ran; not when the set-up failed
    wall = time.perf_counter() - t0
    try:
        written = report(sweep, results_dir)
        sweep_runs.log_files(client, parent, sweep_runs.report_files(out), "report")
    except CreditBenchError:  # no report without finished runs: the parent still ends, FAILED
        if not failed:
            raise
        written = {}
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


@dataclasses.dataclass
class _Attempt:
    """One attempt at a sweep's unfinished runs: each to the engine (again, where its node left the
    cluster), its outcome logged as it ends."""

    sweep: Sweep
    plan: EnginePlan
    client: Any
    out: Path
    parent: str
    uri: str
    results_dir: str
    log: Callable[[str], None]
    engine: Any
    """The engine the runs go to (EnginePlan.engine), its workers possibly started ahead."""
    stopping: threading.Event = dataclasses.field(default_factory=threading.Event)

    def launched(self, r: SweepRun) -> RunConfig:
        return _launched(r, self.sweep, self.plan.threads, self.uri, self.results_dir, self.parent)

    def result(self, r: SweepRun) -> Path:
        return result_path(self.results_dir, self.sweep.name, r.key)

    def finished(self, r: SweepRun) -> bool:
        """The run's result JSON is there, for its configuration, and its MLflow run finished."""
        try:
            res = RunResult.load(self.result(r))
        except CreditBenchError:  # missing, or not a run's result
            return False
        return sweep_runs.is_finished(self.client, res.mlflow_run_id) and res.tags.get("config_hash") == r.config_hash

    def forget(self, r: SweepRun) -> None:
        """What an unfinished attempt of the run left: its MLflow runs but the one it resumes into, its result."""
        keep = _resumable(self.launched(r))
        sweep_runs.delete_sweep_runs(self.client, self.sweep.spec.experiment, self.sweep.name, r.key, keep=keep)
        self.result(r).unlink(missing_ok=True)

    def launch(self, r: SweepRun) -> tuple[SweepRun, int, float]:
        from bench.run.args import config_yaml

        cfg = self.launched(r)
        cfg_path = self.out / "configs" / f"{r.key}.yaml"
        cfg_path.parent.mkdir(exist_ok=True)
        cfg_path.write_text(config_yaml(cfg))
        start, log = time.perf_counter(), self.out / "logs" / f"{r.key}.log"
        for attempt in range(1, MAX_ATTEMPTS + 1):
            try:
                return r, self.engine.run(cfg, cfg_path, log), time.perf_counter() - start
            except RunLost:
                if log.is_file():  # kept beside the next attempt's: <key>.lost-<attempt>.log
                    log.replace(log.with_name(f"{r.key}.lost-{attempt}.log"))
                if self.stopping.is_set() or attempt == MAX_ATTEMPTS:
                    break
                self.log(
                    f"{r.key}: its node left the cluster; running it again (attempt {attempt + 1} of {MAX_ATTEMPTS})"
                )
                self.forget(r)
        return r, LOST, time.perf_counter() - start

    def execute(self) -> list[str]:
        """Run the unfinished runs; the keys of those that failed."""
        todo = [r for r in self.sweep.runs if not self.finished(r)]
        self.log(
            f"sweep {self.sweep.name}: {len(self.sweep.runs)} runs, {len(self.sweep.runs) - len(todo)} finished, "
            f"{len(todo)} to run ({self.plan.jobs} at a time{self.plan.where}, {self.plan.threads} threads each); "
            f"MLflow parent run {self.parent}"
        )
        for r in todo:
            self.forget(r)
        failed: list[str] = []
        pool = ThreadPoolExecutor(max_workers=self.plan.jobs)
        try:
            futures = [pool.submit(self.launch, r) for r in todo]
            for i, fut in enumerate(as_completed(futures), 1):
                r, rc, wall = fut.result()
                ok = rc == 0 and self.finished(r)
                why = "its node left the cluster" if rc == LOST else f"exit {rc}"
                outcome = "done" if ok else f"FAILED ({why}), see {self.out}/logs/{r.key}.log"
                self.log(f"[{i}/{len(todo)}] {r.key}: {outcome} in {wall:.1f} s")
                if not ok:
                    failed.append(r.key)
        except KeyboardInterrupt:
            signal.signal(signal.SIGINT, signal.SIG_IGN)  # one Ctrl-C is enough; another must not cut the clean-up
            self.stopping.set()
            self.engine.stop()
            pool.shutdown(wait=False, cancel_futures=True)
            raise
        finally:  # while the pool's threads, which started the workers, live (see worker._die_with_parent)
            self.engine.close()
            pool.shutdown(wait=True)
        return failed

    def interrupted(self, lock) -> None:
        """After Ctrl-C: the engine is stopped; mark what ran KILLED, say so in one line."""
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        self.engine.stop()
        finished = sum(self.finished(r) for r in self.sweep.runs)
        killed = _kill_unfinished(self.client, self.sweep, self.parent)
        lock.close()
        self.log(
            f"sweep {self.sweep.name} interrupted: {finished} of {len(self.sweep.runs)} runs finished, {killed} "
            "stopped and marked KILLED in MLflow; run the same command again to resume"
        )


class SweepInterrupted(KeyboardInterrupt):
    """Ctrl-C during a sweep, after the sweep stopped its runs and said so in one line."""


def _kill_unfinished(client, sweep: Sweep, parent: str) -> int:
    """Mark the sweep's runs that an interrupt left RUNNING, and its parent run, KILLED; how many runs."""
    exp = tracking.experiment_id(client, sweep.spec.experiment)
    running = client.search_runs([exp], f"tags.sweep = '{sweep.name}' and attributes.status = 'RUNNING'")
    runs = [r.info.run_id for r in running if r.info.run_id != parent]
    for run_id in [*runs, parent]:
        client.set_terminated(run_id, "KILLED")
    return len(runs)


@dataclasses.dataclass
class EnginePlan:
    """Where a sweep's runs go: this machine's worker processes, or a Ray cluster's actors."""

    jobs: int
    threads: int
    engine: Callable[[Path], Any]
    """Starts the engine, given the folder of the workers' own logs."""
    where: str = ""


class LocalEngine:
    """This machine's engine: ``jobs`` long-lived worker processes (bench.sweep.worker), and a process
    of its own for a run that starts processes of its own (or for every run, ``isolate``)."""

    def __init__(self, jobs: int, threads: int, logs: Path, isolate: bool) -> None:
        env = {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}
        self.isolate = isolate
        self.isolated, self.workers = Isolated(env), WorkerPool(jobs, env, logs)  # workers start at warm() or first use

    def alone(self, cfg: RunConfig) -> bool:
        """Whether the run gets a process of its own (a multi-process run's launcher starts its other
        processes by re-running this process's command)."""
        return self.isolate or cfg.trainer.world_size > 1

    def warm(self, cfgs: list[RunConfig]) -> None:
        """Start the workers now where any of these runs will go to one."""
        if not all(map(self.alone, cfgs)):
            self.workers.start()

    def run(self, cfg: RunConfig, config: Path, log: Path) -> int:
        return (self.isolated if self.alone(cfg) else self.workers).run(config, log)

    def stop(self) -> None:
        self.isolated.stop()
        self.workers.stop()

    def close(self) -> None:
        self.workers.close()


def plan_engine(sweep: Sweep, jobs: int | None, isolate: bool, ray: str | None, results_dir: str) -> EnginePlan:
    """The engine for the sweep's runs, checked before anything is started or written: with ``ray`` (an
    address, or "local") a Ray cluster (checked by bench.sweep.ray_cluster, run by bench.sweep.ray_engine),
    else this machine's worker processes."""
    if ray is None:
        jobs = jobs or 1
        threads = sweep.spec.threads or max(1, (os.cpu_count() or 1) // jobs)
        return EnginePlan(jobs, threads, lambda logs: LocalEngine(jobs, threads, logs, isolate))
    from bench.sweep import ray_cluster as rc
    from bench.sweep.ray_engine import RayEngine

    address = rc.resolve_address(None if ray == "local" else ray)
    started = rc.connect(address)
    try:
        live = rc.nodes()
        where = f"at {address}" if address else "on this machine"
        gpus = sum(n["gpus"] for n in live)
        first = [dataclasses.replace(r.cfg, threads=sweep.spec.threads or 1) for r in sweep.runs]
        rc.check_runs([(r.key, c) for r, c in zip(sweep.runs, first)], live, where)
        n = rc.slots(first, live, jobs)
        # at most the smallest node's CPUs: every run checked above fits any node that fits its GPUs
        threads = sweep.spec.threads or max(1, min(sum(x["cpus"] for x in live) // n, min(x["cpus"] for x in live)))
        folders = {"the results folder": Path(results_dir).resolve()}
        dirs = sorted({r.cfg.checkpoint.dir for r in sweep.runs})
        folders |= {f"checkpoint.dir {d}" if len(dirs) > 1 else "checkpoint.dir": Path(d).resolve() for d in dirs}
        rc.check_shared(folders, live)
    except BaseException:
        if started:
            import ray as ray_

            ray_.shutdown()
        raise
    return EnginePlan(n, threads, lambda logs: RayEngine(n, started, gpus), f" on {len(live)} Ray nodes")


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


def _resumable(cfg: RunConfig) -> str | None:
    """The MLflow run an interrupted attempt of this run can resume into (it left a checkpoint)."""
    d = run_dir(cfg, cfg.tracking.run_name)
    if not cfg.checkpoint.every or not cfg.checkpoint.resume or not (d / "run.json").is_file():
        return None
    try:
        return json.loads((d / "run.json").read_text())["mlflow_run_id"]
    except (ValueError, KeyError, TypeError):
        return None
