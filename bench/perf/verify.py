"""Verifier throughput: verifications per second for the math grader and the code sandbox.

    python -m bench.perf.verify [--data-dir ../shared/data] [--math-items 2000] [--workers 0,1,2]

Math items are MATH-500 rows graded through the task's ``verify`` against realistic completions (the
gold answer boxed at the end of some reasoning text, a shifted wrong answer, an unboxed final
number), with the flexible extraction on (as evaluation runs) and off (as training rollouts run).
Code items are HumanEval's 164 canonical solutions and 164 wrong ones, each a separate sandboxed
process. Each figure is the best of ``--reps`` timed passes after one warm pass (pool start-up is
reported separately). Writes results/benchmarks/verify.{md,json}.
"""

from __future__ import annotations

import time

from bench.gold_check import shifted
from bench.registry import TASKS
from bench.script import machine, machine_line, md_table, script_parser, write_report

REASONING = "Let us work through the problem step by step. First we simplify the expression; then we check the cases. "


def math_task(name: str, data_dir: str, workers: int):
    """The registered math task ``name``, its grader on ``workers`` processes (0: inline)."""
    cls = TASKS.get(name)
    return cls(cls.Config(data_dir=data_dir, grader_workers=workers))


def math_items(data_dir: str, count: int, task: str) -> tuple[list[str], list[dict]]:
    """``count`` completions and the rows they answer: the gold answer boxed at the end of some reasoning,
    a shifted wrong answer boxed, and the gold answer unboxed, in turn."""
    rows = list(math_task(task, data_dir, 0).load("eval"))
    completions, answered = [], []
    for i in range(count):
        r = rows[i % len(rows)]
        kind = i % 3
        if kind == 0:
            text = f"{REASONING}So the final answer is $\\boxed{{{r['answer']}}}$."
        elif kind == 1:
            text = f"{REASONING}Therefore the answer is $\\boxed{{{shifted(r['answer'])}}}$."
        else:
            text = f"{REASONING}The answer is {r['answer']}"
        completions.append(text)
        answered.append(r)
    return completions, answered


def bench_math(data_dir: str, count: int, workers: list[int], reps: int, task: str) -> list[dict]:
    """Math verifications per second through the task's own ``verify`` (``details``: the flexible
    extraction), per worker count. The grader shares one pool per size within the process and the task
    does not stop it, so each distinct count starts (and times) its own pool; a count listed twice reuses
    the running one."""
    completions, rows = math_items(data_dir, count, task)
    out = []
    for w in workers:
        t0 = time.perf_counter()
        verifier = math_task(task, data_dir, w)
        verifier.verify(completions[:8], rows[:8])  # starts the pool (if any)
        startup = time.perf_counter() - t0
        for flexible in (True, False):
            best = float("inf")
            for _ in range(reps):
                t = time.perf_counter()
                verifier.verify(completions, rows, details=flexible)
                best = min(best, time.perf_counter() - t)
            out.append(
                {
                    "kind": "math",
                    "workers": w,
                    "flexible": flexible,
                    "items": count,
                    "per_s": count / best,
                    "startup_s": startup,
                }
            )
            print(f"math workers={w} flexible={flexible}: {count / best:.0f} verifications/s", flush=True)
    return out


def bench_code(data_dir: str, workers: list[int], reps: int, task: str) -> list[dict]:
    """Programs per second through the code task's sandbox: the reference solutions and as many wrong
    ones, per worker count."""
    cls = TASKS.get(task)
    out = []
    for w in workers:
        runner = cls(cls.Config(data_dir=data_dir, workers=w))
        runner.allow_code_execution()
        rows = list(runner.load("eval"))
        jobs = [r["answer"] for r in rows] + ["    return None\n"] * len(rows)
        rows2 = rows + rows
        best = float("inf")
        for _ in range(reps):
            t = time.perf_counter()
            res = runner.verify(jobs, rows2)
            best = min(best, time.perf_counter() - t)
        assert sum(o.correct for o in res) == len(rows), "a canonical solution failed"
        out.append({"kind": "code", "workers": w, "items": len(jobs), "per_s": len(jobs) / best})
        print(f"code workers={w}: {len(jobs) / best:.1f} programs/s", flush=True)
    return out


def markdown(res: list[dict], env: dict) -> str:
    rows = []
    for r in res:
        workers = "inline" if r["workers"] == 0 else r["workers"]
        flex = {True: "on (eval)", False: "off (training)"}.get(r.get("flexible"), "-")
        start = f"{r['startup_s']:.2f}" if "startup_s" in r else "-"
        rows.append([r["kind"], workers, r["items"], flex, f"{r['per_s']:.1f}", start])
    header = "verifier | workers | items | flexible extraction | verifications/s | pool start-up s"
    lines = [
        "# Verifier throughput",
        "",
        f"Machine: {machine_line(env)} ({env['platform']}); `python -m bench.perf.verify`. "
        "Best of the timed passes after a warm pass.",
        "",
        *md_table(header, rows, align="lrrlrr"),
    ]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = script_parser(__doc__, "python -m bench.perf.verify")
    ap.add_argument("--data-dir", default="../shared/data")
    ap.add_argument("--math-items", type=int, default=2000)
    ap.add_argument("--workers", default="0,1,2", help="math grader workers (0: inline)")
    ap.add_argument("--code-workers", default="1,2")
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--math-task", default="math500", help="a math task whose eval rows make the items")
    ap.add_argument("--code-task", default="humaneval", help="a code task whose reference solutions are run")
    ap.add_argument("--out", default="results/benchmarks/verify")
    a = ap.parse_args(argv)
    env = machine()
    res = bench_math(a.data_dir, a.math_items, [int(w) for w in a.workers.split(",")], a.reps, a.math_task)
    res += bench_code(a.data_dir, [int(w) for w in a.code_workers.split(",")], a.reps, a.code_task)
    md_path, _ = write_report(a.out, markdown(res, env), {"env": env, "results": res})
    print(f"wrote {md_path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
