"""Do the numbers depend on the CPU? The quick sweep and the warm-started bases under two numerics
settings on one machine: ``portable`` (the default: AVX2 code paths pinned, bench/__init__.py) and
``native`` (CREDITBENCH_NUMERICS=native: whatever the CPU has, AVX-512 on such a machine).

    python -m bench.studies.reproducibility [--parts bases,quick] [--tasks chain,arithmetic]
        [--settings portable,native] [--out results/benchmarks]

bases: each task's tiny-500k base warm-started from scratch (ignoring the pinned copy) under each
setting: the step and check accuracy it stops at (the target is 0.25, the tolerance 0.02), whether
the replay across a jump ran, and whether its weights equal the pinned ones (results/bases).
quick: results/sweeps/embedded-quick.yaml from scratch under each setting (both from the pinned base):
exact differences between the two reports, the statistical check (bench.reproduce.agreement) between
them and against the committed report, and the run time of each (the speed cost of pinning).
Every part runs in its own processes with a scratch cache and MLflow store; nothing in the
repository's cache or store is touched. With ``--settings native`` only native is run, and the
portable side is what is committed: the pinned bases' own warm-starts (results/bases/*/warmstart.json,
each built from scratch on the portable paths) and the committed quick report (regenerated on them).
Writes results/benchmarks/reproducibility.{md,json}."""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.errors import CreditBenchError
from bench.script import machine, machine_line, md_table, run_script, script_parser, write_outputs

REPO = Path(__file__).resolve().parents[2]
SETTINGS = ("portable", "native")
PINS = ("ATEN_CPU_CAPABILITY", "MKL_CBWR", "ONEDNN_MAX_CPU_ISA", "CREDITBENCH_NUMERICS")
QUICK = "results/sweeps/embedded-quick.yaml"


def env_for(setting: str, scratch: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in PINS}
    if setting == "native":
        env["CREDITBENCH_NUMERICS"] = "native"
    return env | {"CREDITBENCH_CACHE": str(scratch / "cache"), "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}


def _children_cpu() -> float:
    """CPU seconds (user + system) of this process's finished children: the cost of a part, much less
    sensitive than wall time to what else the machine runs."""
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def capability(env: dict[str, str]) -> str:
    code = "import bench, torch; print(torch.backends.cpu.get_cpu_capability())"
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True).stdout.strip()


def _row(task: str, setting: str, info: dict, pin: dict, wall: float, source: str) -> dict[str, Any]:
    return {
        "task": task,
        "setting": setting,
        "source": source,
        "cpu_capability": info["fingerprint"]["numerics"]["cpu_capability"],
        "steps": info["steps"],
        "step_fraction": info.get("step_fraction", 1.0),
        "check_accuracy": info["check_accuracy"],
        "target": info["target_accuracy"],
        "within_tolerance": info["within_tolerance"],
        "replayed": info["replayed"],
        "equals_pinned": info["weights_sha256"] == pin.get("weights_sha256"),
        "wall_s": round(wall, 1),
    }


def bases_part(tasks: list[str], settings: list[str], root: Path) -> list[dict[str, Any]]:
    from bench.bases import bases

    out = []
    for task in tasks:
        if "portable" not in settings:  # the pinned base's own warm-start, from scratch on the portable paths
            key = next(k for k in bases.pins() if k.startswith(f"{task}/tiny-500k-"))
            info = json.loads((bases.PINNED / key / "warmstart.json").read_text())
            out.append(_row(task, "portable", info, bases.pins()[key], info["wall_s"], "pinned build"))
        for setting in settings:
            scratch = root / f"bases-{task}-{setting}"
            env = env_for(setting, scratch)
            cmd = [sys.executable, "-m", "bench.cli", "bases", "build", task, "--fresh"]
            cmd += ["--cache_dir", str(scratch / "cache"), "--tracking_uri", f"sqlite:///{scratch}/mlflow.db"]
            t0 = time.perf_counter()
            scratch.mkdir(parents=True, exist_ok=True)
            done = subprocess.run(cmd, env=env, cwd=REPO, capture_output=True, text=True)
            if done.returncode:
                raise CreditBenchError(f"the {setting} warm-start of {task} failed: {done.stderr.strip()[-500:]}")
            wall = time.perf_counter() - t0
            built = next((scratch / "cache" / "base" / task).glob("*/warmstart.json"))
            info = json.loads(built.read_text())
            out.append(_row(task, setting, info, bases.pins().get(bases.key_of(built.parent), {}), wall, "rebuilt"))
            print(json.dumps(out[-1]), flush=True)
    return out


