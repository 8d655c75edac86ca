"""Benchmark: what a small sweep spends besides its runs, part by part, against an older checkout.

    python -m bench.perf.sweep_overhead [--spec results/sweeps/embedded.yaml] [--label grpo] [--seeds 4]
                                        [--repeats 2] [--baseline PATH] [--baseline_label NAME]
                                        [--no_profile] [--out results/benchmarks]

The sweep is the one a user runs to try a recipe: label ``--label`` of ``--spec``'s recipe (its base
config, budget, eval and overrides; no tuning, no rounds, no credit controls) on its first ``--seeds``
seeds, ``creditbench sweep SPEC --jobs 1`` in a process of its own, from scratch: a fresh MLflow store,
results folder and cache (the warm-start base comes from the checkout's pinned copy; every base eval is
computed). With ``--baseline`` the same sweep runs with that checkout's code (``PYTHONPATH``, its own
config and pinned bases), alternating with this checkout's, ``--repeats`` times each.

Each sweep's wall time (command start to process end) is split with the times its lines appear and the
phase timings its runs print into their logs (bench.run.timing):

- **start-up**: command start to the sweep's first line (interpreter, imports, the spec's validation,
  the MLflow store and the parent run);
- **the runs**: the sum of the runs' wall times as the sweep reports them, itemised by phase; what a
  run's phases do not account for is the worker's: its start (imports), waited for by the first run,
  and each run's request and state reset;
- **everything else**: from the first line to the first run's start, the gaps between runs, from the
  last run's end to the report's first line (the worker's exit, the report's statistics, tables and
  figures, their MLflow artifacts, the end of the parent run) and from there to the process's end
  (printing, the interpreter's exit).

One more sweep of each code runs under cProfile (not timed with the others: the profiler slows Python
code) and itemises the sweep process's own work by function: spec loading, the MLflow store, parent run
and clean-up, the report's statistics, files and figures, the worker's exit. Every sweep's report must
give the same numbers (every value of report.json both versions have, wall times aside): checked, not
assumed. Writes ``<out>/sweep_overhead.{md,json}``.
"""

from __future__ import annotations

import argparse
import json
import os
import pstats
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

from bench.errors import CreditBenchError
from bench.perf.fixed_cost import PHASES as RUN_PHASES  # the phases a run prints (bench.run.timing)
from bench.perf.flagship_cost import same_numbers
from bench.run.timing import read_timing
from bench.script import machine, machine_line, md_table, run_script, script_parser, write_outputs

DONE = re.compile(r"\[\d+/\d+\] (\S+): done in ([\d.]+) s")
PARTS = {
    "startup": "start-up (to the sweep's first line)",
    "runs": "the runs (sum of their wall times)",
    "else": "everything else",
    "before_runs": "first line to the first run (MLflow clean-up of unfinished attempts, ...)",
    "between_runs": "between runs",
    "report": "last run to the report (worker exit, report, its MLflow artifacts)",
    "exit": "report to process end (printing, interpreter exit)",
}
RUN_LABELS = {
    "worker_start": "worker start (imports), waited for by the first run",
    "request": "request and state reset (the worker's, each run)",
    "setup": "set-up (config, tasks, checks)",
    "base": "base policy (cache, load)",
    "mlflow": "MLflow (store, run, params)",
    "build": "module, data, trainer",
    "eval0": "base eval (step 0)",
    "fit": "training (and its evals)",
    "eval_final": "final eval",
    "finish": "result, store, end",
}
PROFILED = {  # (file name, function) in either checkout's layout -> what it is
    "spec": (("sweep.py", "load_spec"), "spec and its runs' configs (load_spec)"),
    "store": (("tracking.py", "client"), "MLflow store (import, create)"),
    "parent": (("launch.py", "_parent_run"), "MLflow parent run"),
    "forget": (("launch.py", "forget"), "clean-up of unfinished attempts (forget)"),
    "close": (("launch.py", "close"), "worker exit (the engine's close)"),
    "report": (("files.py", "write_report"), "report (write_report)"),
    "statistics": (("summary.py", "build_report"), "of which statistics (build_report)"),
    "figures": (("__init__.py", "write_plots"), "of which figures (write_plots)"),
    "artifacts": (("sweep_runs.py", "log_files"), "MLflow report artifacts (log_files)"),
    "end": (("sweep_runs.py", "end_run"), "MLflow end of parent run (end_run)"),
}
UNCOMPARED = ("wall_s", "compute_s", "run_all")  # the runs' seconds, not their numbers


