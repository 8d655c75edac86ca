"""Check that committed results are what the code at this commit produces: rerun a sweep from
scratch into a scratch folder and a scratch MLflow store, and compare its report with the committed
``results/<sweep>/report.json``.

    creditbench reproduce results/sweeps/embedded-quick.yaml [--jobs 2] [--keep DIR]
        [--mode auto|exact|statistical] [--alpha 0.05] [--labels LABEL ...] [--tuning]

Where the rerun's numerics stack (bench.environment.fingerprint: CPU code paths, BLAS, threads, library
versions) is the committed report's, the check is exact: every value equal to the bit, all but the
wall times and the machine. Elsewhere (``--mode auto``, the default) it is statistical
(bench.reproduce.agreement): no verdict reversed, every difference and mean within its margin.
CI runs it on the quick sweep, so a code change that moves the numbers fails until its results are
rerun and recommitted (``./run_all.sh --quick``). Exit status 0 when the check passes, 1 with one
line per failing value (the first 20) when it does not.

``--labels`` reruns only those labels' committed runs (results/<sweep>/runs/<run>.json) and compares
each run's result with its committed one, exactly (all but its wall time and MLflow id): after a change
to a method's defaults, whether any committed number moves, at a fraction of the sweep's cost.
``--tuning`` does so for the spec's tuning sweep (results/<sweep>-tune/runs).
"""

from __future__ import annotations

import json
import math
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.errors import CreditBenchError

# run_all: run_all.sh's wall-time record; mlflow_run_id: a run's id in the store it was logged to
TIMING_KEYS = frozenset({"wall_s", "compute_s", "fingerprint", "run_all", "mlflow_run_id"})
# base_eval_reused: whether a run's base eval came from the cache its seed's first run filled. Which run
# of a seed fills it depends on which labels run, so a rerun of some labels (rerun_labels) computes it where
# the whole sweep reused it; its values are compared all the same
SCHEDULE_KEYS = frozenset({"base_eval_reused"})
"""Report keys that describe the machine that ran the sweep (its times, its fingerprint, compared on
its own), not what the code computes."""
MODES = ("auto", "exact", "statistical")


def numerics_differ(committed: dict, fresh: dict) -> list[str]:
    """The numerics fields (bench.environment.fingerprint) in which two reports' runs differ, as
    ``field: committed -> fresh``; a report without a fingerprint differs in ``fingerprint``."""
    a, b = (committed.get("fingerprint") or {}), (fresh.get("fingerprint") or {})
    if not a or not b or a.get("mixed") or b.get("mixed"):
        return ["fingerprint: missing or mixed in a report"]
    na, nb = a.get("numerics", {}), b.get("numerics", {})
    return [f"{k}: {na.get(k)} -> {nb.get(k)}" for k in sorted(set(na) | set(nb)) if na.get(k) != nb.get(k)]


def differences(committed: Any, fresh: Any, path: str = "", skip: frozenset[str] = TIMING_KEYS) -> list[str]:
    """Every place where two report JSON values differ, as ``path: committed != fresh`` lines;
    keys in ``skip`` are skipped at any depth. Floats must be equal to the bit (NaN equals NaN)."""
    if isinstance(committed, dict) and isinstance(fresh, dict):
        out = []
        for key in sorted(set(committed) | set(fresh), key=str):
            if key in skip:
                continue
            where = f"{path}.{key}" if path else str(key)
            if key not in committed or key not in fresh:
                out.append(f"{where}: only in the {'fresh' if key not in committed else 'committed'} report")
            else:
                out += differences(committed[key], fresh[key], where, skip)
        return out
    if isinstance(committed, list) and isinstance(fresh, list):
        if len(committed) != len(fresh):
            return [f"{path}: {len(committed)} entries committed, {len(fresh)} fresh"]
        return [d for i, (a, b) in enumerate(zip(committed, fresh)) for d in differences(a, b, f"{path}[{i}]", skip)]
    same = committed == fresh or (
        isinstance(committed, float) and isinstance(fresh, float) and math.isnan(committed) and math.isnan(fresh)
    )
    return [] if same else [f"{path}: {committed!r} committed != {fresh!r} fresh"]


