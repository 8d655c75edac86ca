"""What the sandbox tests share: the limits they run under, how they run one program, how they
judge the result, and how they find what a run could leave behind on the machine."""

from __future__ import annotations

import os
import tempfile
import textwrap

import psutil

from tasks.sandbox import ExecResult, Sandbox, SandboxLimits

LIMITS = SandboxLimits(timeout_s=5, cpu_s=5, memory_mb=512)
PASS_TEST = "assert f(2) == 3"


def sandbox_processes() -> set[int]:
    found = set()
    for p in psutil.process_iter(["cmdline", "uids"]):
        try:
            cmd = " ".join(p.info["cmdline"] or [])
            if "sandbox_harness.py" in cmd or (p.info["uids"] and p.info["uids"].real == 65534):
                found.add(p.pid)
        except (psutil.Error, TypeError):
            pass
    return found


def sandbox_dirs() -> set[str]:
    return {n for n in os.listdir(tempfile.gettempdir()) if n.startswith("creditbench-sandbox-")}


def run_program(sb: Sandbox, program: str, test: str = "assert ok()") -> ExecResult:
    res = sb.run(textwrap.dedent(program), textwrap.dedent(test))
    assert isinstance(res, ExecResult) and isinstance(res.detail, str) and "\n" not in res.detail
    return res


def refused(res: ExecResult, *statuses: str) -> None:
    assert not res.passed, res
    if statuses:
        assert res.status in statuses, res
