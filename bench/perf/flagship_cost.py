"""Benchmark: what a flagship run costs, by phase, beside the FLOP floor of each phase.

    python -m bench.perf.flagship_cost [--spec results/sweeps/embedded.yaml] [--label grpo] [--seed 0]
                                       [--warm_label s_trace] [--repeats 3] [--baseline PATH] [--out results/benchmarks]

A flagship run is one run of the embedded benchmark as its sweep runs it: tiny-500k on chain, 2,048
training samples in 16 rollout batches of 128, two minibatches each, evaluated on 200 problems x 4
samples at the end, one torch thread, in a worker process (imports, the base-eval cache and the
task's generated data paid once, by an earlier run of another seed). Each measurement is a fresh
process (bench/perf/workers/flagship_run.py) that runs label ``--warm_label`` of the same seed
unmeasured (a sweep's labels share their seed's base eval: one computes it, the others reuse it) and
then label ``--label`` measured: its CPU seconds, split into rollout (generation for training), verify,
scoring (the no-grad passes before the update), update (forward, backward, optimizer steps), eval
(generation, verification and J of the evaluation) and fixed (everything else: set-up, MLflow, data,
Lightning, the record). ``--repeats`` processes, one at a time; the medians are reported.

The FLOP floor of a phase is the arithmetic it cannot avoid, over the positions it must compute: each
distinct prompt once, each row's completion up to and including its end-of-sequence (no padding, no
finished row), a logit only where a log-prob or a sample is read; a forward position costs
2 x (the decoder's matrix parameters) + 4 x layers x (heads x head_dim) x (positions attended) FLOPs, and
2 x hidden x vocab more where its logits are read; a position that is trained costs 3 times that
(forward, and a backward of twice the forward). The floor in seconds divides it by the machine's
measured fp32 matrix-multiply rate at the portable numerics (one thread, the best of 2,048^3 and
1,024^3 products under MKL_CBWR=AVX2), the fastest any of those FLOPs could run here.

``--baseline PATH`` measures the same run with the code of another checkout (a ``git worktree`` of an
older commit) in the same way, one after the other on this machine, and checks that both gave the
same numbers (every value of the run's result both versions have). Writes
``<out>/flagship_cost.{md,json}``.
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
from bench.perf import fusion
from bench.script import machine, machine_line, md_table, run_script, script_parser, write_outputs

WORKER = Path(__file__).parent / "workers" / "flagship_run.py"
PHASES = ("rollout", "verify", "scoring", "update", "eval", "fixed")
LABELS = {
    "rollout": "rollout (generation for training)",
    "verify": "verify (the task's verifier)",
    "scoring": "scoring (no-grad passes before the update)",
    "update": "update (forward, backward, optimizer)",
    "eval": "eval (generation, verification, J)",
    "fixed": "fixed (set-up, MLflow, data, Lightning, the run's credit map, record)",
}
UNCOMPARED = ("policy_dir", "base_checkpoint")  # paths of the checkout that ran it


def measure(code: Path, args, repeats: int, ops: bool = False, settings: tuple[str, ...] = ()) -> list[dict[str, Any]]:
    """``repeats`` measured runs with the code at ``code``, one process each, one at a time (``ops``:
    with the matrix products and attention timed, see flagship_run.OpSplit; ``settings``: RL options
    ``rl.KEY=VALUE`` of the runs)."""
    out = []
    env = {**os.environ, "PYTHONPATH": str(code), "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    env.update(HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1")
    for _ in range(repeats):
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "run.json"
            cmd = [sys.executable, str(WORKER), str(path), "--spec", args.spec, "--label", args.label]
            cmd += ["--seed", str(args.seed), "--warm_label", args.warm_label] + (["--ops"] if ops else [])
            cmd += [f"--set={s}" for s in settings]
            done = subprocess.run(cmd, cwd=code, env=env, capture_output=True, text=True)
            if done.returncode != 0:  # its last line says why (a bad label or seed: the valid ones)
                last = ((done.stderr or done.stdout).strip().splitlines() or ["no output"])[-1]
                raise CreditBenchError(f"the measured run with the code at {code} failed: {last}")
            out.append(json.loads(path.read_text()))
    return out


def gemm_rate() -> float:
    """This machine's fp32 matrix-multiply rate on one thread at the portable numerics, FLOP/s."""
    import torch

    import bench  # noqa: F401  (the portable numerics are set on import)

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    best = 0.0
    for n in (1024, 2048):
        a, b = torch.randn(n, n), torch.randn(n, n)
        a @ b
        for _ in range(3):
            t = time.perf_counter()
            a @ b
            best = max(best, 2 * n**3 / (time.perf_counter() - t))
    torch.set_num_threads(threads)
    return best


