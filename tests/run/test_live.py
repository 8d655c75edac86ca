"""Watching a run while it runs: its metrics reach MLflow step by step with their real timestamps,
its progress counts its own steps against its own total, a sweep's per-run log fills as the run
goes, the warm-start says what it is doing (and a second process that it is waiting for it), and
the MLflow experiment opens in training mode with the run's data and system metrics recorded.
(Resumed runs log each (key, step) once: tests/run/test_reliability.py.)"""

from __future__ import annotations

import io
import json
import os
import threading
import time

from bench.config import (
    CheckpointConfig,
    EvalConfig,
    ModelConfig,
    RLConfig,
    RunConfig,
    SamplingConfig,
    TaskSpec,
    TrackingConfig,
    WarmStartConfig,
)
from bench.engine.progress import Lines, counter, duration, rl_total


def test_step_metrics_reach_mlflow_while_the_run_runs(tmp_path, policy_dir, monkeypatch, capsys):
    """A poller reads the store every 0.2 s during a 6-step run: it sees train/reward of the early
    steps before the run ends, each step stamped when it was measured (not all at once)."""
    from mlflow.tracking import MlflowClient

    from bench.run.train import run

    monkeypatch.setenv("MLFLOW_SYSTEM_METRICS_SAMPLING_INTERVAL", "1")
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    cfg = RunConfig(
        model=ModelConfig(name=str(policy_dir)),
        task=TaskSpec(options={"train_size": 64, "eval_size": 8}),
        rl=RLConfig(steps=6, prompts_per_step=2, group_size=2, sampling=SamplingConfig(max_new_tokens=8)),
        eval=EvalConfig(every=6, n=2, k=[1, 2], num_problems=4, sampling=SamplingConfig(max_new_tokens=8)),
        checkpoint=CheckpointConfig(every=2, dir=str(tmp_path / "ckpt")),
        tracking=TrackingConfig(uri=uri),
        threads=2,
    )
    client, seen, done = MlflowClient(uri), {}, threading.Event()

    def poll() -> None:  # the step of train/reward each poll found, with when it found it
        while not done.is_set():
            for exp in client.search_experiments():
                for r in client.search_runs([exp.experiment_id], "tags.kind = 'rl'"):
                    for m in client.get_metric_history(r.info.run_id, "train/reward"):
                        seen.setdefault(m.step, time.time())
            time.sleep(0.2)

    poller = threading.Thread(target=poll)
    poller.start()
    try:
        res = run(cfg, progress=False)
    finally:
        ended = time.time()
        done.set()
        poller.join()
    assert {1, 2, 3} <= {s for s, t in seen.items() if t < ended}, seen  # seen live, before the run ended
    rid = res["mlflow_run_id"]
    history = sorted(client.get_metric_history(rid, "train/reward"), key=lambda m: m.step)
    assert [m.step for m in history] == [1, 2, 3, 4, 5, 6]  # each step once
    stamps = [m.timestamp for m in history]
    assert stamps == sorted(stamps) and stamps[-1] > stamps[0]  # real times, not one flush

    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("RL: step")]
    assert lines[0].startswith("RL: step 1/6") and lines[-1].startswith("RL: step 6/6, ")  # the run's own total
    assert "done in" in lines[-1]

    run_ = client.get_run(rid)
    exp = client.get_experiment(run_.info.experiment_id)
    assert exp.tags["mlflow.experimentKind"] == "custom_model_development"  # the UI's training mode
    assert any(k.startswith("system/cpu_utilization") for k in run_.data.metrics), sorted(run_.data.metrics)
    inputs = {(d.dataset.name, d.tags[0].value): d.dataset for d in run_.inputs.dataset_inputs}
    assert set(inputs) == {("arithmetic-v1-train", "training"), ("arithmetic-v1-eval", "evaluation")}, set(inputs)
    train = inputs[("arithmetic-v1-train", "training")]
    assert train.source_type == "code" and json.loads(train.source)["tags"]["task"] == "arithmetic"
    assert json.loads(train.profile)["num_rows"] == 64


