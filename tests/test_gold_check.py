"""``python -m bench.gold_check`` rebuilds its committed report (results/tasks/gold_check.md) from its json."""

import json
from pathlib import Path

RESULTS = Path(__file__).resolve().parents[1] / "results"


def test_gold_check_rebuilds_its_committed_report_exactly():
    from bench.gold_check import markdown

    results = json.loads((RESULTS / "tasks" / "gold_check.json").read_text())
    assert markdown(results) == (RESULTS / "tasks" / "gold_check.md").read_text()
