"""Sweep workers: a long-lived process that imports everything once and runs many sweep runs one
after another, each exactly as ``creditbench train --config RUN.yaml --no-progress`` would in a
process of its own (the same function, :func:`bench.run.command.train_command`: the same parser,
checks and code, the same seed: the same numbers).

    python -m bench.sweep.worker      # started by a sweep, one per job slot; not a user command

Protocol: the worker reads one JSON object a line on stdin, ``{"config": RUN.yaml, "log": RUN.log}``,
runs it with its stdout and stderr (file descriptors 1 and 2, so C-level output too) sent to the
log file, and answers on its original stdout with ``{"config": ..., "status": N}`` (0: the run
finished; as the train command's exit status otherwise). Its first line is ``{"ready": S}``, the
seconds its imports took. It exits at the end of its input.

Between runs the worker puts back the process state a run can change: environment variables
(``PL_GLOBAL_SEED``, ...), torch's thread count, default dtype, grad mode and determinism flags,
warnings filters and logging handlers and levels. Each run seeds itself (``L.seed_everything``)
before it draws anything, and the MLflow loggers talk to the store through their own clients, so
nothing else carries over. A run that raises is reported failed with its traceback in its log; a
worker that dies (a segfault, the OOM killer) is noticed by :class:`WorkerPool`, which reports the
run failed, notes the signal in its log and starts a fresh worker for the next run.
"""

from __future__ import annotations

import contextlib
import faulthandler
import gc
import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
import traceback
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any


# ------------------------------------------------------------------ inside the worker process
class ProcessState:
    """What a run may change in the process that the next run must not see."""

    def __init__(self) -> None:
        import torch

        self.environ = dict(os.environ)
        self.threads = torch.get_num_threads()
        self.dtype = torch.get_default_dtype()
        self.grad = torch.is_grad_enabled()
        self.deterministic = torch.are_deterministic_algorithms_enabled()
        self.cudnn = (torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark)
        self.warnings = list(warnings.filters)
        self.loggers = {
            name: (lg.level, list(lg.handlers), lg.propagate)
            for name, lg in [("", logging.getLogger()), *logging.Logger.manager.loggerDict.items()]
            if isinstance(lg, logging.Logger)
        }

    def restore(self) -> None:
        import torch

        os.environ.clear()
        os.environ.update(self.environ)
        torch.set_num_threads(self.threads)
        torch.set_default_dtype(self.dtype)
        torch.set_grad_enabled(self.grad)
        torch.use_deterministic_algorithms(self.deterministic)
        torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark = self.cudnn
        warnings.resetwarnings()  # also forgets which warnings were shown: each run's log shows its own
        warnings.filters[:] = self.warnings
        for name, lg in [("", logging.getLogger()), *logging.Logger.manager.loggerDict.items()]:
            if not isinstance(lg, logging.Logger):
                continue
            level, handlers, propagate = self.loggers.get(name, (logging.NOTSET, [], True))
            for h in lg.handlers[:]:
                if h not in handlers:
                    lg.removeHandler(h)
                    with contextlib.suppress(Exception):
                        h.close()
            lg.setLevel(level)
            lg.propagate = propagate
        with contextlib.suppress(Exception):  # a run that used MLflow's fluent API and raised mid-run
            import mlflow

            while mlflow.active_run() is not None:
                mlflow.end_run("FAILED")
        gc.collect()
        if torch.cuda.is_available():
            torch.cuda.empty_cache()


