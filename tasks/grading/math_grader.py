"""The one math verifier every math task uses: math-verify, gold first.

Verdicts
    ``verify(gold, prediction)`` is not symmetric; the gold answer is always the first argument.
    Two extractions are reported side by side (as lm-evaluation-harness does):

    - strict: the reward-oriented settings math-verify's README recommends (LaTeX only, ``\\boxed{}``
      first, no "nits" repairs, no bare-number fallback), with one deviation: the malformed-operator
      repair is on, because the datasets' own answers write ``\\frac43`` and ``11\\sqrt2`` (valid
      TeX) and a reward that fails the dataset's notation is biased. This is the reward.
    - flexible: math-verify's lenient defaults (LaTeX and plain expressions, last-number fallback),
      reported as ``Outcome.correct_flexible`` and skipped with ``flexible=False`` (training).
      A completion with GSM8K's ``#### <answer>`` line is graded on what follows its last
      ``####`` (``math_verdict.marked_answer``, which also gives GSM8K's gold answers), not on a
      number the fallback finds in the working; the strict verdict does not read the marker.

    A gold answer without ``\\boxed`` or a math ``$`` (an escaped ``\\$``, as in ``\\$40``, is
    not one) is wrapped in ``\\boxed{}`` and parsed with the strict (LaTeX) config, falling back to
    the flexible one; gold parses are cached (per process). The flexible config first would let
    its bare-number fallback turn an unparsable gold expression into one of its numbers (Minerva's
    ``\\frac{1}{3} E_{1}+\\frac{2}{3} E_{2}`` became ``2/3``, matching any answer ending so).

    A gold answer in a numeral base (``52_8``, ``4210_{5}``) must be matched with the same base:
    math-verify drops the subscript, so ``52_9`` would otherwise grade correct.

Where grading runs, and how timeouts work
    math-verify bounds each step (parse gold, parse strict, verify, parse flexible, verify) with
    ``signal.alarm(timeout)``. That only works in a process's main thread, and a signal cannot
    interrupt a long C-level call (one giant big-int multiplication, say): the handler runs only
    when the call returns. Once any step times out the item is graded wrong with
    ``error="timeout"`` and its remaining steps are skipped.

    - ``MathGrader(workers=None)`` (the default, "auto") grades in a shared pool of
      ``min(2, os.cpu_count())`` worker processes; ``workers=N > 0`` in a pool of ``N``. Both
      limits apply there: the signal timeouts per step inside the worker, and a hard deadline
      per item enforced by the parent, which kills the worker (see :mod:`tasks.grading.math_pool`). Any
      thread may call.
    - ``MathGrader(workers=0)`` grades inline in the calling thread when that is the main thread:
      fastest (no process hop), signal timeouts only, so it cannot stop a C-level hang and has no
      memory cap. Called from any other thread it uses the shared one-worker pool.

Where the parts live
    :mod:`tasks.grading.math_verdict` grades one item (the cheap input guards, then math-verify) and is
    what a pool worker runs; :mod:`tasks.grading.math_pool` holds the shared worker pools, their hard
    deadlines and how a lost worker is replaced; this module decides where each call grades.

``Outcome.error`` (None whenever a verdict was reached, right or wrong)
    "timeout", "worker died", "out of memory", "too deeply nested", "number too long",
    "number too large", "gold: <guard>", "gold did not parse", "grader error: <exception>".
"""

from __future__ import annotations

import os
import threading

from bench.core import Outcome, check
from tasks.grading.math_pool import shared_pool, shutdown_pools
from tasks.grading.math_verdict import grade, screened_pair, wrong

__all__ = ["MathGrader", "grade_one", "shutdown_pools"]


def _outcome(verdict: tuple) -> Outcome:
    return Outcome(*verdict)


def grade_one(completion: str, answer: str, timeout: int = 5, flexible: bool = True) -> Outcome:
    """Grade one completion against a gold answer string in the current thread when it is the
    main thread (signal timeouts only), else in the shared one-worker pool.
    ``flexible=False`` skips the report-only lenient extraction (half the work)."""
    if threading.current_thread() is not threading.main_thread():
        return MathGrader(timeout, workers=1)([completion], [answer], flexible)[0]
    text, gold, error = screened_pair(completion, answer)
    return _outcome(wrong(error, flexible) if error else grade(text, gold, timeout, flexible))


class MathGrader:
    """Grades completions against gold answers with math-verify (see the module docstring).

    ``workers=None`` (auto): the shared pool of ``min(2, os.cpu_count())`` worker processes.
    ``workers=0``: inline in the caller's thread when it is the main thread (signal timeouts only),
    else the shared one-worker pool. ``workers=N``: the shared pool of ``N`` workers.
    ``timeout`` (whole seconds) bounds each math-verify step; the pool's hard limit per item is
    ``3 * timeout + 1`` seconds. Picklable; ``close()`` leaves shared pools running (they stop
    with ``shutdown_pools()`` or at exit).
    """

    def __init__(self, timeout: int = 5, workers: int | None = None):
        check(
            isinstance(timeout, int) and timeout >= 1,
            f"timeout must be a whole number of seconds >= 1, got {timeout!r}",
        )
        check(
            workers is None or (isinstance(workers, int) and workers >= 0),
            f"workers must be >= 0 (or None for auto), got {workers!r}",
        )
        self.timeout = timeout
        self.workers = workers

    def pool_size(self) -> int:
        """Worker processes a call from this thread uses (0: inline)."""
        if self.workers is None:
            return min(2, os.cpu_count() or 1)
        if self.workers == 0 and threading.current_thread() is not threading.main_thread():
            return 1
        return self.workers

    def __call__(self, completions: list[str], answers: list[str], flexible: bool = True) -> list[Outcome]:
        pairs = list(zip(completions, answers, strict=True))
        size = self.pool_size()
        if size == 0:
            return [grade_one(c, a, self.timeout, flexible) for c, a in pairs]
        out: list[tuple | None] = [None] * len(pairs)
        todo, items = [], []
        for i, (c, a) in enumerate(pairs):
            text, gold, error = screened_pair(c, a)
            if error:
                out[i] = wrong(error, flexible)
            else:
                todo.append(i)
                items.append((text, gold))
        if items:
            for i, verdict in zip(todo, shared_pool(size).map(items, self.timeout, flexible)):
                out[i] = verdict
        return [_outcome(v) for v in out]  # type: ignore[arg-type]

    def close(self) -> None:
        """Nothing to release: pools are shared per process (see ``shutdown_pools``)."""

    def __getstate__(self):
        return {"timeout": self.timeout, "workers": self.workers}
