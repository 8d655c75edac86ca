"""The task contract. A task module in ``tasks/`` subclasses :class:`Task` and registers it with
``@TASKS.register(name)``; the engine only ever talks to this interface."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, ClassVar

from bench.core import Outcome

CODE_EXECUTION_ENV = "CREDITBENCH_ALLOW_CODE_EXECUTION"


def code_execution_allowed(flag: bool = False) -> bool:
    """The explicit opt-in to run model-written code: the flag, or $CREDITBENCH_ALLOW_CODE_EXECUTION=1."""
    return flag or os.environ.get(CODE_EXECUTION_ENV, "") == "1"


def code_execution_refused(task: str) -> str:
    return (f"task {task!r} runs model-written code; it only does so when you opt in with --allow-code-execution "
            f"(creditbench eval), allow_code_execution: true (run config) or {CODE_EXECUTION_ENV}=1. "
            f"Programs run in tasks/sandbox.py's sandbox, which limits but cannot guarantee containment")


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
    name: ClassVar[str] = ""
    """The registered name (set by ``TASKS.register``)."""
    VERSION: ClassVar[str] = "0"
    description: ClassVar[str] = ""
    splits: ClassVar[tuple[str, ...]] = ("train", "eval")
    executes_code: ClassVar[bool] = False
    """True for tasks whose verifier runs model-written programs: they only run after an explicit
    opt-in (``allow_code_execution`` / ``--allow-code-execution`` / $CREDITBENCH_ALLOW_CODE_EXECUTION=1)."""

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
