"""Benchmark: K seeds in lockstep, one batched pass over K stacked policies, against K separate passes.

    python -m bench.perf.lockstep [--sizes tiny-500k tiny-2m] [--ks 1 2 4 8] [--repeats 5]
                                  [--out results/benchmarks]

A sweep runs the seeds of a label in separate worker processes of one torch thread each: the same
program on the same shapes. Lockstep would run K of them in one process with their parameters stacked
on a leading axis, so that each tensor operation is dispatched once for K policies. This measures what
that buys on a CPU, per seed, for K tiny Qwen3 policies (build_tiny, seeds 0..K-1) and three passes at a
flagship run's shapes (bench.perf.lockstep_passes.Shapes): decode (128 rows, a 22-token prompt, then 20
decode steps with a KV cache, fed fixed tokens), train (64 rows x 42 positions, forward and backward of
the last 20 tokens' mean negative log-prob) and score (128 rows x 42 positions, without gradient); each
run three ways (bench.perf.lockstep_passes): separate (K models through lean_forward, one after another),
batched (the decoder's maths written once over the stacked parameters) and vmap (``torch.func.vmap`` of
``functional_call`` over the real modules; train and score only).

One torch thread, CPU seconds by ``time.process_time`` (user and system), the modes alternated within each
repeat (the machine's cores are shared with others), medians of ``--repeats``, after a few passes unmeasured
(a fresh process faults in the pages of its first large allocations). Everything is measured twice, first
with glibc's own malloc settings, then with freed memory kept (``mallopt``, skipped where the C library has
none): K seeds' tensors are K times larger, and glibc maps the largest afresh at every allocation. Each
mode's outputs (logits, log-probs, gradients) are compared with the separate ones. Two more figures explain
the ratios: the separate pass of one row, the part of a pass's cost that does not grow with its rows
(dispatch, Python, allocation), the most that K seeds sharing each operation could share; and, at the
largest K, where the separate and the batched passes spend their time by operator (torch.profiler).
Writes ``<out>/lockstep.{md,json}``.
"""

from __future__ import annotations

import resource
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import asdict
from typing import Any

import torch

from bench.errors import CreditBenchError
from bench.models.policy import TINY_SIZES, build_tiny
from bench.perf.lockstep_passes import (
    MODES,
    PHASES,
    Separate,
    Shapes,
    difference,
    keep_freed_memory,
    make_batch,
    policies_for,
    run,
)
from bench.script import machine, machine_line, md_table, run_script, script_parser, write_outputs

# Operator names (substrings of torch.profiler's keys) by what they do; the rest is "everything else".
CATEGORIES = {
    "matrix products": ("aten::mm", "aten::bmm", "aten::addmm"),
    "attention": ("scaled_dot_product",),
    "concatenation": ("aten::cat",),
}


def _timed(fn: Callable[[], object]) -> tuple[float, float]:
    """CPU seconds of the process (user and system) over ``fn()``, and the system seconds among them."""
    sys0, start = resource.getrusage(resource.RUSAGE_SELF).ru_stime, time.process_time()
    fn()
    return time.process_time() - start, resource.getrusage(resource.RUSAGE_SELF).ru_stime - sys0


def measure(size: str, ks: list[int], shapes: Shapes, repeats: int) -> list[dict[str, Any]]:
    """Every K and pass of one size: each mode's CPU seconds per seed and system seconds per seed
    (medians) and its difference from the separate passes."""
    models = [build_tiny(size, seed=s)[0] for s in range(max(ks))]
    vocab = models[0].config.vocab_size
    rows = []
    for k in ks:
        held = {mode: policies_for(mode, models[:k]) for mode in MODES}
        for phase in PHASES:
            modes = [m for m in MODES if not (phase == "decode" and m == "vmap")]
            batch = make_batch(phase, k, shapes.rows(phase), shapes, vocab)
            outs = {m: run(phase, held[m], batch) for m in modes}  # also the warm-up
            seconds: dict[str, list[tuple[float, float]]] = {m: [] for m in modes}
            for r in range(repeats):
                for m in modes if r % 2 == 0 else modes[::-1]:  # alternated: a load change hits both
                    seconds[m].append(_timed(lambda: run(phase, held[m], batch)))  # noqa: B023 (called at once)
            rows.append(
                {
                    "size": size,
                    "k": k,
                    "phase": phase,
                    "per_seed_s": {m: statistics.median(c for c, _ in t) / k for m, t in seconds.items()},
                    "system_per_seed_s": {m: statistics.median(s for _, s in t) / k for m, t in seconds.items()},
                    "seconds": {m: [round(c, 4) for c, _ in t] for m, t in seconds.items()},
                    "difference": {m: difference(outs[m], outs["separate"]) for m in modes if m != "separate"},
                }
            )
            print(f"{size} K={k} {phase}: " + ", ".join(f"{m} {v:.4f}" for m, v in rows[-1]["per_seed_s"].items()))
    return rows


