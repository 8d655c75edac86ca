"""The Python layer of the sandbox harness: the audit hook, and stubs for what it cannot see.

Not a module to import: ``sandbox_harness.py`` runs this file in the sandboxed child (see there
for how and why). :func:`make_hook` builds the hook the harness installs, which cannot be removed,
before the program runs; :class:`SandboxViolation` is what every refusal of the harness raises.
"""

import _posixsubprocess
import _signal
import os
import sys

# Captured when the harness loads this file, before the program runs: the program may rebind
# module attributes (even os.stat_result.st_mode).
lstat, stat, readlink, getcwd = os.lstat, os.stat, os.readlink, os.getcwd

S_IFMT, S_IFLNK, S_IFDIR = 0o170000, 0o120000, 0o040000
WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
# Modules that reach the OS without audit events (ctypes: anything; _posixsubprocess: fork+exec;
# _posixshmem/_multiprocessing: /dev/shm; dbm/readline/sqlite: C-level file writes), and
# unittest.mock, whose ANY equals everything. "import" fires only on a real load, so for modules
# the harness already holds (posix, _signal, _posixsubprocess) it means a fresh, unstubbed copy.
BLOCKED_IMPORTS = frozenset(
    {
        "ctypes",
        "_ctypes",
        "cffi",
        "_cffi_backend",
        "_posixsubprocess",
        "_posixshmem",
        "_multiprocessing",
        "_sqlite3",
        "_dbm",
        "_gdbm",
        "readline",
        "posix",
        "_signal",
        "unittest.mock",
    }
)
# Denied outright: processes, signals, and introspection that reaches the harness's state.
DENIED_EVENTS = frozenset(
    {
        "os.fork",
        "os.forkpty",
        "os.exec",
        "os.posix_spawn",
        "os.spawn",
        "os.system",
        "os.startfile",
        "subprocess.Popen",
        "pty.spawn",
        "os.kill",
        "os.killpg",
        "signal.pthread_kill",
        "gc.get_objects",
        "gc.get_referrers",
        "gc.get_referents",
        "sys._current_frames",
        "sys._current_exceptions",
        "sqlite3.connect",
    }
)
# Denied while the tests run: a trace function could jump over their asserts. (The program itself
# may trace, e.g. doctest.testmod() does; the harness clears it before the tests.)
DENIED_IN_TESTS = frozenset({"sys.settrace", "sys.setprofile"})
PATH_EVENTS = {  # event -> ((index of a path argument, index of its dir_fd or None), ...)
    "os.remove": ((0, 1),),
    "os.rmdir": ((0, 1),),
    "os.mkdir": ((0, 2),),
    "os.rename": ((0, 2), (1, 3)),
    "os.link": ((0, 2), (1, 3)),
    "os.symlink": ((1, 2),),
    "os.truncate": ((0, None),),
    "os.chmod": ((0, 2),),
    "os.chown": ((0, 3),),
    "os.utime": ((0, 3),),
    "os.chflags": ((0, None),),
    "os.lchflags": ((0, None),),
    "os.setxattr": ((0, None),),
    "os.removexattr": ((0, None),),
    "shutil.rmtree": ((0, 1),),
}


class SandboxViolation(PermissionError):
    """A forbidden operation; the parent reports runs that end in one as ``blocked``."""


def _stub(what: str):
    def denied(*args, **kwargs):
        raise SandboxViolation(f"sandbox: {what} is not allowed")

    return denied


def disable_unaudited() -> None:
    """Calls that change the system or reach other processes without raising an audit event."""
    _posixsubprocess.fork_exec = _stub("starting processes")  # multiprocessing's spawn uses it
    for mod in (os, sys.modules["posix"]):
        for name in ("mkfifo", "mknod", "pidfd_open"):
            if hasattr(mod, name):
                setattr(mod, name, _stub(f"os.{name}"))
    if hasattr(_signal, "pidfd_send_signal"):
        _signal.pidfd_send_signal = _stub("signal.pidfd_send_signal")


