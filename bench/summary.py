"""A sweep's summary: one row per run (results/<sweep>/summary.csv) and the same as Markdown."""

from __future__ import annotations

import csv
import json
from pathlib import Path

from bench.errors import CreditBenchError

COLUMNS = ["method", "task", "model", "params", "seed", "steps", "samples", "tokens", "wall_s",
           "base_pass_at_1", "base_pass_at_1_se", "final_pass_at_1", "final_pass_at_1_se",
           "delta_pass_at_1", "delta_se", "delta_z", "k", "base_pass_at_k", "final_pass_at_k",
           "final_mean_length", "final_tokens_per_correct", "mlflow_run_id"]


def rows(results_dir: str, sweep: str) -> list[dict]:
    runs = sorted((Path(results_dir) / sweep / "runs").glob("*.json"))
    if not runs:
        raise CreditBenchError(f"no finished runs under {Path(results_dir) / sweep / 'runs'}; run the sweep first")
    out = []
    for path in runs:
        r = json.loads(path.read_text())
        b, f, d = r["base"], r["final"], r["delta_pass_at_1"]
        k = max(int(key.split("_")[-1]) for key in f if key.startswith("pass_at_") and not key.endswith("_se"))
        out.append({
            "method": r["method"] + (f" (LoRA r{r['lora_rank']})" if r.get("lora_rank") else ""),
            "task": r["task"], "model": r["model"], "params": r["params"], "seed": r["seed"],
            "steps": r["steps"], "samples": r["samples"], "tokens": r["tokens"], "wall_s": r["wall_s"],
            "base_pass_at_1": b["pass_at_1"], "base_pass_at_1_se": b["pass_at_1_se"],
            "final_pass_at_1": f["pass_at_1"], "final_pass_at_1_se": f["pass_at_1_se"],
            "delta_pass_at_1": d["delta"], "delta_se": d["se"], "delta_z": d["z"], "k": k,
            "base_pass_at_k": b[f"pass_at_{k}"], "final_pass_at_k": f[f"pass_at_{k}"],
            "final_mean_length": f["mean_length"], "final_tokens_per_correct": f["tokens_per_correct"],
            "mlflow_run_id": r["mlflow_run_id"],
        })
    return sorted(out, key=lambda x: (x["task"], x["params"], x["method"], x["seed"]))


def summarize(results_dir: str, sweep: str) -> str:
    table = rows(results_dir, sweep)
    out = Path(results_dir) / sweep / "summary.csv"
    with open(out.with_suffix(".csv.tmp"), "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=COLUMNS)
        w.writeheader()
        w.writerows(table)
    out.with_suffix(".csv.tmp").replace(out)
    md = ["| method | task | model | seed | base pass@1 | final pass@1 | delta (paired SE, z) | pass@k base -> final "
          "| samples | tokens | wall s |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in table:
        md.append(f"| {r['method']} | {r['task']} | {r['model']} | {r['seed']} "
                  f"| {r['base_pass_at_1']:.3f} ± {r['base_pass_at_1_se']:.3f} "
                  f"| {r['final_pass_at_1']:.3f} ± {r['final_pass_at_1_se']:.3f} "
                  f"| {r['delta_pass_at_1']:+.3f} ({r['delta_se']:.3f}, z={r['delta_z']:.1f}) "
                  f"| @{r['k']}: {r['base_pass_at_k']:.3f} -> {r['final_pass_at_k']:.3f} "
                  f"| {r['samples']} | {r['tokens']} | {r['wall_s']:.0f} |")
    text = "\n".join(md)
    (Path(results_dir) / sweep / "summary.md").write_text(text + "\n")
    return f"{text}\n\nwritten: {out}"