def small_spec(src: Path, here: Path, code: Path, label: str, seeds: int) -> dict[str, Any]:
    """``src`` (a spec of the checkout at ``here``)'s recipe for ``label`` on its first ``seeds`` seeds,
    its base config taken from the checkout at ``code``."""
    spec = yaml.safe_load(src.read_text())
    names = [m if isinstance(m, str) else m["name"] for m in spec["methods"]]
    if label not in names:
        raise CreditBenchError(f"--label {label!r} is not a method of {src}; valid: {', '.join(names)}")
    out = {k: v for k, v in spec.items() if k not in ("tune", "sequential", "credit_controls", "description")}
    if spec.get("base"):
        out["base"] = str(code / (src.parent / spec["base"]).resolve().relative_to(here))
    out.update(name=f"{spec['name']}-{label}", methods=[label], seeds=spec["seeds"][:seeds], baseline=label)
    out["analysis"] = {k: v for k, v in spec.get("analysis", {}).items() if k != "pilot"}
    return out


def busy_s() -> float | None:
    """The CPU seconds every process on this machine has used since boot (/proc/stat; None without it)."""
    try:
        fields = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    except OSError:
        return None
    user, nice, system, _, _, irq, softirq = (int(x) for x in fields[:7])
    return (user + nice + system + irq + softirq) / os.sysconf("SC_CLK_TCK")


