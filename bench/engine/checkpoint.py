"""Resuming a run after a crash.

A run with ``checkpoint.every > 0`` owns a directory ``<checkpoint.dir>/<run name>-<config hash>/``
(bench.engine.checkpoint_dir):

    run.json     the MLflow run id, written when the run starts
    last.ckpt    the last Lightning checkpoint, replaced atomically (write, fsync, rename)

The checkpoint holds what the next step depends on: the weights that train (the frozen base and
reference come back from the base checkpoint), AdamW's state, the scheduler, Lightning's loop
progress, the torch / numpy / Python RNG states, the data position (batches consumed, refill
prompts drawn), the module's counters, eval history and the credit map's group.

Metrics go to MLflow the moment a step computes them (:class:`MetricSink`), with their real
timestamps, so a running run can be watched. A run killed after its last checkpoint has logged
some steps the checkpoint does not hold; resuming redoes those steps, and the replay computes the
same values (the RNG states, data position and weights are restored), so the sink of a resumed run
reads, once, the last step of each metric MLflow already has and drops every (key, step) pair at or
before it, and a table (an eval's completions) whose artifact already exists. Every (key, step)
is then in the run exactly once, with the timestamp of when it was first measured.
"""

from __future__ import annotations

import json
import random
import uuid
from pathlib import Path
from typing import Any

import numpy as np
import torch
from lightning.pytorch.callbacks import Callback

from bench.atomic import atomic_path, temporary, write_atomic
from bench.errors import CreditBenchError


def ensure_writable(path: Path) -> None:
    """Create ``path`` and prove a file can be written and renamed in it, or fail with one line
    before the run writes anything anywhere."""
    probe = path / f".write-test-{uuid.uuid4().hex[:8]}"
    try:
        path.mkdir(parents=True, exist_ok=True)
        probe.write_bytes(b"ok")
        probe.replace(probe.with_suffix(".renamed"))
        probe.with_suffix(".renamed").unlink()
    except OSError as e:
        raise CreditBenchError(
            f"cannot write checkpoints to {str(path)!r}: {e.strerror or e}; set checkpoint.dir "
            "to a writable directory (or checkpoint.every 0 to run without checkpoints)"
        ) from None


def write_json(path: Path, data: dict) -> None:
    write_atomic(path, json.dumps(data, indent=2))


# ------------------------------------------------------------------ the module's weights
def trainable_state(state_dict: dict[str, Any], model: torch.nn.Module) -> dict[str, Any]:
    """The entries of ``state_dict`` that train: the frozen base (and reference) come back from the
    base checkpoint, so a checkpoint leaves them out on purpose."""
    trainable = {n for n, p in model.named_parameters() if p.requires_grad}
    return {k: v for k, v in state_dict.items() if k in trainable}


def check_fits(state_dict: dict[str, Any], model: torch.nn.Module) -> None:
    """Refuse a checkpoint with tensors ``model`` does not have, or without one of its trainable ones."""
    own = dict(model.named_parameters())
    stray = [k for k in state_dict if k not in own]
    missing = [n for n, p in own.items() if p.requires_grad and n not in state_dict]
    if stray or missing:
        raise CreditBenchError(
            f"the checkpoint does not fit this model ({len(stray)} unknown and {len(missing)} "
            f"missing trainable tensors, e.g. {(stray or missing)[0]!r})"
        )


