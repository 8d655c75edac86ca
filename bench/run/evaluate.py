"""``creditbench eval``: evaluate any checkpoint on any task, the way a user checks a paper's
released model before comparing against it.

    creditbench eval --model PATH_OR_HUB_ID --task math500 [--n 16 --k 1,4,16]
                     [--temperature 0.6 --top_p 0.95 --max_new_tokens 3072] [--num_problems N]
                     [--template qwen-math] [--data_dir DIR] [--allow_code_execution]

It samples ``n`` completions per problem with the HF engine, grades them with the task's
verifier, and reports unbiased pass@k with standard errors over problems (the same PassAtK metric
training uses), the flexible-extraction accuracy beside the strict one, mean length, the truncated
fraction and tokens per correct answer. Everything goes to stdout and to one MLflow run (tag
``kind=eval``) with a per-problem JSON and a table of completions.
"""

from __future__ import annotations

import argparse
import json
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from bench.core import check
from bench.errors import CreditBenchError
from bench.options import build_config
from bench.run.args import first_line
from bench.tracking.tracking import default_uri

MODELS = (
    "a saved model directory, the MLflow run id of a training run (its saved policy), or a Hugging Face "
    "Hub id (with HF_HUB_OFFLINE set: one in the local Hub cache)"
)
"""What ``--model`` takes, for its errors (a tiny size is not a checkpoint: eval refuses it)."""


def parser() -> argparse.ArgumentParser:
    from bench.run.args import ArgumentParser

    p = ArgumentParser(prog="creditbench eval", description="Evaluate a checkpoint on a task (pass@k).")
    p.add_argument(
        "--model",
        required=True,
        help="a saved model directory, a Hugging Face Hub id, or the MLflow run id of a training run "
        "(its saved policy; the run's own task, options and eval settings are then the defaults)",
    )
    p.add_argument("--task", default=None, help="a registered task (see `creditbench tasks`)")
    p.add_argument("--n", type=int, default=None, help=f"samples per problem (default {DEFAULTS['n']})")
    p.add_argument("--k", default=None, help=f"comma-separated k for pass@k, each <= n (default {DEFAULTS['k']})")
    p.add_argument("--num_problems", type=int, default=None, help="evaluate the first N problems (default 0: all)")
    p.add_argument("--split", default="eval", help="task split (default eval)")
    p.add_argument("--temperature", type=float, default=None, help=f"(default {DEFAULTS['temperature']})")
    p.add_argument("--top_p", type=float, default=None, help=f"(default {DEFAULTS['top_p']})")
    p.add_argument("--max_new_tokens", type=int, default=None, help=f"(default {DEFAULTS['max_new_tokens']})")
    p.add_argument("--batch_size", type=int, default=64, help="sequences per generate call")
    p.add_argument("--template", default=None, help="the task's prompt template (default: the task's own)")
    p.add_argument(
        "--data_dir",
        default=None,
        help="local directory with the upstream data files (default $CREDITBENCH_DATA, else the Hub)",
    )
    p.add_argument(
        "--task_option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="any other task option (value parsed as JSON when it can be)",
    )
    p.add_argument(
        "--allow_code_execution",
        action="store_true",
        help="run model-written programs in the sandbox (required by code tasks)",
    )
    p.add_argument(
        "--dtype",
        default="auto",
        choices=["auto", "float32", "bfloat16", "float16"],
        help="weights dtype (auto: bfloat16 on GPU, float32 on CPU)",
    )
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--uri", default=default_uri())
    p.add_argument("--experiment", default="creditbench-eval")
    p.add_argument("--run_name", default=None)
    p.add_argument("--samples_to_log", type=int, default=32, help="completions logged as an MLflow table")
    p.add_argument("--out", default=None, help="also write the result JSON here")
    return p


DEFAULTS = {"n": 16, "k": "1,4,16", "num_problems": 0, "temperature": 0.6, "top_p": 0.95, "max_new_tokens": 3072}
"""The eval settings of a model that is not a training run's (whose own settings are the defaults)."""


