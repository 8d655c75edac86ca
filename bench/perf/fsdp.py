"""Benchmark: the RL update under FSDP2 in 2 CPU processes (gloo) against one process on the same global batch.

    python -m bench.perf.fsdp [--out results/benchmarks/fsdp]

The figures of tests/engine/test_fsdp.py, written down: bench/perf/workers/fsdp.py runs the module's real
scoring and update of bench.engine.parity's fixed batch (5 groups of 4 completions; one process holds
2 groups of short completions, the other 3 of long ones) for each aggregation and a LoRA case, fused
and in micro-batches of at most 40 tokens (3 on one process, 6 on the other); this script computes
the same update in one process and reports, per case, the largest difference between the whole
gradients (every shard gathered) relative to the largest gradient, and the difference in the loss.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

from bench.script import machine, machine_line, md_table, run_script, script_parser, write_report

REPO = Path(__file__).resolve().parents[2]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main() -> int:
    parser = script_parser(__doc__, "python -m bench.perf.fsdp")
    parser.add_argument("--out", default="results/benchmarks/fsdp")
    a = parser.parse_args()
    torch.set_num_threads(1)  # as each worker process computes
    from bench.engine.parity.batch import CASES, LORA_CASE
    from bench.engine.parity.update import update_case

    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "fsdp.pt"
        path = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p)
        env = {**os.environ, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(_free_port()), "PYTHONPATH": path}
        for key in ("LOCAL_RANK", "NODE_RANK", "WORLD_SIZE", "RANK", "PL_GLOBAL_SEED"):
            env.pop(key, None)
        t = time.perf_counter()
        done = subprocess.run(
            [sys.executable, str(REPO / "bench" / "perf" / "workers" / "fsdp.py"), "update", str(out)],
            cwd=REPO,
            env=env,
            capture_output=True,
            text=True,
        )
        wall = time.perf_counter() - t
        if done.returncode != 0:
            print(done.stderr[-4000:], file=sys.stderr)
            return 1
        sharded = torch.load(out)
    rows = []
    for case in [*CASES, LORA_CASE]:
        for split, budget in (("fused", 0), ("micro-batches", 10_000)):
            one = update_case(case, 1, micro_batch_tokens=budget)
            two = sharded[case if budget == 0 else f"{case}@split"]
            diff = max(float((one["grads"][k] - two["grads"][k]).abs().max()) for k in one["grads"])
            scale = max(float(g.abs().max()) for g in one["grads"].values())
            loss = abs(one["stats"]["loss/total"] - two["stats"]["loss/total"])
            rows.append(
                {
                    "case": case,
                    "update": split,
                    "tensors": len(one["grads"]),
                    "max_abs_grad_diff": diff,
                    "largest_grad": scale,
                    "relative": diff / scale,
                    "abs_loss_diff": loss,
                }
            )
    m = machine(torch_threads=1, packages=("lightning",))
    lines = [
        "# FSDP2 (2 CPU processes, gloo) against one process",
        "",
        machine_line(m, "lightning"),
        "",
        f"`python -m bench.perf.fsdp`; the 2-process job (every case, fused and split) took {wall:.0f} s.",
        "",
        *md_table(
            "case | update | trainable tensors | max abs grad diff | largest grad | relative | abs loss diff",
            [
                [
                    r["case"],
                    r["update"],
                    r["tensors"],
                    f"{r['max_abs_grad_diff']:.1e}",
                    f"{r['largest_grad']:.2e}",
                    f"{r['relative']:.1e}",
                    f"{r['abs_loss_diff']:.1e}",
                ]
                for r in rows
            ],
            "llrrrrr",
        ),
    ]
    md, _ = write_report(a.out, "\n".join(lines), {"machine": m, "wall_s": wall, "cases": rows})
    print(f"wrote {md}")
    return 0


if __name__ == "__main__":
    run_script(main, "python -m bench.perf.fsdp")
