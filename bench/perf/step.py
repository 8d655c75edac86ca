"""Benchmark: where one RL step's time goes, per tiny size, against its floor.

    python -m bench.perf.step [--sizes tiny-500k tiny-2m tiny-8m] [--steps 6] [--method grpo]
                               [--task arithmetic] [--device cpu] [--precision 32-true] [--out results/benchmarks]

For each size, an RL step of the embedded default (GRPO on arithmetic unless told otherwise;
16 prompts x G=8, 36 new tokens, fp32) runs through the real Lightning module and is split into
rollout (generate), verify, score (the forward passes the update cannot provide, e.g. the KL
reference) and update (forward, backward, clip, AdamW). The floor is what no RL step can avoid: a
bare ``generate`` of the same batch plus one forward/backward and optimizer step over the same
tokens. Both are measured in the same process, one after the other, after two warm-up steps; the
medians are reported.

``--device cuda`` runs both on the GPU and ``--precision bf16-mixed`` in bf16 autocast (the floor too);
any setting other than the default CPU fp32 one writes ``rl_step_<device>_<precision>.md|json`` beside
``rl_step.md|json``. On a GPU the phases are host-side clocks: a phase's queued kernels can finish in the
next one, the step time is not affected.
"""

from __future__ import annotations

import contextlib
import json
import statistics
import time

import lightning as L
import torch

from bench.config import EvalConfig, RLConfig
from bench.engine.fit import fit_logged
from bench.engine.module import RLVRModule
from bench.engine.scoring import score
from bench.errors import CreditBenchError
from bench.models.policy import build_tiny, num_parameters
from bench.numerics import aggregate
from bench.registry import METHODS, TASKS
from bench.script import machine, machine_line, md_table, run_script, script_parser, write_outputs

PRECISIONS = {"32-true": "fp32", "bf16-mixed": "bf16 autocast"}
PHASES = ("time/rollout_s", "time/verify_s", "time/score_s", "time/update_s", "time/step_s")


def rl_steps(
    size: str,
    steps: int,
    kl_coef: float,
    method_name: str,
    task_name: str,
    device: str = "cpu",
    precision: str = "32-true",
) -> list[dict[str, float]]:
    task = TASKS.get(task_name)()
    method_cls = METHODS.get(method_name)
    method = method_cls(method_cls.Config(kl_coef=kl_coef))
    L.seed_everything(0, verbose=False)
    model, tok = build_tiny(size)
    ref = build_tiny(size)[0] if kl_coef > 0 else None
    rl = RLConfig(steps=steps)
    module = RLVRModule(model, tok, method, task, task_name, rl, EvalConfig(every=10**6), ref_policy=ref)
    accelerator = "gpu" if device == "cuda" else "cpu"
    rows = fit_logged(module, task, rl, EvalConfig(), accelerator=accelerator, precision=precision)
    return [r for r in rows if "time/step_s" in r]


def _autocast(device: str, precision: str):
    if precision == "bf16-mixed":
        return torch.autocast(device, dtype=torch.bfloat16)
    return contextlib.nullcontext()


def floor_steps(size: str, steps: int, task_name: str, device: str = "cpu", precision: str = "32-true") -> list[float]:
    task = TASKS.get(task_name)()
    rows = list(task.load("eval"))
    model, tok = build_tiny(size)
    model.to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    out = []
    for i in range(steps):
        prompts = [task.prompt(r) for r in rows[16 * i : 16 * (i + 1)]]
        t0 = time.perf_counter()
        enc = tok(prompts, return_tensors="pt", padding=True, add_special_tokens=False).to(device)
        ids, mask = enc["input_ids"].repeat_interleave(8, 0), enc["attention_mask"].repeat_interleave(8, 0)
        with torch.no_grad(), _autocast(device, precision):
            seq = model.generate(
                input_ids=ids,
                attention_mask=mask,
                do_sample=True,
                top_k=0,
                max_new_tokens=36,
                pad_token_id=tok.pad_token_id,
                eos_token_id=tok.eos_token_id,
            )
        comp = seq[:, ids.shape[1] :]
        cmask = torch.ones_like(comp)
        with _autocast(device, precision):
            s = score(model, ids, mask, comp, cmask, with_entropy=False)
        aggregate(-s.logprobs, cmask, "token-mean").backward()
        opt.step()
        opt.zero_grad()
        if device == "cuda":
            torch.cuda.synchronize()
        out.append(time.perf_counter() - t0)
    return out


def markdown(results: list[dict], method: str, task: str, steps: int, host: str, precision: str = "32-true") -> str:
    """The report: one row per size and KL coefficient, each phase's median seconds against the floor."""
    table = [
        [
            r["size"],
            f"{r['params']:,}",
            r["kl_coef"],
            *(f"{r[k]:.3f}" for k in PHASES),
            f"{r['floor_s']:.3f}",
            f"{r['step_over_floor']:.2f}",
        ]
        for r in results
    ]
    lines = [
        f"# One {method} RL step on {task}, broken down ({host})",
        "",
        f"16 prompts x G=8, up to 36 new tokens, {PRECISIONS[precision]}, median of {steps} steps after 2 warm-up "
        "steps. "
        "Floor = bare generate + one forward/backward + AdamW step over the same tokens.",
        "",
        *md_table(
            "size | params | KL beta | rollout s | verify s | score s | update s | step s | floor s | step / floor",
            table,
        ),
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    ap = script_parser(__doc__, "python -m bench.perf.step")
    ap.add_argument("--sizes", nargs="+", default=["tiny-500k", "tiny-2m", "tiny-8m"])
    ap.add_argument("--steps", type=int, default=6, help="measured steps per setting (after 2 warm-up steps)")
    ap.add_argument("--method", default="grpo", help="a registered method (its paper config, with beta 0 and 0.04)")
    ap.add_argument("--task", default="arithmetic", help="a registered task with an eval split")
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--precision", default="32-true", choices=list(PRECISIONS))
    ap.add_argument("--out", default="results/benchmarks")
    a = ap.parse_args(argv)
    if a.device == "cuda" and not torch.cuda.is_available():
        raise CreditBenchError("--device cuda: torch sees no CUDA device")
    METHODS.get(a.method), TASKS.get(a.task)  # unknown names fail here, before any work
    torch.set_num_threads(min(2, torch.get_num_threads()))
    results = []
    for size in a.sizes:
        params = num_parameters(build_tiny(size)[0])
        for kl in (0.0, 0.04):
            rows = rl_steps(size, a.steps + 2, kl, a.method, a.task, a.device, a.precision)[2:]
            floor = floor_steps(size, a.steps + 2, a.task, a.device, a.precision)[2:]
            med = {k: statistics.median(r[k] for r in rows) for k in PHASES}
            tokens = statistics.median(r["train/response_length"] for r in rows) * 128
            f = statistics.median(floor)
            results.append(
                {
                    "size": size,
                    "params": params,
                    "kl_coef": kl,
                    **med,
                    "floor_s": f,
                    "step_over_floor": med["time/step_s"] / f,
                    "gen_tokens_per_step": tokens,
                }
            )
            print(json.dumps(results[-1]))
    host = machine_line(machine())
    text = markdown(results, a.method, a.task, a.steps, host, a.precision)
    default = a.device == "cpu" and a.precision == "32-true"
    stem = "rl_step" if default else f"rl_step_{a.device}_{a.precision}"
    data = {"machine": host, "results": results}
    write_outputs(a.out, stem, text, data if default else {**data, "device": a.device, "precision": a.precision})
    print(text)


if __name__ == "__main__":
    run_script(main, "python -m bench.perf.step")
