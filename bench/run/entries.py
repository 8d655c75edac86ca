"""The entries of a sweep spec's lists (bench.run.spec): a method, a model, and the budget every run
spends."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

from jsonargparse.typing import PositiveInt

from bench.core import check

Control = Literal["twin", "placebo"]
"""A credit control of a credit method: its credit-off twin, its placebo (bench.engine.placebo)."""


@dataclass
class MethodEntry:
    name: str
    """A registered method (see `creditbench methods`), or `all`."""
    label: str | None = None
    """The entry's name in run keys and the report (default: the method's name); one per entry."""
    options: dict[str, Any] = field(default_factory=dict)
    """Overrides of the method's config fields."""
    overrides: dict[str, Any] = field(default_factory=dict)
    """Dotted run config settings for this entry's runs (over method_overrides)."""
    placebo: bool = False
    """Train the method's placebo (its per-token credit permuted within each completion)."""
    credit_controls: list[Control] | None = None
    """This entry's credit controls instead of the spec's ``credit_controls`` ([] for none)."""


@dataclass
class ModelEntry:
    name: str
    """A tiny size, a local directory or a Hugging Face Hub id."""
    overrides: dict[str, Any] = field(default_factory=dict)
    """Dotted run config settings for this model's runs (e.g. more GPUs for the largest model)."""


@dataclass
class Budget:
    """What every run of the sweep may spend: methods are compared at the same budget."""

    FORM: ClassVar[str] = "one of {samples: N} or {tokens: N} (a matched budget per run, not steps)"
    samples: PositiveInt | None = None
    """Training completions generated per run."""
    tokens: PositiveInt | None = None
    """Completion tokens generated for training per run."""

    def __post_init__(self) -> None:
        check((self.samples is None) != (self.tokens is None), f"budget must be {self.FORM}, got {self.as_dict()}")

    def as_dict(self) -> dict[str, int]:
        """``{samples: N}`` or ``{tokens: N}``, as the spec gives it (and the report records it)."""
        return {k: int(v) for k, v in (("samples", self.samples), ("tokens", self.tokens)) if v is not None}
