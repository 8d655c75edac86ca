"""bench/perf/gpu_check.sh and its plan (bench/gpu/checks.py): the open figures first, the whole pass within
8 minutes, every check's model built on the meta device and its forwards placed on the GPU (a large model on
the CPU refused, or cut to its smoke shape under GPU_CHECK_DEVICE=cpu), the benchmarks' reports of a run
stopped early; and (slow) the whole script end to end on the CPU."""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from bench.errors import CreditBenchError
from bench.gpu import checks as gpu_checks
from bench.gpu import placement
from bench.gpu.checks import CHECKS, QWEN
from bench.perf import scale, trl

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "bench" / "perf" / "gpu_check.sh"
RES = Path("/res")


def _models(argv: list[str]) -> list[str]:
    """The models a check's command trains: --model, --sizes or --model.name."""
    out = []
    for flag in ("--model", "--sizes", "--model.name"):
        if flag in argv:
            i = argv.index(flag) + 1
            while i < len(argv) and not argv[i].startswith("--"):
                out.append(argv[i])
                i += 1
    return out


def _device_flags(argv: list[str]) -> list[str]:
    return [argv[i + 1] for i, a in enumerate(argv) if a in ("--device", "--trainer.accelerator")]


def test_the_open_figures_come_first_and_the_measured_ones_only_on_request():
    lines = [line.split("\t") for line in gpu_checks.plan_lines("cuda", RES)]
    names = [n for n, *_ in lines]
    assert names[:3] == ["trl_tiny-8m", "trl_1.7b", "pytest_gpu"]
    states = {n: s for n, _, s, _ in lines}
    for measured in ("scale_1.7b", "train_chain", "step_bf16", "step_fp32"):
        assert states[measured].startswith("skip: measured already")
    assert all(s == "run" or "measured already" in s or s.startswith("skip: needs trl") for s in states.values())
    asked = [line.split("\t") for line in gpu_checks.plan_lines("cuda", RES, ["step_bf16", "scale_1.7b"])]
    assert [(n, s) for n, _, s, _ in asked] == [("scale_1.7b", "run"), ("step_bf16", "run")]  # the plan's order
    assert all(Path(ROOT / c.measured).is_file() for c in CHECKS if c.measured)  # where its figures are
    with pytest.raises(CreditBenchError, match="unknown GPU check 'scale'.*Valid GPU checks: pytest_gpu"):
        gpu_checks.selected(["scale"])


def test_the_pass_fits_eight_minutes_with_the_installs():
    budget = int(re.search(r'GPU_CHECK_BUDGET:-\$\(\[ "\$DEVICE" = cuda \] && echo (\d+)', SCRIPT.read_text()).group(1))
    assert budget <= 480  # counted from the script's start: the wheel installs are inside it
    open_figures = [c for c in CHECKS if not c.measured and c.name != "pytest_gpu"]  # the tests: in what is left
    setup_s = 20  # the wheel installs (12 s on an H200), the versions, the plan
    assert setup_s + sum(c.limit_s for c in open_figures) <= budget - 10  # 10 s for the summary
    for c in CHECKS:  # a benchmark's own limit ends it in time to write what it measured
        argv = c.argv("cuda", RES)
        if "--time-limit" in argv:
            assert int(argv[argv.index("--time-limit") + 1]) <= c.limit_s - 10


@pytest.mark.parametrize("check", [c for c in CHECKS if c.name != "pytest_gpu"], ids=lambda c: c.name)
def test_every_checks_model_is_built_on_the_meta_device_and_runs_its_forwards_on_the_gpu(check, monkeypatch):
    monkeypatch.delenv("GPU_CHECK_DEVICE", raising=False)
    argv = check.argv("cuda", RES)
    assert _device_flags(argv) and set(_device_flags(argv)) <= {"cuda", "gpu"}
    models = _models(argv)
    assert models
    for name in models:
        model = placement.meta_model(name)
        assert {p.device.type for p in model.parameters()} == {"meta"}  # the real shapes, no memory
        where = placement.place(name, "cuda")
        assert where.device == "cuda" and where.overrides == {}
        assert where.params == sum(p.numel() for p in model.parameters())
    cpu = check.argv("cpu", RES)
    assert set(_device_flags(cpu)) == {"cpu"}
    for name in _models(cpu):  # the CPU's smoke sizes: a large model refused, or cut down under the variable
        if placement.parameters(name) <= placement.LARGE:
            assert placement.place(name, "cpu").overrides == {}
            continue
        with pytest.raises(CreditBenchError, match=r"1\.72B parameters: its forwards on the CPU would take min"):
            placement.place(name, "cpu")
        smoke = placement.place(name, "cpu", env={"GPU_CHECK_DEVICE": "cpu"})
        assert smoke.device == "cpu" and smoke.overrides == placement.SMOKE_SHAPE
        assert smoke.params == placement.parameters(name, **smoke.overrides) < 2_000_000


