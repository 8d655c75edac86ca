"""One early decisive choice, then a long deterministic tail that follows from it.

A problem is ``digits`` digits, e.g. ``4,7,2``. The answer starts with a choice, the sum of the
digits mod 10 (``3``), computed in one token with no scratchpad, followed by ``tail`` characters
that count on from it mod 10 (``4567...``); the whole string is boxed: ``\\boxed{34567890}``. The
tail is easy to copy once the choice is made, so nearly every failure is decided by the one token
after ``\\boxed{``, and the longer the tail the more a uniform credit dilutes the signal on it.
Graded by exact match of the last ``\\boxed{}``; blame is where the completion first departs from
the reference (usually the choice).
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

from bench.core import check
from bench.registry import TASKS
from tasks.synthetic import SyntheticConfig, SyntheticTask

MAX_TAIL = 26  # "\boxed{" + choice + tail + "}" within the default RL budget of 36 new tokens


@dataclass(frozen=True)
class DecisiveConfig(SyntheticConfig):
    tail: int = 16
    """Characters after the decisive choice; the difficulty knob for credit assignment."""
    digits: int = 3
    """Digits whose sum mod 10 is the choice (how hard the choice is)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        check(0 <= self.tail <= MAX_TAIL, f"tail must be in [0, {MAX_TAIL}], got {self.tail}")
        check(2 <= self.digits <= 8, f"digits must be in [2, 8], got {self.digits}")


@TASKS.register("decisive")
class Decisive(SyntheticTask):
    Config = DecisiveConfig
    VERSION = "1"
    description = "one decisive first token (digit sum mod 10) then a deterministic tail counting on from it"
    instruction = (
        "Write the sum of the digits mod 10, then keep counting up from it mod 10 for {tail} more digits; "
        "put the whole string within \\boxed{{}}."
    )

    def make_problem(self, rng: random.Random) -> dict[str, Any]:
        digits = [rng.randrange(10) for _ in range(self.config.digits)]
        choice = sum(digits) % 10
        answer = "".join(str((choice + i) % 10) for i in range(self.config.tail + 1))
        question = ",".join(map(str, digits))
        return {"id": question, "question": question, "answer": answer, "solution": f"\\boxed{{{answer}}}"}
