"""What both sandboxed processes do first: give up root, set resource limits, read their job.

Loaded (stdlib only) by ``sandbox_program.py`` and ``sandbox_grader.py`` inside bubblewrap before
either has read anything untrusted. Not for import elsewhere: it changes the uid and limits of the
process that calls it.
"""

import fcntl
import os
import resource
import sys

NOBODY = 65534  # the program's uid when started as root
# The grader's uid when not started as root (as root each grader's server takes a uid of its own,
# like a run): not the program's, so the program's processes cannot signal it or use up its
# RLIMIT_NPROC (which counts processes per uid)
GRADER_UID = 65533
CHANNEL_FD = 3  # program <-> grader (a socket; only plain data crosses it)
VERDICT_FD = 4  # grader -> the parent (a pipe; the program has no way to reach it)


def restrict(cpu_s: int, memory_mb: int, nproc: int, fsize_mb: int, uid: int = NOBODY) -> None:
    """Drop to ``uid`` when started as root (bubblewrap starts it with only CAP_SETUID/CAP_SETGID, for
    this; setuid clears them), then rlimits that no process here can raise again (``cpu_s`` <= 0: none
    on CPU time; the grader's server sets it per job)."""
    if os.geteuid() == 0:
        os.setgroups([])
        os.setgid(uid)
        os.setuid(uid)
        if os.geteuid() == 0 or os.getuid() == 0:
            raise SystemExit("sandbox: could not give up root")
    mb = 1 << 20
    cpu = cpu_s if cpu_s > 0 else resource.RLIM_INFINITY
    for res, value in (
        (resource.RLIMIT_CORE, 0),
        (resource.RLIMIT_CPU, cpu),
        (resource.RLIMIT_AS, memory_mb * mb),
        (resource.RLIMIT_FSIZE, fsize_mb * mb),
        (resource.RLIMIT_NPROC, nproc),
        (resource.RLIMIT_NOFILE, 64),
    ):
        resource.setrlimit(res, (value, value))


def read_stdin(fd: int = 0) -> str:
    """All of ``fd`` as text; stdin is /dev/null afterwards (so ``input()`` raises EOFError)."""
    chunks = []
    while chunk := os.read(fd, 1 << 16):
        chunks.append(chunk)
    devnull = os.open("/dev/null", os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    return b"".join(chunks).decode("utf-8", "surrogatepass")


def start(uid: int | None = None) -> None:
    """Read ``CPU_S MEMORY_MB NPROC FSIZE_MB UID FD...`` from argv, move the descriptors to 3, 4, ...
    (fixed numbers, below RLIMIT_NOFILE), then :func:`restrict` (as ``uid`` if given, else argv's:
    the run's own uid, which no concurrently running program shares)."""
    cpu_s, memory_mb, nproc, fsize_mb, argv_uid, *fds = map(int, sys.argv[1:])
    place(fds)
    restrict(cpu_s, memory_mb, nproc, fsize_mb, argv_uid if uid is None else uid)


def place(fds: list[int], first: int = CHANNEL_FD) -> None:
    """Move descriptors to first, first + 1, ... (not inherited by children)."""
    moved = [fcntl.fcntl(fd, fcntl.F_DUPFD, 16) for fd in fds]  # out of the way first
    for fd in fds:
        os.close(fd)
    for target, fd in enumerate(moved, start=first):
        os.dup2(fd, target, inheritable=False)
        os.close(fd)


def describe(exc: BaseException, limit: int = 300) -> str:
    """``Type: message`` on one line, never raising (the message may come from odd objects)."""
    try:
        name = type.__getattribute__(type(exc), "__name__")
        name = name if type(name) is str else "exception"
    except Exception:
        name = "exception"
    try:
        message = str(exc)
    except BaseException:
        message = ""
    text = " ".join(f"{name}: {message}".split()) if message else name
    return text if len(text) <= limit else text[: limit - 3] + "..."
