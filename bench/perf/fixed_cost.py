"""Benchmark: the fixed cost of a sweep's run, a process per run against long-lived workers.

    python -m bench.perf.fixed_cost [--config results/configs/embedded_grpo.yaml] [--runs 4]
                                    [--steps 2] [--problems 16] [--out results/benchmarks]

A sweep of ``--runs`` minimal runs of the config (GRPO and GSPO alternating, seeds 0, 1, ...; ``--steps``
RL steps, one eval at step 0 and one at the end over ``--problems`` problems) runs twice, one job
at a time, into a scratch MLflow store and results folder: first each run in a ``creditbench
train`` process of its own (isolated), then through one worker process (bench.sweep.worker). Each
run's wall time, as the sweep measures it, is split with the phase timings the run prints into its
log (bench.run.timing): set-up, base policy (warm-start cache hit and load), MLflow (store, run,
params), build (module, data, trainer), the step-0 eval, the training steps, the final eval and
finishing (result, store). What the run itself does not account for is the process: interpreter
start, imports and exit for an isolated run, the request and state reset for a worker's run.
The fixed cost of a run is its wall time less its training steps. The worker's one-off start (its
imports) is reported beside it, taken off its first run's wall time. The warm-start cache is filled
before anything is timed, and both sweeps must give the same numbers (every eval point's pass@k and
per-problem counts, the training means): they are checked, not assumed.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import statistics
import tempfile
from pathlib import Path
from typing import Any

import yaml

from bench.script import machine, machine_line, md_table, run_script, script_parser, write_outputs

PHASES = ("setup", "base", "mlflow", "build", "eval0", "fit", "eval_final", "finish")
LABELS = {
    "process": "interpreter, imports, exit (isolated) / request, reset (worker)",
    "setup": "set-up (config, tasks, checks)",
    "base": "base policy (warm-start cache hit, load)",
    "mlflow": "MLflow (store, run, params)",
    "build": "module, data, trainer",
    "eval0": "step-0 eval (and credit map)",
    "eval_final": "final eval",
    "finish": "result, store, end",
    "fit": "training steps",
}


def no_report(sweep, results_dir: str) -> dict[str, Any]:
    """The sweep's report is not measured here: only its runs."""
    return {}