def model_flops(size: str) -> dict[str, float]:
    """The per-position FLOP terms of a tiny model (bench/models/policy.py)."""
    from bench.models.policy import char_tokenizer, matrix_params, tiny_config

    c = tiny_config(size, len(char_tokenizer()))
    params = matrix_params(c)
    return {
        "matrix_params": params,
        "linear": 2.0 * params,  # per position
        "attention": 4.0 * c.num_hidden_layers * c.num_attention_heads * c.head_dim,  # per position attended
        "logits": 2.0 * c.hidden_size * c.vocab_size,  # per position whose logits are read
        "hidden": c.hidden_size,
        "layers": c.num_hidden_layers,
        "vocab": c.vocab_size,
    }


def phase_flops(tokens: dict[str, float], f: dict[str, float]) -> float:
    """The FLOP floor of one phase from its useful positions (flagship_run.Tokens)."""
    positions = tokens.get("fwd", 0) + 3 * tokens.get("train", 0)
    return positions * f["linear"] + tokens.get("context", 0) * f["attention"] + tokens.get("logits", 0) * f["logits"]


def same_numbers(a: Any, b: Any, path: str = "", skip: tuple[str, ...] = UNCOMPARED) -> tuple[int, list[str]]:
    """How many values ``a`` and ``b`` both have (keys in ``skip`` aside), and the paths where they differ."""
    if isinstance(a, dict) and isinstance(b, dict):
        pairs = [(a[k], b[k], f"{path}/{k}") for k in a.keys() & b.keys() if k not in skip]
    elif isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        pairs = [(u, v, f"{path}[{i}]") for i, (u, v) in enumerate(zip(a, b))]
    else:
        return 1, ([] if a == b else [path])
    n, bad = 0, []
    for u, v, p in pairs:
        m, d = same_numbers(u, v, p, skip)
        n, bad = n + m, bad + d
    return n, bad


def summarize(runs: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "cpu_s": statistics.median(r["cpu_s"] for r in runs),
        "cpu_s_all": [round(r["cpu_s"], 3) for r in runs],
        "phases": {p: statistics.median(r["phases"].get(p, 0.0) for r in runs) for p in PHASES},
        "tokens": runs[0]["tokens"],
        "code": runs[0]["code"],
        "run": runs[0]["run"],
        "packed_update": runs[0].get("packed_update", False),
        "old_logprobs": runs[0].get("old_logprobs", "rescore"),
    }


