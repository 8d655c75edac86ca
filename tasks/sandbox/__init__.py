"""Grade model-written Python programs against their tests, with the verdict out of the program's reach.

A code task hands ``Sandbox.run`` the program (e.g. a HumanEval prompt + completion), the test
code (HumanEval's ``test + "check(entry_point)"``, MBPP's imports + asserts) and the entry
point's name; the program passes iff the tests run to the end without raising.

**Two processes, two sandboxes.** The program runs in one process (``sandbox_program.py``), which
executes it and then serves calls of its functions. The tests run in another
(``sandbox_grader.py``), the *grader*, where every name they take from the program is a proxy:
a call sends its arguments over a socket, the program's process runs the function, and the
result comes back as plain data (None, bool, int, float, complex, str, bytes, and lists,
tuples, dicts, sets of those, and the standard library's containers by type; capped in size and
depth), decoded by :mod:`tasks.sandbox.wire`
into the grader's own objects. So the values the tests compare, the comparison functions, the
builtins, the modules and the test code itself all live where the program cannot reach them;
the program's prints and exit status are not part of the verdict. The verdict travels on a
pipe from the grader to this process, which the program's process never holds.

**Containment by the kernel** (:mod:`tasks.sandbox.bwrap`): each process runs under bubblewrap
with a read-only view of only the system and Python files, a private size-capped tmpfs, its own
PID, network, IPC and UTS namespaces, a ``/proc`` without the host-wide files, only the two
capabilities the drop to an unprivileged uid needs (none after it), no_new_privs, a seccomp filter
(:mod:`tasks.sandbox.seccomp`) and rlimits on CPU time, address space, file size, processes and
open files. Each run of a program also has (:mod:`tasks.sandbox.bounds`) a uid no concurrently
running program shares, so a neighbour cannot use up its process count, and a cgroup whose memory
and pids limits bound the run as a whole (shared memory, memfds, its tmpfs and every child count);
where cgroups cannot be made it runs without them and says so once, or refuses with
``SandboxLimits(require_cgroups=True)``. A run ends with SIGKILL to both sandboxes; the PID
namespace takes every process of the program with it. Without bubblewrap the sandbox refuses to
run (one line saying how to install it); it never falls back to less isolation.

**Threat model.** Contained: whatever the program computes, imports, patches, prints or exits with;
processes it starts; files it writes (only its tmpfs); the network (none); other processes (not
visible); the grader's state (another address space, reached only by plain data); memory and
processes past the run's own share (its cgroup and uid), so a neighbour's reward is not the
program's to spoil. Not contained: kernel vulnerabilities (the seccomp filter narrows the surface,
it does not remove it); denial of service inside the limits (CPU time, memory, the wall-clock
timeout); reading the world-readable system and Python files that are bound in, the bind mounts'
source paths in the process's own ``/proc/self/mountinfo``, and what ``uname`` and ``sysinfo`` tell
(kernel version, host memory, load, uptime); where no cgroup can be made, memory past RLIMIT_AS held
in shared memory, memfds or forked children. What the grader sees of a result: its value and, for
the standard library's containers (Counter, OrderedDict, defaultdict, deque,
UserList/UserDict/UserString, ChainMap, array, memoryview, dict views), its type; a program's
subclass of one of those or of a builtin arrives as an instance of a class the grader makes (the
same name, none of the program's methods), a namedtuple as a namedtuple the grader makes, so
``isinstance`` and ``type(r) is list`` answer as in one process while the program's ``__eq__`` never
runs. Identity crosses only at the top level of a call: a result that is one of the call's arguments
is the test's own argument object, and a list, dict, set, bytearray or deque argument the call
changed is changed in place in the grader (its nested objects are replaced). Tests that need more
(identity of objects nested in results and arguments or across calls, ``id()``, ``gc``, ``weakref``,
reference counts) are refused when the task loads (:mod:`tasks.sandbox.testcheck`); a program's own
class instances stay opaque markers that equal nothing (the tests may pass them back to the
program), and a callable passed to the program fails it; arguments reach the program as plain data.
The grader imports a module the program bound to a name the tests use only when the test's code
names that module's top-level package itself, never a ``__main__`` module or one whose import has
effects, so a program cannot make the grader run an import of its choosing; its decoder refuses dict
keys and set items of which more than 32 share a hash value, so a reply cannot cost it quadratic
time. Whatever else a large result costs the grader is bounded by its CPU limit and alarm: a verdict
that never comes is an error, never a pass. Functions the task's prompt defines for its tests
(HumanEval 32, 38, 50) belong in the test code, where they are trusted (the task puts them there).
"""

from __future__ import annotations

import math
import os
import signal
import threading
import time
import weakref
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from bench.core import check
from tasks.sandbox import bounds as sandbox_bounds
from tasks.sandbox import bwrap as sandbox_bwrap
from tasks.sandbox import probe as sandbox_probe
from tasks.sandbox import process as sandbox_process
from tasks.sandbox import seccomp as sandbox_seccomp
from tasks.sandbox import spares as sandbox_spares
from tasks.sandbox.server import GraderServer
from tasks.sandbox.testcheck import check_test as check_test

STATUSES = ("passed", "failed", "timeout", "output_limit", "exited", "killed", "error")
MAX_DETAIL = 300
DISK_FILES = 4  # the private tmpfs holds this many files of the maximal size


