"""Throughput and memory of real RL steps at a Hub model's size, without downloading it.

    python -m bench.perf.scale --model Qwen/Qwen3-1.7B --engines hf vllm --steps 4
    python -m bench.perf.scale --model Qwen/Qwen3-1.7B --shrink num_hidden_layers=2 --device cpu  # a smoke run

A randomly initialised model of the architecture (bench.models.hub_archs, full vocabulary) is saved once
and trained with ``creditbench train`` for a few GRPO steps per engine, each engine in its own
process (so one's memory does not count against the other), in bf16 autocast with fp32 master
weights as the paper configs train. A random model never emits its end token, so every completion
runs to ``--new-tokens``: the step's work is fixed and comparable across engines.

Reported per engine: rollout throughput (generated tokens/s during the rollout phase), update
throughput (completion tokens trained on per second of scoring + update: forward, backward, step),
the weight-sync time (vLLM), the whole step time, and peak GPU memory (torch's allocator: the
trainer, HF generation's KV cache and vLLM's weights and KV cache, which allocate through torch).
The first step is a warm-up and is left out of the medians. Beside them: the update's model FLOPs
utilisation (6 x parameters x completion tokens per second of the update phase, over the GPU's dense bf16
peak: prompt tokens and activation recomputation are not counted, so it is a lower bound) and the memory
that bench.run.plan estimates for the run (which leaves out HF generation's KV cache).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.perf.common import machine, machine_line, md_table, perf_parser, write_report

# Dense bf16 tensor-core peaks (TFLOP/s, without sparsity) by GPU name, the first match counting: the MFU's
# denominator.
PEAK_BF16_TFLOPS = {"H100 PCIe": 756.0, "H100 NVL": 835.0, "H100": 989.0, "H200": 989.0, "GH200": 989.0, "A100": 312.0}


def peak_tflops(gpu_name: str | None) -> float | None:
    """The dense bf16 peak of the GPU named ``gpu_name`` (None when unknown)."""
    return next((v for k, v in PEAK_BF16_TFLOPS.items() if gpu_name and k in gpu_name), None)


def _plan(cfg, gpu_gb: float) -> dict:
    """bench.run.plan's estimate for ``cfg`` (its parameter count and memory per process)."""
    from bench.run.plan import plan

    try:
        p = plan(cfg, gpu_gb=gpu_gb, load_data=False)
    except Exception as e:  # an estimate that cannot be made does not stop the measurement
        return {"params": None, "plan_gb": None, "plan": f"no estimate: {type(e).__name__}: {e}"}
    return {"params": p.params, "plan_gb": p.total_gb, "plan": p.line()}


def _parse_shrink(items: list[str]) -> dict:
    out = {}
    for item in items:
        key, _, value = item.partition("=")
        out[key] = int(value) if value.lstrip("-").isdigit() else float(value)
    return out