def markdown(data: dict[str, Any]) -> str:
    now, base, rate, opt = data["now"], data.get("baseline"), data["gemm_flops"], data.get("options")
    lines = [
        "# What a flagship run costs, by phase, beside its FLOP floor",
        "",
        f"Machine: {machine_line(data['machine'])}. `{data['command']}`: run `{now['run']}` of "
        f"`{data['spec']}` in a worker-like process (an unmeasured run of label {data['warm_label']} first), "
        f"{data['repeats']} processes one at a time, medians. CPU seconds of the process, one torch thread.",
        "",
        f"FLOP floor: the useful positions of each phase (no padding, no finished row, each distinct prompt "
        f"once) at this machine's fp32 matrix-multiply rate at the portable numerics, "
        f"{rate / 1e9:.0f} GFLOP/s on one thread.",
        "",
    ]
    ops = data.get("ops")
    header = ["phase"] + (["CPU s before"] if base else []) + ["CPU s now"] + (["with the options"] if opt else [])
    header += (["of which matrix products", "attention"] if ops else []) + ["useful GFLOP", "floor s", "now / floor"]

    def split(p: str | None) -> list[str]:
        if not ops:
            return []
        d = ops.get(p, {}) if p else {k: sum(o.get(k, 0.0) for o in ops.values()) for k in ("matmul", "attention")}
        return [f"{d.get('matmul', 0.0):.2f}", f"{d.get('attention', 0.0):.2f}"]

    rows = []
    for p in PHASES:
        floor = data["floor_s"].get(p, 0.0)
        ratio = f"{now['phases'][p] / floor:.1f}x" if floor else "no FLOPs"
        row = [LABELS[p]] + ([f"{base['phases'][p]:.2f}"] if base else []) + [f"{now['phases'][p]:.2f}"]
        row += [f"{opt['phases'][p]:.2f}"] if opt else []
        rows.append(row + split(p) + [f"{data['gflop'].get(p, 0.0):.1f}", f"{floor:.2f}", ratio])
    total_floor = sum(data["floor_s"].values())
    row = ["**run**"] + ([f"**{base['cpu_s']:.2f}**"] if base else []) + [f"**{now['cpu_s']:.2f}**"]
    row += [f"**{opt['cpu_s']:.2f}**"] if opt else []
    rows.append(
        row
        + split(None)
        + [f"{sum(data['gflop'].values()):.1f}", f"{total_floor:.2f}", f"**{now['cpu_s'] / total_floor:.1f}x**"]
    )
    lines += md_table(header, rows, "l" + "r" * (len(header) - 1))
    lines.append("")
    if base:
        lines.append(
            f"Before: the code at `{data['baseline_label']}`; now: this commit. Now / before: "
            f"**{now['cpu_s'] / base['cpu_s']:.2f}** of the CPU seconds ({', '.join(map(str, base['cpu_s_all']))} s "
            f"before, {', '.join(map(str, now['cpu_s_all']))} s now). Same numbers: "
            + ("**yes**" if not data["differences"] else f"**no**, {len(data['differences'])} values differ")
            + f" ({data['compared']} values of the run's result compared)."
        )
        lines.append("")
    if opt:
        lines += options_lines(data)
    if ops:
        lines += budget_lines(data)
        lines.append("")
    pad = {p: now["tokens"].get(p, {}) for p in ("scoring", "update")}
    upd = pad["update"]
    if upd.get("train") and now.get("packed_update"):
        lines.append(
            f"The update's passes run on the valid positions only (`rl.packed_update`); on the padded layout "
            f"(each row padded to the longest completion of its minibatch) they would compute "
            f"{upd['padded'] / upd['train']:.2f}x them."
        )
    elif upd.get("train"):
        lines.append(
            f"The update's passes compute {upd['padded'] / upd['train']:.2f}x its useful positions: each row is "
            "padded to the longest completion of its minibatch."
        )
    lines.append("")
    lines += data["notes"]
    return "\n".join(lines)


def options_lines(data: dict[str, Any]) -> list[str]:
    """What the options (RL settings that move the bits) change: the CPU seconds, and the numbers."""
    now, base, opt = data["now"], data.get("baseline"), data["options"]
    against = f" and **{opt['cpu_s'] / base['cpu_s']:.2f}** of the baseline's" if base else ""
    return [
        f"With the options ({', '.join(f'`{s}`' for s in data['settings'])}): **{opt['cpu_s'] / now['cpu_s']:.2f}** "
        f"of now's CPU seconds{against} ({', '.join(map(str, opt['cpu_s_all']))} s). They move the bits: "
        f"{len(data['options_differences'])} of {data['options_compared']} values of the run's result differ from "
        "now's (tests/engine/test_behaviour.py holds an update with each option to the update without it: "
        "the weights after it apart by less than 1e-3 of how far it moved them).",
        "",
    ]


