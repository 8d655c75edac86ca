"""The verdict of a comparison: a value with its rule, built once and written as text only at the edge
(report.json keeps the text, ``str(verdict)``; code reads the value).

The rule, first match: a difference significant after multiplicity (Holm, or a group-sequential
boundary) is ``better`` or ``worse`` by its sign, "within ±m" when an equivalence test (TOST) also
bounds it inside the margin m (real, but smaller than what matters); else an equivalence is
``equivalent (±m)``; else it is ``inconclusive`` -- in a sequential design ``open`` while it awaits
its next look's seeds, ``inconclusive at the cap`` after the last, and ``undecided (resolved)`` where a
design that stops once its intervals are narrow enough (the credit probe's ``until: resolved``) stopped it
undecided with its repeated interval within that design's target.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass


class Outcome(enum.Enum):
    BETTER = "better"
    WORSE = "worse"
    EQUIVALENT = "equivalent"
    INCONCLUSIVE = "inconclusive"
    OPEN = "open"
    AT_CAP = "inconclusive at the cap"
    RESOLVED = "undecided (resolved)"


@dataclass(frozen=True)
class Verdict:
    """An outcome, and the margin an equivalence was shown within (None where none was)."""

    outcome: Outcome
    margin: float | None = None
    relative: bool = False
    """The margin is a fraction of the control's own value (written as a percentage of it)."""

    @classmethod
    def of(
        cls, diff: float, significant: bool, equivalent: bool, margin: float | None, relative: bool = False
    ) -> Verdict:
        """The rule above from a comparison's estimate and its two tests."""
        within = margin if equivalent else None
        if significant:
            return cls(Outcome.BETTER if diff > 0 else Outcome.WORSE, within, relative)
        return cls(Outcome.EQUIVALENT, margin, relative) if equivalent else cls(Outcome.INCONCLUSIVE)

    @property
    def directional(self) -> bool:
        """A difference was found (better or worse, within the margin or not)."""
        return self.outcome in (Outcome.BETTER, Outcome.WORSE)

    def within(self, margin: float, relative: bool = False) -> Verdict:
        """This difference, shown also to lie inside ±``margin``."""
        return Verdict(self.outcome, margin, relative)

    def _margin(self) -> str:
        return f"±{100 * self.margin:g}% of the control's" if self.relative else f"±{self.margin:g}"

    def __str__(self) -> str:
        if self.outcome is Outcome.EQUIVALENT:
            return f"equivalent ({self._margin()})"
        if self.directional and self.margin is not None:
            return f"{self.outcome.value}, within {self._margin()}"
        return self.outcome.value
