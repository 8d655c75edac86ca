"""The qualitative words of every generated table, each made by one rule applied to the statistics
(docs/results.md quotes them; it states no word these rules did not give).

- **A comparison** says its :class:`~bench.stats.verdict.Verdict`: ``better`` / ``worse`` where its
  test crossed the design's boundary after the family's multiplicity correction, ``equivalent (±m)``
  where both one-sided tests did, else ``inconclusive`` (``inconclusive at the cap`` in rounds).
- **Across rates** (:func:`across`): ``better at every rate`` when every rate's verdict is better
  (likewise worse, equivalent); otherwise each outcome with the rates it holds at, e.g. ``better at
  0.0002; inconclusive at 0.0001``.
- **Across phases** (:func:`phases`), a conditional detail: a phase is ``above 0`` where its 95%
  interval (over trajectories, unadjusted) lies above 0, ``below 0`` where below, else ``not
  resolved``; ``above 0 at every phase`` when all are (``not resolved at any phase`` when none is),
  otherwise each word with its phases, e.g.
  ``below 0 at 0; above 0 at 1; not resolved at 0.5``.
"""

from __future__ import annotations

from collections.abc import Mapping

from bench.stats.verdict import Verdict

ABOVE, BELOW, UNRESOLVED = "above 0", "below 0", "not resolved"


def _grouped(words: Mapping[str, str], every: str) -> str:
    """``<word> at every <every>`` when all agree, else each word with the keys it holds at, in the
    order the words first appear."""
    if not words:
        return ""
    if len(set(words.values())) == 1:
        word = next(iter(words.values()))
        return f"{word} at any {every}" if word == UNRESOLVED else f"{word} at every {every}"
    at: dict[str, list[str]] = {}
    for key, word in words.items():
        at.setdefault(word, []).append(key)
    return "; ".join(f"{word} at {', '.join(keys)}" for word, keys in at.items())


def across(verdicts: Mapping[str, Verdict | str]) -> str:
    """One pair's verdicts at several rates (``verdicts[rate]``, a verdict or its text) in words."""
    return _grouped({rate: str(v) for rate, v in verdicts.items()}, "rate")


def sign(lo: float, hi: float) -> str:
    """An interval's word: above 0, below 0, or not resolved."""
    return ABOVE if lo > 0 else BELOW if hi < 0 else UNRESOLVED


def phases(intervals: Mapping[str, tuple[float, float]]) -> str:
    """A pair's per-phase intervals (``intervals[phase] = (lo, hi)``) in words."""
    return _grouped({p: sign(lo, hi) for p, (lo, hi) in intervals.items()}, "phase")
