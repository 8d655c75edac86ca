"""What one sandboxed run can take from the machine and from its neighbours: memory past its
process's RLIMIT_AS (System V shared memory, memfds, forked children), processes a neighbour needs,
capabilities, host-wide calls and host-wide files of /proc. Each hostile program here gets more
than its share without the bound it tests."""

from __future__ import annotations

import os
import textwrap

import pytest
from sandbox_support import refused, run_program

from bench.errors import CreditBenchError
from tasks.sandbox import Sandbox, SandboxLimits, bounds
from tasks.sandbox import probe as sandbox_probe

pytestmark = pytest.mark.usefixtures("machine_left_as_it_was")
SMALL = SandboxLimits(timeout_s=15, cpu_s=15, memory_mb=128)
RUN_MB = SMALL.memory_mb + 4 * SMALL.max_file_mb + bounds.SLACK_MB  # the run's cgroup limit
needs_cgroups = pytest.mark.skipif(not bounds.available()[0], reason="no delegated memory and pids cgroups here")


@pytest.fixture(scope="module")
def small():
    sb = Sandbox(SMALL, workers=2)
    yield sb
    sb.close()


# 1. memory that no process's address space holds

SHM = """
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
libc.shmat.restype = ctypes.c_void_p
def ok():
    for _ in range(12):  # 12 x 32 MB segments, each attached, filled and detached: RLIMIT_AS never sees them together
        sid = libc.shmget(0, 32 << 20, 0o1600)
        assert sid >= 0, ctypes.get_errno()
        addr = libc.shmat(sid, None, 0)
        ctypes.memset(addr, 1, 32 << 20)
        libc.shmdt(ctypes.c_void_p(addr))
    return True
"""

MEMFD = """
import os
def ok():
    chunk = b"x" * (1 << 20)
    for _ in range(24):  # 24 memfds of 16 MB, written and never mapped
        fd = os.memfd_create("held")
        for _ in range(16):
            os.write(fd, chunk)
    return True
"""


@needs_cgroups
@pytest.mark.parametrize("program", [SHM, MEMFD], ids=["sysv-shm", "memfd"])
def test_memory_outside_the_address_space_counts(small, program):
    res = run_program(small, program)
    refused(res, "killed")
    assert "memory limit" in res.detail, res


FORKS = """
import os, struct, time
def held():
    r, w = os.pipe()
    for _ in range(6):  # each child stays within its own RLIMIT_AS; together they would hold 6 x 48 MB
        try:
            pid = os.fork()
        except OSError:  # the run's memory is spent already
            break
        if pid == 0:
            block = bytearray(48 << 20)
            for i in range(0, len(block), 4096):
                block[i] = 1
            os.write(w, struct.pack("i", os.getpid()))
            time.sleep(10)
            os._exit(0)
    os.close(w)
    time.sleep(1.5)
    os.set_blocking(r, False)
    try:
        filled = [p for (p,) in struct.iter_unpack("i", os.read(r, 64))]
    except BlockingIOError:
        filled = []
    alive = [p for p in filled if os.waitpid(p, os.WNOHANG) == (0, 0)]  # the OOM killer may end a filled child
    return 48 * len(alive)
"""


@needs_cgroups
def test_forked_children_share_one_memory_limit(small):
    res = run_program(small, FORKS, f"mb = held()\nassert mb <= {RUN_MB}, mb")
    assert res.passed, res  # the kernel ended the children past the run's limit


# 2. neighbours: one run's processes cannot starve another's

HOG = """
import os, time
def ok():
    while True:
        try:
            if os.fork() == 0:
                time.sleep(8)
                os._exit(0)
        except OSError:
            break
    time.sleep(3)  # holds every process it may have while its neighbour runs
    return True
"""

THREADED = """
import threading, time
def f(x):
    time.sleep(0.8)  # the neighbour has forked to its limit by now
    out = []
    threads = [threading.Thread(target=out.append, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return x + len(out) - 7
"""


def test_a_fork_bomb_does_not_fail_its_neighbour(small):
    for _ in range(2):
        hog, correct = small.run_many([(textwrap.dedent(HOG), "ok()"), (textwrap.dedent(THREADED), "assert f(2) == 3")])
        assert correct.passed, correct
        assert not hog.passed or hog.status == "passed"  # its own result is its own business