def test_the_large_checks_are_the_hub_size_and_the_scale_run_is_placed_on_the_gpu():
    assert placement.parameters(QWEN) > 1.6e9 and placement.parameters("tiny-8m") < placement.LARGE
    args = argparse.Namespace(checkpoint="/ckpt", gradient_checkpointing=True, precision="bf16-mixed", device="cuda")
    args.__dict__.update(engine="hf", gpu_memory_utilization=0.3, new_tokens=128, steps=3, prompts=8, group_size=8)
    args.__dict__.update(minibatches=2, uri="sqlite:///x.db", model=QWEN)
    cfg = scale._config(args)
    assert cfg.trainer.accelerator == "gpu" and cfg.rollout.engine == "hf"
    # the credit map searches the eval problems (a random model never mixes rewards): one, not eight
    assert cfg.eval.num_problems == 1 and cfg.checkpoint.every == 0 and cfg.checkpoint.policy is False


def test_scale_and_trl_refuse_a_large_model_on_the_cpu_in_one_line(monkeypatch):
    monkeypatch.delenv("GPU_CHECK_DEVICE", raising=False)
    with pytest.raises(CreditBenchError, match="--shrink"):
        scale.main(["--model", QWEN, "--device", "cpu", "--engines", "hf"])
    assert placement.parse_overrides(["num_hidden_layers=1", "rope_theta=1e4"]) == {
        "num_hidden_layers": 1,
        "rope_theta": 1e4,
    }


def test_a_scale_run_stopped_early_reports_the_steps_it_finished():
    res = {
        "engine": "hf",
        "steps": {k: [] for k in scale.STEP_KEYS},
        "mismatch": {k: [] for k in scale.MISMATCH_KEYS},
        "peak_gpu_gb": 30.0,
        "peak_gpu_reserved_gb": 32.0,
        "params": 1_720_000_000,
        "peak_tflops": 989.0,
        "plan_gb": 28.0,
        "plan": "p",
    }
    res["steps"].update({"time/rollout_s": [9.0, 4.0], "time/score_s": [1.0, 0.5], "time/update_s": [2.0, 1.5]})
    res["steps"].update({"time/step_s": [12.0, 6.0], "train/tokens": [8192.0, 16384.0]})
    row = scale.summarize(res, stopped="stopped at the time limit (125 s) after 2 of 3 steps")
    assert row["steps_done"] == 2 and row["rollout_tok_s"] == 8192 / 4.0 and row["update_tok_s"] == 8192 / 2.0
    assert row["update_mfu"] == pytest.approx(6 * 1.72e9 * 8192 / 1.5 / 989e12)
    args = argparse.Namespace(model=QWEN, shrink=[], prompts=8, group_size=8, new_tokens=128, minibatches=2)
    args.__dict__.update(precision="bf16-mixed", gradient_checkpointing=True, steps=3)
    assert "| hf (stopped at the time limit (125 s) after 2 of 3 steps) | 2,048 |" in scale.markdown([row], args, "H")


