"""Sweeps: every method x model x seed (x training task) of a YAML spec, each an independent
``creditbench train`` process and an MLflow run nested under one parent run for the sweep.

    creditbench sweep results/sweeps/embedded.yaml [--jobs 2] [--dry-run]

The spec (see results/sweeps/ for examples)::

    name: embedded                       # results/<name>/ and the parent MLflow run's name
    base: ../configs/embedded_grpo.yaml  # optional run YAML every run starts from (relative to the spec)
    tasks: [arithmetic]                  # training task(s): a name or {name, options}
    eval_tasks: []                       # more tasks evaluated at every eval point
    methods:                             # a name, `all` (every registered method), or
      - all                              #   {name, label, options, overrides}
      - {name: grpo, label: grpo-lora16, overrides: {model.lora.rank: 16}}
    method_overrides: {arca: {model.lora.rank: 16}}   # overrides for a method wherever it appears
    models: [tiny-500k, tiny-2m]         # tiny sizes, local directories or Hub ids
    seeds: [0, 1]
    budget: {samples: 4096}              # required: training samples or generated tokens per run
    eval: {every: 8, n: 4, k: [1, 2, 4], num_problems: 100}
    overrides: {rl.lr: 1.0e-4}           # any run config field, dotted, for every run
    baseline: grpo                       # the label paired differences and the target refer to
    target: 0.9                          # cost to reach the baseline's base + 0.9 x its gain in pass@1
    target_of: gain                      # or final: 0.9 x the baseline's final pass@1
    threads: 1                           # torch threads per run (default: cores // jobs)

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
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from bench.config import RunConfig
from bench.errors import CreditBenchError, did_you_mean

SPEC_KEYS = ("name", "description", "experiment", "base", "tasks", "eval_tasks", "methods", "method_overrides",
             "models", "seeds", "budget", "eval", "overrides", "baseline", "target", "target_of", "threads")
METHOD_KEYS = ("name", "label", "options", "overrides")
BUDGET_KEYS = ("samples", "tokens")
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
    name: str
    path: Path
    spec: dict[str, Any]
    runs: list[SweepRun]
    experiment: str = "creditbench"
    baseline: str = "grpo"
    target: float = 0.9
    target_of: str = "gain"
    budget: dict[str, int] = field(default_factory=dict)
    threads: int = 0

    @property
    def labels(self) -> list[str]:
        return list(dict.fromkeys(r.label for r in self.runs))


# ------------------------------------------------------------------ loading and validation
def load_spec(path: str | Path, results_dir: str = "results", uri: str | None = None) -> Sweep:
    """Parse and validate a sweep spec completely (every run's configuration is built and resolved,
    which checks method, task and model names, options and value ranges) without starting anything."""
    path = Path(path)
    if not path.is_file():
        raise CreditBenchError(f"sweep spec {str(path)!r} does not exist")
    try:
        spec = yaml.safe_load(path.read_text())
    except yaml.YAMLError as e:
        raise CreditBenchError(f"sweep spec {path}: not valid YAML: {str(e).splitlines()[0]}") from None
    where = f"sweep spec {path}"
    if not isinstance(spec, dict):
        raise CreditBenchError(f"{where}: expected a mapping of {', '.join(SPEC_KEYS)}")
    for key in spec:
        if key not in SPEC_KEYS:
            raise did_you_mean(f"{where}: key", key, SPEC_KEYS)
    for key in ("name", "methods", "models", "seeds", "budget"):
        if key not in spec:
            raise CreditBenchError(f"{where}: {key!r} is required" + (
                " (training samples or generated tokens per run, e.g. budget: {samples: 4096})" if key == "budget" else ""))
    name = str(spec["name"])
    if not name or "/" in name or name.startswith("."):
        raise CreditBenchError(f"{where}: name must be a plain directory name, got {name!r}")
    budget = _budget(spec["budget"], where)
    base = _base_config(spec.get("base"), path)
    models, seeds = _list(spec["models"], "models", where), _list(spec["seeds"], "seeds", where)
    if not all(isinstance(s, int) and not isinstance(s, bool) for s in seeds):
        raise CreditBenchError(f"{where}: seeds must be integers, got {seeds}")
    tasks = [_task(t, where) for t in _list(spec.get("tasks", [base.get("task", {}).get("name", "arithmetic")]), "tasks", where)]
    raw_eval_tasks = spec.get("eval_tasks") or []
    eval_tasks = [_task(t, where) for t in (raw_eval_tasks if isinstance(raw_eval_tasks, list) else [raw_eval_tasks])]
    overrides = spec.get("overrides") or {}
    if not isinstance(overrides, dict):
        raise CreditBenchError(f"{where}: overrides must be a mapping of dotted settings to values "
                               f"(e.g. {{rl.lr: 1.0e-4}}), got {overrides!r}")
    methods = _methods(spec["methods"], spec.get("method_overrides") or {}, where)
    threads = spec.get("threads", 0)
    if not isinstance(threads, int) or threads < 0:
        raise CreditBenchError(f"{where}: threads must be an integer >= 0, got {threads!r}")
    target = spec.get("target", 0.9)
    if not isinstance(target, (int, float)) or not 0 < target <= 1:
        raise CreditBenchError(f"{where}: target must be in (0, 1], got {target!r}")
    target_of = str(spec.get("target_of", "gain"))
    from bench.report.summary import TARGETS

    if target_of not in TARGETS:
        raise CreditBenchError(f"{where}: target_of must be one of {', '.join(TARGETS)}, got {target_of!r}")
    labels = [m["label"] for m in methods]
    baseline = str(spec.get("baseline", "grpo"))
    if baseline not in labels:
        raise CreditBenchError(f"{where}: baseline {baseline!r} is not one of the sweep's method labels: {', '.join(labels)}")

    from bench.run.train import resolve

    runs = []
    for task in tasks:
        for m in methods:
            for model, model_overrides in (_model(m_, where) for m_ in models):
                for seed in seeds:
                    d = copy.deepcopy(base)
                    d["seed"] = seed
                    d.setdefault("model", {})["name"] = model
                    d["task"] = copy.deepcopy(task)
                    d["method"] = {"name": m["name"], "options": copy.deepcopy(m["options"])}
                    if spec.get("eval"):
                        if not isinstance(spec["eval"], dict):
                            raise CreditBenchError(f"{where}: eval must be a mapping of eval settings, got {spec['eval']!r}")
                        d.setdefault("eval", {}).update(copy.deepcopy(spec["eval"]))
                    if eval_tasks:
                        d.setdefault("eval", {})["tasks"] = copy.deepcopy(eval_tasks)
                    for k, v in {**overrides, **model_overrides, **m["overrides"]}.items():
                        _set(d, k, v, where)
                    rl = d.setdefault("rl", {})
                    rl["budget_samples"], rl["budget_tokens"] = budget.get("samples", 0), budget.get("tokens", 0)
                    if "samples" in budget:  # the step ceiling: the budget at one batch per step
                        ppp, g = rl.get("prompts_per_step", 16), rl.get("group_size", 8)
                        if all(isinstance(x, int) and not isinstance(x, bool) and x > 0 for x in (ppp, g)):
                            rl["steps"] = -(-budget["samples"] // (ppp * g))  # else the parser names the bad value
                    else:
                        rl.setdefault("steps", 100_000)
                    key = f"{m['label']}-{task['name']}-{Path(str(model)).name}-seed{seed}"
                    cfg = build_run_config(d, f"{where}: run {key}")
                    try:
                        resolve(cfg)
                    except CreditBenchError as e:
                        raise CreditBenchError(f"{where}: run {key}: {e}") from None
                    runs.append(SweepRun(key, m["label"], cfg, _hash(cfg)))
    keys = [r.key for r in runs]
    dup = sorted({k for k in keys if keys.count(k) > 1})
    if dup:
        raise CreditBenchError(f"{where}: runs {', '.join(dup)} appear twice; give the methods distinct labels")
    return Sweep(name, path, spec, runs, str(spec.get("experiment", "creditbench")), baseline, float(target),
                 target_of, budget, threads)


def _model(entry: Any, where: str) -> tuple[str, dict[str, Any]]:
    """A ``models`` entry: a name, or {name, overrides} (dotted keys applied to that model's runs,
    e.g. more GPUs or a smaller micro-batch for the largest model)."""
    if isinstance(entry, dict):
        bad = set(entry) - {"name", "overrides"}
        if not isinstance(entry.get("name"), str) or not entry["name"] or bad:
            raise CreditBenchError(f"{where}: a models entry is a name or {{name, overrides}}, got {entry!r}")
        overrides = entry.get("overrides") or {}
        if not isinstance(overrides, dict):
            raise CreditBenchError(f"{where}: model {entry['name']!r}: overrides must be a mapping, got {overrides!r}")
        return entry["name"], overrides
    if not isinstance(entry, str) or not entry:
        raise CreditBenchError(f"{where}: a models entry is a name or {{name, overrides}}, got {entry!r}")
    return entry, {}


def build_run_config(d: dict[str, Any], where: str) -> RunConfig:
    """A RunConfig from a nested dict through the same typed parser as ``creditbench train``."""
    from bench.run.args import config_error, train_parser

    p = train_parser()
    try:
        ns = p.parse_object(d)
        ns.pop("no_progress", None)
        ns.pop("config", None)
        cfg = p.instantiate(ns)
    except CreditBenchError as e:
        raise CreditBenchError(f"{where}: {e}") from None
    except Exception as e:  # jsonargparse: unknown keys, bad types and out-of-range values
        raise CreditBenchError(f"{where}: {config_error(e)}") from None
    return RunConfig(**{k: v for k, v in vars(cfg).items() if k in RunConfig.__dataclass_fields__})


def _budget(value: Any, where: str) -> dict[str, int]:
    if not isinstance(value, dict) or len(value) != 1 or next(iter(value)) not in BUDGET_KEYS:
        raise CreditBenchError(f"{where}: budget must be one of {{samples: N}} or {{tokens: N}} (a matched budget "
                               f"per run, not steps), got {value!r}")
    (kind, n), = value.items()
    if not isinstance(n, int) or isinstance(n, bool) or n <= 0:
        raise CreditBenchError(f"{where}: budget {kind} must be a positive integer, got {n!r}")
    return {kind: n}


def _base_config(base: str | None, spec_path: Path) -> dict[str, Any]:
    if base is None:
        return {}
    p = (spec_path.parent / base) if not Path(base).is_absolute() else Path(base)
    if not p.is_file():
        raise CreditBenchError(f"sweep spec {spec_path}: base config {str(p)!r} does not exist")
    d = yaml.safe_load(p.read_text()) or {}
    if not isinstance(d, dict):
        raise CreditBenchError(f"base config {p}: expected a mapping of run config fields")
    for key, value in d.items():
        if key in GROUPS and not isinstance(value, dict):
            raise CreditBenchError(f"base config {p}: {key} must be a mapping of its settings ({key}: {{...}}), "
                                   f"got {value!r}")
    return d


def _list(value: Any, what: str, where: str) -> list:
    value = value if isinstance(value, list) else [value]
    if not value:
        raise CreditBenchError(f"{where}: {what} must list at least one entry")
    return value


def _task(t: Any, where: str) -> dict[str, Any]:
    if isinstance(t, str):
        return {"name": t, "options": {}}
    if isinstance(t, dict) and set(t) <= {"name", "options"} and "name" in t:
        options = t.get("options") or {}
        if not isinstance(options, dict):
            raise CreditBenchError(f"{where}: task {t['name']!r}: options must be a mapping, got {options!r}")
        return {"name": str(t["name"]), "options": dict(options)}
    raise CreditBenchError(f"{where}: a task is a name or {{name, options}}, got {t!r}")


def _methods(entries: Any, per_method: dict[str, Any], where: str) -> list[dict[str, Any]]:
    from bench.registry import METHODS

    if not isinstance(per_method, dict):
        raise CreditBenchError(f"{where}: method_overrides must map method names to overrides")
    for name, value in per_method.items():
        METHODS.get(name)  # unknown names fail with the valid choices
        if value is not None and not isinstance(value, dict):
            raise CreditBenchError(f"{where}: method_overrides of {name!r} must be a mapping of dotted settings to "
                                   f"values, got {value!r}")
    out: list[dict[str, Any]] = []
    explicit = [e for e in _list(entries, "methods", where) if e != "all"]
    given = {(e if isinstance(e, str) else e.get("label", e.get("name"))) for e in explicit if isinstance(e, (str, dict))}
    for e in _list(entries, "methods", where):
        if e == "all":
            out += [{"name": n} for n in METHODS.names() if n not in given]
        elif isinstance(e, str):
            out.append({"name": e})
        elif isinstance(e, dict):
            for key in e:
                if key not in METHOD_KEYS:
                    raise did_you_mean(f"{where}: method entry key", key, METHOD_KEYS)
            if "name" not in e:
                raise CreditBenchError(f"{where}: method entry {e!r} has no name")
            out.append(dict(e))
        else:
            raise CreditBenchError(f"{where}: a method is a name, `all` or {{name, label, options, overrides}}, got {e!r}")
    for m in out:
        METHODS.get(m["name"])
        for key in ("options", "overrides"):
            if m.get(key) is not None and not isinstance(m[key], dict):
                raise CreditBenchError(f"{where}: method {m['name']!r}: {key} must be a mapping, got {m[key]!r}")
        m["label"] = str(m.get("label", m["name"]))
        m["options"] = dict(m.get("options") or {})
        m["overrides"] = {**(per_method.get(m["name"]) or {}), **(m.get("overrides") or {})}
    labels = [m["label"] for m in out]
    dup = sorted({x for x in labels if labels.count(x) > 1})
    if dup:
        raise CreditBenchError(f"{where}: method label(s) {', '.join(dup)} used twice; give each entry its own label")
    return out


def _set(d: dict[str, Any], dotted: str, value: Any, where: str) -> None:
    parts = dotted.split(".")
    if len(parts) == 1 and dotted in GROUPS and not isinstance(value, dict):
        raise CreditBenchError(f"{where}: override {dotted!r} is a group of settings: give a mapping or set its "
                               f"fields ({dotted}.<field>: value), got {value!r}")
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
    return hashlib.sha256(json.dumps(d, sort_keys=True, default=str).encode()).hexdigest()[:16]


# ------------------------------------------------------------------ running
def run_sweep(sweep: Sweep, jobs: int = 1, results_dir: str = "results", uri: str | None = None,
              log=print) -> dict[str, Any]:
    """Run every unfinished run of the sweep, ``jobs`` at a time, then write the report."""
    import mlflow

    from bench.run.tracking import git_commit

    from bench.run.tracking import check_tracking_uri

    uri = uri or os.environ.get("MLFLOW_TRACKING_URI", "sqlite:///mlflow.db")
    check_tracking_uri(uri)  # before results/<sweep>/, its lock or the parent run exist
    out = Path(results_dir) / sweep.name
    out.mkdir(parents=True, exist_ok=True)
    lock = open(out / ".lock", "w")
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        raise CreditBenchError(f"sweep {sweep.name!r} is already running (results/{sweep.name}/.lock is held)") from None
    t0 = time.perf_counter()
    client = _client(uri)
    exp_id = _experiment(client, sweep.experiment)
    parent = _parent_run(client, exp_id, sweep, git_commit())
    (out / "sweep.yaml").write_text(sweep.path.read_text())
    threads = sweep.threads or max(1, (os.cpu_count() or 1) // jobs)

    todo, done = [], []
    for r in sweep.runs:
        (done if _finished(client, out, r) else todo).append(r)
    log(f"sweep {sweep.name}: {len(sweep.runs)} runs, {len(done)} finished, {len(todo)} to run "
        f"({jobs} at a time, {threads} threads each); MLflow parent run {parent}")
    def launched(r: SweepRun) -> RunConfig:
        """The run's config as its process gets it: tracking into this sweep."""
        cfg = copy.deepcopy(r.cfg)
        cfg.threads = threads
        cfg.tracking = dataclasses.replace(
            cfg.tracking, uri=uri, experiment=sweep.experiment, run_name=r.key, sweep=sweep.name,
            results_dir=results_dir, parent_run_id=parent,
            tags={**cfg.tracking.tags, "run_key": r.key, "label": r.label, "config_hash": r.config_hash,
                  "budget": _budget_text(sweep.budget)})
        return cfg

    for r in todo:
        _discard(client, exp_id, sweep.name, r.key, out, keep=_resumable(launched(r)))

    def launch(r: SweepRun) -> tuple[SweepRun, int, float]:
        cfg = launched(r)
        from bench.run.train import config_yaml

        cfg_path = out / "configs" / f"{r.key}.yaml"
        cfg_path.parent.mkdir(exist_ok=True)
        cfg_path.write_text(config_yaml(cfg))
        log_path = out / "logs" / f"{r.key}.log"
        log_path.parent.mkdir(exist_ok=True)
        env = {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}
        start = time.perf_counter()
        with open(log_path, "w") as fh:
            proc = subprocess.run([sys.executable, "-m", "bench.cli", "train", "--config", str(cfg_path), "--no-progress"],
                                  stdout=fh, stderr=subprocess.STDOUT, env=env, preexec_fn=_die_with_parent)
        return r, proc.returncode, time.perf_counter() - start

    failed = []
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        futures = [pool.submit(launch, r) for r in todo]
        for i, fut in enumerate(as_completed(futures), 1):
            r, rc, wall = fut.result()
            ok = rc == 0 and _finished(client, out, r)
            log(f"[{i}/{len(todo)}] {r.key}: {'done' if ok else f'FAILED (exit {rc}), see {out}/logs/{r.key}.log'} in {wall:.0f} s")
            if not ok:
                failed.append(r.key)
    wall = time.perf_counter() - t0
    from bench.report.summary import write_report

    report = write_report(sweep, results_dir)
    _log_report_files(client, parent, out)
    client.log_metric(parent, "sweep/wall_s", wall)
    client.log_metric(parent, "sweep/finished_runs", len(sweep.runs) - len(failed))
    client.set_terminated(parent, "FAILED" if failed else "FINISHED")
    lock.close()
    if failed:
        raise CreditBenchError(f"{len(failed)} of {len(sweep.runs)} runs failed ({', '.join(failed[:5])}"
                               f"{', ...' if len(failed) > 5 else ''}); their logs are in {out}/logs; "
                               "run the sweep again to redo them")
    return report


