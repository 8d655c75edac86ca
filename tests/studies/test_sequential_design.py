"""bench/studies/sequential_design.py: its committed report rebuilt from its json and within the error it
promises, and bad input refused in one line with nothing written."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from bench.studies import sequential_design as sd

ROOT = Path(__file__).resolve().parents[2]


def test_the_committed_report_is_rebuilt_from_its_json_and_keeps_the_error_at_alpha():
    data = json.loads((ROOT / "results" / "benchmarks" / "sequential_design.json").read_text())
    assert sd.markdown(data) == (ROOT / "results" / "benchmarks" / "sequential_design.md").read_text()
    se = math.sqrt(data["alpha"] * (1 - data["alpha"]) / data["sims"])
    for kind, scenarios in data["results"].items():
        for name, r in scenarios.items():
            assert r["family_error"] <= data["alpha"] + 2 * se, (kind, name)
            assert max(r["p"]["equivalent"]) <= data["alpha"] + 2 * se or name != "effect"
    flagship = json.loads((ROOT / "results" / "embedded" / "report.json").read_text())["analysis"]["sequential"]
    assert data["schedule"]["cap"] == flagship["analysis"]["schedule"]["cap"]  # the flagship's own schedule


@pytest.mark.parametrize(
    "args, message",
    [
        (["--sims", "5"], "--sims must be >= 100"),
        (["--sweep", "nope"], "no finished sweep 'nope' under results to measure"),
    ],
)
def test_bad_input_is_one_line_and_writes_nothing(tmp_path, capsys, monkeypatch, args, message):
    monkeypatch.chdir(ROOT)
    with pytest.raises(SystemExit) as exit_:
        sd.run_script(
            lambda: sd.main([*args, "--out", str(tmp_path / "out")]), "python -m bench.studies.sequential_design"
        )
    assert exit_.value.code == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1
    assert not (tmp_path / "out").exists()
