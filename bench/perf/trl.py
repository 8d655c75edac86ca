"""Benchmark: creditbench's GRPO step against TRL's GRPOTrainer on the same workload, per tiny size.

    python -m bench.perf.trl [--sizes tiny-500k tiny-2m tiny-8m] [--reps 3] [--steps 5] [--warmup 2]
                              [--threads N] [--out results/benchmarks]

Needs the ``trl`` extra (``pip install -e '.[trl]'``: trl 1.16.0; it is used by nothing but this script).

The workload, identical in both frameworks: the tiny Qwen3 policy of ``bench.engine.policy.build_tiny`` (random
weights, saved once with ``save_pretrained`` and loaded from that directory by both), arithmetic prompts
(the registered ``arithmetic`` task with a 4,096-problem train split; its ``prompt()`` makes the prompts
and its ``verify()`` gives the rewards -- TRL gets a reward function calling the same ``verify``),
16 prompts x G=8 completions per step, up to 32 new tokens at temperature 1 (no top-k/top-p), GRPO
with the group-normalised advantage (std + 1e-4), clip eps 0.2, no KL (beta 0), AdamW (lr 1e-4,
betas (0.9, 0.99), weight decay 0, constant schedule), grad-norm clip 1.0, and one optimizer step
per generation batch (TRL: ``num_iterations=1``, ``per_device_train_batch_size=128``,
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
creditbench computes each distinct prompt once per group of G (bench/engine/policy.py), so its step can
go under the floor. Reported per size: medians over repetitions of each run's median step, and the
ratios creditbench / TRL of step time, tokens/s and peak memory, and step / floor.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PROMPTS, G, MAX_NEW, LR, BETAS, WD, CLIP, SEED = 16, 8, 32, 1e-4, (0.9, 0.99), 0.0, 1.0, 0
TRAIN_SIZE = 4096  # arithmetic train problems: plenty for 16 x (warm-up + measured) steps, and quick to build
# creditbench's fastest settings on this CPU (measured, see trl.md): its defaults. bf16-mixed is slower here
# (no avx512_bf16/amx: autocast emulates bf16 matmuls), and gradient checkpointing only costs compute.
CREDITBENCH_BEST = {"precision": "32-true", "gradient_checkpointing": False}
CREDITBENCH_MATCHED = {"precision": "32-true", "gradient_checkpointing": False}
# (framework, setting) in the order each repetition runs them: frameworks alternate.
RUNS = [("creditbench", "matched"), ("trl", "matched"), ("creditbench", "best"), ("trl", "defaults"),
        ("floor", "fp32")]
MARK = "BENCH_TRL_RESULT "
NOTES = "## What the profile showed"  # trl.md keeps this section (and what follows) across reruns


def runs_to_do() -> list[tuple[str, str]]:
    """RUNS, without creditbench's best settings when they are its matched ones (those runs serve both)."""
    same = CREDITBENCH_BEST == CREDITBENCH_MATCHED
    return [r for r in RUNS if not (same and r == ("creditbench", "best"))]


def _task():
    from bench.registry import TASKS

    task_cls = TASKS.get("arithmetic")
    return task_cls(task_cls.Config(train_size=TRAIN_SIZE))


def _peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB


def _summary(times: list[float], tokens: list[int], cpu: list[float], warmup: int) -> dict:
    t, n = times[warmup:], tokens[warmup:]
    return {"step_s": statistics.median(t), "tokens_per_s": sum(n) / sum(t), "tokens_per_step": sum(n) / len(n),
            "cpu_s": statistics.median(cpu[warmup:]), "step_times_s": times, "step_tokens": tokens,
            "step_cpu_s": cpu, "peak_rss_mib": _peak_rss_mib()}