def test_concurrent_runs_have_uids_of_their_own(small):
    program = "import os, time\ndef f():\n    time.sleep(0.5)\n    return os.getuid()\n"
    test = "raise ValueError(f())"
    results = small.run_many([(program, test)] * 2)
    uids = {r.detail for r in results}
    assert all(r.detail.startswith("ValueError: ") for r in results) and len(uids) == 2, results
    if os.geteuid() == 0:
        assert all(int(u.split()[-1]) >= bounds.SLOT_UID_BASE for u in uids), uids


# 3. capabilities, host-wide calls, host-wide files


def test_no_capability_from_the_start(sb):
    """bubblewrap's process in the sandbox (pid 1, root) holds only what the drop to the run's uid
    needs, and the program none."""
    program = """
    def caps(pid):
        fields = dict(l.split(":\\t") for l in open(f"/proc/{pid}/status").read().splitlines() if l.startswith("Cap"))
        return int(fields["CapEff"], 16) | int(fields["CapPrm"], 16)
    """
    res = run_program(sb, program, "assert caps('self') == 0 and caps(1) & ~0xC0 == 0, (caps('self'), caps(1))")
    assert res.passed, res


HOST_CALLS = """
import ctypes, errno, os, platform
libc = ctypes.CDLL(None, use_errno=True)
NR = {"x86_64": {"sync": 162, "syncfs": 306, "io_setup": 206}, "aarch64": {"sync": 81, "syncfs": 267, "io_setup": 0}}
def refused(name, *args):
    ctypes.set_errno(0)
    return libc.syscall(NR[platform.machine()][name], *args) == -1 and ctypes.get_errno() == errno.EPERM
def ok():
    ctx = ctypes.c_ulong(0)
    return refused("io_setup", 65536, ctypes.byref(ctx)) and refused("sync") and refused("syncfs", 0)
"""


def test_host_wide_calls_are_refused(sb):
    res = run_program(sb, HOST_CALLS)
    assert res.passed, res


PROC = """
import os
def hidden(path):
    try:
        return open(path, "rb").read() == b""
    except OSError:
        return True
def ok():
    paths = ["/proc/cmdline", "/proc/1/cmdline", "/proc/meminfo", "/proc/loadavg", "/proc/uptime", "/proc/stat",
             "/proc/sys/kernel/random/boot_id", "/proc/sys/fs/aio-max-nr"]
    seen = [p for p in paths if not hidden(p)]
    assert not seen, seen
    return open("/proc/self/status").read().startswith("Name:")  # the process's own files stay
"""


def test_host_wide_proc_files_are_hidden(sb):
    res = run_program(sb, PROC)
    assert res.passed, res


# 4. the parent's side: cgroups made, removed, refused or degraded in one line


@needs_cgroups
def test_run_cgroups_are_removed_and_stale_ones_cleared():
    hierarchies, _ = bounds.available()
    dead = 2**22 + 1  # above the kernel's pid_max: no process has it
    stale = [h.directory / f"{bounds.PREFIX}{dead}-0" for h in hierarchies]
    for path in stale:
        path.mkdir()
    assert bounds.remove_stale(hierarchies) == len(stale)
    assert not any(p.exists() for p in stale)
    with bounds.RunBounds(hierarchies, 64 << 20, 8) as run:
        made = [path for _, path in run.cgroups]
        assert all(p.is_dir() for p in made) and len(made) == 2
    assert not any(p.exists() for p in made)


def test_without_cgroups_it_refuses_or_degrades_in_one_line(monkeypatch, capsys):
    monkeypatch.setattr(bounds, "available", lambda: ((), "no delegated cgroup memory controller"))
    monkeypatch.setattr(bounds, "_warned", type(bounds._warned)())
    with pytest.raises(CreditBenchError, match="require_cgroups") as info:
        Sandbox(SandboxLimits(require_cgroups=True))
    assert "no delegated cgroup memory controller" in str(info.value) and "\n" not in str(info.value)
    sb = Sandbox(SandboxLimits(timeout_s=5))
    try:
        assert sb.run("def f(x):\n    return x + 1", "assert f(2) == 3").passed
    finally:
        sb.close()
    Sandbox(SandboxLimits(timeout_s=5)).close()
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "without per-run cgroups" in err[0], err
    with pytest.raises(CreditBenchError, match="require_cgroups must be true or false"):
        SandboxLimits(require_cgroups="yes")


def test_isolation_report_names_the_new_layers():
    layers = sandbox_probe.layers(64)
    for name in ("uid_of_its_own", "capabilities_dropped", "proc_narrowed", "host_wide_calls_refused"):
        assert layers[name] is True, layers
    assert layers["memory_cgroup"] is layers["pids_cgroup"] is bool(bounds.available()[0])
