"""Where the math grader's verdicts are computed: shared pools of killable worker processes.

Long-lived worker processes started with multiprocessing's "spawn" context (safe from a
multi-threaded parent with torch or CUDA loaded). A worker runs ``tasks/grading/math_verdict.py``
standalone, without the ``tasks`` package or torch, so it starts in about a second; it grades in
its own main thread, where the signal timeouts work, under an address-space cap of
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
"""

from __future__ import annotations

import atexit
import os
import threading
import time
from collections import deque
from multiprocessing.connection import wait

from tasks.grading import math_verdict
from tasks.grading.math_verdict import WORKER_RUN_NAME, wrong

WORKER_START_TIMEOUT = 120.0  # seconds a new worker may take to import math-verify and report


def deadline_seconds(timeout: int) -> float:
    """The pool's hard per-item limit: generous for five ``timeout``-bounded steps that each
    finish in time, and short of a hang."""
    return 3 * timeout + 1


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
            args=(os.path.abspath(math_verdict.__file__),),
            kwargs={"init_globals": {"_WORKER_CONN": child_conn}, "run_name": WORKER_RUN_NAME},
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
                "`if __name__ == '__main__':`"
            )
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
                        i, rest = w.chunk[w.pos], w.chunk[w.pos + 1 :]
                        if dead and i not in died:  # maybe not the item's fault: once more
                            died.add(i)
                            rest = [i] + rest
                        else:
                            out[i] = wrong("worker died" if dead else "timeout", flexible)
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


def shared_pool(size: int) -> _Pool:
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


atexit.register(shutdown_pools)
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_pools_after_fork)
