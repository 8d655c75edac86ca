"""Evaluation metrics: the unbiased pass@k estimator (Chen et al. 2021), its torchmetrics
Metric with standard errors over problems, MLflow-safe metric names, and the numbers one eval set
reports (:func:`eval_summary`, the same for a training run's evals and ``creditbench eval``)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import Tensor
from torchmetrics import Metric

from bench.config import EvalConfig
from bench.core import RolloutBatch
from bench.distributed import gather_objects
from bench.stats.paired import summarize


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k for one problem with ``n`` samples of which ``c`` are correct:
    1 - C(n-c, k) / C(n, k), in the stable product form of openai/human-eval."""
    if not 0 <= c <= n or not 1 <= k <= n:
        raise ValueError(f"pass@k needs 0 <= c <= n and 1 <= k <= n, got n={n}, c={c}, k={k}")
    if n - c < k:
        return 1.0
    return float(1.0 - np.prod(1.0 - k / np.arange(n - c + 1, n + 1)))


def metric_key(*parts: str | int) -> str:
    """MLflow-safe, namespaced metric name: metric_key("eval", "arith", "pass@4") -> eval/arith/pass_at_4."""
    out = []
    for p in parts:
        p = str(p).replace("@", "_at_")
        out.append(re.sub(r"[^A-Za-z0-9_\-. ]", "_", p))
    return "/".join(out)


class PassAtK(Metric):
    """pass@k for several k (pass@1 always), and avg@n, with standard errors over problems.

    ``update(correct)`` takes a [P, n] bool tensor: n samples for each of P problems. ``compute``
    returns {"pass_at_{k}": mean, "pass_at_{k}_se": std/sqrt(P), "avg_at_{n}": ...} and the
    per-problem estimates stay available through :meth:`per_problem` for paired comparisons.
    """

    full_state_update = False

    def __init__(self, ks: Sequence[int], **kwargs):
        super().__init__(**kwargs)
        self.ks = sorted({1} | {int(k) for k in ks})  # pass@1 (= mean accuracy) is always reported
        self.add_state("n", default=[], dist_reduce_fx="cat")
        self.add_state("c", default=[], dist_reduce_fx="cat")

    def update(self, correct: Tensor) -> None:  # [P, n]
        correct = torch.as_tensor(correct).bool()
        if correct.ndim != 2:
            raise ValueError(f"PassAtK.update expects [problems, samples], got shape {tuple(correct.shape)}")
        self.n.append(torch.full((correct.shape[0],), correct.shape[1], dtype=torch.long))
        self.c.append(correct.sum(-1).long())

    def num_correct(self) -> int:
        """Correct completions over every problem."""
        return int(torch.cat(self.c).sum()) if self.c else 0

    def correct_counts(self) -> list[int]:
        """Each problem's correct samples, in update order."""
        return torch.cat(self.c).tolist() if self.c else []

    def per_problem(self) -> dict[int, np.ndarray]:
        n = torch.cat(self.n).tolist() if self.n else []
        c = torch.cat(self.c).tolist() if self.c else []
        return {k: np.array([pass_at_k(ni, ci, k) for ni, ci in zip(n, c)]) for k in self.ks}

    def compute(self) -> dict[str, float]:
        n = torch.cat(self.n) if self.n else torch.zeros(0, dtype=torch.long)
        if len(n) == 0:
            return {}
        if int(n.min()) < max(self.ks):
            raise ValueError(
                f"pass@{max(self.ks)} needs at least {max(self.ks)} samples per problem, got {int(n.min())}"
            )
        out = {}
        for k, vals in self.per_problem().items():
            out[f"pass_at_{k}"] = float(vals.mean())
            out[f"pass_at_{k}_se"] = standard_error(vals)
        c = torch.cat(self.c).float()
        if bool((n == n[0]).all()):
            out[f"avg_at_{int(n[0])}"] = float((c / n).mean())
        out["num_problems"] = float(len(n))
        return out


def standard_error(values: np.ndarray) -> float:
    """Standard error of the mean (sample std with Bessel's correction / sqrt(count): the plain summary of
    bench.stats.paired); NaN with fewer than 2 values."""
    values = np.asarray(values, dtype=float)
    return summarize(values).se if len(values) >= 2 else float("nan")


def eval_summary(
    metric: PassAtK, lengths: Sequence[float], truncated: Sequence[bool], flexible: Sequence[bool]
) -> dict[str, float]:
    """One eval set's numbers: ``metric``'s (updated with every problem), then the mean completion
    length, the truncated fraction, the flexible extraction's accuracy beside the strict one
    (``pass_at_1``) and the completion tokens spent per correct answer (nan when none is correct).
    ``lengths``, ``truncated`` and ``flexible`` have one entry per completion."""
    res = metric.compute()
    lengths = np.asarray(lengths, dtype=float)
    n_correct = metric.num_correct()
    res["mean_length"] = float(lengths.mean())
    res["truncated_frac"] = float(np.mean(truncated))
    res["flexible_avg_at_n"] = float(np.mean(flexible))
    res["tokens_per_correct"] = float(lengths.sum() / n_correct) if n_correct > 0 else float("nan")
    return res