# ---------------------------------------------------------------------------------------- creditbench
def measure_creditbench(model_dir: str, steps: int, warmup: int, settings: dict | None = None) -> dict:
    """creditbench's GRPO (beta 0) through RLVRModule for warmup + steps RL steps."""
    import lightning as L
    import torch

    from bench.perf.step import MemoryLogger
    from bench.config import EvalConfig, RLConfig
    from bench.engine.module import PromptDataModule, RLVRModule
    from bench.engine.policy import enable_gradient_checkpointing, load_policy
    from bench.registry import METHODS
    from bench.config import SamplingConfig

    settings = settings or CREDITBENCH_MATCHED
    total = warmup + steps
    task = _task()
    method_cls = METHODS.get("grpo")
    method = method_cls(method_cls.Config(kl_coef=0.0))
    L.seed_everything(SEED, verbose=False)
    model, tok = load_policy(model_dir)
    if settings.get("gradient_checkpointing"):
        enable_gradient_checkpointing(model)
    rl = RLConfig(steps=total, prompts_per_step=PROMPTS, group_size=G, lr=LR, betas=BETAS, weight_decay=WD,
                  grad_clip=CLIP, sampling=SamplingConfig(temperature=1.0, max_new_tokens=MAX_NEW))
    module = RLVRModule(model, tok, method, task, "arithmetic", rl, EvalConfig(every=10**6))
    times: list[float] = []
    tokens: list[int] = []
    cpu: list[float] = []

    class Clock(L.Callback):
        def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
            self.t0, self.c0, self.n0 = time.perf_counter(), time.process_time(), pl_module.tokens

        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
            times.append(time.perf_counter() - self.t0)
            cpu.append(time.process_time() - self.c0)
            tokens.append(pl_module.tokens - self.n0)

    logger = MemoryLogger()
    trainer = L.Trainer(accelerator="cpu", devices=1, max_steps=total, logger=logger, callbacks=[Clock()],
                        precision=settings.get("precision", "32-true"), enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False, num_sanity_val_steps=0,
                        limit_val_batches=0)
    trainer.fit(module, datamodule=PromptDataModule(task, PROMPTS, EvalConfig(), SEED))
    out = _summary(times, tokens, cpu, warmup)
    rows = [r for r in logger.rows if "time/step_s" in r][warmup:]
    out["breakdown_s"] = {k: statistics.median(r[k] for r in rows) for k in
                          ("time/rollout_s", "time/verify_s", "time/score_s", "time/update_s", "time/step_s")}
    out["torch_threads"] = torch.get_num_threads()
    return out


# ---------------------------------------------------------------------------------------- TRL
def creditbench_adamw() -> str:
    """TRL's name for the AdamW implementation ``RLVRModule`` builds (the fused kernel or the per-tensor
    loop), so that the matched setting runs the same optimizer code on both sides."""
    from bench.config import EvalConfig, RLConfig
    from bench.engine.module import RLVRModule
    from bench.engine.policy import build_tiny
    from bench.registry import METHODS

    model, tok = build_tiny("tiny-500k")
    grpo = METHODS.get("grpo")
    module = RLVRModule(model, tok, grpo(grpo.Config(kl_coef=0.0)), _task(), "arithmetic",
                        RLConfig(steps=1, lr=LR, betas=BETAS, weight_decay=WD), EvalConfig())
    opt = module.configure_optimizers()[0][0]
    return "adamw_torch_fused" if opt.defaults.get("fused") else "adamw_torch"


def trl_args(setting: str, steps: int, out_dir: str, optim: str = "adamw_torch"):
    """GRPOConfig of ``setting``: "matched" (fp32, no checkpointing, loss_type grpo, ``optim`` -- creditbench's
    AdamW implementation --, constant lr) or "defaults" (TRL's own defaults at the same workload)."""
    from trl import GRPOConfig

    workload = {
        "output_dir": out_dir, "max_steps": steps, "per_device_train_batch_size": PROMPTS * G,
        "gradient_accumulation_steps": 1, "num_generations": G, "max_completion_length": MAX_NEW, "num_iterations": 1,
        "beta": 0.0, "temperature": 1.0, "learning_rate": LR, "adam_beta1": BETAS[0], "adam_beta2": BETAS[1],
        "weight_decay": WD, "max_grad_norm": CLIP, "use_cpu": True, "report_to": "none", "save_strategy": "no",
        "seed": SEED, "disable_tqdm": True, "dataloader_num_workers": 0,
    }
    if setting == "matched":
        return GRPOConfig(**workload, bf16=False, gradient_checkpointing=False, loss_type="grpo",
                          scale_rewards="group", epsilon=0.2, optim=optim, lr_scheduler_type="constant",
                          model_init_kwargs={"dtype": "float32"})
    if setting == "defaults":
        return GRPOConfig(**workload)
    raise ValueError(f"unknown TRL setting {setting!r}")


