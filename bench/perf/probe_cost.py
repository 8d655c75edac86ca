"""Benchmark: what the credit probe costs per (pair, batch), by phase, beside the FLOP floor of each phase.

    python -m bench.perf.probe_cost [--spec results/sweeps/embedded.yaml] [--reference grpo_lambda-twin]
                                    [--seed 0] [--phase 0.5] [--batches 8] [--blame 2] [--repeats 3]
                                    [--baseline PATH] [--baseline_label NAME] [--whole] [--out results/benchmarks]

A probe's work is its checkpoints' paired batches: on each, every arm of a reference's group (each credit
method and its controls, at each rate) takes one update from the checkpoint on the shared rollout batch,
and J is scored after it. Each measurement is a fresh process (bench/perf/workers/probe_batches.py)
that trains reference ``--reference``'s trajectory of ``--seed`` to ``--phase`` (unmeasured), builds
the checkpoint's workspace (reported on its own) and runs ``--batches`` batches, the first ``--blame``
with blame alignment, as the probe's workers do (the probe's own mix is 2 of 8): their CPU seconds
(one torch thread), split into draw, blame, scoring, update, J and other. ``--baseline PATH`` measures
the same batches with the code of another checkout (a ``git worktree`` of an older commit), alternating
with this one, and checks that both wrote the same records, to the bit.

The FLOP floor of a phase is the arithmetic it cannot avoid, over the useful positions (each distinct
prompt once, each row's completion to its end, logits where a log-prob is read; see
bench/perf/flagship_cost.py), at this machine's measured fp32 matrix-multiply rate: the rollout batch
generated once (draw), one scoring pass over it, and one of the KL reference where a method needs it
(scoring), each arm's update as a forward and backward
(3x a forward) over its batch with one label's first minibatch -- half the batch, the same gradient at
every rate -- once (update), and each arm's J, a forward over J's problems (J).

``--whole`` also reruns the whole probe of ``--spec`` with this code (``creditbench credit-probe SPEC
--jobs 2``, into a scratch folder) and compares its records and wall time with the committed
results/probes/<sweep>/updates.json. Writes ``<out>/probe_cost.{md,json}``.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.errors import CreditBenchError
from bench.perf.flagship_cost import gemm_rate, model_flops
from bench.script import machine, machine_line, md_table, run_script, script_parser, write_outputs

WORKER = Path(__file__).parent / "workers" / "probe_batches.py"
PHASES = ("draw", "blame", "scoring", "update", "j", "other")
LABELS = {
    "draw": "draw (the shared rollout batch, each arm's copy)",
    "blame": "blame alignment (the blame batches)",
    "scoring": "scoring (no-grad passes before each update)",
    "update": "update (forward, backward, optimizer)",
    "j": "J after each arm's update",
    "other": "other (reset, optimizer state, alignment, record)",
}


def _env(code: Path) -> dict[str, str]:
    env = {**os.environ, "PYTHONPATH": str(code), "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    return env | {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}


def measure(code: Path, args, settings: tuple[str, ...] = ()) -> dict[str, Any]:
    """One measured process with the code at ``code`` (``settings``: RL options ``rl.KEY=VALUE`` of every label)."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "batches.json"
        cmd = [sys.executable, str(WORKER), str(path), "--spec", args.spec, "--reference", args.reference]
        cmd += ["--seed", str(args.seed), "--phase", str(args.phase), "--batches", str(args.batches)]
        cmd += ["--blame", str(args.blame)] + [f"--set={s}" for s in settings]
        done = subprocess.run(cmd, cwd=code, env=_env(code), capture_output=True, text=True)
        if done.returncode != 0:  # its last line says why (an unknown reference: the valid ones)
            last = ((done.stderr or done.stdout).strip().splitlines() or ["no output"])[-1]
            raise CreditBenchError(f"the measured batches with the code at {code} failed: {last}")
        return json.loads(path.read_text())


