"""Benchmark: the sweep engines on one machine: this machine's worker processes against Ray (one node, and
a two-node cluster on this machine), and a node lost mid-sweep.

    python -m bench.perf.sweep_engines [--spec results/sweeps/embedded-quick.yaml] [--out results/benchmarks]

The spec's sweep runs from scratch (a scratch MLflow store and results folder; the warm-start cache is
filled first, untimed) four times, each as ``creditbench sweep`` in a process of its own:

1. ``pool``: ``--jobs 2`` worker processes (bench.sweep.worker);
2. ``ray, 1 node``: ``--ray local --jobs 2`` (a Ray instance the sweep starts on this machine);
3. ``ray, 2 nodes``: ``--ray ADDRESS`` on a cluster of two one-CPU nodes and a head without CPUs
   (ray.cluster_utils.Cluster, started before the sweep and not timed);
4. ``node lost``: as 3, with a checkpoint every step, and one node removed as soon as both running runs have
   written a checkpoint: the sweep runs what the node was running again on the other node.

Measured for each: the sweep's start-up (command start to its first line: interpreter, imports, the
spec's validation, the engine's checks and the store), the wall time of the whole sweep, and each run's
fixed cost (its wall time as the sweep reports it, less its training steps as its log times them;
the first run of each slot carries the slot's imports). Every sweep's report must equal the pool's
(all but wall times): checked, not assumed. For the lost node: the runs run again, and the steps
redone (the seconds the lost attempt had trained past its last checkpoint, over its seconds a step).
"""

from __future__ import annotations

import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

from bench.script import machine, machine_line, md_table, run_script, script_parser, write_outputs

DONE = re.compile(r"\[\d+/\d+\] (\S+): done in ([\d.]+) s")


def comparable(report: dict) -> dict:
    rows = [{**r, "metrics": {k: v for k, v in r["metrics"].items() if k != "wall_s"}} for r in report["rows"]]
    return {"rows": rows, "credit_maps": report.get("credit_maps"), "runs": report.get("runs")}


def timed_sweep(spec: Path, root: Path, name: str, extra: list[str]) -> dict[str, Any]:
    """Run the sweep once; its start-up, wall time, each run's wall time and fixed cost, and its report."""
    results, uri = root / name / "results", f"sqlite:///{root / name / 'mlflow.db'}"
    results.mkdir(parents=True)
    cmd = [sys.executable, "-m", "bench.cli", "sweep", str(spec), "--results_dir", str(results), "--uri", uri, *extra]
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1)
    startup, walls, lines = None, {}, []
    for line in proc.stdout:
        lines.append(line.rstrip())
        if startup is None and line.startswith("sweep "):
            startup = time.perf_counter() - t0
        m = DONE.match(line)
        if m:
            walls[m.group(1)] = float(m.group(2))
    if proc.wait() != 0:
        raise SystemExit(f"sweep {name} failed:\n" + "\n".join(lines[-30:]))
    wall = time.perf_counter() - t0
    from bench.run.timing import read_timing

    out = results / yaml.safe_load(spec.read_text())["name"]
    fixed = {k: round(w - read_timing(out / "logs" / f"{k}.log").get("fit", 0.0), 3) for k, w in walls.items()}
    report = json.loads((out / "report.json").read_text())
    return {
        "startup_s": round(startup or 0.0, 2),
        "wall_s": round(wall, 1),
        "run_wall_s": walls,
        "fixed_s": fixed,
        "lines": [x for x in lines if x.startswith(("sweep ", "[", "grpo", "s_trace")) or "node left" in x],
        "report": comparable(report),
        "out": str(out),
    }


def cluster(nodes: int = 2):
    from ray.cluster_utils import Cluster

    c = Cluster(initialize_head=True, connect=False, head_node_args={"num_cpus": 0, "include_dashboard": False})
    return c, [c.add_node(num_cpus=1, include_dashboard=False) for _ in range(nodes)]