def _one(args: argparse.Namespace) -> None:
    """Child process: one engine's run; prints one JSON line."""
    import mlflow
    import torch

    from bench.config import RunConfig
    from bench.run.train import run

    cfg = RunConfig()
    cfg.model.name, cfg.model.dtype = args.checkpoint, "float32"
    cfg.model.gradient_checkpointing = args.gradient_checkpointing
    cfg.precision = args.precision
    cfg.trainer.accelerator = "gpu" if args.device == "cuda" else "cpu"
    cfg.rollout.engine = args.engine
    cfg.rollout.gpu_memory_utilization = args.gpu_memory_utilization
    cfg.rollout.max_model_len = args.new_tokens + 256  # the arithmetic prompts are < 200 tokens
    cfg.rl.steps, cfg.rl.prompts_per_step, cfg.rl.group_size = args.steps, args.prompts, args.group_size
    cfg.rl.minibatches = args.minibatches
    cfg.rl.lr = 1e-6
    cfg.rl.sampling = type(cfg.rl.sampling)(max_new_tokens=args.new_tokens)
    cfg.eval.every, cfg.eval.n, cfg.eval.k, cfg.eval.num_problems = 10**6, 1, [1], args.prompts
    cfg.eval.sampling = type(cfg.eval.sampling)(max_new_tokens=8)
    cfg.tracking.uri, cfg.tracking.experiment = args.uri, "creditbench-bench-scale"
    cfg.tracking.run_name = f"{args.engine}-{Path(args.model).name}"
    gpu = torch.cuda.get_device_properties(0) if torch.cuda.is_available() else None
    estimate = _plan(cfg, gpu.total_memory / 1e9 if gpu else 80.0)
    if gpu:
        torch.cuda.reset_peak_memory_stats()
    result = run(cfg, progress=False)
    client = mlflow.MlflowClient(args.uri)

    def series(key: str) -> list[float]:
        return [m.value for m in sorted(client.get_metric_history(result["mlflow_run_id"], key), key=lambda m: m.step)]

    steps = {
        k: series(k)
        for k in (
            "time/rollout_s",
            "time/score_s",
            "time/update_s",
            "time/sync_s",
            "time/step_s",
            "train/tokens",
            "train/response_length",
        )
    }
    print(
        "RESULT "
        + json.dumps(
            {
                "engine": args.engine,
                "steps": steps,
                "peak_gpu_gb": torch.cuda.max_memory_allocated() / 1e9 if torch.cuda.is_available() else None,
                "peak_gpu_reserved_gb": torch.cuda.max_memory_reserved() / 1e9 if torch.cuda.is_available() else None,
                "mismatch": {k: series(k) for k in ("rollout/logprob_abs_diff_mean", "rollout/prob_ratio_max")},
                "peak_tflops": peak_tflops(gpu.name if gpu else None),
                **estimate,
            }
        ),
        flush=True,
    )


def summarize(res: dict) -> dict:
    """Medians over the steps after the first (warm-up)."""
    s = res["steps"]
    tokens = s["train/tokens"]
    per_step = [b - a for a, b in zip([0.0] + tokens[:-1], tokens)]
    keep = slice(1, None) if len(per_step) > 1 else slice(None)

    def med(xs):
        xs = xs[keep]
        return statistics.median(xs) if xs else float("nan")

    gen = med(per_step)
    rollout, score, update = med(s["time/rollout_s"]), med(s["time/score_s"]), med(s["time/update_s"])
    diff, ratio = res["mismatch"]["rollout/logprob_abs_diff_mean"], res["mismatch"]["rollout/prob_ratio_max"]
    params, peak = res.get("params"), res.get("peak_tflops")
    mfu = 6 * params * gen / update / (peak * 1e12) if params and peak and update else None
    return {
        "engine": res["engine"],
        "gen_tokens_per_step": gen,
        "rollout_s": rollout,
        "rollout_tok_s": gen / rollout if rollout else float("nan"),
        "update_s": score + update,
        "update_tok_s": gen / (score + update) if score + update else float("nan"),
        "sync_s": med(s["time/sync_s"]) if s["time/sync_s"] else 0.0,
        "step_s": med(s["time/step_s"]),
        "peak_gpu_gb": res["peak_gpu_gb"],
        "peak_gpu_reserved_gb": res["peak_gpu_reserved_gb"],
        "update_mfu": mfu,
        "params": params,
        "plan_gb": res.get("plan_gb"),
        "plan": res.get("plan"),
        "logprob_abs_diff_mean": med(diff) if diff else None,
        "prob_ratio_max": max(ratio) if ratio else None,
    }


