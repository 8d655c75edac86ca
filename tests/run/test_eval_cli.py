"""``creditbench eval``: any checkpoint on any task, pass@k with SEs to stdout and MLflow."""

import json

import mlflow
import pytest
from shared_data import DATA, needs_data

from bench.cli import main


@pytest.fixture
def checkpoint(policy_dir):
    return str(policy_dir)


def run_cli(capsys, *argv):
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


@needs_data
def test_eval_writes_pass_at_k_with_standard_errors_to_stdout_and_mlflow(capsys, checkpoint, mlflow_uri, tmp_path):
    out_json = tmp_path / "result.json"
    code, out, err = run_cli(
        capsys,
        "eval",
        "--model",
        checkpoint,
        "--task",
        "gsm8k",
        "--n",
        "4",
        "--k",
        "1,2,4",
        "--num-problems",
        "3",
        "--max-new-tokens",
        "8",
        "--temperature",
        "1.0",
        "--template",
        "compact",
        "--data-dir",
        str(DATA),
        "--uri",
        mlflow_uri,
        "--out",
        str(out_json),
    )
    assert code == 0, err
    for k in (1, 2, 4):
        assert f"pass@{k}" in out and "SE over problems" in out
    result = json.loads(out_json.read_text())
    assert result["num_problems"] == 3 and len(result["per_problem"]) == 3
    assert all(p["n"] == 4 and 0 <= p["correct"] <= 4 for p in result["per_problem"])
    run = mlflow.MlflowClient(mlflow_uri).get_run(result["mlflow_run_id"])
    assert run.data.tags["kind"] == "eval" and run.data.tags["task"] == "gsm8k" and run.data.tags["task_version"] == "1"
    metrics = run.data.metrics
    for k in (1, 2, 4):
        assert f"eval/gsm8k/pass_at_{k}" in metrics and f"eval/gsm8k/pass_at_{k}_se" in metrics
    assert metrics["eval/gsm8k/num_problems"] == 3 and run.data.params["n"] == "4"
    artifacts = {a.path for a in mlflow.MlflowClient(mlflow_uri).list_artifacts(run.info.run_id)}
    assert {"per_problem.json", "completions.json"} <= artifacts


def error_line(err: str) -> str:
    lines = [l for l in err.splitlines() if l.startswith("creditbench: error:")]
    assert len(lines) == 1, err
    return lines[0]


@pytest.mark.parametrize(
    "argv, expected",
    [
        ([], "--task is required (unless --model is a training run's id: then its task)"),
        (["--task", "gsm8kk"], "unknown task 'gsm8kk'. Did you mean 'gsm8k'"),
        (["--task", "gsm8k", "--n", "2", "--k", "1,4"], "--k values must lie in [1, n=2]"),
        (["--task", "gsm8k", "--k", "one"], "--k must be comma-separated integers"),
        (["--task", "gsm8k", "--template", "qwen"], "valid: qwen-math, chat, instruct, compact"),
        (["--task", "gsm8k", "--task-option", "grader_timeout"], "--task_option expects KEY=VALUE"),
        (["--task", "gsm8k", "--task-option", "levels=[3]"], "has no option 'levels'"),
        (["--task", "gsm8k", "--data-dir", "/no/such/dir"], "data directory '/no/such/dir' does not exist"),
        (["--task", "amc23", "--split", "train"], "task 'amc23' has no 'train' split; valid: eval"),
        (
            ["--task", "humaneval"],
            "runs model-written code; it only does so when you opt in with --allow_code_execution",
        ),
    ],
)
def test_bad_eval_input_is_one_line_and_loads_no_model(
    capsys, checkpoint, mlflow_uri, tmp_path, monkeypatch, argv, expected
):
    monkeypatch.delenv("CREDITBENCH_ALLOW_CODE_EXECUTION", raising=False)
    code, out, err = run_cli(capsys, "eval", "--model", checkpoint, "--uri", mlflow_uri, *argv)
    assert code == 2 and expected in error_line(err), err
    assert not (tmp_path / "mlflow.db").exists()  # nothing was written


def test_eval_rejects_a_size_and_a_missing_model(capsys, mlflow_uri):
    code, _, err = run_cli(
        capsys, "eval", "--model", "tiny-500k", "--task", "gsm8k", "--uri", mlflow_uri, "--data-dir", str(DATA)
    )
    assert code == 2 and "is a size, not a checkpoint" in error_line(err)


@needs_data
@pytest.mark.parametrize(
    "task, extra",
    [
        ("gsm8k", ["--task.options", f"{{data_dir: {DATA}, template: compact}}"]),
        ("mbpp", ["--task.options", f"{{data_dir: {DATA}}}", "--allow_code_execution", "true"]),
    ],
)
def test_training_runs_on_a_real_math_and_code_task(capsys, checkpoint, mlflow_uri, task, extra):
    code, out, err = run_cli(
        capsys,
        "train",
        "--model.name",
        checkpoint,
        "--task.name",
        task,
        *extra,
        "--rl.steps",
        "1",
        "--rl.prompts_per_step",
        "2",
        "--rl.group_size",
        "2",
        "--eval.num_problems",
        "2",
        "--eval.n",
        "2",
        "--eval.k",
        "[1, 2]",
        "--rl.sampling.max_new_tokens",
        "8",
        "--eval.sampling.max_new_tokens",
        "8",
        "--tracking.uri",
        mlflow_uri,
        "--no-progress",
    )
    assert code == 0, err
    run = mlflow.MlflowClient(mlflow_uri).search_runs(
        [mlflow.MlflowClient(mlflow_uri).get_experiment_by_name("creditbench").experiment_id]
    )[0]
    assert run.data.tags["task"] == task and f"eval/{task}/pass_at_2" in run.data.metrics
    assert run.data.metrics["train/samples"] == 4