def measure_trl(model_dir: str, steps: int, warmup: int, setting: str = "matched", optim: str | None = None) -> dict:
    """TRL's GRPOTrainer for warmup + steps optimizer steps (one generation batch each). ``optim``: the
    matched setting's AdamW implementation (default: creditbench's, see ``creditbench_adamw``)."""
    import torch
    from transformers import AutoTokenizer, TrainerCallback
    from trl import GRPOTrainer

    total = warmup + steps
    task = _task()
    rows = task.load("train").select(range(PROMPTS * (total + 2)))
    columns = rows.column_names
    data = rows.map(lambda r: {"prompt": task.prompt(r)})
    counted: list[int] = []

    def reward(prompts, completions, completion_ids, **kw):
        counted.append(sum(len(c) for c in completion_ids))
        problems = [{c: kw[c][i] for c in columns} for i in range(len(completions))]
        return [o.reward for o in task.verify(completions, problems, details=False)]

    times: list[float] = []
    tokens: list[int] = []
    cpu: list[float] = []

    class Clock(TrainerCallback):
        def on_step_begin(self, args, state, control, **kw):
            self.t0, self.c0, self.n0 = time.perf_counter(), time.process_time(), len(counted)

        def on_step_end(self, args, state, control, **kw):
            times.append(time.perf_counter() - self.t0)
            cpu.append(time.process_time() - self.c0)
            tokens.append(sum(counted[self.n0:]))

    tok = AutoTokenizer.from_pretrained(model_dir)
    tok.padding_side = "left"
    with tempfile.TemporaryDirectory() as out_dir:
        args = trl_args(setting, total, out_dir, optim or (creditbench_adamw() if setting == "matched" else "adamw_torch"))
        trainer = GRPOTrainer(model=model_dir, reward_funcs=reward, args=args,
                              train_dataset=data, processing_class=tok, callbacks=[Clock()])
        trainer.train()
    out = _summary(times, tokens, cpu, warmup)
    out["torch_threads"] = torch.get_num_threads()
    out["trl_loss_type"] = trainer.args.loss_type
    out["trl_bf16"] = bool(trainer.args.bf16)
    out["trl_optim"] = str(getattr(trainer.args.optim, "value", trainer.args.optim))
    return out


# ---------------------------------------------------------------------------------------- floor
def measure_floor(model_dir: str, steps: int, warmup: int) -> dict:
    """Bare generate of the batch + one forward/backward + AdamW step over the same tokens (fp32)."""
    import torch

    from bench.engine.policy import load_policy

    task = _task()
    rows = task.load("eval")
    model, tok = load_policy(model_dir)
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=LR, betas=BETAS, weight_decay=WD)
    torch.manual_seed(SEED)
    times, tokens, cpu = [], [], []
    for i in range(warmup + steps):
        prompts = [task.prompt(rows[(PROMPTS * i + j) % len(rows)]) for j in range(PROMPTS)]
        t0, c0 = time.perf_counter(), time.process_time()
        enc = tok(prompts, return_tensors="pt", padding=True, add_special_tokens=False)
        ids, mask = enc["input_ids"].repeat_interleave(G, 0), enc["attention_mask"].repeat_interleave(G, 0)
        with torch.no_grad():
            seq = model.generate(input_ids=ids, attention_mask=mask, do_sample=True, top_k=0, max_new_tokens=MAX_NEW,
                                 pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id)
        comp = seq[:, ids.shape[1]:]
        is_eos = comp == tok.eos_token_id
        cmask = ((is_eos.long().cumsum(-1) - is_eos.long()) == 0).float()  # up to and including the first eos
        T = comp.shape[1]
        logits = model(input_ids=seq, attention_mask=torch.cat([mask, cmask.long()], 1), logits_to_keep=T + 1).logits
        logp = torch.log_softmax(logits[:, :-1].float(), -1).gather(-1, comp.unsqueeze(-1)).squeeze(-1)
        (-(logp * cmask).sum() / cmask.sum()).backward()
        opt.step()
        opt.zero_grad()
        times.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
        tokens.append(int(cmask.sum()))
    out = _summary(times, tokens, cpu, warmup)
    out["torch_threads"] = torch.get_num_threads()
    return out