def one_row(size: str, shapes: Shapes, repeats: int) -> dict[str, float]:
    """Each pass of one seed at one row, separate: the CPU seconds that do not grow with the rows (train
    and score keep one row's 42 positions of arithmetic: an upper bound)."""
    model = build_tiny(size, seed=0)[0]
    out = {}
    for phase in PHASES:
        batch = make_batch(phase, 1, 1, shapes, model.config.vocab_size)
        seconds = []
        for r in range(repeats + 2):  # two to warm up
            start = time.process_time()
            run(phase, [Separate(model)], batch)
            seconds += [time.process_time() - start] if r >= 2 else []
        out[phase] = statistics.median(seconds)
    return out


def op_split(size: str, k: int, shapes: Shapes, repeats: int = 3) -> dict[str, dict[str, dict[str, float]]]:
    """Per pass, the separate and the batched pass of ``k`` seeds under torch.profiler: self CPU seconds per
    seed by :data:`CATEGORIES`, medians of ``repeats`` profiled runs, the modes alternated (the profiler
    adds to every operation, so "everything else" reads high)."""
    from torch.profiler import ProfilerActivity, profile

    models = [build_tiny(size, seed=s)[0] for s in range(k)]
    out: dict[str, dict[str, dict[str, float]]] = {}
    for phase in PHASES:
        batch = make_batch(phase, k, shapes.rows(phase), shapes, models[0].config.vocab_size)
        held = {mode: policies_for(mode, models) for mode in MODES[:2]}  # separate, batched
        runs: dict[str, list[dict[str, float]]] = {mode: [] for mode in held}
        for r in range(repeats + 1):  # the first to warm up
            for mode in MODES[:2] if r % 2 == 0 else MODES[1::-1]:
                with profile(activities=[ProfilerActivity.CPU]) as prof:
                    run(phase, held[mode], batch)
                split = dict.fromkeys([*CATEGORIES, "everything else"], 0.0)
                for event in prof.key_averages():
                    names = (c for c, keys in CATEGORIES.items() if any(key in event.key for key in keys))
                    split[next(names, "everything else")] += event.self_cpu_time_total / 1e6 / k
                runs[mode] += [split] if r else []
        out[phase] = {
            mode: {c: statistics.median(s[c] for s in splits) for c in splits[0]} for mode, splits in runs.items()
        }
    return out


def _ratio(a: float, b: float) -> str:
    return f"{a / b:.2f}" if b else "-"


def _diff_cell(d: dict[str, Any]) -> str:
    """'same bits', or the largest differences of the outputs (and of the gradients)."""
    if d["equal"]:
        return "same bits"
    return f"{d['out']:.1e}" + (f" / {d['grad']:.1e}" if d["grad"] is not None else "")


def _index(rows: list[dict[str, Any]]) -> dict[tuple[str, int, str], dict[str, Any]]:
    return {(r["size"], r["k"], r["phase"]): r for r in rows}


def _ratios(r: dict[str, Any] | None) -> list[str]:
    """A row's separate seconds per seed, then batched / separate and vmap / separate ('-' where not run)."""
    if r is None:
        return ["-", "-", "-"]
    t = r["per_seed_s"]
    vmap = _ratio(t["vmap"], t["separate"]) if "vmap" in t else "-"
    return [f"{t['separate']:.4f}", _ratio(t["batched"], t["separate"]), vmap]


