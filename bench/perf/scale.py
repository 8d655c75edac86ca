"""Throughput and memory of real RL steps at a Hub model's size, without downloading it.

    python -m bench.perf.scale --model Qwen/Qwen3-1.7B --engines hf vllm --steps 4 [--time-limit 140]
    python -m bench.perf.scale --model Qwen/Qwen3-1.7B --device cpu \
        --shrink num_hidden_layers=1 hidden_size=64 num_attention_heads=2 num_key_value_heads=1  # a smoke run

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

A model over 100M parameters runs on ``--device cuda`` only (bench.gpu.placement: its forwards on the CPU
would take minutes; GPU_CHECK_DEVICE=cpu swaps in a smoke shape). The run evaluates and searches its credit
probe on one problem (a random model's rewards never mix, so the probe would sample every eval problem in
vain) and saves no checkpoint or policy. With ``--time-limit`` an engine's run that is still going when the
time is up is stopped and reported from the steps it finished (its row says so): the run rewrites what it
has measured (the steps MLflow holds, the peak memory) every few seconds.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from bench.atomic import write_atomic
from bench.gpu.placement import parse_overrides, place, save_model
from bench.script import machine, machine_line, md_table, run_script, script_parser, write_report

PROG = "python -m bench.perf.scale"
STEP_KEYS = ("time/rollout_s", "time/score_s", "time/update_s", "time/sync_s", "time/step_s", "train/tokens")
STEP_KEYS += ("train/response_length",)
MISMATCH_KEYS = ("rollout/logprob_abs_diff_mean", "rollout/prob_ratio_max")

# Dense bf16 tensor-core peaks (TFLOP/s, without sparsity) by GPU name, the first match counting: the MFU's
# denominator.
PEAK_BF16_TFLOPS = {"H100 PCIe": 756.0, "H100 NVL": 835.0, "H100": 989.0, "H200": 989.0, "GH200": 989.0, "A100": 312.0}


def peak_tflops(gpu_name: str | None) -> float | None:
    """The dense bf16 peak of the GPU named ``gpu_name`` (None when unknown)."""
    return next((v for k, v in PEAK_BF16_TFLOPS.items() if gpu_name and k in gpu_name), None)


def _memory_plan(cfg, gpu_gb: float) -> dict:
    """bench.run.plan's estimate for ``cfg`` (its parameter count and memory per process)."""
    from bench.run.plan import memory_plan

    try:
        p = memory_plan(cfg, gpu_gb=gpu_gb, load_data=False)
    except Exception as e:  # an estimate that cannot be made does not stop the measurement
        return {"params": None, "plan_gb": None, "plan": f"no estimate: {type(e).__name__}: {e}"}
    return {"params": p.params, "plan_gb": p.total_gb, "plan": p.line()}


def _config(args: argparse.Namespace):
    """The child's run: GRPO on arithmetic from the saved random checkpoint, sized by ``args``."""
    from bench.config import RunConfig

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
    # one eval problem: the credit map searches the eval problems for mixed rewards, which a random model never has
    cfg.eval.every, cfg.eval.n, cfg.eval.k, cfg.eval.num_problems = 10**6, 1, [1], 1
    cfg.eval.sampling = type(cfg.eval.sampling)(max_new_tokens=8)
    cfg.checkpoint.every, cfg.checkpoint.policy = 0, False  # a Hub-sized save would cost more than the steps
    cfg.tracking.uri, cfg.tracking.experiment = args.uri, "creditbench-bench-scale"
    cfg.tracking.run_name = f"{args.engine}-{Path(args.model).name}"
    return cfg


def _measured(uri: str, run_name: str, fixed: dict) -> dict:
    """What the run ``run_name`` has measured so far: its per-step series from MLflow and the process's peak
    GPU memory, with ``fixed`` (the engine, the plan's estimate)."""
    import mlflow
    import torch

    client = mlflow.MlflowClient(uri)
    exp = client.get_experiment_by_name("creditbench-bench-scale")
    runs = client.search_runs([exp.experiment_id], f"attributes.run_name = '{run_name}'") if exp else []

    def series(key: str) -> list[float]:
        history = client.get_metric_history(runs[0].info.run_id, key) if runs else []
        return [m.value for m in sorted(history, key=lambda m: m.step)]

    cuda = torch.cuda.is_available()
    return {
        **fixed,
        "steps": {k: series(k) for k in STEP_KEYS},
        "mismatch": {k: series(k) for k in MISMATCH_KEYS},
        "peak_gpu_gb": torch.cuda.max_memory_allocated() / 1e9 if cuda else None,
        "peak_gpu_reserved_gb": torch.cuda.max_memory_reserved() / 1e9 if cuda else None,
    }


def _keep_writing(path: Path, measure, every_s: float = 5.0) -> threading.Event:
    """Rewrite ``path`` with ``measure()``'s JSON every ``every_s`` seconds until the returned event is set
    (the parent reads it when the run does not finish)."""
    stop = threading.Event()

    def loop():
        while not stop.wait(every_s):
            try:
                write_atomic(path, json.dumps(measure()))
            except Exception:  # noqa: BLE001 - a busy store: the next round writes it
                continue

    threading.Thread(target=loop, daemon=True).start()
    return stop


