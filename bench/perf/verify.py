"""Verifier throughput: verifications per second for the math grader and the code sandbox.

    python -m bench.perf.verify [--data-dir ../shared/data] [--math-items 2000] [--workers 0,1,2]

Math items are MATH-500 rows graded against realistic completions (the gold answer boxed at the
end of some reasoning text, a shifted wrong answer, an unboxed final number), with the flexible
extraction on (as evaluation runs) and off (as training rollouts run). Code items are HumanEval's
164 canonical solutions and 164 wrong ones, each a separate sandboxed process. Each figure is
the best of ``--reps`` timed passes after one warm pass (pool start-up is reported separately).
Writes results/benchmarks/verify.{md,json}.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from pathlib import Path


def math_items(data_dir: str, count: int, task: str):
    from bench.perf.gold_check import shifted
    from bench.registry import TASKS

    cls = TASKS.get(task)
    rows = list(cls(cls.Config(data_dir=data_dir, grader_workers=0)).load("eval"))
    completions, answers = [], []
    reasoning = "Let us work through the problem step by step. First we simplify the expression; then we check the cases. "
    for i in range(count):
        r = rows[i % len(rows)]
        kind = i % 3
        if kind == 0:
            text = f"{reasoning}So the final answer is $\\boxed{{{r['answer']}}}$."
        elif kind == 1:
            text = f"{reasoning}Therefore the answer is $\\boxed{{{shifted(r['answer'])}}}$."
        else:
            text = f"{reasoning}The answer is {r['answer']}"
        completions.append(text)
        answers.append(r["answer"])
    return completions, answers


def bench_math(data_dir: str, count: int, workers: list[int], reps: int, task: str) -> list[dict]:
    from tasks.math_grader import MathGrader, shutdown_pools

    completions, answers = math_items(data_dir, count, task)
    out = []
    for w in workers:
        t0 = time.perf_counter()
        grader = MathGrader(timeout=5, workers=w)
        grader(completions[:8], answers[:8])  # starts the pool (if any)
        startup = time.perf_counter() - t0
        for flexible in (True, False):
            best = float("inf")
            for _ in range(reps):
                t = time.perf_counter()
                grader(completions, answers, flexible=flexible)
                best = min(best, time.perf_counter() - t)
            out.append({"kind": "math", "workers": w, "flexible": flexible, "items": count,
                        "per_s": count / best, "startup_s": startup})
            print(f"math workers={w} flexible={flexible}: {count / best:.0f} verifications/s", flush=True)
        shutdown_pools()
    return out


def bench_code(data_dir: str, workers: list[int], reps: int, task: str) -> list[dict]:
    from bench.registry import TASKS

    out = []
    for w in workers:
        cls = TASKS.get(task)
        task = cls(cls.Config(data_dir=data_dir, workers=w))
        task.allow_code_execution()
        rows = list(task.load("eval"))
        jobs = [r["answer"] for r in rows] + ["    return None\n"] * len(rows)
        rows2 = rows + rows
        best = float("inf")
        for _ in range(reps):
            t = time.perf_counter()
            res = task.verify(jobs, rows2)
            best = min(best, time.perf_counter() - t)
        assert sum(o.correct for o in res) == len(rows), "a canonical solution failed"
        out.append({"kind": "code", "workers": w, "items": len(jobs), "per_s": len(jobs) / best})
        print(f"code workers={w}: {len(jobs) / best:.1f} programs/s", flush=True)
    return out


def markdown(res: list[dict], env: dict) -> str:
    lines = ["# Verifier throughput", "", f"Machine: {env['cpus']} CPUs ({env['platform']}); "
             "`python -m bench.perf.verify`. Best of the timed passes after a warm pass.", "",
             "| verifier | workers | items | flexible extraction | verifications/s | pool start-up s |",
             "|---|---:|---:|---|---:|---:|"]
    for r in res:
        workers = "inline" if r["workers"] == 0 else r["workers"]
        flex = {True: "on (eval)", False: "off (training)"}.get(r.get("flexible"), "-")
        start = f"{r['startup_s']:.2f}" if "startup_s" in r else "-"
        lines.append(f"| {r['kind']} | {workers} | {r['items']} | {flex} | {r['per_s']:.1f} | {start} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.perf.verify", description=__doc__.split("\n\n")[0])
    ap.add_argument("--data-dir", default="../shared/data")
    ap.add_argument("--math-items", type=int, default=2000)
    ap.add_argument("--workers", default="0,1,2", help="math grader workers (0: inline)")
    ap.add_argument("--code-workers", default="1,2")
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--math-task", default="math500", help="a math task whose eval rows make the items")
    ap.add_argument("--code-task", default="humaneval", help="a code task whose reference solutions are run")
    ap.add_argument("--out", default="results/benchmarks/verify")
    a = ap.parse_args(argv)
    env = {"cpus": os.cpu_count(), "platform": platform.platform()}
    res = bench_math(a.data_dir, a.math_items, [int(w) for w in a.workers.split(",")], a.reps, a.math_task)
    res += bench_code(a.data_dir, [int(w) for w in a.code_workers.split(",")], a.reps, a.code_task)
    out = Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps({"env": env, "results": res}, indent=2))
    out.with_suffix(".md").write_text(markdown(res, env))
    print(f"wrote {out.with_suffix('.md')}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
