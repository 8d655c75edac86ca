"""The scripts' command lines and their shared helpers (bench/script.py): every script (the benchmarks of
bench.perf, the studies of bench.studies, the GPU harness's plan, the gold-answer check and the MLflow UI's
screenshot tool) answers ``--help`` with the options its docstring names, and the outputs are written whole or
not at all."""

import importlib
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from bench import script
from bench.errors import CreditBenchError

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "results"
PERF = ["step", "methods", "engines", "verify", "trl", "scale", "fixed_cost", "live_metrics", "microbatch", "fsdp"]
PERF += ["flagship_cost", "op_count"]
STUDIES = ["pretrained", "exact_objective", "sequential_design", "probe_design", "reproducibility", "segment_design"]
SCRIPTS = [f"bench.perf.{n}" for n in PERF] + [f"bench.studies.{n}" for n in STUDIES]
SCRIPTS += ["bench.gpu.checks", "bench.gold_check", "tools.ui_screenshot"]


@pytest.mark.parametrize("name", SCRIPTS)
def test_every_script_answers_help_with_the_options_its_docstring_names(name, monkeypatch, capsys):
    module = importlib.import_module(name)
    monkeypatch.setattr(sys, "argv", [f"python -m {name}", "--help"])
    with pytest.raises(SystemExit) as exit_:
        module.main()
    assert exit_.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith(f"usage: python -m {name}")
    documented = set(re.findall(r"(?<![\w-])--[a-z][a-z-]*", module.__doc__))
    assert documented, f"{name}'s docstring shows no command line"
    assert {o for o in documented if o not in out} == set()


def test_a_script_runs_as_a_module():
    proc = subprocess.run(
        [sys.executable, "-m", "bench.gold_check", "--help"], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("usage: python -m bench.gold_check")


def test_run_script_ends_a_wrong_request_with_one_line(capsys):
    def main():
        raise CreditBenchError("unknown method 'grpp'; did you mean 'grpo'?")

    with pytest.raises(SystemExit) as exit_:
        script.run_script(main, "python -m bench.perf.step")
    assert exit_.value.code == 2
    assert capsys.readouterr().err == "python -m bench.perf.step: error: unknown method 'grpp'; did you mean 'grpo'?\n"
    with pytest.raises(SystemExit) as exit_:
        script.run_script(lambda: None, "x")
    assert exit_.value.code is None  # a main that returns nothing succeeded


def test_script_parser_describes_the_script_by_its_docstrings_first_paragraph():
    ap = script.script_parser("First paragraph,\ntwo lines.\n\n    python -m x --flag\n", "python -m x")
    assert ap.prog == "python -m x" and ap.description == "First paragraph,\ntwo lines."


def test_md_table_lines():
    rows = [["tiny-500k", f"{529856:,}", 0.0], ["tiny-2m", f"{1987520:,}", 0.04]]
    lines = script.md_table("size | params | KL beta", rows, align="lr")
    assert lines == [
        "| size | params | KL beta |",
        "|---|---:|---|",  # the letters missing from align are the default
        "| tiny-500k | 529,856 | 0.0 |",
        "| tiny-2m | 1,987,520 | 0.04 |",
    ]
    assert script.md_table(["size", "params", "KL beta"], rows, align="lr") == lines
    assert script.md_table(["a"], [])[1] == "|---|"


def test_machine_keys_and_line():
    m = script.machine(torch_threads=3, packages=["json", "a_package_that_is_not_there"])
    assert {"cpu", "cpus", "cpu_flags", "torch_threads", "torch", "python", "platform", "gpu"} <= set(m)
    assert m["torch_threads"] == 3 and m["cpus"] >= 1 and set(m["cpu_flags"]) <= set(script.MATMUL_FLAGS)
    assert m["json"] == json.__version__ and m["a_package_that_is_not_there"] is None
    json.dumps(m)  # it goes into the json report as it is
    line = script.machine_line(m, "json")
    assert "3 torch threads" in line and f"torch {m['torch']}" in line and line.endswith(f", json {json.__version__}")
    cpu = {**m, "gpu": None, "cpu": "AMD EPYC", "cpus": 2, "torch_threads": 2, "torch": "2.13.0+cpu"}
    assert script.machine_line(cpu) == "AMD EPYC, 2 CPUs, 2 torch threads, torch 2.13.0+cpu"
    gpu = {**cpu, "gpu": "NVIDIA H100 80GB HBM3 (79 GiB)"}
    assert script.machine_line(gpu) == "NVIDIA H100 80GB HBM3 (79 GiB), 2 torch threads, torch 2.13.0+cpu"


def test_write_outputs_writes_both_files_whole_or_not_at_all(tmp_path):
    md, js = script.write_outputs(tmp_path / "new", "rl_step", "# Title\n\n| a |\n\n\n", {"rows": [1, 2]})
    assert (md, js) == (tmp_path / "new" / "rl_step.md", tmp_path / "new" / "rl_step.json")
    assert md.read_text() == "# Title\n\n| a |\n" and json.loads(js.read_text()) == {"rows": [1, 2]}
    # data that cannot be written fails before either file is touched: the last good pair stays
    with pytest.raises(TypeError):
        script.write_outputs(tmp_path / "new", "rl_step", "# Other\n", {"rows": {1, 2}})
    assert md.read_text() == "# Title\n\n| a |\n" and json.loads(js.read_text()) == {"rows": [1, 2]}
    assert sorted(p.name for p in (tmp_path / "new").iterdir()) == ["rl_step.json", "rl_step.md"]  # no temp files


@pytest.mark.parametrize("out", ["reports/scale.md", "reports/scale"])
def test_write_report_puts_the_json_beside_the_named_report(tmp_path, out):
    md, js = script.write_report(tmp_path / out, "# Scale\n", {"rows": []})
    assert (md.name, js.name, md.parent) == ("scale.md", "scale.json", tmp_path / "reports")