def settings(a: argparse.Namespace, cfg=None) -> list[int]:
    """Fill the settings ``a`` leaves unset -- from the training run's config ``cfg`` (its task and
    task options, and its eval's n, k, problems and sampling), else :data:`DEFAULTS` -- and check
    them; the k of pass@k, sorted."""
    _defaults(a, cfg)
    try:
        ks = sorted({int(k) for k in a.k.split(",") if k.strip()})
    except ValueError:
        raise CreditBenchError(f"--k must be comma-separated integers, got {a.k!r}") from None
    check(a.n >= 1, f"--n must be >= 1, got {a.n}")
    check(
        bool(ks) and all(1 <= k <= a.n for k in ks), f"--k values must lie in [1, n={a.n}] (unbiased pass@k), got {a.k}"
    )
    check(
        a.num_problems >= 0 and a.batch_size >= 1 and a.max_new_tokens >= 1,
        "--num_problems must be >= 0, --batch_size and --max_new_tokens >= 1",
    )
    return ks


def _defaults(a: argparse.Namespace, cfg) -> None:
    a.top_k, a.run_task_options = 0, {}
    if cfg is not None:
        s = cfg.eval.sampling
        own = {"n": cfg.eval.n, "k": ",".join(map(str, cfg.eval.k)), "num_problems": cfg.eval.num_problems}
        own |= {"temperature": s.temperature, "top_p": s.top_p, "max_new_tokens": s.max_new_tokens}
        for key, value in own.items():
            if getattr(a, key) is None:
                setattr(a, key, value)
        a.task = a.task or cfg.task.name
        if a.task == cfg.task.name:  # the run's task: its options, under any --task_option given
            a.run_task_options, a.top_k = dict(cfg.task.options), s.top_k
    for key, value in DEFAULTS.items():
        if getattr(a, key) is None:
            setattr(a, key, value)
    check(a.task is not None, "--task is required (unless --model is a training run's id: then its task)")


def _task_options(a: argparse.Namespace) -> dict[str, Any]:
    options: dict[str, Any] = dict(getattr(a, "run_task_options", {}))
    for item in a.task_option:
        if "=" not in item:
            raise CreditBenchError(f"--task_option expects KEY=VALUE, got {item!r}")
        key, value = item.split("=", 1)
        try:
            options[key] = json.loads(value)
        except json.JSONDecodeError:
            options[key] = value
    if a.template is not None:
        options["template"] = a.template
    if a.data_dir is not None:
        options["data_dir"] = a.data_dir
    return options


def main(argv: list[str]) -> int:
    from bench.core import code_execution_allowed, code_execution_refused
    from bench.registry import TASKS

    a = parser().parse_args(argv)
    training = None  # the training run whose policy this is
    if re.fullmatch(r"[0-9a-f]{32}", a.model) and not Path(a.model).exists():  # an MLflow run id
        training = training_run(a.model, a.uri)
    ks = settings(a, training.cfg if training else None)
    task_cls = TASKS.get(a.task)
    task = task_cls(build_config(task_cls.Config, _task_options(a), f"task {a.task!r}"))
    if a.split not in task.splits:
        raise CreditBenchError(f"task {a.task!r} has no {a.split!r} split; valid: {', '.join(task.splits)}")
    if task.executes_code:
        if not code_execution_allowed(a.allow_code_execution):
            raise CreditBenchError(code_execution_refused(a.task))
        task.allow_code_execution()
    from bench.models.policy import TINY_SIZES

    if a.model in TINY_SIZES:
        raise CreditBenchError(
            f"--model {a.model!r} is a size, not a checkpoint: give {MODELS} "
            "(e.g. a base checkpoint under .creditbench/cache)"
        )
    if training is not None:
        a.model = run_policy(training, a.uri)
    if a.model.startswith(("/", "./", "../", "~")) and not Path(a.model).expanduser().is_dir():
        raise CreditBenchError(f"model directory {a.model!r} does not exist (give {MODELS})")
    from bench.models.pretrained import resolve

    a.model = str(resolve(a.model))  # a fetched pretrained model's short name: its cached copy
    _check_offline_hub_id(a.model)
    from bench.tracking.tracking import check_tracking_uri

    check_tracking_uri(a.uri, write=True)  # before the sampling: an unusable store would otherwise fail only at the end
    rows = task.load(a.split)  # before the model: a missing data file fails fast
    if a.num_problems:
        rows = rows.select(range(min(a.num_problems, len(rows))))
    result = evaluate(a, task, rows, ks, training)
    print(format_result(result))
    if a.out:
        Path(a.out).parent.mkdir(parents=True, exist_ok=True)
        Path(a.out).write_text(json.dumps(result, indent=2))
    return 0