def _log_report_files(client, run_id: str, out: Path) -> None:
    """The report files (not the per-run configs, logs and results) as the run's ``report/`` artifacts."""
    for path in sorted(out.iterdir()):
        if path.is_file() and not path.name.startswith("."):
            client.log_artifact(run_id, str(path), artifact_path="report")


def log_report(uri: str, experiment: str, sweep: str, out: Path) -> str | None:
    """Log a sweep's (rewritten) report to its parent MLflow run; the run's id, or None where the
    store has no such run or cannot be used."""
    try:
        client = _client(uri)
        exp = client.get_experiment_by_name(experiment)
        found = exp and client.search_runs([exp.experiment_id], f"tags.kind = 'sweep' and tags.sweep = '{sweep}'",
                                           order_by=["attributes.start_time DESC"], max_results=1)
    except CreditBenchError:
        return None
    if not found:
        return None
    _log_report_files(client, found[0].info.run_id, out)
    return found[0].info.run_id


def _budget_text(budget: dict[str, int]) -> str:
    return ", ".join(f"{n} {k}" for k, n in budget.items())


def _die_with_parent() -> None:
    """In the child before exec: die with the sweep process (SIGKILL on its death, Linux), so an
    interrupted sweep leaves no orphan runs writing to the store."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def _client(uri: str):
    from bench.run.tracking import client as tracking_client

    client = tracking_client(uri)  # checks the URI first: an unreachable server fails in seconds
    try:
        client.search_experiments(max_results=1)
    except Exception as e:
        raise CreditBenchError(f"cannot use MLflow tracking URI {uri!r}: {str(e).splitlines()[0][:300]}") from None
    return client


def _experiment(client, name: str) -> str:
    exp = client.get_experiment_by_name(name)
    return exp.experiment_id if exp is not None else client.create_experiment(name)


def _parent_run(client, exp_id: str, sweep: Sweep, commit: str) -> str:
    """The sweep's parent MLflow run: the existing one for this sweep name, else a new one."""
    found = client.search_runs([exp_id], f"tags.kind = 'sweep' and tags.sweep = '{sweep.name}'",
                               order_by=["attributes.start_time DESC"], max_results=1)
    labels = sweep.labels
    tags = {"kind": "sweep", "sweep": sweep.name, "git_commit": commit, "baseline": sweep.baseline,
            "budget": _budget_text(sweep.budget), "methods": ", ".join(labels),
            "models": ", ".join(dict.fromkeys(r.cfg.model.name for r in sweep.runs)),
            "tasks": ", ".join(dict.fromkeys(r.cfg.task.name for r in sweep.runs)),
            "mlflow.note.content": str(sweep.spec.get("description", f"sweep {sweep.name}"))}
    if found:
        run_id = found[0].info.run_id
        client.update_run(run_id, status="RUNNING")
        for k, v in tags.items():
            client.set_tag(run_id, k, v)
    else:
        run_id = client.create_run(exp_id, run_name=sweep.name, tags=tags).info.run_id
        client.log_param(run_id, "runs", len(sweep.runs))
        client.log_param(run_id, "seeds", ", ".join(dict.fromkeys(str(r.cfg.seed) for r in sweep.runs)))
        client.log_param(run_id, "target", sweep.target)
    client.log_text(run_id, sweep.path.read_text(), "sweep.yaml")
    return run_id


def _finished(client, out: Path, r: SweepRun) -> bool:
    path = out / "runs" / f"{r.key}.json"
    if not path.is_file():
        return False
    try:
        res = json.loads(path.read_text())
        run = client.get_run(res["mlflow_run_id"])
    except Exception:
        return False
    return (run.info.status == "FINISHED" and run.info.lifecycle_stage == "active"
            and res.get("tags", {}).get("config_hash") == r.config_hash)


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


def _discard(client, exp_id: str, sweep: str, key: str, out: Path, keep: str | None = None) -> None:
    """Remove what an earlier, unfinished (or differently configured) attempt of this run left: its
    MLflow runs (deleted, so every run appears once) but the one its checkpoint resumes into
    (``keep``), and its result file."""
    for run in client.search_runs([exp_id], f"tags.sweep = '{sweep}' and tags.run_key = '{key}'"):
        if run.info.run_id != keep:
            client.delete_run(run.info.run_id)
    (out / "runs" / f"{key}.json").unlink(missing_ok=True)