@dataclass(frozen=True)
class SandboxLimits:
    """Per-program limits (each of the two processes gets the CPU, memory and file limits)."""

    timeout_s: float = 10.0  # wall clock per program
    cpu_s: int = 10  # RLIMIT_CPU
    # RLIMIT_AS per process (address space, not resident memory), and the memory limit of the run's
    # cgroup (every process of the run, shared memory and its tmpfs together; plus the tmpfs's size)
    memory_mb: int = 1024
    # processes and threads of the program: RLIMIT_NPROC of the run's own uid and its cgroup's pids limit
    max_processes: int = 16
    max_file_mb: int = 16  # RLIMIT_FSIZE; the private tmpfs holds DISK_FILES times this
    max_output_kb: int = 256  # stdout + stderr of both processes; more ends the run: "output_limit"
    # True: refuse to run where per-run cgroups cannot be made, rather than bound per process only
    require_cgroups: bool = False

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
        check(
            isinstance(self.require_cgroups, bool),
            f"sandbox require_cgroups must be true or false, got {self.require_cgroups!r}",
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
        self._cgroups, reason = sandbox_bounds.available()
        if reason:
            check(
                not limits.require_cgroups,
                f"the code sandbox cannot make per-run cgroups here ({reason}) and "
                "require_cgroups is set; run where the memory and pids controllers are delegated, or unset it",
            )
            sandbox_bounds.warn_once(reason)
        else:
            sandbox_bounds.remove_stale(self._cgroups)
        self.limits = limits
        self.workers = workers
        self._seccomp = sandbox_seccomp.program()
        self._lock = threading.Lock()
        self._grader: GraderServer | None = None
        self._spares = sandbox_spares.Spares(workers, weakref.WeakMethod(self._start))

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
        if self._grader is None:
            with self._lock:
                if self._grader is None:
                    # the server and one child per job at a time, as the server's own uid
                    grader = (lim.cpu_s, lim.memory_mb, lim.max_processes + 2 * self.workers, lim.max_file_mb)
                    self._grader = GraderServer(grader, DISK_FILES * lim.max_file_mb, self._seccomp)
        started = self._spares.take() or self._start()
        try:
            return self._grade(started, program, test, entry_point, start)
        finally:
            started.run.close()

    def _start(self, spawn=None) -> sandbox_spares.Started:
        return sandbox_spares.start(
            self.limits, self._cgroups, self._seccomp, DISK_FILES * self.limits.max_file_mb, spawn
        )

    def _grade(self, started: sandbox_spares.Started, program: str, test: str, entry_point: str, start: float):
        lim, program_proc, init = self.limits, started.proc, started.init
        verdict_r, verdict_w = os.pipe()
        job_r, job_w = os.pipe()
        try:
            self._grader.submit(job_r, started.channel.fileno(), verdict_w, lim.cpu_s, math.ceil(lim.timeout_s))
        except BaseException:
            for fd in (verdict_r, job_w):
                os.close(fd)
            sandbox_process.kill(program_proc, init)
            raise
        finally:
            started.channel.close()
            os.close(verdict_w)
            os.close(job_r)
        # Each descriptor is closed exactly once: another thread may reuse a closed number at once.
        job_file = os.fdopen(job_w, "wb", buffering=0)
        writes = {program_proc.stdin: program.encode("utf-8", "surrogatepass")}
        writes[job_file] = f"{entry_point}\n{test}".encode("utf-8", "surrogatepass")
        try:
            outcome, verdict = sandbox_process.communicate(
                program_proc, writes, verdict_r, start + lim.timeout_s, lim.max_output_kb * 1024
            )
        finally:
            os.close(verdict_r)
            job_file.close()
            sandbox_process.kill(program_proc, init)
        oom = started.run.oom_killed()
        return _classify(outcome, verdict, program_proc.returncode, lim, time.monotonic() - start, oom)

    def close(self) -> None:
        """Stop the grader's server and the sandboxes started ahead (they also stop when this process exits)."""
        if getattr(self, "_spares", None) is not None:
            self._spares.close()
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


def _signal_name(returncode: int | None) -> str | None:
    """bubblewrap exits with 128 + N when the sandboxed process died of signal N."""
    if returncode is None or not 128 < returncode < 128 + 65:
        return None
    try:
        return signal.Signals(returncode - 128).name
    except ValueError:
        return f"signal {returncode - 128}"


def _classify(
    outcome: str, verdict: bytes, program_rc: int | None, lim: SandboxLimits, wall: float, oom: bool = False
) -> ExecResult:
    def res(status: str, detail: str) -> ExecResult:
        return ExecResult(status == "passed", status, _one_line(detail), wall)

    status, _, detail = verdict.decode("utf-8", "replace").strip().partition(" ")
    if oom and (outcome == "timeout" or (outcome == "done" and status not in ("passed", "failed", "error"))):
        # the kernel ended a process of the run at its cgroup's memory limit
        return res("killed", f"killed by SIGKILL (memory limit of the run: {lim.memory_mb} MB)")
    if outcome == "timeout":
        return res("timeout", f"wall-clock limit of {lim.timeout_s:g} s exceeded")
    if outcome == "output_limit":
        return res("output_limit", f"more than {lim.max_output_kb} KB of output")
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
