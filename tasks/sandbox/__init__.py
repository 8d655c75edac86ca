"""Grade model-written Python programs against their tests, with the verdict out of the program's reach.

A code task hands ``Sandbox.run`` the program (e.g. a HumanEval prompt + completion), the test
code (HumanEval's ``test + "check(entry_point)"``, MBPP's imports + asserts) and the entry
point's name; the program passes iff the tests run to the end without raising.

**Two processes, two sandboxes.** The program runs in one process (``sandbox_program.py``), which
executes it and then serves calls of its functions. The tests run in another
(``sandbox_grader.py``), the *grader*, where every name they take from the program is a proxy:
a call sends its arguments over a socket, the program's process runs the function, and the
result comes back as plain data (None, bool, int, float, complex, str, bytes, and lists,
tuples, dicts, sets of those; capped in size and depth), decoded by :mod:`tasks.sandbox.wire`
into the grader's own objects. So the values the tests compare, the comparison functions, the
builtins, the modules and the test code itself all live where the program cannot reach them;
the program's prints and exit status are not part of the verdict. The verdict travels on a
pipe from the grader to this process, which the program's process never holds.

**Containment by the kernel** (:mod:`tasks.sandbox.bwrap`): each process runs under bubblewrap
with a read-only view of only the system and Python files, a private size-capped tmpfs, its own
PID, network, IPC and UTS namespaces, uid ``nobody`` (or a user namespace when not root),
no_new_privs, a seccomp filter (:mod:`tasks.sandbox.seccomp`) and rlimits on CPU time, address
space, file size, processes and open files. A run ends with SIGKILL to both sandboxes; the PID
namespace takes every process of the program with it. Without bubblewrap the sandbox refuses to
run (one line saying how to install it); it never falls back to less isolation.

**Threat model.** Contained: whatever the program computes, imports, patches, prints or exits
with; processes it starts; files it writes (only its tmpfs); the network (none); other
processes (not visible); the grader's state (another address space, reached only by plain data).
Not contained: kernel vulnerabilities (the seccomp filter narrows the surface, it does not remove
it); denial of service inside the limits (CPU time, memory, the wall-clock timeout); reading the
world-readable system and Python files that are bound in. What the grader cannot see: an object's
identity or type beyond plain data, so a test that needs more (a program's own class instance, a
callable passed to the program, a mutated argument) fails the program; HumanEval and MBPP need
none of these. Functions the task's prompt defines for its tests (HumanEval 32, 38, 50) belong in
the test code, where they are trusted (the task puts them there).
"""

from __future__ import annotations

import json
import math
import os
import select
import selectors
import signal
import socket
import subprocess
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from bench.core import check
from tasks.sandbox import bwrap as sandbox_bwrap
from tasks.sandbox import probe as sandbox_probe
from tasks.sandbox import seccomp as sandbox_seccomp
from tasks.sandbox.server import GraderServer

STATUSES = ("passed", "failed", "timeout", "output_limit", "exited", "killed", "error")
MAX_DETAIL = 300
DISK_FILES = 4  # the private tmpfs holds this many files of the maximal size
READ_CHUNK = 1 << 16
VERDICT_CAP = 4096


@dataclass(frozen=True)
class SandboxLimits:
    """Per-program limits (each of the two processes gets the CPU, memory and file limits)."""

    timeout_s: float = 10.0  # wall clock per program
    cpu_s: int = 10  # RLIMIT_CPU
    memory_mb: int = 1024  # RLIMIT_AS (address space, not resident memory)
    # RLIMIT_NPROC counts every process and thread of uid nobody, so concurrent runs share it;
    # the sandbox adds two per worker (each run's two processes).
    max_processes: int = 16
    max_file_mb: int = 16  # RLIMIT_FSIZE; the private tmpfs holds DISK_FILES times this
    max_output_kb: int = 256  # stdout + stderr of both processes; more ends the run: "output_limit"

    def __post_init__(self) -> None:
        t = self.timeout_s
        check(
            isinstance(t, (int, float)) and not isinstance(t, bool) and math.isfinite(t) and 0 < t <= 3600,
            f"sandbox timeout_s must be a number of seconds in (0, 3600], got {t!r}",
        )
        for name, low in (
            ("cpu_s", 1),
            ("memory_mb", 64),
            ("max_processes", 1),
            ("max_file_mb", 1),
            ("max_output_kb", 1),
        ):
            value = getattr(self, name)
            check(
                isinstance(value, int) and not isinstance(value, bool) and value >= low,
                f"sandbox {name} must be an integer >= {low}, got {value!r}",
            )


@dataclass(frozen=True)
class ExecResult:
    passed: bool
    status: str  # one of STATUSES
    detail: str  # one line: the failing test's exception or the reason, at most MAX_DETAIL characters
    wall_s: float


