"""Benchmark: each method's update step against a baseline's (GRPO) on the same batch.

    python -m bench.perf.methods [--lengths 256 1024 4096] [--tokens 16384] [--size tiny-500k]
                                  [--methods grpo dapo ...] [--baseline grpo] [--reps 3]
                                  [--out results/benchmarks]

For each completion length T, one fixed rollout batch (B = tokens / T rows in groups of 4, lengths
drawn in [T/2, T], mixed rewards) is trained on by every method through the engine's own code path,
called without a Trainer (``bench.engine.scoring.score_batch`` then ``bench.engine.step.update``: the
forward with grad, the method's credit and loss, aggregation, backward, clip and AdamW;
``score_batch`` holds any extra forward a method needs, such as ARCA's adapter-off pass). The KL
term is off for every method so that only credit and loss differ. A method that needs LoRA (ARCA)
is compared with the baseline under the same LoRA adapter. A method's ``augment`` is part of its
step when it only scores (GCPO's negative-prompt forward, through the Sampler's ``logprobs``); a
method that generates there (IBPO's revisions) is timed on the batch as sampled, without them, as
generation is the rollout benchmark's (bench.perf.engines). Methods are interleaved within each
repetition; the median over repetitions (after one warm-up) is reported, with valid tokens per
second and the peak resident memory the step adds (CPU; peak allocated memory on CUDA).
"""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import json
import os
import statistics
import threading
import time

import torch

from bench.config import RLConfig, SamplingConfig
from bench.core import RolloutBatch
from bench.engine.sampling import RolloutSampler
from bench.engine.scoring import score_batch
from bench.engine.step import Optimization, update
from bench.models.policy import add_lora, build_tiny, num_parameters
from bench.registry import METHODS
from bench.script import machine, machine_line, md_table, run_script, script_parser, write_outputs

PROG = "python -m bench.perf.methods"
G = 4
PROMPT = 16


class PeakMemory:
    """Peak memory above the level at entry: CUDA's allocator counter, or resident set size sampled
    every millisecond from /proc on CPU."""

    def __init__(self, device: torch.device):
        self.device = device

    def _rss(self) -> int:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")

    def __enter__(self):
        if self.device.type == "cuda":
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            self.base = torch.cuda.memory_allocated()
            return self
        # glibc keeps freed memory in its heap (its mmap threshold rises after the first large frees),
        # so a later step would reuse it without growing the resident set: hand it back first
        ctypes.CDLL("libc.so.6").malloc_trim(0)
        self.base = self.peak = self._rss()
        self.stop = threading.Event()

        def sample():
            while not self.stop.is_set():
                self.peak = max(self.peak, self._rss())
                time.sleep(0.001)

        self.thread = threading.Thread(target=sample, daemon=True)
        self.thread.start()
        return self

    def __exit__(self, *exc):
        if self.device.type == "cuda":
            torch.cuda.synchronize()
            self.added = torch.cuda.max_memory_allocated() - self.base
        else:
            self.stop.set()
            self.thread.join()
            self.added = max(self.peak, self._rss()) - self.base


