"""bench/perf/sweep_overhead.py: the runs' phases summed and the worker's share taken from the first run's
excess, and its committed report rebuilt from its json, with the same numbers in every sweep."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.perf import sweep_overhead as so

ROOT = Path(__file__).resolve().parents[2]


def test_the_first_runs_excess_over_the_others_is_the_workers_start():
    phases = {f"r{i}": {"fit": 10.0, "eval0": 1.0} for i in range(3)}
    done = [("r0", 14.0, 0.0), ("r1", 11.5, 0.0), ("r2", 11.5, 0.0)]  # 11 s of phases each; 0.5 s a request
    parts = so.run_parts(done, phases)
    assert parts["worker_start"] == pytest.approx(2.5) and parts["request"] == pytest.approx(1.5)
    assert parts["fit"] == 30.0 and parts["eval0"] == 3.0


def test_the_committed_report_is_rebuilt_from_its_json():
    data = json.loads((ROOT / "results" / "benchmarks" / "sweep_overhead.json").read_text())
    committed = (ROOT / "results" / "benchmarks" / "sweep_overhead.md").read_text()
    assert so.markdown(data).rstrip("\n") + "\n" == committed
    assert data["differences"] == [] and data["compared"] > 300  # the same numbers in every sweep
    assert data["now"]["wall_s"] < data["baseline"]["wall_s"]