def quick_part(settings: list[str], root: Path) -> dict[str, Any]:
    from bench.reproduce.agreement import agreement
    from bench.reproduce.rerun import differences

    committed = json.loads((REPO / "results" / "embedded-quick" / "report.json").read_text())
    reports, walls, caps, cpu = {}, {}, {}, {}
    if "portable" not in settings:  # the committed report, made on the portable paths
        reports["portable"] = committed
        walls["portable"] = json.loads((REPO / "results" / "embedded-quick" / "run_all.json").read_text())["wall_s"]
        caps["portable"] = committed["fingerprint"]["numerics"]["cpu_capability"]
    for setting in settings:
        scratch = root / f"quick-{setting}"
        env = env_for(setting, scratch)
        caps[setting] = capability(env)
        cmd = [sys.executable, "-m", "bench.cli", "reproduce", QUICK, "--jobs", "2", "--keep", str(scratch)]
        t0, c0 = time.perf_counter(), _children_cpu()
        subprocess.run(cmd, env=env, cwd=REPO, capture_output=True)  # exit 1 where it differs from the committed
        walls[setting] = round(time.perf_counter() - t0, 1)
        cpu[setting] = round(_children_cpu() - c0, 1)
        reports[setting] = json.loads((scratch / "embedded-quick" / "report.json").read_text())
    a, b = reports["portable"], reports["native"]
    between = agreement(a, b)
    return {
        "cpu_capability": caps,
        "wall_s": walls,
        "compute_s": {s: r["compute_s"] for s, r in reports.items()},
        "cpu_s": cpu,
        "exact_differences": len(differences(a, b)),
        "pass_at_1": {
            s: {row["method"]: row["metrics"]["pass_at_1"]["values"] for row in r["rows"]} for s, r in reports.items()
        },
        "agreement_between": {"ok": between.ok, "z": between.z, "lines": between.lines},
        "agreement_with_committed": {s: agreement(committed, r).ok for s, r in reports.items()},
        "exact_with_committed": {s: len(differences(committed, r)) for s, r in reports.items()},
    }


def markdown(data: dict[str, Any]) -> str:
    out = [
        "# Reproducibility across CPU code paths",
        "",
        f"Machine: {machine_line(data['machine'])}; CPU flags {', '.join(data['machine']['cpu_flags'])}. "
        "`portable`: the default, AVX2 code paths pinned (ATen, MKL_CBWR=AVX2,STRICT, oneDNN); `native`: "
        "CREDITBENCH_NUMERICS=native, what the CPU has. `python -m bench.studies.reproducibility` "
        "(docs/reproducibility.md).",
        "",
    ]
    if data.get("bases"):
        out += ["## Bases warm-started from scratch", ""]
        rows = [
            (
                b["task"],
                f"{b['setting']} ({b['source']})",
                b["cpu_capability"],
                f"{b['steps'] - 1} + {b['step_fraction']:g}" if b["step_fraction"] < 1 else b["steps"],
                f"{b['check_accuracy']:.4f}",
                f"{b['check_accuracy'] - b['target']:+.4f}",
                "yes" if b["within_tolerance"] else "NO",
                "yes" if b["replayed"] else "no",
                "yes" if b["equals_pinned"] else "no",
                b["wall_s"],
            )
            for b in data["bases"]
        ]
        header = (
            "task | setting | ATen kernels | step | check accuracy | vs target | within ±0.02 | replayed | = pinned | s"
        )
        out += md_table(header, rows, "llrrrrlllr") + [""]
    q = data.get("quick")
    if q:
        out += ["## The quick sweep under each setting (both from the pinned base)", ""]
        rows = [
            (
                s,
                q["cpu_capability"][s],
                q["compute_s"][s],
                q.get("cpu_s", {}).get(s, "–"),
                q["wall_s"][s],
                "; ".join(f"{m} {', '.join(f'{v:.3f}' for v in vs)}" for m, vs in q["pass_at_1"][s].items()),
                q["exact_with_committed"][s],
                "agrees" if q["agreement_with_committed"][s] else "DISAGREES",
            )
            for s in SETTINGS
        ]
        header = (
            "setting | ATen kernels | run time s | CPU s | wall s | final pass@1 per seed | exact diffs vs committed"
        )
        header += " | statistical vs committed"
        out += md_table(header, rows, "llrrrlrl") + [""]
        ag = q["agreement_between"]
        out += [
            f"portable vs native: {q['exact_differences']} values differ; the statistical check "
            f"{'passes' if ag['ok'] else 'FAILS'} (z = {ag['z']:.2f}):",
            "",
        ] + [f"- {line}" for line in ag["lines"]]
    return "\n".join(out)


def main() -> int:
    ap = script_parser(__doc__, "python -m bench.studies.reproducibility")
    ap.add_argument("--parts", default="bases,quick")
    ap.add_argument("--tasks", default="chain,arithmetic")
    ap.add_argument(
        "--settings", default="portable,native", help="what to run; the portable side is read where not run"
    )
    ap.add_argument("--out", default="results/benchmarks")
    a = ap.parse_args()
    parts = a.parts.split(",")
    previous = Path(a.out) / "reproducibility.json"
    data: dict[str, Any] = json.loads(previous.read_text()) if previous.is_file() else {}  # parts not rerun stay
    data["machine"] = machine(1)
    with tempfile.TemporaryDirectory(prefix="creditbench-repro-") as tmp:
        if "bases" in parts:
            data["bases"] = bases_part(a.tasks.split(","), a.settings.split(","), Path(tmp))
        if "quick" in parts:
            data["quick"] = quick_part(a.settings.split(","), Path(tmp))
    md, js = write_outputs(a.out, "reproducibility", markdown(data), data)
    print(f"wrote {md} and {js}")
    return 0


if __name__ == "__main__":
    run_script(main, "python -m bench.studies.reproducibility")
