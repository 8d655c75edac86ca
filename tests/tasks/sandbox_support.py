"""What the sandbox tests share: the limits they run under, how they run one program, how they
judge the result, and how they find what a run could leave behind on the machine."""

from __future__ import annotations

import os
import tempfile
import textwrap

import psutil

from tasks.sandbox import ExecResult, Sandbox, SandboxLimits
from tasks.sandbox.bounds import PREFIX, SLOT_UID_BASE, SLOTS, available
from tasks.sandbox.spares import settle, waiting

LIMITS = SandboxLimits(timeout_s=5, cpu_s=5, memory_mb=512)
PASS_TEST = "assert f(2) == 3"


def sandbox_processes() -> set[int]:
    """Every process of a program (its run's uid, uid nobody, or its bubblewrap) and every grading child (uid
    65533 under a grader server); the servers themselves live as long as their Sandbox."""
    found, uids = set(), {}
    settle()
    spares, _ = waiting()  # started ahead, waiting for a program: the Sandbox's, not a leftover
    procs = list(psutil.process_iter(["cmdline", "uids", "ppid"]))
    for p in procs:
        try:
            uids[p.pid] = p.info["uids"].real if p.info["uids"] else None
        except (psutil.Error, TypeError):
            pass
    for p in procs:
        try:
            cmd = " ".join(p.info["cmdline"] or [])
            uid = uids.get(p.pid)
            own_uid = uid is not None and SLOT_UID_BASE <= uid < SLOT_UID_BASE + SLOTS  # a run's own uid
            if own_uid and "sandbox_grader" in cmd and uids.get(p.info["ppid"]) == 0:
                continue  # a grader's server (under bubblewrap's root process): it lives as long as its Sandbox
            if (
                uid == 65534
                or own_uid
                or "sandbox_program" in cmd
                or (uid == 65533 and uids.get(p.info["ppid"]) == 65533)
            ):
                found.add(p.pid)
        except (psutil.Error, TypeError):
            pass
    return {pid for pid in found if not _under(pid, spares)}


def _under(pid: int, spares: set[int]) -> bool:
    """``pid`` is a spare's bubblewrap or runs under one (its processes may start after it is listed)."""
    try:
        return pid in spares or any(p.pid in spares for p in psutil.Process(pid).parents())
    except psutil.Error:
        return False


def describe(pids: set[int]) -> str:
    """Each process's pid, uid, parent and command line (for a failing check)."""
    out = []
    for pid in sorted(pids):
        try:
            p = psutil.Process(pid)
            out.append(f"{pid} (uid {p.uids().real}, parent {p.ppid()}, {p.status()}): {' '.join(p.cmdline())[:200]}")
        except psutil.Error as exc:
            out.append(f"{pid}: {type(exc).__name__}")
    return "; ".join(out)


def sandbox_dirs() -> set[str]:
    """The sandbox's temporary directories and the runs' cgroups (not those of spares)."""
    found = {n for n in os.listdir(tempfile.gettempdir()) if n.startswith("creditbench-sandbox-")}
    settle()
    _, spare_cgroups = waiting()
    for h in available()[0]:
        found |= {str(p) for p in h.directory.glob(f"{PREFIX}*")} - spare_cgroups
    return found


def run_program(sb: Sandbox, program: str, test: str = "assert ok()") -> ExecResult:
    res = sb.run(textwrap.dedent(program), textwrap.dedent(test))
    assert isinstance(res, ExecResult) and isinstance(res.detail, str) and "\n" not in res.detail
    return res


def refused(res: ExecResult, *statuses: str) -> None:
    assert not res.passed, res
    if statuses:
        assert res.status in statuses, res
