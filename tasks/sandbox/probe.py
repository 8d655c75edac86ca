"""What a program sees from inside the sandbox: :meth:`tasks.sandbox.Sandbox.isolation`.

A fixed probe (our own code, not a model's) runs under the program's exact command line, after the
same privilege drop and limits, and reports each containment layer as observed from inside.
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
from pathlib import Path

from tasks.sandbox import bwrap as sandbox_bwrap
from tasks.sandbox import seccomp as sandbox_seccomp

PROJECT = str(Path(__file__).resolve().parents[2])  # the checkout (tasks/sandbox/probe.py)
CPU_S = 7  # an unusual value, so the probe can tell its limit from a default

PROBE = r"""
import json, os, resource, sys
import sandbox_child
sandbox_child.start()
status = dict(l.split(":\t", 1) for l in open("/proc/self/status").read().splitlines() if ":\t" in l)
def refused(path):
    try:
        open(path, "w").close()
    except OSError:
        return True
    return False
net = [l.split(":")[0].strip() for l in open("/proc/net/dev").read().splitlines()[2:]]
pids = [p for p in os.listdir("/proc") if p.isdigit()]
tmp = os.statvfs("/tmp")
print(json.dumps({
    "pid_namespace": len(pids) <= 4,
    "network_namespace": net == ["lo"],
    "readonly_filesystem": refused("/usr/creditbench-probe") and refused("/creditbench/probe"),
    "project_hidden": not os.path.exists(PROJECT),
    "private_tmpfs": tmp.f_blocks * tmp.f_frsize <= DISK_MB * 2**20,
    "unprivileged_uid": os.getuid() != 0 and os.geteuid() != 0,
    "no_new_privs": status.get("NoNewPrivs", "0").strip() == "1",
    "seccomp": status.get("Seccomp", "0").strip() == "2",
    "rlimits": resource.getrlimit(resource.RLIMIT_CPU) == (CPU_S, CPU_S),
    "minimal_environment": sorted(os.environ) == ["HOME", "LANG", "PATH", "PWD", "TMPDIR"],
}))
"""


@functools.cache
def layers(disk_mb: int) -> dict[str, bool]:
    """Each layer: True where the probe saw it in force. Raises CreditBenchError without bubblewrap."""
    sandbox_bwrap.check_works()
    code = f"PROJECT = {PROJECT!r}\nDISK_MB = {disk_mb}\nCPU_S = {CPU_S}\n" + PROBE
    r = sandbox_bwrap.pipe_with(sandbox_seccomp.program())
    try:
        cmd = sandbox_bwrap.command("sandbox_child.py", (CPU_S, 256, 8, 1), disk_mb, r, ())
        cmd = cmd[: cmd.index("--") + 1] + [
            sandbox_bwrap.python_executable(),
            "-I",
            "-S",
            "-c",
            "import sys; sys.path.insert(0, '/creditbench')\n" + code,
            *map(str, (CPU_S, 256, 8, 1)),
        ]
        done = subprocess.run(cmd, capture_output=True, timeout=60, check=False, pass_fds=(r,), env={})
    finally:
        os.close(r)
    try:
        seen = json.loads(done.stdout.decode().strip().splitlines()[-1])
    except (ValueError, IndexError):
        seen = {}
    return {"bubblewrap": done.returncode == 0, "separate_grader": True, **{k: bool(v) for k, v in seen.items()}}
