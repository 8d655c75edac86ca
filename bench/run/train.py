"""One RL run from a :class:`RunConfig`: validate everything (:func:`preflight`), then set up (the
base policy, warm-starting a tiny model if needed; the MLflow run; the module, data and trainer), fit
(train with :class:`RLVRModule` and evaluate) and record (the result, the saved policy, the MLflow run
marked finished). Where the result goes besides is the caller's: a sweep's run writes it to the
sweep's folder (``on_result``)."""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bench.config import RunConfig
from bench.errors import CreditBenchError
from bench.run.args import config_yaml
from bench.run.resolve import Resolved, preflight

if TYPE_CHECKING:
    from bench.run.result import RunResult


def run(
    cfg: RunConfig,
    progress: bool = True,
    checked: Resolved | None = None,
    on_result: Callable[[RunResult], None] | None = None,
) -> dict[str, Any]:
    """Train and evaluate one run (see the module docstring): set up, fit, record. Its result, as the
    JSON of :class:`bench.run.result.RunResult`. ``checked``: what :func:`preflight` returned for
    ``cfg``, where the caller ran it already; ``on_result``: called with the result (on the first
    process) before the MLflow run is marked finished -- a sweep's run writes it to its folder
    (:func:`bench.sweep.sweep.result_writer`)."""
    from bench.run.timing import PhaseClock

    clock = PhaseClock()
    r = checked or preflight(cfg)
    session = _setup(cfg, r, progress, clock)
    credit_map, wall = _fit(session)
    return _record(session, credit_map, wall, on_result)


@dataclass
class _Session:
    """One run between its setup and its record."""

    cfg: RunConfig
    r: Resolved
    progress: bool
    clock: Any
    t_start: float
    zero: bool  # the first process (the one that records)
    ckpt_dir: Path | None
    base: Path | None  # the warm-started base checkpoint of a tiny model
    params: int
    tokenizer: Any
    logger: Any
    module: Any
    data: Any
    trainer: Any
    sink: Any
    ckpt: Path | None  # the checkpoint it resumes from
    resume_id: str | None  # the MLflow run it resumes into


def _setup(cfg: RunConfig, r: Resolved, progress: bool, clock) -> _Session:
    """Everything before the first step: the checkpoint folder, the base policy (warm-started for a
    tiny model), the MLflow run (new, or the one it resumes), the module, its data and the trainer."""
    import torch
    from lightning.pytorch.utilities.rank_zero import rank_zero_only

    from bench.engine import base_eval
    from bench.engine.checkpoint import MetricSink
    from bench.environment.fingerprint import fingerprint
    from bench.run.build import build_data, build_module, build_trainer

    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    t_start = time.perf_counter()
    ckpt_dir = None
    if cfg.checkpoint.every:  # before anything is written: a checkpoint directory that cannot take files stops here
        from bench.engine.checkpoint import ensure_writable
        from bench.engine.checkpoint_dir import run_dir

        ckpt_dir = run_dir(cfg, r.run_name)
        ensure_writable(ckpt_dir)
    clock.lap("setup")
    policy, tokenizer, ref, params, base = base_policy(cfg, r, progress)
    clock.lap("base")
    zero = rank_zero_only.rank == 0  # Lightning starts the other processes (DDP) later, in the first trainer call
    resume_id, ckpt = None, None
    if ckpt_dir is not None and zero:
        from bench.engine.checkpoint import resume_point
        from bench.tracking.tracking import client

        resume_id, ckpt = resume_point(cfg, ckpt_dir, client(cfg.tracking.uri), log=print if progress else _quiet)
    elif ckpt_dir is not None and (ckpt_dir / "last.ckpt").is_file():  # the first process decided: same answer
        ckpt = ckpt_dir / "last.ckpt"
    logger = _logger(cfg, r, policy, params, resume_id, ckpt_dir if zero else None)
    clock.lap("mlflow")
    module = build_module(cfg, r, policy, tokenizer, ref)
    module.t_start = t_start
    if ckpt is None and base_eval.applies(cfg, module.engine.separate):
        module.base_eval = base_eval.BaseEvalCache.for_run(cfg, fingerprint(torch.get_num_threads())["numerics"])
    sink = module.sink = MetricSink(logger, resumed=resume_id is not None)  # live; a resumed run skips what MLflow has
    data = build_data(cfg, r)
    if resume_id is None and zero:  # the data as dataset inputs, the warm-start run linked
        from bench.tracking.lineage import record_lineage

        record_lineage(logger, cfg.task.name, r.task, data, r.eval_tasks, base)
    trainer = build_trainer(cfg, logger, ckpt_dir, progress)
    clock.lap("build")
    return _Session(
        cfg, r, progress, clock, t_start, zero, ckpt_dir, base, params, tokenizer, logger, module, data, trainer,
        sink, ckpt, resume_id,
    )  # fmt: skip