# ------------------------------------------------------------------ RNG states
def rng_states() -> dict[str, Any]:
    states = {"torch": torch.get_rng_state(), "numpy": np.random.get_state(), "python": random.getstate()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        states["cuda"] = torch.cuda.get_rng_state_all()
    return states


def set_rng_states(states: dict[str, Any]) -> None:
    torch.set_rng_state(states["torch"])
    np.random.set_state(states["numpy"])
    random.setstate(states["python"])
    if "cuda" in states and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(states["cuda"])


# ------------------------------------------------------------------ metrics, logged live
class MetricSink:
    """Where the module's metrics and tables go: to MLflow at once. A ``resumed`` run (one that
    continues an MLflow run from a checkpoint; only the first process, which logs, knows it is one)
    first learns what the run already has and drops the (key, step) pairs and tables it would log
    twice (see the module docstring)."""

    def __init__(self, logger, resumed: bool = False):
        self.logger, self.resumed = logger, resumed
        self._logged: dict[str, int] | None = None  # resumed: the last step of each key MLflow has (read once)
        self._artifacts: dict[str, set[str]] = {}  # resumed: the files of each artifact folder (read once each)

    def log(self, metrics: dict[str, float], step: int) -> None:
        if self.logger is None:
            return
        if self.resumed:
            logged = self._last_steps()
            metrics = {k: v for k, v in metrics.items() if step > logged.get(k, -1)}
        if metrics:
            self.logger.log_metrics(metrics, step=step)

    def table(self, artifact_file: str, data: dict[str, list]) -> None:
        if self.logger is None:
            return
        client, run_id = self.logger.experiment, self.logger.run_id
        if self.resumed:  # log_table appends rows to an existing table
            folder = str(Path(artifact_file).parent)
            if folder not in self._artifacts:
                self._artifacts[folder] = {
                    f.path for f in client.list_artifacts(run_id, None if folder == "." else folder)
                }
            if artifact_file in self._artifacts[folder]:
                return
            self._artifacts[folder].add(artifact_file)
        client.log_table(run_id, data=data, artifact_file=artifact_file)

    def _last_steps(self) -> dict[str, int]:
        if self._logged is None:
            client, run_id = self.logger.experiment, self.logger.run_id
            self._logged = {}
            for key in client.get_run(run_id).data.metrics:
                history = client.get_metric_history(run_id, key)
                if history:
                    self._logged[key] = max(m.step for m in history)
        return self._logged


# ------------------------------------------------------------------ the checkpoint callback
class RunCheckpoint(Callback):
    """Writes ``last.ckpt`` every ``every`` RL steps.

    A step that Lightning validates after (the module's ``eval_due``: by ``eval.every`` steps or
    ``eval.every_samples`` samples, and the last) is
    checkpointed at the end of that validation, so the checkpoint holds its evaluation and a
    resumed run does not evaluate again; any other step at the end of its training batch.
    """

    def __init__(self, directory: Path, every: int):
        self.path, self.every = directory / "last.ckpt", every

    def _due(self, step: int, trainer) -> bool:
        return step % self.every == 0 or trainer.should_stop

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        step = pl_module.rl_step
        if self._due(step, trainer) and not pl_module.eval_due:
            self.save(trainer)

    def on_validation_end(self, trainer, pl_module) -> None:
        if trainer.state.fn == "fit" and not trainer.sanity_checking and self._due(pl_module.rl_step, trainer):
            self.save(trainer)

    def save(self, trainer) -> None:
        try:
            if trainer.is_global_zero:
                with atomic_path(self.path, fsync=True) as tmp:
                    trainer.save_checkpoint(tmp, weights_only=False)
            else:  # every process joins the save; the first one writes the file
                trainer.save_checkpoint(temporary(self.path), weights_only=False)
            trainer.lightning_module.last_checkpoint_step = trainer.lightning_module.rl_step
        except OSError as e:
            raise CreditBenchError(
                f"cannot write checkpoint {str(self.path)!r}: {e.strerror or e}; the last "
                "complete checkpoint and the metrics logged up to it are kept -- free space "
                "and run the same command again to resume"
            ) from None
        trainer.strategy.barrier("creditbench-checkpoint")


def resume_point(cfg, directory: Path, client, log=print) -> tuple[str | None, Path | None]:
    """(the MLflow run to continue, the checkpoint to resume from) for the run of ``directory``:
    (None, None) for a fresh start. A checkpoint whose MLflow run is gone or finished, or any
    checkpoint when ``checkpoint.resume`` is off, is discarded."""
    meta, last = directory / "run.json", directory / "last.ckpt"
    if not meta.is_file():
        last.unlink(missing_ok=True)
        return None, None
    reason = None
    try:
        run_id = json.loads(meta.read_text())["mlflow_run_id"]
        run = client.get_run(run_id)
        if run.info.lifecycle_stage != "active":
            reason = f"its MLflow run {run_id} was deleted"
        elif run.info.status == "FINISHED":
            reason = f"its MLflow run {run_id} already finished"
    except (ValueError, KeyError, TypeError):  # a corrupt run.json
        reason = f"{meta} cannot be read"
    except Exception as e:
        if getattr(e, "error_code", None) != "RESOURCE_DOES_NOT_EXIST":  # the store is unusable: keep everything
            raise CreditBenchError(
                f"cannot use MLflow tracking URI {cfg.tracking.uri!r} to resume the run in "
                f"{directory}: {str(e).splitlines()[0][:300] if str(e) else type(e).__name__}"
            ) from None
        reason = f"its MLflow run {run_id} is not in {cfg.tracking.uri}"
    if reason is None and not cfg.checkpoint.resume:
        reason = "checkpoint.resume is off"
    if reason is not None:
        log(f"starting over: discarding the checkpoint in {directory} ({reason})")
        last.unlink(missing_ok=True)
        meta.unlink()
        return None, None
    if last.is_file() and not _readable(last):
        raise CreditBenchError(
            f"checkpoint {last} is damaged (not a complete checkpoint archive); delete it (rm {last}) and the "
            "run starts again from its base, continuing its MLflow run"
        )
    return run_id, (last if last.is_file() else None)


def _readable(path: Path) -> bool:
    """A torch checkpoint is a zip archive whose directory sits at its end: a truncated or
    overwritten file has none (a cheap check; the CRCs are checked when it loads)."""
    import zipfile

    try:
        with zipfile.ZipFile(path) as archive:
            return bool(archive.namelist())
    except (zipfile.BadZipFile, OSError):
        return False


def discard(directory: Path) -> None:
    """Remove a finished run's checkpoint directory."""
    for path in (directory / "last.ckpt", directory / "run.json"):
        path.unlink(missing_ok=True)
        temporary(path).unlink(missing_ok=True)
    try:
        directory.rmdir()
    except OSError:  # something else lives there: leave it
        pass