class Sandbox:
    """Runs programs against their tests; thread-safe, never raises for what a program does.

    Construction checks that bubblewrap is installed and works here, and raises a one-line
    :class:`~bench.errors.CreditBenchError` saying how to install it otherwise."""

    def __init__(self, limits: SandboxLimits = SandboxLimits(), workers: int = 1):
        check(isinstance(limits, SandboxLimits), f"sandbox limits must be a SandboxLimits, got {type(limits).__name__}")
        check(
            isinstance(workers, int) and not isinstance(workers, bool) and workers >= 1,
            f"sandbox workers must be an integer >= 1, got {workers!r}",
        )
        sandbox_bwrap.check_works()
        self.limits = limits
        self.workers = workers
        self._seccomp = sandbox_seccomp.program()
        self._lock = threading.Lock()
        self._grader: GraderServer | None = None

    def run(self, program: str, test: str, entry_point: str = "") -> ExecResult:
        """Run ``test`` against ``program``; ``entry_point`` names the function the tests call (it
        is taken from the program even when it shadows a builtin)."""
        start = time.monotonic()
        try:
            check(
                isinstance(program, str) and isinstance(test, str) and isinstance(entry_point, str),
                "sandbox program, test and entry_point must be strings",
            )
            check(entry_point == "" or entry_point.isidentifier(), f"entry_point must be a name, got {entry_point!r}")
            return self._spawn(program, test, entry_point, start)
        except Exception as exc:  # a harness or machine problem, never the program's doing
            return ExecResult(False, "error", _one_line(f"{type(exc).__name__}: {exc}"), time.monotonic() - start)

    def run_many(self, jobs: list[tuple[str, ...]]) -> list[ExecResult]:
        """``run`` for each (program, test[, entry_point]), up to ``workers`` at a time; results in
        job order."""
        if self.workers == 1 or len(jobs) <= 1:
            return [self.run(*job) for job in jobs]
        with ThreadPoolExecutor(min(self.workers, len(jobs)), thread_name_prefix="sandbox") as pool:
            return list(pool.map(lambda job: self.run(*job), jobs))

    @staticmethod
    def isolation() -> dict[str, bool]:
        """Which containment layers a program sees on this machine (read from inside a sandbox)."""
        return dict(sandbox_probe.layers(DISK_FILES * SandboxLimits().max_file_mb))

    def _spawn(self, program: str, test: str, entry_point: str, start: float) -> ExecResult:
        lim = self.limits
        limits = (lim.cpu_s, lim.memory_mb, lim.max_processes + 2 * self.workers, lim.max_file_mb)
        if self._grader is None:
            with self._lock:
                if self._grader is None:
                    self._grader = GraderServer(limits, DISK_FILES * lim.max_file_mb, self._seccomp)
        ends = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        verdict_r, verdict_w = os.pipe()
        job_r, job_w = os.pipe()
        program_proc, init = None, None
        try:
            seccomp_fd = sandbox_bwrap.pipe_with(self._seccomp)
            info_r, info_w = os.pipe()
            try:
                fds = (ends[1].fileno(),)
                cmd = sandbox_bwrap.command(
                    "sandbox_program.py", limits, DISK_FILES * lim.max_file_mb, seccomp_fd, fds, info_fd=info_w
                )
                program_proc = _popen(cmd, (*fds, seccomp_fd, info_w))
            finally:
                os.close(seccomp_fd)
                os.close(info_w)
            try:
                init = _namespace_init(info_r, program_proc.pid, start + lim.timeout_s)
            finally:
                os.close(info_r)
            self._grader.submit(job_r, ends[0].fileno(), verdict_w, lim.cpu_s, math.ceil(lim.timeout_s))
        except BaseException:
            for fd in (verdict_r, job_w):
                os.close(fd)
            if program_proc is not None:
                _kill(program_proc, init)
            raise
        finally:
            for end in ends:
                end.close()
            os.close(verdict_w)
            os.close(job_r)
        # Each descriptor is closed exactly once: another thread may reuse a closed number at once.
        job_file = os.fdopen(job_w, "wb", buffering=0)
        writes = {program_proc.stdin: program.encode("utf-8", "surrogatepass")}
        writes[job_file] = f"{entry_point}\n{test}".encode("utf-8", "surrogatepass")
        try:
            outcome, verdict = _communicate(
                program_proc, writes, verdict_r, start + lim.timeout_s, lim.max_output_kb * 1024
            )
        finally:
            os.close(verdict_r)
            job_file.close()
            _kill(program_proc, init)
        return _classify(outcome, verdict, program_proc.returncode, lim, time.monotonic() - start)

    def close(self) -> None:
        """Stop the grader's server (it also stops when this process exits)."""
        if self._grader is not None:
            self._grader.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass


