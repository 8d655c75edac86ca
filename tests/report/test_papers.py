"""Paper tables (bench/report/papers/__init__.py, bench/report/papers/data.py) and the shipped paper files in
results/papers."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from scipy import stats

from bench import cli
from bench.cli import table
from bench.errors import CreditBenchError
from bench.registry import METHODS, TASKS
from bench.report import papers
from bench.report.papers import data as paper_data

REPO = Path(__file__).resolve().parents[2]
PAPERS = ("arca", "grpo_lambda", "ibpo", "selective_traces")
SWEEP_SPECS = sorted((REPO / "results" / "papers").glob("*.sweep.yaml"))


# ------------------------------------------------------------------------- the shipped papers


def test_shipped_papers_are_the_four_seed_papers():
    assert paper_data.paper_names() == list(PAPERS)
    analogues = {paper_data.load_paper(name).analogue for name in PAPERS} - {None}
    assert {p.name for p in SWEEP_SPECS} == {f"{name}.sweep.yaml" for name in PAPERS} | analogues


@pytest.mark.parametrize("name", PAPERS)
def test_shipped_paper_loads_and_validates(name):
    paper = paper_data.load_paper(name)
    assert paper.name == name and paper.title and paper.arxiv
    assert all(m in METHODS for m in paper.methods)
    assert set(paper_data.SETTING_KEYS) <= set(paper.setting)
    assert all(item.status in paper_data.STATUSES for item in paper.setting.values())
    for entry in paper.results:
        assert entry.method in METHODS
        assert entry.vs is None or entry.vs in METHODS
        assert entry.kind != "delta" or entry.vs is not None
        assert paper_data.is_metric(entry.metric), entry.metric
        assert isinstance(entry.value, float) and math.isfinite(entry.value)
        assert entry.unit in paper_data.UNITS and entry.source
        assert all(t in TASKS for t in entry.over)
    if not paper.results:
        assert paper.results_note  # says why there is no number
    assert (REPO / "results" / "papers" / paper.sweep).is_file()


@pytest.mark.parametrize("name", PAPERS)
def test_paper_sweep_can_measure_its_results(name):
    """The paper's own sweep runs every method, baseline and benchmark its results need."""
    paper = paper_data.load_paper(name)
    spec = yaml.safe_load((REPO / "results" / "papers" / paper.sweep).read_text())
    methods = {m if isinstance(m, str) else m["name"] for m in spec["methods"]}
    tasks = {t if isinstance(t, str) else t["name"] for t in spec["tasks"] + spec.get("eval_tasks", [])}
    assert set(paper.methods) <= methods
    for entry in paper.results:
        assert entry.method in methods and (entry.vs is None or entry.vs in methods)
        assert set(entry.eval_tasks) <= tasks
    if paper.results:
        models = [m if isinstance(m, str) else m["name"] for m in spec["models"]]
        assert any(papers.same_model(m, e.model) for e in paper.results for m in models)


def test_selective_traces_numbers_are_the_abstracts_deltas():
    paper = paper_data.load_paper("selective_traces")
    got = {(e.method, e.model, e.kind, e.vs, e.metric): e.value for e in paper.results}
    assert got == {
        ("s_trace", "Qwen3-1.7B", "delta", "grpo", "pass_at_16"): 0.49,
        ("s_trace", "Qwen3-4B", "delta", "grpo", "pass_at_16"): 3.16,
        ("s_trace", "Qwen3-8B", "delta", "grpo", "pass_at_16"): 2.98,
    }


def test_arca_numbers_are_the_papers_tables():
    """The seven configurations x greedy accuracy, pass@4, average train reward, G(w), EffN/T of the
    paper's tables "Held-out MATH performance" and "Token-weight diagnostics"."""
    paper = paper_data.load_paper("arca")
    got = {(e.label, e.metric): e.value for e in paper.results}
    assert len(got) == len(paper.results) == 35
    assert got[("uniform-r64", "greedy")] == 0.620 and got[("uniform-r64", "weight_gini")] == 0.0
    assert got[("entropy_reduction-r64", "pass_at_4")] == 0.700
    assert got[("surprisal-r64", "weight_effective_n_ratio")] == 0.052
    assert got[("arca-r64", "weight_gini")] == 0.490 and got[("arca-r4", "train_reward")] == 0.327
    assert all(e.model == "Qwen3-1.7B-Base" and e.method == "arca" for e in paper.results)