@contextlib.contextmanager
def redirected(log: IO[str]) -> Iterator[None]:
    """File descriptors 1 and 2 (and so sys.stdout, sys.stderr and C libraries) write to ``log``,
    Python's streams a line at a time: a run's log shows its progress while it runs (sys.stdout of
    a process whose fd 1 is not a terminal would otherwise hold lines back until the run ends)."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    buffering = sys.stdout.line_buffering, sys.stderr.line_buffering
    os.dup2(log.fileno(), 1)
    os.dup2(log.fileno(), 2)
    sys.stdout.reconfigure(line_buffering=True)
    sys.stderr.reconfigure(line_buffering=True)
    try:
        yield
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        sys.stdout.reconfigure(line_buffering=buffering[0])
        sys.stderr.reconfigure(line_buffering=buffering[1])
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        os.close(saved[0])
        os.close(saved[1])


def run_one(config: str | Path, log: str | Path) -> int:
    """Run the config at ``config`` in this process as ``creditbench train`` would, its output to
    ``log``; the exit status that command would have had (1 for an uncaught exception)."""
    from bench.run.command import train_command
    from bench.sweep.sweep import result_writer

    state = ProcessState()
    with open(log, "w", buffering=1) as fh, redirected(fh):
        try:
            status = train_command(["--config", str(config), "--no_progress"], result_writer)
        except SystemExit as e:
            status = e.code if isinstance(e.code, int) else 1
        except Exception:  # as an uncaught exception ends `creditbench train`: traceback, status 1
            traceback.print_exc()
            status = 1
    state.restore()
    return status


def preload() -> None:
    """Import what every run needs, once, and keep generated task data between runs."""
    from bench.run.args import quiet_libraries

    quiet_libraries()
    import lightning  # noqa: F401
    import mlflow  # noqa: F401
    import torch  # noqa: F401
    import transformers  # noqa: F401

    import bench.bases.warmstart  # noqa: F401
    import bench.engine.module  # noqa: F401
    import bench.run.train  # noqa: F401
    from bench.engine.data import keep_generated_splits

    keep_generated_splits()


def main() -> int:
    t0 = time.perf_counter()
    answers = os.fdopen(os.dup(1), "w", buffering=1)  # fd 1 itself is each run's log, in turn
    os.dup2(2, 1)  # between runs, stray output goes where the worker's stderr goes, never into the answers
    faulthandler.enable()  # a segfault leaves a traceback in the log of the run it happened in (fd 2)
    preload()
    gc.freeze()  # the collections between runs (ProcessState.restore) and in them skip what was imported
    answers.write(json.dumps({"ready": round(time.perf_counter() - t0, 3)}) + "\n")
    for line in sys.stdin:
        if not line.strip():
            continue
        req = json.loads(line)
        status = run_one(req["config"], req["log"])
        answers.write(json.dumps({"config": req["config"], "status": status}) + "\n")
    # The end, which the sweep waits for: the interpreter's last collections would walk every object
    # torch, Lightning and MLflow made (a second or more) to free memory the process gives back anyway.
    gc.freeze()
    return 0


# ------------------------------------------------------------------ in the sweep process
class Worker:
    """One worker process and its pipes; started ahead (:meth:`start`) or on first use, and again
    after it died."""

    def __init__(self, env: dict[str, str], stderr: Path) -> None:
        self.env, self.stderr = env, stderr
        self.proc: subprocess.Popen | None = None
        self.ready = False
        """Whether the running process's ready line has been read (it imports until it writes it)."""
        self.startup_s: list[float] = []
        """Seconds each start of this worker took to import everything (from its ready line)."""

    def start(self) -> None:
        """Start the process, not waiting for its imports: the first run reads its ready line."""
        self.ready = False
        self.stderr.parent.mkdir(parents=True, exist_ok=True)
        with open(self.stderr, "a") as err:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "bench.sweep.worker"],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=err,
                env=self.env,
                text=True,
                bufsize=1,
                preexec_fn=_die_with_parent,
                start_new_session=True,  # Ctrl-C reaches the sweep alone, which stops the workers itself
            )

    def _answer(self) -> dict[str, Any] | None:
        line = self.proc.stdout.readline()
        return json.loads(line) if line else None

    def run(self, config: Path, log: Path) -> int:
        """Run one config in the worker; its exit status (a negative signal number where the worker
        died running it, as ``subprocess`` reports a killed child)."""
        if self.proc is None or self.proc.poll() is not None:
            self.start()
        if not self.ready:
            ready = self._answer()
            if ready is None:
                return self._died(log, "while starting")
            self.ready = True
            self.startup_s.append(ready["ready"])
        try:
            self.proc.stdin.write(json.dumps({"config": str(config), "log": str(log)}) + "\n")
            self.proc.stdin.flush()
        except BrokenPipeError:
            return self._died(log, "before the run started")
        answer = self._answer()
        return self._died(log, "during the run") if answer is None else int(answer["status"])

    def _died(self, log: Path, when: str) -> int:
        proc, self.proc = self.proc, None
        rc = proc.wait() if proc is not None else -signal.SIGKILL  # None: closed meanwhile (an interrupted sweep)
        how = f"signal {signal.Signals(-rc).name}" if rc < 0 and -rc in signal.valid_signals() else f"exit {rc}"
        with open(log, "a") as fh:
            fh.write(f"\nsweep worker process died {when} ({how}); a fresh worker takes the next run\n")
        return rc if rc != 0 else 1

    def stop(self) -> None:
        """Kill the worker now (an interrupted sweep): its run ends where it is."""
        proc = self.proc
        if proc is not None and proc.poll() is None:
            with contextlib.suppress(OSError):
                os.killpg(proc.pid, signal.SIGKILL)  # and whatever its run started

    def close(self) -> None:
        """Let the worker finish at the end of its input (it is killed if it does not, within a minute);
        one started ahead that was never given a run is killed at once, mid-import."""
        proc, self.proc = self.proc, None  # a run's thread may notice its death at the same time (_died)
        if proc is None:
            return
        if not self.ready:
            with contextlib.suppress(OSError):
                os.killpg(proc.pid, signal.SIGKILL)
        with contextlib.suppress(OSError):
            proc.stdin.close()
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        with contextlib.suppress(OSError):
            proc.stdout.close()


