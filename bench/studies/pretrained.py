"""Benchmark: the real pretrained model (Qwen2.5-Coder-0.5B-Instruct, Q4_K_M dequantised) on CPU.

    python -m bench.studies.pretrained [--problems 32] [--max_new_tokens 512] [--tasks gsm8k mbpp ...]
                                    [--rl_steps 4] [--rl_max_new_tokens 512] [--rl_prompts 2]
                                    [--rl_group 4] [--rl_lr 2e-5] [--rl_micro_batch_tokens 2048]
                                    [--rl_task gsm8k] [--out results/benchmarks/pretrained.md]
                                    [--fresh] [--render]

Needs the model fetched once (``creditbench fetch qwen2.5-coder-0.5b-instruct``) and the benchmark
data files ($CREDITBENCH_DATA). Three parts, all in one process on whatever CPU this is:

1. Base accuracy with ``creditbench eval``'s own machinery (the task's ``chat`` template, so the
   model's chat template frames each prompt; greedy, one sample) on the first ``--problems`` of
   GSM8K, MATH-500, HumanEval and MBPP, each with a 95% Wilson interval; and the generation
   throughput of those calls (completion tokens / wall time of the whole eval, grading included).
2. A short GRPO run with LoRA (rank 16 on every linear layer) on the evaluated task whose base
   accuracy is nearest 0.5 (where a group of samples most often disagrees, so GRPO has a signal),
   (or ``--rl_task``), with the per-step training reward as its curve and each step's time split
   into rollout, verify, score and update, as the Lightning module logs them; and the process's
   peak resident memory beside bench.run.plan's estimate for the same run config.
3. The machine line and the load average after each part: on shared cores the times are an upper bound.

A stopped run resumes: the evals already in ``--out``'s JSON for the same ``--problems`` and
``--max_new_tokens`` are kept (``--fresh`` measures them again), with their per-problem results.
``--render`` writes the markdown again from the JSON's measurements, measuring nothing.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import resource
import tempfile
import time
from pathlib import Path

from bench.errors import CreditBenchError
from bench.script import machine, machine_line, md_table, run_script, script_parser, write_report

KEEP = (  # what the Lightning module logs each step that the report shows
    "train/reward",
    "train/mixed_group_frac",
    "train/response_length",
    "train/tokens",
    "train/grad_norm",
    "time/rollout_s",
    "time/verify_s",
    "time/score_s",
    "time/update_s",
    "time/step_s",
)
MODEL = "qwen2.5-coder-0.5b-instruct"
REPORTED = {"humaneval": 61.6, "mbpp": 52.4}  # bf16 original, Qwen2.5-Coder report (EvalPlus's MBPP)
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


def base_accuracy(task_name: str, problems: int, max_new_tokens: int, uri: str, allow_code: bool = False) -> dict:
    from bench.core import code_execution_allowed, code_execution_refused
    from bench.models.pretrained import resolve
    from bench.options import build_config
    from bench.registry import TASKS as REGISTRY
    from bench.run.evaluate import EvalSettings, evaluate

    a = EvalSettings(
        model=MODEL, task=task_name, n=1, k="1", temperature=0.0, num_problems=problems, max_new_tokens=max_new_tokens,
        batch_size=problems, template="chat", uri=uri, samples_to_log=0, allow_code_execution=allow_code,
    ).resolved()  # fmt: skip
    a.model = str(resolve(a.model))
    cls = REGISTRY.get(task_name)
    task = cls(build_config(cls.Config, a.task_options(), f"task {task_name!r}"))
    if task.executes_code:  # the same opt-in as everywhere (docs/tasks.md)
        if not code_execution_allowed(a.allow_code_execution):
            raise CreditBenchError(code_execution_refused(task_name))
        task.allow_code_execution()
    rows = task.load("eval")
    rows = rows.select(range(min(problems, len(rows))))
    r = evaluate(a, task, rows)
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
        "per_problem": [{"id": q["id"], "correct": q["correct"]} for q in r["per_problem"]],
    }


def run_config(task_name: str, args):
    """The run this benchmark's GRPO part is, as a RunConfig (what ``creditbench train`` would get)."""
    from bench.run.args import run_config as parsed

    lora = {"rank": 16, "alpha": 32.0, "dropout": 0.0, "targets": ["all-linear"]}
    rl = {"steps": args.rl_steps, "prompts_per_step": args.rl_prompts, "group_size": args.rl_group, "lr": args.rl_lr}
    rl |= {"micro_batch_tokens": args.rl_micro_batch_tokens, "sampling": {"max_new_tokens": args.rl_max_new_tokens}}
    d = {"model": {"name": MODEL, "dtype": "float32", "lora": lora}, "precision": "32-true", "rl": rl}
    d |= {"task": {"name": task_name, "options": {"template": "chat"}}, "method": {"name": "grpo"}}
    d["allow_code_execution"] = bool(getattr(args, "allow_code_execution", False))
    return parsed(d, "bench.studies.pretrained")


