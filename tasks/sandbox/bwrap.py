"""The kernel's containment for :mod:`tasks.sandbox`: bubblewrap command lines.

Each of the two processes of a sandboxed run (the program's and the grader's) starts in a
bubblewrap (``bwrap``) sandbox of its own:

- **filesystem**: a fresh root that holds only ``/usr`` (with the ``/bin``, ``/lib`` links or
  directories beside it), the Python installation, ``/etc/ld.so.cache`` and the sandbox's four
  scripts, all read-only bind mounts; a private ``/tmp`` tmpfs capped in size as the working
  directory; a ``/proc`` of its own PID namespace, without the host-wide files (:data:`PROC_HIDDEN`,
  ``/proc/sys``), and a minimal ``/dev``. Nothing else of the machine (the project, home
  directories, ``/etc``) is visible.
- **namespaces**: new PID, network (loopback only, nothing reachable), IPC, UTS and, where the
  kernel allows, cgroup namespaces. When the PID namespace's first process dies the kernel
  kills every process in it, so nothing outlives the sandbox; ``--die-with-parent`` ties it to
  its parent.
- **identity**: run by root, bubblewrap drops every capability but CAP_SETUID/CAP_SETGID before
  the process starts (``--cap-drop ALL``), and the process at once becomes the run's own uid
  (:mod:`tasks.sandbox.bounds`; the grader ``65533``) with ``sandbox_child.restrict``, which clears
  those two, so RLIMIT_NPROC binds and file permissions apply; run by another user, bubblewrap
  maps that user into a user namespace in which no further user namespaces may be made. Either
  way no_new_privs is set (no setuid binaries) and the environment is four variables.
- **system calls**: a seccomp filter (:mod:`tasks.sandbox.seccomp`) refuses ptrace, mounts,
  namespaces, kernel keyrings, BPF, io_uring and other kernel surface a program has no use for,
  and sockets other than AF_UNIX.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import os
import py_compile
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from bench.errors import CreditBenchError

HERE = Path(__file__).resolve().parent
SOURCES = {"sandbox_wire.py": "wire.py", "sandbox_child.py": "child.py"}
SOURCES |= {"sandbox_program.py": "program.py", "sandbox_grader.py": "grader.py"}
"""The scripts that run inside a sandbox, by the name they have there (a program's own modules cannot
shadow them) -> their file here."""
SCRIPTS = tuple(SOURCES)
INSIDE = "/creditbench"  # where the scripts appear in the sandbox
LINKS = ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
OPTIONAL_FILES = ("/etc/ld.so.cache", "/etc/localtime")
PROC_HIDDEN = (
    "cmdline",
    "1/cmdline",
    "meminfo",
    "loadavg",
    "uptime",
    "stat",
    "vmstat",
    "zoneinfo",
    "buddyinfo",
    "swaps",
    "diskstats",
    "partitions",
    "interrupts",
    "softirqs",
    "keys",
    "key-users",
    "timer_list",
    "sched_debug",
)
"""Host-wide files of ``/proc`` a program has no need to read (the kernel's and bubblewrap's command
lines, the host's memory, load, uptime and devices), each made unreadable; ``/proc/sys`` (boot id,
kernel settings) and ``/proc/pressure`` are empty directories."""
ENVIRONMENT = {"HOME": "/tmp", "PATH": "/usr/bin:/bin", "TMPDIR": "/tmp", "LANG": "C.UTF-8"}
INSTALL_HINT = (
    "install bubblewrap (Debian/Ubuntu: apt-get install bubblewrap; Fedora: dnf install bubblewrap; "
    "bash tests/run.sh installs it where it can) or set CREDITBENCH_BWRAP to its path"
)


@functools.cache
def bwrap_path() -> str:
    """The bubblewrap binary: $CREDITBENCH_BWRAP, else ``bwrap`` on PATH, else a one-line error."""
    path = os.environ.get("CREDITBENCH_BWRAP") or shutil.which("bwrap") or "/usr/bin/bwrap"
    if not (os.path.isfile(path) and os.access(path, os.X_OK)):
        raise CreditBenchError(
            f"code tasks run programs under bubblewrap, which is not installed ({path!r}); {INSTALL_HINT}"
        )
    return path


def python_executable() -> str:
    """The base interpreter (a virtual environment's ``python`` is a link to it; no site-packages
    are used inside the sandbox)."""
    return os.path.realpath(getattr(sys, "_base_executable", None) or sys.executable)


def _under(path: str, roots: list[str]) -> bool:
    return any(path == r or path.startswith(r.rstrip("/") + "/") for r in roots)


@functools.cache
def filesystem() -> tuple[str, ...]:
    """The read-only view, as bubblewrap arguments."""
    args = ["--ro-bind", "/usr", "/usr"]
    bound = ["/usr"]
    for d in LINKS:
        if os.path.islink(d):
            args += ["--symlink", os.readlink(d), d]
        elif os.path.isdir(d):
            args += ["--ro-bind", d, d]
            bound.append(d)
    exe = python_executable()
    made = set()
    for tree in sorted({os.path.realpath(sys.base_prefix), os.path.dirname(os.path.dirname(exe))}):
        if not _under(tree, bound):
            # bubblewrap makes missing parents mode 0700, which uid nobody could not search
            for parent in reversed(Path(tree).parents[:-1]):
                if str(parent) not in made:
                    args += ["--perms", "0755", "--dir", str(parent)]
                    made.add(str(parent))
            args += ["--ro-bind", tree, tree]
            bound.append(tree)
    for f in OPTIONAL_FILES:
        args += ["--ro-bind-try", f, f]
    args += ["--ro-bind", str(compiled_scripts()), INSIDE]
    return tuple(args)


def proc_masks() -> list[str]:
    """bubblewrap arguments that hide :data:`PROC_HIDDEN` (``/proc/1`` is bubblewrap's own process)."""
    present = [f"/proc/{name}" for name in PROC_HIDDEN if os.path.exists(f"/proc/{name}")]  # as on this kernel
    args = [x for path in present for x in ("--ro-bind", "/dev/null", path)]
    for directory in ("sys", "pressure"):
        if os.path.isdir(f"/proc/{directory}"):
            args += ["--tmpfs", f"/proc/{directory}", "--remount-ro", f"/proc/{directory}"]
    return args


@functools.cache
def compiled_scripts() -> Path:
    """A directory with the scripts and their bytecode (so neither process compiles them at every
    start: that alone cost about 15 ms of CPU per process), in the user's cache, keyed by the
    scripts' content and the interpreter. Made once, atomically."""
    digest = hashlib.sha256(sys.version.encode())
    for name in SCRIPTS:
        digest.update((HERE / SOURCES[name]).read_bytes())
    name = f"sandbox-{digest.hexdigest()[:16]}"
    homes = [Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "creditbench"]
    homes.append(Path(tempfile.gettempdir()) / f"creditbench-{os.getuid()}")  # a read-only home
    for cache in homes:
        if (cache / name).is_dir() and _ours(cache):
            return cache / name
    for cache in homes:
        try:
            cache.mkdir(mode=0o755, parents=True, exist_ok=True)
            if _ours(cache):
                return _compile_into(cache, name)
        except OSError:
            continue
    raise CreditBenchError(f"no writable cache for the sandbox's scripts (tried {', '.join(map(str, homes))})")


def _ours(directory: Path) -> bool:
    """A cache directory only this user can write (the scripts in it run in every sandbox)."""
    st = directory.stat()
    return st.st_uid == os.getuid() and not st.st_mode & 0o022


def _compile_into(cache: Path, name: str) -> Path:
    target = cache / name
    staging = Path(tempfile.mkdtemp(prefix=".sandbox-", dir=cache))
    for script in SCRIPTS:
        shutil.copyfile(HERE / SOURCES[script], staging / script)
        py_compile.compile(
            str(staging / script),
            cfile=importlib.util.cache_from_source(str(staging / script)),
            doraise=True,
            invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH,
        )
    for path in [staging, *staging.rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)
    try:
        staging.rename(target)
    except OSError:  # another process made it first
        shutil.rmtree(staging, ignore_errors=True)
    return target


def command(
    script: str,
    limits: tuple[int, ...],
    disk_mb: int,
    seccomp_fd: int | None,
    fds: tuple[int, ...],
    entry: str = "main",
    info_fd: int | None = None,
) -> list[str]:
    """The command line that runs ``entry()`` of ``script`` (one of SCRIPTS) with its limits and
    descriptors."""
    root = os.geteuid() == 0
    ns = ["--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try"]
    if root:  # no user namespace: the process drops to nobody itself, so NPROC and permissions bind
        ns += ["--cap-drop", "ALL", "--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID"]
    else:
        ns += ["--unshare-user", "--disable-userns"]
    env = [x for k, v in ENVIRONMENT.items() for x in ("--setenv", k, v)]
    seccomp = ["--seccomp", str(seccomp_fd)] if seccomp_fd is not None else []
    if info_fd is not None:  # bubblewrap writes {"child-pid": N, ...} there: the namespace's first process
        seccomp += ["--info-fd", str(info_fd)]
    return [
        bwrap_path(),
        *ns,
        "--die-with-parent",
        "--new-session",
        "--hostname",
        "sandbox",
        "--clearenv",
        *env,
        *filesystem(),
        "--proc",
        "/proc",
        *proc_masks(),
        "--dev",
        "/dev",
        "--perms",
        "1777",
        "--size",
        str(disk_mb << 20),
        "--tmpfs",
        "/tmp",
        "--chdir",
        "/tmp",
        *seccomp,
        "--",
        python_executable(),
        "-I",
        "-S",
        "-B",
        "-c",
        f"import sys; sys.path.insert(0, {INSIDE!r}); import {script.removesuffix('.py')} as s; s.{entry}()",
        *map(str, limits),
        *map(str, fds),
    ]


@functools.cache
def check_works() -> None:
    """One run of ``true`` under the same options, so that a machine where bubblewrap cannot make
    its namespaces fails with bubblewrap's own reason, once, before any program is graded."""
    cmd = command("sandbox_child.py", (), 1, None, ())
    cmd = cmd[: cmd.index("--") + 1] + [python_executable(), "-I", "-S", "-c", "pass"]
    try:
        done = subprocess.run(cmd, capture_output=True, timeout=60, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise CreditBenchError(f"bubblewrap could not start the sandbox: {exc}") from None
    if done.returncode != 0:
        reason = (done.stderr.decode("utf-8", "replace").strip().splitlines() or [f"status {done.returncode}"])[-1]
        raise CreditBenchError(
            f"bubblewrap cannot make the sandbox on this machine ({reason}); the code sandbox does not run "
            "without it (unprivileged user namespaces may be disabled: see bubblewrap's documentation)"
        )


def pipe_with(data: bytes) -> int:
    """A pipe's read end holding ``data`` (the seccomp filter; a few hundred bytes)."""
    r, w = os.pipe()
    try:
        os.write(w, data)
    finally:
        os.close(w)
    return r
