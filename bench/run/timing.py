"""Where a run's time goes: the wall seconds of its consecutive phases (set-up, base policy, MLflow,
step-0 eval, training, final eval, finish), printed as one line of its output that
``bench/perf/fixed_cost.py`` reads back from a sweep's run logs."""

from __future__ import annotations

import json
import time
from pathlib import Path

TIMING_PREFIX = "run timing (s): "
"""Starts the line of a run's output that gives its :class:`PhaseClock` laps as JSON."""


class PhaseClock:
    """Wall seconds of a run's consecutive phases: ``lap(name)`` closes the phase that began at the
    previous lap (or at the clock's creation); a name lapped twice adds up."""

    def __init__(self) -> None:
        self.laps: dict[str, float] = {}
        self._last = time.perf_counter()

    def lap(self, name: str) -> None:
        now = time.perf_counter()
        self.laps[name] = round(self.laps.get(name, 0.0) + now - self._last, 3)
        self._last = now

    def line(self) -> str:
        return f"{TIMING_PREFIX}{json.dumps(self.laps)}"


def read_timing(log: str | Path) -> dict[str, float] | None:
    """The phase timings a run printed into its log (the last such line), or None without one."""
    found = None
    for line in Path(log).read_text(errors="replace").splitlines():
        if line.startswith(TIMING_PREFIX):
            found = json.loads(line[len(TIMING_PREFIX) :])
    return found
