"""Bad input to ``creditbench sweep``, ``summarize`` and ``table``: a bad spec, flag or tracking URI
is refused in one line and leaves the sweep's earlier results and MLflow runs as they were."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import yaml
from bad_input_support import FAST_S, SWEEP, UNREACHABLE, assert_names, cli, error_line, mlflow_runs
from tiny_sweep import SPEC


def write_spec(tmp_path: Path, changes: dict | None = None, name: str = "spec.yaml") -> Path:
    spec = {**SPEC, "name": SWEEP, **(changes or {})}
    path = tmp_path / "specs" / name
    path.parent.mkdir(exist_ok=True)
    path.write_text(yaml.safe_dump({k: v for k, v in spec.items() if v is not None}))
    return path


def sweep_cli(capsys, ws, spec, *argv):
    return cli(capsys, "sweep", spec, "--results-dir", ws.results, "--uri", ws.uri, *argv)


SWEEP_CASES = [
    # models entries, {name, overrides} form
    (
        "models-entry-key-typo",
        {"models": [{"name": "tiny-500k", "overides": {"rl.lr": 1e-3}}]},
        ["a models entry is a name or {name, overrides}", "overides"],
    ),
    (
        "models-entry-without-name",
        {"models": [{"overrides": {"rl.lr": 1e-3}}]},
        ["a models entry is a name or {name, overrides}"],
    ),
    (
        "models-entry-overrides-not-mapping",
        {"models": [{"name": "tiny-500k", "overrides": "rl.lr=1e-3"}]},
        ["model 'tiny-500k': overrides must be a mapping"],
    ),
    ("models-entry-a-list", {"models": [["tiny-500k", "tiny-2m"]]}, ["a models entry is a name or {name, overrides}"]),
    ("models-entry-empty", {"models": ["tiny-500k", None]}, ["a models entry is a name or {name, overrides}"]),
    (
        "models-entry-size",
        {"models": [{"name": "tiny-5m", "overrides": {}}]},
        ["unknown model size 'tiny-5m'", "tiny-2m, tiny-500k, tiny-8m"],
    ),
    (
        "models-entry-missing-dir",
        {"models": [{"name": "./no/such/model"}]},
        ["model directory './no/such/model' does not exist"],
    ),
    (
        "models-entry-out-of-range",
        {"models": ["tiny-500k", {"name": "tiny-2m", "overrides": {"rl.lr": -1.0}}]},
        ["tiny-2m", "rl.lr must be > 0"],
    ),
    (
        "models-entry-devices-auto",
        {"models": [{"name": "tiny-2m", "overrides": {"trainer.devices": 2}}]},
        ["tiny-2m", "needs trainer.strategy ddp or fsdp, got 'auto'"],
    ),
    (
        "models-entry-engine",
        {"models": [{"name": "tiny-2m", "overrides": {"rollout.engine": "sglang"}}]},
        ["tiny-2m", "rollout.engine", "'hf', 'vllm'"],
    ),
    (
        "models-entry-strategy",
        {"models": [{"name": "tiny-2m", "overrides": {"trainer.strategy": "deepspeed"}}]},
        ["tiny-2m", "'auto', 'ddp', 'fsdp'"],
    ),
    # overrides
    (
        "gpu-memory",
        {"overrides": {**SPEC["overrides"], "rollout.gpu_memory_utilization": 0}},
        ["rollout.gpu_memory_utilization must be in (0, 1)"],
    ),
    (
        "max-model-len",
        {"overrides": {**SPEC["overrides"], "rollout.max_model_len": -8}},
        ["rollout.max_model_len must be >= 0"],
    ),
    (
        "lora-sync",
        {"overrides": {**SPEC["overrides"], "rollout.lora_sync": "copy"}},
        ["rollout.lora_sync", "'merge', 'adapter'"],
    ),
    ("devices-zero", {"overrides": {**SPEC["overrides"], "trainer.devices": 0}}, ["trainer.devices must be >= 1"]),
    (
        "nodes-2-auto",
        {"overrides": {**SPEC["overrides"], "trainer.num_nodes": 2}},
        ["needs trainer.strategy ddp or fsdp"],
    ),
    (
        "prompts-per-process",
        {"overrides": {**SPEC["overrides"], "trainer.devices": 2, "trainer.strategy": "ddp", "rl.prompts_per_step": 3}},
        ["must be divisible by the number of processes"],
    ),
    (
        "fsdp-one-process",
        {"overrides": {**SPEC["overrides"], "trainer.strategy": "fsdp", "trainer.accelerator": "cpu"}},
        ["trainer.strategy fsdp needs trainer.devices x trainer.num_nodes >= 2"],
    ),
    (
        "vllm-ddp",
        {"overrides": {**SPEC["overrides"], "rollout.engine": "vllm", "trainer.strategy": "ddp", "trainer.devices": 2}},
        ["rollout.engine vllm runs in one training process"],
    ),
    ("precision", {"overrides": {**SPEC["overrides"], "precision": "fp8"}}, ["precision", "'32-true', 'bf16-mixed'"]),
    ("word-for-number", {"overrides": {**SPEC["overrides"], "rl.lr": "fast"}}, ["rl.lr", "fast"]),
    ("list-for-number", {"overrides": {**SPEC["overrides"], "rl.group_size": [4, 8]}}, ["rl.group_size"]),
    ("unknown-setting", {"overrides": {**SPEC["overrides"], "rl.stpes": 3}}, ["stpes", "Did you mean", "steps"]),
    ("overrides-not-mapping", {"overrides": "rl.lr=1e-3"}, ["overrides", "mapping"]),
    ("section-a-string", {"overrides": {"rl": "fast"}}, ["rl", "mapping", "fast"]),
    ("eval-unknown-key", {"eval": {"n": 2, "k": [1, 2], "evry": 2}}, ["evry", "Did you mean", "every"]),
    # tasks and methods
    ("eval-tasks-a-name", {"eval_tasks": "gsm8kk"}, ["unknown task 'gsm8kk'", "Did you mean 'gsm8k'"]),
    ("eval-task", {"eval_tasks": [{"name": "math5000"}]}, ["unknown task 'math5000'", "Did you mean 'math500'"]),
    (
        "task-options-not-mapping",
        {"tasks": [{"name": "arithmetic", "options": "easy"}]},
        ["arithmetic", "options", "mapping"],
    ),
    (
        "task-option",
        {"tasks": [{"name": "arithmetic", "options": {"num_operandz": 2}}]},
        ["no option 'num_operandz'", "Did you mean 'num_operands'"],
    ),
    (
        "task-option-word",
        {"tasks": [{"name": "arithmetic", "options": {"num_operands": "two"}}]},
        ["num_operands", "two", "int"],
    ),
    (
        "method-options-not-mapping",
        {"methods": [{"name": "grpo", "options": "clip_eps=0.3"}, "gspo"]},
        ["grpo", "options", "mapping"],
    ),
    (
        "method-option-value",
        {"methods": ["grpo", {"name": "gspo", "options": {"aggregation": "sum"}}]},
        ["unknown aggregation 'sum'", "token-mean, seq-mean-token-mean"],
    ),
    (
        "method-entry-key",
        {"methods": [{"name": "grpo", "optons": {}}]},
        ["'optons'", "Did you mean 'options'", "label, name, options, overrides"],
    ),
    (
        "method-overrides-method",
        {"method_overrides": {"grpoo": {"rl.lr": 1e-3}}},
        ["unknown method 'grpoo'", "Valid methods:"],
    ),
    ("method-overrides-not-mapping", {"method_overrides": {"grpo": "rl.lr=1e-3"}}, ["grpo", "overrides", "mapping"]),
    # the spec itself
    ("spec-key", {"seed": [0]}, ["'seed'", "Did you mean 'seeds'", "Valid"]),
    ("threads", {"threads": -1}, ["threads must be an integer >= 0"]),
    ("target", {"target": 1.5}, ["target must be in (0, 1]"]),
    ("budget-word", {"budget": {"samples": "lots"}}, ["budget samples must be a positive integer, got 'lots'"]),
    ("name-a-path", {"name": "../demo"}, ["name must be a plain directory name"]),
    ("base-missing", {"base": "no_such_base.yaml"}, ["base config", "no_such_base.yaml", "does not exist"]),
    ("base-section-a-string", {"base": "base.yaml"}, ["base config", "model", "mapping"]),
]


@pytest.mark.parametrize("changes, expected", [pytest.param(c, e, id=i) for i, c, e in SWEEP_CASES])
def test_bad_sweep_spec_is_one_line(capsys, ws, tmp_path, changes, expected):
    (tmp_path / "specs").mkdir()
    (tmp_path / "specs" / "base.yaml").write_text("model: tiny-500k\n")  # a section given as a string
    code, _, err = sweep_cli(capsys, ws, write_spec(tmp_path, changes), "--dry-run")
    assert_names(error_line(code, err), expected)
    ws.assert_unchanged()


@pytest.mark.parametrize(
    "spec, expected",
    [
        pytest.param("missing.yaml", ["sweep spec", "missing.yaml", "does not exist"], id="missing"),
        pytest.param("list.yaml", ["expected a mapping of name"], id="a-list"),
        pytest.param("empty.yaml", ["expected a mapping of name"], id="empty"),
        pytest.param("broken.yaml", ["not valid YAML"], id="malformed"),
    ],
)
def test_sweep_spec_file_that_is_missing_or_not_a_spec(capsys, ws, tmp_path, spec, expected):
    (tmp_path / "list.yaml").write_text("- grpo\n- gspo\n")
    (tmp_path / "empty.yaml").write_text("")
    (tmp_path / "broken.yaml").write_text("name: demo\nmethods: [grpo\n")
    code, _, err = sweep_cli(capsys, ws, tmp_path / spec)
    assert_names(error_line(code, err), expected)
    ws.assert_unchanged()


@pytest.mark.parametrize(
    "argv, expected",
    [
        pytest.param(["--jobs", "two"], ["--jobs", "two"], id="jobs-word"),
        pytest.param(["--gpu-gb", "lots", "--dry-run", "--plan"], ["--gpu_gb", "lots"], id="gpu-gb-word"),
    ],
)
def test_bad_sweep_flags_are_one_line(capsys, ws, tmp_path, argv, expected):
    code, _, err = sweep_cli(capsys, ws, write_spec(tmp_path), *argv)
    assert_names(error_line(code, err), expected)
    ws.assert_unchanged()


def test_sweep_without_a_spec_is_one_line(capsys, ws):
    code, _, err = cli(capsys, "sweep")
    assert_names(error_line(code, err), ["spec", "required"])


@pytest.mark.parametrize(
    "changes, uri, expected",
    [
        pytest.param(
            {"methods": ["grpo", "s-trace"]}, None, ["unknown method 's-trace'", "s_trace"], id="unknown-method"
        ),
        pytest.param(
            {"models": [{"name": "tiny-500k", "overrides": {"trainer.devices": 2}}]},
            None,
            ["needs trainer.strategy ddp or fsdp"],
            id="models-entry",
        ),
        pytest.param(
            {}, UNREACHABLE, ["cannot reach MLflow tracking server 'http://127.0.0.1:9'"], id="unreachable-uri"
        ),
        pytest.param(
            {}, "sqlite:///{root}/no/such/dir/mlflow.db", ["no/such/dir", "does not exist"], id="sqlite-missing-dir"
        ),
    ],
)
def test_refused_sweep_leaves_the_existing_results_and_store_as_they_were(
    capsys, ws, tmp_path, monkeypatch, changes, uri, expected
):
    """The sweep ``demo`` ran before (results/demo/ and its run in the store); a bad new attempt at it,
    not a dry run, must not touch them, create its lock or a parent run."""
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")  # bounds the time where nothing checks first
    spec = write_spec(tmp_path, changes)
    t0 = time.perf_counter()
    code, _, err = cli(
        capsys, "sweep", spec, "--results-dir", ws.results, "--uri", (uri or ws.uri).format(root=ws.root)
    )
    assert time.perf_counter() - t0 < FAST_S
    assert_names(error_line(code, err), expected)
    ws.assert_unchanged()
    assert mlflow_runs(ws.db) == [ws.run_id]


# ------------------------------------------------------------------ creditbench summarize / table
def test_summarize_a_sweep_without_runs_keeps_its_old_report(capsys, ws):
    code, _, err = cli(capsys, "summarize", "--sweep", "stale", "--uri", ws.uri, "--no-plots")
    assert_names(error_line(code, err), ["no finished runs under", "stale", "run the sweep first"])
    ws.assert_unchanged()


def test_summarize_an_unknown_sweep_names_the_ones_there_are(capsys, ws):
    code, _, err = cli(capsys, "summarize", "--sweep", "dmeo", "--uri", ws.uri, "--no-plots")
    line = error_line(code, err)
    assert_names(line, ["no finished runs", "dmeo"])
    assert SWEEP in line.replace(str(ws.root), ""), f"the sweeps that have runs ({SWEEP}) are not named:\n{line}"
    ws.assert_unchanged()


def test_summarize_in_a_results_dir_that_does_not_exist(capsys, ws):
    code, _, err = cli(
        capsys, "summarize", "--sweep", SWEEP, "--results-dir", "no-such-results", "--uri", ws.uri, "--no-plots"
    )
    assert_names(error_line(code, err), ["no finished runs under", "no-such-results"])
    ws.assert_unchanged()


def test_summarize_with_a_truncated_run_result_names_the_file(capsys, ws):
    broken = ws.results / SWEEP / "runs" / "gspo-arithmetic-tiny-500k-seed0.json"
    broken.write_text('{"run_name": "gspo-arithmetic-tiny-500k-seed0", "method": "gs')
    ws.rebaseline()
    code, _, err = cli(capsys, "summarize", "--sweep", SWEEP, "--uri", ws.uri, "--no-plots")
    assert_names(error_line(code, err), [broken.name, "JSON"])
    ws.assert_unchanged()


@pytest.mark.parametrize(
    "argv, expected",
    [
        pytest.param(["summarize"], ["--sweep", "required"], id="summarize-no-sweep"),
        pytest.param(["summarize", "--sweep", SWEEP, "--plots"], ["--plots"], id="summarize-unknown-flag"),
        pytest.param(["table"], ["--paper", "required"], id="table-no-paper"),
        pytest.param(
            ["table", "--paper", "selective_traces", "--sweeps", SWEEP], ["--sweeps"], id="table-unknown-flag"
        ),
    ],
)
def test_summarize_and_table_usage_errors_are_one_line(capsys, ws, argv, expected):
    code, _, err = cli(capsys, *argv)
    assert_names(error_line(code, err), expected)
    ws.assert_unchanged()


def test_table_of_an_unknown_paper_names_the_papers(capsys, ws):
    code, _, err = cli(capsys, "table", "--paper", "grpo-lambda", "--results-dir", ws.results)
    assert_names(
        error_line(code, err),
        ["unknown paper 'grpo-lambda'", "Did you mean 'grpo_lambda'", "arca, grpo_lambda, ibpo, selective_traces"],
    )
    ws.assert_unchanged()
