"""What a program sees from inside the sandbox: :meth:`tasks.sandbox.Sandbox.isolation`.

A fixed probe (our own code, not a model's) runs under the program's exact command line, after the
same privilege drop and limits, and reports each containment layer as observed from inside.
"""

from __future__ import annotations

import functools
import json
import os
import platform
import subprocess
from pathlib import Path

from tasks.sandbox import bounds as sandbox_bounds
from tasks.sandbox import bwrap as sandbox_bwrap
from tasks.sandbox import child as sandbox_child
from tasks.sandbox import seccomp as sandbox_seccomp

PROJECT = str(Path(__file__).resolve().parents[2])  # the checkout (tasks/sandbox/probe.py)
CPU_S = 7  # an unusual value, so the probe can tell its limit from a default

PROBE = r"""
import json, os, resource, sys
import sandbox_child
def caps():
    status = dict(l.split(":\t", 1) for l in open("/proc/self/status").read().splitlines() if ":\t" in l)
    return status, int(status["CapEff"], 16) | int(status["CapPrm"], 16)
_, first = caps()  # as bubblewrap started it, before the drop to the run's uid
sandbox_child.start()
status, last = caps()
def unreadable(path):
    try:
        return open(path, "rb").read() == b""
    except OSError:
        return True
def sync_refused():  # glibc's sync() returns nothing: ask the kernel directly
    import ctypes, errno
    libc = ctypes.CDLL(None, use_errno=True)
    return libc.syscall(SYNC_NR) == -1 and ctypes.get_errno() == errno.EPERM
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
    "uid_of_its_own": os.getuid() not in (65533, 65534),
    "capabilities_dropped": first & ~0xC0 == 0 and last == 0,
    "proc_narrowed": all(unreadable(p) for p in ("/proc/cmdline", "/proc/1/cmdline", "/proc/meminfo"))
    and not os.listdir("/proc/sys"),
    "host_wide_calls_refused": sync_refused(),
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
    sync_nr = sandbox_seccomp.DENIED.get(platform.machine(), {}).get("sync", -1)
    code = f"PROJECT = {PROJECT!r}\nDISK_MB = {disk_mb}\nCPU_S = {CPU_S}\nSYNC_NR = {sync_nr}\n" + PROBE
    cgroups, _ = sandbox_bounds.available()
    r = sandbox_bwrap.pipe_with(sandbox_seccomp.program())
    try:
        with sandbox_bounds.RunBounds(cgroups, 256 << 20, 16) as run:
            uid = sandbox_child.NOBODY if run.uid is None else run.uid
            argv = tuple(map(str, (CPU_S, 256, 8, 1, uid)))
            cmd = sandbox_bwrap.command("sandbox_child.py", (), disk_mb, r, ())
            cmd = cmd[: cmd.index("--") + 1] + [
                sandbox_bwrap.python_executable(),
                "-I",
                "-S",
                "-c",
                "import sys; sys.path.insert(0, '/creditbench')\n" + code,
                *argv,
            ]
            cmd, env = run.wrap(cmd)
            done = subprocess.run(cmd, capture_output=True, timeout=60, check=False, pass_fds=(r,), env=env)
    finally:
        os.close(r)
    try:
        seen = json.loads(done.stdout.decode().strip().splitlines()[-1])
    except (ValueError, IndexError):
        seen = {}
    ran = done.returncode == 0
    # The shell that starts bubblewrap enters both of the run's cgroups first, or exits before it starts.
    bounded = {"memory_cgroup": ran and bool(cgroups), "pids_cgroup": ran and bool(cgroups)}
    return {"bubblewrap": ran, "separate_grader": True, **bounded, **{k: bool(v) for k, v in seen.items()}}
