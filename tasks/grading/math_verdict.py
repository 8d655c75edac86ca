"""One verdict: the input guards, then math-verify under signal timeouts, in this process.

:mod:`tasks.grading.math_grader` says what the verdicts mean and :mod:`tasks.grading.math_pool` where they are
computed. A verdict is a plain tuple, ``(reward, correct, parsed, correct_flexible, error)`` (the
fields of ``Outcome``), because a pool worker runs this file standalone (``runpy``, under the
name ``WORKER_RUN_NAME``): without the ``tasks`` package, bench or torch, so it starts in about a
second. This file imports nothing but the standard library and math-verify.

Input guards
    Cheap checks in the calling process before math-verify sees the text (so a guarded item never
    reaches a worker); what fails one is graded wrong at once, with the reason in
    ``Outcome.error``. They look at the whole kept text, not only at its answer:

    - only the last ``MAX_CHARS`` characters are kept;
    - NUL bytes are dropped and text that is not valid UTF-8 (lone surrogates) is repaired;
    - braces, or parentheses and brackets, nested more than ``MAX_NESTING`` deep:
      "too deeply nested";
    - a run of more than ``MAX_DIGITS`` digits (past Python's int-string limit): "number too long";
    - an integer power (tower) such as ``9^{9^{9}}`` or ``10^{-10^{9}}`` whose value has more than
      ``MAX_VALUE_DIGITS`` digits (or a reciprocal that small): "number too large".
    Anything else slow (a huge factorial, say) is left to the timeouts.

    Gold answers are trusted but go through the same guards ("gold: ..." errors) and the same
    cached parse; a gold answer math-verify cannot parse grades every completion wrong with
    ``error="gold did not parse"``.
"""

from __future__ import annotations

import logging
import math
import os
import re
import signal
from functools import lru_cache

from math_verify import ExprExtractionConfig, LatexExtractionConfig, parse, verify
from math_verify.errors import TimeoutException
from math_verify.parser import NormalizationConfig

logging.getLogger("math_verify").setLevel(logging.CRITICAL)  # it logs every timeout; Outcome.error says it
WORKER_RUN_NAME = "__math_grader_worker__"  # the module name a pool worker runs this file under

STRICT = (
    LatexExtractionConfig(
        boxed_match_priority=0,
        try_extract_without_anchor=False,
        normalization_config=NormalizationConfig(
            basic_latex=True, units=True, malformed_operators=True, nits=False, boxed="all", equations=False
        ),
    ),
)
FLEXIBLE = (LatexExtractionConfig(), ExprExtractionConfig())
MAX_CHARS = 20_000  # longer completions are graded on their last MAX_CHARS characters
MAX_NESTING = 50  # deeper {...} or (...)/[...] nesting is graded wrong unparsed
MAX_DIGITS = 4300  # longer digit runs are graded wrong unparsed (Python's int-string limit)
MAX_VALUE_DIGITS = 1_000_000  # integer powers with a larger value are graded wrong unparsed
MAX_PARSED = 1000  # Outcome.parsed is cut to this many characters
ANSWER_MARKER = "####"  # GSM8K's final-answer line ("#### 18"); the flexible verdict reads it first
WORKER_MEMORY_LIMIT = 4 << 30  # address-space cap (bytes) of each pool worker


# ------------------------------------------------------------------------------------ guards
_BRACES = re.compile(r"[{}]")
_PARENS = re.compile(r"[(\[)\]]")
_LONG_DIGITS = re.compile(rf"(?<!\d)\d{{{MAX_DIGITS + 1}}}")
_TOWER = re.compile(r"(?<!\d)\d+(?:\s*\^\s*\{?\s*-?\s*\d+)+")
_INT = re.compile(r"-?\s*\d+")
_MATH_DOLLAR = re.compile(r"(?<!\\)\$")  # a $ that opens or closes math (not an escaped \$)