def rerun_sweep(
    spec: str,
    results_dir: str = "results",
    jobs: int = 2,
    keep: str | None = None,
    mode: str = "auto",
    alpha: float = 0.05,
    fresh_report: str | None = None,
) -> int:
    """Rerun the sweep ``spec`` from scratch (into ``keep``, else a temporary folder) and :func:`check`
    its report against the committed one under ``results_dir`` (or check ``fresh_report`` instead of
    rerunning); the exit status."""
    from bench.report.files import write_report
    from bench.sweep.launch import run_sweep
    from bench.sweep.sweep import load_spec, report_path

    sweep = load_spec(spec)
    committed_path = report_path(results_dir, sweep.name)
    if not committed_path.is_file():
        raise CreditBenchError(f"no committed report at {committed_path}; run the sweep and commit it first")
    committed = json.loads(committed_path.read_text())
    if fresh_report:
        fresh, wall = json.loads(Path(fresh_report).read_text()), 0.0
    else:
        with tempfile.TemporaryDirectory(prefix="creditbench-reproduce-") as tmp:
            out = Path(keep) if keep else Path(tmp)
            out.mkdir(parents=True, exist_ok=True)
            t0 = time.perf_counter()
            fresh = _rerun(out / sweep.name / "logs", lambda: run_sweep(
                sweep, lambda s, d: write_report(s, d, plots=False), jobs, str(out), f"sqlite:///{out}/mlflow.db"
            ))  # fmt: skip
            wall = time.perf_counter() - t0
        fresh = json.loads(json.dumps(fresh))  # as the committed file holds it (tuples as lists, keys as strings)
    return check(sweep.name, spec, committed, fresh, mode, alpha, wall)


def rerun_labels(sweep, labels: list[str], results_dir: str = "results", jobs: int = 2, keep: str | None = None) -> int:
    """Rerun the committed runs of ``labels`` in a scratch folder (``keep``, else a temporary one) and
    compare each run's result with its committed one exactly; the exit status."""
    import dataclasses

    from bench.run.result import result_path
    from bench.sweep.launch import run_sweep

    unknown = sorted(set(labels) - set(sweep.labels))
    if unknown:
        raise CreditBenchError(f"labels {', '.join(unknown)} are not in sweep {sweep.name}: {', '.join(sweep.labels)}")
    runs = [r for r in sweep.runs if r.label in labels and result_path(results_dir, sweep.name, r.key).is_file()]
    if not runs:
        raise CreditBenchError(f"no committed runs of {', '.join(labels)} under {results_dir}/{sweep.name}/runs")
    subset = dataclasses.replace(sweep, runs=runs)
    with tempfile.TemporaryDirectory(prefix="creditbench-reproduce-") as tmp:
        out = Path(keep) if keep else Path(tmp)
        out.mkdir(parents=True, exist_ok=True)
        t0 = time.perf_counter()
        _rerun(out / sweep.name / "logs", lambda: run_sweep(
            subset, lambda s, d: {}, jobs, str(out), f"sqlite:///{out}/mlflow.db"
        ))  # fmt: skip
        diffs = []
        for r in runs:
            committed = json.loads(result_path(results_dir, sweep.name, r.key).read_text())
            fresh = json.loads(result_path(out, sweep.name, r.key).read_text())
            diffs += [f"{r.key}: {d}" for d in differences(committed, fresh, skip=TIMING_KEYS | SCHEDULE_KEYS)]
    wall = time.perf_counter() - t0
    if diffs:
        print(f"{len(diffs)} difference(s) in {len(runs)} runs of {', '.join(labels)} (sweep {sweep.name}):")
        for line in diffs[:20]:
            print(f"  {line}")
        return 1
    print(f"{len(runs)} runs of {', '.join(labels)} (sweep {sweep.name}) reproduced exactly in {wall:.0f} s")
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
    from bench.reproduce.agreement import agreement

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