def _check_offline_hub_id(model: str) -> None:
    """Offline (HF_HUB_OFFLINE), a Hub id must be in the local cache: refused here, before the data,
    the tracking store and the sampling, rather than when its weights fail to load."""
    from huggingface_hub import constants, try_to_load_from_cache

    if not constants.HF_HUB_OFFLINE or Path(model).expanduser().is_dir():
        return
    try:
        cached = try_to_load_from_cache(model, "config.json")
    except ValueError:  # not a valid repo id (huggingface_hub's HFValidationError)
        raise CreditBenchError(f"--model {model!r} is neither a directory nor a Hub id: give {MODELS}") from None
    if not isinstance(cached, str):
        raise CreditBenchError(
            f"--model {model!r} is not in the local Hugging Face cache and the Hub is offline (HF_HUB_OFFLINE): "
            f"give {MODELS}"
        )


@dataclass
class TrainingRun:
    """A training run whose saved policy is evaluated: its id, name and config (None when the run
    logged none)."""

    run_id: str
    name: str
    cfg: Any
    policy_dir: str | None = None  # where the run saved its policy on this machine (tag policy_dir)


def training_run(run_id: str, uri: str) -> TrainingRun:
    """The training run ``run_id`` of the store at ``uri``, with the run config it logged (config.yaml)."""
    import tempfile

    import yaml

    from bench.run.args import run_config
    from bench.tracking.tracking import check_tracking_uri, client

    check_tracking_uri(uri)
    c = client(uri)
    try:
        run = c.get_run(run_id)
    except Exception as e:  # mlflow: no such run in this store
        raise CreditBenchError(f"--model {run_id}: no MLflow run with that id in {uri} ({first_line(e)})") from None
    cfg = None
    with tempfile.TemporaryDirectory() as tmp:
        try:
            text = Path(c.download_artifacts(run_id, "config.yaml", tmp)).read_text()
        except Exception:  # a run logged without its config: the flags and DEFAULTS decide
            text = None
        if text is not None:
            cfg = run_config(yaml.safe_load(text), f"--model {run_id}: its config.yaml")
    return TrainingRun(run_id, run.info.run_name, cfg, run.data.tags.get("policy_dir"))


def run_policy(training: TrainingRun, uri: str) -> str:
    """The policy a training run saved: its ``policy_dir`` where that still exists, else the run's
    ``policy/`` artifact downloaded from the tracking store."""
    import mlflow

    if training.policy_dir and Path(training.policy_dir).is_dir():
        return training.policy_dir
    try:
        return mlflow.artifacts.download_artifacts(run_id=training.run_id, artifact_path="policy", tracking_uri=uri)
    except Exception as e:
        raise CreditBenchError(
            f"--model {training.run_id}: the run saved no policy (train with checkpoint.policy: true) ({first_line(e)})"
        ) from None


