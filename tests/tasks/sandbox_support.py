"""What the sandbox tests share: the limits they run under, how they run one program, how they
judge the result, and how they find what a run could leave behind on the machine."""

from __future__ import annotations

import os
import tempfile
import textwrap

import psutil

from tasks.sandbox import ExecResult, Sandbox, SandboxLimits
from tasks.sandbox.bounds import PREFIX, SLOT_UID_BASE, SLOTS, available

LIMITS = SandboxLimits(timeout_s=5, cpu_s=5, memory_mb=512)
PASS_TEST = "assert f(2) == 3"


def sandbox_processes() -> set[int]:
    """Every process of a program (its run's uid, uid nobody, or its bubblewrap) and every grading child (uid
    65533 under a grader server); the servers themselves live as long as their Sandbox."""
    found, uids = set(), {}
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
            if (
                uid == 65534
                or own_uid
                or "sandbox_program" in cmd
                or (uid == 65533 and uids.get(p.info["ppid"]) == 65533)
            ):
                found.add(p.pid)
        except (psutil.Error, TypeError):
            pass
    return found


def sandbox_dirs() -> set[str]:
    """The sandbox's temporary directories and the runs' cgroups."""
    found = {n for n in os.listdir(tempfile.gettempdir()) if n.startswith("creditbench-sandbox-")}
    for h in available()[0]:
        found |= {str(p) for p in h.directory.glob(f"{PREFIX}*")}
    return found


def run_program(sb: Sandbox, program: str, test: str = "assert ok()") -> ExecResult:
    res = sb.run(textwrap.dedent(program), textwrap.dedent(test))
    assert isinstance(res, ExecResult) and isinstance(res.detail, str) and "\n" not in res.detail
    return res


def refused(res: ExecResult, *statuses: str) -> None:
    assert not res.passed, res
    if statuses:
        assert res.status in statuses, res
