"""The exact objective J beside sampled pass@1 over GRPO training, on the tasks with references.

    python -m bench.studies.exact_objective [--tasks chain,arithmetic] [--seeds 0,1] [--budget 2048]
                                         [--every 4] [--out results/benchmarks]

For each task and seed, one GRPO run of results/configs/embedded_grpo.yaml (tiny-500k from the
task's pinned base) with rl.minibatches 2, rl.lr 2e-4 and threads 1, and a budget of
``--budget`` samples (2048: 16 steps of 128), evaluated every ``--every`` RL steps on the task's 200
eval problems x 4 samples at temperature 1. At each eval point the run logs, on the same problems,
sampled pass@1 and J = 1/N sum_i p(reference_i | prompt_i) (``eval/<task>/ref_prob``,
bench.engine.exact). J counts only the one right completion, so it is at most the policy's true
pass@1: the ratio J / pass@1 is the share of its right answers that are the reference exactly.
Reported: every eval point's J and pass@1 with their standard errors over problems and the ratio,
and per task the ratio at the base and after training and the correlation of J with pass@1 across
the checkpoints (every seed's eval points pooled). The runs go to a scratch MLflow store and cache;
nothing in the repository's is touched. Writes results/benchmarks/exact_objective.{md,json}.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from bench.script import machine, machine_line, md_table, run_script, script_parser, write_outputs

CONFIG = "results/configs/embedded_grpo.yaml"
OVERRIDES = ("--rl.minibatches", "2", "--rl.lr", "2e-4", "--threads", "1")


def train(task: str, seed: int, budget: int, every: int, root: Path) -> dict[str, Any]:
    """One GRPO run of CONFIG on ``task`` (its result, bench.run.result's JSON)."""
    from bench.run.args import run_config
    from bench.run.train import run

    argv = ["--config", CONFIG, *OVERRIDES, "--task.name", task, "--seed", str(seed)]
    argv += ["--rl.budget_samples", str(budget), "--eval.every", str(every)]
    argv += ["--tracking.uri", f"sqlite:///{root / 'mlflow.db'}", "--tracking.cache_dir", str(root / "cache")]
    return run(run_config(argv, "exact_objective"), progress=False)


def points(result: dict[str, Any], task: str) -> list[dict[str, float]]:
    """Each eval point's J and pass@1 (with their standard errors over problems) and J / pass@1."""
    out = []
    for p in result["history"]:
        e = p["eval"][task]
        ratio = e["ref_prob"] / e["pass_at_1"] if e["pass_at_1"] else float("nan")
        out.append(
            {"step": p["step"], "samples": p["samples"], "ref_prob": e["ref_prob"], "ref_prob_se": e["ref_prob_se"]}
            | {"pass_at_1": e["pass_at_1"], "pass_at_1_se": e["pass_at_1_se"], "ratio": ratio}
        )
    return out


def summary(runs: dict[int, list[dict[str, float]]]) -> dict[str, float]:
    """A task's seeds (seed -> eval points): the ratio J / pass@1 of the seeds' means at the base and
    at the last point, and Pearson's r of J with pass@1 over every seed's eval points."""
    first, last = ([pts[i] for pts in runs.values()] for i in (0, -1))
    j = np.array([q["ref_prob"] for pts in runs.values() for q in pts])
    p = np.array([q["pass_at_1"] for pts in runs.values() for q in pts])

    def ratio(at: list[dict[str, float]]) -> float:
        return float(np.mean([q["ref_prob"] for q in at]) / np.mean([q["pass_at_1"] for q in at]))

    return {
        "base_ref_prob": float(np.mean([q["ref_prob"] for q in first])),
        "base_pass_at_1": float(np.mean([q["pass_at_1"] for q in first])),
        "base_ratio": ratio(first),
        "final_ref_prob": float(np.mean([q["ref_prob"] for q in last])),
        "final_pass_at_1": float(np.mean([q["pass_at_1"] for q in last])),
        "final_ratio": ratio(last),
        "pearson_r": float(np.corrcoef(j, p)[0, 1]),  # cov(J, p) / (sd J sd p)
        "checkpoints": int(len(j)),
    }


def report(data: dict[str, Any], command: str) -> str:
    """The markdown: per task the summary, then every eval point."""
    rows = [
        [task, f"{s['base_ref_prob']:.3f}", f"{s['base_pass_at_1']:.3f}", f"{s['base_ratio']:.2f}"]
        + [f"{s['final_ref_prob']:.3f}", f"{s['final_pass_at_1']:.3f}", f"{s['final_ratio']:.2f}"]
        + [f"{s['pearson_r']:.3f} ({s['checkpoints']})"]
        for task, s in data["summary"].items()
    ]
    header = "task | base J | base pass@1 | base J/pass@1 | final J | final pass@1 | final J/pass@1 | r (checkpoints)"
    points_rows = [
        [task, seed, q["step"], q["samples"], f"{q['ref_prob']:.3f} ± {q['ref_prob_se']:.3f}"]
        + [f"{q['pass_at_1']:.3f} ± {q['pass_at_1_se']:.3f}", f"{q['ratio']:.2f}"]
        for task, runs in data["points"].items()
        for seed, pts in runs.items()
        for q in pts
    ]
    return "\n".join(
        [
            "# The exact objective J beside sampled pass@1",
            "",
            f"Machine: {machine_line(data['machine'])}. `{command}`: GRPO on each task's pinned tiny-500k base "
            f"({CONFIG}, {' '.join(OVERRIDES)}), evaluated on 200 problems x 4 samples. J is the mean "
            "probability of the one reference completion (teacher-forced, no sampling noise); pass@1 the "
            "sampled accuracy, which also counts right answers reached another way. Means over the seeds; r is "
            "Pearson's correlation of J with pass@1 over every seed's eval points.",
            "",
            *md_table(header, rows, "lrrrrrrr"),
            "",
            "Every eval point (± one standard error over the problems):",
            "",
            *md_table("task | seed | step | samples | J | pass@1 | J/pass@1", points_rows, "lrrrrrr"),
        ]
    )


def main() -> int:
    ap = script_parser(__doc__, "python -m bench.studies.exact_objective")
    ap.add_argument("--tasks", default="chain,arithmetic")
    ap.add_argument("--seeds", default="0,1")
    ap.add_argument("--budget", type=int, default=2048, help="training samples a run (default 2048: 16 steps)")
    ap.add_argument("--every", type=int, default=4, help="RL steps between eval points (default 4)")
    ap.add_argument("--out", default="results/benchmarks")
    a = ap.parse_args()
    root = Path(tempfile.mkdtemp(prefix="exact-objective-"))
    os.environ.setdefault("CREDITBENCH_CHECKPOINTS", str(root / "checkpoints"))
    tasks, seeds = a.tasks.split(","), [int(s) for s in a.seeds.split(",")]
    runs = {t: {s: points(train(t, s, a.budget, a.every, root), t) for s in seeds} for t in tasks}
    data = {"machine": machine(torch_threads=1), "args": vars(a), "config": CONFIG, "overrides": list(OVERRIDES)}
    data |= {"summary": {t: summary(r) for t, r in runs.items()}, "points": runs}
    command = f"python -m bench.studies.exact_objective --tasks {a.tasks} --seeds {a.seeds} --budget {a.budget}"
    md = report(data, f"{command} --every {a.every}")
    for p in write_outputs(a.out, "exact_objective", md, data):
        print(f"written: {p}")
    print(md)
    return 0


if __name__ == "__main__":
    run_script(main, "python -m bench.studies.exact_objective")
