"""What a probe has finished, kept as it goes so an interrupted probe resumes (``creditbench credit-probe`` run
again with the same arguments; a judge or ``table --credit --run`` likewise): each reference trajectory, once
every batch and segment of its checkpoints is done, as one file of ``<probe folder>/partial/`` (written whole,
then renamed), with the plan and the numerics it was made under (the fingerprint's ``numerics``: code paths,
CPU vendor, BLAS, threads, library versions; not the machine's model, so a journal resumes on any machine
whose numerics agree, and a committed one carries a long probe from one machine to the next). A resumed probe
takes a journaled trajectory's records as they are -- a trajectory's records depend on its plan, seed and
numerics only, not on which process or round made them (tests/paired/test_resume.py) -- and trains the rest;
its wall time is the journaled trajectories' plus its own (work lost in the interruption is not counted). The
folder goes once updates.json is written. A committed journal is a result like the rest: a change that moves the
numbers removes it with them (tools/regenerate.sh)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from bench.atomic import write_atomic
from bench.errors import CreditBenchError

FOLDER = "partial"


def _normal(obj: Any) -> Any:
    return json.loads(json.dumps(obj))


class Journal:
    """The finished trajectories of one probe in ``folder`` (``None``: nothing kept, nothing resumed)."""

    def __init__(self, folder: Path | None, plan: dict[str, Any], fingerprint: dict[str, Any]):
        self.folder, self.done = folder, {}
        self.mark = time.perf_counter()  # since this process's last journaled trajectory (or its start)
        if folder is None:
            return
        if _held(folder, plan, fingerprint):
            for f in sorted(folder.glob("trajectory-*.json")):
                rec = json.loads(f.read_text())
                self.done[(rec["reference"], rec["seed"])] = rec
        else:
            folder.mkdir(parents=True, exist_ok=True)
            head = {"plan": _normal(plan), "fingerprint": fingerprint}
            write_atomic(folder / "plan.json", json.dumps(head, indent=1) + "\n")

    def get(self, reference: str, seed: int) -> dict[str, Any] | None:
        """The journaled records of trajectory (``reference``, ``seed``): checkpoints, updates, segments."""
        return self.done.get((reference, seed))

    def add(self, reference: str, seed: int, checkpoints: list, updates: list, segments: list) -> None:
        """Keep a finished trajectory, with the wall seconds since the last one this process kept."""
        now = time.perf_counter()
        rec = {"reference": reference, "seed": seed, "checkpoints": checkpoints, "updates": updates,
               "segments": segments, "spent_s": round(now - self.mark, 3)}  # fmt: skip
        self.mark = now
        self.done[(reference, seed)] = rec
        if self.folder is not None:
            write_atomic(self.folder / f"trajectory-{reference}-seed{seed}.json", json.dumps(rec) + "\n")

    def wall_s(self) -> float:
        """The probe's wall time so far: every kept trajectory's seconds (this process's and earlier ones')
        and this process's since its last."""
        return sum(r["spent_s"] for r in self.done.values()) + time.perf_counter() - self.mark


def _held(folder: Path, plan: dict[str, Any], fingerprint: dict[str, Any]) -> bool:
    """Whether ``folder`` holds a journal (of this plan and numerics; another is refused in one line)."""
    path = folder / "plan.json"
    if not path.is_file():
        return False
    held = json.loads(path.read_text())
    numerics = held.get("fingerprint") or {}
    numerics = numerics.get("numerics", numerics)  # a journal of the whole fingerprint, machine and all
    if held.get("plan") != _normal(plan):
        what = "plan"
    elif numerics != _normal(fingerprint):
        what = "numerics (" + ", ".join(_differ(numerics, fingerprint)) + ")"
    else:
        return True
    raise CreditBenchError(f"{folder} holds an interrupted probe of another {what}: move it away to start this "
                           "probe afresh")  # fmt: skip


def _differ(held: dict[str, Any], here: dict[str, Any]) -> list[str]:
    """``field: held -> here`` for each numerics field in which a journal differs from this process."""
    return [f"{k}: {held.get(k)} -> {here.get(k)}" for k in sorted(set(held) | set(here)) if held.get(k) != here.get(k)]


def resumable(folder: Path, plan: dict[str, Any], fingerprint: dict[str, Any]) -> int:
    """How many trajectories the interrupted probe journaled in ``folder`` has kept for this plan (0: no
    journal; one of another plan or numerics is refused), without writing anything."""
    return len(list(folder.glob("trajectory-*.json"))) if _held(folder, plan, fingerprint) else 0
