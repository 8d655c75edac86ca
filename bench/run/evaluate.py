"""Evaluate any checkpoint on any task, the way a user checks a paper's released model before
comparing against it (the command is ``creditbench eval``, bench/cli/eval.py): :class:`EvalSettings`
says what and how, :func:`run_eval` checks and runs it.

It samples ``n`` completions per problem with the HF engine, grades them with the task's
verifier, and reports unbiased pass@k with standard errors over problems (the same PassAtK metric
training uses), the flexible-extraction accuracy beside the strict one, mean length, the truncated
fraction and tokens per correct answer. Everything goes to stdout and to one MLflow run (tag
``kind=eval``) with a per-problem JSON and a table of completions.
"""

from __future__ import annotations

import dataclasses
import json
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from bench.config import default_uri
from bench.core import check
from bench.errors import CreditBenchError
from bench.options import build_config
from bench.run.eval_model import MODELS, TrainingRun, check_offline_hub_id, run_policy, training_run

DEFAULTS = {"n": 16, "k": "1,4,16", "num_problems": 0, "temperature": 0.6, "top_p": 0.95, "max_new_tokens": 3072}
"""The eval settings of a model that is not a training run's (whose own settings are the defaults)."""


@dataclass
class EvalSettings:
    """What an evaluation evaluates and how (``creditbench eval``'s flags, typed). None: not given --
    the training run's own setting where ``model`` is one, else :data:`DEFAULTS` (:meth:`resolved`)."""

    model: str
    task: str | None = None
    n: int | None = None
    k: str | None = None  # the k of pass@k, comma-separated, as given (and logged)
    num_problems: int | None = None
    split: str = "eval"
    temperature: float | None = None
    top_p: float | None = None
    max_new_tokens: int | None = None
    batch_size: int = 64  # sequences per generate call
    template: str | None = None
    data_dir: str | None = None
    task_option: list[str] = field(default_factory=list)  # KEY=VALUE, the value parsed as JSON when it can be
    allow_code_execution: bool = False
    dtype: str = "auto"
    seed: int = 0
    uri: str = field(default_factory=default_uri)
    experiment: str = "creditbench-eval"
    run_name: str | None = None
    samples_to_log: int = 32
    top_k: int = 0  # the training run's, for its own task
    run_task_options: dict[str, Any] = field(default_factory=dict)  # the training run's, for its own task
    ks: list[int] = field(default_factory=list)  # the k of pass@k, sorted (:meth:`resolved`)

    def resolved(self, cfg=None) -> EvalSettings:
        """These settings with the unset ones filled -- from the training run's config ``cfg`` (its
        task and task options, and its eval's n, k, problems and sampling), else :data:`DEFAULTS` --
        and checked; ``ks`` parsed from ``k``."""
        s = dataclasses.replace(self, top_k=0, run_task_options={})
        if cfg is not None:
            sampling = cfg.eval.sampling
            own = {"n": cfg.eval.n, "k": ",".join(map(str, cfg.eval.k)), "num_problems": cfg.eval.num_problems}
            own |= {"temperature": sampling.temperature, "top_p": sampling.top_p}
            own |= {"max_new_tokens": sampling.max_new_tokens}
            for key, value in own.items():
                if getattr(s, key) is None:
                    setattr(s, key, value)
            s.task = s.task or cfg.task.name
            if s.task == cfg.task.name:  # the run's task: its options, under any --task_option given
                s.run_task_options, s.top_k = dict(cfg.task.options), sampling.top_k
        for key, value in DEFAULTS.items():
            if getattr(s, key) is None:
                setattr(s, key, value)
        check(s.task is not None, "--task is required (unless --model is a training run's id: then its task)")
        try:
            s.ks = sorted({int(k) for k in s.k.split(",") if k.strip()})
        except ValueError:
            raise CreditBenchError(f"--k must be comma-separated integers, got {s.k!r}") from None
        check(s.n >= 1, f"--n must be >= 1, got {s.n}")
        check(
            bool(s.ks) and all(1 <= k <= s.n for k in s.ks),
            f"--k values must lie in [1, n={s.n}] (unbiased pass@k), got {s.k}",
        )
        check(
            s.num_problems >= 0 and s.batch_size >= 1 and s.max_new_tokens >= 1,
            "--num_problems must be >= 0, --batch_size and --max_new_tokens >= 1",
        )
        return s

    def task_options(self) -> dict[str, Any]:
        """The task's options: the training run's (for its own task), then ``task_option``, ``template``
        and ``data_dir``."""
        options: dict[str, Any] = dict(self.run_task_options)
        for item in self.task_option:
            if "=" not in item:
                raise CreditBenchError(f"--task_option expects KEY=VALUE, got {item!r}")
            key, value = item.split("=", 1)
            try:
                options[key] = json.loads(value)
            except json.JSONDecodeError:
                options[key] = value
        if self.template is not None:
            options["template"] = self.template
        if self.data_dir is not None:
            options["data_dir"] = self.data_dir
        return options