def base_policy(cfg: RunConfig, r: Resolved, progress: bool = False):
    """(policy, tokenizer, reference policy or None, the base's parameter count, the warm-started base
    checkpoint or None): the base loaded (warm-started first for a tiny model), prepared for training."""
    import lightning as L

    from bench.bases.warmstart import base_checkpoint
    from bench.models.policy import TINY_SIZES, load_policy, num_parameters
    from bench.run.build import prepare

    path, base = cfg.model.name, None
    if cfg.model.name in TINY_SIZES:
        path = base = base_checkpoint(
            cfg.task.name, r.task, cfg.model.name, cfg.warmstart, cfg.tracking.cache_dir, cfg.tracking.uri, progress
        )
    L.seed_everything(cfg.seed, verbose=False)
    policy, tokenizer = load_policy(path, cfg.model.dtype)
    params = num_parameters(policy)
    policy, ref = prepare(cfg, r, policy)
    return policy, tokenizer, ref, params, base


def _logger(cfg: RunConfig, r: Resolved, policy, params: int, resume_id: str | None, ckpt_dir: Path | None):
    """The run's MLflow logger: a new run with its tags, resolved parameters and config (its id noted
    in ``ckpt_dir``, for a resume), or the run ``resume_id`` it continues."""
    from bench.models.policy import num_parameters
    from bench.tracking.tracking import flatten, git_commit, log_config, make_logger

    tags = {
        "method": cfg.method.name,
        "task": cfg.task.name,
        "task_version": r.task.VERSION,
        "model": cfg.model.name,
        "model_params": str(params),
        "seed": str(cfg.seed),
        "trainable_params": str(num_parameters(policy, trainable=True)),
        "lora_rank": str(cfg.model.lora.rank),
        "git_commit": git_commit(),
        "aggregation": r.method.config.aggregation,
        "kind": "rl",
    }
    if cfg.tracking.sweep:
        tags["sweep"] = cfg.tracking.sweep
    if cfg.tracking.parent_run_id:
        tags["mlflow.parentRunId"] = cfg.tracking.parent_run_id
    tags.update(cfg.tracking.tags)
    logger = make_logger(cfg.tracking.uri, cfg.tracking.experiment, r.run_name, tags, run_id=resume_id)
    if resume_id is None:
        resolved_params = flatten(cfg)
        resolved_params.update({f"method.options.{k}": v for k, v in dataclasses.asdict(r.method.config).items()})
        resolved_params.update({f"task.options.{k}": v for k, v in dataclasses.asdict(r.task.config).items()})
        log_config(logger, resolved_params, config_yaml(cfg))
        if ckpt_dir is not None:
            from bench.engine.checkpoint import write_json

            write_json(ckpt_dir / "run.json", {"mlflow_run_id": logger.run_id, "run_name": r.run_name})
    return logger


def _fit(s: _Session) -> tuple[dict[str, Any] | None, float]:
    """Evaluate the base (a new run), train, evaluate the final policy: (the credit map, wall seconds)."""
    module, trainer, data, logger, name = s.module, s.trainer, s.data, s.logger, s.r.run_name
    try:
        if s.ckpt is None:
            trainer.validate(module, datamodule=data, verbose=False)  # the base policy, at step 0
            module.make_fixed_sets(list(data.eval_rows.select(range(min(16, len(data.eval_rows))))))
        elif s.progress:
            print(f"resuming run {name!r} (MLflow run {s.resume_id}) from its checkpoint {s.ckpt}")
        s.clock.lap("eval0")
        trainer.fit(module, datamodule=data, ckpt_path=s.ckpt, weights_only=False)
        if trainer.interrupted:  # Ctrl-C: Lightning returns from fit; record nothing as finished
            logger.end("KILLED")
            again = (
                f"; run the same command again to resume from step {module.last_checkpoint_step}"
                if module.last_checkpoint_step is not None
                else ""
            )
            raise CreditBenchError(
                f"run {name!r} was interrupted at step {module.rl_step}; nothing was recorded as finished{again}"
            )
        s.clock.lap("fit")
        if module.eval_history[-1]["step"] != module.rl_step:
            trainer.validate(module, datamodule=data, verbose=False)
        credit_map = module.measure_credit_map()
        module.engine.close()  # vLLM: free its memory and process state before the next run
        wall = module.wall_before + time.perf_counter() - s.t_start
        s.sink.log({"time/wall_s": wall}, step=module.rl_step)
    except BaseException:  # the metrics are in MLflow already; stop sampling system metrics into the run
        logger.stop_monitor()
        raise
    s.clock.lap("eval_final")
    return credit_map, wall