def _too_deep(text: str, pattern: re.Pattern, opening: str) -> bool:
    depth = 0
    for m in pattern.finditer(text):
        if m.group() in opening:
            depth += 1
            if depth > MAX_NESTING:
                return True
        elif depth:
            depth -= 1
    return False


def _log10_int(digits: str) -> float:
    digits = digits.lstrip("0") or "0"
    if len(digits) <= 15:
        return math.log10(int(digits)) if digits != "0" else -math.inf
    return len(digits) - 15 + math.log10(int(digits[:15]))


def _tower_log10(numbers: list[str]) -> float:
    """log10 of |a^(b^(c^...))| for the signed integer literals of a power tower (inf when huge)."""
    top = numbers[-1].strip()
    digits = top.lstrip("-").strip()
    exponent = math.inf if _log10_int(digits) > 300 else float(digits)
    if top.startswith("-"):
        exponent = -exponent
    log_value = 0.0
    for base in reversed(numbers[:-1]):
        log_base = _log10_int(base.lstrip().lstrip("-").strip())
        # 0^x, 1^x and x^0 are small
        log_value = exponent * log_base if log_base > 0 and exponent else 0.0
        exponent = 10.0**log_value if log_value < 300 else math.inf
    return log_value


def screen(text: str) -> tuple[str, str | None]:
    """The text math-verify will see, and why it must be graded wrong unparsed (or None)."""
    text = text[-MAX_CHARS:]
    if "\x00" in text:
        text = text.replace("\x00", "")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        text = text.encode("utf-8", "replace").decode("utf-8")
    if text.count("{") > MAX_NESTING and _too_deep(text, _BRACES, "{"):
        return text, "too deeply nested"
    if text.count("(") + text.count("[") > MAX_NESTING and _too_deep(text, _PARENS, "(["):
        return text, "too deeply nested"
    if len(text) > MAX_DIGITS and _LONG_DIGITS.search(text):
        return text, "number too long"
    if "^" in text:
        for m in _TOWER.finditer(text):
            if abs(_tower_log10(_INT.findall(m.group()))) > MAX_VALUE_DIGITS:
                return text, "number too large"
    return text, None


# ----------------------------------------------------------------------------------- grading
def wrong(error: str, flexible: bool) -> tuple:
    """Wrong, with ``error`` saying why no verdict on the answer was reached (a guard, a timeout)."""
    return (0.0, False, None, False if flexible else None, error)


@lru_cache(maxsize=65536)
def _gold(answer: str, timeout: int) -> list:
    """The parsed gold answer; a timeout raises (and is not cached)."""
    text = answer if "\\boxed" in answer or _MATH_DOLLAR.search(answer) else f"\\boxed{{{answer}}}"
    return _parse(text, STRICT, timeout) or _parse(text, FLEXIBLE, timeout)


_BASE = re.compile(r"^\s*[0-9A-Za-z]+\s*_\s*\{?\s*\(?(\d+)\)?\s*\}?\s*$")  # 52_8, 4210_{5}, 12_{(3)}


def _base_ok(answer: str, extracted: list) -> bool:
    """Same numeral base as a gold answer written in one (always true for other gold answers)."""
    gold = _BASE.match(answer)
    if gold is None:
        return True
    shown = _show(extracted)
    pred = _BASE.match(shown) if shown else None
    return pred is not None and pred.group(1) == gold.group(1)


def _parse(text: str, config, timeout: int) -> list:
    try:
        return parse(text, extraction_config=config, parsing_timeout=timeout, raise_on_error=True)
    except TimeoutException:
        raise
    except Exception:  # what parse(raise_on_error=False) turns into "no answer"
        return []


def _verify(gold: list, pred: list, timeout: int) -> bool:
    """``verify(gold, pred)``, pair by pair as math-verify does, except that a timeout raises."""
    for g in gold:
        for p in pred:
            try:
                if verify(g, p, timeout_seconds=timeout, raise_on_error=True):
                    return True
            except TimeoutException:
                raise
            except Exception:  # what verify(raise_on_error=False) scores as not equal
                pass
    return False