def run_eval(s: EvalSettings) -> dict[str, Any]:
    """``creditbench eval``: resolve what ``s.model`` names (a training run's id: its policy and its
    settings as the defaults), check the task, the model, the Hub and the tracking store before any
    sampling, then :func:`evaluate` the problems; the result."""
    from bench.core import code_execution_allowed, code_execution_refused
    from bench.registry import TASKS

    training = None  # the training run whose policy this is
    if re.fullmatch(r"[0-9a-f]{32}", s.model) and not Path(s.model).exists():  # an MLflow run id
        training = training_run(s.model, s.uri)
    s = s.resolved(training.cfg if training else None)
    task_cls = TASKS.get(s.task)
    task = task_cls(build_config(task_cls.Config, s.task_options(), f"task {s.task!r}"))
    if s.split not in task.splits:
        raise CreditBenchError(f"task {s.task!r} has no {s.split!r} split; valid: {', '.join(task.splits)}")
    if task.executes_code:
        if not code_execution_allowed(s.allow_code_execution):
            raise CreditBenchError(code_execution_refused(s.task))
        task.allow_code_execution()
    from bench.models.policy import TINY_SIZES

    if s.model in TINY_SIZES:
        raise CreditBenchError(
            f"--model {s.model!r} is a size, not a checkpoint: give {MODELS} "
            "(e.g. a base checkpoint under .creditbench/cache)"
        )
    if training is not None:
        s.model = run_policy(training, s.uri)
    if s.model.startswith(("/", "./", "../", "~")) and not Path(s.model).expanduser().is_dir():
        raise CreditBenchError(f"model directory {s.model!r} does not exist (give {MODELS})")
    from bench.models.pretrained import resolve

    s.model = str(resolve(s.model))  # a fetched pretrained model's short name: its cached copy
    check_offline_hub_id(s.model)
    from bench.tracking.tracking import check_tracking_uri

    check_tracking_uri(s.uri, write=True)  # before the sampling: an unusable store would otherwise fail only at the end
    rows = task.load(s.split)  # before the model: a missing data file fails fast
    if s.num_problems:
        rows = rows.select(range(min(s.num_problems, len(rows))))
    return evaluate(s, task, rows, training)


def evaluate(s: EvalSettings, task, rows, training: TrainingRun | None = None) -> dict[str, Any]:
    """pass@k of a checkpoint on ``rows``: generate, grade, log an MLflow eval run, and return the
    result with its per-problem counts."""
    import torch

    from bench.config import SamplingConfig
    from bench.engine.metrics import eval_summary
    from bench.models.policy import load_policy

    device = "cuda" if torch.cuda.is_available() else "cpu"
    dtype = s.dtype if s.dtype != "auto" else ("bfloat16" if device == "cuda" else "float32")
    sampling = SamplingConfig(temperature=s.temperature, top_p=s.top_p, top_k=s.top_k, max_new_tokens=s.max_new_tokens)
    t0 = time.perf_counter()
    model, tokenizer = load_policy(s.model, dtype, accepts=MODELS)
    model.to(device).eval()
    torch.manual_seed(s.seed)
    graded = _generate_and_grade(s, task, rows, model, tokenizer, sampling)
    res = eval_summary(graded.metric, graded.lengths, graded.truncated, graded.flex)  # as a training run's evals
    res["wall_s"] = time.perf_counter() - t0
    name = f"runs:/{training.run_id}/policy" if training else s.model  # a training run's policy: named by the run
    run_id = _log_eval(s, task, rows, training, name, res, graded, {"dtype": dtype, "device": device})
    return {
        "model": name,
        "task": s.task,
        "task_version": task.VERSION,
        "split": s.split,
        "n": s.n,
        "ks": s.ks,
        "num_problems": len(rows),
        "metrics": res,
        "mlflow_run_id": run_id,
        "per_problem": graded.per_problem,
    }


@dataclass
class _Graded:
    """What an evaluation's generations came to: the pass@k state, per problem, and per sample."""

    metric: Any
    per_problem: list[dict] = field(default_factory=list)
    samples: list[dict] = field(default_factory=list)
    lengths: list[int] = field(default_factory=list)
    truncated: list[bool] = field(default_factory=list)
    flex: list[bool] = field(default_factory=list)


