"""What the procedurally generated credit tasks (chain, decisive, items) share: fixed, disjoint
splits drawn from a seed, a short prompt, exact-match grading of the last ``\\boxed{...}`` and the
blame offset (where a failed completion first departs from the row's deterministic reference).

Each of these tasks has exactly one right completion, the row's ``solution``, so the first
character where a failed completion departs from it is where it went wrong: the blame that
``Outcome.blame`` carries to the engine's credit diagnostics.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

from bench.core import Outcome, Task, TaskConfig, check
from bench.errors import CreditBenchError
from tasks.prompts import chat_prompt

TEMPLATES = {
    # Short, for character-level tiny models: every prompt character costs compute.
    "compact": "{question}; \\boxed{{}}:",
    "instruct": "{question}\n{instruction}",
}
_BOXED = re.compile(r"\\boxed\{([^{}]*)\}")


@dataclass(frozen=True)
class SyntheticConfig(TaskConfig):
    eval_size: int = 200
    """Distinct problems in the eval split."""
    train_size: int = 200_000
    """Problems in the train split (disjoint from eval): the warm-start sees each about once."""
    seed: int = 1234
    """Seed that fixes both splits."""

    def __post_init__(self) -> None:
        check(self.template in TEMPLATES, f"unknown template {self.template!r}; valid: {', '.join(TEMPLATES)}")
        check(self.eval_size >= 1 and self.train_size >= 1, "eval_size and train_size must be >= 1")


def boxed(text: str) -> str | None:
    """The content of the last ``\\boxed{...}`` in ``text`` (braces inside are not allowed), or None."""
    found = _BOXED.findall(text)
    return found[-1] if found else None


def first_departure(completion: str, reference: str) -> int:
    """The offset of the first character of ``completion`` that differs from ``reference``; when
    one is a prefix of the other, the shorter one's length (a completion that stops early is
    blamed at its end, where it emitted end-of-sequence instead of the next reference character)."""
    n = min(len(completion), len(reference))
    return next((i for i in range(n) if completion[i] != reference[i]), n)


def split_rows(task: str, cfg: SyntheticConfig, make: Callable[[random.Random], dict], split: str) -> list[dict]:
    """The eval split (``eval_size`` distinct problems drawn with ``seed``) or the train split
    (``train_size`` problems drawn with ``seed + 1``, none of them an eval problem)."""
    rng = random.Random(cfg.seed)
    eval_rows: dict[str, dict] = {}
    for _ in range(100 * cfg.eval_size):
        if len(eval_rows) == cfg.eval_size:
            break
        row = make(rng)
        eval_rows.setdefault(row["id"], row)
    if split == "eval":
        return list(eval_rows.values())
    if split != "train":
        raise CreditBenchError(f"unknown split {split!r} for task {task}; valid: train, eval")
    train, misses = [], 0
    rng = random.Random(cfg.seed + 1)
    while len(train) < cfg.train_size:
        row = make(rng)
        if row["id"] not in eval_rows:
            train.append(row)
            misses = 0
        elif (misses := misses + 1) > 10_000:  # (nearly) every problem is an eval problem
            raise CreditBenchError(
                f"task {task}: too few problems outside the eval split ({len(eval_rows)} problems) to draw "
                "train problems from; make the problems larger or lower eval_size"
            )
    return train


class SyntheticTask(Task):
    """A generated task whose rows have one right completion, ``solution``, ending in
    ``\\boxed{answer}``. Subclasses set ``Config``, ``instruction`` and :meth:`make_problem`."""

    Config: ClassVar[type[TaskConfig]] = SyntheticConfig
    instruction: ClassVar[str] = ""
    """The rule in words, for the ``instruct`` template (the tiny models learn it from the warm-start);
    a format string over the config's fields, so braces are doubled."""

    def make_problem(self, rng: random.Random) -> dict[str, Any]:
        raise NotImplementedError

    def load(self, split: str):
        import datasets

        rows = split_rows(self.name, self.config, self.make_problem, split)
        return datasets.Dataset.from_dict({k: [r[k] for r in rows] for k in rows[0]})

    def prompt(self, row: dict[str, Any], tokenizer=None) -> str:
        instruction = self.instruction.format_map(vars(self.config))  # it may name the config's knobs
        text = TEMPLATES[self.config.template].format(question=row["question"], instruction=instruction)
        return chat_prompt(text, tokenizer) if self.config.template == "instruct" else text

    def reference(self, row: dict[str, Any]) -> str:
        return row["solution"]

    def reward(self, parsed: str | None, answer: str) -> float:
        """Reward of an answer; all-or-nothing unless a task offers partial credit as an option."""
        return float(parsed == answer)

    def verify(self, completions: list[str], rows: list[dict[str, Any]], details: bool = True) -> list[Outcome]:
        out = []
        for text, row in zip(completions, rows):
            parsed = boxed(text) if isinstance(text, str) else None
            correct = parsed is not None and parsed == row["answer"]
            out.append(
                Outcome(
                    reward=1.0 if correct else self.reward(parsed, row["answer"]),
                    correct=correct,
                    parsed=parsed,
                    error=None if parsed is not None else "no answer",
                    blame=None if correct else first_departure(text or "", row["solution"]),
                )
            )
        return out
