"""What one sandboxed run may take from the machine and from its neighbours: a cgroup and a uid of its own.

The rlimits :mod:`tasks.sandbox.child` sets are per process or per uid, and neither bounds a run as
a whole: System V shared memory and memfd pages belong to no process's address space, each forked
child gets an RLIMIT_AS of its own, and runs that share a uid share one RLIMIT_NPROC count, so a
program that forks to the limit fails the program graded beside it. So each run of a program gets:

- **a cgroup** of its own, made by the parent under the parent's own cgroup (cgroup v1's memory and
  pids hierarchies, or v2 where the parent's cgroup can enable both for its children), with a memory
  limit (``memory_mb`` plus the private tmpfs plus a little for bubblewrap's two processes; no swap)
  and a pids limit (``max_processes`` plus bubblewrap's two processes and the program's own). Every
  process of the run is in it from the start: a shell enters it and then becomes bubblewrap. Shared
  memory, memfds, the tmpfs and page cache all count there. Going past the memory limit ends the run
  through the kernel's OOM killer, inside the cgroup, and the result says "(memory limit)". The
  parent removes the cgroup once the run's processes are gone, and removes those a killed parent
  left behind.
- **a uid of its own** when started as root: the k-th concurrently running program on the machine
  (across every process, held by an flock on a file in a root-only directory) runs as
  ``SLOT_UID_BASE + k``, so RLIMIT_NPROC counts only its own processes and a neighbour's fork bomb
  cannot make it fail. Started by another user, each run is in a user namespace of its own, where
  the kernel (5.15 and later) counts RLIMIT_NPROC per namespace.

Where no cgroup can be made (no writable cgroup filesystem, or cgroup v2 whose controllers the
parent's cgroup cannot delegate), runs degrade to the rlimits alone: the sandbox says so once in one
line on stderr and in :meth:`tasks.sandbox.Sandbox.isolation`, or refuses to start with that line when
``SandboxLimits(require_cgroups=True)``.
"""

from __future__ import annotations

import fcntl
import functools
import itertools
import os
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from bench.errors import CreditBenchError

CONTROLLERS = ("memory", "pids")
SLOT_UID_BASE = 1_800_000_000  # far above any uid a distribution hands out
SLOTS = 4096
OWN_PROCESSES = 3  # bubblewrap, the namespace's init and the program's interpreter
SLACK_MB = 16  # bubblewrap's own two processes
PREFIX = "creditbench-sandbox-"
ENTER = (
    'set -f; for f in $CREDITBENCH_CGROUPS; do echo 0 > "$f" || exit 125; done; unset CREDITBENCH_CGROUPS; exec "$@"'
)
"""The shell that puts itself (``0``: the writer) into the run's cgroups before it becomes bubblewrap."""
_counter = itertools.count()
_warned = threading.Event()


@dataclass(frozen=True)
class Hierarchy:
    """Where runs' cgroups are made for one controller: our own cgroup in its hierarchy."""

    controller: str
    directory: Path
    version: int  # 1 or 2

    def limits(self, memory_bytes: int, pids: int) -> dict[str, str]:
        if self.controller == "pids":
            return {"pids.max": str(pids)}
        if self.version == 2:
            return {"memory.max": str(memory_bytes), "memory.swap.max": "0", "memory.oom.group": "1"}
        return {"memory.limit_in_bytes": str(memory_bytes), "memory.memsw.limit_in_bytes": str(memory_bytes)}

    def oom_kills(self, cgroup: Path) -> int:
        """How many processes the OOM killer ended in ``cgroup`` (0 for the pids controller)."""
        if self.controller != "memory":
            return 0
        name = "memory.events" if self.version == 2 else "memory.oom_control"
        try:
            lines = (cgroup / name).read_text().splitlines()
        except OSError:
            return 0
        counts = dict(line.split() for line in lines if len(line.split()) == 2)
        return int(counts.get("oom_kill", 0))


def _mounts() -> list[tuple[str, str, str, set[str]]]:
    """(root, mount point, type, super options) of each cgroup mount."""
    found = []
    with open("/proc/self/mountinfo") as f:
        for line in f:
            left, _, right = line.partition(" - ")
            fields, tail = left.split(), right.split()
            if len(fields) >= 5 and len(tail) >= 3 and tail[0] in ("cgroup", "cgroup2"):
                found.append((fields[3], fields[4].replace("\\040", " "), tail[0], set(tail[2].split(","))))
    return found


def _relative(path: str, root: str) -> str | None:
    if root == "/":
        return path
    if path == root or path.startswith(root + "/"):
        return path[len(root) :] or "/"
    return None


def _locate() -> tuple[dict[str, Hierarchy], str]:
    """Our own cgroup for each controller, or the reason there is none."""
    own = {}
    with open("/proc/self/cgroup") as f:
        for line in f:
            hid, controllers, path = line.rstrip("\n").split(":", 2)
            for name in controllers.split(",") if controllers or hid != "0" else [""]:
                own[name] = path  # v1: by controller; v2: the one unified hierarchy, as ""
    found: dict[str, Hierarchy] = {}
    for root, point, kind, options in _mounts():
        for name in CONTROLLERS:
            key = name if kind == "cgroup" else ""
            if name in found or key not in own or (kind == "cgroup" and name not in options):
                continue
            rel = _relative(own[key], root)
            if rel is None:
                continue
            directory = Path(point + rel)
            if any(c.isspace() or c in "*?[" for c in str(directory)):  # the entering shell splits on these
                continue
            if kind == "cgroup2" and not _delegated(directory, name):
                continue
            found[name] = Hierarchy(name, directory, 1 if kind == "cgroup" else 2)
    missing = [c for c in CONTROLLERS if c not in found]
    reason = f"no delegated cgroup {' or '.join(missing)} controller" if missing else ""
    return found, reason


