"""Per-method table of a sweep: pass@1 before and after, and where each method put its credit.

    creditbench credit-maps --sweep methods [--results_dir results] [--out results/methods/credit.md]

Reads the sweep's run summaries (results/<sweep>/runs/*.json, as the report does), in the order of
the spec the sweep ran: the first and last eval pass@1 of the training task, the means over the RL
steps of the ``credit/*`` diagnostics (bench.engine.diagnostics; ``RunResult.train``), the largest
gradient norm and the number of updates skipped for a non-finite loss or gradient.
"""

from __future__ import annotations

import math
from pathlib import Path

from bench.run.result import RunResult

COLUMNS = [
    "credit_gini",
    "credit_effective_token_ratio",
    "credit_nonzero_frac",
    "credit_mass_early",
    "credit_mass_middle",
    "credit_mass_late",
]
"""The credit diagnostics of the table: their keys in ``RunResult.train``."""


def rows(results_dir: str | Path, sweep: str) -> list[dict]:
    """One row per finished run of the sweep (those of the spec it ran, in its order, where the
    sweep's folder keeps a copy of the spec)."""
    from bench.report.summary import load_runs

    runs = load_runs(str(results_dir), sweep)
    spec = Path(results_dir) / sweep / "sweep.yaml"
    if spec.is_file():
        from bench.sweep.sweep import load_spec

        order = {r.key: i for i, r in enumerate(load_spec(spec).runs)}
        runs = sorted((r for r in runs if r.run_name in order), key=lambda r: order[r.run_name]) or runs
    return [_row(r) for r in runs]


def _row(r: RunResult) -> dict:
    history = [e.eval[r.task]["pass_at_1"] for e in r.history if r.task in e.eval]
    row = {"run": r.run_name, "method": r.method, "lora": r.lora_rank, "samples": r.samples, "steps": r.steps}
    row |= {"base": history[0], "final": history[-1]}
    row["nonfinite"] = int(r.train.get("train_skipped_updates", 0))
    row["max_grad_norm"] = r.train.get("train_grad_norm_max", math.nan)
    for key in COLUMNS:  # every one >= 0; abs drops a rounding -0
        row[key] = abs(r.train[key]) if key in r.train else math.nan
    return row


def table(rs: list[dict]) -> str:
    lines = [
        "| run | method | LoRA r | pass@1 base -> final | samples | steps (non-finite) | max grad norm | "
        "Gini | eff. token ratio | nonzero | mass early / mid / late |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rs:
        lines.append(
            f"| {r['run']} | {r['method']} | {r['lora']} | {r['base']:.3f} -> {r['final']:.3f} | {r['samples']:.0f} | "
            f"{r['steps']} ({r['nonfinite']}) | {r['max_grad_norm']:.2f} | {r['credit_gini']:.3f} | "
            f"{r['credit_effective_token_ratio']:.3f} | {r['credit_nonzero_frac']:.3f} | "
            f"{r['credit_mass_early']:.2f} / {r['credit_mass_middle']:.2f} / {r['credit_mass_late']:.2f} |"
        )
    return "\n".join(lines)
