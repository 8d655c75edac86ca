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
      per item enforced by the parent, which kills the worker (below). Any thread may call.
    - ``MathGrader(workers=0)`` grades inline in the calling thread when that is the main thread:
      fastest (no process hop), signal timeouts only, so it cannot stop a C-level hang and has no
      memory cap. Called from any other thread it uses the shared one-worker pool.

The pool
    Long-lived worker processes started with multiprocessing's "spawn" context (safe from a
    multi-threaded parent with torch or CUDA loaded). A worker runs this file standalone, without
    the ``tasks`` package or torch, so it starts in about a second; it grades in its own main
    thread, where the signal timeouts work, under an address-space cap of
    ``WORKER_MEMORY_LIMIT`` (a runaway allocation becomes a MemoryError, graded wrong).

    The parent sends each idle worker a small chunk of items and receives one result per item. It
    enforces a hard deadline of ``3 * timeout + 1`` seconds per item from the moment the item
    started, with ``multiprocessing.connection.wait`` timeouts (no signals, so any thread may
    call). A worker that misses the deadline is SIGKILLed and replaced, and its item is graded
    ``error="timeout"``. A worker that dies otherwise (killed from outside, a crash) is replaced
    and its item retried once on another worker; an item under which two workers die is graded
    ``error="worker died"``. The rest of a chunk goes to the next idle worker. Results keep input
    order. One call at a time uses a pool (a lock), so concurrent callers never see each other's
    results.

    Pools are shared per process, keyed by their size (the timeout travels with each call, so
    graders with different timeouts share workers), started lazily on first use, and shut down by
    ``shutdown_pools()`` and at interpreter exit. ``MathGrader.close()`` does not stop a shared
    pool. A forked child does not inherit its parent's pools; it starts its own on first use. Like
    every spawn-based pool, a script that grades must keep its top level behind
    ``if __name__ == "__main__":``, since each worker imports the parent's main module.

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

``Outcome.error`` (None whenever a verdict was reached, right or wrong)
    "timeout", "worker died", "out of memory", "too deeply nested", "number too long",
    "number too large", "gold: <guard>", "gold did not parse", "grader error: <exception>".
"""

from __future__ import annotations

import logging
import math
import os
import re
import signal
import threading
import time
from collections import deque
from functools import lru_cache
from multiprocessing.connection import wait

from math_verify import ExprExtractionConfig, LatexExtractionConfig, parse, verify
from math_verify.errors import TimeoutException
from math_verify.parser import NormalizationConfig

logging.getLogger("math_verify").setLevel(logging.CRITICAL)  # it logs every timeout; Outcome.error says it
_WORKER_RUN_NAME = "__math_grader_worker__"  # the module name a pool worker runs this file under
if __name__ != _WORKER_RUN_NAME:  # workers build plain tuples and never import bench (torch)
    from bench.core import Outcome, check

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
WORKER_MEMORY_LIMIT = 4 << 30  # address-space cap (bytes) of each pool worker
WORKER_START_TIMEOUT = 120.0  # seconds a new worker may take to import math-verify and report


def deadline_seconds(timeout: int) -> float:
    """The pool's hard per-item limit: generous for five ``timeout``-bounded steps that each
    finish in time, and short of a hang."""
    return 3 * timeout + 1


# ------------------------------------------------------------------------------------ guards
_BRACES = re.compile(r"[{}]")
_PARENS = re.compile(r"[(\[)\]]")
_LONG_DIGITS = re.compile(r"(?<!\d)\d{%d}" % (MAX_DIGITS + 1))
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


def _screen(text: str) -> tuple[str, str | None]:
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
# A verdict is a plain tuple (what workers send):
# (reward, correct, parsed, correct_flexible, error), the fields of Outcome.
def _wrong(error: str, flexible: bool) -> tuple:
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


def _show(extracted: list) -> str | None:
    if not extracted:
        return None
    x = extracted[-1]
    try:
        s = x if isinstance(x, str) else str(x)
    except Exception:  # e.g. an integer past Python's int-string limit
        return None
    return s if len(s) <= MAX_PARSED else s[: MAX_PARSED - 3] + "..."


def _grade(text: str, answer: str, timeout: int, flexible: bool) -> tuple:
    """Grade screened text against a screened gold answer, in this process's main thread."""
    try:
        gold = _gold(answer, timeout)
        if not gold:
            return _wrong("gold did not parse", flexible)
        strict = _parse(text, STRICT, timeout)
        ok = bool(strict) and _verify(gold, strict, timeout) and _base_ok(answer, strict)
        if not flexible:
            return (float(ok), ok, _show(strict), None, None)
        flex = _parse(text, FLEXIBLE, timeout)
        ok_flex = ok if _same(flex, strict) else (bool(flex) and _verify(gold, flex, timeout)
                                                  and _base_ok(answer, flex))
        return (float(ok), ok, _show(strict) or _show(flex), ok_flex, None)
    except TimeoutException:
        return _wrong("timeout", flexible)
    except MemoryError:
        return _wrong("out of memory", flexible)
    except RecursionError:
        return _wrong("too deeply nested", flexible)