def measure(framework: str, setting: str, model_dir: str, steps: int, warmup: int, trl_optim: str | None = None) -> dict:
    """One run's figures (in this process): step_s (median after warm-up), tokens_per_s, peak_rss_mib, ..."""
    if framework == "creditbench":
        return measure_creditbench(model_dir, steps, warmup, CREDITBENCH_BEST if setting == "best" else CREDITBENCH_MATCHED)
    if framework == "trl":
        return measure_trl(model_dir, steps, warmup, setting, trl_optim)
    if framework == "floor":
        return measure_floor(model_dir, steps, warmup)
    raise ValueError(f"unknown framework {framework!r}")


def _worker(spec: dict) -> None:
    import torch

    torch.set_num_threads(spec["threads"])
    res = measure(spec["framework"], spec["setting"], spec["model_dir"], spec["steps"], spec["warmup"],
                  spec.get("trl_optim"))
    print(MARK + json.dumps(res), flush=True)


def run_isolated(spec: dict) -> dict:
    """``measure`` in a fresh Python process (its peak RSS is this run's alone)."""
    env = dict(os.environ, TOKENIZERS_PARALLELISM="false", HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1",
               HF_HUB_DISABLE_PROGRESS_BARS="1", PYTHONWARNINGS="ignore")
    t0, load0 = time.perf_counter(), os.getloadavg()[0]
    p = subprocess.run([sys.executable, "-m", "bench.perf.trl", "--worker", json.dumps(spec)],
                       capture_output=True, text=True, env=env, check=False)
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith(MARK)]
    if p.returncode or not lines:
        raise RuntimeError(f"run {spec} failed (exit {p.returncode}):\n{p.stderr[-4000:]}")
    res = json.loads(lines[-1][len(MARK):])
    res["process_s"] = time.perf_counter() - t0
    res["load_average_1min"] = [load0, os.getloadavg()[0]]  # other work on the machine skews the times
    return res


# ---------------------------------------------------------------------------------------- report
def machine(threads: int) -> dict:
    import torch
    import transformers

    cpu = platform.processor() or platform.machine()
    flags = ""
    try:
        with open("/proc/cpuinfo") as f:
            info = f.read()
        cpu = next(ln.split(":", 1)[1].strip() for ln in info.splitlines() if ln.startswith("model name"))
        flags = next(ln.split(":", 1)[1] for ln in info.splitlines() if ln.startswith("flags"))
    except (OSError, StopIteration):
        pass
    try:
        import trl

        trl_version = trl.__version__
    except ImportError:
        trl_version = None
    bf16 = sorted({f for f in flags.split() if f in ("avx512_bf16", "amx_bf16", "amx_tile", "avx512f", "avx2")})
    return {"cpu": cpu, "cpus": os.cpu_count(), "torch_threads": threads, "torch": torch.__version__,
            "transformers": transformers.__version__, "trl": trl_version, "cpu_flags": bf16,
            "python": platform.python_version()}


def aggregate_size(size: str, params: int, runs: dict) -> dict:
    """Medians over repetitions of each configuration's figures, and the ratios."""
    med = {}
    for key, reps in runs.items():
        med[key] = {k: statistics.median(r[k] for r in reps) for k in ("step_s", "cpu_s", "tokens_per_s", "peak_rss_mib")}
        med[key]["step_s_reps"] = [r["step_s"] for r in reps]
    floor, floor_cpu = med["floor/fp32"]["step_s"], med["floor/fp32"]["cpu_s"]
    out = {"size": size, "params": params, "runs": med, "floor_s": floor, "floor_cpu_s": floor_cpu}
    for label, cb, trl in (("matched", "creditbench/matched", "trl/matched"), ("best", "creditbench/best", "trl/defaults")):
        a, b = med[cb], med[trl]
        out[label] = {"creditbench_step_s": a["step_s"], "trl_step_s": b["step_s"],
                      "step_ratio": a["step_s"] / b["step_s"], "speedup": b["step_s"] / a["step_s"],
                      "tokens_per_s_ratio": a["tokens_per_s"] / b["tokens_per_s"],
                      "peak_rss_ratio": a["peak_rss_mib"] / b["peak_rss_mib"],
                      "creditbench_over_floor": a["step_s"] / floor, "trl_over_floor": b["step_s"] / floor,
                      "cpu_ratio": a["cpu_s"] / b["cpu_s"], "creditbench_over_floor_cpu": a["cpu_s"] / floor_cpu}
    return out


