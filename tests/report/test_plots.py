"""The sweep report's figures: every file is written, is a PNG with content, and odd input is survived."""

from __future__ import annotations

import copy
import math

import pytest
from PIL import Image

from bench.cli.plots import main
from bench.errors import CreditBenchError
from bench.report.plots import write_plots
from bench.report.plots.common import method_colors

MODELS = {"tiny-2m": 1_987_520, "tiny-500k": 529_856}  # listed out of size order on purpose
METHODS = {"grpo": 0.00, "arca": 0.04, "grpo-lora16": -0.03}
TOKENS = list("12+$7\\*3=") + [" ", "4", "5", "\n", "<eos>"]


def _stat(values: list[float]) -> dict:
    mean = sum(values) / len(values)
    return {"mean": mean, "lo": mean - 0.03, "hi": mean + 0.03, "n": len(values), "values": values}


def _row(method: str, model: str, eval_task: str = "arithmetic") -> dict:
    gain = METHODS[method] + (0.1 if model == "tiny-2m" else 0.0)
    final = 0.36 + gain
    samples = [0, 1024, 2048, 3072, 4096]
    curve = [0.26 + (final - 0.26) * (s / 4096) ** 0.5 for s in samples]
    metrics = {
        f"pass_at_{k}": _stat([min(final * (1 + 0.4 * i), 1) - 0.01, min(final * (1 + 0.4 * i), 1) + 0.01])
        for i, k in enumerate([1, 2, 4])
    }
    metrics["base_pass_at_1"] = _stat([0.25, 0.27])
    metrics["samples_to_target"] = {"mean": None, "lo": None, "hi": None, "n": 0, "values": [None, None]}
    return {
        "method": method,
        "method_name": method.split("-")[0],
        "lora_rank": 16 if "lora" in method else 0,
        "model": model,
        "params": MODELS[model],
        "task": "arithmetic",
        "eval_task": eval_task,
        "seeds": [0, 1],
        "ks": [1, 2, 4],
        "n": 4,
        "metrics": metrics,
        "vs_baseline": {},
        "target_pass_at_1": 0.35,
        "curve": {
            "samples": samples,
            "tokens": [31 * s for s in samples],
            "pass_at_1": curve,
            "pass_at_1_lo": [c - 0.02 for c in curve],
            "pass_at_1_hi": [c + 0.02 for c in curve],
        },
    }


def _report(eval_tasks: tuple[str, ...] = ("arithmetic",)) -> dict:
    rows = [_row(m, mo, e) for e in eval_tasks for mo in MODELS for m in METHODS]
    credit = {
        mo: {
            "prompt": "Compute 12+$7\\*3 and put the\nanswer after '='.",
            "completion_tokens": TOKENS,
            "reward": 1.0,
            "methods": {
                m: [(-1) ** j * (j + 1) * (0.01 + i * 0.02) for j in range(len(TOKENS))] for i, m in enumerate(METHODS)
            },
        }
        for mo in MODELS
    }
    return {
        "sweep": "synthetic",
        "baseline": "grpo",
        "target": 0.9,
        "budget": {"samples": 4096},
        "runs": 12,
        "wall_s": 10.0,
        "rows": rows,
        "credit_maps": credit,
    }


def _check_png(path) -> None:
    assert path.exists() and path.stat().st_size > 0, path
    with Image.open(path) as im:
        im.verify()
    with Image.open(path) as im:
        assert im.format == "PNG" and im.width > 100 and im.height > 100
        lo_hi = im.convert("RGB").getextrema()
        assert any(lo != hi for lo, hi in lo_hi), f"{path.name} is a single colour"


PLAIN = [
    "pass1_vs_samples.png",
    "pass1_vs_tokens.png",
    "pass_at_k.png",
    "final_vs_size.png",
    "credit_map_tiny-2m.png",
    "credit_map_tiny-500k.png",
]


def test_writes_every_figure(tmp_path):
    paths = write_plots(_report(), tmp_path / "plots")
    assert sorted(p.name for p in paths) == sorted(PLAIN)
    for p in paths:
        _check_png(p)


def test_one_figure_per_eval_task(tmp_path):
    paths = write_plots(_report(("arithmetic", "gsm8k")), tmp_path)
    names = {p.name for p in paths}
    for stem in ["pass1_vs_samples", "pass1_vs_tokens", "pass_at_k", "final_vs_size"]:
        assert {f"{stem}_arithmetic.png", f"{stem}_gsm8k.png"} <= names
        assert f"{stem}.png" not in names


def test_empty_credit_maps_and_nan_method(tmp_path):
    report = _report()
    report["credit_maps"] = {}
    for r in report["rows"]:
        if r["method"] == "arca":  # every value of one method is missing or NaN
            r["curve"]["pass_at_1"] = [math.nan] * len(r["curve"]["pass_at_1"])
            r["metrics"] = {k: {"mean": None, "lo": None, "hi": None, "n": 0} for k in r["metrics"]}
        if r["method"] == "grpo-lora16":  # a single seed: no interval
            r["curve"]["pass_at_1_lo"] = [None] * 5
            r["metrics"]["pass_at_1"]["lo"] = math.nan
    paths = write_plots(report, tmp_path)
    assert sorted(p.name for p in paths) == sorted(PLAIN[:4])
    for p in paths:
        _check_png(p)


def test_credit_map_skips_bad_methods_and_cuts_long_completions(tmp_path):
    report = _report()
    report["rows"] = []
    cm = report["credit_maps"]["tiny-500k"]
    cm["completion_tokens"] = TOKENS * 10  # 140 tokens: wraps, then is cut at 96
    cm["methods"] = {
        "grpo": [0.0] * 140,
        "arca": [0.1 * math.sin(j) for j in range(140)],
        "ibpo": [math.nan] * 140,
        "short": [1.0],
    }
    del report["credit_maps"]["tiny-2m"]
    assert [p.name for p in write_plots(report, tmp_path)] == ["credit_map_tiny-500k.png"]
    _check_png(tmp_path / "credit_map_tiny-500k.png")
    report["credit_maps"]["tiny-500k"]["methods"] = {"ibpo": [math.nan] * 140}
    assert write_plots(report, tmp_path / "none") == []


def test_colours_are_stable_and_baseline_black():
    a = method_colors(["grpo", "arca", "dapo"], "grpo")
    b = method_colors(["dapo", "arca", "grpo"], "grpo")
    assert a == b and a["grpo"] == "#000000" and len(set(a.values())) == 3


def test_cli(tmp_path, capsys):
    import json

    report = tmp_path / "report.json"
    report.write_text(json.dumps(_report()))
    main([str(report), str(tmp_path / "out")])
    assert len(capsys.readouterr().out.split()) == len(PLAIN)
    with pytest.raises(CreditBenchError, match="cannot read"):
        main([str(tmp_path / "missing.json"), str(tmp_path / "out")])


def test_report_without_rows(tmp_path):
    assert write_plots({"rows": [], "credit_maps": {}}, tmp_path) == []
    report = copy.deepcopy(_report())
    report["rows"][0]["params"] = None  # a model without a size still gets its curves
    assert (tmp_path / "pass1_vs_samples.png") in write_plots(report, tmp_path)
