"""Trustworthy runs: a run killed with SIGKILL resumes from its last checkpoint to the metrics of an
uninterrupted run; the same seed gives the same run (rollouts included) and another seed does not;
a full disk mid-run loses nothing. (A NaN or inf in the update: tests/engine/test_faults.py.)"""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]

# a tiny run: tiny-500k quickly warm-started on one-step single-digit arithmetic (right about a third
# of the time, so groups mix and the updates move the weights), 8 RL steps, evaluated at steps 0, 4
# and 8, with a checkpoint every 2 steps
ARGS = [
    "--model.name",
    "tiny-500k",
    "--task.options",
    "{num_operands: 2, low: 0, high: 9, eval_size: 20}",
    "--warmstart.max_steps",
    "100",
    "--warmstart.check_every",
    "50",
    "--warmstart.batch_size",
    "32",
    "--warmstart.target_accuracy",
    "0.2",
    "--rl.steps",
    "8",
    "--rl.prompts_per_step",
    "4",
    "--rl.group_size",
    "4",
    "--rl.lr",
    "1e-3",
    "--rl.sampling.max_new_tokens",
    "16",
    "--eval.every",
    "4",
    "--eval.num_problems",
    "8",
    "--eval.n",
    "2",
    "--eval.k",
    "[1, 2]",
    "--rl.samples_to_log",
    "4",
    "--threads",
    "2",
    "--checkpoint.every",
    "2",
]


@pytest.fixture(scope="module")
def cache(warm_cache):
    return warm_cache


def train_cmd(tmp: Path, cache: str, *extra: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "bench.cli",
        "train",
        *ARGS,
        "--tracking.uri",
        f"sqlite:///{tmp / 'mlflow.db'}",
        "--tracking.cache_dir",
        cache,
        "--checkpoint.dir",
        str(tmp / "ckpt"),
        "--no-progress",
        *extra,
    ]


def run_in_process(tmp: Path, cache: str, *extra: str) -> dict:
    from bench.cli import main

    tmp.mkdir(parents=True, exist_ok=True)
    code = main(train_cmd(tmp, cache, *extra)[3:])
    assert code == 0
    return runs(tmp)


def runs(tmp: Path) -> dict:
    """{run name: (status, {metric: [(step, value), ...] in logging order}, {completions artifact: table})}."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(f"sqlite:///{tmp / 'mlflow.db'}")
    out = {}
    for exp in client.search_experiments():
        for run in client.search_runs([exp.experiment_id], "tags.kind = 'rl'"):  # not the warm-start's run
            rid = run.info.run_id
            metrics = {
                k: [
                    (m.step, m.value)
                    for m in sorted(client.get_metric_history(rid, k), key=lambda m: (m.timestamp, m.step))
                ]
                for k in run.data.metrics
            }
            tables = {}
            for f in client.list_artifacts(rid, "completions"):
                tables[f.path] = json.loads(Path(client.download_artifacts(rid, f.path, str(tmp / "dl"))).read_text())
            out[run.info.run_name] = (run.info.status, metrics, tables)
    return out


def comparable(metrics: dict) -> dict:
    """Everything but wall-clock times and the machine's system metrics."""
    return {k: v for k, v in metrics.items() if not k.startswith(("time/", "system/"))}


@pytest.fixture(scope="module")
def reference(tmp_path_factory, cache):
    """An uninterrupted run, seed 0."""
    tmp = tmp_path_factory.mktemp("reference")
    ((status, metrics, tables),) = run_in_process(tmp, cache).values()
    assert status == "FINISHED"
    from mlflow.tracking import MlflowClient

    client = MlflowClient(f"sqlite:///{tmp / 'mlflow.db'}")
    (rl,) = client.search_runs([client.get_experiment_by_name("creditbench").experiment_id], "tags.kind = 'rl'")
    base = Path(rl.data.tags["base_checkpoint"])  # the warm-start it started from, linked
    assert rl.data.tags["warmstart_run_id"] == json.loads((base / "warmstart.json").read_text())["mlflow_run_id"]
    # a finished run removes its checkpoint and keeps its final policy (checkpoint.policy)
    left = {p.relative_to(tmp / "ckpt").parts[1:] for p in (tmp / "ckpt").glob("*/*")}
    assert left == {("policy",)}, left
    return metrics, tables