def evaluate(a: argparse.Namespace, task, rows, ks: list[int], training: TrainingRun | None = None) -> dict[str, Any]:
    """pass@k of a checkpoint on ``rows``: generate, grade, log an MLflow eval run, and return the
    result with its per-problem counts."""
    import torch

    from bench.config import SamplingConfig
    from bench.engine.metrics import eval_summary
    from bench.models.policy import load_policy

    device = "cuda" if torch.cuda.is_available() else "cpu"
    dtype = a.dtype if a.dtype != "auto" else ("bfloat16" if device == "cuda" else "float32")
    sampling = SamplingConfig(
        temperature=a.temperature, top_p=a.top_p, top_k=getattr(a, "top_k", 0), max_new_tokens=a.max_new_tokens
    )
    t0 = time.perf_counter()
    model, tokenizer = load_policy(a.model, dtype, accepts=MODELS)
    model.to(device).eval()
    torch.manual_seed(a.seed)
    graded = _generate_and_grade(a, task, rows, ks, model, tokenizer, sampling)
    res = eval_summary(graded.metric, graded.lengths, graded.truncated, graded.flex)  # as a training run's evals
    res["wall_s"] = time.perf_counter() - t0
    name = f"runs:/{training.run_id}/policy" if training else a.model  # a training run's policy: named by the run
    run_id = _log_eval(a, task, rows, training, name, res, graded, {"dtype": dtype, "device": device})
    return {
        "model": name,
        "task": a.task,
        "task_version": task.VERSION,
        "split": a.split,
        "n": a.n,
        "ks": ks,
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


def _generate_and_grade(a: argparse.Namespace, task, rows, ks: list[int], model, tokenizer, sampling) -> _Graded:
    """``a.n`` completions of every problem, in batches of ``a.batch_size`` completions, graded."""
    import torch

    from bench.engine.metrics import PassAtK
    from bench.engine.progress import counter
    from bench.engine.rollout import HFRolloutEngine

    engine = HFRolloutEngine(model, tokenizer)
    g = _Graded(PassAtK(ks))
    step = max(1, a.batch_size // a.n)  # problems per generate call
    shown = counter(f"eval {a.task}", len(rows), "problem")  # stderr: a bar on a terminal, else lines
    shown.update(0)
    for start in range(0, len(rows), step):
        chunk = [rows[i] for i in range(start, min(start + step, len(rows)))]
        gen = engine.generate([task.prompt(r, tokenizer) for r in chunk], a.n, sampling)
        expanded = [r for r in chunk for _ in range(a.n)]
        outcomes = task.verify(gen.texts, expanded, details=True)
        correct = torch.tensor([o.correct for o in outcomes]).view(len(chunk), a.n)
        g.metric.update(correct)
        g.lengths += gen.completion_mask.sum(-1).tolist()
        g.truncated += gen.truncated.tolist()
        g.flex += [bool(o.correct_flexible) for o in outcomes]
        for j, r in enumerate(chunk):
            g.per_problem.append({"id": r["id"], "correct": int(correct[j].sum()), "n": a.n})
            if len(g.samples) < a.samples_to_log:
                o = outcomes[j * a.n]
                text, answer = gen.texts[j * a.n], str(r["answer"])[:500]
                g.samples.append(
                    dict(id=r["id"], completion=text, parsed=o.parsed, answer=answer, correct=o.correct, error=o.error)
                )
        shown.update(len(g.per_problem), {"pass@1": g.metric.num_correct() / (len(g.per_problem) * a.n)})  # so far
    shown.close()
    return g


def _log_eval(a: argparse.Namespace, task, rows, training, model: str, res: dict, g: _Graded, where: dict) -> str:
    """The eval's MLflow run (linked to its training run, if any): tags, settings, metrics, the
    per-problem counts and the logged completions. Returns its run id."""
    from bench.engine.metrics import metric_key
    from bench.tracking.tracking import git_commit, log_eval_run

    run_name = a.run_name or f"eval-{a.task}-{training.name if training else Path(a.model.rstrip('/')).name}"
    tags = {"kind": "eval", "task": a.task, "task_version": task.VERSION, "model": model, "git_commit": git_commit()}
    if training:
        tags["training_run_id"] = training.run_id
        tags["mlflow.note.content"] = f"Evaluation of the policy of training run {training.name} ({training.run_id})."
    params = {
        "model": model,
        "task": a.task,
        "split": a.split,
        "n": a.n,
        "k": a.k,
        "num_problems": len(rows),
        "temperature": a.temperature,
        "top_p": a.top_p,
        "top_k": getattr(a, "top_k", 0),
        "max_new_tokens": a.max_new_tokens,
        "template": task.config.template,
        "dtype": where["dtype"],
        "seed": a.seed,
        "device": where["device"],
    }
    metrics = {metric_key("eval", a.task, k): v for k, v in res.items() if np.isfinite(v)}
    table = ("completions.json", {k: [s[k] for s in g.samples] for k in g.samples[0]}) if g.samples else None
    files = {"per_problem.json": {"per_problem": g.per_problem}}
    return log_eval_run(a.uri, a.experiment, run_name, tags, params, metrics, files, table)


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