def _one(args: argparse.Namespace) -> None:
    """Child process: one engine's run; prints one JSON line (and keeps ``args.live`` up to date meanwhile)."""
    import torch

    from bench.run.train import run

    cfg = _config(args)
    gpu = torch.cuda.get_device_properties(0) if torch.cuda.is_available() else None
    fixed = {
        "engine": args.engine,
        "peak_tflops": peak_tflops(gpu.name if gpu else None),
        **_memory_plan(cfg, gpu.total_memory / 1e9 if gpu else 80.0),
    }
    if gpu:
        torch.cuda.reset_peak_memory_stats()
    stop = _keep_writing(Path(args.live), lambda: _measured(args.uri, cfg.tracking.run_name, fixed))
    run(cfg, progress=False)
    stop.set()
    print("RESULT " + json.dumps(_measured(args.uri, cfg.tracking.run_name, fixed)), flush=True)


def summarize(res: dict, stopped: str | None = None) -> dict:
    """Medians over the steps after the first (warm-up); ``stopped``: why the run ended before its last step."""
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
        "stopped": stopped,
        "steps_done": len(s["time/step_s"]),
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
            r["engine"] + (f" ({r['stopped']})" if r.get("stopped") else ""),
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
    init = f"random init, {' '.join(args.shrink)}" if args.shrink else "random init"
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


def _engine_run(engine: str, args: argparse.Namespace, argv: list[str], tmp: Path, deadline: float | None):
    """One engine's run in its own process (so that one's memory does not count against the other): its
    summary; when it ran out of time or failed, the summary of the steps it finished (None if none)."""
    live = tmp / f"{engine}.live.json"
    cmd = [sys.executable, "-m", "bench.perf.scale", *argv, "--engine", engine, "--checkpoint", str(tmp / "model")]
    cmd += ["--uri", f"sqlite:///{tmp / 'mlflow.db'}", "--live", str(live)]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "CREDITBENCH_CACHE": str(tmp / "cache")}
    left = None if deadline is None else max(1.0, deadline - time.monotonic())
    try:  # its stderr shows as it runs
        proc = subprocess.run(cmd, stdout=subprocess.PIPE, text=True, env=env, timeout=left)
        line = next((x for x in proc.stdout.splitlines() if x.startswith("RESULT ")), None)
        if proc.returncode == 0 and line is not None:
            return summarize(json.loads(line[len("RESULT ") :]))
        stopped = f"failed (exit {proc.returncode}; its output is above)"
    except subprocess.TimeoutExpired:
        stopped = f"stopped at the time limit ({args.time_limit} s)"
    res = json.loads(live.read_text()) if live.exists() else None
    done = len(res["steps"]["time/step_s"]) if res else 0
    print(f"{engine}: {stopped}, after {done} of {args.steps} steps", file=sys.stderr)
    if done and done >= args.steps:  # every step measured; it was stopped in its teardown: the row is whole
        return summarize(res)
    return summarize(res, stopped=f"{stopped} after {done} of {args.steps} steps") if done else None


def main(argv: list[str] | None = None) -> int:
    """Save the random checkpoint, run each engine in its own process, write the report."""
    t_start = time.monotonic()
    ap = script_parser(__doc__, PROG)
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
    ap.add_argument("--time-limit", type=int, default=0, help="seconds for the whole script (0: none); see above")
    ap.add_argument("--out", default="results/benchmarks/scale.md")
    for hidden in ("--engine", "--checkpoint", "--uri", "--live"):  # the child's
        ap.add_argument(hidden, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.engine:
        _one(args)
        return 0

    where = place(args.model, args.device, parse_overrides(args.shrink))
    deadline = t_start + args.time_limit - 5 if args.time_limit else None  # 5 s to write the report
    rows = []
    with tempfile.TemporaryDirectory(prefix="creditbench-scale-") as tmp:
        t = time.perf_counter()
        save_model(args.model, where, Path(tmp) / "model", max_positions=4096)
        print(f"random {args.model} ({where.params:,} parameters) saved in {time.perf_counter() - t:.0f} s", flush=True)
        for engine in args.engines:
            row = _engine_run(engine, args, sys.argv[1:] if argv is None else argv, Path(tmp), deadline)
            if row is not None:
                rows.append(row)
                print(json.dumps(rows[-1]), flush=True)
    if not rows:
        return 1
    args.shrink = [f"{k}={v}" for k, v in where.overrides.items()]  # the shape that ran
    host = machine_line(machine())
    text = markdown(rows, args, host)
    write_report(args.out, text, {"machine": host, "args": vars(args), "rows": rows})
    print(text)
    return 0 if all(r["stopped"] is None for r in rows) else 3


if __name__ == "__main__":
    run_script(main, PROG)
