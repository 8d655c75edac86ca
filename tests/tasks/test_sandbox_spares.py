"""Program sandboxes started ahead of their program: a run takes one, another is started, a dead one
is replaced, and closing ends them."""

from __future__ import annotations

import os
import signal
import time

import pytest
from sandbox_support import LIMITS

from tasks.sandbox import Sandbox, spares

PROGRAM, TEST = "def f(x):\n    return x + 1", "assert f(2) == 3"


@pytest.fixture
def sandbox():
    sb = Sandbox(LIMITS, workers=2)
    yield sb
    sb.close()


def ready(sb: Sandbox) -> list[int]:
    spares.settle()
    with sb._spares.lock:
        return [s.proc.pid for s in sb._spares.ready]


def test_runs_take_spares_and_closing_ends_them(sandbox):
    assert sandbox.run(PROGRAM, TEST).passed
    first = ready(sandbox)
    assert len(first) == 2  # one per worker, started while nothing waits for them
    assert sandbox.run(PROGRAM, TEST).passed
    second = ready(sandbox)
    assert len(second) == 2 and len(set(first) & set(second)) == 1  # one was taken, one started
    with sandbox._spares.lock:
        cgroups = [path for spare in sandbox._spares.ready for _, path in spare.run.cgroups]
    assert len(cgroups) == 2 * len(second) or not cgroups  # none where cgroups cannot be made
    sandbox.close()
    assert not ready(sandbox)
    for pid in second:
        assert not os.path.exists(f"/proc/{pid}") or open(f"/proc/{pid}/stat").read().split()[2] == "Z"
    assert not any(os.path.exists(c) for c in cgroups)


def test_a_dead_spare_is_replaced(sandbox):
    assert sandbox.run(PROGRAM, TEST).passed
    for pid in ready(sandbox):
        os.killpg(pid, signal.SIGKILL)
    with sandbox._spares.lock:
        killed = [s.proc for s in sandbox._spares.ready]
    deadline = time.monotonic() + 10
    while any(proc.poll() is None for proc in killed) and time.monotonic() < deadline:
        time.sleep(0.01)  # SIGKILL is delivered at once, but the exit is not: wait until both are dead
    assert all(proc.poll() is not None for proc in killed)
    results = sandbox.run_many([(PROGRAM, TEST), ("def f(x):\n    return x", TEST)])
    assert [r.passed for r in results] == [True, False], results
