"""Program sandboxes started ahead of their program, so that a run does not wait for one to start.

Starting a program's sandbox is most of a short run's wall time: making its cgroups, moving the
first process into them (the kernel waits for an RCU grace period, about 10 ms, at the first move
after a quiet spell), bubblewrap's namespaces and mounts, and the interpreter's start. None of it
depends on the program: the interpreter, once its limits are set, waits for the program on its
stdin. So each :class:`tasks.sandbox.Sandbox` keeps up to ``workers`` of them started (a
:class:`Started` each: its cgroups, uid slot, processes and channel), made by one background
thread while runs go on, and a run takes one (or starts its own when none is ready). A spare is
a process of about 10 MB waiting on a pipe; it is ended with the Sandbox, and in a forked child of
the process that started it it is never touched (it belongs to the parent).
"""

from __future__ import annotations

import collections
import os
import queue
import socket
import threading
import time
import weakref
from dataclasses import dataclass

from tasks.sandbox import bounds as sandbox_bounds
from tasks.sandbox import bwrap as sandbox_bwrap
from tasks.sandbox import child as sandbox_child
from tasks.sandbox import process as sandbox_process
from tasks.sandbox.server import starter

_POOLS: weakref.WeakSet = weakref.WeakSet()


@dataclass
class Started:
    """A program's sandbox, started, waiting for its program on ``proc.stdin``."""

    run: sandbox_bounds.RunBounds
    proc: object  # subprocess.Popen
    init: int | None  # pidfd of the PID namespace's first process
    channel: socket.socket  # our end of the channel to the program's process (for the grader)
    owner: int  # the process that started it

    def alive(self) -> bool:
        return self.owner == os.getpid() and self.proc.poll() is None

    def discard(self) -> None:
        """End its processes and free its cgroups and uid slot (only in the process that started it)."""
        if self.owner != os.getpid():
            return
        self.channel.close()
        sandbox_process.kill(self.proc, self.init)
        self.run.close()


def start(limits, cgroups, seccomp: bytes, disk_mb: int, spawn=None) -> Started:
    """Start one program sandbox under ``limits`` (a SandboxLimits); ``spawn`` runs Popen (a
    long-lived thread's, for a spare: bubblewrap dies with the thread that started it)."""
    memory = (limits.memory_mb + disk_mb + sandbox_bounds.SLACK_MB) << 20
    run = sandbox_bounds.RunBounds(cgroups, memory, limits.max_processes + sandbox_bounds.OWN_PROCESSES).__enter__()
    ends = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    proc, init = None, None
    try:
        uid = sandbox_child.NOBODY if run.uid is None else run.uid
        argv = (limits.cpu_s, limits.memory_mb, limits.max_processes + 2, limits.max_file_mb, uid)
        seccomp_fd = sandbox_bwrap.pipe_with(seccomp)
        info_r, info_w = os.pipe()
        try:
            fds = (ends[1].fileno(),)
            cmd = sandbox_bwrap.command("sandbox_program.py", argv, disk_mb, seccomp_fd, fds, info_fd=info_w)
            proc = sandbox_process.popen(*run.wrap(cmd), (*fds, seccomp_fd, info_w), spawn)
        finally:
            os.close(seccomp_fd)
            os.close(info_w)
        try:
            init = sandbox_process.namespace_init(info_r, proc.pid, time.monotonic() + limits.timeout_s)
        finally:
            os.close(info_r)
    except BaseException:
        if proc is not None:
            sandbox_process.kill(proc, init)
        ends[0].close()
        run.close()
        raise
    finally:
        ends[1].close()
    return Started(run, proc, init, ends[0], os.getpid())


class Spares:
    """Up to ``count`` started sandboxes, kept ready by a background thread; ``make`` is a
    :class:`weakref.WeakMethod` of what starts one (so that the Sandbox is freed, and closes its
    spares, as soon as it is dropped)."""

    def __init__(self, count: int, make: weakref.WeakMethod):
        self.count, self.make = count, make
        self.ready: collections.deque[Started] = collections.deque()
        self.lock = threading.Lock()
        self.pending = 0
        self.closed = False
        self.requests: queue.SimpleQueue = queue.SimpleQueue()
        threading.Thread(target=_refill, args=(weakref.ref(self), self.requests), daemon=True).start()
        _POOLS.add(self)

    def take(self) -> Started | None:
        """A ready spare (another is then started), or None."""
        while True:
            with self.lock:
                spare = self.ready.popleft() if self.ready else None
            if spare is None or spare.alive():
                self.top_up()
                return spare
            spare.discard()

    def top_up(self) -> None:
        with self.lock:
            wanted = self.count - len(self.ready) - self.pending
            if self.closed or wanted <= 0:
                return
            self.pending += wanted
        for _ in range(wanted):
            self.requests.put(True)

    def put(self, spare: Started | None) -> None:
        with self.lock:
            self.pending -= 1
            keep = spare is not None and not self.closed
            if keep:
                self.ready.append(spare)
        if spare is not None and not keep:
            spare.discard()

    def close(self) -> None:
        with self.lock:
            self.closed = True
            spares, self.ready = list(self.ready), collections.deque()
        self.requests.put(None)
        for spare in spares:
            spare.discard()


def settle(timeout_s: float = 30.0) -> None:
    """Wait until no spare of this process is being started (every one is ready, or none is wanted)."""
    deadline = time.monotonic() + timeout_s
    while any(pool.pending > 0 for pool in list(_POOLS)) and time.monotonic() < deadline:
        time.sleep(0.01)


def waiting() -> tuple[set[int], set[str]]:
    """bubblewrap's pid and the cgroups of every spare of this process, waiting for a program."""
    pids, cgroups = set(), set()
    for pool in list(_POOLS):
        with pool.lock:
            for spare in pool.ready:
                pids.add(spare.proc.pid)
                cgroups |= {str(path) for _, path in spare.run.cgroups}
    return pids, cgroups


def _refill(pool_ref, requests: queue.SimpleQueue) -> None:
    while requests.get() is not None:
        pool = pool_ref()
        if pool is None:
            return
        try:
            make = pool.make()
            spare = None if make is None else make(starter().popen)
        except Exception:  # noqa: BLE001 - a run starts its own sandbox instead, and says why if it fails too
            spare = None
        pool.put(spare)
        del pool