def sweep_spec(config: Path, runs: int, steps: int, problems: int, name: str) -> dict[str, Any]:
    """A sweep of ``runs`` minimal runs of ``config``: GRPO and GSPO alternating over seeds."""
    base = yaml.safe_load(config.read_text())
    batch = base["rl"]["prompts_per_step"] * base["rl"]["group_size"]
    return {
        "name": name,
        "base": str(config.resolve()),
        "methods": ["grpo", "gspo"][: min(runs, 2)],
        "models": [base["model"]["name"]],
        "seeds": list(range(-(-runs // 2))),
        "budget": {"samples": steps * batch},
        "eval": {"every": 100_000, "num_problems": problems, "batch_problems": problems},
        "threads": 1,
    }


def time_sweep(spec: dict[str, Any], root: Path, isolate: bool) -> dict[str, Any]:
    """Run the sweep (one job) and read back each run's wall time, phases and eval history."""
    from bench.run.result import RunResult, result_path
    from bench.run.timing import read_timing
    from bench.sweep import launch
    from bench.sweep.sweep import load_spec

    path = root / f"{spec['name']}.yaml"
    path.write_text(yaml.safe_dump(spec))
    walls: dict[str, float] = {}

    def log(line: str) -> None:
        m = re.match(r"\[\d+/\d+\] (\S+): done in ([\d.]+) s", line)
        if m:
            walls[m.group(1)] = float(m.group(2))
        print(line, flush=True)

    loaded = load_spec(path)
    pool_starts: list[float] = []
    original = launch.WorkerPool

    class Recorded(original):  # the worker's one-off import time, from its ready line
        def close(self) -> None:
            pool_starts.extend(self.startup_s)
            super().close()

    launch.WorkerPool = Recorded
    try:
        launch.run_sweep(loaded, no_report, 1, str(root / "results"), f"sqlite:///{root / 'mlflow.db'}", log, isolate)
    finally:
        launch.WorkerPool = original
    out = root / "results" / spec["name"]
    if pool_starts:  # the worker started (imported everything) inside its first run's wall time
        first = next(iter(walls))
        walls[first] = round(walls[first] - pool_starts[0], 3)
    runs = {}
    for r in loaded.runs:
        timing = read_timing(out / "logs" / f"{r.key}.log")
        res = RunResult.load(result_path(root / "results", spec["name"], r.key))
        phases = {**timing, "process": round(walls[r.key] - sum(timing.values()), 3)}
        numbers = {"history": [dataclasses.asdict(p) for p in res.history], "train": res.train}
        runs[r.key] = {"wall_s": walls[r.key], "phases": phases, "numbers": json.loads(json.dumps(numbers))}
    return {"runs": runs, "worker_start_s": pool_starts}


def summarize(timed: dict[str, Any]) -> dict[str, float]:
    """Median over the runs (the first run of the worker included) of each phase, the wall time and the fixed cost."""
    runs = list(timed["runs"].values())
    out = {k: round(statistics.median(r["phases"][k] for r in runs), 2) for k in ("process", *PHASES)}
    out["wall_s"] = round(statistics.median(r["wall_s"] for r in runs), 2)
    out["fixed_s"] = round(statistics.median(r["wall_s"] - r["phases"]["fit"] for r in runs), 2)
    return out


def main() -> int:
    ap = script_parser(__doc__, "python -m bench.perf.fixed_cost")
    ap.add_argument("--config", default="results/configs/embedded_grpo.yaml")
    ap.add_argument("--runs", type=int, default=4, help="runs in each sweep (default 4)")
    ap.add_argument("--steps", type=int, default=2, help="RL steps a run (default 2)")
    ap.add_argument("--problems", type=int, default=16, help="eval problems (default 16)")
    ap.add_argument("--out", default="results/benchmarks")
    a = ap.parse_args()
    root = Path(tempfile.mkdtemp(prefix="fixed-cost-"))
    os.environ.setdefault("CREDITBENCH_CHECKPOINTS", str(root / "checkpoints"))
    config = Path(a.config)
    # the warm-start cache hit is what a sweep's runs see: fill the cache first, untimed
    time_sweep(sweep_spec(config, 1, 1, 2, "warm"), root, isolate=True)
    timed = {
        mode: time_sweep(sweep_spec(config, a.runs, a.steps, a.problems, f"fixed-{mode}"), root, mode == "isolated")
        for mode in ("isolated", "worker")
    }
    same = all(
        timed["isolated"]["runs"][k]["numbers"] == timed["worker"]["runs"][k]["numbers"]
        for k in timed["isolated"]["runs"]
    )
    summary = {mode: summarize(t) for mode, t in timed.items()}
    m = machine(torch_threads=1)
    rows = [
        [LABELS[k], f"{summary['isolated'][k]:.2f}", f"{summary['worker'][k]:.2f}"]
        for k in ("process", *PHASES)
        if k != "fit"
    ]
    rows += [
        ["**fixed cost** (wall less training steps)", *(f"**{summary[x]['fixed_s']:.2f}**" for x in timed)],
        [LABELS["fit"], *(f"{summary[x]['fit']:.2f}" for x in timed)],
        ["run wall time", *(f"{summary[x]['wall_s']:.2f}" for x in timed)],
    ]
    starts = timed["worker"]["worker_start_s"]
    md = "\n".join(
        [
            "# The fixed cost of a sweep's run",
            "",
            f"Machine: {machine_line(m)}. `python -m bench.perf.fixed_cost --config {a.config} --runs {a.runs} "
            f"--steps {a.steps} --problems {a.problems}`: {a.runs} runs a sweep, one at a time, each "
            f"{a.steps} RL steps with an eval of {a.problems} problems at step 0 and at the end. "
            "Median seconds a run:",
            "",
            *md_table("phase | isolated (a process a run) | worker", rows, "lrr"),
            "",
            f"The worker's one-off start (imports), not in the rows above: {', '.join(f'{s:.1f} s' for s in starts)}.",
            f"Same numbers (eval history, training means) in both sweeps: {'yes' if same else 'NO'}.",
        ]
    )
    data = {"machine": m, "args": vars(a), "summary": summary, "same_results": same, "timed": timed}
    for p in write_outputs(a.out, "fixed_cost", md, data):
        print(f"written: {p}")
    print(md)
    return 0 if same else 1


if __name__ == "__main__":
    run_script(main, "python -m bench.perf.fixed_cost")