def budget_lines(data: dict[str, Any]) -> list[str]:
    """The matrix products' and attention's share of the run, and what a target of half the baseline
    would leave for everything else."""
    ops, now, base = data["ops"], data["now"], data.get("baseline")
    mm = sum(o.get("matmul", 0.0) for o in ops.values())
    att = sum(o.get("attention", 0.0) for o in ops.values())
    lines = [
        f"Matrix products and attention, timed by operator in one more run "
        f"(`flagship_run.py --ops`): {mm:.2f} s and {att:.2f} s; everything else (the elementwise operations, "
        f"sampling, Python, MLflow, Lightning): {now['cpu_s'] - mm - att:.2f} s of the run's {now['cpu_s']:.2f} s. "
        f"The matrix products run at {sum(data['gflop'].values()) * 1e9 / mm / 1e9:.0f} useful GFLOP/s "
        f"against the {data['gemm_flops'] / 1e9:.0f} GFLOP/s of a large product."
    ]
    if base:
        half = base["cpu_s"] / 2
        lines += [
            "",
            f"Half the baseline's CPU seconds is {half:.2f} s. With the matrix products and attention as they are, "
            f"that leaves {half - mm - att:.2f} s for everything else; with every matrix product at the floor "
            f"({sum(data['floor_s'].values()):.2f} s, no padding) and attention as it is, "
            f"{half - sum(data['floor_s'].values()) - att:.2f} s, against {now['cpu_s'] - mm - att:.2f} s now.",
        ]
    return lines


def notes(data: dict[str, Any]) -> list[str]:
    """What holds each phase above its floor, with this measurement's figures."""
    upd = data["now"]["tokens"].get("update", {})
    padded = upd.get("padded", 0) / upd["train"] if upd.get("train") else float("nan")
    fusion = data.get("fusion") or {}
    fused = (
        f" Fusing buys little at this size: under torch.compile (inductor, dynamic shapes) a flagship "
        f"minibatch's training forward and backward took {fusion['compiled_ms']:.0f} ms against "
        f"{fusion['eager_ms']:.0f} ms eager ({1 - fusion['compiled_ms'] / fusion['eager_ms']:.0%} less), after "
        f"{fusion['compile_s']:.0f} s of compiling, and at other bits."
        if fusion
        else ""
    )
    packed = data["now"].get("packed_update")
    update = (
        "on the valid positions only (`rl.packed_update`: the forward and the input gradients are the padded "
        "layout's bits, the weight gradients differ in the last bits)"
        if packed
        else f"on the padded layout, {padded:.2f}x the useful positions"
    )
    return [
        "What holds each phase above its floor:",
        "",
        f"- **update**: its passes run {update}, and besides its matrix products each layer runs some 40 small "
        "operations forward and back." + fused,
        "- **rollout and eval**: a decode step is one position per row: matrix products of at most 128 (eval: "
        "400) rows and some 40 small operations per layer (norms, rotary, attention over a short cache, the "
        "cache's concatenation) whose fixed cost is comparable to the arithmetic. Finished rows are no longer "
        "computed and the module machinery is gone (bench.engine.rollout.lean_decode); the rest is per-operation "
        "cost.",
        "- **scoring**: "
        + (
            "the behaviour log-probs come from the rollout's decode steps (`rl.old_logprobs`); what is left is "
            "the reference pass of the KL term"
            if data["now"].get("old_logprobs", "rescore") != "rescore"
            else "the behaviour pass and the reference pass of the KL term (`rl.old_logprobs: rollout` takes the "
            "first from the decode steps)"
        )
        + ", on the valid positions only (bench.engine.lean_forward, the same bits): the per-operation cost and "
        "attention, whose CPU kernel is slow at head size 32 beside its few FLOPs.",
        "- **fixed**: MLflow logging (parameters, metrics, the per-problem and completion tables), Lightning's "
        "loop, the run's one-off credit map (its FLOPs are the 11 GFLOP counted here) and the record.",
        "",
        "What half the baseline would take: the matrix products already run near the rate of a large product, "
        "so what is left is the work beside them, some 40 small operations per layer and position batch, each a "
        "pass over memory with its own dispatch. Removing most of it needs each decoder layer fused into a few "
        "kernels (forward, backward and the decode step) whose bits are the same on AVX2 and AVX-512 machines; "
        "inductor's fusion, above, removes a tenth.",
    ]


