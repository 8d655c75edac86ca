"""Benchmark: the real pretrained model (Qwen2.5-Coder-0.5B-Instruct, Q4_K_M dequantised) on CPU.

    python -m bench.perf.pretrained [--problems 12] [--max_new_tokens 320] [--rl_steps 3]
                                    [--rl_max_new_tokens 256] [--tasks gsm8k mbpp ...]
                                    [--out results/benchmarks/pretrained.md]

Needs the model fetched once (``creditbench fetch qwen2.5-coder-0.5b-instruct``) and the benchmark
data files ($CREDITBENCH_DATA). Three parts, all in one process on whatever CPU this is:

1. Base accuracy with ``creditbench eval``'s own machinery (the task's ``chat`` template, so the
   model's chat template frames each prompt; greedy, one sample) on the first ``--problems`` of
   GSM8K, MATH-500, HumanEval and MBPP, each with a 95% Wilson interval; and the generation
   throughput of those calls (completion tokens / wall time of the whole eval, grading included).
2. A short GRPO run with LoRA (rank 16 on every linear layer) on the evaluated task whose base
   accuracy is nearest 0.5 (where a group of samples most often disagrees, so GRPO has a signal),
   with the per-step training reward as its curve and each step's time split into rollout, verify,
   score and update, as the Lightning module logs them.
3. The machine line. The CPU is usually shared, so times are an upper bound, not a floor.
"""

from __future__ import annotations

import math
import tempfile
import time

from bench.perf.common import machine, machine_line, md_table, perf_parser, run_script, write_report

MODEL = "qwen2.5-coder-0.5b-instruct"
TASKS = ("gsm8k", "math500", "humaneval", "mbpp")
CODE = ("humaneval", "mbpp")


def wilson(k: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """The 95% Wilson score interval of k successes in n (sensible at k = 0 or n, unlike k/n +- 2 SE)."""
    if n == 0:
        return 0.0, 1.0
    p = k / n
    mid = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, mid - half), min(1.0, mid + half)


def base_accuracy(task_name: str, problems: int, max_new_tokens: int, uri: str) -> dict:
    from bench.registry import TASKS as REGISTRY
    from bench.run.evaluate import evaluate, parser

    argv = ["--model", MODEL, "--task", task_name, "--n", "1", "--k", "1", "--temperature", "0"]
    argv += ["--num_problems", str(problems), "--max_new_tokens", str(max_new_tokens), "--batch_size", str(problems)]
    argv += ["--template", "chat", "--uri", uri, "--samples_to_log", "0"]
    if task_name in CODE:
        argv.append("--allow_code_execution")
    a = parser().parse_args(argv)
    from bench.core import build_config
    from bench.engine.pretrained import resolve
    from bench.run.evaluate import _task_options

    a.model = str(resolve(a.model))
    cls = REGISTRY.get(task_name)
    task = cls(build_config(cls.Config, _task_options(a), f"task {task_name!r}"))
    if task.executes_code:
        task.allow_code_execution()
    rows = task.load("eval")
    rows = rows.select(range(min(problems, len(rows))))
    r = evaluate(a, task, rows, [1])
    m = r["metrics"]
    correct = sum(p["correct"] for p in r["per_problem"])
    tokens = m["mean_length"] * len(rows)
    lo, hi = wilson(correct, len(rows))
    return {
        "task": task_name,
        "n": len(rows),
        "correct": correct,
        "pass_at_1": correct / len(rows),
        "ci95": [lo, hi],
        "mean_length": m["mean_length"],
        "truncated_frac": m["truncated_frac"],
        "wall_s": m["wall_s"],
        "tokens_per_s": tokens / m["wall_s"],
    }


def grpo_run(task_name: str, steps: int, max_new_tokens: int) -> dict:
    import lightning as L
    import torch

    from bench.config import EvalConfig, RLConfig, SamplingConfig
    from bench.engine.data import PromptDataModule
    from bench.engine.module import RLVRModule
    from bench.engine.policy import add_lora, load_policy
    from bench.perf.step import MemoryLogger
    from bench.registry import METHODS
    from bench.registry import TASKS as REGISTRY

    torch.manual_seed(0)
    model, tok = load_policy(MODEL)
    policy = add_lora(model, rank=16, alpha=32.0, dropout=0.0, targets=["all-linear"])
    cls = REGISTRY.get(task_name)
    task = cls(cls.Config(template="chat"))
    if task.executes_code:
        task.allow_code_execution()
    grpo = METHODS.get("grpo")
    rl = RLConfig(
        steps=steps, prompts_per_step=2, group_size=4, lr=2e-5, sampling=SamplingConfig(max_new_tokens=max_new_tokens)
    )
    ev = EvalConfig(every=10**6, num_problems=2)
    module = RLVRModule(policy, tok, grpo(grpo.Config()), task, task_name, rl, ev)
    logger = MemoryLogger()
    trainer = L.Trainer(
        accelerator="cpu",
        max_steps=steps * rl.ppo_epochs * rl.minibatches,
        logger=logger,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        limit_val_batches=0,
    )
    t0 = time.perf_counter()
    trainer.fit(module, datamodule=PromptDataModule(task, rl.prompts_per_step, ev, 0))
    rows = [r for r in logger.rows if "time/step_s" in r]
    keep = ("train/reward", "time/rollout_s", "time/verify_s", "time/score_s", "time/update_s", "time/step_s")
    curve = [{k: float(r[k]) for k in keep if k in r} for r in rows]
    return {
        "task": task_name,
        "steps": steps,
        "prompts": 2,
        "group": 4,
        "max_new_tokens": max_new_tokens,
        "lora": "rank 16, all-linear",
        "lr": rl.lr,
        "wall_s": time.perf_counter() - t0,
        "curve": curve,
    }