# ------------------------------------------------------------------------------------ the table


def _metric(values: list[float]) -> dict:
    mean, lo, hi = papers.interval(values)
    return {"mean": mean, "lo": lo, "hi": hi, "n": len(values), "values": values}


def _row(label, method, model, eval_task, values_by_metric, task="math500", vs_baseline=None):
    return {
        "method": label,
        "method_name": method,
        "lora_rank": 0,
        "model": model,
        "params": 1,
        "task": task,
        "eval_task": eval_task,
        "seeds": [0, 1, 2],
        "ks": [1, 16],
        "n": 16,
        "metrics": {k: _metric(v) for k, v in values_by_metric.items()},
        "vs_baseline": vs_baseline or {},
        "curve": {},
    }


def _report(sweep, baseline, rows):
    return {
        "sweep": sweep,
        "baseline": baseline,
        "target": 0.9,
        "budget": {"samples": 64},
        "runs": 6,
        "wall_s": 1.0,
        "rows": rows,
        "credit_maps": {},
    }


def _write_report(results: Path, report: dict) -> None:
    (results / report["sweep"]).mkdir(parents=True)
    (results / report["sweep"] / "report.json").write_text(json.dumps(report))


def _table_row(text: str, *cells: str) -> list[str]:
    """The cells of the one table line that contains every string in ``cells``."""
    rows = [line for line in text.splitlines() if line.startswith("|") and all(c in line for c in cells)]
    assert len(rows) == 1, (cells, text)
    return [c.strip() for c in rows[0].strip("|").split("|")]