def main(argv: list[str] | None = None) -> None:
    ap = script_parser(__doc__, "python -m bench.perf.flagship_cost")
    ap.add_argument("--spec", default="results/sweeps/embedded.yaml")
    ap.add_argument("--label", default="grpo")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--warm_label", default="s_trace")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--baseline", default=None, help="a checkout of older code to measure the same run with")
    ap.add_argument("--baseline_label", default=None, help="what to call it in the report (its commit)")
    ap.add_argument("--no_fusion", action="store_true", help="skip the torch.compile probe of the update")
    ap.add_argument("--no_ops", action="store_true", help="skip the run that times the matrix products")
    ap.add_argument("--set", action="append", default=[], help="rl.KEY=VALUE: also measure the run with this RL option")
    ap.add_argument("--out", default="results/benchmarks")
    args = ap.parse_args(argv)
    if args.repeats < 1:
        raise CreditBenchError(f"--repeats must be >= 1, got {args.repeats}")
    if args.baseline and not (Path(args.baseline) / "bench" / "perf").is_dir():
        raise CreditBenchError(
            f"--baseline {args.baseline} is not a checkout of this project (no bench/perf there); make one with "
            "`git worktree add PATH COMMIT`"
        )
    here = Path(__file__).resolve().parents[2]
    base_runs = measure(Path(args.baseline).resolve(), args, args.repeats) if args.baseline else None
    now_runs = measure(here, args, args.repeats)
    now = summarize(now_runs)
    settings = tuple(args.set)
    opt_runs = measure(here, args, args.repeats, settings=settings) if settings else None
    ops = None if args.no_ops else measure(here, args, 1, ops=True)[0]["ops"]
    rate = gemm_rate()
    f = model_flops(now_runs[0]["result"]["model"])
    gflop = {p: phase_flops(now["tokens"].get(p, {}), f) / 1e9 for p in PHASES if p in now["tokens"]}
    data: dict[str, Any] = {
        "machine": machine(torch_threads=1),
        "command": "python -m bench.perf.flagship_cost " + " ".join(argv if argv is not None else sys.argv[1:]),
        "spec": args.spec,
        "warm_label": args.warm_label,
        "repeats": args.repeats,
        "gemm_flops": rate,
        "model": f,
        "gflop": gflop,
        "floor_s": {p: g * 1e9 / rate for p, g in gflop.items()},
        "now": now,
        "fusion": None if args.no_fusion else fusion.probe(now_runs[0]["result"]["model"]),
        "ops": ops,
    }
    if opt_runs:
        data["options"], data["settings"] = summarize(opt_runs), list(settings)
        compared = same_numbers(now_runs[0]["result"], opt_runs[0]["result"])
        data["options_compared"], data["options_differences"] = compared
    data["notes"] = notes(data)
    if base_runs:
        data["baseline"] = summarize(base_runs)
        data["baseline_label"] = args.baseline_label or str(args.baseline)
        data["compared"], data["differences"] = same_numbers(base_runs[0]["result"], now_runs[0]["result"])
        data["ratio"] = now["cpu_s"] / data["baseline"]["cpu_s"]
    md, js = write_outputs(args.out, "flagship_cost", markdown(data), data)
    print(f"wrote {md} and {js}")


if __name__ == "__main__":
    run_script(main, "python -m bench.perf.flagship_cost")
