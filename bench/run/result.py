"""A finished run's result: what bench.run.train writes to results/<sweep>/runs/<run>.json for a
sweep's run, and what the report (bench.report.summary) reads back. The JSON is
``dataclasses.asdict`` of :class:`RunResult`, its keys in field order."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.atomic import write_atomic
from bench.errors import CreditBenchError


@dataclass
class EvalPoint:
    """One evaluation of the policy during the run (the first one is the base policy's)."""

    step: int
    """RL steps done."""
    samples: int
    """Training completions generated until then."""
    tokens: int
    """Completion tokens generated for training until then."""
    eval: dict[str, dict[str, float]]
    """Eval task -> its metrics (pass_at_K, avg_at_N, mean_length, ...; ref_prob, the exact objective J,
    and its ref_prob_se for a task with references, bench.engine.exact; no per-problem values)."""
    per_problem: dict[str, list[int]] = field(default_factory=dict)
    """Eval task -> each problem's correct samples (out of ``RunResult.eval_n``), in the order of
    ``RunResult.problem_ids`` (results without the key: none)."""
    blame: dict[str, float] = field(default_factory=dict)
    """The method's blame alignment on the fixed probe of failed completions (bench.engine.blame:
    share, rank, rank_frac, top1, uniform_share, n); empty when the task cannot tell where an answer
    went wrong."""


@dataclass(kw_only=True)
class RunResult:
    run_name: str
    """The MLflow run's name (a sweep's run key)."""
    mlflow_run_id: str
    method: str
    """The registered method (the sweep's label for it is ``label``)."""
    task: str
    """The training task; its eval split gives ``base``, ``final`` and the report's primary rows."""
    eval_tasks: list[str] = field(default_factory=list)
    """Every task evaluated at each eval point, the training task first (results without the key:
    the training task alone)."""
    model: str
    params: int
    """Parameters of the policy."""
    lora_rank: int = 0
    seed: int
    steps: int
    """RL steps done."""
    optimizer_steps: int = 0
    """Optimizer steps taken (RL steps x PPO epochs x minibatches, less the skipped updates; results
    without the key: 0)."""
    samples: int
    """Training completions generated."""
    tokens: int
    """Completion tokens generated for training (and for a method's own use: ``extra_samples``)."""
    base_eval_reused: bool = False
    """Whether the step-0 eval was a stored one (``eval.reuse_base``): it cost this run nothing."""
    extra_samples: int = 0
    """Completions the method generated for its own use and only verified (IBPO's revisions): their
    tokens are in ``tokens``, they are not in ``samples`` (the sample budget counts what trains)."""
    wall_s: float
    """Seconds of training and evaluation (over every attempt of a resumed run)."""
    tags: dict[str, str] = field(default_factory=dict)
    """The run config's extra MLflow tags (a sweep's run key, label, config hash and budget)."""
    budget: dict[str, int]
    """The run's budget: ``{samples: N, tokens: M}``, 0 where there is none."""
    base: dict[str, float]
    """The base policy's metrics on the training task."""
    final: dict[str, float]
    """The trained policy's metrics on the training task."""
    delta_pass_at_1: dict[str, float]
    """final - base pass@1 of the training task: its mean ``delta``, paired standard error ``se`` and ``z``."""
    history: list[EvalPoint]
    credit_probe: dict[str, Any] | None = None  # the run's credit map (bench.engine.credit_map; the key on disk)
    """The method's credit on one fixed completion (bench.engine.diagnostics), or None."""
    train: dict[str, float] = field(default_factory=dict)
    """Means over the RL steps of the training statistics bench.engine.module.TRAIN_SUMMARY names
    (train_reward and the credit diagnostics credit_gini, credit_effective_token_ratio,
    credit_nonzero_frac, credit_mass_early/middle/late) and those the method declares
    (``Method.summary``: ARCA's train_weight_gini, train_weight_effective_n_ratio), "/" written "_";
    and train_grad_norm_max (the largest gradient norm) and train_skipped_updates."""
    eval_n: int = 0
    """Samples per eval problem (0 in results without per-problem counts)."""
    problem_ids: dict[str, list[str]] = field(default_factory=dict)
    """Eval task -> its problems' ids, in eval-split order (the order of ``EvalPoint.per_problem``)."""
    fingerprint: dict[str, Any] = field(default_factory=dict)
    """The process's numerics stack and machine (bench.environment.fingerprint); results without the key: {}."""
    base_checkpoint: dict[str, Any] = field(default_factory=dict)
    """The base policy it started from: the warm-start's cache key and weights digest (a tiny
    model's), or {} for a named checkpoint."""
    blame: dict[str, float] = field(default_factory=dict)
    """The base policy's blame alignment (the first eval point's ``blame``): with the policy the
    same for every method, the cleanest comparison of where methods put their credit."""

    def __post_init__(self) -> None:
        self.history = [h if isinstance(h, EvalPoint) else EvalPoint(**h) for h in self.history]
        self.eval_tasks = self.eval_tasks or [self.task]

    @property
    def label(self) -> str:
        """The method's label in a sweep (its ``label`` tag), else the method's name."""
        return self.tags.get("label") or self.method

    @classmethod
    def from_history(cls, history: list[dict[str, Any]], task: str, **fields: Any) -> RunResult:
        """The result of a run whose module evaluated ``history`` (bench.engine.module's eval
        history: its per-problem pass@1 gives the paired delta of ``task``, the training task; it and
        the per-problem reference probabilities are left out of the JSON; the per-problem correct
        counts are kept, with the problem ids and samples per problem of the last point)."""

        def summary(metrics: dict[str, Any]) -> dict[str, float]:
            return {k: v for k, v in metrics.items() if not k.startswith("per_problem_")}

        base, final = history[0]["eval"][task], history[-1]["eval"][task]
        points = [
            EvalPoint(
                h["step"],
                h["samples"],
                h["tokens"],
                {t: summary(m) for t, m in h["eval"].items()},
                per_problem={t: [int(c) for c in cs] for t, cs in h.get("per_problem", {}).items()},
                blame=dict(h.get("blame", {})),
            )
            for h in history
        ]
        delta = paired_delta(base["per_problem_pass_at_1"], final["per_problem_pass_at_1"])
        return cls(
            task=task,
            base=summary(base),
            final=summary(final),
            delta_pass_at_1=delta,
            history=points,
            eval_n=int(history[-1].get("eval_n", 0)),
            problem_ids={t: list(ids) for t, ids in history[-1].get("problem_ids", {}).items()},
            blame=dict(history[0].get("blame", {})),
            **fields,
        )

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def write(self, path: Path) -> None:
        """Write the result JSON atomically (a reader never sees half a file). Lists of numbers and
        of ids (per-problem counts, problem ids) stay on one line each."""
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(path, compact_json(self.to_dict()))

    @classmethod
    def load(cls, path: Path) -> RunResult:
        """The result at ``path``; a missing, truncated or foreign file is a one-line error naming it."""
        redo = "delete it and run the sweep again to redo that run"
        try:
            data = json.loads(path.read_text())
        except OSError as e:
            raise CreditBenchError(f"cannot read run result {path}: {e.strerror or e}") from None
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            raise CreditBenchError(f"run result {path} is not valid JSON ({e}); {redo}") from None
        try:
            return cls(**data)
        except TypeError as e:  # a key missing or unknown: not a result this version writes
            raise CreditBenchError(f"run result {path} is not a run's result ({e}); {redo}") from None


def compact_json(data: Any, indent: int = 2) -> str:
    """``json.dumps(data, indent=indent)`` with every list of scalars on one line: a result holds a
    count per eval problem at every eval point, one line each rather than one line per number."""
    marks: dict[str, str] = {}

    def mark(x: Any) -> Any:
        if isinstance(x, dict):
            return {k: mark(v) for k, v in x.items()}
        if isinstance(x, list):
            if x and all(isinstance(v, int | float | str | bool) or v is None for v in x):
                key = f"@@{len(marks)}@@"
                marks[key] = json.dumps(x)
                return key
            return [mark(v) for v in x]
        return x

    text = json.dumps(mark(data), indent=indent)
    for key, value in marks.items():
        text = text.replace(f'"{key}"', value, 1)
    return text


def paired_delta(before: list[float], after: list[float]) -> dict[str, float]:
    """Mean per-problem change of pass@1 and its paired standard error (same problems before and
    after, so the per-problem difference's spread is the right noise estimate)."""
    import numpy as np

    from bench.engine.metrics import standard_error

    d = np.asarray(after) - np.asarray(before)
    se = standard_error(d)
    return {"delta": float(d.mean()), "se": se, "z": float(d.mean() / se) if se > 0 else float("nan")}


def runs_dir(results_dir: str | Path, sweep: str) -> Path:
    """Where a sweep's finished runs keep their result JSONs: results/<sweep>/runs/."""
    return Path(results_dir) / sweep / "runs"


def result_path(results_dir: str | Path, sweep: str, key: str) -> Path:
    """Where the result JSON of the sweep's run ``key`` goes: results/<sweep>/runs/<key>.json."""
    return runs_dir(results_dir, sweep) / f"{key}.json"


def load_runs(results_dir: str, sweep: str, keys: list[str] | None = None) -> list[RunResult]:
    """The finished runs of a sweep (those of ``keys`` only, when given) from results/<sweep>/runs/."""
    folder = runs_dir(results_dir, sweep)
    paths = [result_path(results_dir, sweep, k) for k in keys] if keys is not None else sorted(folder.glob("*.json"))
    runs = [RunResult.load(p) for p in paths if p.is_file()]
    if not runs:
        root = Path(results_dir)
        have = sorted({q.parent.parent.name for q in root.glob("*/runs/*.json")}) if root.is_dir() else []
        hint = f" (sweeps with finished runs in {results_dir}: {', '.join(have)})" if have else ""
        raise CreditBenchError(f"no finished runs under {folder}; run the sweep first{hint}")
    return runs
