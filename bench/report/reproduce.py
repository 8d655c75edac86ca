"""Check that committed results are what the code at this commit produces: rerun a sweep from
scratch into a scratch folder and a scratch MLflow store, and compare its report with the committed
``results/<sweep>/report.json``.

    python -m bench.report.reproduce results/sweeps/embedded-quick.yaml [--jobs 2] [--keep DIR]
        [--mode auto|exact|statistical] [--alpha 0.05] [--labels LABEL ...] [--tuning]

Where the rerun's numerics stack (bench.bases.fingerprint: CPU code paths, BLAS, threads, library
versions) is the committed report's, the check is exact: every value equal to the bit, all but the
wall times and the machine. Elsewhere (``--mode auto``, the default) it is statistical
(bench.report.agreement): no verdict reversed, every difference and mean within its margin.
CI runs it on the quick sweep, so a code change that moves the numbers fails until its results are
rerun and recommitted (``./run_all.sh --quick``). Exit status 0 when the check passes, 1 with one
line per failing value (the first 20) when it does not.

``--labels`` reruns only those labels' committed runs (results/<sweep>/runs/<run>.json) and compares
each run's result with its committed one, exactly (all but its wall time and MLflow id): after a change
to a method's defaults, whether any committed number moves, at a fraction of the sweep's cost.
``--tuning`` does so for the spec's tuning sweep (results/<sweep>-tune/runs).
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

# run_all: run_all.sh's wall-time record; mlflow_run_id: a run's id in the store it was logged to
TIMING_KEYS = frozenset({"wall_s", "compute_s", "fingerprint", "run_all", "mlflow_run_id"})
"""Report keys that describe the machine that ran the sweep (its times, its fingerprint, compared on
its own), not what the code computes."""
MODES = ("auto", "exact", "statistical")


def numerics_differ(committed: dict, fresh: dict) -> list[str]:
    """The numerics fields (bench.bases.fingerprint) in which two reports' runs differ, as
    ``field: committed -> fresh``; a report without a fingerprint differs in ``fingerprint``."""
    a, b = (committed.get("fingerprint") or {}), (fresh.get("fingerprint") or {})
    if not a or not b or a.get("mixed") or b.get("mixed"):
        return ["fingerprint: missing or mixed in a report"]
    na, nb = a.get("numerics", {}), b.get("numerics", {})
    return [f"{k}: {na.get(k)} -> {nb.get(k)}" for k in sorted(set(na) | set(nb)) if na.get(k) != nb.get(k)]


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
    from bench.report.files import write_report
    from bench.sweep.launch import run_sweep
    from bench.sweep.sweep import load_spec

    ap = argparse.ArgumentParser(prog="python -m bench.report.reproduce", description=__doc__.split("\n\n")[0])
    ap.add_argument("spec", help="a sweep spec whose results/<name>/report.json is committed")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--results-dir", default="results", help="where the committed report is (default results)")
    ap.add_argument("--keep", default=None, help="rerun into this folder (kept) instead of a temporary one")
    ap.add_argument("--mode", choices=MODES, default="auto", help="exact where the numerics match (auto), or force one")
    ap.add_argument("--alpha", type=float, default=0.05, help="family-wise level of the statistical check")
    ap.add_argument("--fresh-report", default=None, help="check this report.json instead of rerunning the sweep")
    ap.add_argument("--labels", nargs="+", default=None, help="rerun only these labels' committed runs, run by run")
    ap.add_argument("--tuning", action="store_true", help="with --labels: the spec's tuning sweep's runs")
    a = ap.parse_args(argv)
    if a.tuning and not a.labels:
        raise CreditBenchError("--tuning reruns a tuning sweep's labels: give them with --labels")
    if a.labels:
        return rerun_labels(load_spec(a.spec, a.results_dir, tuning=a.tuning), a)
    sweep = load_spec(a.spec)
    committed_path = Path(a.results_dir) / sweep.name / "report.json"
    if not committed_path.is_file():
        raise CreditBenchError(f"no committed report at {committed_path}; run the sweep and commit it first")
    committed = json.loads(committed_path.read_text())
    if a.fresh_report:
        fresh, wall = json.loads(Path(a.fresh_report).read_text()), 0.0
    else:
        with tempfile.TemporaryDirectory(prefix="creditbench-reproduce-") as tmp:
            out = Path(a.keep) if a.keep else Path(tmp)
            out.mkdir(parents=True, exist_ok=True)
            t0 = time.perf_counter()
            fresh = _rerun(out / sweep.name / "logs", lambda: run_sweep(
                sweep, lambda s, d: write_report(s, d, plots=False), a.jobs, str(out), f"sqlite:///{out}/mlflow.db"
            ))  # fmt: skip
            wall = time.perf_counter() - t0
        fresh = json.loads(json.dumps(fresh))  # as the committed file holds it (tuples as lists, keys as strings)
    return check(sweep.name, a.spec, committed, fresh, a.mode, a.alpha, wall)


def rerun_labels(sweep, a) -> int:
    """Rerun the committed runs of ``a.labels`` in a scratch folder and compare each run's result with its
    committed one exactly; the exit status."""
    import dataclasses

    from bench.sweep.launch import run_sweep
    from bench.sweep.sweep import result_path

    unknown = sorted(set(a.labels) - set(sweep.labels))
    if unknown:
        raise CreditBenchError(f"labels {', '.join(unknown)} are not in sweep {sweep.name}: {', '.join(sweep.labels)}")
    runs = [r for r in sweep.runs if r.label in a.labels and result_path(a.results_dir, sweep.name, r.key).is_file()]
    if not runs:
        raise CreditBenchError(f"no committed runs of {', '.join(a.labels)} under {a.results_dir}/{sweep.name}/runs")
    subset = dataclasses.replace(sweep, runs=runs)
    with tempfile.TemporaryDirectory(prefix="creditbench-reproduce-") as tmp:
        out = Path(a.keep) if a.keep else Path(tmp)
        out.mkdir(parents=True, exist_ok=True)
        t0 = time.perf_counter()
        _rerun(out / sweep.name / "logs", lambda: run_sweep(
            subset, lambda s, d: {}, a.jobs, str(out), f"sqlite:///{out}/mlflow.db"
        ))  # fmt: skip
        diffs = []
        for r in runs:
            committed = json.loads(result_path(a.results_dir, sweep.name, r.key).read_text())
            fresh = json.loads(result_path(out, sweep.name, r.key).read_text())
            diffs += [f"{r.key}: {d}" for d in differences(committed, fresh)]
    wall = time.perf_counter() - t0
    if diffs:
        print(f"{len(diffs)} difference(s) in {len(runs)} runs of {', '.join(a.labels)} (sweep {sweep.name}):")
        for line in diffs[:20]:
            print(f"  {line}")
        return 1
    print(f"{len(runs)} runs of {', '.join(a.labels)} (sweep {sweep.name}) reproduced exactly in {wall:.0f} s")
    return 0


def _rerun(logs: Path, run) -> dict:
    """``run()`` (the sweep), and once more where a run of it failed: the sweep resumes, redoing only
    the failed runs, whose numbers are what an uninterrupted run gives (a run that fails for its own
    reasons fails again, and the check with it); a failure of the machine (a store locked by the
    other worker's first write) is not a difference in the numbers."""
    try:
        return run()
    except CreditBenchError as e:
        if "runs failed" not in str(e):
            raise
        for log in sorted(logs.glob("*.log")):  # what the failed run said, for whoever reads CI's output
            tail = log.read_text(errors="replace").splitlines()[-12:]
            if any("Error" in line for line in tail):
                print(f"--- {log.name}\n" + "\n".join(tail), file=sys.stderr)
        print(f"{e}; running the sweep once more (its finished runs are kept)", file=sys.stderr)
        return run()


def check(name: str, spec: str, committed: dict, fresh: dict, mode: str, alpha: float, wall: float) -> int:
    """Print the verdict of comparing a fresh report with the committed one; the exit status."""
    from bench.report.agreement import agreement

    differ = numerics_differ(committed, fresh)
    if mode == "exact" or (mode == "auto" and not differ):
        diffs = differences(committed, fresh)
        if diffs:
            print(f"results/{name}/report.json is not what this code produces ({len(diffs)} differences):")
            for line in diffs[:20]:
                print(f"  {line}")
            print(f"rerun it (creditbench sweep {spec}) and commit the new results")
            return 1
        print(f"results/{name}/report.json reproduced exactly (all but wall times) in {wall:.0f} s")
        return 0
    if differ:
        print(f"the numerics differ from the committed report's ({'; '.join(differ)}): a statistical check")
    result = agreement(committed, fresh, alpha)
    failing = [line for line in result.lines if "DISAGREES" in line or "reversed" in line or "only in" in line]
    for line in (failing or result.lines)[:20]:
        print(f"  {line}")
    if failing:
        print(
            f"results/{name}/report.json is not reproduced statistically ({len(failing)} of {len(result.lines)} "
            f"quantities fail at family-wise alpha {alpha}, z = {result.z:.2f}); see docs/reproducibility.md"
        )
        return 1
    print(
        f"results/{name}/report.json reproduced statistically: {len(result.lines)} quantities agree at family-wise "
        f"alpha {alpha} (z = {result.z:.2f}), no verdict reversed, in {wall:.0f} s"
    )
    return 0


if __name__ == "__main__":
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    try:
        sys.exit(main())
    except CreditBenchError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
