"""How a sweep spends its runs (the spec's ``budget``, ``tune`` and ``sequential`` blocks): the budget
every run spends, the learning-rate tuning before the verdict and the rounds of seeds."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

from jsonargparse.typing import PositiveInt

from bench.core import check
from bench.stats.paired import MIN_SEEDS
from bench.stats.spending import SPENDING

UNTIL = ("decided", "resolved")
"""When a design in rounds stops adding seeds to a comparison: once it is ``decided`` (a boundary crossed,
or the cap), or once it is decided or ``resolved`` (its repeated interval narrow enough; the credit
probe's ``until``, bench.report.per_update.within_target)."""


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


@dataclass
class Tune:
    """Learning rates tuned with an equal budget before the verdict (bench.sweep.tuning): every label (twins
    and placebos included) runs every grid point on the tuning seeds at the sweep's budget, is scored on
    eval problems after the verdict's, and keeps its best point for the evaluation seeds."""

    lr: list[float]
    """The rl.lr grid."""
    seeds: list[int]
    """Tuning seeds, disjoint from the sweep's seeds: no verdict sees a run that chose its settings."""
    knobs: dict[str, dict[str, list[Any]]] = field(default_factory=dict)
    """Method name -> {option: values}: at most one declared knob per method, tuned with the lr."""
    pairs: bool = False
    """Each credit method and its credit controls share one learning rate: the grid point where the mean
    of the method and its twin is best on the tuning seeds (the placebo takes it and runs no tuning of
    its own). The comparison with the twin is then made at one rate, where a shared seed keeps the two
    runs alike, and the tuning runs give it at every other rate of the grid too (the report's
    sensitivity row). Labels outside a pair are tuned each on its own."""

    def __post_init__(self) -> None:
        check(len(self.lr) > 0 and all(x > 0 for x in self.lr), f"tune.lr must list learning rates > 0, got {self.lr}")
        check(len(self.seeds) > 0, "tune.seeds must list at least one tuning seed")
        check(
            not (self.pairs and self.knobs), "tune.pairs and tune.knobs cannot be combined: a pair shares its lr only"
        )
        for method, knob in self.knobs.items():
            check(
                isinstance(knob, dict) and len(knob) == 1 and all(isinstance(v, list) and v for v in knob.values()),
                f"tune.knobs.{method} must be one option with a list of values ({{option: [v1, v2]}}), got {knob!r}",
            )


@dataclass
class SequentialSpec:
    """Seeds added in rounds until each credit comparison is decided, the schedule the analysis reads
    (bench.report.sequential): the spec's seeds, in ascending order, are run ``first`` at a time for
    every label, then ``step`` more per round for the labels of the comparisons still undecided, up to
    ``cap``; a look after each round."""

    first: int = 6
    """Seeds of the first round (every label; at least 3)."""
    step: int = 6
    """Seeds added per round to the labels an undecided comparison needs."""
    cap: int = 60
    """The most seeds a comparison gets; the spec's seeds must number at least this."""
    spending: str = "obf"
    """Alpha spending over the looks: obf (O'Brien-Fleming-type, saves alpha for the last looks) or
    pocock (spends early)."""

    def __post_init__(self) -> None:
        check(
            self.first >= MIN_SEEDS,
            f"sequential.first must be >= {MIN_SEEDS} seeds (no test from fewer), got {self.first}",
        )
        check(self.step >= 1, f"sequential.step must be >= 1 seed, got {self.step}")
        check(self.cap >= self.first, f"sequential.cap must be >= sequential.first ({self.first}), got {self.cap}")
        check(
            self.spending in SPENDING,
            f"sequential.spending must be one of {', '.join(SPENDING)}, got {self.spending!r}",
        )

    @property
    def looks(self) -> tuple[int, ...]:
        """Seeds at each look: ``first``, then every ``step`` more, and the cap."""
        n = list(range(self.first, self.cap, self.step)) + [self.cap]
        return tuple(dict.fromkeys(n))

    @property
    def fractions(self) -> tuple[float, ...]:
        """The information fraction of each look: its seeds over the cap."""
        return tuple(n / self.cap for n in self.looks)

    def next_look(self, n: int) -> int:
        """The seeds of the look after ``n`` seeds (the cap's at the end)."""
        return next((x for x in self.looks if x > n), self.looks[-1])