def test_a_run_killed_mid_training_resumes_to_the_same_metrics(tmp_path, cache, reference):
    ref_metrics, ref_tables = reference
    assert {s for s, _ in ref_metrics["train/reward"]} == set(range(1, 9))
    assert any(v > 0 for _, v in ref_metrics["train/reward"])  # a policy that learns: credit is not all zero

    proc = subprocess.Popen(train_cmd(tmp_path, cache), cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    ckpt = None
    deadline = time.time() + 300
    while time.time() < deadline and proc.poll() is None:
        found = list((tmp_path / "ckpt").glob("*/last.ckpt"))
        if found:
            ckpt = found[0]
            break
        time.sleep(0.02)
    assert ckpt is not None, proc.communicate()[0].decode()[-2000:]
    os.kill(proc.pid, signal.SIGKILL)  # mid-training: the first checkpoint (step 2) was just written
    proc.wait()
    saved_step = torch.load(ckpt, weights_only=False, map_location="cpu")["creditbench"]["rl_step"]
    assert 2 <= saved_step < 8

    ((status, metrics, _),) = runs(tmp_path).values()
    assert status == "RUNNING"  # SIGKILL leaves no chance to record anything
    # logged live: every step up to the checkpoint is in MLflow already, maybe some after it (their
    # replay after resuming must not log them again)
    assert {s for s, _ in metrics["train/reward"]} >= set(range(1, saved_step + 1))

    out = subprocess.run(train_cmd(tmp_path, cache), cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "not resumable" not in out.stdout + out.stderr  # the loader resumes: the data order is replayed
    ((status, metrics, tables),) = runs(tmp_path).values()  # the same MLflow run, now finished
    assert status == "FINISHED"
    assert comparable(metrics) == comparable(ref_metrics)  # no step missing, none twice, the same values
    assert tables == ref_tables  # the eval completions too
    assert not list((tmp_path / "ckpt").glob("*/last.ckpt"))


def test_same_seed_same_run_other_seed_another(tmp_path, cache, reference):
    ref_metrics, ref_tables = reference
    ((_, metrics, tables),) = run_in_process(tmp_path / "again", cache, "--checkpoint.every", "0").values()
    assert comparable(metrics) == comparable(ref_metrics)  # without checkpoints: logged at once, the same run
    assert tables == ref_tables
    ((_, other, other_tables),) = run_in_process(tmp_path / "seed1", cache, "--seed", "1").values()
    assert other["train/reward"] != ref_metrics["train/reward"]
    assert other_tables != ref_tables


def test_the_data_order_is_a_function_of_seed_and_batch_index():
    """The train batches are what a shuffling DataLoader seeded with the run's seed draws, pass
    after pass; a sampler started at batch i (a resumed run) yields exactly the rest of them."""
    from torch.utils.data import DataLoader

    from bench.engine.data import PromptBatches

    for seed in (0, 3):
        loader = DataLoader(
            range(53), batch_size=5, shuffle=True, drop_last=True, generator=torch.Generator().manual_seed(seed)
        )
        stream = [b.tolist() for _ in range(3) for b in loader]  # 3 passes of 10 batches
        batches = PromptBatches(53, 5, seed)
        assert [b for _ in range(3) for b in batches] == stream
        for start in (1, 9, 10, 17):
            resumed = PromptBatches(53, 5, seed, start=start)
            assert [b for _ in range(3) for b in resumed][: 30 - start] == stream[start:]
        halves = [PromptBatches(53, 6, seed, rank=r, world=2) for r in (0, 1)]  # two processes: contiguous halves
        whole = list(PromptBatches(53, 6, seed))
        assert [a + b for a, b in zip(*halves)] == whole


# ------------------------------------------------------------------ a full disk mid-run
def test_a_full_disk_mid_run_keeps_the_last_checkpoint_and_the_run_resumes(tmp_path, policy_dir, monkeypatch, capsys):
    """The second checkpoint write fails as a full disk does (a partial file, then ENOSPC): one
    clear line, the first checkpoint whole, the metrics measured so far in MLflow; with space
    again the same command resumes and every step is in the run once."""
    import errno

    import lightning.pytorch as pl
    from mlflow.tracking import MlflowClient

    from bench.cli import main

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    argv = [
        "train",
        "--model.name",
        str(policy_dir),
        "--task.options",
        "{train_size: 64, eval_size: 8}",
        "--rl.steps",
        "6",
        "--rl.prompts_per_step",
        "2",
        "--rl.group_size",
        "2",
        "--rl.sampling.max_new_tokens",
        "8",
        "--eval.every",
        "3",
        "--eval.num_problems",
        "4",
        "--eval.n",
        "2",
        "--eval.k",
        "[1, 2]",
        "--eval.sampling.max_new_tokens",
        "8",
        "--checkpoint.every",
        "2",
        "--checkpoint.dir",
        str(tmp_path / "ckpt"),
        "--tracking.uri",
        uri,
        "--threads",
        "2",
        "--no-progress",
    ]
    real, calls = pl.Trainer.save_checkpoint, []

    def full_disk(self, path, *args, **kwargs):
        calls.append(path)
        if len(calls) == 2:
            Path(path).write_bytes(b"\0" * 100)  # what fitted before the disk was full
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(self, path, *args, **kwargs)

    monkeypatch.setattr(pl.Trainer, "save_checkpoint", full_disk)
    assert main(argv) != 0
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("creditbench: error:")]
    assert len(lines) == 1 and "No space left on device" in lines[0] and "run the same command again" in lines[0]
    (ckpt,) = (tmp_path / "ckpt").glob("*/last.ckpt")
    assert torch.load(ckpt, weights_only=False)["creditbench"]["rl_step"] == 2  # the first one, whole
    assert not list((tmp_path / "ckpt").glob("*/*.tmp"))  # the partial write is gone
    client = MlflowClient(uri)
    (run,) = client.search_runs([client.get_experiment_by_name("creditbench").experiment_id], "tags.kind = 'rl'")
    assert [m.step for m in client.get_metric_history(run.info.run_id, "train/reward")] == [1, 2, 3, 4]

    monkeypatch.setattr(pl.Trainer, "save_checkpoint", real)  # space again
    assert main(argv) == 0
    (run,) = client.search_runs([client.get_experiment_by_name("creditbench").experiment_id], "tags.kind = 'rl'")
    assert run.info.status == "FINISHED"
    history = lambda key: sorted(m.step for m in client.get_metric_history(run.info.run_id, key))  # noqa: E731
    assert history("train/reward") == [1, 2, 3, 4, 5, 6]
    assert history("eval/arithmetic/pass_at_1") == [0, 3, 6]