def memory_plan_of(cfg) -> dict:
    """bench.run.plan's memory estimate of ``cfg``'s update, to set beside the measured peak."""
    from bench.run.plan import memory_plan

    p = memory_plan(cfg, load_data=False)
    return {"static_gb": p.static_gb, "activations_gb": p.activations_gb, "total_gb": p.total_gb}


def grpo_run(task_name: str, args) -> dict:
    import torch

    from bench.config import EvalConfig
    from bench.engine.fit import fit_logged
    from bench.models.policy import load_policy
    from bench.run.build import build_module, prepare
    from bench.run.resolve import resolve

    cfg = run_config(task_name, args)
    cfg = dataclasses.replace(cfg, eval=EvalConfig(every=10**6, num_problems=2))  # the update is measured, not evals
    r = resolve(cfg)  # the method and task as a run builds them (code execution only with the opt-in)
    task, rl, lora, ev = r.task, cfg.rl, cfg.model.lora, cfg.eval
    torch.manual_seed(0)
    model, tok = load_policy(cfg.model.name)
    policy, ref = prepare(cfg, r, model)
    module = build_module(cfg, r, policy, tok, ref)
    t0 = time.perf_counter()
    logged = fit_logged(module, task, rl, ev)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / 1e9  # Linux: KiB
    rows = [r for r in logged if "time/step_s" in r]
    curve = [{k: float(r[k]) for k in KEEP if k in r} for r in rows]
    return {
        "task": task_name,
        "steps": rl.steps,
        "prompts": rl.prompts_per_step,
        "group": rl.group_size,
        "max_new_tokens": rl.sampling.max_new_tokens,
        "lora": f"rank {lora.rank}, {', '.join(lora.targets)}",
        "lr": rl.lr,
        "micro_batch_tokens": rl.micro_batch_tokens,
        "peak_rss_gb": peak,
        "plan": memory_plan_of(cfg),
        "wall_s": time.perf_counter() - t0,
        "curve": curve,
    }


def command(args) -> str:
    flags = f"--problems {args.problems} --max_new_tokens {args.max_new_tokens} --rl_steps {args.rl_steps}"
    if args.rl_steps:
        flags += f" --rl_max_new_tokens {args.rl_max_new_tokens} --rl_prompts {args.rl_prompts}"
        flags += f" --rl_group {args.rl_group} --rl_lr {args.rl_lr}"
        flags += f" --rl_micro_batch_tokens {args.rl_micro_batch_tokens}"
        flags += f" --rl_task {args.rl_task}" if args.rl_task else ""
    code = [t for t in (*args.tasks, getattr(args, "rl_task", None)) if t in CODE]  # these run only with the opt-in
    flags += " --allow_code_execution" if code or getattr(args, "allow_code_execution", False) else ""
    return f"python -m bench.studies.pretrained {flags}"


def shared(loads: list[float], m: dict) -> str:
    """What the load average says of the times: this script alone keeps about torch_threads cores busy."""
    if not loads:
        return "unknown sharing"
    if max(loads) > m["torch_threads"] + 0.5:
        return "other work shared the cores, so the times are upper bounds"
    return "the script had the cores to itself"


def memory(rl: dict) -> str:
    if "peak_rss_gb" not in rl:
        return ""
    p = rl["plan"]
    return (
        f"The process's peak resident memory (model load, rollouts, update, and any evals it ran first) was "
        f"{rl['peak_rss_gb']:.1f} GB; bench.run.plan estimates the update "
        f"at {p['total_gb']:.1f} GB ({p['static_gb']:.1f} GB of weights and optimizer state, "
        f"{p['activations_gb']:.1f} GB of one micro-batch's activations), without the rollout's KV cache and the "
        "runtime. "
    )