def _same(a: list, b: list) -> bool:
    """Structurally equal extractions (then the flexible verdict is the strict one)."""
    try:
        return len(a) == len(b) and all(type(x) is type(y) and bool(x == y) for x, y in zip(a, b))
    except Exception:
        return False


def marked_answer(text: str) -> str | None:
    """What follows the last ``ANSWER_MARKER`` (stripped), or None when the text has none.

    GSM8K writes its final answer after ``####``; the lenient extraction's last-number fallback
    would otherwise take a number from the working before it (``= 20%``, ``$4.00 + $``) when the
    marker line has no LaTeX or anchor phrase (test_flexible_verdict_reads_the_gsm8k_answer_marker).
    """
    _, marker, tail = text.rpartition(ANSWER_MARKER)
    return tail.strip() if marker else None


def _show(extracted: list) -> str | None:
    if not extracted:
        return None
    x = extracted[-1]
    try:
        s = x if isinstance(x, str) else str(x)
    except Exception:  # e.g. an integer past Python's int-string limit
        return None
    return s if len(s) <= MAX_PARSED else s[: MAX_PARSED - 3] + "..."


def grade(text: str, answer: str, timeout: int, flexible: bool) -> tuple:
    """Grade screened text against a screened gold answer, in this process's main thread."""
    try:
        gold = _gold(answer, timeout)
        if not gold:
            return wrong("gold did not parse", flexible)
        strict = _parse(text, STRICT, timeout)
        ok = bool(strict) and _verify(gold, strict, timeout) and _base_ok(answer, strict)
        if not flexible:
            return (float(ok), ok, _show(strict), None, None)
        marked = marked_answer(text)  # a "#### 18" line is the answer; without one, the lenient search
        flex = _parse(text if marked is None else marked, FLEXIBLE, timeout)
        ok_flex = (
            ok if _same(flex, strict) else (bool(flex) and _verify(gold, flex, timeout) and _base_ok(answer, flex))
        )
        return (float(ok), ok, _show(strict) or _show(flex), ok_flex, None)
    except TimeoutException:
        return wrong("timeout", flexible)
    except MemoryError:
        return wrong("out of memory", flexible)
    except RecursionError:
        return wrong("too deeply nested", flexible)


def screened_pair(completion: str, answer: str) -> tuple[str, str, str | None]:
    text, error = screen(completion)
    gold, gold_error = screen(answer)
    return text, gold, (f"gold: {gold_error}" if gold_error else error)


# ------------------------------------------------------------------------------ pool worker
def serve(conn) -> None:
    """A pool worker's loop: ``(items, timeout, flexible)`` in, one verdict per item out."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's business
    try:
        import resource

        _, hard = resource.getrlimit(resource.RLIMIT_AS)
        limit = WORKER_MEMORY_LIMIT
        if hard != resource.RLIM_INFINITY:
            limit = min(limit, hard)
        resource.setrlimit(resource.RLIMIT_AS, (limit, hard))
    except (ImportError, ValueError, OSError):
        pass
    grade("\\boxed{\\frac{1}{2}}", "0.5", 5, True)  # load the parsers now, not on the first item
    conn.send(("ready", os.getpid()))
    while True:
        try:
            msg = conn.recv()
        except (EOFError, OSError):
            msg = None
        if msg is None:  # the parent is done (or gone): nothing to flush, skip the slow teardown
            os._exit(0)
        items, timeout, flexible = msg
        for text, answer in items:
            try:
                verdict = grade(text, answer, timeout, flexible)
            except Exception as e:  # a bug, not a verdict: still one answer per item
                verdict = wrong(f"grader error: {type(e).__name__}", flexible)
            try:
                conn.send(verdict)
            except (EOFError, OSError):
                os._exit(0)


if __name__ == WORKER_RUN_NAME:
    serve(_WORKER_CONN)  # noqa: F821 - given by the pool (runpy init_globals)
