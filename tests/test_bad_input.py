"""Bad input, as users make it: every mistake on the command line, in a run YAML or in a sweep spec
stops with exactly one line ``creditbench: error: ...`` and a nonzero exit status, names the valid
choices where there are some, and is refused before any work starts, leaving what is already on
disk exactly as it was (an MLflow store with a run in it, a sweep's results folder, a run's result
JSON: all hashed before and after; no new MLflow run, no partial files).

What other files already check is not repeated here (tests/test_cli.py, tests/run/test_sweep.py,
tests/run/test_eval_cli.py, tests/report/test_papers.py); malformed model output and hostile code are
tests/tasks/test_grader.py's and tests/tasks/test_sandbox.py's. Every test fails before training starts: a
Lightning Trainer, a sweep's run process or (for ``creditbench eval``) loading a model's weights
fails the test at once, so an input that is wrongly accepted never starts work.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import socket
import subprocess
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

import pytest
import yaml
from tiny_sweep import SPEC

from bench.cli import main
from bench.errors import CreditBenchError
from bench.run.tracking import check_tracking_uri

UNREACHABLE = "http://127.0.0.1:9"  # the discard port: nothing listens there
SWEEP = "demo"  # the sweep whose results folder already exists
RUN_KEY = "grpo-arithmetic-tiny-500k-seed0"  # the run of that sweep whose result JSON already exists
FAST_S = 30.0  # "fails fast": MLflow's own retries against an unreachable server take minutes


# ------------------------------------------------------------------ helpers
class WorkStarted(AssertionError):
    """Bad input got as far as real work (training, a sweep's run, a model's weights)."""


def cli(capsys, *argv) -> tuple[int, str, str]:
    """``creditbench ARGV`` in this process: (exit status, stdout, stderr)."""
    try:
        code = main([str(a) for a in argv])
    except SystemExit as e:  # argparse exits by itself, after printing usage and its own error line
        code = e.code
    except WorkStarted:
        raise
    except Exception as e:  # noqa: BLE001 - a traceback where the user should get one line
        out = capsys.readouterr()
        pytest.fail(f"creditbench {' '.join(map(str, argv))} raised {type(e).__name__}: {e} instead of printing "
                    f"one error line (stderr: {out.err[-500:]!r})")
    out = capsys.readouterr()
    return code, out.out, out.err


def error_line(code, err: str) -> str:
    """The one line a refused command prints: nothing else on stderr, a nonzero exit status."""
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("creditbench: error: "), \
        f"expected exactly one line 'creditbench: error: ...' on stderr, got:\n{err}"
    assert isinstance(code, int) and code != 0, f"exit status {code!r} for a refused command"
    return lines[0]


def assert_names(line: str, expected: list[str]) -> None:
    missing = [s for s in expected if s not in line]
    assert not missing, f"the error line lacks {missing}:\n{line}"


def snapshot(root: Path) -> dict[str, str]:
    """Every path under ``root``: a directory marker or the file's sha256."""
    return {str(p.relative_to(root)): "<dir>" if p.is_dir() else hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*"))}


def mlflow_runs(db: Path) -> list[str]:
    import mlflow

    c = mlflow.MlflowClient(f"sqlite:///{db}")
    exps = [e.experiment_id for e in c.search_experiments()]
    return sorted(r.info.run_id for r in c.search_runs(exps)) if exps else []


@dataclass
class Workspace:
    """The current directory of a test, holding what earlier work left: an MLflow store with one
    finished run, ``results/demo/`` (a finished sweep: spec, report, one run's result JSON, its
    config and log) and ``results/stale/`` (a report whose runs are gone)."""

    root: Path
    db: Path
    run_id: str
    before: dict[str, str]

    @property
    def uri(self) -> str:
        return f"sqlite:///{self.db}"

    @property
    def results(self) -> Path:
        return self.root / "results"

    @property
    def run_json(self) -> Path:
        return self.results / SWEEP / "runs" / f"{RUN_KEY}.json"

    def rebaseline(self) -> None:
        self.before = snapshot(self.root)

    def assert_unchanged(self) -> None:
        after = snapshot(self.root)
        added = sorted(set(after) - set(self.before))
        removed = sorted(set(self.before) - set(after))
        changed = sorted(k for k in set(after) & set(self.before) if after[k] != self.before[k])
        assert not (added or removed or changed), \
            f"bad input changed what was on disk: added {added}, removed {removed}, modified {changed}"


def run_result(mlflow_run_id: str) -> dict:
    """A finished run's result JSON, as bench/run/train.py writes it."""
    def ev(p1: float) -> dict:
        return {"pass_at_1": p1, "pass_at_1_se": 0.05, "pass_at_2": p1 + 0.1, "pass_at_2_se": 0.06, "avg_at_2": p1,
                "num_problems": 12.0, "mean_length": 9.0, "truncated_frac": 0.0, "flexible_avg_at_n": p1,
                "tokens_per_correct": 30.0}

    return {"run_name": RUN_KEY, "mlflow_run_id": mlflow_run_id, "method": "grpo", "task": "arithmetic",
            "eval_tasks": ["arithmetic"], "model": "tiny-500k", "params": 500_000, "lora_rank": 0, "seed": 0,
            "steps": 5, "samples": 160, "tokens": 1600, "wall_s": 12.0,
            "tags": {"run_key": RUN_KEY, "label": "grpo", "config_hash": "0123456789abcdef", "budget": "160 samples"},
            "budget": {"samples": 160, "tokens": 0}, "base": ev(0.25), "final": ev(0.3),
            "delta_pass_at_1": {"delta": 0.05, "se": 0.03, "z": 1.7},
            "history": [{"step": s, "samples": 32 * s, "tokens": 320 * s, "eval": {"arithmetic": ev(0.25 + 0.01 * s)}}
                        for s in (0, 2, 4, 5)],
            "credit_probe": None}


@pytest.fixture(scope="module")
def store_template(tmp_path_factory) -> tuple[Path, str]:
    """An MLflow SQLite store holding one finished run of the sweep ``demo``."""
    import mlflow

    db = tmp_path_factory.mktemp("store") / "mlflow.db"
    c = mlflow.MlflowClient(f"sqlite:///{db}")
    exp = c.create_experiment("creditbench")
    run = c.create_run(exp, run_name=RUN_KEY, tags={"kind": "rl", "sweep": SWEEP, "run_key": RUN_KEY})
    c.log_param(run.info.run_id, "rl.lr", 1e-4)
    c.log_metric(run.info.run_id, "eval/arithmetic/pass_at_1", 0.25, step=0)
    c.set_terminated(run.info.run_id, "FINISHED")
    return db, run.info.run_id


@pytest.fixture(autouse=True)
def ws(tmp_path, monkeypatch, store_template) -> Workspace:
    root = tmp_path / "ws"
    (root / "data").mkdir(parents=True)  # an empty benchmark data directory
    db = root / "mlflow.db"
    shutil.copy(store_template[0], db)
    demo = root / "results" / SWEEP
    (demo / "runs").mkdir(parents=True)
    (demo / "configs").mkdir()
    (demo / "logs").mkdir()
    (demo / "sweep.yaml").write_text(yaml.safe_dump({**SPEC, "name": SWEEP}))
    (demo / "summary.md").write_text("| model | method | final pass@1 |\n|---|---|---|\n| tiny-500k | grpo | 0.300 |\n")
    (demo / "summary.csv").write_text("model,method,final_pass_at_1\ntiny-500k,grpo,0.3\n")
    (demo / "report.json").write_text('{"rows": [], "runs": 1}\n')
    (demo / "runs" / f"{RUN_KEY}.json").write_text(json.dumps(run_result(store_template[1]), indent=2))
    (demo / "configs" / f"{RUN_KEY}.yaml").write_text("seed: 0\n")
    (demo / "logs" / f"{RUN_KEY}.log").write_text("step 1 ...\n")
    stale = root / "results" / "stale"
    (stale / "runs").mkdir(parents=True)
    (stale / "summary.md").write_text("| model | method |\n")
    monkeypatch.chdir(root)
    # whatever a wrongly accepted input would write goes under this test's directory
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{db}")
    monkeypatch.setenv("CREDITBENCH_CACHE", str(root / ".creditbench" / "cache"))
    monkeypatch.setenv("CREDITBENCH_CHECKPOINTS", str(root / ".creditbench" / "checkpoints"))
    monkeypatch.delenv("CREDITBENCH_DATA", raising=False)
    monkeypatch.delenv("CREDITBENCH_ALLOW_CODE_EXECUTION", raising=False)
    monkeypatch.delenv("MLFLOW_ALLOW_FILE_STORE", raising=False)
    return Workspace(root, db, store_template[1], snapshot(root))


@pytest.fixture(autouse=True)
def no_work(monkeypatch):
    """Refuse training and a sweep's run processes: bad input must never get that far."""
    import lightning.pytorch

    def trainer(*args, **kwargs):
        raise WorkStarted("a Lightning Trainer was created: the bad input was not refused before work started")

    monkeypatch.setattr(lightning.pytorch.Trainer, "__init__", trainer)
    real_run = subprocess.run

    def run(cmd, *args, **kwargs):
        if isinstance(cmd, (list, tuple)) and "bench.cli" in cmd and "train" in cmd:
            raise WorkStarted(f"a sweep launched a run ({' '.join(map(str, cmd))}): the bad input was not refused")
        return real_run(cmd, *args, **kwargs)

    monkeypatch.setattr(subprocess, "run", run)


@pytest.fixture
def no_weights(monkeypatch):
    """`creditbench eval` must refuse bad input before it loads a model."""
    import bench.engine.policy

    def load_policy(*args, **kwargs):
        raise WorkStarted("the model's weights were being loaded: the bad input was not refused before work started")

    monkeypatch.setattr(bench.engine.policy, "load_policy", load_policy)


def train(capsys, ws: Workspace, *argv):
    """``creditbench train`` into the existing store, as a run of the existing sweep (so a run that
    got through would rewrite results/demo/runs/<run>.json)."""
    return cli(capsys, "train", "--tracking.uri", ws.uri, "--tracking.sweep", SWEEP,
               "--tracking.results_dir", ws.results, *argv)


# ------------------------------------------------------------------ creditbench train
TRAIN_CASES = [
    # unknown names
    ("eval-task", ["--eval.tasks", "[{name: gsm8kk}]"], ["unknown task 'gsm8kk'", "Did you mean 'gsm8k'", "math500"]),
    ("eval-task-by-name", ["--eval.tasks", "[gsm8kk]"], ["unknown task 'gsm8kk'", "Did you mean 'gsm8k'", "math500"]),
    ("eval-task-option", ["--eval.tasks", "[{name: gsm8k, options: {levels: [3]}}]"],
     ["task 'gsm8k' has no option 'levels'", "data_dir, grader_timeout, grader_workers, template"]),
    ("task-option", ["--task.options", "{num_operandz: 3}"],
     ["no option 'num_operandz'", "Did you mean 'num_operands'", "eval_size, high, low"]),
    ("task-template", ["--task.options", "{template: qwen-math}"], ["unknown template 'qwen-math'", "compact, instruct"]),
    ("method-option", ["--method.name", "dapo", "--method.options", "{clip_eps_high: 0.28}"],
     ["no option 'clip_eps_high'", "Did you mean 'clip_high'", "clip_low"]),
    ("aggregation-dapo", ["--method.name", "dapo", "--method.options", "{aggregation: sum}"],
     ["unknown aggregation 'sum'", "token-mean, seq-mean-token-mean, seq-mean-token-sum, seq-mean-token-sum-norm"]),
    ("arca-normalise", ["--method.name", "arca", "--model.lora.rank", "4", "--method.options", "{normalise: max}"],
     ["unknown normalise 'max'", "sum, softmax"]),
    ("arca-hidden", ["--method.name", "arca", "--model.lora.rank", "4", "--method.options", "{hidden: mid}"],
     ["unknown hidden 'mid'", "post_norm, pre_norm"]),
    ("entropy-population", ["--method.name", "entropy_top", "--method.options", "{population: group}"],
     ["unknown population 'group'", "batch, sequence"]),
    ("grpo-lambda-clip-target", ["--method.name", "grpo_lambda", "--method.options", "{clip_target: none}"],
     ["unknown clip_target 'none'", "traced_ratio, token_ratio"]),
    ("ibpo-repair-advantage", ["--method.name", "ibpo", "--method.options", "{repair_advantage: big}"],
     ["unknown repair_advantage 'big'", "source, group"]),
    ("p-trace-weights", ["--method.name", "p_trace", "--method.options", "{weights: equal}"],
     ["unknown weights 'equal'", "decay, uniform"]),
    ("s-trace-distance", ["--method.name", "s_trace", "--method.options", "{distance: far}"],
     ["unknown distance 'far'", "raw, selected"]),
    ("rollout-engine", ["--rollout.engine", "sglang"], ["rollout.engine", "sglang", "'hf', 'vllm'"]),
    ("rollout-lora-sync", ["--rollout.lora_sync", "copy"], ["rollout.lora_sync", "'merge', 'adapter'"]),
    ("trainer-strategy", ["--trainer.strategy", "deepspeed"], ["trainer.strategy", "deepspeed", "'auto', 'ddp', 'fsdp'"]),
    ("trainer-accelerator", ["--trainer.accelerator", "tpu"], ["trainer.accelerator", "'auto', 'cpu', 'gpu'"]),
    ("fsdp-sharding", ["--trainer.fsdp_sharding", "FULL"], ["trainer.fsdp_sharding", "'FULL_SHARD', 'SHARD_GRAD_OP'"]),
    ("model-dtype", ["--model.dtype", "fp16"], ["model.dtype", "'float32', 'bfloat16', 'float16'"]),
    ("lr-schedule", ["--rl.schedule", "exponential"], ["rl.schedule", "'constant', 'cosine', 'linear'"]),
    ("setting-in-group", ["--rl.stpes", "3"], ["stpes", "Did you mean", "rl.steps"]),
    ("group", ["--rollouts.engine", "hf"], ["rollouts", "Did you mean", "rollout"]),
    # wrong types
    ("steps-word", ["--rl.steps", "ten"], ["rl.steps", "ten", "int"]),
    ("lr-word", ["--rl.lr", "abc"], ["rl.lr", "abc", "float"]),
    ("lr-list", ["--rl.lr", "[1e-4, 1e-5]"], ["rl.lr", "float"]),
    ("group-size-float", ["--rl.group_size", "4.5"], ["rl.group_size", "4.5"]),
    ("seed-float", ["--seed", "1.5"], ["seed", "1.5"]),
    ("devices-word", ["--trainer.devices", "two"], ["trainer.devices", "two"]),
    ("k-number", ["--eval.k", "4"], ["eval.k", "list"]),
    ("betas-one", ["--rl.betas", "[0.9]"], ["rl.betas", "2 elements"]),
    ("bool-word", ["--allow_code_execution", "maybe"], ["allow_code_execution", "maybe"]),
    ("options-list", ["--method.options", "[clip_eps, 0.3]"], ["method.options", "dict"]),
    ("section-a-string", ["--rl", "fast"], ["rl", "mapping", "fast"]),
    ("method-option-word", ["--method.options", "{kl_coef: abc}"], ["kl_coef", "abc", "float"]),
    ("method-option-list", ["--method.options", "{clip_eps: [0.2, 0.3]}"], ["clip_eps", "float"]),
    ("aggregation-list", ["--method.options", "{aggregation: [token-mean]}"], ["aggregation", "token-mean"]),
    ("task-option-word", ["--task.options", "{num_operands: three}"], ["num_operands", "three", "int"]),
    # out of range
    ("lr-negative", ["--rl.lr", "-0.0001"], ["rl.lr must be > 0, got -0.0001"]),
    ("lr-negative-exponent", ["--rl.lr=-1e-4"], ["rl.lr must be > 0, got -0.0001"]),
    ("lr-zero", ["--rl.lr", "0"], ["rl.lr must be > 0"]),
    ("ppo-epochs", ["--rl.ppo_epochs", "0"], ["rl.ppo_epochs must be >= 1"]),
    ("minibatches", ["--rl.minibatches", "1000"], ["rl.minibatches must be in [1, 128]"]),
    ("grad-clip", ["--rl.grad_clip", "-1"], ["rl.grad_clip must be >= 0"]),
    ("budget", ["--rl.budget_samples", "-10"], ["rl.budget_samples must be >= 0"]),
    ("top-p", ["--rl.sampling.top_p", "0"], ["top_p must be in (0, 1]"]),
    ("temperature", ["--eval.sampling.temperature", "-0.5"], ["temperature must be >= 0"]),
    ("max-new-tokens", ["--eval.sampling.max_new_tokens", "0"], ["max_new_tokens must be >= 1"]),
    ("eval-every", ["--eval.every", "0"], ["eval.every must be >= 1"]),
    ("eval-problems", ["--eval.num_problems", "0"], ["eval.num_problems must be >= 1"]),
    ("lora-dropout", ["--model.lora.dropout", "1"], ["model.lora.dropout must be in [0, 1)"]),
    ("lora-alpha", ["--model.lora.alpha", "0"], ["model.lora.alpha must be > 0"]),
    ("lora-targets", ["--model.lora.targets", "[]"], ["model.lora.targets must name at least one module"]),
    ("warmstart-target", ["--warmstart.target_accuracy", "1.5"], ["warmstart.target_accuracy must be in (0, 1]"]),
    ("threads", ["--threads", "-1"], ["threads must be >= 0"]),
    ("method-option-range", ["--method.options", "{clip_eps: 1.5}"], ["clip_eps must be in (0, 1), got 1.5"]),
    ("entropy-rho", ["--method.name", "entropy_top", "--method.options", "{rho: 0}"], ["rho must be in (0, 1]"]),
    ("task-option-range", ["--task.options", "{low: 50, high: 10}"], ["need 0 <= low <= high"]),
    ("devices-zero", ["--trainer.devices", "0"], ["trainer.devices must be >= 1, got 0"]),
    ("num-nodes-zero", ["--trainer.num_nodes", "0"], ["trainer.num_nodes must be >= 1"]),
    ("devices-2-auto", ["--trainer.devices", "2"],
     ["trainer.devices x trainer.num_nodes = 2 needs trainer.strategy ddp or fsdp, got 'auto'"]),
    ("nodes-2-auto", ["--trainer.num_nodes", "2"], ["= 2 needs trainer.strategy ddp or fsdp"]),
    ("prompts-per-process", ["--trainer.devices", "2", "--trainer.strategy", "ddp", "--rl.prompts_per_step", "3"],
     ["rl.prompts_per_step (3) must be divisible by the number of processes"]),
    ("eval-problems-per-process", ["--trainer.devices", "4", "--trainer.strategy", "ddp", "--eval.num_problems", "2"],
     ["eval.num_problems (2) must be at least the number of processes (4)"]),
    ("fsdp-cpu", ["--trainer.strategy", "fsdp", "--trainer.accelerator", "cpu"], ["fsdp needs GPUs", "use ddp on CPU"]),
    ("fsdp-train", ["--trainer.strategy", "fsdp"], ["trainer.strategy fsdp cannot train yet", "use trainer.strategy ddp"]),
    ("vllm-ddp", ["--rollout.engine", "vllm", "--trainer.strategy", "ddp", "--trainer.devices", "2"],
     ["rollout.engine vllm runs in one training process", "use rollout.engine hf"]),
    ("vllm-fsdp", ["--rollout.engine", "vllm", "--trainer.strategy", "fsdp", "--trainer.accelerator", "gpu"],
     ["rollout.engine vllm with trainer.strategy fsdp is not supported"]),
    ("vllm-missing", ["--rollout.engine", "vllm"], ["rollout.engine vllm needs vLLM", "rollout.engine hf"]),
    ("gpu-memory", ["--rollout.gpu_memory_utilization", "1.5"], ["rollout.gpu_memory_utilization must be in (0, 1)"]),
    ("kv-cache", ["--rollout.kv_cache_gb", "0"], ["rollout.kv_cache_gb must be > 0"]),
    ("max-model-len", ["--rollout.max_model_len", "-1"], ["rollout.max_model_len must be >= 0"]),
    ("checkpoint-every", ["--checkpoint.every", "-1"], ["checkpoint.every must be >= 0 (0 disables checkpoints)"]),
    ("checkpoint-every-word", ["--checkpoint.every", "often"], ["checkpoint.every", "often"]),
    ("checkpoint-resume", ["--checkpoint.resume", "maybe"], ["checkpoint.resume", "maybe"]),
    ("max-skipped-updates", ["--rl.max_skipped_updates", "-1"], ["rl.max_skipped_updates must be >= 0"]),
    # missing files
    ("model-dir-home", ["--model.name", "~/no/such/creditbench-model"],
     ["model directory '~/no/such/creditbench-model' does not exist"]),
    ("config-is-a-directory", ["--config", "results"], ["config", "not a file"]),
]


@pytest.mark.parametrize("argv, expected", [pytest.param(a, e, id=i) for i, a, e in TRAIN_CASES])
def test_bad_train_input_is_one_line_and_changes_nothing(capsys, ws, monkeypatch, argv, expected):
    import bench.engine.rollout

    monkeypatch.setattr(bench.engine.rollout, "vllm_available", lambda: False)  # a missing vLLM, wherever this runs
    code, _, err = train(capsys, ws, *argv)
    assert_names(error_line(code, err), expected)
    ws.assert_unchanged()


CONFIG_CASES = [
    ("section-a-string", "rl: fast\n", ["rl", "mapping", "fast"]),
    ("method-a-name", "method: grpo\n", ["method", "mapping", "grpo"]),
    ("top-level-list", "- rl\n- eval\n", ["bad configuration"]),
    ("list-for-number", "rl:\n  lr: [1.0e-4, 1.0e-5]\n", ["rl.lr", "float"]),
    ("word-for-number", "rl:\n  steps: ten\n", ["rl.steps", "ten"]),
    ("unknown-setting", "rl:\n  stpes: 3\n", ["stpes", "Did you mean", "steps"]),
    ("unknown-section", "rll:\n  lr: 1.0e-4\n", ["rll", "Did you mean", "rl"]),
    ("eval-task-names", "eval:\n  tasks: [math5000]\n", ["unknown task 'math5000'", "Did you mean 'math500'"]),
    ("devices-2-auto", "trainer:\n  devices: 2\n", ["needs trainer.strategy ddp or fsdp, got 'auto'"]),
]


@pytest.mark.parametrize("text, expected", [pytest.param(t, e, id=i) for i, t, e in CONFIG_CASES])
def test_bad_run_yaml_is_one_line_and_changes_nothing(capsys, ws, tmp_path, text, expected):
    path = tmp_path / "run.yaml"
    path.write_text(text)
    code, _, err = train(capsys, ws, "--config", path)
    assert_names(error_line(code, err), expected)
    ws.assert_unchanged()


def test_missing_benchmark_file_stops_training_before_anything_is_written(capsys, ws, monkeypatch):
    """GSM8K from a data directory without its files: the tiny model's warm-start must not leave a
    cache folder or lock behind, nor the run a checkpoint folder, before the file is found missing."""
    monkeypatch.setenv("CREDITBENCH_DATA", str(ws.root / "data"))
    code, _, err = train(capsys, ws, "--task.name", "gsm8k", "--task.options", "{template: compact}")
    assert_names(error_line(code, err), ["task 'gsm8k'", "gsm8k/train.jsonl", "not found", str(ws.root / "data")])
    ws.assert_unchanged()


def test_missing_eval_benchmark_file_stops_training_before_an_mlflow_run_exists(capsys, ws, monkeypatch, policy_dir):
    """An eval task (MATH-500) whose file is missing: refused before the MLflow run is created."""
    monkeypatch.setenv("CREDITBENCH_DATA", str(ws.root / "data"))
    code, _, err = train(capsys, ws, "--model.name", policy_dir, "--eval.tasks", "[{name: math500, options: "
                         "{template: compact}}]")
    assert_names(error_line(code, err), ["task 'math500'", "math500/test.jsonl", "not found"])
    ws.assert_unchanged()
    assert mlflow_runs(ws.db) == [ws.run_id]


def test_missing_data_directory_names_the_variable(capsys, ws, monkeypatch):
    monkeypatch.setenv("CREDITBENCH_DATA", str(ws.root / "no-such-data"))
    code, _, err = train(capsys, ws, "--task.name", "math", "--task.options", "{template: compact}")
    assert_names(error_line(code, err), ["data directory", "no-such-data", "does not exist", "CREDITBENCH_DATA"])
    ws.assert_unchanged()


# ------------------------------------------------------------------ the MLflow tracking URI
def test_unreachable_tracking_server_is_named_within_seconds():
    for uri in (UNREACHABLE, "https://127.0.0.1:9/", "http://user:secret@127.0.0.1:9/prefix"):
        t0 = time.perf_counter()
        with pytest.raises(CreditBenchError) as e:
            check_tracking_uri(uri)
        assert time.perf_counter() - t0 < 5
        msg = str(e.value)
        assert "\n" not in msg and msg.startswith("cannot reach MLflow tracking server 'http")
        assert_names(msg, ["127.0.0.1:9", "mlflow server --host 127.0.0.1 --port 9", "sqlite:///"])
        assert "secret" not in msg  # a password in the URI is not printed


def test_a_server_that_never_answers_is_refused_after_the_timeout():
    with socket.socket() as listener:  # accepts connections (the kernel does) but never answers
        listener.bind(("127.0.0.1", 0))
        listener.listen(4)
        uri = f"http://127.0.0.1:{listener.getsockname()[1]}"
        t0 = time.perf_counter()
        with pytest.raises(CreditBenchError, match="cannot reach MLflow tracking server .*no answer within 0.5 s"):
            check_tracking_uri(uri, timeout=0.5)
        assert time.perf_counter() - t0 < 3


def serve(status: int) -> HTTPServer:
    """An HTTP server on 127.0.0.1 answering every GET with ``status``."""
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(status)
            self.end_headers()
            self.wfile.write(b"OK")

        def log_message(self, *args):
            pass

    server = HTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


@pytest.mark.parametrize("status", [200, 401, 404])
def test_a_server_that_answers_is_accepted(status):
    server = serve(status)
    try:
        check_tracking_uri(f"http://127.0.0.1:{server.server_port}")
        check_tracking_uri(f"http://127.0.0.1:{server.server_port}/mlflow/")
    finally:
        server.shutdown()
        server.server_close()


def test_a_gateway_without_its_server_is_refused():
    server = serve(502)  # e.g. a reverse proxy whose MLflow server is down
    try:
        with pytest.raises(CreditBenchError, match="cannot reach MLflow tracking server .*HTTP 502"):
            check_tracking_uri(f"http://127.0.0.1:{server.server_port}")
    finally:
        server.shutdown()
        server.server_close()


def test_local_store_uris(ws):
    """sqlite:/// in a directory that does not exist (MLflow would create it and a new, empty store
    there), a directory or a text file as the database, and a file store that is a regular file."""
    (ws.root / "notes.txt").write_text("not a database\n")
    bad = {
        f"sqlite:///{ws.root}/no/such/dir/mlflow.db": ["directory", "no/such/dir", "does not exist"],
        "sqlite:///no-such-dir/mlflow.db": ["directory 'no-such-dir' does not exist"],
        f"sqlite:///{ws.root}/results": ["is a directory, not an SQLite database file"],
        f"sqlite:///{ws.root}/notes.txt": ["is not an SQLite database"],
        f"sqlite:///{ws.root}/notes.txt/mlflow.db": ["is a file, not a directory"],
        f"file://{ws.root}/notes.txt": ["is a regular file", "sqlite:///"],
        str(ws.root / "notes.txt"): ["is a regular file"],
        str(ws.db): ["is a regular file", f"use 'sqlite:///{ws.db}'"],  # the store, without sqlite:///
        "mlflow.db": ["is a regular file", f"use 'sqlite:///{Path('mlflow.db')}'"],
    }
    for uri, expected in bad.items():
        with pytest.raises(CreditBenchError) as e:
            check_tracking_uri(uri)
        assert uri in str(e.value) and "\n" not in str(e.value)
        assert_names(str(e.value), expected)
    for uri in (ws.uri, "sqlite:///mlflow.db", "sqlite:///new.db", f"sqlite:///{ws.root}/new.db", "sqlite:///:memory:",
                f"file://{ws.root}/mlruns", "databricks", "postgresql://user@db.example/mlflow"):
        check_tracking_uri(uri)
    assert not (ws.root / "no").exists() and not (ws.root / "no-such-dir").exists()


BAD_URIS = [
    pytest.param(UNREACHABLE, ["cannot reach MLflow tracking server 'http://127.0.0.1:9'", "mlflow server"], id="unreachable"),
    pytest.param("sqlite:///{root}/no/such/dir/mlflow.db", ["no/such/dir", "does not exist"], id="sqlite-missing-dir"),
    pytest.param("file://{root}/results/demo/summary.md", ["is a regular file"], id="file-uri-a-file"),
    pytest.param("{root}/mlflow.db", ["is a regular file", "use 'sqlite:///"], id="store-without-sqlite"),
    pytest.param("file://{root}/mlruns", ["cannot use MLflow tracking URI", "sqlite:///"], id="file-store"),
]


@pytest.mark.parametrize("uri, expected", BAD_URIS)
def test_train_refuses_an_unusable_tracking_uri_fast(capsys, ws, policy_dir, uri, expected):
    uri = uri.format(root=ws.root)
    t0 = time.perf_counter()
    code, _, err = cli(capsys, "train", "--model.name", policy_dir, "--tracking.uri", uri)
    assert time.perf_counter() - t0 < FAST_S
    assert_names(error_line(code, err), expected)
    assert not (ws.root / "no").exists() and not (ws.root / "mlruns").exists()
    assert mlflow_runs(ws.db) == [ws.run_id]


def test_train_checks_the_tracking_uri_before_writing_anything(capsys, ws):
    """Before the tiny model's warm-start (its cache folder) and the run's checkpoint folder."""
    code, _, err = train(capsys, ws, "--tracking.uri", UNREACHABLE, "--task.options", "{train_size: 400, eval_size: 20}")
    assert_names(error_line(code, err), ["cannot reach MLflow tracking server 'http://127.0.0.1:9'"])
    ws.assert_unchanged()


# ------------------------------------------------------------------ creditbench eval
def eval_cli(capsys, ws, *argv):
    return cli(capsys, "eval", "--uri", ws.uri, *argv)


EVAL_CASES = [
    ("n-word", ["--task", "arithmetic", "--n", "ten"], ["--n", "ten"]),
    ("dtype", ["--task", "arithmetic", "--dtype", "fp8"], ["--dtype", "fp8", "float32", "bfloat16"]),
    ("unknown-flag", ["--task", "arithmetic", "--temprature", "0.6"], ["--temprature"]),
    ("no-task", [], ["--task", "required"]),
    ("task-option-word", ["--task", "arithmetic", "--task-option", "num_operands=three"], ["num_operands", "three", "int"]),
    ("task-option-unknown", ["--task", "arithmetic", "--task-option", "num_operandz=2"],
     ["no option 'num_operandz'", "Did you mean 'num_operands'"]),
    ("top-p", ["--task", "arithmetic", "--top-p", "0"], ["top_p must be in (0, 1]"]),
    ("temperature", ["--task", "arithmetic", "--temperature", "-1"], ["temperature must be >= 0"]),
    ("n-zero", ["--task", "arithmetic", "--n", "0"], ["--n must be >= 1"]),
    ("max-new-tokens", ["--task", "arithmetic", "--max-new-tokens", "0"], ["--max-new-tokens >= 1"]),
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


@pytest.mark.parametrize("env, expected", [
    ("data", ["task 'math500'", "math500/test.jsonl", "not found"]),
    ("no-such-data", ["data directory", "no-such-data", "does not exist", "CREDITBENCH_DATA"]),
])
def test_eval_with_missing_benchmark_data(capsys, ws, no_weights, policy_dir, monkeypatch, env, expected):
    monkeypatch.setenv("CREDITBENCH_DATA", str(ws.root / env))
    code, _, err = eval_cli(capsys, ws, "--model", policy_dir, "--task", "math500")
    assert_names(error_line(code, err), expected)
    ws.assert_unchanged()


@pytest.mark.parametrize("uri, expected", BAD_URIS[:3])
def test_eval_checks_the_tracking_uri_before_loading_the_model(capsys, ws, no_weights, policy_dir, monkeypatch,
                                                                uri, expected):
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")  # bounds the time where nothing checks first
    code, _, err = cli(capsys, "eval", "--model", policy_dir, "--task", "arithmetic", "--num-problems", "2",
                       "--uri", uri.format(root=ws.root))
    assert_names(error_line(code, err), expected)
    ws.assert_unchanged()


# ------------------------------------------------------------------ creditbench sweep
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
    ("models-entry-key-typo", {"models": [{"name": "tiny-500k", "overides": {"rl.lr": 1e-3}}]},
     ["a models entry is a name or {name, overrides}", "overides"]),
    ("models-entry-without-name", {"models": [{"overrides": {"rl.lr": 1e-3}}]}, ["a models entry is a name or {name, overrides}"]),
    ("models-entry-overrides-not-mapping", {"models": [{"name": "tiny-500k", "overrides": "rl.lr=1e-3"}]},
     ["model 'tiny-500k': overrides must be a mapping"]),
    ("models-entry-a-list", {"models": [["tiny-500k", "tiny-2m"]]}, ["a models entry is a name or {name, overrides}"]),
    ("models-entry-empty", {"models": ["tiny-500k", None]}, ["a models entry is a name or {name, overrides}"]),
    ("models-entry-size", {"models": [{"name": "tiny-5m", "overrides": {}}]},
     ["unknown model size 'tiny-5m'", "tiny-2m, tiny-500k, tiny-8m"]),
    ("models-entry-missing-dir", {"models": [{"name": "./no/such/model"}]}, ["model directory './no/such/model' does not exist"]),
    ("models-entry-out-of-range", {"models": ["tiny-500k", {"name": "tiny-2m", "overrides": {"rl.lr": -1.0}}]},
     ["tiny-2m", "rl.lr must be > 0"]),
    ("models-entry-devices-auto", {"models": [{"name": "tiny-2m", "overrides": {"trainer.devices": 2}}]},
     ["tiny-2m", "needs trainer.strategy ddp or fsdp, got 'auto'"]),
    ("models-entry-engine", {"models": [{"name": "tiny-2m", "overrides": {"rollout.engine": "sglang"}}]},
     ["tiny-2m", "rollout.engine", "'hf', 'vllm'"]),
    ("models-entry-strategy", {"models": [{"name": "tiny-2m", "overrides": {"trainer.strategy": "deepspeed"}}]},
     ["tiny-2m", "'auto', 'ddp', 'fsdp'"]),
    # overrides
    ("gpu-memory", {"overrides": {**SPEC["overrides"], "rollout.gpu_memory_utilization": 0}},
     ["rollout.gpu_memory_utilization must be in (0, 1)"]),
    ("max-model-len", {"overrides": {**SPEC["overrides"], "rollout.max_model_len": -8}}, ["rollout.max_model_len must be >= 0"]),
    ("lora-sync", {"overrides": {**SPEC["overrides"], "rollout.lora_sync": "copy"}}, ["rollout.lora_sync", "'merge', 'adapter'"]),
    ("devices-zero", {"overrides": {**SPEC["overrides"], "trainer.devices": 0}}, ["trainer.devices must be >= 1"]),
    ("nodes-2-auto", {"overrides": {**SPEC["overrides"], "trainer.num_nodes": 2}}, ["needs trainer.strategy ddp or fsdp"]),
    ("prompts-per-process", {"overrides": {**SPEC["overrides"], "trainer.devices": 2, "trainer.strategy": "ddp",
                                           "rl.prompts_per_step": 3}}, ["must be divisible by the number of processes"]),
    ("fsdp-cpu", {"overrides": {**SPEC["overrides"], "trainer.strategy": "fsdp", "trainer.accelerator": "cpu"}},
     ["fsdp needs GPUs"]),
    ("vllm-ddp", {"overrides": {**SPEC["overrides"], "rollout.engine": "vllm", "trainer.strategy": "ddp",
                                "trainer.devices": 2}}, ["rollout.engine vllm runs in one training process"]),
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
    ("task-options-not-mapping", {"tasks": [{"name": "arithmetic", "options": "easy"}]}, ["arithmetic", "options", "mapping"]),
    ("task-option", {"tasks": [{"name": "arithmetic", "options": {"num_operandz": 2}}]},
     ["no option 'num_operandz'", "Did you mean 'num_operands'"]),
    ("task-option-word", {"tasks": [{"name": "arithmetic", "options": {"num_operands": "two"}}]},
     ["num_operands", "two", "int"]),
    ("method-options-not-mapping", {"methods": [{"name": "grpo", "options": "clip_eps=0.3"}, "gspo"]},
     ["grpo", "options", "mapping"]),
    ("method-option-value", {"methods": ["grpo", {"name": "gspo", "options": {"aggregation": "sum"}}]},
     ["unknown aggregation 'sum'", "token-mean, seq-mean-token-mean"]),
    ("method-entry-key", {"methods": [{"name": "grpo", "optons": {}}]},
     ["'optons'", "Did you mean 'options'", "label, name, options, overrides"]),
    ("method-overrides-method", {"method_overrides": {"grpoo": {"rl.lr": 1e-3}}}, ["unknown method 'grpoo'", "Valid methods:"]),
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


@pytest.mark.parametrize("spec, expected", [
    pytest.param("missing.yaml", ["sweep spec", "missing.yaml", "does not exist"], id="missing"),
    pytest.param("list.yaml", ["expected a mapping of name"], id="a-list"),
    pytest.param("empty.yaml", ["expected a mapping of name"], id="empty"),
    pytest.param("broken.yaml", ["not valid YAML"], id="malformed"),
])
def test_sweep_spec_file_that_is_missing_or_not_a_spec(capsys, ws, tmp_path, spec, expected):
    (tmp_path / "list.yaml").write_text("- grpo\n- gspo\n")
    (tmp_path / "empty.yaml").write_text("")
    (tmp_path / "broken.yaml").write_text("name: demo\nmethods: [grpo\n")
    code, _, err = sweep_cli(capsys, ws, tmp_path / spec)
    assert_names(error_line(code, err), expected)
    ws.assert_unchanged()


@pytest.mark.parametrize("argv, expected", [
    pytest.param(["--jobs", "two"], ["--jobs", "two"], id="jobs-word"),
    pytest.param(["--gpu-gb", "lots", "--dry-run", "--plan"], ["--gpu-gb", "lots"], id="gpu-gb-word"),
])
def test_bad_sweep_flags_are_one_line(capsys, ws, tmp_path, argv, expected):
    code, _, err = sweep_cli(capsys, ws, write_spec(tmp_path), *argv)
    assert_names(error_line(code, err), expected)
    ws.assert_unchanged()


def test_sweep_without_a_spec_is_one_line(capsys, ws):
    code, _, err = cli(capsys, "sweep")
    assert_names(error_line(code, err), ["spec", "required"])


@pytest.mark.parametrize("changes, uri, expected", [
    pytest.param({"methods": ["grpo", "s-trace"]}, None, ["unknown method 's-trace'", "s_trace"], id="unknown-method"),
    pytest.param({"models": [{"name": "tiny-500k", "overrides": {"trainer.devices": 2}}]}, None,
                 ["needs trainer.strategy ddp or fsdp"], id="models-entry"),
    pytest.param({}, UNREACHABLE, ["cannot reach MLflow tracking server 'http://127.0.0.1:9'"], id="unreachable-uri"),
    pytest.param({}, "sqlite:///{root}/no/such/dir/mlflow.db", ["no/such/dir", "does not exist"], id="sqlite-missing-dir"),
])
def test_refused_sweep_leaves_the_existing_results_and_store_as_they_were(capsys, ws, tmp_path, monkeypatch,
                                                                         changes, uri, expected):
    """The sweep ``demo`` ran before (results/demo/ and its run in the store); a bad new attempt at it,
    not a dry run, must not touch them, create its lock or a parent run."""
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")  # bounds the time where nothing checks first
    spec = write_spec(tmp_path, changes)
    t0 = time.perf_counter()
    code, _, err = cli(capsys, "sweep", spec, "--results-dir", ws.results, "--uri",
                       (uri or ws.uri).format(root=ws.root))
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
    code, _, err = cli(capsys, "summarize", "--sweep", SWEEP, "--results-dir", "no-such-results", "--uri", ws.uri,
                       "--no-plots")
    assert_names(error_line(code, err), ["no finished runs under", "no-such-results"])
    ws.assert_unchanged()


def test_summarize_with_a_truncated_run_result_names_the_file(capsys, ws):
    broken = ws.results / SWEEP / "runs" / "gspo-arithmetic-tiny-500k-seed0.json"
    broken.write_text('{"run_name": "gspo-arithmetic-tiny-500k-seed0", "method": "gs')
    ws.rebaseline()
    code, _, err = cli(capsys, "summarize", "--sweep", SWEEP, "--uri", ws.uri, "--no-plots")
    assert_names(error_line(code, err), [broken.name, "JSON"])
    ws.assert_unchanged()


@pytest.mark.parametrize("argv, expected", [
    pytest.param(["summarize"], ["--sweep", "required"], id="summarize-no-sweep"),
    pytest.param(["summarize", "--sweep", SWEEP, "--plots"], ["--plots"], id="summarize-unknown-flag"),
    pytest.param(["table"], ["--paper", "required"], id="table-no-paper"),
    pytest.param(["table", "--paper", "selective_traces", "--sweeps", SWEEP], ["--sweeps"], id="table-unknown-flag"),
])
def test_summarize_and_table_usage_errors_are_one_line(capsys, ws, argv, expected):
    code, _, err = cli(capsys, *argv)
    assert_names(error_line(code, err), expected)
    ws.assert_unchanged()


def test_table_of_an_unknown_paper_names_the_papers(capsys, ws):
    code, _, err = cli(capsys, "table", "--paper", "grpo-lambda", "--results-dir", ws.results)
    assert_names(error_line(code, err), ["unknown paper 'grpo-lambda'", "Did you mean 'grpo_lambda'",
                                         "arca, grpo_lambda, ibpo, selective_traces"])
    ws.assert_unchanged()


# ------------------------------------------------------------------ checkpoints: a directory that cannot take them
def unwritable_directory(tmp_path: Path) -> Path:
    """A read-only directory; where permissions do not bind (root), a place no one can create
    directories in (sysfs), which fails the same way a read-only or full disk does."""
    import os

    d = tmp_path / "read-only"
    d.mkdir()
    d.chmod(0o555)
    return d / "checkpoints" if not os.access(d, os.W_OK) else Path("/sys/creditbench-checkpoints")


def test_unwritable_checkpoint_directory_is_refused_before_anything_is_written(capsys, ws, tmp_path, policy_dir):
    d = unwritable_directory(tmp_path)
    code, _, err = train(capsys, ws, "--model.name", policy_dir, "--checkpoint.dir", d)
    assert_names(error_line(code, err), [f"cannot write checkpoints to '{d}/", "checkpoint.dir",
                                         "checkpoint.every 0"])
    ws.assert_unchanged()
    assert mlflow_runs(ws.db) == [ws.run_id]  # no MLflow run was started