PICK = "The task was picked as the evaluated one whose base pass@1 is nearest 0.5."


def report(evals: list[dict], rl: dict | None, m: dict, args) -> str:
    loads = [e["load"] for e in evals if "load" in e] + ([rl["load"]] if rl and "load" in rl else [])
    lines = [
        f"# {MODEL} (Q4_K_M GGUF, dequantised to float32) on CPU",
        "",
        f"Machine: {machine_line(m)}. The 1-minute load average after each part was "
        f"{', '.join(f'{x:.1f}' for x in loads) or '?'}: {shared(loads, m)}. Written by `{command(args)}`.",
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
            f"{REPORTED[e['task']]:.1f}" if e["task"] in REPORTED else "-",
            f"{e['mean_length']:.0f}",
            f"{e['truncated_frac']:.2f}",
            f"{e['wall_s']:.0f}",
            f"{e['tokens_per_s']:.1f}",
        )
        for e in evals
    ]
    header = "task | n | pass@1 | 95% CI (Wilson) | reported | mean tokens | truncated | wall s | gen tokens/s"
    lines += md_table(header, rows, "lrrrrrrrr")
    lines += [
        "",
        f"Generation: one batch of n prompts per task, at most {args.max_new_tokens} new tokens; "
        "tokens/s counts completion tokens over the eval's wall time (grading included). "
        "Reported: Qwen's pass@1 (%) for the bf16 original (Qwen2.5-Coder technical report, arXiv 2409.12186), "
        "with its own prompts (its MBPP is EvalPlus's), so it is a landmark, not a target.",
        "",
    ]
    if rl is None:  # written after each eval, so a long run that is stopped keeps what it measured
        return "\n".join([*lines, "## GRPO + LoRA", "", "(not run yet: the report is rewritten when it ends)"])
    lines += [
        f"## GRPO + LoRA on {rl['task']} ({rl['steps']} steps, {rl['prompts']} prompts x G={rl['group']}, "
        f"{rl['max_new_tokens']} new tokens, {rl['lora']}, lr {rl['lr']}, micro-batches of at most "
        f"{rl['micro_batch_tokens']} padded tokens)",
        "",
    ]
    cols = ("train/reward", "train/mixed_group_frac", "train/response_length", "train/grad_norm")
    cols += ("time/rollout_s", "time/verify_s", "time/score_s", "time/update_s", "time/step_s")
    step_rows = [(i + 1, *(f"{c.get(k, float('nan')):.2f}" for k in cols)) for i, c in enumerate(rl["curve"])]
    header = "step | train reward | mixed groups | mean length | grad norm | rollout s | verify s | score s | update s"
    header += " | step s"
    lines += md_table(header, step_rows, "r" * 10)
    done = [c.get("train/tokens", 0.0) for c in rl["curve"]]  # cumulative completion tokens
    tokens = done[-1] if done else 0.0
    rollout = sum(c.get("time/rollout_s", 0.0) for c in rl["curve"])
    update = sum(c.get("time/update_s", 0.0) + c.get("time/score_s", 0.0) for c in rl["curve"])
    lines += [
        "",
        f"Mixed groups: the share of groups whose rewards differ (the only ones GRPO learns from). Over the run the "
        f"rollouts generated {tokens / max(rollout, 1e-9):.1f} completion tokens/s, and scoring and update went "
        f"through {tokens / max(update, 1e-9):.1f} completion tokens/s (with their prompts). "
        f"{'The task was given with --rl_task.' if args.rl_task else PICK} "
        f"Run wall time {rl['wall_s']:.0f} s (model load included). {memory(rl)}{len(rl['curve'])} steps on "
        f"{rl['prompts']} prompts each show what a step costs and that the loop runs on a real checkpoint; they are "
        "far too few to show learning, which is the GPU run's job.",
    ]
    return "\n".join(lines)


