"""Check that committed results are what the code at this commit produces: rerun a sweep from
scratch into a scratch folder and a scratch MLflow store, and compare its report with the committed
``results/<sweep>/report.json`` exactly, all but the wall times.

    python -m bench.report.reproduce results/sweeps/embedded-quick.yaml [--jobs 2] [--keep DIR]

CI runs it on the quick sweep, so a code change that moves the numbers fails until its results are
rerun and recommitted (``./run_all.sh --quick``). Exit status 0 when the reports match, 1 with one
line per differing value (the first 20) when they do not.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.errors import CreditBenchError

TIMING_KEYS = frozenset({"wall_s", "compute_s"})
"""Report keys that measure time on the machine that ran the sweep, not what the code computes."""


def differences(committed: Any, fresh: Any, path: str = "") -> list[str]:
    """Every place where two report JSON values differ, as ``path: committed != fresh`` lines;
    keys in TIMING_KEYS are skipped at any depth. Floats must be equal to the bit (NaN equals NaN)."""
    if isinstance(committed, dict) and isinstance(fresh, dict):
        out = []
        for key in sorted(set(committed) | set(fresh), key=str):
            if key in TIMING_KEYS:
                continue
            where = f"{path}.{key}" if path else str(key)
            if key not in committed or key not in fresh:
                out.append(f"{where}: only in the {'fresh' if key not in committed else 'committed'} report")
            else:
                out += differences(committed[key], fresh[key], where)
        return out
    if isinstance(committed, list) and isinstance(fresh, list):
        if len(committed) != len(fresh):
            return [f"{path}: {len(committed)} entries committed, {len(fresh)} fresh"]
        return [d for i, (a, b) in enumerate(zip(committed, fresh)) for d in differences(a, b, f"{path}[{i}]")]
    same = committed == fresh or (
        isinstance(committed, float) and isinstance(fresh, float) and math.isnan(committed) and math.isnan(fresh)
    )
    return [] if same else [f"{path}: {committed!r} committed != {fresh!r} fresh"]


def main(argv: list[str] | None = None) -> int:
    from bench.report.summary import write_report
    from bench.run.sweep import load_spec, run_sweep

    ap = argparse.ArgumentParser(prog="python -m bench.report.reproduce", description=__doc__.split("\n\n")[0])
    ap.add_argument("spec", help="a sweep spec whose results/<name>/report.json is committed")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--results-dir", default="results", help="where the committed report is (default results)")
    ap.add_argument("--keep", default=None, help="rerun into this folder (kept) instead of a temporary one")
    a = ap.parse_args(argv)
    sweep = load_spec(a.spec)
    committed_path = Path(a.results_dir) / sweep.name / "report.json"
    if not committed_path.is_file():
        raise CreditBenchError(f"no committed report at {committed_path}; run the sweep and commit it first")
    committed = json.loads(committed_path.read_text())
    with tempfile.TemporaryDirectory(prefix="creditbench-reproduce-") as tmp:
        out = Path(a.keep) if a.keep else Path(tmp)
        out.mkdir(parents=True, exist_ok=True)
        t0 = time.perf_counter()
        fresh = run_sweep(
            sweep, lambda s, d: write_report(s, d, plots=False), a.jobs, str(out), f"sqlite:///{out}/mlflow.db"
        )
        wall = time.perf_counter() - t0
    fresh = json.loads(json.dumps(fresh))  # as the committed file holds it (tuples as lists, keys as strings)
    diffs = differences(committed, fresh)
    if diffs:
        print(f"results/{sweep.name}/report.json is not what this code produces ({len(diffs)} differences):")
        for line in diffs[:20]:
            print(f"  {line}")
        print(f"rerun it (creditbench sweep {a.spec}) and commit the new results")
        return 1
    print(f"results/{sweep.name}/report.json reproduced exactly (all but wall times) in {wall:.0f} s")
    return 0


if __name__ == "__main__":
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    try:
        sys.exit(main())
    except CreditBenchError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
