"""Errors that point somewhere: a bad value in a run YAML, a sweep spec or its base config names the
file, the line and the field; flags are spelt one way in every command (snake_case, kebab-case
accepted) and a negative number is a value; the dry run refuses what a run refuses; an offline Hub
id is refused with what ``eval`` accepts; ``run_all.sh --help`` installs nothing; ``summarize``
reports to the sweep's own store."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from pathlib import Path

import pytest
from bad_input_support import SWEEP, assert_names, cli, error_line, train
from test_bad_input_sweep import sweep_cli, write_spec
from tiny_sweep import SPEC

ROOT = Path(__file__).resolve().parents[2]
RUN_YAML = """\
seed: 0
model:
  name: tiny-500k
method:
  name: grpo
rl:
  steps: 3
  lr: {lr}
  sampling: {{temperature: 1.0, top_p: {top_p}}}
"""
"""A run YAML whose ``rl.lr`` is on line 8 and ``rl.sampling`` on line 9."""


def run_yaml(ws, lr="1.0e-4", top_p="1.0", text: str | None = None) -> Path:
    path = ws.root / "run.yaml"
    path.write_text(text if text is not None else RUN_YAML.format(lr=lr, top_p=top_p))
    ws.rebaseline()
    return path


@pytest.mark.parametrize(
    "yaml_args, argv, expected",
    [
        pytest.param({"lr": "fast"}, [], ["run.yaml:8: rl.lr: Expected a float", "fast"], id="value"),
        pytest.param({"top_p": "hot"}, [], ["run.yaml:9: rl.sampling.top_p", "hot"], id="value-in-flow-mapping"),
        pytest.param({"lr": "-1.0e-4"}, [], ["run.yaml:8: rl.lr must be > 0"], id="value-refused-by-its-check"),
        pytest.param(
            {"text": RUN_YAML.format(lr=1, top_p=1).replace("grpo", "grpoo")},
            [],
            ["run.yaml:5: method.name: unknown method 'grpoo'", "Did you mean 'grpo'"],
            id="unknown-name",
        ),
        pytest.param(
            {"text": RUN_YAML.format(lr=1, top_p=1).replace("  steps: 3", "  stepz: 3")},
            [],
            ["run.yaml:7: unknown setting 'rl.stepz'", "Did you mean 'rl.steps'"],
            id="unknown-key",
        ),
        pytest.param(
            {"text": RUN_YAML.format(lr="[1", top_p=1)},
            [],
            ["run.yaml:9:11: not valid YAML", "(while parsing a flow sequence at line 8)"],
            id="malformed",
        ),
        pytest.param(
            {},
            ["--rl.lr", "fast"],
            ["bad configuration: --rl.lr fast: rl.lr: Expected a float"],
            id="flag-not-the-file",
        ),
    ],
)
def test_a_bad_run_yaml_names_its_file_line_and_field(capsys, ws, yaml_args, argv, expected):
    path = run_yaml(ws, **yaml_args)
    code, _, err = train(capsys, ws, "--config", path, *argv)
    line = error_line(code, err)
    assert_names(line, [f"{path.parent}/{e}" if e.startswith("run.yaml") else e for e in expected])
    if argv:  # the command line set the bad value: the file is not blamed
        assert "run.yaml" not in line
    ws.assert_unchanged()


@pytest.mark.parametrize("flag", [["--rl.lr", "-1e-4"], ["--rl.lr=-1e-4"], ["--rl.lr", "-0.0001"]])
def test_a_bad_flag_over_a_good_file_is_blamed_on_the_flag(capsys, ws, flag):
    """The file's rl.lr is fine; the flag's replaces it and fails the config's check, which reports
    the number as a float: the flag is named, not the file's line."""
    path = run_yaml(ws)
    code, _, err = train(capsys, ws, "--config", path, *flag)
    line = error_line(code, err)
    assert_names(line, ["bad configuration: --rl.lr ", ": rl.lr must be > 0, got -0.0001"])
    assert "run.yaml" not in line
    ws.assert_unchanged()


def test_the_flag_wins_over_the_file_and_the_file_is_blamed_for_its_own_value(capsys, ws):
    path = run_yaml(ws, lr="fast")
    code, _, err = train(capsys, ws, "--config", path, "--rl.lr", "1e-3")  # jsonargparse checks the file's value
    assert_names(error_line(code, err), [f"{path}:8: rl.lr", "fast"])
    ws.assert_unchanged()