def node_lost(spec: Path, root: Path) -> dict[str, Any]:
    """The sweep on two nodes, a checkpoint every step, one node removed once a run has checkpointed."""
    ckpts = root / "lost-checkpoints"
    os.environ["CREDITBENCH_CHECKPOINTS"] = str(ckpts)
    c, workers = cluster(2)
    state: dict[str, Any] = {}
    import threading

    def remove_when_checkpointed() -> None:
        while not state.get("done"):
            found = sorted(ckpts.glob("*/last.ckpt"), key=lambda p: p.stat().st_mtime)
            if len(found) >= 2:  # both nodes' runs past a checkpoint
                state["since_checkpoint_s"] = {p.parent.name: time.time() - p.stat().st_mtime for p in found}
                c.remove_node(workers[0])
                state["removed_at"] = time.time()
                return
            time.sleep(0.1)

    watcher = threading.Thread(target=remove_when_checkpointed, daemon=True)
    watcher.start()
    try:
        timed = timed_sweep(spec, root, "lost", ["--ray", c.address])
    finally:
        state["done"] = True
        c.shutdown()
        os.environ.pop("CREDITBENCH_CHECKPOINTS", None)
    out = Path(timed["out"])
    lost = sorted(p.name.split(".lost-")[0] for p in (out / "logs").glob("*.lost-*.log"))
    redone = {}
    from bench.run.result import result_path
    from bench.run.timing import read_timing

    for key in lost:
        n = int(json.loads(result_path(out.parent, out.name, key).read_text())["steps"])
        fit = read_timing(out / "logs" / f"{key}.log").get("fit", 0.0)
        since = next((s for d, s in state.get("since_checkpoint_s", {}).items() if d.startswith(key)), None)
        per_step = fit / n if n and fit else None
        redone[key] = {
            "seconds_past_checkpoint": None if since is None else round(since, 2),
            "s_per_step": None if per_step is None else round(per_step, 3),
            "steps_redone": None if since is None or not per_step else round(since / per_step, 2),
        }
    return {**timed, "runs_redone": lost, "redone": redone}


def main() -> int:
    ap = script_parser(__doc__, "python -m bench.perf.sweep_engines")
    ap.add_argument("--spec", default="results/sweeps/embedded-quick.yaml")
    ap.add_argument("--out", default="results/benchmarks")
    a = ap.parse_args()
    root = Path(tempfile.mkdtemp(prefix="sweep-engines-"))
    src = Path(a.spec).resolve()
    spec = yaml.safe_load(src.read_text())
    if spec.get("base") and not Path(spec["base"]).is_absolute():
        spec["base"] = str((src.parent / spec["base"]).resolve())
    path = root / src.name
    path.write_text(yaml.safe_dump(spec))
    lost_spec = root / f"lost-{src.name}"
    lost_spec.write_text(yaml.safe_dump({**spec, "overrides": {**spec.get("overrides", {}), "checkpoint.every": 1}}))
    timed_sweep(path, root, "warm", ["--jobs", "2"])  # fills the warm-start cache: every timed sweep hits it
    runs = {"pool": timed_sweep(path, root, "pool", ["--jobs", "2"])}
    runs["ray, 1 node"] = timed_sweep(path, root, "ray1", ["--ray", "local", "--jobs", "2"])
    c, _ = cluster(2)
    try:
        runs["ray, 2 nodes"] = timed_sweep(path, root, "ray2", ["--ray", c.address])
    finally:
        c.shutdown()
    runs["node lost"] = node_lost(lost_spec, root)
    same = {k: r["report"] == runs["pool"]["report"] for k, r in runs.items()}
    rows = []
    for k, r in runs.items():
        fixed = list(r["fixed_s"].values())
        rows.append(
            [
                k,
                f"{r['startup_s']:.1f}",
                f"{statistics.median(fixed):.2f}" if fixed else "-",
                f"{r['wall_s']:.1f}",
                f"{100 * (r['wall_s'] / runs['pool']['wall_s'] - 1):+.1f}%",
                "yes" if same[k] else "NO",
            ]
        )
    m = machine(torch_threads=1, packages=("ray",))
    lost = runs["node lost"]
    redone = "; ".join(
        f"{k}: {v['seconds_past_checkpoint']} s past its checkpoint at {v['s_per_step']} s a step, "
        f"{v['steps_redone']} steps redone"
        if v["steps_redone"] is not None
        else f"{k}: no checkpoint yet, run again from its start"
        for k, v in lost["redone"].items()
    )
    md = "\n".join(
        [
            "# Sweep engines: worker processes and Ray",
            "",
            f"Machine: {machine_line(m, 'ray')}. `python -m bench.perf.sweep_engines --spec {a.spec}`: "
            f"{len(runs['pool']['run_wall_s'])} runs a sweep, from scratch, 2 at a time (threads 1 each).",
            "",
            *md_table(
                "engine | start-up (s) | fixed cost a run, median (s) | sweep wall (s) | wall vs pool | same report",
                rows,
                "lrrrrl",
            ),
            "",
            "Start-up: command start to the sweep's first line. Fixed cost: a run's wall time less its training "
            "steps (the first run of each slot carries the slot's imports).",
            f"Node lost: runs run again {len(lost['runs_redone'])} ({', '.join(lost['runs_redone']) or 'none'}); "
            f"{redone or 'no run was on the lost node'}.",
        ]
    )
    data = {
        "machine": m,
        "args": vars(a),
        "same_report": same,
        "runs": {k: {**r, "report": None} for k, r in runs.items()},
    }
    for p in write_outputs(a.out, "sweep_engines", md, data):
        print(f"written: {p}")
    print(md)
    return 0 if all(same.values()) else 1


if __name__ == "__main__":
    run_script(main, "python -m bench.perf.sweep_engines")
