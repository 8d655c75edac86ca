"""Fitting a module without a run: Lightning in one process (the CPU by default), no checkpoints, progress bar or
MLflow, every logged row kept in memory (:class:`MemoryLogger`) -- for the benchmarks that time a step
and the tests that check what a step logs. A run (bench.run.train) builds its own trainer."""

from __future__ import annotations

import lightning as L
from lightning.pytorch.loggers import Logger

from bench.config import EvalConfig, RLConfig
from bench.engine.data import PromptDataModule
from bench.engine.module import RLVRModule


class MemoryLogger(Logger):
    """Keeps every logged row in memory, where the benchmarks (and tests) read the step timings back."""

    def __init__(self):
        super().__init__()
        self.rows: list[dict[str, float]] = []

    name = property(lambda self: "memory")
    version = property(lambda self: 0)

    def log_metrics(self, metrics, step=None):
        self.rows.append(dict(metrics))

    def log_hyperparams(self, params, *args, **kwargs):
        pass


def fit_logged(
    module: RLVRModule,
    task,
    rl: RLConfig,
    ev: EvalConfig,
    steps: int | None = None,
    accelerator: str = "cpu",
    precision: str = "32-true",
) -> list[dict]:
    """Fit ``module`` with Lightning in one process (on the CPU unless ``accelerator`` is "gpu") for
    ``steps`` RL steps (default ``rl.steps``): no checkpoints, progress bar or validation. Returns every
    row it logged, in order."""
    logger = MemoryLogger()
    trainer = L.Trainer(
        accelerator=accelerator,
        devices=1,
        precision=precision,
        max_steps=(rl.steps if steps is None else steps) * rl.ppo_epochs * rl.minibatches,
        logger=logger,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        limit_val_batches=0,
    )
    trainer.fit(module, datamodule=PromptDataModule(task, rl.prompts_per_step, ev, 0))
    return logger.rows
