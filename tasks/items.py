"""K independent small items answered together and graded all-or-nothing (or per item).

A problem is ``items`` one-digit sums, e.g. ``3+4,5+8,2+2``; the answer is each sum mod 10, in
order, comma-separated and boxed: ``\\boxed{7,3,4}``. The items do not depend on each other, so a
failed completion is usually wrong in one item while the others are right: an all-or-nothing reward
gives every token of it the same blame, and the first wrong item's first character is where it went
wrong. ``reward: per_item`` pays the fraction of items right instead (``correct`` still needs all of
them): the contrast variant, where the reward itself assigns credit to items.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

from bench.core import check
from bench.registry import TASKS
from tasks.synthetic import SyntheticConfig, SyntheticTask

MAX_ITEMS = 14  # "\boxed{" + 2 characters an item + "}" within the default RL budget of 36 new tokens
REWARDS = ("all", "per_item")


@dataclass(frozen=True)
class ItemsConfig(SyntheticConfig):
    items: int = 6
    """Independent one-digit sums per problem; the difficulty knob."""
    reward: str = "all"
    """'all': 1 only when every item is right; 'per_item': the fraction of items right (partial credit)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        check(1 <= self.items <= MAX_ITEMS, f"items must be in [1, {MAX_ITEMS}], got {self.items}")
        check(self.reward in REWARDS, f"unknown reward {self.reward!r}; valid: {', '.join(REWARDS)}")


@TASKS.register("items")
class Items(SyntheticTask):
    Config = ItemsConfig
    VERSION = "1"
    description = "independent one-digit sums mod 10 answered together, all-or-nothing or per-item reward"
    instruction = "Give each sum mod 10, in order and separated by commas, within \\boxed{{}}."

    def make_problem(self, rng: random.Random) -> dict[str, Any]:
        pairs = [(rng.randrange(10), rng.randrange(10)) for _ in range(self.config.items)]
        question = ",".join(f"{a}+{b}" for a, b in pairs)
        answer = ",".join(str((a + b) % 10) for a, b in pairs)
        return {"id": question, "question": question, "answer": answer, "solution": f"\\boxed{{{answer}}}"}

    def reward(self, parsed: str | None, answer: str) -> float:
        if self.config.reward == "all" or parsed is None:
            return float(parsed == answer)
        got, gold = parsed.split(","), answer.split(",")
        right = sum(g == a for g, a in zip(got, gold))
        return right / max(len(gold), len(got))  # extra items count as wrong ones
