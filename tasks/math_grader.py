"""The one math verifier every math task uses: math-verify, gold first.

Two extractions are reported side by side (as lm-evaluation-harness does):
- strict: the reward-oriented settings math-verify's README recommends (LaTeX only, ``\\boxed{}``
  first, no malformed-operator or "nits" repairs, no bare-number fallback). This is the reward.
- flexible: math-verify's lenient defaults (LaTeX and plain expressions, last-number fallback).

math-verify enforces its timeouts with ``signal.alarm``, which only works in a process's main
thread. Grading therefore runs in the calling thread when that is the main thread, and otherwise
in a worker process (whose main thread it is), so it never raises in a trainer's worker thread.
"""

from __future__ import annotations

import threading
from concurrent.futures import ProcessPoolExecutor
from functools import lru_cache
import multiprocessing as mp

from math_verify import ExprExtractionConfig, LatexExtractionConfig, parse, verify
from math_verify.parser import NormalizationConfig

from bench.core import Outcome

STRICT = (
    LatexExtractionConfig(
        boxed_match_priority=0,
        try_extract_without_anchor=False,
        normalization_config=NormalizationConfig(
            basic_latex=True, units=True, malformed_operators=False, nits=False, boxed="all", equations=False
        ),
    ),
)
FLEXIBLE = (LatexExtractionConfig(), ExprExtractionConfig())
MAX_CHARS = 20_000  # longer completions are graded on their last MAX_CHARS characters


@lru_cache(maxsize=65536)
def _gold(answer: str, timeout: int):
    text = answer if "\\boxed" in answer or "$" in answer else f"\\boxed{{{answer}}}"
    return parse(text, extraction_config=FLEXIBLE, parsing_timeout=timeout)


def grade_one(completion: str, answer: str, timeout: int = 5, flexible: bool = True) -> Outcome:
    """Grade one completion against a gold answer string, in the current (main) thread.
    ``flexible=False`` skips the report-only lenient extraction (half the work)."""
    gold = _gold(answer, timeout)
    text = completion[-MAX_CHARS:]
    strict = parse(text, extraction_config=STRICT, parsing_timeout=timeout)
    ok = bool(gold) and bool(strict) and verify(gold, strict, timeout_seconds=timeout)
    if not flexible:
        return Outcome(reward=float(ok), correct=bool(ok), parsed=str(strict[-1]) if strict else None)
    flex = parse(text, extraction_config=FLEXIBLE, parsing_timeout=timeout)
    ok_flex = bool(gold) and bool(flex) and verify(gold, flex, timeout_seconds=timeout)
    parsed = str(strict[-1]) if strict else (str(flex[-1]) if flex else None)
    return Outcome(reward=float(ok), correct=bool(ok), parsed=parsed, correct_flexible=bool(ok_flex))


def _grade_many(pairs: list[tuple[str, str]], timeout: int, flexible: bool) -> list[Outcome]:
    return [grade_one(c, a, timeout, flexible) for c, a in pairs]


class MathGrader:
    """Grades completions against gold answers with math-verify.

    ``workers=0`` grades in the caller's thread when it is the main thread (the trainer's case on
    CPU); a caller in another thread, or ``workers>0``, uses a pool of worker processes.
    """

    def __init__(self, timeout: int = 5, workers: int = 0):
        self.timeout = timeout
        self.workers = workers
        self._pool: ProcessPoolExecutor | None = None

    def __call__(self, completions: list[str], answers: list[str], flexible: bool = True) -> list[Outcome]:
        pairs = list(zip(completions, answers, strict=True))
        if self.workers == 0 and threading.current_thread() is threading.main_thread():
            return _grade_many(pairs, self.timeout, flexible)
        pool = self._get_pool()
        n = max(self.workers, 1)
        chunks = [pairs[i::n] for i in range(n)]
        results = list(pool.map(_grade_many, chunks, [self.timeout] * n, [flexible] * n))
        out: list[Outcome] = [None] * len(pairs)  # type: ignore[list-item]
        for i, chunk in enumerate(results):
            out[i::n] = chunk
        return out

    def _get_pool(self) -> ProcessPoolExecutor:
        if self._pool is None:
            self._pool = ProcessPoolExecutor(max(self.workers, 1), mp_context=mp.get_context("spawn"))
        return self._pool

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(cancel_futures=True)
            self._pool = None

    def __getstate__(self):
        return {"timeout": self.timeout, "workers": self.workers, "_pool": None}
