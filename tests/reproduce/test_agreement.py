"""The reproduction check: exact where the numerics stacks match, statistical elsewhere (no verdict
reversed, every difference within its margin, no row missing). docs/reproducibility.md."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from bench.reproduce.agreement import agreement
from bench.reproduce.rerun import check, numerics_differ

COMMITTED = Path(__file__).resolve().parents[2] / "results" / "embedded-quick" / "report.json"


@pytest.fixture
def report():
    return json.loads(COMMITTED.read_text())


def test_the_statistical_check_passes_the_committed_report_against_itself(report):
    result = agreement(report, copy.deepcopy(report))
    assert result.ok and len(result.lines) == len(report["analysis"]["assessment"]["rows"]) + 2 * len(report["rows"])


def test_the_statistical_check_fails_a_reversed_verdict(report):
    """Even where the intervals overlap: a label called worse than the baseline in one report and
    better in the other is a different conclusion."""
    committed, fresh = copy.deepcopy(report), copy.deepcopy(report)
    committed["analysis"]["assessment"]["rows"][0]["verdict"] = "worse"
    fresh["analysis"]["assessment"]["rows"][0]["verdict"] = "better"
    result = agreement(committed, fresh)
    assert not result.ok
    assert any("verdict reversed" in line for line in result.lines)


def test_the_statistical_check_fails_a_shifted_effect_and_a_missing_row(report):
    fresh = copy.deepcopy(report)
    row = fresh["analysis"]["assessment"]["rows"][0]
    row["diff"]["value"] += 6 * row["diff"]["se"]  # beyond z * sqrt(2) * se for any family here
    assert not agreement(report, fresh).ok
    fresh = copy.deepcopy(report)
    fresh["rows"].pop()
    assert any("only in the committed" in line for line in agreement(report, fresh).lines)


def test_the_check_is_exact_where_the_numerics_match_and_statistical_elsewhere(report, capsys):
    fp = report["fingerprint"]
    assert numerics_differ(report, copy.deepcopy(report)) == []
    other = copy.deepcopy(report)
    other["fingerprint"]["numerics"]["cpu_capability"] = (
        "AVX512" if fp["numerics"]["cpu_capability"] != "AVX512" else "AVX2"
    )
    assert numerics_differ(report, other)
    # a machine difference alone (the CPU model) keeps the exact check
    moved = copy.deepcopy(report)
    moved["fingerprint"]["machine"]["cpu"] = "another CPU"
    assert numerics_differ(report, moved) == []
    # exact: one float moved by an ulp fails where the numerics match ...
    nudged = copy.deepcopy(report)
    nudged["rows"][0]["metrics"]["pass_at_1"]["mean"] += 1e-15
    assert check("embedded-quick", "spec", report, nudged, "auto", 0.05, 0.0) == 1
    # ... and passes the statistical check where they do not
    nudged["fingerprint"] = other["fingerprint"]
    assert check("embedded-quick", "spec", report, nudged, "auto", 0.05, 0.0) == 0
    assert "statistical check" in capsys.readouterr().out