def markdown(data: dict[str, Any]) -> str:
    s = data["shapes"]
    lines = [
        "# K seeds in lockstep: one batched pass over K stacked policies against K separate passes",
        "",
        f"Machine: {machine_line(data['machine'])}. `{data['command']}`: CPU seconds per seed "
        f"(`time.process_time`, user and system), medians of {data['repeats']} repeats, the modes alternated "
        f"within each repeat. Passes at a flagship run's shapes: decode, {s['decode_rows']} rows, a "
        f"{s['prompt']}-token prompt prefilled into a KV cache and {s['new']} decode steps; train, "
        f"{s['train_rows']} rows x {s['prompt'] + s['new']} positions, forward and backward of the completions' "
        f"mean negative log-prob; score, {s['score_rows']} rows x {s['prompt'] + s['new']} positions, their "
        "log-probs without gradient.",
        "",
        "Modes: **separate**, K models through bench.engine.lean_forward one after another (what a sweep's "
        "workers do between them); **batched**, one pass of the same decoder maths over the K models' stacked "
        "parameters (bench.perf.lockstep_passes.stacked_forward: batched matrix products, attention with the "
        "seeds in its batch); **vmap**, `torch.func.vmap` of `functional_call` over the real modules' stacked "
        "parameters (train and score: a KV cache cannot outlive a vmapped call). A ratio below 1 is lockstep "
        "paying. Measured with glibc's own malloc settings and with **freed memory kept** (`mallopt`: no "
        "allocation mapped on its own, no heap trimming), where a large tensor's pages are not faulted in "
        "afresh at each allocation. The last "
        "columns compare each mode's logits (decode), log-probs and gradients (train) with the separate "
        "passes': the largest absolute difference (outputs / gradients), or same bits.",
    ]
    for size in data["sizes"]:
        hidden, layers = TINY_SIZES[size][:2]
        lines += ["", f"## {size} (hidden {hidden}, {layers} layers)", ""] + _size_lines(data, size)
        if data.get("op_split"):
            lines += ["", *_split_lines(data["op_split"][size], max(data["ks"]))]
    return "\n".join(lines + [""] + data["notes"])


def _size_lines(data: dict[str, Any], size: str) -> list[str]:
    """One size's table (both regimes, the differences) and its line of system seconds and one-row costs."""
    default, kept = _index(data["regimes"].get("default") or []), _index(data["regimes"].get("kept") or [])
    header = ["pass", "K", "separate s/seed, glibc", "batched / separate, glibc", "vmap / separate, glibc"]
    header += ["separate s/seed, kept", "batched / separate, kept", "vmap / separate, kept"]
    header += ["batched vs separate", "vmap vs separate"]
    rows = []
    for key, r in (default or kept).items():
        if key[0] == size:
            d = r["difference"]
            diffs = [_diff_cell(d["batched"]), _diff_cell(d["vmap"]) if "vmap" in d else "-"]
            rows.append([key[2], key[1], *_ratios(default.get(key)), *_ratios(kept.get(key)), *diffs])
    k_max, one = max(data["ks"]), data["one_row"][size]
    text = ""
    if default:
        system = {p: default[size, k_max, p]["system_per_seed_s"] for p in PHASES}
        text = f"System seconds per seed at K={k_max} with glibc's settings (page faults), separate / batched: "
        text += ", ".join(f"{p} {system[p]['separate']:.4f} / {system[p]['batched']:.4f}" for p in PHASES) + ". "
    text += "One row, separate (the part of a pass that does not grow with its rows, the most K seeds could share): "
    return md_table(header, rows, "llrrrrrrll") + ["", text + ", ".join(f"{p} {one[p]:.4f} s" for p in PHASES) + "."]


def _split_lines(split: dict[str, dict[str, dict[str, float]]], k: int) -> list[str]:
    """The operator split of one size (:func:`op_split`) as a table."""
    rows = []
    for phase in PHASES:
        sep, bat = split[phase]["separate"], split[phase]["batched"]
        rows += [[phase, c, f"{sep[c]:.4f}", f"{bat[c]:.4f}", _ratio(bat[c], sep[c])] for c in sep]
    header = ["pass", "operators", "separate s/seed", "batched s/seed", "batched / separate"]
    return [
        f"Where the time goes at K={k}, freed memory kept, by operator (torch.profiler, self CPU seconds per "
        "seed; the profiler adds to every operation):",
        "",
        *md_table(header, rows, "llrrr"),
    ]


def _span(values: list[float]) -> str:
    return f"{min(values):.2f} to {max(values):.2f}" if values else "-"


def _per_phase(rows: list[dict[str, Any]], ratio: Callable[[dict[str, Any]], float | None]) -> str:
    """``ratio`` of each row, its least and greatest per pass over the sizes and K > 1."""
    spans = []
    for phase in PHASES:
        values = [v for r in rows if r["phase"] == phase and r["k"] > 1 for v in [ratio(r)] if v is not None]
        spans.append(f"{phase} {_span(values)}")
    return ", ".join(spans)