def previous(args) -> list[dict]:
    """The evals of an earlier run of this script with the same problems and token limit, read from
    ``--out``'s JSON, so a stopped run resumes (unless ``--fresh``)."""
    path = Path(args.out).with_suffix(".json")
    if args.fresh or not path.exists():
        return []
    data = json.loads(path.read_text())
    same = all(data.get("args", {}).get(k) == getattr(args, k) for k in ("problems", "max_new_tokens"))
    return [e for e in data.get("evals", []) if e["task"] in args.tasks and "per_problem" in e] if same else []


def render(out: str) -> int:
    """Write ``out``'s markdown again from the measurements in its JSON, with this code's report."""
    path = Path(out).with_suffix(".json")
    if not path.exists():
        raise CreditBenchError(f"--render: no measurements at {path}; run the benchmark first")
    data = json.loads(path.read_text())
    write_report(out, report(data["evals"], data["grpo"], data["machine"], argparse.Namespace(**data["args"])), data)
    return 0


def main() -> int:
    p = script_parser(__doc__, "python -m bench.studies.pretrained")
    p.add_argument("--problems", type=int, default=32)
    p.add_argument("--max_new_tokens", type=int, default=512)
    p.add_argument("--tasks", nargs="+", default=list(TASKS), choices=TASKS)
    p.add_argument("--rl_steps", type=int, default=4)
    p.add_argument("--rl_max_new_tokens", type=int, default=512)
    p.add_argument("--rl_prompts", type=int, default=2, help="prompts a step")
    p.add_argument("--rl_group", type=int, default=4, help="completions a prompt (G)")
    p.add_argument("--rl_lr", type=float, default=2e-5)
    p.add_argument("--rl_micro_batch_tokens", type=int, default=2048, help="rl.micro_batch_tokens (0: unsplit)")
    p.add_argument("--rl_task", choices=TASKS, help="default: the evaluated task whose pass@1 is nearest 0.5")
    p.add_argument(
        "--allow_code_execution",
        action="store_true",
        help="run the code tasks' model-written programs in the sandbox (the opt-in of docs/tasks.md)",
    )
    p.add_argument("--out", default="results/benchmarks/pretrained.md")
    p.add_argument("--fresh", action="store_true", help="measure every eval again, not only those --out lacks")
    p.add_argument("--render", action="store_true", help="rewrite --out's markdown from its JSON; measure nothing")
    args = p.parse_args()
    if args.render:
        return render(args.out)
    from bench.core import code_execution_allowed, code_execution_refused
    from bench.models.pretrained import resolve

    code = [t for t in (*args.tasks, args.rl_task) if t in CODE]
    if code and not code_execution_allowed(args.allow_code_execution):  # before any work, not after the evals
        raise CreditBenchError(code_execution_refused(code[0]))
    resolve(MODEL)  # not fetched: one line naming the fetch command, before any work
    if args.rl_steps:  # a bad GRPO setting: one line now, not after the evals
        run_config(args.rl_task or args.tasks[0], args)
    m = machine()
    evals = {e["task"]: e for e in previous(args)}
    with tempfile.TemporaryDirectory() as tmp:
        uri = f"sqlite:///{tmp}/mlflow.db"
        for name in args.tasks:
            if name in evals:
                continue
            measured = base_accuracy(name, args.problems, args.max_new_tokens, uri, args.allow_code_execution)
            evals[name] = {**measured, "load": os.getloadavg()[0]}
            print({k: v for k, v in evals[name].items() if k != "per_problem"}, flush=True)
            done = [evals[t] for t in args.tasks if t in evals]
            data = {"model": MODEL, "machine": m, "evals": done, "grpo": None, "args": vars(args)}
            write_report(args.out, report(done, None, m, args), data)
    done = [evals[t] for t in args.tasks]
    if args.rl_steps == 0:
        return 0
    pick = args.rl_task or min(done, key=lambda e: abs(e["pass_at_1"] - 0.5))["task"]
    rl = grpo_run(pick, args)
    rl["load"] = os.getloadavg()[0]
    print({k: v for k, v in rl.items() if k != "curve"}, flush=True)
    data = {"model": MODEL, "machine": m, "evals": done, "grpo": rl, "args": vars(args)}
    write_report(args.out, report(done, rl, m, args), data)
    return 0


if __name__ == "__main__":
    run_script(main, "python -m bench.studies.pretrained")