def report(evals: list[dict], rl: dict | None, m: dict, args) -> str:
    lines = [
        f"# {MODEL} (Q4_K_M GGUF, dequantised to float32) on CPU",
        "",
        f"Machine: {machine_line(m)}; the 2 cores were shared with other jobs while this ran, so the times",
        "are upper bounds. Written by `python -m bench.perf.pretrained "
        f"--problems {args.problems} --max_new_tokens {args.max_new_tokens} --rl_steps {args.rl_steps}`.",
        "",
        "## Base accuracy (greedy, chat template, first n problems of each eval split)",
        "",
    ]
    rows = [
        (
            e["task"],
            e["n"],
            f"{e['pass_at_1']:.3f}",
            f"[{e['ci95'][0]:.2f}, {e['ci95'][1]:.2f}]",
            f"{e['mean_length']:.0f}",
            f"{e['truncated_frac']:.2f}",
            f"{e['wall_s']:.0f}",
            f"{e['tokens_per_s']:.1f}",
        )
        for e in evals
    ]
    header = "task | n | pass@1 | 95% CI (Wilson) | mean tokens | truncated | wall s | gen tokens/s"
    lines += md_table(header, rows, "lrrrrrrr")
    lines += [
        "",
        f"Generation: one batch of n prompts per task, at most {args.max_new_tokens} new tokens; "
        "tokens/s counts completion tokens over the eval's wall time (grading included).",
        "",
    ]
    if rl is None:  # written after each eval, so a long run that is stopped keeps what it measured
        return "\n".join([*lines, "## GRPO + LoRA", "", "(not run yet: the report is rewritten when it ends)"])
    lines += [
        f"## GRPO + LoRA on {rl['task']} ({rl['steps']} steps, {rl['prompts']} prompts x G={rl['group']}, "
        f"{rl['max_new_tokens']} new tokens, {rl['lora']}, lr {rl['lr']})",
        "",
    ]
    parts = ("train/reward", "time/rollout_s", "time/verify_s", "time/score_s", "time/update_s", "time/step_s")
    step_rows = [(i + 1, *(f"{c.get(k, float('nan')):.2f}" for k in parts)) for i, c in enumerate(rl["curve"])]
    lines += md_table("step | train reward | rollout s | verify s | score s | update s | step s", step_rows, "rrrrrrr")
    lines += [
        "",
        f"The task was picked as the evaluated one whose base pass@1 is nearest 0.5. Run wall time "
        f"{rl['wall_s']:.0f} s (model load included).",
    ]
    return "\n".join(lines)


def main() -> int:
    p = perf_parser(__doc__, "python -m bench.perf.pretrained")
    p.add_argument("--problems", type=int, default=12)
    p.add_argument("--max_new_tokens", type=int, default=320)
    p.add_argument("--rl_steps", type=int, default=3)
    p.add_argument("--rl_max_new_tokens", type=int, default=256)
    p.add_argument("--tasks", nargs="+", default=list(TASKS), choices=TASKS)
    p.add_argument("--out", default="results/benchmarks/pretrained.md")
    args = p.parse_args()
    from bench.engine.pretrained import resolve

    resolve(MODEL)  # not fetched: one line naming the fetch command, before any work
    m = machine()
    with tempfile.TemporaryDirectory() as tmp:
        uri = f"sqlite:///{tmp}/mlflow.db"
        evals = []
        for name in args.tasks:
            evals.append(base_accuracy(name, args.problems, args.max_new_tokens, uri))
            print(evals[-1], flush=True)
            data = {"model": MODEL, "machine": m, "evals": evals, "grpo": None, "args": vars(args)}
            write_report(args.out, report(evals, None, m, args), data)
    if args.rl_steps == 0:
        return 0
    pick = min(evals, key=lambda e: abs(e["pass_at_1"] - 0.5))["task"]
    rl = grpo_run(pick, args.rl_steps, args.rl_max_new_tokens)
    print(rl, flush=True)
    data = {"model": MODEL, "machine": m, "evals": evals, "grpo": rl, "args": vars(args)}
    write_report(args.out, report(evals, rl, m, args), data)
    return 0


if __name__ == "__main__":
    run_script(main, "python -m bench.perf.pretrained")