def summarize(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Medians over the processes, per batch."""
    n = len(runs[0]["batch_s"])
    per_batch = [sum(r["batch_s"]) / n for r in runs]
    return {
        "batch_s": statistics.median(per_batch),
        "batch_s_all": [round(x, 3) for x in per_batch],
        "pair_batch_s": statistics.median(per_batch) / runs[0]["pairs"],
        "phases": {p: statistics.median(r["phases"][p] / n for r in runs) for p in PHASES},
        "build_s": statistics.median(r["build_s"] for r in runs),
    }


def floors(run: dict[str, Any], rate: float) -> dict[str, float]:
    """Each phase's FLOP floor per batch, in seconds at ``rate`` FLOP/s (see the module's docstring)."""
    f = model_flops(run["model"])

    def forward(pos: dict[str, float]) -> float:
        return pos["positions"] * f["linear"] + pos["logits"] * f["logits"] + pos["context"] * f["attention"]

    batch, j = forward(run["positions"]["batch"]), forward(run["positions"]["j"])
    arms, labels = run["arms"], run["labels"]
    scoring = batch * (2 if run["reference_pass"] else 1)
    flops = {"draw": batch, "scoring": scoring, "update": 3 * batch * (labels + arms) / 2, "j": arms * j}
    return {p: flops.get(p, 0.0) / rate for p in PHASES}


def whole(spec: str) -> dict[str, Any]:
    """The whole probe of ``spec`` rerun with this code (2 workers) beside its committed records."""
    import yaml

    sweep = yaml.safe_load(Path(spec).read_text())["name"]
    committed = json.loads((Path("results/probes") / sweep / "updates.json").read_text())
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [sys.executable, "-m", "bench.cli", "credit-probe", spec, "--jobs", "2", "--out", tmp]
        t = time.perf_counter()
        done = subprocess.run(cmd, env=_env(Path.cwd()), capture_output=True, text=True)
        wall = time.perf_counter() - t
        if done.returncode != 0:
            last = ((done.stderr or done.stdout).strip().splitlines() or ["no output"])[-1]
            raise CreditBenchError(f"the probe of {spec} failed: {last}")
        now = json.loads((Path(tmp) / "updates.json").read_text())
    same = all(json.dumps(now[k]) == json.dumps(committed[k]) for k in ("updates", "segments", "checkpoints"))
    return {"sweep": sweep, "records": len(now["updates"]), "same": same, "rounds": now["rounds"],
            "wall_s": now["wall_s"], "command_wall_s": round(wall, 1), "committed_wall_s": committed["wall_s"],
            "committed_rounds": committed["rounds"]}  # fmt: skip


def markdown(data: dict[str, Any]) -> str:
    now, base, floor = data["now"], data.get("baseline"), data["floor_s"]
    lines = [
        "# What the credit probe costs per (pair, batch), by phase, beside its FLOP floor",
        "",
        f"Machine: {machine_line(data['machine'])}. `{data['command']}`: {data['batches']} batches (blame "
        f"alignment on {data['blame']}) of reference `{data['reference']}`'s checkpoint at phase {data['phase']:g} "
        f"of seed {data['seed']}, {data['arms']} arms and {data['pairs']} pair(s), in {data['repeats']} processes "
        f"a version, alternating, medians. CPU seconds per batch, one torch thread.",
        "",
        f"FLOP floor: useful positions at this machine's fp32 matrix-multiply rate at the portable numerics, "
        f"{data['gemm_flops'] / 1e9:.0f} GFLOP/s on one thread (what each phase must compute: the module's "
        "docstring).",
        "",
    ]
    opt = data.get("options")
    header = ["phase"] + (["CPU s before"] if base else []) + ["CPU s now"] + (["with the options"] if opt else [])
    header += ["floor s", "now / floor"]
    rows = []
    for p in PHASES:
        ratio = f"{now['phases'][p] / floor[p]:.1f}x" if floor[p] else "no floor counted"
        before = [f"{base['phases'][p]:.3f}"] if base else []
        options = [f"{opt['phases'][p]:.3f}"] if opt else []
        rows.append([LABELS[p], *before, f"{now['phases'][p]:.3f}", *options, f"{floor[p]:.3f}", ratio])
    total = sum(floor.values())
    before = [f"**{base['batch_s']:.3f}**"] if base else []
    options = [f"**{opt['batch_s']:.3f}**"] if opt else []
    rows.append(["**a batch**", *before, f"**{now['batch_s']:.3f}**", *options, f"{total:.3f}",
                 f"{now['batch_s'] / total:.1f}x"])  # fmt: skip
    lines += md_table(header, rows, "l" + "r" * (len(header) - 1))
    lines.append("")
    per_pair = f"{now['pair_batch_s']:.3f} s"
    if base:
        lines.append(
            f"Before: the code at `{data['baseline_label']}`; now: this commit. Per (pair, batch): "
            f"{base['pair_batch_s']:.3f} s before, {per_pair} now, **{data['ratio']:.2f}x** "
            f"({', '.join(map(str, base['batch_s_all']))} s a batch before, {', '.join(map(str, now['batch_s_all']))} "
            "s now). The same records: "
            + ("**yes**, to the bit" if data["same_records"] else _apart(data.get("apart")))
            + f" ({data['records']} records). A checkpoint's workspace: {base['build_s']:.2f} s before, "
            f"{now['build_s']:.2f} s now."
        )
    else:
        lines.append(f"Per (pair, batch): {per_pair}. A checkpoint's workspace: {now['build_s']:.2f} s.")
    lines.append("")
    if opt:
        against = f", **{opt['pair_batch_s'] / base['pair_batch_s']:.2f}x** the baseline's" if base else ""
        lines += [
            f"With the options ({', '.join(f'`{s}`' for s in data['settings'])}): {opt['pair_batch_s']:.3f} s per "
            f"(pair, batch), {opt['pair_batch_s'] / now['pair_batch_s']:.2f}x now's{against}; their records "
            + _apart(data["options_apart"]).removeprefix("**no**, ").removeprefix("**no**")
            + ".",
            "",
        ]
    lines += data["notes"]
    w = data.get("whole")
    if w:
        lines += [
            "",
            f"**The whole probe** of `{data['spec']}` rerun with this code (`creditbench credit-probe "
            f"{data['spec']} --jobs 2`): {w['records']} records, "
            + ("the same as the committed ones to the bit" if w["same"] else "**not** the committed ones")
            + f", rounds {_sizes(w['rounds'])}; {w['wall_s']:.0f} s of wall time against the committed "
            f"{w['committed_wall_s']:.0f} s (**{w['wall_s'] / w['committed_wall_s']:.2f}x**).",
        ]
    return "\n".join(lines) + "\n"


def apart(now: list[dict[str, Any]], before: list[dict[str, Any]]) -> dict[str, float]:
    """How far two versions' records of the same updates are: the share of batches with the same samples
    (the batch digest) and the largest difference of their ΔJ, in points."""
    key = ("reference", "seed", "phase", "batch", "label", "lr")
    was = {tuple(r[k] for k in key): r for r in before}
    pairs = [(r, was[tuple(r[k] for k in key)]) for r in now if tuple(r[k] for k in key) in was]
    same = sum(a["fingerprint"] == b["fingerprint"] for a, b in pairs)
    return {"records": len(pairs), "same_batches": same / max(len(pairs), 1),
            "dj_max_abs": max((abs(a["dj"] - b["dj"]) for a, b in pairs), default=float("nan"))}  # fmt: skip


def _apart(d: dict[str, float] | None) -> str:
    if not d:
        return "**no**"
    return (
        f"**no**, in the last bits ({d['same_batches']:.0%} of the batches the same samples; ΔJ at most "
        f"{d['dj_max_abs']:.1e} points from the baseline's: the update's options that move the bits, "
        "`rl.old_logprobs` and `rl.packed_update`, bench/config.py)"
    )


def _sizes(rounds: list[dict[str, int]]) -> str:
    return " → ".join(str(sum(r.values())) for r in rounds) + " trajectories"


def notes(data: dict[str, Any]) -> list[str]:
    """What holds the batch above its floor, from the figures."""
    now, floor = data["now"]["phases"], data["floor_s"]
    j, update = now["j"], now["update"]
    return [
        "What the arms share: one scoring pass per batch where the arms' methods ask for the same scores, "
        "and, among one label's rates, the first minibatch's gradient (the rate acts only at the optimizer "
        "step); the records are the same to the bit (tests/paired/test_paired.py, "
        "tests/engine/test_first_gradient.py). `rl.old_logprobs: rollout` and `rl.packed_update` (off by "
        "default: they move the bits) take the behaviour log-probs from the rollout and run the update on the "
        "valid positions only; what is then left of scoring is the reference pass where a method's KL term "
        "needs it.",
        "",
        f"What is left is arithmetic: J after each arm's update ({j:.3f} s, {j / floor['j']:.1f}x its floor) and "
        f"the updates ({update:.3f} s, {update / floor['update']:.1f}x) run their matrix products near the "
        "machine's rate. Stacking the arms' parameters into one batched pass removes no FLOPs, only some of "
        "the per-operation cost beside them, and on this CPU it does not pay (results/benchmarks/lockstep.md). "
        "Less than this needs less arithmetic: J's reference completions share their prompts, whose prefix "
        "could be computed once (at other bits), and J's passes are most of what is left.",
    ]


def main(argv: list[str] | None = None) -> None:
    ap = script_parser(__doc__, "python -m bench.perf.probe_cost")
    ap.add_argument("--spec", default="results/sweeps/embedded.yaml")
    ap.add_argument("--reference", default="grpo_lambda-twin")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--phase", type=float, default=0.5)
    ap.add_argument("--batches", type=int, default=8)
    ap.add_argument("--blame", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--baseline", default=None, help="a checkout of older code to measure the same batches with")
    ap.add_argument("--baseline_label", default=None, help="what to call it in the report (its commit)")
    ap.add_argument("--whole", action="store_true", help="also rerun the whole probe and compare it")
    ap.add_argument("--set", action="append", default=[], help="rl.KEY=VALUE: also measure with this RL option")
    ap.add_argument("--out", default="results/benchmarks")
    args = ap.parse_args(argv)
    for name in ("repeats", "batches"):
        if getattr(args, name) < 1:
            raise CreditBenchError(f"--{name} must be >= 1, got {getattr(args, name)}")
    if args.baseline and not (Path(args.baseline) / "bench" / "paired").is_dir():
        raise CreditBenchError(
            f"--baseline {args.baseline} is not a checkout of this project (no bench/paired there); make one "
            "with `git worktree add PATH COMMIT`"
        )
    here = Path(__file__).resolve().parents[2]
    base_runs, now_runs, opt_runs = [], [], []
    for _ in range(args.repeats):
        if args.baseline:
            base_runs.append(measure(Path(args.baseline).resolve(), args))
        now_runs.append(measure(here, args))
        if args.set:
            opt_runs.append(measure(here, args, tuple(args.set)))
    first = now_runs[0]
    rate = gemm_rate()
    data: dict[str, Any] = {
        "machine": machine(torch_threads=1),
        "command": "python -m bench.perf.probe_cost " + " ".join(argv if argv is not None else sys.argv[1:]),
        **{k: getattr(args, k) for k in ("spec", "reference", "seed", "phase", "batches", "blame", "repeats")},
        **{k: first[k] for k in ("arms", "pairs", "labels", "model", "positions", "reference_pass")},
        "records": len(first["records"]),
        "gemm_flops": rate,
        "floor_s": floors(first, rate),
        "now": summarize(now_runs),
    }
    if base_runs:
        data["baseline"] = summarize(base_runs)
        data["baseline_label"] = args.baseline_label or str(args.baseline)
        data["same_records"] = all(json.dumps(r["records"]) == json.dumps(first["records"]) for r in base_runs)
        data["apart"] = apart(first["records"], base_runs[0]["records"])
        data["ratio"] = data["now"]["pair_batch_s"] / data["baseline"]["pair_batch_s"]
    if opt_runs:
        data["options"], data["settings"] = summarize(opt_runs), list(args.set)
        data["options_apart"] = apart(opt_runs[0]["records"], first["records"])
    data["notes"] = notes(data)
    if args.whole:
        data["whole"] = whole(args.spec)
    md, js = write_outputs(args.out, "probe_cost", markdown(data), data)
    print(f"wrote {md} and {js}")


if __name__ == "__main__":
    run_script(main, "python -m bench.perf.probe_cost")
