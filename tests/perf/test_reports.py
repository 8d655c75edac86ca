"""The benchmarks' reports rebuilt from the committed json keep their sections and columns."""

import json
from pathlib import Path

from bench import script

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "results"


def tables(text: str) -> list[tuple[str, str]]:
    """Each markdown table's header line and rule (the columns and their alignment)."""
    lines = text.splitlines()
    return [(lines[i - 1], ln) for i, ln in enumerate(lines) if ln.startswith("|---")]


def test_op_count_rebuilds_its_committed_report_exactly():
    from bench.perf.op_count import markdown

    data = json.loads((RESULTS / "benchmarks" / "op_count.json").read_text())
    assert markdown(data) == (RESULTS / "benchmarks" / "op_count.md").read_text()


def test_reports_rebuilt_from_the_committed_json_keep_their_tables():
    """The committed reports' column headers are what the scripts write today (their titles' machine
    descriptions may read differently)."""
    import argparse

    from bench.perf import engines, step, trl, trl_report, verify

    def load(name):
        return json.loads((RESULTS / "benchmarks" / f"{name}.json").read_text())

    def committed(name):
        return (RESULTS / "benchmarks" / f"{name}.md").read_text()

    d = load("rl_step")
    assert tables(step.markdown(d["results"], "grpo", "arithmetic", 6, d["machine"])) == tables(committed("rl_step"))
    d = load("engines")
    sizes = list(dict.fromkeys(r["size"] for r in d["results"]))
    settings = [engines.parse_setting(s) for s in dict.fromkeys(r["setting"] for r in d["results"])]
    load_avg = (d["load_average"][0][0], d["load_average"][1][0])
    assert engines.markdown(d["results"], sizes, settings, 5, d["machine"], load_avg) + "\n" == committed("engines")
    d = load("verify")
    env = {**script.machine(), **d["env"]}
    assert tables(verify.markdown(d["results"], env)) == tables(committed("verify"))
    d = load("trl")
    host = {"gpu": None, **d["machine"]}
    text = trl_report.markdown(d["results"], host, argparse.Namespace(**d["args"]), (1.0, 1.0, 1.0), d["wall_s"])
    assert tables(text) == tables(committed("trl").split(trl.NOTES)[0])