def markdown(rows: list[dict], args: argparse.Namespace, host: str) -> str:
    def f(x, fmt):
        return "–" if x is None or x != x else format(x, fmt)

    header = (
        "engine | rollout tok/s | rollout s | update tok/s | update s | update MFU | sync s | step s | "
        "peak GPU GB (alloc / reserved) | plan GB | mean abs logprob diff (vLLM vs trainer) | max prob ratio"
    )
    table = [
        [
            r["engine"],
            f(r["rollout_tok_s"], ",.0f"),
            f(r["rollout_s"], ".2f"),
            f(r["update_tok_s"], ",.0f"),
            f(r["update_s"], ".2f"),
            f(r.get("update_mfu"), ".1%"),
            f(r["sync_s"], ".2f"),
            f(r["step_s"], ".2f"),
            f"{f(r['peak_gpu_gb'], '.1f')} / {f(r['peak_gpu_reserved_gb'], '.1f')}",
            f(r.get("plan_gb"), ".1f"),
            f(r["logprob_abs_diff_mean"], ".4f"),
            f(r["prob_ratio_max"], ".3f"),
        ]
        for r in rows
    ]
    init = f"random init, {args.shrink}" if args.shrink else "random init"
    lines = [
        f"# RL step throughput at {args.model} size ({init})",
        "",
        f"Machine: {host}. {args.prompts} prompts x G={args.group_size}, {args.new_tokens} new tokens "
        f"(every completion runs to the budget), {args.minibatches} minibatch(es), precision {args.precision}, "
        f"fp32 master weights, activation checkpointing {'on' if args.gradient_checkpointing else 'off'}; "
        f"median of steps 2..{args.steps}.",
        "",
        *md_table(header, table),
        "",
        *(f"Plan ({r['engine']}): {r['plan']}" for r in rows if r.get("plan")),
    ]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = perf_parser(__doc__, "python -m bench.perf.scale")
    ap.add_argument("--model", default="Qwen/Qwen3-1.7B", help="an architecture of bench.models.hub_archs")
    ap.add_argument("--engines", nargs="+", default=["hf", "vllm"], choices=["hf", "vllm"])
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--prompts", type=int, default=16)
    ap.add_argument("--group-size", type=int, default=8)
    ap.add_argument("--new-tokens", type=int, default=1024)
    ap.add_argument("--minibatches", type=int, default=4)
    ap.add_argument("--precision", default="bf16-mixed", choices=["32-true", "bf16-mixed", "bf16-true"])
    ap.add_argument("--gradient-checkpointing", action=argparse.BooleanOptionalAction, default=True)
    ap.add_argument("--gpu-memory-utilization", type=float, default=0.3)
    ap.add_argument("--shrink", nargs="*", default=[], help="config overrides, e.g. num_hidden_layers=2 (smoke runs)")
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    ap.add_argument("--out", default="results/benchmarks/scale.md")
    ap.add_argument("--engine", help=argparse.SUPPRESS)
    ap.add_argument("--checkpoint", help=argparse.SUPPRESS)
    ap.add_argument("--uri", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.engine:  # the child
        _one(args)
        return 0

    from bench.models.hub_archs import random_checkpoint

    with tempfile.TemporaryDirectory(prefix="creditbench-scale-") as tmp:
        ckpt = Path(tmp) / "model"
        t = time.perf_counter()
        random_checkpoint(args.model, ckpt, dtype="float32", max_positions=4096, **_parse_shrink(args.shrink))
        print(f"random {args.model} saved in {time.perf_counter() - t:.0f} s", flush=True)
        uri = f"sqlite:///{Path(tmp) / 'mlflow.db'}"
        rows = []
        for engine in args.engines:
            cmd = [
                sys.executable,
                "-m",
                "bench.perf.scale",
                *(sys.argv[1:] if argv is None else argv),
                "--engine",
                engine,
                "--checkpoint",
                str(ckpt),
                "--uri",
                uri,
            ]
            env = {**os.environ, "HF_HUB_OFFLINE": "1", "CREDITBENCH_CACHE": str(Path(tmp) / "cache")}
            proc = subprocess.run(cmd, stdout=subprocess.PIPE, text=True, env=env)  # its stderr shows as it runs
            line = next((x for x in proc.stdout.splitlines() if x.startswith("RESULT ")), None)
            if proc.returncode != 0 or line is None:
                print(f"{engine}: failed (exit {proc.returncode}; its output is above)", file=sys.stderr)
                continue
            rows.append(summarize(json.loads(line[7:])))
            print(json.dumps(rows[-1]), flush=True)
    if not rows:
        return 1
    host = machine_line(machine())
    text = markdown(rows, args, host)
    write_report(args.out, text, {"machine": host, "args": vars(args), "rows": rows})
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
