"""A long chain of small steps where one wrong step spoils the answer: the running sum mod 10.

A problem is ``steps`` digits joined by ``+``, e.g. ``3+5+4+9``. The reference solution writes the
running sum mod 10 after each addition, then boxes the last one: ``8,2,1,\\boxed{1}``. Every step is
easy (one digit plus one digit), but the answer is right only if every step is, so success decays
with the chain's length, and a failed completion's blame is the first wrong running sum: credit
assignment has to find one step among many. Graded by exact match of the last ``\\boxed{}``.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

from bench.core import check
from bench.registry import TASKS
from tasks.synthetic import SyntheticConfig, SyntheticTask

MAX_STEPS = 14  # 2 characters a step: the default RL budget of 36 new tokens holds the solution


@dataclass(frozen=True)
class ChainConfig(SyntheticConfig):
    steps: int = 6
    """Digits in the chain (steps - 1 additions); the difficulty knob."""

    def __post_init__(self) -> None:
        super().__post_init__()
        check(2 <= self.steps <= MAX_STEPS, f"steps must be in [2, {MAX_STEPS}], got {self.steps}")


@TASKS.register("chain")
class Chain(SyntheticTask):
    Config = ChainConfig
    VERSION = "1"
    description = "running sum mod 10 of a chain of digits, one step at a time; one wrong step spoils it"
    instruction = (
        "Add the digits left to right; after each addition write the running sum mod 10, separated by "
        "commas, then the last one within \\boxed{{}}."
    )
    step_delimiter = ","  # a step is one running sum (the boxed answer the last)

    def make_problem(self, rng: random.Random) -> dict[str, Any]:
        digits = [rng.randrange(10) for _ in range(self.config.steps)]
        sums, total = [], digits[0]
        for d in digits[1:]:
            total = (total + d) % 10
            sums.append(str(total))
        question = "+".join(map(str, digits))
        return {
            "id": question,
            "question": question,
            "answer": sums[-1],
            "solution": ",".join(sums) + f",\\boxed{{{sums[-1]}}}",
        }