def _against_separate(r: dict[str, Any]) -> float:
    return r["per_seed_s"]["batched"] / r["per_seed_s"]["separate"]


def _split_ranges(data: dict[str, Any]) -> dict[str, tuple[float, float]]:
    """Each operator category's batched / separate ratio, its least and greatest over sizes and passes."""
    ratios: dict[str, list[float]] = {}
    for split in data["op_split"].values():
        for modes in split.values():
            for c, t in modes["separate"].items():
                ratios.setdefault(c, []).extend([modes["batched"][c] / t] if t else [])
    return {c: (min(r), max(r)) for c, r in ratios.items() if r}


def notes(data: dict[str, Any]) -> list[str]:
    """Where lockstep pays, what bounds it, the allocator's part, and what adopting it would take."""
    default, kept = data["regimes"].get("default"), data["regimes"].get("kept")
    rows = kept or default  # freed memory kept: the operations' own cost, without glibc's page faults
    one_seed = {(r["size"], r["phase"]): r["per_seed_s"]["batched"] for r in rows if r["k"] == 1}

    def against_one_seed(r: dict[str, Any]) -> float:
        return r["per_seed_s"]["batched"] / one_seed[r["size"], r["phase"]]

    sharing = [against_one_seed(r) for r in rows if r["k"] > 1]
    at_one = [_against_separate(r) for r in rows if r["k"] == 1 and r["phase"] == "decode"]
    one = [data["one_row"][r["size"]][r["phase"]] / r["per_seed_s"]["separate"] for r in rows if r["k"] == 1]
    same = all(r["difference"]["batched"]["equal"] for regime in (default, kept) for r in regime or [])
    regime = "with freed memory kept" if kept else "with glibc's settings"
    lines = [
        "## What it shows",
        "",
        f"- **Where lockstep pays**: per seed against the separate passes, {regime}, over both sizes and "
        f"K > 1, the batched pass costs {_per_phase(rows, _against_separate)}"
        + (f" (with glibc's settings: {_per_phase(default, _against_separate)})" if kept and default else "")
        + f". The decode's saving is there at K=1 already ({_span(at_one)}): the batched code's step leaves "
        "out lean_forward's mask construction and cache object, which code for one seed could leave out too. "
        f"Against that same code for one seed, K seeds together cost {_per_phase(rows, against_one_seed)} "
        f"per seed (median {statistics.median(sharing):.2f}): what sharing the operations between seeds buys.",
        "- **What bounds it**: lockstep shares only what an operation costs whatever its size (dispatch, "
        f"Python, allocation), which the one-row figures measure: {min(one):.0%} to {max(one):.0%} of a separate "
        "pass per seed at these shapes, the most lockstep could remove. The rest grows with K: at 128 rows the "
        "matrix products already run on the arithmetic, and the norms, rotary, SiLU and the KV cache's "
        "concatenation are passes over memory, over tensors K times larger that leave the core's caches sooner.",
    ]
    if data.get("op_split"):
        lines[-1] += (
            f" By operator at K={max(data['ks'])}, freed memory kept, the batched pass spends "
            + "; ".join(f"{c} {lo:.2f} to {hi:.2f}" for c, (lo, hi) in _split_ranges(data).items())
            + " of the separate passes' per seed."
        )
    lines[-1] += " vmap adds its own per-operation work and runs attention seed by seed (SDPA has no batching rule)."
    if kept and default:
        lines.append(_allocator_note(default, kept))
    lines += [
        f"- **Bits**: the batched passes gave {'the same bits as' if same else 'other bits than'} the separate "
        "ones here"
        + (
            " (this torch's CPU batched product computes each seed's product as the single product does, and "
            "the weight gradients sum over each seed's rows in the same order). That is this build's kernels, "
            "not a rule: a batched kernel that tiles or sums in another order (another BLAS, a GPU) moves each "
            "seed's numbers in the last bits, and every committed number with them."
            if same
            else ": batched products sum in another order, so each seed's numbers move in the last bits, and "
            "every committed number with them."
        ),
        "- **What adopting it for a sweep's worker pool would take**: a worker that holds K seeds of one label "
        "(the same shapes) with their parameters and AdamW moments stacked; each seed's own random stream for "
        "its problems and its sampling (one multinomial over K seeds' rows draws another stream than K "
        "separate ones); per-seed gradient clipping and step skipping; the finished rows that lean_decode drops "
        "differ per seed, so the K batches go ragged within a rollout (padding them back costs what dropping "
        "saved); and the run's result regenerated wherever the arithmetic order changes. For the saving above, "
        "the separate worker processes remain the cheaper design on a CPU.",
    ]
    return lines