def _screened_pair(completion: str, answer: str) -> tuple[str, str, str | None]:
    text, error = _screen(completion)
    gold, gold_error = _screen(answer)
    return text, gold, (f"gold: {gold_error}" if gold_error else error)


def _outcome(verdict: tuple) -> Outcome:
    return Outcome(*verdict)


def grade_one(completion: str, answer: str, timeout: int = 5, flexible: bool = True) -> Outcome:
    """Grade one completion against a gold answer string in the current thread when it is the
    main thread (signal timeouts only), else in the shared one-worker pool.
    ``flexible=False`` skips the report-only lenient extraction (half the work)."""
    if threading.current_thread() is not threading.main_thread():
        return MathGrader(timeout, workers=1)([completion], [answer], flexible)[0]
    text, gold, error = _screened_pair(completion, answer)
    return _outcome(_wrong(error, flexible) if error else _grade(text, gold, timeout, flexible))


# -------------------------------------------------------------------------------------- pool
def _serve(conn) -> None:
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
    _grade("\\boxed{\\frac{1}{2}}", "0.5", 5, True)  # load the parsers now, not on the first item
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
                verdict = _grade(text, answer, timeout, flexible)
            except Exception as e:  # a bug, not a verdict: still one answer per item
                verdict = _wrong(f"grader error: {type(e).__name__}", flexible)
            try:
                conn.send(verdict)
            except (EOFError, OSError):
                os._exit(0)


def _chunks(items: list[tuple[str, str]], most: int, chars: int = 32_768):
    """Index chunks of at most ``most`` items and (beyond one item) ``chars`` characters, so a
    chunk fits a socket buffer and sending it to an idle worker does not block."""
    chunk, size = [], 0
    for i, (text, gold) in enumerate(items):
        cost = len(text) + len(gold)
        if chunk and (len(chunk) >= most or size + cost > chars):
            yield chunk
            chunk, size = [], 0
        chunk.append(i)
        size += cost
    if chunk:
        yield chunk


class _Worker:
    __slots__ = ("process", "conn", "pid", "ready", "chunk", "pos", "deadline")

    def __init__(self, process, conn, deadline: float):
        self.process, self.conn, self.pid = process, conn, process.pid
        self.ready, self.chunk, self.pos, self.deadline = False, None, 0, deadline