def _one_line(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= MAX_DETAIL else text[: MAX_DETAIL - 3] + "..."


def _popen(cmd: list[str], fds: tuple[int, ...]) -> subprocess.Popen:
    return subprocess.Popen(
        cmd,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        pass_fds=fds,
        close_fds=True,
        start_new_session=True,
        env={},
    )


def _namespace_init(info_fd: int, bwrap_pid: int, deadline: float) -> int | None:
    """A pidfd of the PID namespace's first process, from bubblewrap's --info-fd report (checked to
    be bubblewrap's child, so a recycled pid is never taken). None if it has already exited."""
    data = b""
    while time.monotonic() < deadline:
        ready, _, _ = select.select([info_fd], [], [], max(0.0, deadline - time.monotonic()))
        if not ready:
            break
        chunk = os.read(info_fd, 4096)
        if not chunk:
            break
        data += chunk
    try:
        pid = int(json.loads(data)["child-pid"])
        pidfd = os.pidfd_open(pid)
    except (ValueError, KeyError, TypeError, OSError):
        return None
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            ppid = int(f.read().rsplit(b")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        ppid = -1
    if ppid != bwrap_pid:
        os.close(pidfd)
        return None
    return pidfd


def _kill(p: subprocess.Popen, init: int | None = None) -> None:
    """SIGKILL the PID namespace's first process, which takes every process of the program with
    it, and wait until it is gone (so nothing the program started outlives the call); then
    bubblewrap's session. Reap without hanging."""
    if init is not None:
        try:
            signal.pidfd_send_signal(init, signal.SIGKILL)
            select.select([init], [], [], 5)  # readable once it has exited, after all the others
        except OSError:
            pass
        finally:
            os.close(init)
    try:
        os.killpg(p.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    for f in (p.stdin, p.stdout, p.stderr):
        try:
            f.close()
        except OSError:
            pass
    try:
        p.wait(timeout=5)
    except subprocess.TimeoutExpired:  # stuck in the kernel; do not hang the caller
        pass


def _communicate(
    program: subprocess.Popen, writes: dict, verdict_fd: int, deadline: float, cap: int
) -> tuple[str, bytes]:
    """Feed the program and the test to their processes, count the program's output, read the
    grader's verdict until it closes. Returns ("done" | "timeout" | "output_limit", verdict bytes).
    Output is counted, not kept."""
    verdict, total = bytearray(), 0
    sent = dict.fromkeys(writes, 0)
    with selectors.DefaultSelector() as sel:
        for f in writes:
            os.set_blocking(f.fileno(), False)
            sel.register(f, selectors.EVENT_WRITE, "write")
        sel.register(program.stdout.fileno(), selectors.EVENT_READ, "output")
        sel.register(program.stderr.fileno(), selectors.EVENT_READ, "output")
        sel.register(verdict_fd, selectors.EVENT_READ, "verdict")
        while any(key.data == "verdict" for key in sel.get_map().values()):
            now = time.monotonic()
            if now >= deadline:
                return "timeout", bytes(verdict)
            for key, _ in sel.select(timeout=min(deadline - now, 0.5)):
                if key.data == "write":
                    f = key.fileobj
                    data = writes[f]
                    try:
                        sent[f] += os.write(key.fd, data[sent[f] : sent[f] + READ_CHUNK])
                    except BlockingIOError:
                        continue
                    except OSError:  # the reader is gone
                        sent[f] = len(data)
                    if sent[f] >= len(data):
                        sel.unregister(f)
                        f.close()  # end of input; the file object makes a second close harmless
                    continue
                try:
                    data = os.read(key.fd, READ_CHUNK)
                except OSError:
                    data = b""
                if not data:
                    sel.unregister(key.fd)
                    continue
                if key.data == "verdict":
                    verdict += data[: VERDICT_CAP - len(verdict)]
                    continue
                total += len(data)
                if total > cap:
                    return "output_limit", bytes(verdict)
    try:  # the program's process ends when the grader closes the channel; its status may be needed
        program.wait(timeout=0.2)
    except subprocess.TimeoutExpired:
        pass
    return "done", bytes(verdict)


def _signal_name(returncode: int | None) -> str | None:
    """bubblewrap exits with 128 + N when the sandboxed process died of signal N."""
    if returncode is None or not 128 < returncode < 128 + 65:
        return None
    try:
        return signal.Signals(returncode - 128).name
    except ValueError:
        return f"signal {returncode - 128}"


def _classify(outcome: str, verdict: bytes, program_rc: int | None, lim: SandboxLimits, wall: float) -> ExecResult:
    def res(status: str, detail: str) -> ExecResult:
        return ExecResult(status == "passed", status, _one_line(detail), wall)

    if outcome == "timeout":
        return res("timeout", f"wall-clock limit of {lim.timeout_s:g} s exceeded")
    if outcome == "output_limit":
        return res("output_limit", f"more than {lim.max_output_kb} KB of output")
    status, _, detail = verdict.decode("utf-8", "replace").strip().partition(" ")
    hints = {"SIGXCPU": " (CPU time limit)", "SIGXFSZ": " (file size limit)"}
    if status == "passed" and not detail:
        return res("passed", "")
    if status in ("failed", "exited", "error"):
        return res(status, detail)
    if status == "ended":  # the program's process died; its exit status says how
        name = _signal_name(program_rc)
        if name is not None:
            return res("killed", f"killed by {name}{hints.get(name, '')}")
        return res("exited", f"the program ended its process (status {program_rc}) before its tests finished")
    # The grader died without a verdict: its CPU limit or alarm (the program can make its work
    # heavy with large results), or the server was stopped. Never a pass.
    return res("error", "the grader gave no verdict")