SPEC_CASES = [
    ("seeds", {"seeds": [0, "one"]}, "seeds:", ["seeds must be integers, got [0, 'one']"]),
    ("budget", {"budget": {"samples": "lots"}}, "budget:", ["budget samples must be a positive integer"]),
    ("spec-key", {"seedz": [0]}, "seedz:", ["unknown sweep spec key 'seedz'", "Did you mean 'seeds'"]),
    ("method-name", {"methods": ["grpo", "s_tracer"]}, "- s_tracer", ["unknown method 's_tracer'"]),
    ("override-value", {"overrides": {"rl.minibatches": "two"}}, "rl.minibatches: two", ["Expected a int"]),
    ("override-key", {"overrides": {"rl.minibatchez": 2}}, "rl.minibatchez: 2", ["unknown setting 'rl.minibatchez'"]),
    ("baseline", {"baseline": "grpoo"}, "baseline: grpoo", ["is not one of the sweep's method labels"]),
    ("labels", {"methods": ["grpo", {"name": "grpo"}]}, "methods:", ["methods: label(s) 'grpo' used twice"]),
]


@pytest.mark.parametrize("changes, text, expected", [pytest.param(c, t, e, id=i) for i, c, t, e in SPEC_CASES])
def test_a_bad_sweep_spec_names_its_file_line_and_field(capsys, ws, tmp_path, changes, text, expected):
    """The line named holds the key or the value the error is about."""
    path = write_spec(tmp_path, changes)
    code, _, err = sweep_cli(capsys, ws, path, "--dry_run")
    line = error_line(code, err)
    assert_names(line, [f"sweep spec {path}:", *expected])
    number = int(line.split(f"{path}:", 1)[1].split(":", 1)[0])
    assert text in path.read_text().splitlines()[number - 1]
    ws.assert_unchanged()


def test_malformed_spec_and_a_bad_value_in_its_base_config_name_their_line(capsys, ws, tmp_path):
    path = write_spec(tmp_path)
    path.write_text("name: demo\nmethods: [grpo\nseeds: [0]\n")
    code, _, err = sweep_cli(capsys, ws, path, "--dry-run")
    assert_names(error_line(code, err), [f"sweep spec {path}:3:6: not valid YAML", "flow sequence at line 2"])
    base = tmp_path / "specs" / "base.yaml"
    base.write_text("seed: 0\nrl:\n  ppo_epochs: many\n")
    path = write_spec(tmp_path, {"base": "base.yaml"})
    code, _, err = sweep_cli(capsys, ws, path, "--dry_run")
    assert_names(error_line(code, err), [f"sweep spec {path}: base config {base}:3: ", "rl.ppo_epochs", "many"])
    ws.assert_unchanged()


# ------------------------------------------------------------------------------------ one flag style
def test_every_command_takes_snake_case_and_kebab_case_flags(capsys, ws, tmp_path, policy_dir, no_weights):
    for flag in ("--num_problems", "--num-problems"):  # the error names the one documented spelling
        code, _, err = cli(capsys, "eval", "--model", policy_dir, "--task", "arithmetic", flag, "many")
        assert_names(error_line(code, err), ["argument --num_problems", "invalid int value: 'many'"])
    for flag in ("--rl.sampling.max_new_tokens", "--rl.sampling.max-new-tokens"):
        code, _, err = train(capsys, ws, flag, "0")
        assert_names(error_line(code, err), ["max_new_tokens must be >= 1"])
    spec = write_spec(tmp_path)
    outs = []
    for argv in (["--dry_run", "--results_dir", ws.results], ["--dry-run", "--results-dir", ws.results]):
        code, out, err = cli(capsys, "sweep", spec, "--uri", ws.uri, *argv)
        assert code == 0 and not err, err
        outs.append(out)
    assert outs[0] == outs[1] and "runs; budget" in outs[0]
    code, help_text, _ = cli(capsys, "eval", "--help")
    assert code == 0
    assert "--num_problems" in help_text and "--max_new_tokens" in help_text and "--num-problems" not in help_text
    ws.assert_unchanged()


def test_a_negative_number_is_a_value_not_an_option(capsys, ws, policy_dir, no_weights):
    """argparse reads ``-1e-4`` as an option (its pattern misses exponents): the value must reach the
    config's own check, which names the field."""
    code, _, err = train(capsys, ws, "--rl.lr", "-1e-4")
    assert_names(error_line(code, err), ["bad configuration: --rl.lr -1e-4: rl.lr must be > 0, got -0.0001"])
    code, _, err = cli(capsys, "eval", "--model", policy_dir, "--task", "arithmetic", "--temperature", "-1e-3")
    assert_names(error_line(code, err), ["temperature must be >= 0"])
    ws.assert_unchanged()


# ------------------------------------------------------------------------ the dry run refuses what a run refuses
def test_the_dry_run_refuses_what_train_refuses(capsys, ws, tmp_path):
    """The same check (bench.run.resolve.preflight), the same line: FSDP on one process."""
    code, _, err = train(capsys, ws, "--trainer.strategy", "fsdp")
    refused = error_line(code, err).split("error: --trainer.strategy fsdp: ", 1)[1]  # train names its flag
    assert "trainer.strategy fsdp needs trainer.devices x trainer.num_nodes >= 2" in refused
    spec = write_spec(tmp_path, {"overrides": {**SPEC.get("overrides", {}), "trainer.strategy": "fsdp"}})
    code, _, err = sweep_cli(capsys, ws, spec, "--dry_run")
    assert_names(error_line(code, err), [str(spec), refused])
    ws.assert_unchanged()


