"""Bad input to ``creditbench eval`` is refused in one line before a model's weights are loaded."""

from __future__ import annotations

import pytest
from bad_input_support import BAD_URIS, assert_names, cli, error_line


def eval_cli(capsys, ws, *argv):
    return cli(capsys, "eval", "--uri", ws.uri, *argv)


EVAL_CASES = [
    ("n-word", ["--task", "arithmetic", "--n", "ten"], ["--n", "ten"]),
    ("dtype", ["--task", "arithmetic", "--dtype", "fp8"], ["--dtype", "fp8", "float32", "bfloat16"]),
    ("unknown-flag", ["--task", "arithmetic", "--temprature", "0.6"], ["--temprature"]),
    ("no-task", [], ["--task", "required"]),
    (
        "task-option-word",
        ["--task", "arithmetic", "--task-option", "num_operands=three"],
        ["num_operands", "three", "int"],
    ),
    (
        "task-option-unknown",
        ["--task", "arithmetic", "--task-option", "num_operandz=2"],
        ["no option 'num_operandz'", "Did you mean 'num_operands'"],
    ),
    ("top-p", ["--task", "arithmetic", "--top-p", "0"], ["top_p must be in (0, 1]"]),
    ("temperature", ["--task", "arithmetic", "--temperature", "-1"], ["temperature must be >= 0"]),
    ("n-zero", ["--task", "arithmetic", "--n", "0"], ["--n must be >= 1"]),
    ("max-new-tokens", ["--task", "arithmetic", "--max-new-tokens", "0"], ["--max_new_tokens >= 1"]),
    ("split", ["--task", "arithmetic", "--split", "test"], ["no 'test' split", "valid: train, eval"]),
]


@pytest.mark.parametrize("argv, expected", [pytest.param(a, e, id=i) for i, a, e in EVAL_CASES])
def test_bad_eval_input_is_one_line_and_loads_no_model(capsys, ws, no_weights, policy_dir, argv, expected):
    code, _, err = eval_cli(capsys, ws, "--model", policy_dir, *argv)
    assert_names(error_line(code, err), expected)
    ws.assert_unchanged()


def test_eval_of_a_missing_model_directory_says_so(capsys, ws, no_weights):
    code, _, err = eval_cli(capsys, ws, "--model", "/no/such/checkpoint", "--task", "arithmetic")
    assert_names(error_line(code, err), ["model directory '/no/such/checkpoint' does not exist"])
    ws.assert_unchanged()


@pytest.mark.parametrize(
    "env, expected",
    [
        ("data", ["task 'math500'", "math500/test.jsonl", "not found"]),
        ("no-such-data", ["data directory", "no-such-data", "does not exist", "CREDITBENCH_DATA"]),
    ],
)
def test_eval_with_missing_benchmark_data(capsys, ws, no_weights, policy_dir, monkeypatch, env, expected):
    monkeypatch.setenv("CREDITBENCH_DATA", str(ws.root / env))
    code, _, err = eval_cli(capsys, ws, "--model", policy_dir, "--task", "math500")
    assert_names(error_line(code, err), expected)
    ws.assert_unchanged()


@pytest.mark.parametrize("uri, expected", BAD_URIS[:3])
def test_eval_checks_the_tracking_uri_before_loading_the_model(
    capsys, ws, no_weights, policy_dir, monkeypatch, uri, expected
):
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")  # bounds the time where nothing checks first
    code, _, err = cli(
        capsys,
        "eval",
        "--model",
        policy_dir,
        "--task",
        "arithmetic",
        "--num-problems",
        "2",
        "--uri",
        uri.format(root=ws.root),
    )
    assert_names(error_line(code, err), expected)
    ws.assert_unchanged()
