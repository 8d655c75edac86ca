"""The task contract. A task module in ``tasks/`` subclasses :class:`Task` and registers it with
``@TASKS.register(name)``; the engine only ever talks to this interface."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from bench.core import Outcome


@dataclass(frozen=True)
class TaskConfig:
    """Options every task has; subclasses add their own."""

    template: str = "compact"
    """Prompt template: 'compact' for the tiny character-level models, 'instruct' for chat/instruct models."""


class Task:
    """A dataset with a prompt format and a verifier.

    Rows of :meth:`load` have at least ``id``, ``question`` and ``answer`` (the gold answer as a
    string); tasks that support the supervised warm-start also have ``solution``.
    """

    Config: ClassVar[type[TaskConfig]] = TaskConfig
    VERSION: ClassVar[str] = "0"
    description: ClassVar[str] = ""
    splits: ClassVar[tuple[str, ...]] = ("train", "eval")

    def __init__(self, config: TaskConfig | None = None):
        self.config = config if config is not None else self.Config()

    def load(self, split: str):  # -> datasets.Dataset
        raise NotImplementedError

    def prompt(self, row: dict[str, Any], tokenizer=None) -> str:
        raise NotImplementedError

    def verify(self, completions: list[str], rows: list[dict[str, Any]], details: bool = True) -> list[Outcome]:
        """One Outcome per completion. ``details=False`` (training rollouts) may skip what only
        reports need, e.g. the flexible extraction; reward and correctness must not change."""
        raise NotImplementedError
