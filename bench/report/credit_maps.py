"""Per-method table of a sweep: pass@1 before and after, and where each method put its credit.

    python -m bench.report.credit_maps --sweep methods [--uri sqlite:///mlflow.db] [--out results/methods/credit.md]

Reads the sweep's runs from MLflow (tag ``sweep``): the first and last ``eval/<task>/pass_at_1``,
the mean over training steps of every ``credit/*`` diagnostic, the largest gradient norm, and the
number of steps whose loss or gradient norm was not finite.
"""

from __future__ import annotations

import argparse
import math
import os
from pathlib import Path

COLUMNS = [
    "credit/gini",
    "credit/effective_token_ratio",
    "credit/nonzero_frac",
    "credit/mass_early",
    "credit/mass_middle",
    "credit/mass_late",
]


def rows(uri: str, sweep: str, experiment: str = "creditbench") -> list[dict]:
    import mlflow

    client = mlflow.MlflowClient(uri)
    exp = client.get_experiment_by_name(experiment)
    if exp is None:
        return []
    out = []
    for run in client.search_runs([exp.experiment_id], f"tags.sweep = '{sweep}'", order_by=["attributes.start_time"]):
        if run.info.status != "FINISHED":
            continue
        rid, tags = run.info.run_id, run.data.tags
        task = tags.get("task", "")
        evals = client.get_metric_history(rid, f"eval/{task}/pass_at_1")
        evals.sort(key=lambda m: m.step)
        if not evals:  # the sweep's parent run (no task of its own)
            continue
        row = {
            "run": tags.get("mlflow.runName", rid),
            "method": tags.get("method"),
            "lora": tags.get("lora_rank", "0"),
            "base": evals[0].value,
            "final": evals[-1].value,
            "samples": run.data.metrics.get("train/samples"),
        }
        for key in COLUMNS:
            hist = [m.value for m in client.get_metric_history(rid, key)]
            row[key] = abs(sum(hist) / len(hist)) if hist else float("nan")  # all >= 0; abs drops a rounding -0
        losses = client.get_metric_history(rid, "loss/total")
        norms = client.get_metric_history(rid, "train/grad_norm")
        steps = {m.step for m in losses}
        finite = {m.step for m in losses if math.isfinite(m.value)} & {m.step for m in norms if math.isfinite(m.value)}
        row["steps"], row["nonfinite"] = len(steps), len(steps - finite)
        row["max_grad_norm"] = max((m.value for m in norms), default=float("nan"))
        out = [r for r in out if r["run"] != row["run"]] + [row]  # a rerun replaces the earlier run
    return out


def table(rs: list[dict]) -> str:
    lines = [
        "| run | method | LoRA r | pass@1 base -> final | samples | steps (non-finite) | max grad norm | "
        "Gini | eff. token ratio | nonzero | mass early / mid / late |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rs:
        lines.append(
            f"| {r['run']} | {r['method']} | {r['lora']} | {r['base']:.3f} -> {r['final']:.3f} | {r['samples']:.0f} | "
            f"{r['steps']} ({r['nonfinite']}) | {r['max_grad_norm']:.2f} | {r['credit/gini']:.3f} | "
            f"{r['credit/effective_token_ratio']:.3f} | {r['credit/nonzero_frac']:.3f} | "
            f"{r['credit/mass_early']:.2f} / {r['credit/mass_middle']:.2f} / {r['credit/mass_late']:.2f} |"
        )
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sweep", required=True)
    ap.add_argument("--uri", default=os.environ.get("MLFLOW_TRACKING_URI", "sqlite:///mlflow.db"))
    ap.add_argument("--out", default=None, help="default: results/<sweep>/credit.md")
    a = ap.parse_args()
    rs = rows(a.uri, a.sweep)
    if not rs:
        raise SystemExit(f"credit_report: error: no finished runs with tag sweep={a.sweep!r} in {a.uri}")
    text = table(rs)
    out = Path(a.out or f"results/{a.sweep}/credit.md")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
