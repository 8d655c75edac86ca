"""bench.studies.pretrained's report and resume, on made-up measurements (the measurements themselves
need the fetched model and take tens of minutes on a CPU: tests/engine/test_pretrained.py's slow test
runs the RL step on it)."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from bench.errors import CreditBenchError
from bench.studies import pretrained as bench


def args(tmp_path, **kw):
    base = dict(problems=4, max_new_tokens=64, tasks=["gsm8k", "mbpp"], rl_steps=2, rl_max_new_tokens=32)
    base |= dict(rl_prompts=2, rl_group=4, rl_lr=2e-5, rl_micro_batch_tokens=2048, rl_task=None, fresh=False)
    return SimpleNamespace(**{**base, "out": str(tmp_path / "pretrained.md"), **kw})


def an_eval(task, correct, n=4):
    lo, hi = bench.wilson(correct, n)
    per = [{"id": f"{task}/eval/{i}", "correct": int(i < correct)} for i in range(n)]
    out = dict(task=task, n=n, correct=correct, pass_at_1=correct / n, ci95=[lo, hi], mean_length=50.0)
    return out | dict(truncated_frac=0.25, wall_s=10.0, tokens_per_s=20.0, per_problem=per, load=1.5)


def test_the_wilson_interval_stays_in_range_and_covers_the_estimate():
    assert bench.wilson(0, 8)[0] == 0.0 and bench.wilson(8, 8)[1] == 1.0
    lo, hi = bench.wilson(7, 8)
    assert 0.4 < lo < 7 / 8 < hi < 1.0


def test_the_report_shows_each_eval_the_curve_and_the_command(tmp_path):
    a = args(tmp_path)
    evals = [an_eval("gsm8k", 1), an_eval("mbpp", 2)]
    step = {"train/reward": 0.25, "train/mixed_group_frac": 0.5, "train/tokens": 1000.0}
    step |= {"time/rollout_s": 30.0, "time/score_s": 4.0, "time/update_s": 6.0, "time/step_s": 41.0}
    second = {**step, "train/tokens": 2000.0}  # the module logs the run's running total
    rl = dict(task="mbpp", steps=2, prompts=2, group=4, max_new_tokens=32, lora="rank 16, all-linear", lr=2e-5)
    rl |= dict(micro_batch_tokens=2048, wall_s=90.0, curve=[step, second], load=1.9, peak_rss_gb=10.04)
    rl["plan"] = {"static_gb": 2.66, "activations_gb": 6.53, "total_gb": 9.19}
    text = bench.report(evals, rl, {"cpu": "X", "cpus": 2, "torch_threads": 2, "torch": "2", "gpu": None}, a)
    assert "| gsm8k | 4 | 0.250 |" in text and "| mbpp | 4 | 0.500 |" in text and "| 52.4 |" in text
    assert "| 1 | 0.25 | 0.50 |" in text and "| 2 | 0.25 | 0.50 |" in text
    assert "generated 33.3 completion tokens/s" in text  # 2000 tokens in 2 x 30 s of rollout
    assert "through 100.0 completion tokens/s" in text  # and 2 x (4 + 6) s of scoring and update
    assert "--rl_micro_batch_tokens 2048" in text and "1.5, 1.5, 1.9" in text
    assert "far too few to show learning" in text
    assert "was 10.0 GB; bench.run.plan estimates the update at 9.2 GB (2.7 GB" in text
    waiting = bench.report(evals, None, {"cpu": "X", "cpus": 2, "torch_threads": 2, "torch": "2", "gpu": None}, a)
    assert "(not run yet" in waiting


def test_a_stopped_run_keeps_the_evals_it_measured_with_the_same_settings(tmp_path):
    a = args(tmp_path)
    data = {"args": {"problems": 4, "max_new_tokens": 64}, "evals": [an_eval("gsm8k", 1), an_eval("math500", 0)]}
    (tmp_path / "pretrained.json").write_text(json.dumps(data))
    assert [e["task"] for e in bench.previous(a)] == ["gsm8k"]  # math500 is not asked for this time
    assert bench.previous(args(tmp_path, fresh=True)) == []
    assert bench.previous(args(tmp_path, max_new_tokens=128)) == []  # other settings: measured again
    old = {**data, "evals": [{k: v for k, v in e.items() if k != "per_problem"} for e in data["evals"]]}
    (tmp_path / "pretrained.json").write_text(json.dumps(old))
    assert bench.previous(a) == []  # a report without per-problem results is not kept


def test_render_rewrites_the_markdown_from_the_measurements_alone(tmp_path):
    a = args(tmp_path, rl_steps=0)
    m = {"cpu": "X", "cpus": 2, "torch_threads": 2, "torch": "2", "gpu": None}
    data = {"model": bench.MODEL, "machine": m, "evals": [an_eval("gsm8k", 3)], "grpo": None, "args": vars(a)}
    (tmp_path / "pretrained.json").write_text(json.dumps(data))
    assert bench.render(a.out) == 0
    text = (tmp_path / "pretrained.md").read_text()
    assert "| gsm8k | 4 | 0.750 |" in text and "the script had the cores to itself" in text
    busy = {**data, "evals": [{**an_eval("gsm8k", 3), "load": 3.4}]}
    (tmp_path / "pretrained.json").write_text(json.dumps(busy))
    bench.render(a.out)
    assert "other work shared the cores" in (tmp_path / "pretrained.md").read_text()
    with pytest.raises(CreditBenchError, match="no measurements at"):
        bench.render(str(tmp_path / "elsewhere.md"))


def test_the_grpo_part_is_the_run_config_train_would_get(tmp_path):
    """The benchmark's GRPO run is a RunConfig (so its memory plan is bench.run.plan's own)."""
    cfg = bench.run_config("gsm8k", args(tmp_path))
    assert cfg.model.name == bench.MODEL and cfg.model.lora.rank == 16 and cfg.precision == "32-true"
    assert (cfg.rl.prompts_per_step, cfg.rl.group_size, cfg.rl.micro_batch_tokens) == (2, 4, 2048)
    assert cfg.task.options == {"template": "chat"} and cfg.method.name == "grpo"


def test_a_bad_grpo_setting_is_one_line_naming_the_field(tmp_path):
    with pytest.raises(CreditBenchError, match="rl.micro_batch_tokens") as e:
        bench.run_config("gsm8k", args(tmp_path, rl_micro_batch_tokens=16))
    assert "\n" not in str(e.value)


def test_the_code_tasks_run_programs_only_with_the_opt_in(monkeypatch):
    """Without --allow_code_execution the code tasks are refused before any work (before even the
    model is looked for), with the opt-in's one line; the GRPO part's run config carries the flag."""
    monkeypatch.delenv("CREDITBENCH_ALLOW_CODE_EXECUTION", raising=False)
    monkeypatch.setattr("sys.argv", ["pretrained", "--tasks", "gsm8k", "humaneval", "--rl_steps", "0"])
    with pytest.raises(CreditBenchError, match="task 'humaneval' runs model-written code; it only does so when"):
        bench.main()
    grpo = SimpleNamespace(rl_steps=2, rl_prompts=2, rl_group=4, rl_lr=2e-5, rl_micro_batch_tokens=0)
    grpo.rl_max_new_tokens, grpo.allow_code_execution = 16, True
    assert bench.run_config("mbpp", grpo).allow_code_execution is True