class Isolated:
    """Each run in a ``creditbench train`` process of its own (``WorkerPool``'s interface): nothing
    is shared between runs, at the price of a fresh interpreter, imports and store set-up each."""

    def __init__(self, env: dict[str, str]) -> None:
        self.env = env
        self.startup_s: list[float] = []
        self._running: set[subprocess.Popen] = set()

    def run(self, config: Path, log: Path) -> int:
        with open(log, "w") as fh:
            proc = subprocess.Popen(
                [sys.executable, "-m", "bench.cli", "train", "--config", str(config), "--no-progress"],
                stdout=fh,
                stderr=subprocess.STDOUT,
                env={**self.env, "PYTHONUNBUFFERED": "1"},  # the log streams while the run runs
                preexec_fn=_die_with_parent,
                start_new_session=True,  # Ctrl-C reaches the sweep alone, which stops its runs itself
            )
            self._running.add(proc)
            try:
                return proc.wait()
            finally:
                self._running.discard(proc)

    def stop(self) -> None:
        """Kill the running processes and what they started (an interrupted sweep)."""
        for proc in list(self._running):
            with contextlib.suppress(OSError):
                os.killpg(proc.pid, signal.SIGKILL)

    def close(self) -> None:
        pass


class WorkerPool:
    """``jobs`` workers for a sweep's runs: ``run(config, log)`` takes an idle worker (waiting for
    one), runs the config in it and gives it back. Workers start at :meth:`start`, or when first needed."""

    def __init__(self, jobs: int, env: dict[str, str], logs: Path) -> None:
        self.workers = [Worker(env, logs / f".worker-{i}.log") for i in range(jobs)]
        self._idle = list(self.workers)
        self._ready = threading.Condition()

    def run(self, config: Path, log: Path) -> int:
        with self._ready:
            self._ready.wait_for(lambda: self._idle)
            worker = self._idle.pop()
        try:
            return worker.run(config, log)
        finally:
            with self._ready:
                self._idle.append(worker)
                self._ready.notify()

    def start(self) -> None:
        """Start every worker now: their imports overlap with whatever the sweep does before its first run."""
        for w in self.workers:
            if w.proc is None:
                w.start()

    @property
    def startup_s(self) -> list[float]:
        return [s for w in self.workers for s in w.startup_s]

    def stop(self) -> None:
        for w in self.workers:
            w.stop()

    def close(self) -> None:
        for w in self.workers:
            w.close()


def _die_with_parent() -> None:
    """In the child before exec: die with the sweep process (SIGKILL on its death, Linux), so an
    interrupted sweep leaves no orphan runs writing to the store. (The signal follows the thread
    that started the child: workers are closed before the sweep's thread pool ends.)"""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


if __name__ == "__main__":
    sys.exit(main())
