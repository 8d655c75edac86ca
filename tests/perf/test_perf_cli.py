"""The benchmark scripts' command lines and their shared helpers (bench/perf/common.py): every script
answers ``--help`` with the options its docstring names, the reports rebuilt from the committed json
keep their sections and columns, and the outputs are written whole or not at all."""

import importlib
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from bench.errors import CreditBenchError
from bench.perf import common

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "results"
SCRIPTS = ["step", "methods", "engines", "verify", "trl", "scale", "gold_check", "ui_screenshot", "fixed_cost"]
SCRIPTS += ["live_metrics", "microbatch", "fsdp", "pretrained", "exact_objective", "flagship_cost", "sequential_design"]
SCRIPTS += ["gpu_checks"]
SCRIPTS += ["op_count"]


@pytest.mark.parametrize("name", SCRIPTS)
def test_every_script_answers_help_with_the_options_its_docstring_names(name, monkeypatch, capsys):
    module = importlib.import_module(f"bench.perf.{name}")
    monkeypatch.setattr(sys, "argv", [f"python -m bench.perf.{name}", "--help"])
    with pytest.raises(SystemExit) as exit_:
        module.main()
    assert exit_.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith(f"usage: python -m bench.perf.{name}")
    documented = set(re.findall(r"(?<![\w-])--[a-z][a-z-]*", module.__doc__))
    assert documented, f"bench/perf/{name}.py's docstring shows no command line"
    assert {o for o in documented if o not in out} == set()


def test_a_script_runs_as_a_module():
    proc = subprocess.run(
        [sys.executable, "-m", "bench.perf.gold_check", "--help"], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("usage: python -m bench.perf.gold_check")


def test_run_script_ends_a_wrong_request_with_one_line(capsys):
    def main():
        raise CreditBenchError("unknown method 'grpp'; did you mean 'grpo'?")

    with pytest.raises(SystemExit) as exit_:
        common.run_script(main, "python -m bench.perf.step")
    assert exit_.value.code == 2
    assert capsys.readouterr().err == "python -m bench.perf.step: error: unknown method 'grpp'; did you mean 'grpo'?\n"
    with pytest.raises(SystemExit) as exit_:
        common.run_script(lambda: None, "x")
    assert exit_.value.code is None  # a main that returns nothing succeeded


def test_perf_parser_describes_the_script_by_its_docstrings_first_paragraph():
    ap = common.perf_parser("First paragraph,\ntwo lines.\n\n    python -m x --flag\n", "python -m x")
    assert ap.prog == "python -m x" and ap.description == "First paragraph,\ntwo lines."


def test_md_table_lines():
    rows = [["tiny-500k", f"{529856:,}", 0.0], ["tiny-2m", f"{1987520:,}", 0.04]]
    lines = common.md_table("size | params | KL beta", rows, align="lr")
    assert lines == [
        "| size | params | KL beta |",
        "|---|---:|---|",  # the letters missing from align are the default
        "| tiny-500k | 529,856 | 0.0 |",
        "| tiny-2m | 1,987,520 | 0.04 |",
    ]
    assert common.md_table(["size", "params", "KL beta"], rows, align="lr") == lines
    assert common.md_table(["a"], [])[1] == "|---|"


def test_machine_keys_and_line():
    m = common.machine(torch_threads=3, packages=["json", "a_package_that_is_not_there"])
    assert {"cpu", "cpus", "cpu_flags", "torch_threads", "torch", "python", "platform", "gpu"} <= set(m)
    assert m["torch_threads"] == 3 and m["cpus"] >= 1 and set(m["cpu_flags"]) <= set(common.MATMUL_FLAGS)
    assert m["json"] == json.__version__ and m["a_package_that_is_not_there"] is None
    json.dumps(m)  # it goes into the json report as it is
    line = common.machine_line(m, "json")
    assert "3 torch threads" in line and f"torch {m['torch']}" in line and line.endswith(f", json {json.__version__}")
    cpu = {**m, "gpu": None, "cpu": "AMD EPYC", "cpus": 2, "torch_threads": 2, "torch": "2.13.0+cpu"}
    assert common.machine_line(cpu) == "AMD EPYC, 2 CPUs, 2 torch threads, torch 2.13.0+cpu"
    gpu = {**cpu, "gpu": "NVIDIA H100 80GB HBM3 (79 GiB)"}
    assert common.machine_line(gpu) == "NVIDIA H100 80GB HBM3 (79 GiB), 2 torch threads, torch 2.13.0+cpu"


def test_write_outputs_writes_both_files_whole_or_not_at_all(tmp_path):
    md, js = common.write_outputs(tmp_path / "new", "rl_step", "# Title\n\n| a |\n\n\n", {"rows": [1, 2]})
    assert (md, js) == (tmp_path / "new" / "rl_step.md", tmp_path / "new" / "rl_step.json")
    assert md.read_text() == "# Title\n\n| a |\n" and json.loads(js.read_text()) == {"rows": [1, 2]}
    # data that cannot be written fails before either file is touched: the last good pair stays
    with pytest.raises(TypeError):
        common.write_outputs(tmp_path / "new", "rl_step", "# Other\n", {"rows": {1, 2}})
    assert md.read_text() == "# Title\n\n| a |\n" and json.loads(js.read_text()) == {"rows": [1, 2]}
    assert sorted(p.name for p in (tmp_path / "new").iterdir()) == ["rl_step.json", "rl_step.md"]  # no temp files


@pytest.mark.parametrize("out", ["reports/scale.md", "reports/scale"])
def test_write_report_puts_the_json_beside_the_named_report(tmp_path, out):
    md, js = common.write_report(tmp_path / out, "# Scale\n", {"rows": []})
    assert (md.name, js.name, md.parent) == ("scale.md", "scale.json", tmp_path / "reports")


def tables(text: str) -> list[tuple[str, str]]:
    """Each markdown table's header line and rule (the columns and their alignment)."""
    lines = text.splitlines()
    return [(lines[i - 1], ln) for i, ln in enumerate(lines) if ln.startswith("|---")]


def test_gold_check_rebuilds_its_committed_report_exactly():
    from bench.perf.gold_check import markdown

    results = json.loads((RESULTS / "tasks" / "gold_check.json").read_text())
    assert markdown(results) == (RESULTS / "tasks" / "gold_check.md").read_text()


def test_op_count_rebuilds_its_committed_report_exactly():
    from bench.perf.op_count import markdown

    data = json.loads((RESULTS / "benchmarks" / "op_count.json").read_text())
    assert markdown(data) == (RESULTS / "benchmarks" / "op_count.md").read_text()


def test_reports_rebuilt_from_the_committed_json_keep_their_tables():
    """The committed reports' column headers are what the scripts write today (their titles' machine
    descriptions may read differently)."""
    import argparse

    from bench.perf import engines, step, trl, verify

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
    env = {**common.machine(), **d["env"]}
    assert tables(verify.markdown(d["results"], env)) == tables(committed("verify"))
    d = load("trl")
    host = {"gpu": None, **d["machine"]}
    text = trl.markdown(d["results"], host, argparse.Namespace(**d["args"]), (1.0, 1.0, 1.0), d["wall_s"])
    assert tables(text) == tables(committed("trl").split(trl.NOTES)[0])
