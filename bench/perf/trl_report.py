"""The report of the TRL benchmark (bench/perf/trl.py): its ratio table and its absolute figures, as
results/benchmarks/trl.md shows them."""

from __future__ import annotations

from bench.perf.trl_runs import CREDITBENCH_BEST, MAX_NEW, PROMPTS, G
from bench.script import machine_line, md_table
from bench.stats import format as fmt

PROG = "python -m bench.perf.trl"
RATIO_COLUMNS = (
    "size | params | setting | creditbench step s | TRL step s | step ratio | creditbench speed-up | tokens/s ratio "
    "| peak memory ratio | creditbench step / floor | TRL step / floor | floor s | CPU-time ratio "
    "| creditbench CPU / floor CPU"
)


def _size(r: dict) -> str:
    return r["size"] + (" (cut down)" if r.get("shape") else "")  # --shrink, or the CPU's smoke shape


def _extra_args(a) -> str:
    """The options beyond the first report's (its committed json has none of them) as they were given."""
    given = {"prompts": [] if getattr(a, "prompts", PROMPTS) == PROMPTS else [a.prompts]}
    given.update(runs=getattr(a, "runs", None) or [], shrink=getattr(a, "shrink", None) or [])
    return "".join(f" --{k} {' '.join(map(str, v))}" for k, v in given.items() if v)


def markdown(results: list[dict], host: dict, a, load: tuple, wall_s: float) -> str:
    busy = (
        f" (above {host['cpus']} CPUs: other work competed for the cores, so the times are inflated and noisy)"
        if load[2] > (host["cpus"] or 1) * 0.75
        else ""
    )
    device = getattr(a, "device", "cpu")  # the reports of CPU runs before --device have none
    device = "" if device == "cpu" else f" --device {device}"
    ratios = []
    for r in results:
        for label, name in (("matched", "matched"), ("best", "best vs TRL defaults")):
            if label not in r:  # a pair that did not run
                continue
            m = r[label]
            ratios.append(
                [
                    _size(r),
                    f"{r['params']:,}",
                    name,
                    f"{m['creditbench_step_s']:.3f}",
                    f"{m['trl_step_s']:.3f}",
                    f"{m['step_ratio']:.2f}",
                    f"{m['speedup']:.2f}x",
                    f"{m['tokens_per_s_ratio']:.2f}",
                    f"{m['peak_rss_ratio']:.2f}",
                    fmt.number(m["creditbench_over_floor"], ".2f"),
                    fmt.number(m["trl_over_floor"], ".2f"),
                    fmt.number(r["floor_s"], ".3f"),
                    f"{m['cpu_ratio']:.2f}",
                    fmt.number(m["creditbench_over_floor_cpu"], ".2f"),
                ]
            )
    absolute = [
        [
            _size(r),
            key,
            f"{m['step_s']:.3f} [{', '.join(f'{x:.3f}' for x in m['step_s_reps'])}]",
            f"{m['cpu_s']:.3f}",
            f"{m['tokens_per_s']:,.0f}",
            f"{m['peak_rss_mib']:,.0f}",
        ]
        for r in results
        for key, m in r["runs"].items()
    ]
    lines = [
        f"# creditbench against TRL's GRPOTrainer ({machine_line(host, 'transformers', 'trl')})",
        "",
        (
            f"`{PROG} --sizes {' '.join(a.sizes)} --reps {a.reps} --steps {a.steps} --warmup {a.warmup} "
            f"--threads {host['torch_threads']}{device}{_extra_args(a)}`. "
            "GRPO on arithmetic, "
            f"{getattr(a, 'prompts', PROMPTS)} prompts x G={G}, up to {MAX_NEW} new tokens at temperature 1, no KL, "
            "one optimizer step per generation batch, random weights (a tiny Qwen3, or the Hub architecture named) "
            "loaded from the same directory by both. Each figure is "
            f"the median over {a.reps} repetitions of one subprocess's median step after {a.warmup} warm-up steps "
            "(frameworks alternate within a repetition). **matched**: both fp32, no gradient checkpointing, "
            'seq-mean-token-mean aggregation (TRL `loss_type="grpo"`), the same AdamW code '
            f'(TRL `optim="{host.get("creditbench_adamw", "adamw_torch")}"`). **best vs defaults**: '
            "creditbench's fastest settings "
            f"({', '.join(f'{k}={v}' for k, v in CREDITBENCH_BEST.items())}) against TRL's defaults (bf16 autocast, "
            'gradient checkpointing, `loss_type="dapo"`, fused AdamW). Floor: bare `generate` + one '
            "forward/backward + AdamW step over the same tokens, fp32. Ratios are creditbench / TRL (step "
            "time and memory: lower is better for creditbench; tokens/s: higher). Peak memory is each "
            f"process's max RSS. CPU flags seen: {', '.join(host['cpu_flags']) or 'none'}; load average "
            f"(1 min) {load[0]:.1f} before, {load[1]:.1f} after, {load[2]:.1f} at most between runs{busy}; the whole "
            f"run took {wall_s / 60:.1f} min."
        ),
        "",
        *md_table(RATIO_COLUMNS, ratios, align="lrl" + "r" * 11),
        "",
        (
            "Absolute figures (median over repetitions; every repetition's step time in brackets). CPU s is "
            "the process's CPU time per step (all its torch threads; not the grader's worker processes): "
            "it moves much less than wall time when other work takes the cores."
        ),
        "",
        *md_table("size | run | step s | CPU s | tokens/s | peak RSS MiB", absolute, align="lllrrr"),
    ]
    return "\n".join(lines) + "\n"
