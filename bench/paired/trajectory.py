"""Checkpoints along a trajectory (the reference run whose checkpoints the arms update from): a run of
one label (its recipe, rate and seed, at the sweep's budget) trained in memory with the real module and
Lightning, its trainable weights and AdamW state copied at the phases the probe asks for (fractions of
the budget)."""

from __future__ import annotations

import copy
import dataclasses
from dataclasses import dataclass
from typing import Any

import torch
from lightning.pytorch.callbacks import Callback

from bench.config import RunConfig


@dataclass
class Checkpoint:
    """A policy's trainable weights and its optimizer's state at one point of a trajectory."""

    reference: str  # the label whose trajectory it is
    seed: int
    phase: float  # the fraction of the budget asked for
    rl_step: int
    samples: int
    weights: dict[str, torch.Tensor]
    optimizer: dict[str, Any] | None  # AdamW's state_dict; None at the base (a fresh AdamW)

    @property
    def key(self) -> tuple[str, int, float]:
        """(reference, seed, phase): the stratum its batches' records name."""
        return self.reference, self.seed, self.phase

    @property
    def name(self) -> str:
        return f"{self.reference}/seed{self.seed}/phase{self.phase:g}"

    def info(self) -> dict[str, Any]:
        return {"reference": self.reference, "seed": self.seed, "phase": self.phase, "rl_step": self.rl_step,
                "samples": self.samples}  # fmt: skip


class _Snapshots(Callback):
    """Copies the module's trainable weights and AdamW state at the first RL step that reaches each
    phase's sample count (phase 0: before the first step, with no optimizer state)."""

    def __init__(self, label: str, seed: int, phases: list[float], budget: int):
        self.label, self.seed, self.budget = label, seed, budget
        self.left = sorted(phases)
        self.taken: list[Checkpoint] = []

    def _take(self, module, optimizer: dict[str, Any] | None) -> None:
        while self.left and module.samples >= self.left[0] * self.budget:
            weights = {k: v.detach().clone() for k, v in module.policy.state_dict().items()}
            self.taken.append(
                Checkpoint(self.label, self.seed, self.left.pop(0), module.rl_step, module.samples, weights, optimizer)
            )

    def on_train_start(self, trainer, module) -> None:
        self._take(module, None)

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx) -> None:
        self._take(module, copy.deepcopy(trainer.optimizers[0].state_dict()))


def trajectory(label: str, cfg: RunConfig, seed: int, phases: list[float], budget: int) -> list[Checkpoint]:
    """Train ``label``'s run (``cfg`` with ``seed``) to its budget without evaluating, and return its
    checkpoints at ``phases`` (a phase past the run's end: its last step)."""
    import lightning as L

    from bench.engine.fit import MemoryLogger
    from bench.run.build import build_data, build_module
    from bench.run.resolve import resolve
    from bench.run.train import base_policy

    cfg = dataclasses.replace(cfg, seed=seed)
    r = resolve(cfg)
    policy, tokenizer, ref, _, _ = base_policy(cfg, r)
    module = build_module(cfg, r, policy, tokenizer, ref)
    snaps = _Snapshots(label, seed, phases, budget)
    trainer = L.Trainer(
        accelerator="cpu",
        devices=1,
        precision=cfg.precision,
        max_steps=cfg.rl.steps * cfg.rl.ppo_epochs * cfg.rl.minibatches,
        logger=MemoryLogger(),
        callbacks=[snaps],
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        limit_val_batches=0,
    )
    trainer.fit(module, datamodule=build_data(cfg, r))
    if snaps.left:  # the budget ended first: the last step stands for the phases left
        last = snaps.taken[-1]
        snaps.taken += [dataclasses.replace(last, phase=f) for f in snaps.left]
    return snaps.taken