def _allocator_note(default: list[dict[str, Any]], kept: list[dict[str, Any]]) -> str:
    """What keeping freed memory changes (kept / glibc, cell by cell): for the separate passes apart where
    they paid glibc's page faults (over a millisecond of system time per seed) and where they did not."""
    glibc, both = _index(default), _index(kept)

    def kept_over_glibc(mode: str, key: tuple[str, int, str]) -> float:
        return both[key]["per_seed_s"][mode] / glibc[key]["per_seed_s"][mode]

    faulted = [key for key in both if glibc[key]["system_per_seed_s"]["separate"] > 1e-3]
    where = ", ".join(f"{phase} at {size}, K={k}" for size, k, phase in faulted) or "none"
    return (
        "- **The allocator**: with glibc's settings an allocation above its largest mapping threshold (32 MiB; "
        "a K=8 batched activation of tiny-2m's MLP is 8 x 64 x 42 x 512 floats, 44 MiB) is mapped afresh and "
        "its pages faulted in each time (the system seconds above); below it, what is faulted in depends on "
        "what the process freed before. The separate passes paid page faults with glibc's settings in "
        f"{where} (kept / glibc {_span([kept_over_glibc('separate', key) for key in faulted])}), where the "
        "process was youngest; elsewhere they paid none, and kept / glibc "
        f"{_span([kept_over_glibc('separate', key) for key in both if key not in faulted])} is load (the "
        "regimes ran minutes apart, not alternated). The batched passes: kept / glibc "
        f"{_span([kept_over_glibc('batched', key) for key in both])}."
    )


def warm_up(size: str, shapes: Shapes, passes: int = 3) -> None:
    """Every pass of one seed, ``passes`` times, unmeasured: the allocator's state of a worker past its
    first steps (a fresh process faults in the pages of its first large allocations)."""
    model = build_tiny(size, seed=0)[0]
    for phase in PHASES:
        batch = make_batch(phase, 1, shapes.rows(phase), shapes, model.config.vocab_size)
        for _ in range(passes):
            run(phase, [Separate(model)], batch)


def main(argv: list[str] | None = None) -> None:
    ap = script_parser(__doc__, "python -m bench.perf.lockstep")
    ap.add_argument("--sizes", nargs="+", default=["tiny-500k", "tiny-2m"], help="tiny model sizes")
    ap.add_argument("--ks", nargs="+", type=int, default=[1, 2, 4, 8], help="seeds run in lockstep")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--out", default="results/benchmarks")
    args = ap.parse_args(argv)
    unknown = [s for s in args.sizes if s not in TINY_SIZES]
    if unknown:
        raise CreditBenchError(f"--sizes {' '.join(unknown)}: not a tiny size (valid: {', '.join(TINY_SIZES)})")
    if args.repeats < 1 or min(args.ks) < 1:
        raise CreditBenchError(f"--repeats and --ks must be >= 1, got {args.repeats} and {args.ks}")
    torch.set_num_threads(1)  # as a sweep's workers run
    shapes = Shapes()
    warm_up(args.sizes[0], shapes)
    data: dict[str, Any] = {
        "machine": machine(torch_threads=1),
        "command": "python -m bench.perf.lockstep " + " ".join(argv if argv is not None else sys.argv[1:]),
        "shapes": asdict(shapes),
        "sizes": args.sizes,
        "ks": args.ks,
        "repeats": args.repeats,
        "one_row": {size: one_row(size, shapes, args.repeats) for size in args.sizes},
        "regimes": {},
    }

    def every_size() -> list[dict[str, Any]]:
        return [row for size in args.sizes for row in measure(size, args.ks, shapes, args.repeats)]

    data["regimes"]["default"] = every_size()  # glibc's own settings, first
    if keep_freed_memory():  # from here on
        warm_up(args.sizes[0], shapes)  # the heap grows to what the mappings held
        data["regimes"]["kept"] = every_size()
        data["op_split"] = {size: op_split(size, max(args.ks), shapes) for size in args.sizes}
    data["notes"] = notes(data)
    md, js = write_outputs(args.out, "lockstep", markdown(data), data)
    print(f"wrote {md} and {js}")


if __name__ == "__main__":
    run_script(main, "python -m bench.perf.lockstep")