def _record(
    s: _Session, credit_map: dict[str, Any] | None, wall: float, on_result: Callable[[RunResult], None] | None
) -> dict[str, Any]:
    """The run's result (handed to ``on_result``), its saved policy, its MLflow run marked finished and
    its checkpoints discarded unless kept."""
    import torch

    from bench.bases.warmstart import base_identity
    from bench.environment.fingerprint import fingerprint
    from bench.run.result import RunResult
    from bench.tracking.tracking import log_dict

    cfg, r, module, logger, zero = s.cfg, s.r, s.module, s.logger, s.zero
    if credit_map is not None:
        log_dict(logger, credit_map, "credit_map.json")
    result = RunResult.from_history(
        module.eval_history,
        cfg.task.name,
        run_name=r.run_name,
        mlflow_run_id=logger.run_id,
        method=cfg.method.name,
        eval_tasks=list(r.eval_tasks),
        model=cfg.model.name,
        params=s.params,
        lora_rank=cfg.model.lora.rank,
        seed=cfg.seed,
        steps=module.rl_step,
        optimizer_steps=module.rl_step * cfg.rl.ppo_epochs * cfg.rl.minibatches - module.skipped_updates,
        samples=module.samples,
        extra_samples=module.sampler.extra,
        base_eval_reused=module.base_eval is not None and module.base_eval.reused,
        tokens=module.tokens,
        wall_s=round(wall, 1),
        tags=dict(cfg.tracking.tags),
        budget={"samples": cfg.rl.budget_samples, "tokens": cfg.rl.budget_tokens},
        credit_probe=credit_map,
        train=module.train_summary(),
        fingerprint=fingerprint(torch.get_num_threads()),
        base_checkpoint=base_identity(s.base) if s.base is not None else {},
    )
    if on_result is not None and s.trainer.is_global_zero:  # before the MLflow run is marked finished
        on_result(result)
    policy_dir = _save_policy(s) if cfg.checkpoint.policy else None
    logger.end("success")
    if s.ckpt_dir is not None and zero and not cfg.checkpoint.keep:
        from bench.engine.checkpoint import discard

        discard(s.ckpt_dir)
    s.clock.lap("finish")
    if zero:  # where the run's time went, one line of its log (bench/perf/fixed_cost.py reads it)
        print(s.clock.line(), flush=True)
    out = result.to_dict()
    if policy_dir is not None:
        out["policy_dir"] = str(policy_dir)
    return out


def _save_policy(s: _Session) -> Path | None:
    """The trained policy saved beside the run's checkpoints and logged to its MLflow run (the first
    process; every process gives its FSDP shards); its folder, None on the other processes."""
    from bench.engine.checkpoint_dir import run_dir
    from bench.models.policy import full_state, save_policy

    state = full_state(s.module.policy)  # FSDP: every process gives its shards, the first gets the whole
    if not s.zero:
        return None
    policy_dir = save_policy(s.module.policy, s.tokenizer, run_dir(s.cfg, s.r.run_name) / "policy", state).resolve()
    s.logger.experiment.log_artifacts(s.logger.run_id, str(policy_dir), "policy")
    s.logger.experiment.set_tag(s.logger.run_id, "policy_dir", str(policy_dir))
    return policy_dir


def summary_line(res: dict[str, Any]) -> str:
    """The line ``creditbench train`` ends with: the run's pass@1 from base to final, and its cost."""
    b, f, d = res["base"], res["final"], res["delta_pass_at_1"]
    z = f"{d['z']:.1f}" if math.isfinite(d["z"]) else "n/a: no problem changed"
    return (
        f"{res['run_name']}: eval pass@1 {b['pass_at_1']:.3f} -> {f['pass_at_1']:.3f} "
        f"(delta {d['delta']:+.3f} +/- {d['se']:.3f} paired SE, z={z}); "
        f"{res['samples']} samples, {res['tokens']} tokens, {res['wall_s']:.0f} s; MLflow run {res['mlflow_run_id']}"
        + (f"; policy saved in {res['policy_dir']}" if res.get("policy_dir") else "")
    )


def _quiet(*args, **kwargs) -> None:
    pass