def test_the_plan_notes_what_would_stop_a_run_on_this_machine(capsys, ws, tmp_path, monkeypatch):
    """vLLM missing here: train refuses; the plan (often made on another machine) names it as a note."""
    import bench.engine.engines

    monkeypatch.setattr(bench.engine.engines, "vllm_available", lambda: False)
    code, _, err = train(capsys, ws, "--rollout.engine", "vllm")
    refused = error_line(code, err).split("error: --rollout.engine vllm: ", 1)[1]  # train names its flag
    assert "rollout.engine vllm needs vLLM" in refused
    spec = write_spec(tmp_path, {"overrides": {**SPEC.get("overrides", {}), "rollout.engine": "vllm"}})
    code, out, err = sweep_cli(capsys, ws, spec, "--dry_run", "--plan")
    assert code == 0 and not err, err
    assert f"would stop before it starts: {refused}" in out
    code, out, _ = sweep_cli(capsys, ws, spec, "--dry_run")  # without --plan: this machine is not checked
    assert code == 0 and "note:" not in out
    ws.assert_unchanged()


# ------------------------------------------------------------------------------------ eval, run_all.sh, summarize
def test_eval_of_an_offline_hub_id_lists_what_eval_accepts(capsys, ws, monkeypatch, no_weights):
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    accepts = ["a saved model directory", "the MLflow run id of a training run", "local Hub cache"]
    code, _, err = cli(capsys, "eval", "--model", "nobody/no-such-model", "--task", "arithmetic", "--uri", ws.uri)
    line = error_line(code, err)
    assert_names(line, ["'nobody/no-such-model' is not in the local Hugging Face cache", *accepts])
    assert "tiny size" not in line and "tiny-500k" not in line  # sizes that eval refuses
    code, _, err = cli(capsys, "eval", "--model", "tiny-500k", "--task", "arithmetic", "--uri", ws.uri)
    assert_names(error_line(code, err), ["is a size, not a checkpoint", *accepts])
    ws.assert_unchanged()


def test_run_all_help_prints_before_installing_anything(tmp_path):
    """run_all.sh alone in a folder: its environment (bench/bootstrap.sh) is not there, so only help
    printed before the bootstrap succeeds."""
    alone = tmp_path / "alone"
    alone.mkdir()
    shutil.copy(ROOT / "run_all.sh", alone / "run_all.sh")
    t0 = time.perf_counter()
    for flag in ("--help", "-h"):
        done = subprocess.run(["bash", str(alone / "run_all.sh"), flag], capture_output=True, text=True, timeout=30)
        assert done.returncode == 0 and "./run_all.sh --quick" in done.stdout and not done.stderr, done.stderr
    assert time.perf_counter() - t0 < 10 and [p.name for p in alone.iterdir()] == ["run_all.sh"]
    done = subprocess.run(["bash", str(alone / "run_all.sh"), "--quick"], capture_output=True, text=True, timeout=30)
    assert done.returncode != 0 and "bootstrap.sh" in done.stderr  # the real command does need it


def test_summarize_reports_to_the_sweep_store_and_says_when_it_cannot(capsys, ws, monkeypatch):
    import mlflow

    from bench.tracking.stores import store_key

    elsewhere = ws.root / "other.db"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{elsewhere}")  # the default store is not the sweep's
    code, out, _ = cli(capsys, "summarize", "--sweep", SWEEP, "--results_dir", ws.results, "--no_plots")
    assert code == 0 and f"not logged to MLflow: no parent run of sweep '{SWEEP}' found in sqlite:///{elsewhere}" in out
    c = mlflow.MlflowClient(ws.uri)
    exp = c.get_experiment_by_name("creditbench").experiment_id
    parent = c.create_run(exp, run_name=SWEEP, tags={"kind": "sweep", "sweep": SWEEP}).info.run_id
    (ws.results / SWEEP / "store.json").write_text(json.dumps({"uri": ws.uri, "store": store_key(ws.uri)}))
    # the store the sweep ran against is named by --uri only: the default one does not hold its run
    code, out, _ = cli(capsys, "summarize", "--sweep", SWEEP, "--results_dir", ws.results, "--no_plots")
    assert code == 0 and f"not logged to MLflow: sweep '{SWEEP}' was tracked in {ws.uri!r}" in out
    assert not elsewhere.exists() and not c.list_artifacts(parent, "report")
    named = ("--results_dir", str(ws.results), "--no_plots", "--uri", ws.uri)
    code, out, _ = cli(capsys, "summarize", "--sweep", SWEEP, *named)
    assert code == 0 and f"logged to the sweep's parent MLflow run {parent} in {ws.uri}" in out
    assert [a.path for a in c.list_artifacts(parent, "report")]