def _delegated(directory: Path, controller: str) -> bool:
    """cgroup v2: the controller is enabled for our cgroup's children, or can be."""
    try:
        if controller in (directory / "cgroup.subtree_control").read_text().split():
            return True
        (directory / "cgroup.subtree_control").write_text(f"+{controller}")
        return True
    except OSError:
        return False


@functools.cache
def available() -> tuple[tuple[Hierarchy, ...], str]:
    """The hierarchies runs' cgroups go in (both controllers, or none) and, if none, why: checked by
    making, limiting, entering (from a shell, as a run does) and removing one cgroup."""
    if not sys.platform.startswith("linux") or not os.path.exists("/proc/self/cgroup"):
        return (), "no cgroups on this system"
    try:
        found, reason = _locate()
    except (OSError, ValueError) as exc:
        return (), f"cgroups could not be read ({exc})"
    if reason:
        return (), reason
    hierarchies = tuple(found[c] for c in CONTROLLERS)
    try:
        with RunBounds(hierarchies, 64 << 20, 8, uid=None) as run:
            import subprocess  # noqa: PLC0415 - only for this one check

            cmd, env = run.wrap(["/bin/sh", "-c", "exit 0"])
            done = subprocess.run(cmd, env=env, capture_output=True, timeout=30, check=False)
            if done.returncode != 0:
                return (), f"a process could not enter a new cgroup (status {done.returncode})"
    except OSError as exc:
        return (), f"cgroups cannot be made under {hierarchies[0].directory} ({exc.strerror or exc})"
    return hierarchies, ""


def warn_once(reason: str) -> None:
    if not _warned.is_set():
        _warned.set()
        print(
            f"creditbench: code sandbox runs without per-run cgroups ({reason}); memory and processes "
            "are bounded per process only",
            file=sys.stderr,
        )


@dataclass
class RunBounds:
    """One run's cgroups (made on entry, removed on exit) and uid slot (held until exit)."""

    hierarchies: tuple[Hierarchy, ...]
    memory_bytes: int
    pids: int
    uid: int | None = 0  # 0: take a slot when root; None: no uid slot
    cgroups: list[tuple[Hierarchy, Path]] = field(default_factory=list)
    _slot_fd: int | None = None

    def __enter__(self) -> RunBounds:
        try:
            if self.uid is not None:
                self.uid, self._slot_fd = take_uid() if os.geteuid() == 0 else (0, None)
            name = f"{PREFIX}{os.getpid()}-{next(_counter)}"
            for h in self.hierarchies:
                path = h.directory / name
                path.mkdir()
                self.cgroups.append((h, path))
                for key, value in h.limits(self.memory_bytes, self.pids).items():
                    if (path / key).exists() or key in ("memory.limit_in_bytes", "memory.max", "pids.max"):
                        (path / key).write_text(value)
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def wrap(self, cmd: list[str]) -> tuple[list[str], dict[str, str]]:
        """``cmd`` started inside this run's cgroups, and the environment to start it with."""
        if not self.cgroups:
            return cmd, {}
        procs = " ".join(str(path / "cgroup.procs") for _, path in self.cgroups)
        return ["/bin/sh", "-c", ENTER, "sh", *cmd], {"CREDITBENCH_CGROUPS": procs}

    def oom_killed(self) -> bool:
        return any(h.oom_kills(path) for h, path in self.cgroups)

    def close(self) -> None:
        """Remove the cgroups (their processes are gone: the caller waited for them) and free the slot."""
        for _, path in reversed(self.cgroups):
            remove(path)
        self.cgroups.clear()
        if self._slot_fd is not None:
            os.close(self._slot_fd)
            self._slot_fd = None


def remove(path: Path, wait_s: float = 2.0) -> bool:
    """rmdir a cgroup, waiting a little for exiting processes to leave it."""
    deadline = time.monotonic() + wait_s
    while True:
        try:
            path.rmdir()
            return True
        except FileNotFoundError:
            return True
        except OSError:
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.01)


def remove_stale(hierarchies: tuple[Hierarchy, ...]) -> int:
    """Remove the runs' cgroups a parent that no longer exists left behind; how many went."""
    gone = 0
    for h in hierarchies:
        for path in h.directory.glob(f"{PREFIX}*"):
            pid = path.name.removeprefix(PREFIX).partition("-")[0]
            if pid.isdigit() and not os.path.exists(f"/proc/{pid}") and remove(path, 0):
                gone += 1
    return gone


@functools.cache
def _slot_dir() -> Path:
    directory = Path(tempfile.gettempdir()) / f"creditbench-uid-slots-{os.getuid()}"
    directory.mkdir(mode=0o700, exist_ok=True)
    st = directory.stat()
    if st.st_uid != os.getuid() or st.st_mode & 0o077:
        raise CreditBenchError(
            f"{directory} must be a directory only this user can use: it holds the sandbox's uid slots"
        )
    return directory


def take_uid() -> tuple[int, int]:
    """A uid no other running program has, and the descriptor whose flock holds it."""
    directory = _slot_dir()
    for k in range(SLOTS):
        fd = os.open(directory / str(k), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return SLOT_UID_BASE + k, fd
        except BlockingIOError:
            os.close(fd)
    raise CreditBenchError(f"all {SLOTS} sandbox uid slots are taken (more programs running at once than that)")