def _generate_and_grade(s: EvalSettings, task, rows, model, tokenizer, sampling) -> _Graded:
    """``s.n`` completions of every problem, in batches of ``s.batch_size`` completions, graded."""
    import torch

    from bench.engine.metrics import PassAtK
    from bench.engine.progress import counter
    from bench.engine.rollout import HFRolloutEngine

    engine = HFRolloutEngine(model, tokenizer)
    g = _Graded(PassAtK(s.ks))
    step = max(1, s.batch_size // s.n)  # problems per generate call
    shown = counter(f"eval {s.task}", len(rows), "problem")  # stderr: a bar on a terminal, else lines
    shown.update(0)
    for start in range(0, len(rows), step):
        chunk = [rows[i] for i in range(start, min(start + step, len(rows)))]
        gen = engine.generate([task.prompt(r, tokenizer) for r in chunk], s.n, sampling)
        expanded = [r for r in chunk for _ in range(s.n)]
        outcomes = task.verify(gen.texts, expanded, details=True)
        correct = torch.tensor([o.correct for o in outcomes]).view(len(chunk), s.n)
        g.metric.update(correct)
        g.lengths += gen.completion_mask.sum(-1).tolist()
        g.truncated += gen.truncated.tolist()
        g.flex += [bool(o.correct_flexible) for o in outcomes]
        for j, r in enumerate(chunk):
            g.per_problem.append({"id": r["id"], "correct": int(correct[j].sum()), "n": s.n})
            if len(g.samples) < s.samples_to_log:
                o = outcomes[j * s.n]
                text, answer = gen.texts[j * s.n], str(r["answer"])[:500]
                g.samples.append(
                    dict(id=r["id"], completion=text, parsed=o.parsed, answer=answer, correct=o.correct, error=o.error)
                )
        shown.update(len(g.per_problem), {"pass@1": g.metric.num_correct() / (len(g.per_problem) * s.n)})  # so far
    shown.close()
    return g


def _log_eval(s: EvalSettings, task, rows, training, model: str, res: dict, g: _Graded, where: dict) -> str:
    """The eval's MLflow run (linked to its training run, if any): tags, settings, metrics, the
    per-problem counts and the logged completions. Returns its run id."""
    from bench.engine.metrics import metric_key
    from bench.tracking.tracking import git_commit, log_eval_run

    run_name = s.run_name or f"eval-{s.task}-{training.name if training else Path(s.model.rstrip('/')).name}"
    tags = {"kind": "eval", "task": s.task, "task_version": task.VERSION, "model": model, "git_commit": git_commit()}
    if training:
        tags["training_run_id"] = training.run_id
        tags["mlflow.note.content"] = f"Evaluation of the policy of training run {training.name} ({training.run_id})."
    params = {
        "model": model,
        "task": s.task,
        "split": s.split,
        "n": s.n,
        "k": s.k,
        "num_problems": len(rows),
        "temperature": s.temperature,
        "top_p": s.top_p,
        "top_k": s.top_k,
        "max_new_tokens": s.max_new_tokens,
        "template": task.config.template,
        "dtype": where["dtype"],
        "seed": s.seed,
        "device": where["device"],
    }
    metrics = {metric_key("eval", s.task, k): v for k, v in res.items() if np.isfinite(v)}
    table = ("completions.json", {k: [s[k] for s in g.samples] for k in g.samples[0]}) if g.samples else None
    files = {"per_problem.json": {"per_problem": g.per_problem}}
    return log_eval_run(s.uri, s.experiment, run_name, tags, params, metrics, files, table)


def format_result(r: dict[str, Any]) -> str:
    m = r["metrics"]
    lines = [f"{r['model']} on {r['task']} (v{r['task_version']}, {r['num_problems']} problems, n={r['n']}):"]
    for k in sorted({1, *r["ks"]}):
        lines.append(f"  pass@{k:<3} {m[f'pass_at_{k}']:.4f} +/- {m[f'pass_at_{k}_se']:.4f} (SE over problems)")
    lines.append(f"  strict avg@{r['n']} {m['pass_at_1']:.4f}   flexible avg@{r['n']} {m['flexible_avg_at_n']:.4f}")
    lines.append(
        f"  mean length {m['mean_length']:.1f} tokens, truncated {m['truncated_frac']:.3f}, "
        f"tokens/correct {m['tokens_per_correct']:.1f}, {m['wall_s']:.1f} s"
    )
    lines.append(f"  MLflow run {r['mlflow_run_id']}")
    return "\n".join(lines)