def test_progress_lines_count_the_runs_own_steps(monkeypatch):
    """The first and last lines always, at most one per interval between; the rate is measured from
    where a resumed run started, and the time left follows from it."""
    out, clock = io.StringIO(), iter([100.0, 101.0, 102.0, 105.0, 112.0, 113.0])
    monkeypatch.setattr(time, "perf_counter", lambda: next(clock))
    lines = Lines("RL", 8, start=2, every_s=5.0, file=out)  # resumed at step 2, started at t=100
    lines.update(3, {"reward": 0.25})  # t=101: the first line
    lines.update(4)  # t=102: 1 s after the last line, skipped
    lines.update(5)  # t=105: 4 s after, skipped
    lines.update(8)  # t=112: the last step, always
    lines.update(8, final=True)  # the run's end: its line is written already
    assert out.getvalue().splitlines() == [
        "RL: step 3/8, 1 s/step, about 5 s left; reward 0.25",  # 1 step in 1 s, 5 steps to go
        "RL: step 8/8, 2 s/step, done in 12 s",  # 6 steps in 12 s
    ]
    monkeypatch.undo()
    early = Lines("warm-start", 3000)  # stopped at its accuracy target: where, not a time left
    assert early.text(450, now=early.t0 + 60, final=True) == "warm-start: step 450/3000, 0.133 s/step, done in 60 s"
    assert [duration(s) for s in (42, 600, 9000)] == ["42 s", "10 min", "2.5 h"]
    assert isinstance(counter("eval", 10, "problem", io.StringIO()), Lines)  # a log file, not a terminal
    budget = RLConfig(steps=100, prompts_per_step=4, group_size=8, budget_samples=160)  # 32 samples a step
    assert (rl_total(budget), rl_total(RLConfig(steps=100))) == (5, 100)


def test_the_step_bar_shows_the_runs_total():
    """Lightning's bar would count each epoch's batches (here 2) and restart every epoch; the step
    bar counts the optimizer steps of the whole run (three epochs here) against max_steps."""
    import lightning as L
    import torch
    from torch.utils.data import DataLoader

    from bench.engine.progress import StepBar, optimizer_steps

    class Tiny(L.LightningModule):
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(torch.zeros(1))

        def training_step(self, batch, batch_idx):
            return (self.w - 1).pow(2).sum()

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    totals, bar = [], StepBar("warm-start", 5, optimizer_steps)
    original = bar.on_train_batch_end

    def record(trainer, *args):
        original(trainer, *args)
        totals.append((bar.train_progress_bar.n, bar.train_progress_bar.total, bar.train_progress_bar.desc))

    bar.on_train_batch_end = record
    trainer = L.Trainer(max_steps=5, max_epochs=-1, logger=False, callbacks=[bar], enable_checkpointing=False)
    trainer.fit(Tiny(), DataLoader(torch.zeros(2, 1), batch_size=1))
    assert [n for n, _, _ in totals] == [1, 2, 3, 4, 5]
    assert {(t, d) for _, t, d in totals} == {(5, "warm-start: ")}