def children_s() -> float:
    """The CPU seconds this process's finished children (and theirs) have used."""
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def timed_sweep(code: Path, src: Path, args: argparse.Namespace, root: Path, profile: bool = False) -> dict[str, Any]:
    """One sweep with the code at ``code`` in a fresh folder under ``root``: its parts (seconds), the
    runs' phases, its report, the cores other processes used meanwhile; with ``profile`` the sweep
    process's profile, itemised."""
    root.mkdir(parents=True)
    here = Path(__file__).resolve().parents[2]
    spec = small_spec(src, here, code, args.label, args.seeds)
    path = root / "sweep.yaml"
    path.write_text(yaml.safe_dump(spec))
    env = {**os.environ, "PYTHONPATH": str(code), "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
    env.update(CREDITBENCH_CACHE=str(root / "cache"), CREDITBENCH_CHECKPOINTS=str(root / "checkpoints"))
    prof = ["-m", "cProfile", "-o", str(root / "sweep.prof")] if profile else []
    cmd = [sys.executable, *prof, "-m", "bench.cli", "sweep", str(path), "--jobs", "1"]
    cmd += ["--results_dir", str(root / "results"), "--uri", f"sqlite:///{root / 'mlflow.db'}"]
    busy0, ours0, t0 = busy_s(), children_s(), time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=root, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    first = report_at = None
    done: list[tuple[str, float, float]] = []  # (run, its wall time, when its line appeared)
    lines = []
    for line in proc.stdout:
        now = time.perf_counter() - t0
        lines.append(line.rstrip())
        if first is None and line.startswith(f"sweep {spec['name']}:"):
            first = now
        if (m := DONE.match(line)) is not None:
            done.append((m.group(1), float(m.group(2)), now))
        if report_at is None and line.startswith("# Sweep"):
            report_at = now
    if proc.wait() != 0 or first is None or report_at is None:
        raise CreditBenchError(f"the sweep with the code at {code} failed:\n" + "\n".join(lines[-20:]))
    wall, busy = time.perf_counter() - t0, busy_s()
    others = None if busy is None or busy0 is None else (busy - busy0 - (children_s() - ours0)) / wall
    out = root / "results" / spec["name"]
    phases = {key: read_timing(out / "logs" / f"{key}.log") or {} for key, _, _ in done}
    starts = [at - w for _, w, at in done]
    runs = sum(w for _, w, _ in done)
    parts = {
        "startup": first,
        "runs": runs,
        "else": wall - first - runs,
        "before_runs": starts[0] - first,
        "between_runs": sum(s - at for s, (_, _, at) in zip(starts[1:], done)),
        "report": report_at - done[-1][2],
        "exit": wall - report_at,
    }
    report = json.loads((out / "report.json").read_text())
    result = {"wall_s": wall, "parts": parts, "run_parts": run_parts(done, phases), "report": report}
    result["others_cores"] = others
    if profile:
        result["profiled"] = profiled(root / "sweep.prof")
    shutil.rmtree(root / "cache", ignore_errors=True)  # its base and base evals: the next sweep's are fresh
    return result


def run_parts(done: list[tuple[str, float, float]], phases: dict[str, dict[str, float]]) -> dict[str, float]:
    """The runs' seconds by phase, summed over runs; what their phases do not account for is the
    worker's: the first run's excess over the others' median is its start, the rest each run's request."""
    process = [w - sum(phases[key].values()) for key, w, _ in done]
    request = statistics.median(process[1:]) if len(process) > 1 else 0.0
    out = {"worker_start": process[0] - request, "request": request * len(process)}
    return out | {p: sum(ph.get(p, 0.0) for ph in phases.values()) for p in RUN_PHASES}


def profiled(path: Path) -> dict[str, float]:
    """The sweep process's cumulative seconds in each of :data:`PROFILED`'s functions."""
    stats = pstats.Stats(str(path)).stats  # {(file, line, function): (cc, nc, tt, ct, callers)}
    out = dict.fromkeys(PROFILED, 0.0)
    for (file, _, func), (_, _, _, cumtime, _) in stats.items():
        if "/bench/" not in file:
            continue
        for key, ((name, function), _) in PROFILED.items():
            if Path(file).name == name and func == function:
                out[key] += cumtime
    return out


def summarize(sweeps: list[dict[str, Any]]) -> dict[str, Any]:
    """Medians over the sweeps of one code."""
    timed = [s for s in sweeps if "profiled" not in s]

    def median(key: str, part: str) -> float:
        return round(statistics.median(s[key][part] for s in timed), 2)

    return {
        "wall_s": round(statistics.median(s["wall_s"] for s in timed), 2),
        "wall_s_all": [round(s["wall_s"], 1) for s in timed],
        "parts": {p: median("parts", p) for p in PARTS},
        "run_parts": {p: median("run_parts", p) for p in RUN_LABELS},
        "profiled": next((s["profiled"] for s in sweeps if "profiled" in s), None),
        "others_cores": [None if s["others_cores"] is None else round(s["others_cores"], 2) for s in timed],
    }


def notes(data: dict[str, Any], codes: list[str]) -> list[str]:
    """What the parts are, and how noisy the machine was while they were measured."""
    others = [x for c in codes for x in data[c]["others_cores"] if x is not None]
    spread = "; ".join(f"{c}: {min(data[c]['wall_s_all'])}–{max(data[c]['wall_s_all'])} s" for c in codes)
    noisy = max(others, default=0.0) > 0.25
    load = (
        f" Other processes used {min(others):.2f}–{max(others):.2f} of the {data['machine']['cpus']} cores "
        "on average during the timed sweeps"
        + (": the machine was shared, and the figures are noisy by about that much." if noisy else ".")
        if others
        else ""
    )
    return [
        f"The sweeps' wall times spread over {spread}.{load}{quietest(data, codes)}",
        "",
        "The runs' rows are the sums over runs of the phases each run prints (bench.run.timing); the worker's "
        "start is what the first run waited for beyond the others' request and reset, so a worker that "
        "starts while the sweep sets itself up shows here only the part of its start that was not hidden. "
        "The last row is the sweep less what it exists for: its runs' training and base evals.",
    ]


def quietest(data: dict[str, Any], codes: list[str]) -> str:
    """Now / before in the pair of timed sweeps that other processes disturbed least (with a baseline)."""
    if len(codes) < 2 or any(x.get("others_cores") is None for c in codes for x in data["sweeps"][c]):
        return ""
    pairs = [p for p in zip(*(data["sweeps"][c] for c in codes)) if not any("profiled" in x for x in p)]
    b, n = min(pairs, key=lambda p: max(x["others_cores"] for x in p))
    return (
        f" In the pair least disturbed (other processes at {max(b['others_cores'], n['others_cores']):.2f} cores "
        f"or less), now / before was {n['wall_s'] / b['wall_s']:.2f} ({b['wall_s']:.1f} s, {n['wall_s']:.1f} s)."
    )


def markdown(data: dict[str, Any]) -> str:
    codes = [c for c in ("baseline", "now") if c in data]
    names = {"baseline": f"`{data.get('baseline_label')}`", "now": "this checkout"}
    header = " | ".join(["part (median seconds)", *(names[c] for c in codes)])

    def row(label: str, key: str, part: str, bold: bool = False) -> list[str]:
        cells = [f"{data[c][key][part]:.2f}" for c in codes]
        return [f"**{label}**" if bold else label, *(f"**{x}**" if bold else x for x in cells)]

    rows = [["**sweep wall time**", *(f"**{data[c]['wall_s']:.2f}**" for c in codes)]]
    rows += [row(PARTS["startup"], "parts", "startup"), row(PARTS["runs"], "parts", "runs")]
    rows += [row(f"- {RUN_LABELS[p]}", "run_parts", p) for p in RUN_LABELS]
    rows += [row(PARTS["else"], "parts", "else", bold=True)]
    rows += [row(f"- {PARTS[p]}", "parts", p) for p in ("before_runs", "between_runs", "report", "exit")]
    around = {c: data[c]["wall_s"] - data[c]["run_parts"]["fit"] - data[c]["run_parts"]["eval0"] for c in codes}
    rows += [["**all but training and base evals**", *(f"**{around[c]:.2f}**" for c in codes)]]
    s = data["spec"]
    lines = [
        "# What a small sweep spends besides its runs",
        "",
        f"Machine: {machine_line(data['machine'])}. `{data['command']}`: `creditbench sweep --jobs 1` of "
        f"{s['methods'][0]} on seeds {', '.join(map(str, s['seeds']))} (the recipe of `{data['args']['spec']}`, "
        f"budget {s['budget']}), from scratch; {data['args']['repeats']} sweeps of each code, alternating.",
        "",
        *md_table(header, rows, "l" + "r" * len(codes)),
        "",
    ]
    if len(codes) == 2:
        b, n = data["baseline"], data["now"]
        lines += [
            f"Now / before, the whole sweep: **{n['wall_s'] / b['wall_s']:.2f}** "
            f"({', '.join(map(str, b['wall_s_all']))} s before, {', '.join(map(str, n['wall_s_all']))} s now); "
            "everything but the runs: "
            f"{n['parts']['startup'] + n['parts']['else']:.1f} s against "
            f"{b['parts']['startup'] + b['parts']['else']:.1f} s. Same numbers: "
            + ("**yes**" if not data["differences"] else f"**no**, {len(data['differences'])} values differ")
            + f" ({data['compared']} values of report.json compared in each pair of sweeps, wall times aside).",
            "",
        ]
    if all(data[c]["profiled"] for c in codes):
        prow = [[label, *(f"{data[c]['profiled'][k]:.2f}" for c in codes)] for k, (_, label) in PROFILED.items()]
        lines += [
            "The sweep process's own work, from one more sweep of each code under cProfile (cumulative seconds "
            "of each function, imports it triggers included; the profiler slows Python code, so these are "
            "larger than the table above's):",
            "",
            *md_table(
                " | ".join(["function (profiled seconds)", *(names[c] for c in codes)]), prow, "l" + "r" * len(codes)
            ),
            "",
        ]
    lines += notes(data, codes)
    return "\n".join(lines)


def main() -> int:
    ap = script_parser(__doc__, "python -m bench.perf.sweep_overhead")
    ap.add_argument("--spec", default="results/sweeps/embedded.yaml")
    ap.add_argument("--label", default="grpo")
    ap.add_argument("--seeds", type=int, default=4)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--baseline", default=None, help="a checkout of older code to run the same sweep with")
    ap.add_argument("--baseline_label", default=None, help="what to call it in the report (its commit)")
    ap.add_argument("--no_profile", action="store_true", help="skip the profiled sweep of each code")
    ap.add_argument("--out", default="results/benchmarks")
    a = ap.parse_args()
    if a.repeats < 1 or a.seeds < 2:
        raise CreditBenchError(f"--repeats must be >= 1 and --seeds >= 2, got {a.repeats} and {a.seeds}")
    if a.baseline and not (Path(a.baseline) / "bench").is_dir():
        raise CreditBenchError(
            f"--baseline {a.baseline} is not a checkout of this project (no bench/ there); make one with "
            "`git worktree add PATH COMMIT`"
        )
    src, here = Path(a.spec).resolve(), Path(__file__).resolve().parents[2]
    codes = {"now": here} | ({"baseline": Path(a.baseline).resolve()} if a.baseline else {})
    root = Path(tempfile.mkdtemp(prefix="sweep-overhead-"))
    sweeps: dict[str, list[dict[str, Any]]] = {c: [] for c in codes}
    for i in range(a.repeats):
        for c in reversed(codes):  # the baseline first in each pair
            sweeps[c].append(timed_sweep(codes[c], src, a, root / f"{c}-{i}"))
            print(f"{c} sweep {i + 1}: {sweeps[c][-1]['wall_s']:.1f} s", flush=True)
    if not a.no_profile:
        for c in reversed(codes):
            sweeps[c].append(timed_sweep(codes[c], src, a, root / f"{c}-profiled", profile=True))
    data: dict[str, Any] = {
        "machine": machine(torch_threads=1),
        "command": "python -m bench.perf.sweep_overhead " + " ".join(sys.argv[1:]),
        "args": vars(a),
        "spec": small_spec(src, here, here, a.label, a.seeds),
        **{c: summarize(s) for c, s in sweeps.items()},
        "sweeps": {c: [{k: v for k, v in x.items() if k != "report"} for x in s] for c, s in sweeps.items()},
    }
    reference = sweeps["now"][0]["report"]
    data["compared"], data["differences"] = 0, []
    for s in [x for c in codes for x in sweeps[c]][1:]:
        n, bad = same_numbers(reference, s["report"], skip=UNCOMPARED)
        data["compared"], data["differences"] = n, data["differences"] + bad
    data["baseline_label"] = a.baseline_label or a.baseline
    for p in write_outputs(a.out, "sweep_overhead", markdown(data), data):
        print(f"written: {p}")
    shutil.rmtree(root, ignore_errors=True)
    return 0 if not data["differences"] else 1


if __name__ == "__main__":
    run_script(main, "python -m bench.perf.sweep_overhead")