def make_batch(T: int, rows: int, vocab: int, seed: int, device) -> RolloutBatch:
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(T // 2, T + 1, (rows,), generator=g)
    mask = (torch.arange(T)[None] < lengths[:, None]).long()
    rewards = torch.randint(0, 2, (rows,), generator=g).float()
    rewards[0::G], rewards[1::G] = 1.0, 0.0  # every group mixed
    ids = torch.randint(3, vocab, (rows, T), generator=g) * mask
    b = RolloutBatch(
        prompt_ids=torch.randint(3, vocab, (rows, PROMPT), generator=g),
        prompt_mask=torch.ones(rows, PROMPT, dtype=torch.long),
        completion_ids=ids,
        completion_mask=mask,
        group_ids=torch.arange(rows // G).repeat_interleave(G),
        rewards=rewards,
        correct=rewards > 0,
        truncated=lengths == T,
        max_new_tokens=T,
    )
    return b if device.type == "cpu" else _to(b, device)


def _to(b: RolloutBatch, device) -> RolloutBatch:
    return dataclasses.replace(
        b,
        **{
            f.name: getattr(b, f.name).to(device)
            for f in dataclasses.fields(b)
            if isinstance(getattr(b, f.name), torch.Tensor)
        },
    )


class NoGeneration(Exception):
    """Raised by the benchmark's sampler where a method would generate."""


class ScoringSampler(RolloutSampler):
    """The Sampler a method's ``augment`` gets here: it scores with the policy, it does not generate."""

    def generate(self, prompts, rows):
        raise NoGeneration

    def complete(self, batch, index, prefixes, extra=False):
        raise NoGeneration


class Bench:
    """One policy (optionally with LoRA) and a plain AdamW, driving the engine's update without a Trainer."""

    def __init__(self, size: str, T: int, lora: bool, device):
        model, self.tok = build_tiny(size, seed=0, max_positions=PROMPT + T)
        self.policy = add_lora(model, 8, 16.0, 0.0, ["all-linear"]) if lora else model
        self.policy.to(device).train()
        self.device = device
        self.params = num_parameters(model)
        self.sampler = ScoringSampler(None, self.tok, None, SamplingConfig(), policy=self.policy)

    def step(self, method_name: str, batch: RolloutBatch) -> tuple[float, int]:
        cls = METHODS.get(method_name)
        method = cls(cls.Config(kl_coef=0.0))
        rl = RLConfig(steps=1, prompts_per_step=batch.size // G, group_size=G, lr=1e-6)
        opt = torch.optim.AdamW([p for p in self.policy.parameters() if p.requires_grad], lr=1e-6)
        sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0)
        b = batch.select(torch.arange(batch.size, device=batch.completion_ids.device))  # fresh, unscored copy
        b.prompts = self.tok.batch_decode(b.prompt_ids, skip_special_tokens=True)  # what augment reads
        b.completions = self.tok.batch_decode(b.completion_ids, skip_special_tokens=True)
        b.rows = [{"id": str(i)} for i in range(b.size)]
        with PeakMemory(self.device) as mem:
            t0 = time.perf_counter()
            with contextlib.suppress(NoGeneration):
                b = method.augment(b, self.sampler)
            scored = score_batch(self.policy, None, method, b, rl=rl, fused=True)
            update(self.policy, method, b, rl, opt=Optimization(opt, sched), scored=scored)
            if self.device.type == "cuda":
                torch.cuda.synchronize()
            elapsed = time.perf_counter() - t0
        return elapsed, mem.added


def main(argv: list[str] | None = None) -> None:
    ap = script_parser(__doc__, PROG)
    ap.add_argument("--lengths", nargs="+", type=int, default=[256, 1024, 4096])
    ap.add_argument("--tokens", type=int, default=16384, help="completion tokens per batch (rows = tokens / length)")
    ap.add_argument("--size", default="tiny-500k")
    ap.add_argument("--methods", nargs="+", default=None, help="default: every registered method")
    ap.add_argument("--baseline", default="grpo", help="the method every other one is compared with")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--out", default="results/benchmarks")
    a = ap.parse_args(argv)
    methods = a.methods or METHODS.names()
    METHODS.get(a.baseline)
    for m in methods:
        METHODS.get(m)  # unknown names fail here, before any work
    methods = [a.baseline] + [m for m in methods if m != a.baseline]
    torch.set_num_threads(min(2, torch.get_num_threads()))
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    results = []
    for T in a.lengths:
        rows = max(G, a.tokens // T // G * G)
        # a method that compares adapter-on/off states runs under LoRA, beside the baseline under LoRA
        lora = {m: "hidden_residual" in METHODS.get(m)().required for m in methods}
        runs = [(m, False) for m in methods if not lora[m]]
        if any(lora.values()):
            runs += [(a.baseline, True)] + [(m, True) for m in methods if lora[m] and m != a.baseline]
        benches = {False: Bench(a.size, T, False, device), True: Bench(a.size, T, True, device)}
        batch = make_batch(T, rows, len(benches[False].tok), seed=T, device=device)
        valid = int(batch.completion_mask.sum())
        times: dict[tuple[str, bool], list[float]] = {r: [] for r in runs}
        mems: dict[tuple[str, bool], list[int]] = {r: [] for r in runs}
        for rep in range(a.reps + 1):
            for run in runs:
                t, mem = benches[run[1]].step(run[0], batch)
                if rep > 0:
                    times[run].append(t)
                    mems[run].append(mem)
        for m, lora in runs:
            t = statistics.median(times[(m, lora)])
            base = statistics.median(times[(a.baseline, lora)])
            results.append(
                {
                    "length": T,
                    "rows": rows,
                    "valid_tokens": valid,
                    "method": m,
                    "lora": lora,
                    "update_s": t,
                    "tokens_per_s": valid / t,
                    "vs_baseline": t / base,
                    "peak_mem_mb": max(mems[(m, lora)]) / 2**20,
                }
            )
            print(json.dumps(results[-1]))
    host = machine_line(machine())
    text = markdown(results, a, host, benches[False].params)
    write_outputs(a.out, "methods_update", text, {"machine": host, "results": results})
    print(text)


def markdown(results: list[dict], a, host: str, params: int) -> str:
    """The report: one row per method (and LoRA setting), the columns of each length side by side."""
    lengths = sorted({r["length"] for r in results})
    table = []
    for key in dict.fromkeys((r["method"], r["lora"]) for r in results):
        cells = []
        for T in lengths:
            r = next(x for x in results if (x["method"], x["lora"]) == key and x["length"] == T)
            cells.append(
                f"{r['update_s']:.3f} | {r['tokens_per_s']:,.0f} | {r['vs_baseline']:.2f} | {r['peak_mem_mb']:.0f}"
            )
        table.append([key[0] + (" (LoRA)" if key[1] else ""), *cells])
    lines = [
        f"# Update step per method against {a.baseline} ({host})",
        "",
        f"{a.size} ({params:,} parameters), fp32, {a.tokens} completion tokens per batch (rows = tokens / "
        f"length, groups of {G}, lengths in [T/2, T]), KL off, median of {a.reps} interleaved repetitions "
        "after a warm-up. Update = the method's augment when it only scores (GCPO's negative-prompt "
        "forward; IBPO's revisions are generation, not timed here), then the engine's score_batch + update "
        "(forward with grad, credit, loss, backward, clip, AdamW). Methods that need LoRA (adapter-on/off "
        "hidden states) are compared with "
        f"{a.baseline} under the same LoRA adapter (rank 8). Memory = peak resident memory the step adds, "
        "sampled every millisecond after returning the allocator's free pages (malloc_trim).",
        "",
        *md_table("method | " + " | ".join(f"T={T}: s | tok/s | x {a.baseline} | MB" for T in lengths), table),
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    run_script(main, PROG)