def test_a_sweep_run_log_fills_while_the_run_runs(tmp_path):
    """Inside a worker (a process whose stdout is a pipe, so Python buffers it in blocks), a run's
    output reaches its log file line by line, not when the run ends."""
    import subprocess
    import sys

    log = tmp_path / "run.log"
    code = (
        "from pathlib import Path\n"
        "from bench.sweep.worker import redirected\n"
        f"log = Path({str(log)!r})\n"
        "with open(log, 'w', buffering=1) as fh, redirected(fh):\n"
        "    print('RL: step 1/4')\n"
        "    during = log.read_text()\n"
        "print(repr(during))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == repr("RL: step 1/4\n"), out.stderr[-2000:]


def test_the_warm_start_announces_itself_and_a_second_process_says_it_waits(tmp_path, capsys):
    import fcntl

    import torch
    from safetensors.torch import save_file

    from bench.bases.warmstart import announcement, base_checkpoint, base_dir
    from bench.registry import TASKS

    task, cfg = TASKS.get("arithmetic")(), WarmStartConfig(max_steps=300, target_accuracy=0.3)
    out = base_dir(str(tmp_path), "arithmetic", task, "tiny-500k", cfg)
    line = announcement("arithmetic", "tiny-500k", cfg, out)
    assert (
        "tiny-500k base checkpoint for 'arithmetic', once" in line
        and "0.3 (at most 300 steps; time left below)" in line
    )
    assert f"Cached in {out}" in line
    earlier = out.parent / "tiny-500k-0123456789ab"
    earlier.mkdir(parents=True)
    (earlier / "warmstart.json").write_text(json.dumps({"wall_s": 216.3}))
    assert "the last one of tiny-500k here took 4 min" in announcement("arithmetic", "tiny-500k", cfg, out)

    got = []
    with open(out.parent / f".{out.name}.lock", "w") as held:  # another process's warm-start
        fcntl.flock(held, fcntl.LOCK_EX)
        args = "arithmetic", task, "tiny-500k", cfg, str(tmp_path), "sqlite:///unused.db"
        waiter = threading.Thread(target=lambda: got.append(base_checkpoint(*args)))
        waiter.start()
        time.sleep(0.5)
        out.mkdir()  # it finished: the weights, then the marker
        save_file({"lm_head.weight": torch.zeros(2, 3)}, str(out / "model.safetensors"))
        (out / "warmstart.json").write_text("{}")
    waiter.join(timeout=30)
    assert got == [out]
    printed = capsys.readouterr().out
    assert printed.startswith("warm-start: waiting for another process to finish building the tiny-500k base")
    assert "warm-start: building" not in printed  # the other process built it
    assert os.path.isdir(out)


def test_creditbench_ui_prints_a_training_mode_link_per_experiment(tmp_path, monkeypatch, capsys):
    """The experiments creditbench writes carry the training kind; `creditbench ui` prints, before it
    becomes the MLflow server, the link that opens each one's runs in the UI's training mode."""
    from mlflow.tracking import MlflowClient

    from bench.cli import main
    from bench.tracking.tracking import experiment_id

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    eid = experiment_id(MlflowClient(uri), "creditbench")  # as a sweep creates it
    assert MlflowClient(uri).get_experiment(eid).tags["mlflow.experimentKind"] == "custom_model_development"
    served = []
    monkeypatch.setattr(os, "execv", lambda path, cmd: served.append(cmd))
    main(["ui", "--uri", uri, "--port", "5123"])
    assert served and served[0][2:4] == ["mlflow", "ui"]
    link = f"creditbench: http://127.0.0.1:5123/#/experiments/{eid}/runs?workflowType=machine_learning"
    assert link in capsys.readouterr().out


def test_task_data_is_logged_with_its_source(tmp_path, monkeypatch):
    """A generated task's data names its generator and options; a data-file task's names its Hub
    dataset, or the local file a data directory holds."""
    import datasets
    from mlflow.tracking import MlflowClient

    from bench.tracking.lineage import log_task_data
    from bench.tracking.tracking import make_logger
    from tasks.data import Source

    monkeypatch.setenv("MLFLOW_ENABLE_SYSTEM_METRICS_LOGGING", "false")
    monkeypatch.delenv("CREDITBENCH_DATA", raising=False)
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    logger = make_logger(uri, "creditbench", "lineage", {})
    rows = datasets.Dataset.from_dict({"id": ["a", "b"], "problem": ["1+1", "2+2"], "answer": ["2", "4"]})

    class FileTask:  # what tasks/math_benchmarks.py gives: sources per split, a data_dir option
        VERSION, sources = "3", {"eval": Source("HuggingFaceH4/MATH-500", "test", None, "math500/test.jsonl")}

        def __init__(self, data_dir):
            self.config = type("Config", (), {"data_dir": data_dir})()

    log_task_data(logger, "math500", FileTask(None), "eval", rows, "evaluation")
    log_task_data(logger, "local", FileTask(str(tmp_path / "data")), "eval", rows, "evaluation")
    got = {d.dataset.name: d.dataset for d in MlflowClient(uri).get_run(logger.run_id).inputs.dataset_inputs}
    hub = got["math500-v3-eval"]
    assert hub.source_type == "hugging_face" and json.loads(hub.source)["path"] == "HuggingFaceH4/MATH-500"
    local = got["local-v3-eval"]
    assert local.source_type == "local" and json.loads(local.source)["uri"].endswith("data/math500/test.jsonl")
    assert json.loads(local.profile)["num_rows"] == 2
    logger.end()


def test_a_large_split_is_described_once_from_its_first_rows(tmp_path, monkeypatch):
    """A 2,500-row split: its schema from the first 1,000 rows is MLflow's own from all of them; a worker's
    second run reuses the entity; an insert another run made at the same moment is linked, not refused."""
    import datasets
    from mlflow.data import from_pandas
    from mlflow.tracking import MlflowClient

    from bench.tracking import lineage
    from bench.tracking.tracking import make_logger

    monkeypatch.setenv("MLFLOW_ENABLE_SYSTEM_METRICS_LOGGING", "false")
    monkeypatch.delenv("CREDITBENCH_DATA", raising=False)
    monkeypatch.setattr(lineage, "_ENTITIES", {})
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    n = 2500
    rows = datasets.Dataset.from_dict({"id": [str(i) for i in range(n)], "question": ["1+1"] * n, "answer": ["2"] * n})

    class Generated:
        VERSION = "1"

        def __init__(self):
            self.config = type("Config", (), {"__dataclass_fields__": {}})()

    task = Generated()
    monkeypatch.setattr(lineage.dataclasses, "asdict", lambda c: {"seed": 0})
    first = make_logger(uri, "creditbench", "lineage-a", {})
    lineage.log_task_data(first, "gen", task, "train", rows, "training")
    assert len(lineage._ENTITIES) == 1
    (entity,) = lineage._ENTITIES.values()
    assert entity.schema == from_pandas(rows.to_pandas()).to_dict()["schema"]  # all rows' schema, as MLflow infers it
    second = make_logger(uri, "creditbench", "lineage-b", {})
    calls = []
    real = second.experiment.log_inputs

    def raced(*args, **kwargs):  # the other run's insert lands first, once
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("(sqlite3.IntegrityError) UNIQUE constraint failed: datasets.experiment_id")
        return real(*args, **kwargs)

    monkeypatch.setattr(second.experiment, "log_inputs", raced)
    lineage.log_task_data(second, "gen", task, "train", rows, "training")
    assert len(calls) == 2 and len(lineage._ENTITIES) == 1
    client = MlflowClient(uri)
    for logger in (first, second):
        (got,) = client.get_run(logger.run_id).inputs.dataset_inputs
        assert got.dataset.digest == entity.digest and json.loads(got.dataset.profile)["num_rows"] == n
        logger.end()


def test_a_run_shorter_than_one_sampling_interval_still_has_system_metrics(tmp_path, monkeypatch):
    """The monitor samples every 600 s here, and the run ends at once: its end publishes one sample."""
    from mlflow.tracking import MlflowClient

    from bench.tracking.tracking import make_logger

    monkeypatch.setenv("MLFLOW_SYSTEM_METRICS_SAMPLING_INTERVAL", "600")
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    logger = make_logger(uri, "creditbench", "short", {})
    logger.end()
    metrics = MlflowClient(uri).get_run(logger.run_id).data.metrics
    assert metrics["system/cpu_utilization_percentage"] >= 0, sorted(metrics)
    assert {"system/disk_usage_percentage", "system/system_memory_usage_megabytes"} <= set(metrics), sorted(metrics)
