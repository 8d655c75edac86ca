"""bench/studies/segment_design.py: a segment's statistics by hand on a probe of three trajectories (the
trajectories and updates a tenth of the control's gain asks for, whether k = 2 pays over k = 1, the samples
the arms still share); its committed report rebuilt from its json; a probe without segments or a folder
without records refused in one line with nothing written."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.errors import CreditBenchError
from bench.studies import segment_design as sd

ROOT = Path(__file__).resolve().parents[2]


def _records(label: str, gains: dict[int, list[float]], rows: dict[int, list[int]]) -> list[dict]:
    return [{"reference": "m-twin", "seed": seed, "phase": 0.0, "segment": 0, "label": label, "lr": 1e-4, "k": k,
             "dj": gain, "rows": rows[k]} for k, per in gains.items() for seed, gain in enumerate(per)]  # fmt: skip


def _probe(tmp_path: Path) -> Path:
    tmp_path.mkdir(exist_ok=True)
    segments = _records("m", {1: [1.1, 1.2, 1.3], 2: [2.2, 2.3, 2.4]}, {1: [1, 2, 3, 4], 2: [1, 2, 3, 4]})
    segments += _records("m-twin", {1: [1.0, 1.0, 1.0], 2: [2.0, 2.0, 2.0]}, {1: [1, 2, 3, 4], 2: [1, 2, 5, 6]})
    plan = {"options": {"lrs": [1e-4]}, "pairs": [{"method": "m", "control": "m-twin"}]}
    folder = tmp_path / "probe"
    folder.mkdir()
    # single updates: 2 batches at one checkpoint of each trajectory; the control gains 1.0 on each, the method
    # 1.0 and 1.2, 1.2 and 1.2, 1.2 and 1.4: trajectory values 0.1, 0.2, 0.3
    updates = [{"reference": "m-twin", "seed": seed, "phase": 0.0, "batch": b, "label": label, "lr": 1e-4, "dj": dj}
               for label, per in (("m", [[1.0, 1.2], [1.2, 1.2], [1.2, 1.4]]), ("m-twin", [[1.0, 1.0]] * 3))
               for seed, gains in enumerate(per) for b, dj in enumerate(gains)]  # fmt: skip
    probe = {"plan": plan, "model": "tiny-2m", "segments": segments, "updates": updates}
    (folder / "updates.json").write_text(json.dumps(probe))
    return folder


def test_a_segments_statistics_by_hand(tmp_path):
    one, two = sd.rows(sd.load(_probe(tmp_path)))
    # k = 1: d = 0.1, 0.2, 0.3 (SD 0.1), g = 1: the fewest T with t(0.975, T-1) 0.1 / sqrt(T) <= 0.1 is 7
    # (T = 6: 2.571 / 2.449 = 1.05; T = 7: 2.447 / 2.646 = 0.92); 7 trajectories x 1 segment x 1 update x 2 arms
    assert (one["k"], one["trajectories"], one["df"], one["shared"]) == (1, 3, 2, 1.0)
    assert (one["gain"], one["diff"], one["sd_diff"]) == pytest.approx((1.0, 0.2, 0.1))
    assert (one["trajectories_for_target"], one["updates_for_target"], one["pays"]) == (7, 14, 1.0)
    # k = 2: d = 0.2, 0.3, 0.4 (SD 0.1), g = 2: t/sqrt(T) <= 2 first at T = 4 (3.182 / 2 = 1.59); 4 x 2 x 2 = 16
    assert (two["gain"], two["diff"], two["sd_diff"], two["shared"]) == pytest.approx((2.0, 0.3, 0.1, 0.5))
    assert (two["trajectories_for_target"], two["updates_for_target"]) == (4, 16)
    assert two["pays"] == pytest.approx(14 / 16)
    # the single updates: SD 0.1, g = 1: 7 trajectories x 2 updates a trajectory x 2 arms
    (single,) = sd.rows(sd.load(_probe(tmp_path / "u"), "updates"), "updates")
    assert (single["design"], single["k"], single["segments_per_trajectory"], single["shared"]) == ("updates", 1, 2, 1)
    assert (single["diff"], single["sd_diff"]) == pytest.approx((0.2, 0.1))
    assert (single["trajectories_for_target"], single["updates_for_target"], single["pays"]) == (7, 28, None)
    assert sd.trajectories_for(1.0, 0.0) is None and sd.trajectories_for(1e6, 1e-6) is None


def test_the_study_writes_its_report_and_refuses_a_probe_without_segments(tmp_path, capsys):
    out = tmp_path / "out"
    sd.main([str(_probe(tmp_path)), "--out", str(out)])
    data = json.loads((out / "segment_design.json").read_text())
    assert sd.markdown(data) == (out / "segment_design.md").read_text()
    row = (
        "| tiny-2m | 1 segments | m vs m-twin | 0.0001 | 2 | 3 (2) | 0.50 | +2.000 [+2.000, +2.000] | +0.300 | 0.100 |"
    )
    assert row + " 4 | 16 | 0.9x |" in (out / "segment_design.md").read_text()
    bare = tmp_path / "bare"
    bare.mkdir()
    with pytest.raises(CreditBenchError, match="updates.json not found: give a probe's folder"):
        sd.main([str(bare), "--out", str(tmp_path / "none")])
    (bare / "updates.json").write_text(json.dumps({"plan": {}, "segments": []}))
    with pytest.raises(CreditBenchError, match="has no segments: run the probe with segments"):
        sd.main([str(bare), "--out", str(tmp_path / "none")])
    assert not (tmp_path / "none").exists()


def test_the_committed_report_is_rebuilt_from_its_json():
    md = ROOT / "results" / "benchmarks" / "segment_design.md"
    data = json.loads(md.with_suffix(".json").read_text())
    assert sd.markdown(data) == md.read_text()
    assert {r["k"] for r in data["rows"]} >= {1, 2}