def realpath(path: str) -> str:
    """os.path.realpath from captured primitives: the program can rebind posixpath's helpers."""
    if not path.startswith("/"):
        path = getcwd() + "/" + path
    resolved: list[str] = []
    todo, links = path.split("/")[::-1], 0
    while todo:
        name = todo.pop()
        if name in ("", "."):
            continue
        if name == "..":
            if resolved:
                resolved.pop()
            continue
        here = "/" + "/".join(resolved + [name])
        try:
            mode = lstat(here)[0]
        except OSError:
            resolved.append(name)
            continue
        if mode & S_IFMT != S_IFLNK:
            resolved.append(name)
            continue
        links += 1
        if links > 40:
            raise SandboxViolation("sandbox: too many levels of symbolic links")
        target = readlink(here)
        if target.startswith("/"):
            resolved = []
        todo.extend(target.split("/")[::-1])
    return "/" + "/".join(resolved)


def make_hook(root: str, violations: list[str], program_type, phase: dict):
    """The audit hook: deny listed events, socket/ctypes events, blocked imports, writes outside
    ``root``, other processes' /proc entries, and directory descriptors outside ``root``."""
    pid = str(os.getpid())

    def deny(what: str) -> None:
        violations.append(what)
        raise SandboxViolation(f"sandbox: {what} is not allowed")

    def resolve(path, dir_fd=None) -> str:
        if type(path) is int:  # an open descriptor: where it points
            return readlink(f"/proc/self/fd/{path}")
        if type(path) is not str:
            if type(path) is bytes:
                path = path.decode("utf-8", "surrogateescape")
            else:  # a custom os.PathLike could answer differently here than to the call itself
                tp = type(path)
                if tp.__name__ not in ("PosixPath", "PurePosixPath") or program_type(tp, {}):
                    deny("naming files with custom path objects")
                path = str(path)
        if dir_fd not in (None, -1) and not path.startswith("/"):
            path = readlink(f"/proc/self/fd/{dir_fd}") + "/" + path
        return realpath(path)

    def inside(path: str) -> bool:
        return path == root or path.startswith(root + "/")

    def check_open(path, mode, flags) -> None:
        if type(path) is int:
            return
        where = resolve(path)
        if flags & WRITE_FLAGS:
            if not inside(where) and where != "/dev/null":
                deny(f"writing {where}")
        elif where.startswith("/proc/"):
            parts = where.split("/")
            if parts[2].isdigit() and parts[2] != pid or "mem" in parts or "kcore" in parts:
                deny(f"reading {where}")
        elif mode is None and not inside(where):  # os.open: no dir_fd that lets paths escape
            try:
                is_dir = stat(where)[0] & S_IFMT == S_IFDIR
            except OSError:
                is_dir = False
            if is_dir:
                deny(f"opening directory {where}")

    def hook(event: str, args: tuple) -> None:
        if event == "open":
            check_open(args[0], args[1], args[2])
        elif event in PATH_EVENTS:
            for i, fd_index in PATH_EVENTS[event]:
                dir_fd = args[fd_index] if fd_index is not None and fd_index < len(args) else None
                where = resolve(args[i], dir_fd)
                if not inside(where):
                    deny(f"{event} on {where}")
        elif event == "import":
            if args[0] in BLOCKED_IMPORTS or args[0].startswith("_test"):
                # An ImportError, so `try: import readline except ImportError` (pdb, doctest) works.
                violations.append(f"importing {args[0]}")
                raise ImportError(f"sandbox: importing {args[0]} is not allowed", name=args[0])
        elif event in DENIED_EVENTS or event.startswith(("socket.", "ctypes.")):
            deny(event)
        elif event in DENIED_IN_TESTS and phase["tests"]:
            deny(event)
        elif event == "resource.prlimit" and args[0] not in (0, int(pid)):
            deny(event)

    return hook
