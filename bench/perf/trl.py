"""Benchmark: creditbench's GRPO step against TRL's GRPOTrainer on the same workload, per model size.

    python -m bench.perf.trl [--sizes tiny-500k tiny-2m tiny-8m] [--reps 3] [--steps 5] [--warmup 2]
                              [--threads N] [--device cpu] [--out results/benchmarks]
    python -m bench.perf.trl --sizes Qwen/Qwen3-1.7B --device cuda --prompts 4 \
                              --runs creditbench/matched trl/matched [--shrink ...] [--time-limit 140]

Needs the ``trl`` extra (``pip install -e '.[trl]'``: trl 1.16.0; it is used by nothing but this script).
``--device cuda`` runs all three (creditbench, TRL and the floor) on the GPU and writes ``trl_cuda.md|json``
(each run's peak GPU memory is in the json, ``peak_gpu_mib``; the tables keep the processes' RSS).
A size may also be an architecture of ``bench.models.hub_archs`` (randomly initialised with its full vocabulary,
``--shrink`` overriding config fields; over 100M parameters on ``--device cuda`` only, see
bench.gpu.placement); ``--prompts`` sets the prompts a step (fewer fit a Hub size's fp32 logits and
activations on one GPU) and ``--runs`` the configurations run (default: all, below). After every run the
report is rewritten from the runs done so far, so a script stopped early keeps them; with ``--time-limit``
the run that would end past it is stopped and the script ends there.

The workload, identical in both frameworks: the tiny Qwen3 policy of ``bench.models.policy.build_tiny`` (random
weights; or the Hub architecture, see above), saved once with ``save_pretrained`` and loaded from that
directory by both, arithmetic prompts (the registered ``arithmetic`` task with a 4,096-problem train
split; its ``prompt()`` makes the prompts and its ``verify()`` gives the rewards -- TRL gets a reward
function calling the same ``verify``), 16 prompts (``--prompts``) x G=8 completions per step, up to 32
new tokens at temperature 1 (no top-k/top-p), GRPO
with the group-normalised advantage (std + 1e-4), clip eps 0.2, no KL (beta 0), AdamW (lr 1e-4,
betas (0.9, 0.99), weight decay 0, constant schedule), grad-norm clip 1.0, and one optimizer step
per generation batch (TRL: ``num_iterations=1``, ``per_device_train_batch_size`` = prompts x G,
``gradient_accumulation_steps=1`` and so ``steps_per_generation=1``).

Settings compared:

* **matched**: both in fp32 without gradient checkpointing, with the same loss aggregation:
  creditbench's GRPO aggregates ``seq-mean-token-mean`` (methods/grpo.py: mean over each
  completion's tokens, then over completions), which is TRL's ``loss_type="grpo"``; TRL's optimizer
  is the ``torch.optim.AdamW`` implementation ``RLVRModule`` builds (``adamw_torch``, or
  ``adamw_torch_fused`` when creditbench uses the fused kernel).
* **best / defaults**: creditbench with its best settings (``CREDITBENCH_BEST``: on this CPU they are
  its defaults, fp32 -- see results/benchmarks/trl.md for why not bf16; when they equal the matched
  settings, the matched runs serve both rows) against TRL with its own defaults at the same workload:
  bf16 autocast, gradient checkpointing, ``loss_type="dapo"``, fused AdamW, linear decay, logging
  every 10 steps (the optimizer's lr, betas, weight decay and the grad clip stay as above: they do
  not change the cost).

creditbench runs through its real Lightning module (``RLVRModule`` + ``PromptDataModule``, as in
bench/perf/step.py, with an in-memory logger instead of MLflow); it computes its credit diagnostics
as in every run. Every (framework, setting, repetition) runs in its own subprocess, so the peak
resident memory (``ru_maxrss``) is that configuration's alone; the frameworks alternate within each
repetition. Per run: wall time per RL step (a Lightning callback around ``training_step``; a
``TrainerCallback`` from ``on_step_begin`` to ``on_step_end`` in TRL, which covers generation,
rewards, advantages, the forward/backward, clipping and the optimizer step), median over the
``--steps`` measured steps after ``--warmup`` warm-up steps; completion tokens generated per second
(up to and including eos, summed over the measured steps over their summed time); peak RSS; and the
process's CPU time per step (median), which other work on the machine moves much less (run with
``--threads 1`` on a busy machine: threads that wait on descheduled siblings make 2-thread wall
times erratic there).
The floor is what no RL step can avoid done the plain way, also in its own subprocess: a bare
``generate`` of the same batch plus one forward/backward (plain ``model(...)``, log-probs of the
completion tokens) and an AdamW step over the same tokens, fp32. It computes every row's prompt;
creditbench computes each distinct prompt once per group of G (bench/engine/scoring.py), so its step can
go under the floor. Reported per size: medians over repetitions of each run's median step, and the
ratios creditbench / TRL of step time, tokens/s and peak memory, and step / floor.
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

from bench.gpu.placement import Placement, parse_overrides, place, save_model
from bench.perf import trl_runs
from bench.perf.trl_report import PROG, markdown
from bench.perf.trl_runs import CREDITBENCH_BEST, CREDITBENCH_MATCHED, PROMPTS, SEED, creditbench_adamw
from bench.script import machine, run_script, script_parser, write_outputs

# (framework, setting) in the order each repetition runs them: frameworks alternate.
RUNS = [("creditbench", "matched"), ("trl", "matched"), ("creditbench", "best"), ("trl", "defaults"), ("floor", "fp32")]
MARK = "BENCH_TRL_RESULT "
NOTES = "## What the profile showed"  # trl.md keeps this section (and what follows) across reruns
FIGURES = ("step_s", "cpu_s", "tokens_per_s", "peak_rss_mib")
PAIRS = (("matched", "creditbench/matched", "trl/matched"), ("best", "creditbench/best", "trl/defaults"))


def runs_to_do(requested: list[str] | None = None) -> list[tuple[str, str]]:
    """RUNS (those ``requested`` by their "framework/setting" names), without creditbench's best settings
    when they are its matched ones (those runs serve both)."""
    same = CREDITBENCH_BEST == CREDITBENCH_MATCHED
    wanted = [r for r in RUNS if requested is None or "/".join(r) in requested]
    return [r for r in wanted if not (same and r == ("creditbench", "best"))]


def _worker(spec: dict) -> None:
    import torch

    torch.set_num_threads(spec["threads"])
    trl_runs.PROMPTS = spec.get("prompts", PROMPTS)  # this process's workload: trl_runs reads it from its module
    res = trl_runs.measure(
        spec["framework"],
        spec["setting"],
        spec["model_dir"],
        spec["steps"],
        spec["warmup"],
        spec.get("trl_optim"),
        spec.get("device", "cpu"),
    )
    print(MARK + json.dumps(res), flush=True)


def run_isolated(spec: dict, timeout: float | None = None) -> dict:
    """``measure`` in a fresh Python process (its peak RSS is this run's alone), stopped after ``timeout``
    seconds (subprocess.TimeoutExpired)."""
    env = dict(
        os.environ,
        TOKENIZERS_PARALLELISM="false",
        HF_HUB_OFFLINE="1",
        HF_DATASETS_OFFLINE="1",
        HF_HUB_DISABLE_PROGRESS_BARS="1",
        PYTHONWARNINGS="ignore",
    )
    t0, load0 = time.perf_counter(), os.getloadavg()[0]
    p = subprocess.run(
        [sys.executable, "-m", "bench.perf.trl", "--worker", json.dumps(spec)],
        capture_output=True,
        text=True,
        env=env,
        check=False,
        timeout=timeout,
    )
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith(MARK)]
    if p.returncode or not lines:
        raise RuntimeError(f"run {spec} failed (exit {p.returncode}):\n{p.stderr[-4000:]}")
    res = json.loads(lines[-1][len(MARK) :])
    res["process_s"] = time.perf_counter() - t0
    res["load_average_1min"] = [load0, os.getloadavg()[0]]  # other work on the machine skews the times
    return res


def aggregate_size(size: str, params: int, runs: dict) -> dict:
    """Medians over repetitions of each configuration's figures, and the ratios of the pairs that ran (those
    to the floor None without it)."""
    med = {}
    for key, reps in runs.items():
        med[key] = {k: statistics.median(r[k] for r in reps) for k in FIGURES}
        med[key]["step_s_reps"] = [r["step_s"] for r in reps]
    floor, floor_cpu = (med["floor/fp32"]["step_s"], med["floor/fp32"]["cpu_s"]) if "floor/fp32" in med else [None] * 2
    out = {"size": size, "params": params, "runs": med, "floor_s": floor, "floor_cpu_s": floor_cpu}
    for label, cb, trl in PAIRS:
        if cb not in med or trl not in med:
            continue
        a, b = med[cb], med[trl]
        out[label] = {
            "creditbench_step_s": a["step_s"],
            "trl_step_s": b["step_s"],
            "step_ratio": a["step_s"] / b["step_s"],
            "speedup": b["step_s"] / a["step_s"],
            "tokens_per_s_ratio": a["tokens_per_s"] / b["tokens_per_s"],
            "peak_rss_ratio": a["peak_rss_mib"] / b["peak_rss_mib"],
            "creditbench_over_floor": a["step_s"] / floor if floor else None,
            "trl_over_floor": b["step_s"] / floor if floor else None,
            "cpu_ratio": a["cpu_s"] / b["cpu_s"],
            "creditbench_over_floor_cpu": a["cpu_s"] / floor_cpu if floor_cpu else None,
        }
    return out


def _parser() -> argparse.ArgumentParser:
    ap = script_parser(__doc__, PROG)
    ap.add_argument("--sizes", nargs="+", default=["tiny-500k", "tiny-2m", "tiny-8m"])
    ap.add_argument("--reps", type=int, default=3, help="repetitions (each configuration in a fresh process)")
    ap.add_argument("--steps", type=int, default=5, help="measured RL steps per run")
    ap.add_argument("--warmup", type=int, default=2, help="warm-up RL steps per run (not measured)")
    ap.add_argument("--threads", type=int, default=0, help="torch threads per run (0: min(2, torch's default))")
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--prompts", type=int, default=PROMPTS, help="prompts a step")
    ap.add_argument("--runs", nargs="+", choices=["/".join(r) for r in RUNS], help="the configurations run (all)")
    ap.add_argument("--shrink", nargs="*", default=[], help="config overrides of a Hub size, e.g. num_hidden_layers=2")
    ap.add_argument("--time-limit", type=int, default=0, help="seconds for the whole script (0: none)")
    ap.add_argument("--out", default="results/benchmarks")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    return ap


def _check(a) -> None:
    """trl importable, the device there, every size a tiny size or a known architecture (else one line)."""
    import importlib.util

    import torch

    from bench.errors import CreditBenchError, did_you_mean
    from bench.models.hub_archs import ARCHITECTURES
    from bench.models.policy import TINY_SIZES

    if importlib.util.find_spec("trl") is None:
        raise CreditBenchError("the TRL benchmark needs trl: pip install -e '.[trl]'")
    if a.device == "cuda" and not torch.cuda.is_available():
        raise CreditBenchError("--device cuda: torch sees no CUDA device")
    for size in a.sizes:
        if size not in TINY_SIZES and size not in ARCHITECTURES:
            raise did_you_mean("model size", size, [*TINY_SIZES, *ARCHITECTURES])


class _Report:
    """The report of the runs done so far, rewritten after each (a script stopped early keeps them)."""

    def __init__(self, a, host: dict):
        self.a, self.host, self.results = a, host, []
        self.load_before, self.t_start = os.getloadavg(), time.perf_counter()

    def update(self, size: str, where: Placement, runs: dict[str, list[dict]], stopped: str | None = None) -> None:
        """Put ``size``'s runs so far in the report and write it; ``where``: its placement (the shape that ran);
        ``stopped``: why the script ends early."""
        runs = dict(runs)
        if "creditbench/best" not in runs and {"creditbench/matched", "trl/defaults"} <= set(runs):  # the same runs
            runs["creditbench/best"] = runs["creditbench/matched"]
        self.results = [r for r in self.results if r["size"] != size]
        self.results.append({**aggregate_size(size, where.params, runs), "shape": where.overrides, "raw": runs})
        self.write(stopped)

    def write(self, stopped: str | None) -> None:
        a, host, results = self.a, self.host, self.results
        wall = time.perf_counter() - self.t_start
        load_after = os.getloadavg()
        peak = max(x for r in results for reps in r["raw"].values() for run in reps for x in run["load_average_1min"])
        md = markdown(results, host, a, (self.load_before[0], load_after[0], peak), wall)
        if stopped:
            md += f"\nThe script ended early ({stopped}): these are the runs it finished.\n"
        stem = "trl" if a.device == "cpu" else f"trl_{a.device}"
        notes = Path(a.out) / f"{stem}.md"
        if notes.exists():  # keep the hand-written analysis that follows the measured tables
            old = notes.read_text()
            if NOTES in old:
                md += "\n" + old[old.index(NOTES) :]
        data = {"machine": host, "args": {k: v for k, v in vars(a).items() if k != "worker"}}
        data.update(creditbench_best=CREDITBENCH_BEST, load_average=[self.load_before, load_after], wall_s=wall)
        write_outputs(a.out, stem, md, {**data, "stopped": stopped, "results": results})


def _measure_size(size: str, a, model_dir: str, where: Placement, report: _Report, deadline: float | None):
    """Every repetition of every configuration on ``size``, each in its own process, the report rewritten
    after each: why it stopped before the end (the time limit), or None."""
    runs: dict[str, list[dict]] = {}
    for rep in range(a.reps):
        for framework, setting in runs_to_do(a.runs):
            spec = {"framework": framework, "setting": setting, "model_dir": model_dir, "steps": a.steps}
            spec.update(warmup=a.warmup, threads=a.threads, trl_optim=a.optim, device=a.device, prompts=a.prompts)
            try:
                res = run_isolated(spec, None if deadline is None else max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                stopped = f"time limit {a.time_limit} s reached at {size} repetition {rep} {framework}/{setting}"
                if runs:
                    report.update(size, where, runs, stopped)
                return stopped
            runs.setdefault(f"{framework}/{setting}", []).append(res)
            figures = {k: round(res[k], 4) for k in (*FIGURES, "process_s")}
            line = {"size": size, "rep": rep, "run": f"{framework}/{setting}", **figures}
            print(json.dumps({**line, "load": res["load_average_1min"]}), flush=True)
            report.update(size, where, runs)
    return None


def main(argv: list[str] | None = None) -> int:
    """Each size's model saved once, then its runs (see the module docstring); the report after each run."""
    t_start = time.monotonic()
    a = _parser().parse_args(argv)
    if a.worker:
        _worker(json.loads(a.worker))
        return 0
    import torch

    _check(a)
    a.threads = a.threads or min(2, torch.get_num_threads())
    host = machine(a.threads, packages=("transformers", "trl"))
    host["creditbench_adamw"] = a.optim = creditbench_adamw()  # TRL's matched setting runs the same AdamW code
    report = _Report(a, host)
    deadline = t_start + a.time_limit - 5 if a.time_limit else None  # 5 s to write the report
    stopped = None
    with tempfile.TemporaryDirectory() as tmp:
        for size in a.sizes:
            where = place(size, a.device, parse_overrides(a.shrink))
            model_dir = str(save_model(size, where, Path(tmp) / size.replace("/", "--"), seed=SEED))
            stopped = _measure_size(size, a, model_dir, where, report, deadline)
            if stopped:
                print(f"{PROG}: {stopped}", file=sys.stderr)
                break
    return 3 if stopped else 0


if __name__ == "__main__":
    run_script(main, PROG)