@dataclass
class EvalResult:
    """One eval set's results: :func:`eval_summary`'s numbers, each problem's pass@1, and the logged
    completions (one per problem, in order); each problem's id and correct samples (out of n), in
    order; each problem's probability of its reference completion (bench.engine.exact; empty for a
    task without references), in order."""

    summary: dict[str, float]
    per_problem_pass_at_1: list[float]
    samples: list[dict[str, Any]]
    ids: list[str] = field(default_factory=list)
    correct: list[int] = field(default_factory=list)
    ref_probs: list[float] = field(default_factory=list)

    def entry(self) -> dict[str, Any]:
        """The eval set's part of an eval point's history entry: the summary and the per-problem values
        (which bench.run.result keeps out of the run's JSON)."""
        per_problem = {"per_problem_pass_at_1": self.per_problem_pass_at_1}
        if self.ref_probs:
            per_problem["per_problem_ref_prob"] = self.ref_probs
        return {**self.summary, **per_problem}


def per_problem_table(problem_ids: dict[str, list[str]], correct: dict[str, list[int]], n: int) -> dict[str, list]:
    """One row per eval problem of every eval set: its task, id and correct samples out of ``n``."""
    tasks = [t for t, ids in problem_ids.items() for _ in ids]
    return {
        "task": tasks,
        "id": [i for ids in problem_ids.values() for i in ids],
        "correct": [c for cs in correct.values() for c in cs],
        "n": [n] * len(tasks),
    }


class EvalEpoch:
    """What one eval pass saw of each eval set (``names``): each problem's n verdicts and probability
    of its reference completion (where the task has one), each completion's length, truncation and
    flexible verdict, and one completion per problem for a table (``samples_to_log`` in all). With
    W processes each holds its contiguous chunk of every set, which :meth:`results` gathers back in
    rank order, so every process gets the whole sets' results."""

    def __init__(self, names: list[str], cfg: EvalConfig, samples_to_log: int):
        self.n, self.samples_to_log, self.greedy = cfg.n, samples_to_log, cfg.greedy
        self.metrics = {name: PassAtK(cfg.k, sync_on_compute=False) for name in names}
        self.seen: dict[str, dict[str, list]] = {}

    def start(self) -> None:
        for metric in self.metrics.values():
            metric.reset()
        self.seen = {
            name: {k: [] for k in ("ids", "correct", "ref_probs", "lengths", "truncated", "flex", "samples", "greedy")}
            for name in self.metrics
        }

    def add(
        self, name: str, rows: list[dict], batch: RolloutBatch, info: list[dict], *, ref_probs: list[float]
    ) -> None:
        """``batch``: n completions of each of ``rows`` (grouped), ``info`` the verifier's details of
        each, ``ref_probs`` each row's p(reference | prompt) ([] where the task has no references)."""
        n, seen = self.n, self.seen[name]
        seen["ids"].extend(str(r.get("id", "")) for r in rows)
        seen["correct"].append(batch.correct.view(len(rows), n).cpu())  # [problems, n]
        seen["ref_probs"].extend(ref_probs)
        seen["lengths"].extend(batch.lengths.tolist())
        seen["truncated"].extend(batch.truncated.tolist())
        seen["flex"].extend(bool(i["correct_flexible"]) for i in info)
        if len(seen["samples"]) < self.samples_to_log:
            for j in range(0, batch.size, n):  # one completion per problem
                seen["samples"].append(
                    {
                        "prompt": batch.prompts[j],
                        "completion": batch.completions[j],
                        "parsed": info[j]["parsed"],
                        "reward": float(batch.rewards[j]),
                        "answer": rows[j // n]["answer"],
                    }
                )

    def add_greedy(self, name: str, batch: RolloutBatch) -> None:
        """One greedy completion of each problem (in order)."""
        self.seen[name]["greedy"].extend(batch.correct.tolist())

    def results(self) -> dict[str, EvalResult]:
        """Every eval set's results, from every process's chunk (a collective call under DDP)."""
        parts = gather_objects(self.seen)
        out = {}
        for name, metric in self.metrics.items():
            seen = {k: [x for part in parts for x in part[name][k]] for k in self.seen[name]}
            for correct in seen["correct"]:
                metric.update(correct)
            summary = eval_summary(metric, seen["lengths"], seen["truncated"], seen["flex"])
            if self.greedy:
                summary["greedy"] = float(np.mean(seen["greedy"])) if seen["greedy"] else float("nan")
            ref_probs = seen["ref_probs"] if len(seen["ref_probs"]) == len(seen["ids"]) else []  # J: every problem's
            if ref_probs:
                summary["ref_prob"] = float(np.mean(ref_probs))  # J = 1/N sum_i p(r_i | x_i)
                summary["ref_prob_se"] = standard_error(ref_probs)
            out[name] = EvalResult(
                summary,
                metric.per_problem()[1].tolist(),
                seen["samples"][: self.samples_to_log],
                seen["ids"],
                metric.correct_counts(),
                ref_probs,
            )
        return out