def test_table_puts_measured_beside_paper_numbers(tmp_path, capsys):
    """S-trace's average pass@16 gain over GRPO, measured on Qwen/Qwen3-1.7B only."""
    benches = ["aime24", "aime25", "amc23", "math500", "minerva"]
    ours = {b: [0.30 + 0.01 * i + 0.02 * s for s in range(3)] for i, b in enumerate(benches)}
    theirs = {b: [0.29 + 0.01 * i + 0.015 * s + 0.004 * (s == 1) for s in range(3)] for i, b in enumerate(benches)}
    rows = []
    for b in benches:
        rows.append(_row("grpo", "grpo", "Qwen/Qwen3-1.7B", b, {"pass_at_16": theirs[b]}))
        rows.append(_row("s_trace", "s_trace", "Qwen/Qwen3-1.7B", b, {"pass_at_16": ours[b]}))
    _write_report(tmp_path, _report("paper-selective_traces", "grpo", rows))

    assert table.main(["--paper", "selective_traces", "--results-dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    diffs = [sum(ours[b][s] - theirs[b][s] for b in benches) / len(benches) * 100 for s in range(3)]
    mean = sum(diffs) / 3
    half = stats.t.ppf(0.975, 2) * math.sqrt(sum((d - mean) ** 2 for d in diffs) / 2) / math.sqrt(3)
    cells = _table_row(out, "| Qwen3-1.7B |")
    assert cells[4] == "+0.49 vs grpo"
    assert cells[5] == f"{mean:+.2f} [{mean - half:+.2f}, {mean + half:+.2f}] (n=3)"
    assert cells[6] == "paper-selective_traces"
    for model in ("Qwen3-4B", "Qwen3-8B"):  # not run: dashes beside the paper's numbers
        cells = _table_row(out, f"| {model} |")
        assert cells[4].startswith("+") and cells[5] == "-" and cells[6] == "-"
    assert "**Setting**: models Qwen3-1.7B, Qwen3-4B, Qwen3-8B [V]" in out
    assert "Not run yet" not in out


def test_table_without_a_report_prints_dashes(tmp_path):
    out = papers.table("selective_traces", results_dir=tmp_path)
    assert all(_table_row(out, f"| {m} |")[5] == "-" for m in ("Qwen3-1.7B", "Qwen3-4B", "Qwen3-8B"))
    assert "Not run yet (no report.json): paper-selective_traces." in out


def _toy_papers(tmp_path: Path) -> Path:
    """A paper file with absolute and delta entries on single benchmarks (test fixtures only)."""
    d = tmp_path / "papers"
    d.mkdir()
    (d / "toy.sweep.yaml").write_text("name: toy-sweep\n")
    setting = {k: {"value": None, "status": "unknown"} for k in paper_data.SETTING_KEYS}
    setting["models"] = {"value": ["Toy-1B"], "status": "verified"}
    doc = {
        "paper": {"title": "Toy", "arxiv": "2601.00001", "methods_md": "none", "methods": ["s_trace"]},
        "setting": setting,
        "results": [
            {
                "method": "s_trace",
                "model": "Toy-1B",
                "benchmark": "gsm8k",
                "metric": "pass_at_1",
                "value": 50.0,
                "unit": "percent",
                "source": "fixture",
            },
            {
                "method": "s_trace",
                "model": "Toy-1B",
                "benchmark": "gsm8k",
                "metric": "pass_at_1",
                "value": 2.0,
                "unit": "percent",
                "kind": "delta",
                "vs": "grpo",
                "source": "fixture",
            },
            {
                "method": "s_trace",
                "model": "Toy-1B",
                "benchmark": "gsm8k",
                "metric": "pass_at_1",
                "value": 0.01,
                "unit": "fraction",
                "kind": "delta",
                "vs": "dapo",
                "source": "fixture",
            },
            {
                "method": "s_trace",
                "model": "Other-7B",
                "benchmark": "gsm8k",
                "metric": "pass_at_1",
                "value": 1.0,
                "unit": "percent",
                "kind": "delta",
                "vs": "grpo",
                "source": "fixture",
            },
        ],
        "sweep": "toy.sweep.yaml",
    }
    (d / "toy.yaml").write_text(yaml.safe_dump(doc))
    return d


def test_table_deltas_use_vs_baseline_or_the_two_rows(tmp_path, capsys):
    d = _toy_papers(tmp_path)
    vs = {"pass_at_1": {"mean": 0.025, "lo": 0.01, "hi": 0.04, "n": 3}}
    rows = [
        _row("grpo", "grpo", "org/Toy-1B", "gsm8k", {"pass_at_1": [0.40, 0.41, 0.42]}, task="gsm8k"),
        _row("dapo", "dapo", "org/Toy-1B", "gsm8k", {"pass_at_1": [0.43, 0.40, 0.44]}, task="gsm8k"),
        _row(
            "s_trace", "s_trace", "org/Toy-1B", "gsm8k", {"pass_at_1": [0.44, 0.43, 0.45]}, task="gsm8k", vs_baseline=vs
        ),
    ]
    _write_report(tmp_path / "results", _report("toy-sweep", "grpo", rows))
    assert (
        table.main(
            [
                "--paper",
                "toy",
                "--papers-dir",
                str(d),
                "--results-dir",
                str(tmp_path / "results"),
                "--sweep",
                "missing-sweep",
                "--sweep",
                "toy-sweep",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    absolute = _table_row(out, "| 50.00 |")
    mean, lo, hi = papers.interval([0.44, 0.43, 0.45])
    assert absolute[5] == f"{mean * 100:.2f} [{lo * 100:.2f}, {hi * 100:.2f}] (n=3)"
    assert absolute[6] == "toy-sweep"  # the first sweep has no report; the second matches
    assert _table_row(out, "+2.00 vs grpo")[5] == "+2.50 [+1.00, +4.00] (n=3)"  # the report's vs_baseline
    mean, lo, hi = papers.interval([0.44 - 0.43, 0.43 - 0.40, 0.45 - 0.44])  # paired per seed
    assert _table_row(out, "+0.010 vs dapo")[5] == f"{mean:+.3f} [{lo:+.3f}, {hi:+.3f}] (n=3)"
    assert _table_row(out, "| Other-7B |")[5] == "-"
    assert "Not run yet (no report.json): missing-sweep." in out


def test_models_match_by_their_last_path_component():
    assert papers.same_model("Qwen/Qwen3-1.7B", "Qwen3-1.7B")
    assert papers.same_model("qwen3-1.7b", "Qwen/Qwen3-1.7B")
    assert not papers.same_model("Qwen/Qwen3-1.7B-Base", "Qwen3-1.7B")
    assert not papers.same_model(None, "Qwen3-1.7B")


# -------------------------------------------------------------------------------------- errors


def test_unknown_paper_is_a_one_line_error_naming_the_valid_ones(capsys):
    assert cli.main(["table", "--paper", "strace"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and err.startswith("creditbench: error: unknown paper 'strace'")
    assert all(name in err for name in PAPERS)
    with pytest.raises(CreditBenchError, match="Valid papers: arca, grpo_lambda, ibpo, selective_traces"):
        paper_data.load_paper("nope")


@pytest.mark.parametrize(
    "field, value, message",
    [
        ("metric", "pass@16", r"results\[0\]\.metric: 'pass@16' is not a metric name"),
        ("value", "50", r"results\[0\]\.value: must be a finite number"),
        ("value", True, r"results\[0\]\.value: must be a finite number"),
        ("method", "s-trace", r"results\[0\]\.method: unknown method 's-trace'.*Valid methods: .*s_trace"),
        ("unit", "points", r"results\[0\]\.unit: 'points' is not one of percent, fraction"),
        ("benchmark", "average", r"results\[0\]\.over: an average needs"),
        ("kind", "delta", r"results\[0\]\.vs"),
    ],
)
def test_bad_field_is_a_one_line_error_naming_it(tmp_path, field, value, message):
    d = _toy_papers(tmp_path)
    doc = yaml.safe_load((d / "toy.yaml").read_text())
    doc["results"][0][field] = value
    (d / "toy.yaml").write_text(yaml.safe_dump(doc))
    with pytest.raises(CreditBenchError, match=message) as info:
        paper_data.load_paper("toy", d)
    assert "\n" not in str(info.value) and str(info.value).startswith("toy.yaml: ")


def test_setting_status_must_be_known(tmp_path):
    d = _toy_papers(tmp_path)
    doc = yaml.safe_load((d / "toy.yaml").read_text())
    doc["setting"]["lr"] = {"value": 1e-6, "status": "guessed"}
    (d / "toy.yaml").write_text(yaml.safe_dump(doc))
    with pytest.raises(CreditBenchError, match=r"setting\.lr\.status: status 'guessed' is not one of verified"):
        paper_data.load_paper("toy", d)


def test_the_table_command_works_in_a_process_of_its_own():
    proc = subprocess.run(
        [sys.executable, "-m", "bench.cli", "table", "--paper", "arca", "--results-dir", "/nonexistent"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert "**Setting**: models Qwen3-1.7B-Base [V]" in proc.stdout and "| arca-r16 | 0.510 · - |" in proc.stdout


# ---------------------------------------------------------------------------------- sweep specs


@pytest.mark.parametrize(
    "path", [p for p in SWEEP_SPECS if p.name[: -len(".sweep.yaml")] in PAPERS], ids=lambda p: p.name
)
def test_paper_sweeps_validate(path):
    """bench/sweep/sweep.py accepts every paper sweep without starting anything (names, options, LoRA for
    ARCA, the code opt-in), every run is on bf16 with a Hub model, and the budget is whole steps."""
    sweep = pytest.importorskip("bench.sweep.sweep")
    loaded = sweep.load_spec(path)
    spec = yaml.safe_load(path.read_text())
    assert len(loaded.runs) > 0
    assert loaded.budget == spec["budget"] and loaded.budget["samples"] > 0
    assert loaded.baseline in {r.label for r in loaded.runs}
    for run in loaded.runs:
        cfg = run.cfg
        assert cfg.precision == "bf16-mixed"
        # full fine-tuning keeps fp32 master weights (bf16 ones would round lr-1e-6 updates away)
        assert cfg.model.dtype == ("bfloat16" if cfg.model.lora.rank else "float32")
        assert not cfg.model.name.startswith("tiny-")
        assert loaded.budget["samples"] % (cfg.rl.prompts_per_step * cfg.rl.group_size) == 0
