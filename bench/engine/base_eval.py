"""The base policy's eval, computed once and reused by every run that would compute the same one.

A sweep evaluates every run at step 0, before any update. For the labels of one seed -- a method, its
twin, its placebo, GRPO -- that eval is the same computation: the same warm-started weights, the
same random state, the same problems, sampler and verifier. ``eval.reuse_base`` (on by default)
computes it once: the first run stores its results and the random state the eval left behind under
a key of everything the eval depends on; a later run with the same key takes both, logs the same
metrics and tables, and trains from the same random state, so its numbers are bit-identical to
computing the eval itself (tested).

The key hashes: the policy's parameters and buffers as they generate (a LoRA adapter, a method's
change to the model, a different base: another key), every random state at the eval's start (the
seed), the eval problems themselves, the run's model, task, eval, rollout, precision and threads
settings, the numerics stack (bench.environment.fingerprint: CPU code path, BLAS, library versions) and the
source of the ``bench`` and ``tasks`` packages. It applies to one process sampling on the CPU with
the policy's own ``generate``, where the eval's random draws are the torch generator's: with several
processes, a GPU or vLLM (whose sampler keeps its own state) every run evaluates its base itself.
Entries live in ``<tracking.cache_dir>/base_eval/`` beside the warm-started bases, written
atomically; delete the folder to recompute them.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
from pathlib import Path
from typing import Any

import torch

from bench.atomic import atomic_path
from bench.engine.checkpoint import rng_states, set_rng_states

FOLDER = "base_eval"
PACKAGES = ("bench", "tasks")
"""The packages whose source a cached eval depends on (sampling, scoring, verifiers)."""


@functools.lru_cache(maxsize=1)
def source_hash() -> str:
    """sha256 of the ``bench`` and ``tasks`` packages' Python files (path and content)."""
    root = Path(__file__).resolve().parents[2]
    h = hashlib.sha256()
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            h.update(str(path.relative_to(root)).encode())
            h.update(path.read_bytes())
    return h.hexdigest()


def applies(cfg, engine_separate: bool) -> bool:
    """Whether ``cfg``'s base eval can be reused: asked for, one process, on the CPU, the policy's own
    ``generate`` (the eval's random draws are then the torch generator's, which the entry restores)."""
    return bool(
        cfg.eval.reuse_base
        and cfg.trainer.world_size == 1
        and cfg.trainer.accelerator in ("cpu", "auto")
        and not torch.cuda.is_available()
        and not engine_separate
    )


def _tensor_bytes(t: torch.Tensor) -> bytes:
    t = t.detach().cpu().contiguous()
    return t.view(torch.uint8).numpy().tobytes() if t.numel() else b""


def _rng_bytes(states: dict[str, Any]) -> bytes:
    return _tensor_bytes(states["torch"]) + repr(states["numpy"][1].tolist()).encode() + repr(states["python"]).encode()


class BaseEvalCache:
    """The base eval's store for one run: ``settings`` is what of the run's configuration the eval
    depends on (JSON-able), ``folder`` where entries go."""

    def __init__(self, folder: str | Path, settings: dict[str, Any]):
        self.folder = Path(folder) / FOLDER
        self.settings = settings
        self.key: str | None = None  # the key of a base eval in progress that is not stored yet
        self._restore: dict[str, Any] | None = None  # the random states a reused eval left
        self.reused = False  # whether this run's base eval was a stored one

    @classmethod
    def for_run(cls, cfg, numerics: dict[str, Any]) -> BaseEvalCache:
        """``numerics``: the process's numerics stack (bench.environment.fingerprint's ``numerics``)."""
        settings = {part: dataclasses.asdict(getattr(cfg, part)) for part in ("model", "task", "eval", "rollout")} | {
            "precision": cfg.precision,
            "threads": cfg.threads,
        }
        for later in ("reuse_base", "every", "every_samples"):  # not what the base eval computes
            settings["eval"].pop(later)
        settings["samples_to_log"] = cfg.rl.samples_to_log
        settings.update(numerics=numerics, code=source_hash())
        return cls(cfg.tracking.cache_dir, settings)

    def _key(self, policy, eval_sets) -> str:
        h = hashlib.sha256(json.dumps(self.settings, sort_keys=True, default=str).encode())
        for name, t in sorted(policy.state_dict().items()):
            h.update(f"{name}{tuple(t.shape)}{t.dtype}".encode())
            h.update(_tensor_bytes(t))
        h.update(_rng_bytes(rng_states()))
        for rows in eval_sets:
            h.update(json.dumps([dict(r) for r in rows], sort_keys=True, default=str).encode())
        return h.hexdigest()

    def lookup(self, module) -> dict[str, Any] | None:
        """At the start of ``module``'s eval: None unless it is the base's (no step taken, no sample
        drawn) and stored; then its results, with every random state set where the eval left it.
        A base eval not found is kept by :meth:`store` at its end."""
        self.key, self._restore = None, None
        if module.rl_step or module.samples:
            return None
        self.key = self._key(module.policy, module.trainer.datamodule.eval_sets)
        path = self.folder / f"{self.key}.pt"
        try:
            entry = torch.load(path, weights_only=False) if path.is_file() else None
        except Exception:  # a damaged entry is recomputed (and rewritten)
            entry = None
        if entry is None:
            return None
        self.key, self._restore, self.reused = None, entry["rng"], True
        return entry["results"]

    def store(self, results: dict[str, Any]) -> None:
        """At the end of an eval: a reused one sets the random states where computing it left them; a
        base eval :meth:`lookup` did not find is stored with the random states it left, atomically."""
        if self._restore is not None:
            set_rng_states(self._restore)
            self._restore = None
        if self.key is None:
            return
        self.folder.mkdir(parents=True, exist_ok=True)
        path = self.folder / f"{self.key}.pt"
        with atomic_path(path, per_process=True) as tmp:  # a sweep's runs share the folder
            torch.save({"results": results, "rng": rng_states()}, tmp)
        self.key = None
