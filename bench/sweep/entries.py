"""The entries of a sweep spec (bench.sweep.spec): a method and a model (how a sweep spends its runs:
bench.sweep.schedule)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

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