class _Pool:
    """``size`` killable worker processes; ``map`` grades a list of screened pairs."""

    def __init__(self, size: int):
        import multiprocessing as mp

        self.size = size
        self.owner = os.getpid()
        self.lock = threading.Lock()
        self.closed = False
        self._ctx = mp.get_context("spawn")
        self.workers: list[_Worker] = []
        self.replaced = 0  # workers killed or lost and started again (for tests and logs)
        self._failed_starts = 0

    @property
    def pids(self) -> list[int]:
        return [w.pid for w in self.workers]

    def _spawn(self) -> _Worker:
        import runpy

        parent_conn, child_conn = self._ctx.Pipe(duplex=True)
        process = self._ctx.Process(
            target=runpy.run_path,
            args=(os.path.abspath(__file__),),
            kwargs={"init_globals": {"_WORKER_CONN": child_conn}, "run_name": _WORKER_RUN_NAME},
            name="math-grader",
            daemon=True,
        )
        process.start()
        child_conn.close()
        return _Worker(process, parent_conn, time.monotonic() + WORKER_START_TIMEOUT)

    def _stop(self, w: _Worker) -> None:
        try:
            w.process.kill()
            w.process.join(5)
            w.process.close()
        except (OSError, ValueError):
            pass
        w.conn.close()

    def _replace(self, k: int) -> None:
        """Kill worker ``k`` (if still running) and start a fresh one in its place."""
        self._stop(self.workers[k])
        if self.closed:
            raise RuntimeError("this math grader pool was shut down")
        self.workers[k] = self._spawn()

    def _check_starting(self, k: int) -> None:
        """Mark worker ``k`` ready once it says so; replace it if it died or took too long."""
        w = self.workers[k]
        try:
            if w.conn.poll():
                msg = w.conn.recv()
                if isinstance(msg, tuple) and msg and msg[0] == "ready":
                    w.ready, self._failed_starts = True, 0
                    return
        except (EOFError, OSError):
            pass
        if w.process.is_alive() and time.monotonic() <= w.deadline:
            return
        self._failed_starts += 1
        code = w.process.exitcode
        if self._failed_starts >= 3:
            self.close()
            raise RuntimeError(
                f"math grader workers fail to start (exit code {code}); a worker imports the "
                "parent's main module, so keep a script's top level behind "
                "`if __name__ == '__main__':`")
        self._replace(k)

    def _wait(self, waiting: list[_Worker]) -> None:
        if waiting:
            timeout = max(0.0, min(w.deadline for w in waiting) - time.monotonic())
            wait([w.conn for w in waiting] + [w.process.sentinel for w in waiting], timeout)

    def _start(self) -> None:
        while len(self.workers) < self.size:
            self.workers.append(self._spawn())
        while not all(w.ready for w in self.workers):
            self._wait([w for w in self.workers if not w.ready])
            for k, w in enumerate(self.workers):
                if not w.ready:
                    self._check_starting(k)

    def map(self, items: list[tuple[str, str]], timeout: int, flexible: bool) -> list[tuple]:
        """Verdict tuples for screened ``(text, gold)`` pairs, in order."""
        with self.lock:
            if self.closed:
                raise RuntimeError("this math grader pool was shut down")
            self._start()
            try:
                return self._run(items, timeout, flexible)
            except BaseException:  # e.g. KeyboardInterrupt: no worker may keep a stale chunk
                for w in [w for w in self.workers if w.chunk]:
                    self.workers.remove(w)
                    self._stop(w)
                raise

    def _run(self, items: list[tuple[str, str]], timeout: int, flexible: bool) -> list[tuple]:
        queue = deque(_chunks(items, max(1, min(16, len(items) // (4 * self.size)))))
        out: list[tuple | None] = [None] * len(items)
        limit = deadline_seconds(timeout)
        died: set[int] = set()  # items whose worker died under them once already
        for w in self.workers:
            w.chunk = None
        while queue or any(w.chunk for w in self.workers):
            for k, w in enumerate(self.workers):
                if not (w.ready and w.chunk is None and queue):
                    continue
                if not w.process.is_alive():  # died while idle: no item lost
                    self._replace(k)
                    self.replaced += 1
                    continue
                w.chunk, w.pos, w.deadline = queue.popleft(), 0, time.monotonic() + limit
                try:
                    w.conn.send(([items[i] for i in w.chunk], timeout, flexible))
                except (OSError, ValueError):
                    pass  # it just died: seen below
            self._wait([w for w in self.workers if w.chunk or not w.ready])
            for k, w in enumerate(self.workers):
                if not w.ready:
                    self._check_starting(k)
                    continue
                if self._drain(w, out, limit) or not w.chunk:
                    continue
                dead = not w.process.is_alive()
                if dead or time.monotonic() > w.deadline:
                    self._drain(w, out, limit)  # verdicts sent just before the end
                    if w.chunk:
                        i, rest = w.chunk[w.pos], w.chunk[w.pos + 1:]
                        if dead and i not in died:  # maybe not the item's fault: once more
                            died.add(i)
                            rest = [i] + rest
                        else:
                            out[i] = _wrong("worker died" if dead else "timeout", flexible)
                        if rest:
                            queue.appendleft(rest)
                    self._replace(k)
                    self.replaced += 1
        return out  # type: ignore[return-value]

    @staticmethod
    def _drain(w: _Worker, out: list, limit: float) -> bool:
        """Take the verdicts ``w`` has sent; True if it made progress."""
        progressed = False
        try:
            while w.chunk and w.conn.poll():
                verdict = w.conn.recv()
                out[w.chunk[w.pos]] = verdict
                w.pos += 1
                w.deadline = time.monotonic() + limit
                progressed = True
                if w.pos == len(w.chunk):
                    w.chunk = None
        except (EOFError, OSError):
            pass
        return progressed

    def close(self) -> None:
        """Stop the workers: ask politely, then SIGKILL whatever is still running."""
        self.closed = True
        if os.getpid() != self.owner:
            return
        workers, self.workers = self.workers, []
        for w in workers:
            try:
                w.conn.send(None)
            except (OSError, ValueError):
                pass
        end = time.monotonic() + 0.5
        for w in workers:
            w.process.join(max(0.0, end - time.monotonic()))
            self._stop(w)


_POOLS: dict[int, _Pool] = {}
_POOLS_LOCK = threading.Lock()


def _shared_pool(size: int) -> _Pool:
    with _POOLS_LOCK:
        pool = _POOLS.get(size)
        if pool is None or pool.closed or pool.owner != os.getpid():
            pool = _POOLS[size] = _Pool(size)
        return pool


def shutdown_pools() -> None:
    """Stop every shared worker pool of this process (they start again on next use)."""
    with _POOLS_LOCK:
        pools = list(_POOLS.values())
        _POOLS.clear()
    for pool in pools:
        if pool.owner != os.getpid():
            continue
        got = pool.lock.acquire(timeout=10)  # let a call in progress finish
        try:
            pool.close()
        finally:
            if got:
                pool.lock.release()


def _forget_pools_after_fork() -> None:
    global _POOLS_LOCK
    _POOLS_LOCK = threading.Lock()
    _POOLS.clear()  # the parent's workers are not this process's children


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
        check(isinstance(timeout, int) and timeout >= 1,
              f"timeout must be a whole number of seconds >= 1, got {timeout!r}")
        check(workers is None or (isinstance(workers, int) and workers >= 0),
              f"workers must be >= 0 (or None for auto), got {workers!r}")
        self.timeout = timeout
        self.workers = workers

    def pool_size(self) -> int:
        """Worker processes a call from this thread uses (0: inline)."""
        if self.workers is None:
            return min(2, os.cpu_count() or 1)
        if self.workers == 0 and threading.current_thread() is not threading.main_thread():
            return 1
        return self.workers

    def __call__(
        self, completions: list[str], answers: list[str], flexible: bool = True
    ) -> list[Outcome]:
        pairs = list(zip(completions, answers, strict=True))
        size = self.pool_size()
        if size == 0:
            return [grade_one(c, a, self.timeout, flexible) for c, a in pairs]
        out: list[tuple | None] = [None] * len(pairs)
        todo, items = [], []
        for i, (c, a) in enumerate(pairs):
            text, gold, error = _screened_pair(c, a)
            if error:
                out[i] = _wrong(error, flexible)
            else:
                todo.append(i)
                items.append((text, gold))
        if items:
            for i, verdict in zip(todo, _shared_pool(size).map(items, self.timeout, flexible)):
                out[i] = verdict
        return [_outcome(v) for v in out]  # type: ignore[arg-type]

    def close(self) -> None:
        """Nothing to release: pools are shared per process (see ``shutdown_pools``)."""

    def __getstate__(self):
        return {"timeout": self.timeout, "workers": self.workers}


if __name__ == _WORKER_RUN_NAME:
    _serve(_WORKER_CONN)  # noqa: F821 - given by the pool (runpy init_globals)
else:
    import atexit

    atexit.register(shutdown_pools)
    if hasattr(os, "register_at_fork"):
        os.register_at_fork(after_in_child=_forget_pools_after_fork)
