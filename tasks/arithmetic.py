"""Procedurally generated multi-step arithmetic, the embedded default task.

A problem chains ``num_operands`` integers in [low, high] with + and - (uniformly chosen),
rejecting problems whose running result goes negative, e.g. ``63-11+48``. The reference solution
is a short scratchpad ending in the boxed answer, ``63-11=52,52+48=100,\\boxed{100}``, which the
supervised warm-start imitates. The eval split is ``eval_size`` distinct problems drawn with
``seed``; the train split never contains them. Grading is math-verify's (tasks.grading.math_grader), the
same verifier that grades GSM8K and MATH. The scratchpad is deterministic, so a wrong answer's
blame (``Outcome.blame``) is where its completion first departs from the reference solution
(with the compact template, whose completions imitate it; none with the free-form instruct one).
"""

from __future__ import annotations

import dataclasses
import random
from dataclasses import dataclass
from typing import Any

from bench.core import Outcome, Task, TaskConfig, check
from bench.errors import CreditBenchError
from bench.registry import TASKS
from tasks.grading.math_grader import MathGrader
from tasks.prompts import chat_prompt
from tasks.synthetic import first_departure

TEMPLATES = {
    # Short, for character-level tiny models: every prompt character costs compute.
    "compact": "{question}; \\boxed{{}}:",
    "instruct": "{question}\nPlease reason step by step, and put your final answer within \\boxed{{}}.",
}


@dataclass(frozen=True)
class ArithmeticConfig(TaskConfig):
    num_operands: int = 3
    """How many integers the expression chains (2 => one step)."""
    low: int = 10
    """Smallest operand."""
    high: int = 99
    """Largest operand."""
    eval_size: int = 200
    """Distinct problems in the eval split."""
    train_size: int = 200_000
    """Problems in the train split (disjoint from eval): enough that the warm-start sees each
    problem about once, so it learns the procedure rather than memorising problems."""
    seed: int = 1234
    """Seed that fixes both splits."""

    def __post_init__(self) -> None:
        check(self.template in TEMPLATES, f"unknown template {self.template!r}; valid: {', '.join(TEMPLATES)}")
        check(self.num_operands >= 2, f"num_operands must be >= 2, got {self.num_operands}")
        check(0 <= self.low <= self.high, f"need 0 <= low <= high, got low={self.low}, high={self.high}")
        check(self.eval_size >= 1 and self.train_size >= 1, "eval_size and train_size must be >= 1")


def make_problem(rng: random.Random, cfg: ArithmeticConfig) -> dict[str, Any]:
    while True:
        nums = [rng.randint(cfg.low, cfg.high) for _ in range(cfg.num_operands)]
        ops = [rng.choice("+-") for _ in range(cfg.num_operands - 1)]
        value, steps = nums[0], []
        for op, x in zip(ops, nums[1:]):
            new = value + x if op == "+" else value - x
            steps.append(f"{value}{op}{x}={new}")
            value = new
            if value < 0:
                break
        if value >= 0:
            question = str(nums[0]) + "".join(op + str(x) for op, x in zip(ops, nums[1:]))
            solution = ",".join(steps) + f",\\boxed{{{value}}}"
            return {"id": question, "question": question, "answer": str(value), "solution": solution}


def _to_dataset(rows: list[dict]):
    import datasets

    return datasets.Dataset.from_dict({k: [r[k] for r in rows] for k in rows[0]})


@TASKS.register("arithmetic")
class Arithmetic(Task):
    Config = ArithmeticConfig
    VERSION = "1"
    description = "multi-step +/- arithmetic on 2-digit integers with a scratchpad, graded by math-verify"

    def __init__(self, config: ArithmeticConfig | None = None):
        super().__init__(config)
        self.grader = MathGrader()

    def load(self, split: str):
        cfg = self.config
        rng = random.Random(cfg.seed)
        eval_rows: dict[str, dict] = {}
        for _ in range(100 * cfg.eval_size):
            if len(eval_rows) == cfg.eval_size:
                break
            row = make_problem(rng, cfg)
            eval_rows.setdefault(row["id"], row)
        if split == "eval":
            return _to_dataset(list(eval_rows.values()))
        if split == "train":
            train, misses = [], 0
            rng = random.Random(cfg.seed + 1)
            while len(train) < cfg.train_size:
                row = make_problem(rng, cfg)
                if row["id"] not in eval_rows:
                    train.append(row)
                    misses = 0
                elif (misses := misses + 1) > 10_000:  # (nearly) every problem of the range is an eval problem
                    raise CreditBenchError(
                        f"task arithmetic: operands in [{cfg.low}, {cfg.high}] give too few problems outside the "
                        f"eval split ({len(eval_rows)} problems) to draw train problems from; widen low..high, "
                        "add operands or lower eval_size"
                    )
            return _to_dataset(train)
        raise CreditBenchError(f"unknown split {split!r} for task arithmetic; valid: {', '.join(self.splits)}")

    def prompt(self, row: dict[str, Any], tokenizer=None) -> str:
        text = TEMPLATES[self.config.template].format(question=row["question"])
        return chat_prompt(text, tokenizer) if self.config.template == "instruct" else text

    def reference(self, row: dict[str, Any]) -> str | None:
        """The scratchpad in the compact template; free-form reasoning has many right completions."""
        return row["solution"] if self.config.template == "compact" else None

    def verify(self, completions: list[str], rows: list[dict[str, Any]], details: bool = True) -> list[Outcome]:
        outcomes = self.grader(completions, [r["answer"] for r in rows], flexible=details)
        if self.config.template != "compact":  # free-form reasoning: no reference to depart from
            return outcomes
        return [
            o if o.correct else dataclasses.replace(o, blame=first_departure(c, r["solution"]))
            for o, c, r in zip(outcomes, completions, rows)
        ]
