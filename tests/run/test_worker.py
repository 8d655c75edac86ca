"""Sweep workers (bench.sweep.worker): a run in a long-lived worker gives the numbers of the same run
in a process of its own; a run that fails is reported failed while the others finish; a worker
killed mid-run is noticed, the run reported failed, and a fresh worker takes the next run; a worker
started ahead and never given a run is killed at close."""

import dataclasses
import os
import signal
import threading
import time
from pathlib import Path

import pytest
import yaml
from tiny_sweep import SPEC

from bench.errors import CreditBenchError
from bench.run.args import config_yaml, run_config
from bench.run.result import RunResult
from bench.sweep.launch import run_sweep
from bench.sweep.sweep import load_spec
from bench.sweep.worker import WorkerPool

# two 2-step runs of the tiny sweep, evaluated at steps 0 and 2 on 8 problems
SMALL = {**SPEC, "seeds": [0], "budget": {"samples": 64}, "eval": {**SPEC["eval"], "num_problems": 8}}


@pytest.fixture
def cache(warm_cache, monkeypatch):
    monkeypatch.setenv("CREDITBENCH_CACHE", warm_cache)  # before any RunConfig is made: its cache_dir
    return warm_cache


def sweep(tmp_path: Path, name: str, isolate: bool, **changes) -> tuple[Path, list[str], str | None]:
    """Run a sweep of SMALL in-process; its results folder, its log lines and its error (or None)."""
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump({**SMALL, "name": name, **changes}))
    lines: list[str] = []
    results = tmp_path / f"results-{name}"
    uri = f"sqlite:///{tmp_path / name}.db"
    try:
        run_sweep(load_spec(path), lambda s, d: {}, 2, str(results), uri, lines.append, isolate)
    except CreditBenchError as e:
        return results / name, lines, str(e)
    return results / name, lines, None


def numbers(out: Path, key: str) -> dict:
    res = RunResult.load(out / "runs" / f"{key}.json")
    return {"history": [dataclasses.asdict(p) for p in res.history], "train": res.train, "probe": res.credit_probe}


@pytest.mark.slow
def test_workers_give_the_numbers_of_a_process_a_run(tmp_path, cache):
    isolated, _, err = sweep(tmp_path, "isolated", isolate=True)
    assert err is None, err
    worker, lines, err = sweep(tmp_path, "worker", isolate=False)
    assert err is None, err
    keys = ["grpo-arithmetic-tiny-500k-seed0", "gspo-arithmetic-tiny-500k-seed0"]
    assert sorted(p.stem for p in (worker / "runs").glob("*.json")) == keys
    for key in keys:
        a, b = numbers(isolated, key), numbers(worker, key)
        assert [p["step"] for p in a["history"]] == [0, 2]
        assert a == b, key  # pass@k at every eval point, per-problem counts, training means, credit map
        log = (worker / "logs" / f"{key}.log").read_text()
        assert "run timing (s): " in log and "eval pass@1" in log  # each run's own output in its own log
    assert sum("done" in line for line in lines) == 2


def test_a_failing_run_is_reported_while_the_others_finish(tmp_path, cache):
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("")  # the failing run's checkpoints would go under a file: it fails once it starts
    methods = ["grpo", {"name": "gspo", "overrides": {"checkpoint.every": 1, "checkpoint.dir": str(blocker / "c")}}]
    out, lines, err = sweep(tmp_path, "failing", isolate=False, methods=methods)
    assert err is not None and "1 of 2 runs failed (gspo-arithmetic-tiny-500k-seed0)" in err
    assert (out / "runs" / "grpo-arithmetic-tiny-500k-seed0.json").is_file()
    assert not (out / "runs" / "gspo-arithmetic-tiny-500k-seed0.json").exists()
    failed = next(line for line in lines if "gspo" in line)
    assert "FAILED (exit 2)" in failed
    log = (out / "logs" / "gspo-arithmetic-tiny-500k-seed0.log").read_text()
    assert "creditbench: error:" in log and str(blocker) in log


def test_a_killed_worker_fails_its_run_and_a_fresh_one_takes_the_next(tmp_path, cache):
    d = {
        "model": {"name": "tiny-500k"},
        "task": SPEC["tasks"][0],
        "rl": {"steps": 2, "prompts_per_step": 4, "group_size": 8, "sampling": {"max_new_tokens": 20}},
        "eval": {"every": 2, "n": 2, "k": [1, 2], "num_problems": 8, "sampling": {"max_new_tokens": 20}},
        "warmstart": {"max_steps": 60, "check_every": 30, "batch_size": 32, "target_accuracy": 0.2},
        "tracking": {"uri": f"sqlite:///{tmp_path / 'm.db'}"},
        "threads": 1,
    }
    config = tmp_path / "run.yaml"
    config.write_text(config_yaml(run_config(d, "test run")))
    pool = WorkerPool(1, {**os.environ, "OMP_NUM_THREADS": "1"}, tmp_path / "logs")
    try:
        first: list[int] = []
        t = threading.Thread(target=lambda: first.append(pool.run(config, tmp_path / "killed.log")))
        t.start()
        worker = pool.workers[0]
        deadline = time.time() + 300
        while not (tmp_path / "killed.log").exists():  # the worker has imported everything and started the run
            assert time.time() < deadline and t.is_alive()
            time.sleep(0.2)
        os.kill(worker.proc.pid, signal.SIGKILL)
        t.join(timeout=60)
        assert first == [-signal.SIGKILL]
        assert "sweep worker process died during the run (signal SIGKILL)" in (tmp_path / "killed.log").read_text()
        assert pool.run(config, tmp_path / "again.log") == 0  # a fresh worker
        assert len(worker.startup_s) == 2
        assert "eval pass@1" in (tmp_path / "again.log").read_text()
    finally:
        pool.close()


def test_a_bad_value_in_a_runs_yaml_is_named_by_its_file_and_line(tmp_path, capsys):
    """The worker runs a config with ``creditbench train``'s own function (bench.run.command): a value
    the pre-flight refuses is named by the YAML file and line it comes from, as on the command line."""
    from bench.run.command import train_command

    config = tmp_path / "run.yaml"
    config.write_text("method:\n  name: arca\n")  # ARCA needs a LoRA adapter: refused before any work
    assert train_command(["--config", str(config), "--no_progress"]) == 2
    assert f"creditbench: error: {config}:1: method 'arca'" in capsys.readouterr().err


def test_a_worker_started_ahead_and_never_given_a_run_is_killed_at_close(tmp_path):
    """A sweep starts its workers before its MLflow set-up (bench.sweep.launch.run_sweep); one that set-up
    failed never used is ended at once, not after its imports (the sweeps above run in workers started ahead)."""
    pool = WorkerPool(1, {**os.environ, "OMP_NUM_THREADS": "1"}, tmp_path / "logs")
    pool.start()
    proc = pool.workers[0].proc
    t = time.perf_counter()
    pool.close()
    assert proc.returncode == -signal.SIGKILL and time.perf_counter() - t < 5
    assert pool.workers[0].proc is None and pool.workers[0].startup_s == []