def test_a_scale_run_stopped_in_its_teardown_after_every_step_is_whole(tmp_path, monkeypatch):
    res = {"engine": "hf", "steps": {k: [1.0, 2.0, 3.0] for k in scale.STEP_KEYS}, "params": 1, "peak_tflops": 1.0}
    res.update(peak_gpu_gb=1.0, peak_gpu_reserved_gb=1.0, plan_gb=1.0, plan="p")
    res["mismatch"] = {k: [] for k in scale.MISMATCH_KEYS}
    (tmp_path / "hf.live.json").write_text(json.dumps(res))

    def killed(cmd, **kw):  # the 1.7B process measured its 3 steps, then met the deadline on its way out
        raise subprocess.TimeoutExpired(cmd, kw["timeout"])

    monkeypatch.setattr(scale.subprocess, "run", killed)
    args = argparse.Namespace(steps=3, time_limit=105)
    assert scale._engine_run("hf", args, [], tmp_path, deadline=0.0)["stopped"] is None
    args.steps = 4
    row = scale._engine_run("hf", args, [], tmp_path, deadline=0.0)
    assert row["stopped"] == "stopped at the time limit (105 s) after 3 of 4 steps" and row["steps_done"] == 3


def test_trl_reports_the_pairs_that_ran_without_the_floor():
    run = {"step_s": 1.0, "cpu_s": 1.0, "tokens_per_s": 100.0, "peak_rss_mib": 10.0}
    agg = trl.aggregate_size("tiny-8m", 7, {"creditbench/matched": [run], "trl/matched": [{**run, "step_s": 2.0}]})
    assert agg["matched"]["step_ratio"] == 0.5 and agg["matched"]["creditbench_over_floor"] is None
    assert "best" not in agg and agg["floor_s"] is None
    assert trl.runs_to_do(["creditbench/matched", "trl/matched"]) == [("creditbench", "matched"), ("trl", "matched")]


def _script(tmp_path: Path, **env: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "OUT": str(tmp_path / "out"), "PYTHON": sys.executable, "TMPDIR": str(tmp_path), **env}
    return subprocess.run(["bash", str(SCRIPT)], env=env, capture_output=True, text=True, timeout=600)


@pytest.mark.slow
def test_the_script_runs_end_to_end_on_the_cpu_at_smoke_sizes(tmp_path):
    names = [c.name for c in CHECKS]  # every check, the measured ones too: each command path runs
    proc = _script(tmp_path, GPU_CHECK_DEVICE="cpu", GPU_CHECK_ONLY=" ".join(names))
    assert proc.returncode == 0, proc.stdout[-4000:]
    out = tmp_path / "out"
    status = {r.split("\t")[0]: r.split("\t")[1] for r in (out / "raw" / "status.tsv").read_text().splitlines()}
    assert list(status) == names and names[:3] == ["trl_tiny-8m", "trl_1.7b", "pytest_gpu"]  # the open ones first
    for name, state in status.items():  # every check passed, or was skipped on purpose
        assert state == "passed" or state.startswith(("skipped: needs trl", "skipped: measured already")), name
    assert sum(s == "passed" for s in status.values()) >= 3
    scale_row = json.loads((out / "raw" / "scale_cpu.json").read_text())["rows"][0]
    assert scale_row["stopped"] is None and 0 < scale_row["params"] < 2_000_000  # the smoke shape, not 1.7B
    summary = (out / "summary.md").read_text()
    assert "## Short bf16 GRPO run on chain (grpo-chain-tiny-500k-seed0, FINISHED)" in summary
    assert "<!-- scale_cpu.md -->" in summary and (out / "results.json").exists()
    assert (out / "raw" / "logs" / "train_chain.log").exists() and (out / "raw" / "mlflow.db").exists()


@pytest.mark.slow
def test_a_benchmark_stopped_by_its_time_limit_keeps_what_it_measured(tmp_path):
    env = {**os.environ, "GPU_CHECK_DEVICE": "cpu", "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"}
    argv = ["--model", QWEN, "--engines", "hf", "--device", "cpu", "--steps", "1000", "--prompts", "2"]
    argv += ["--group-size", "2", "--new-tokens", "4", "--minibatches", "1", "--no-gradient-checkpointing"]
    argv += ["--time-limit", "40", "--out", str(tmp_path / "scale.md")]
    proc = subprocess.run(
        [sys.executable, "-m", "bench.perf.scale", *argv], env=env, cwd=tmp_path, capture_output=True, text=True
    )
    assert proc.returncode == 3, proc.stderr[-4000:]
    row = json.loads((tmp_path / "scale.json").read_text())["rows"][0]
    assert row["stopped"].startswith("stopped at the time limit (40 s) after") and 1 <= row["steps_done"] < 1000
    assert "stopped at the time limit" in (tmp_path / "scale.md").read_text()
