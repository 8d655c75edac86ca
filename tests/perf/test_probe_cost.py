"""bench/perf/probe_cost.py: the useful positions its worker counts, the FLOP floor of each phase, the
report's words from its figures, and (slow) the benchmark end to end on a tiny probe, this checkout
against itself."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch
import yaml

from bench.perf import probe_cost as pc
from bench.perf.flagship_cost import model_flops

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench" / "perf" / "workers"))
import probe_batches  # noqa: E402


def test_positions_count_each_distinct_prompt_once():
    """Two rows share a 2-token prompt, a third has a 3-token one; completions of 2, 1 and 3 tokens."""
    prompt_ids = torch.tensor([[0, 5, 6], [0, 5, 6], [7, 8, 9]])
    prompt_mask = torch.tensor([[0, 1, 1], [0, 1, 1], [1, 1, 1]])
    completion_mask = torch.tensor([[1, 1, 0], [1, 0, 0], [1, 1, 1]])
    pos = probe_batches.positions(prompt_ids, prompt_mask, completion_mask)
    assert pos["positions"] == (2 + 3) + (2 + 1 + 3) and pos["logits"] == 6
    # prompts: 1+2 and 1+2+3; completions attend to their prompt and themselves: (2+1)+(2+2), (2+1), (3+1)+(3+2)+(3+3)
    assert pos["context"] == (3 + 6) + (3 + 4) + 3 + (4 + 5 + 6)


def test_the_floors_count_one_scoring_pass_a_shared_first_gradient_and_each_arms_j():
    run = {"model": "tiny-500k", "arms": 4, "labels": 2, "reference_pass": False,
           "positions": {"batch": {"positions": 100, "logits": 40, "context": 900},
                         "j": {"positions": 50, "logits": 20, "context": 300}}}  # fmt: skip
    f = model_flops("tiny-500k")
    batch = 100 * f["linear"] + 40 * f["logits"] + 900 * f["attention"]
    j = 50 * f["linear"] + 20 * f["logits"] + 300 * f["attention"]
    floor = pc.floors(run, rate=1e9)
    assert floor["scoring"] == floor["draw"] == batch / 1e9
    assert floor["update"] == pytest.approx(3 * batch * (2 + 4) / 2 / 1e9)  # half the batch once a label, half each arm
    assert floor["j"] == pytest.approx(4 * j / 1e9) and floor["blame"] == floor["other"] == 0
    assert pc.floors({**run, "reference_pass": True}, rate=1e9)["scoring"] == 2 * floor["scoring"]


def _summary(batch_s: float) -> dict:
    phases = dict.fromkeys(pc.PHASES, batch_s / len(pc.PHASES))
    return {"batch_s": batch_s, "batch_s_all": [batch_s], "pair_batch_s": batch_s, "phases": phases, "build_s": 0.9}


def test_the_report_says_what_the_figures_say():
    machine = {"gpu": None, "cpu": "x", "cpus": 2, "torch_threads": 1, "torch": "2"}
    data = {"machine": machine, "command": "python -m bench.perf.probe_cost", "batches": 8,
            "blame": 2, "reference": "r", "phase": 0.5, "seed": 0, "arms": 4, "pairs": 1, "repeats": 3,
            "gemm_flops": 9e10, "floor_s": dict.fromkeys(pc.PHASES, 0.1), "now": _summary(1.5),
            "baseline": _summary(3.0), "baseline_label": "abc", "same_records": True, "records": 32, "ratio": 0.5,
            "spec": "s.yaml", "whole": {"records": 2880, "same": True, "rounds": [{"a": 4}, {"a": 6}],
                                        "wall_s": 650.0, "committed_wall_s": 1300.0}}  # fmt: skip
    data["notes"] = pc.notes(data)
    md = pc.markdown(data)
    assert "**0.50x**" in md and "**yes**, to the bit (32 records)" in md
    assert "2880 records, the same as the committed ones to the bit, rounds 4 → 6 trajectories" in md
    assert "650 s of wall time against the committed 1300 s (**0.50x**)" in md
    assert "J after each arm's update (0.250 s, 2.5x its floor)" in md


@pytest.mark.slow
def test_the_benchmark_runs_a_tiny_probe_against_itself(tmp_path):
    from tests.paired.test_paired import SPEC

    spec = tmp_path / "probe-tiny.yaml"
    spec.write_text(yaml.safe_dump(SPEC))
    out = tmp_path / "out"
    pc.main(["--spec", str(spec), "--reference", "s_trace-twin", "--batches", "1", "--blame", "1", "--repeats", "1",
             "--baseline", str(ROOT), "--baseline_label", "here", "--out", str(out)])  # fmt: skip
    data = json.loads((out / "probe_cost.json").read_text())
    assert data["same_records"] and data["records"] == data["arms"] > 0
    assert all(v >= 0 for v in data["now"]["phases"].values() if v) and data["now"]["phases"]["j"] > 0
    assert "The same records: **yes**" in (out / "probe_cost.md").read_text()


def test_the_committed_report_is_rebuilt_from_its_json():
    data = json.loads((ROOT / "results" / "benchmarks" / "probe_cost.json").read_text())
    committed = (ROOT / "results" / "benchmarks" / "probe_cost.md").read_text()
    assert pc.markdown(data).rstrip("\n") + "\n" == committed
    assert data["same_records"] and data["ratio"] < 1  # the shared work kept every record
    apart = data["options_apart"]  # the options that move the bits moved only the last ones
    assert apart["same_batches"] == 1.0 and apart["dj_max_abs"] < 1e-3 and apart["records"] == data["records"]
    assert data.get("whole") is None or data["whole"]["same"]