def markdown(results: list[dict], host: dict, a, load: tuple, wall_s: float) -> str:
    host_line = (f"{host['cpu']}, {host['cpus']} CPUs, torch threads: {host['torch_threads']}, torch {host['torch']}, "
                 f"transformers {host['transformers']}, trl {host['trl']}")
    busy = (f" (above {host['cpus']} CPUs: other work competed for the cores, so the times are inflated and noisy)"
            if load[2] > (host["cpus"] or 1) * 0.75 else "")
    lines = [f"# creditbench against TRL's GRPOTrainer ({host_line})", "",
             (f"`python -m bench.perf.trl --sizes {' '.join(a.sizes)} --reps {a.reps} --steps {a.steps} --warmup {a.warmup} "
              f"--threads {host['torch_threads']}`. GRPO on arithmetic, "
              f"{PROMPTS} prompts x G={G}, up to {MAX_NEW} new tokens at temperature 1, no KL, one optimizer step per "
              "generation batch, random tiny Qwen3 weights loaded from the same directory by both. Each figure is "
              f"the median over {a.reps} repetitions of one subprocess's median step after {a.warmup} warm-up steps "
              "(frameworks alternate within a repetition). **matched**: both fp32, no gradient checkpointing, "
              "seq-mean-token-mean aggregation (TRL `loss_type=\"grpo\"`), the same AdamW code "
              f"(TRL `optim=\"{host.get('creditbench_adamw', 'adamw_torch')}\"`). **best vs defaults**: "
              "creditbench's fastest settings "
              f"({', '.join(f'{k}={v}' for k, v in CREDITBENCH_BEST.items())}) against TRL's defaults (bf16 autocast, "
              "gradient checkpointing, `loss_type=\"dapo\"`, fused AdamW). Floor: bare `generate` + one "
              "forward/backward + AdamW step over the same tokens, fp32. Ratios are creditbench / TRL (step "
              "time and memory: lower is better for creditbench; tokens/s: higher). Peak memory is each "
              f"process's max RSS. CPU flags seen: {', '.join(host['cpu_flags']) or 'none'}; load average "
              f"(1 min) {load[0]:.1f} before, {load[1]:.1f} after, {load[2]:.1f} at most between runs{busy}; the whole "
              f"run took {wall_s / 60:.1f} min."), "",
             ("| size | params | setting | creditbench step s | TRL step s | step ratio | creditbench speed-up | "
              "tokens/s ratio | peak memory ratio | creditbench step / floor | TRL step / floor | floor s "
              "| CPU-time ratio | creditbench CPU / floor CPU |"),
             "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in results:
        for label, name in (("matched", "matched"), ("best", "best vs TRL defaults")):
            m = r[label]
            lines.append(f"| {r['size']} | {r['params']:,} | {name} | {m['creditbench_step_s']:.3f} | {m['trl_step_s']:.3f} "
                         f"| {m['step_ratio']:.2f} | {m['speedup']:.2f}x | {m['tokens_per_s_ratio']:.2f} "
                         f"| {m['peak_rss_ratio']:.2f} | {m['creditbench_over_floor']:.2f} | {m['trl_over_floor']:.2f} "
                         f"| {r['floor_s']:.3f} | {m['cpu_ratio']:.2f} | {m['creditbench_over_floor_cpu']:.2f} |")
    lines += ["", ("Absolute figures (median over repetitions; every repetition's step time in brackets). CPU s is "
                   "the process's CPU time per step (all its torch threads; not the grader's worker processes): "
                   "it moves much less than wall time when other work takes the cores."), "",
              "| size | run | step s | CPU s | tokens/s | peak RSS MiB |", "|---|---|---|---:|---:|---:|"]
    for r in results:
        for key, m in r["runs"].items():
            reps = ", ".join(f"{x:.3f}" for x in m["step_s_reps"])
            lines.append(f"| {r['size']} | {key} | {m['step_s']:.3f} [{reps}] | {m['cpu_s']:.3f} | {m['tokens_per_s']:,.0f} "
                         f"| {m['peak_rss_mib']:,.0f} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", nargs="+", default=["tiny-500k", "tiny-2m", "tiny-8m"])
    ap.add_argument("--reps", type=int, default=3, help="repetitions (each configuration in a fresh process)")
    ap.add_argument("--steps", type=int, default=5, help="measured RL steps per run")
    ap.add_argument("--warmup", type=int, default=2, help="warm-up RL steps per run (not measured)")
    ap.add_argument("--threads", type=int, default=0, help="torch threads per run (0: min(2, torch's default))")
    ap.add_argument("--out", default="results/benchmarks")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.worker:
        _worker(json.loads(a.worker))
        return
    import importlib.util

    import torch

    from bench.errors import CreditBenchError, did_you_mean
    from bench.engine.policy import TINY_SIZES, build_tiny, num_parameters

    if importlib.util.find_spec("trl") is None:
        raise CreditBenchError("the TRL benchmark needs trl: pip install -e '.[trl]'")
    for size in a.sizes:
        if size not in TINY_SIZES:
            raise did_you_mean("model size", size, TINY_SIZES)
    threads = a.threads or min(2, torch.get_num_threads())
    host = machine(threads)
    host["creditbench_adamw"] = optim = creditbench_adamw()  # TRL's matched setting runs the same AdamW code
    load_before = os.getloadavg()
    t_start = time.perf_counter()
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for size in a.sizes:
            model, tok = build_tiny(size, seed=SEED)
            model_dir = str(Path(tmp) / size)
            model.save_pretrained(model_dir)
            tok.save_pretrained(model_dir)
            params = num_parameters(model)
            runs: dict[str, list[dict]] = {}
            for rep in range(a.reps):
                for framework, setting in runs_to_do():
                    spec = {"framework": framework, "setting": setting, "model_dir": model_dir, "steps": a.steps,
                            "warmup": a.warmup, "threads": threads, "trl_optim": optim}
                    res = run_isolated(spec)
                    runs.setdefault(f"{framework}/{setting}", []).append(res)
                    print(json.dumps({"size": size, "rep": rep, "run": f"{framework}/{setting}",
                                      **{k: round(res[k], 4) for k in ("step_s", "cpu_s", "tokens_per_s",
                                                                        "peak_rss_mib", "process_s")},
                                      "load": res["load_average_1min"]}), flush=True)
            if "creditbench/best" not in runs:  # the same settings: the same runs
                runs["creditbench/best"] = runs["creditbench/matched"]
            results.append(aggregate_size(size, params, runs))
            results[-1]["raw"] = runs
    wall = time.perf_counter() - t_start
    load_after = os.getloadavg()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    peak_load = max(x for r in results for reps in r["raw"].values() for run in reps for x in run["load_average_1min"])
    md = markdown(results, host, a, (load_before[0], load_after[0], peak_load), wall)
    notes = out / "trl.md"
    if notes.exists():  # keep the hand-written analysis that follows the measured tables
        old = notes.read_text()
        if NOTES in old:
            md += "\n" + old[old.index(NOTES):]
    notes.write_text(md)
    (out / "trl.json").write_text(json.dumps({"machine": host, "args": {k: v for k, v in vars(a).items() if k != "worker"},
                                              "creditbench_best": CREDITBENCH_BEST, "load_average": [load_before, load_after],
                                              "wall_s": wall, "results": results}, indent=2))
    print(md)


if __name__ == "__main__":
    from bench.errors import CreditBenchError

    try:
        main()
    except CreditBenchError as e:
        print(f"bench_trl: error: {e}", file=sys.stderr)
        sys.exit(2)
