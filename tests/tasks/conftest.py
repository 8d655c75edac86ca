"""Fixtures of the sandbox tests (test_sandbox.py and test_sandbox_containment.py)."""

from __future__ import annotations

import time

import pytest
from sandbox_support import LIMITS, describe, sandbox_dirs, sandbox_processes

from tasks.sandbox import Sandbox


@pytest.fixture(scope="module")
def sb() -> Sandbox:
    return Sandbox(LIMITS, workers=2)


@pytest.fixture
def machine_left_as_it_was():
    """No sandbox process, temporary directory or cgroup outlives the test (the sandbox tests use it on
    every test: ``pytestmark = pytest.mark.usefixtures("machine_left_as_it_was")``)."""
    procs, dirs = sandbox_processes(), sandbox_dirs()
    yield
    left = sandbox_processes() - procs
    if left:  # ending now (a dropped Sandbox ends its spares) is not surviving
        time.sleep(0.5)
        left &= sandbox_processes()
    assert not left, f"sandbox processes survived the run: {describe(left)}"
    assert sandbox_dirs() <= dirs, "sandbox temp dirs were left behind"
