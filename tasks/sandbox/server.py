"""The parent's handle on the grader's server (``sandbox_grader.serve``), one per Sandbox.

The server is started lazily, restarted if it has died, and always started from one long-lived
thread: bubblewrap's ``--die-with-parent`` ties the sandbox to the *thread* that started it, and
the sandbox's worker threads come and go.
"""

from __future__ import annotations

import os
import queue
import socket
import subprocess
import threading

from tasks.sandbox import bwrap as sandbox_bwrap
from tasks.sandbox.bounds import take_uid
from tasks.sandbox.child import GRADER_UID


class _Starter:
    """A daemon thread that runs Popen for whoever asks, so started sandboxes outlive the asker."""

    def __init__(self) -> None:
        self.requests: queue.Queue = queue.Queue()
        threading.Thread(target=self._loop, name="sandbox-starter", daemon=True).start()

    def _loop(self) -> None:
        while True:
            args, kwargs, done = self.requests.get()
            try:
                done.put((subprocess.Popen(*args, **kwargs), None))
            except BaseException as exc:  # noqa: BLE001 - handed back to the caller
                done.put((None, exc))

    def popen(self, *args, **kwargs) -> subprocess.Popen:
        done: queue.Queue = queue.Queue(maxsize=1)
        self.requests.put((args, kwargs, done))
        proc, exc = done.get()
        if exc is not None:
            raise exc
        return proc


_starter_lock = threading.Lock()
_starter: _Starter | None = None


def starter() -> _Starter:
    global _starter  # noqa: PLW0603 - one per process
    with _starter_lock:
        if _starter is None:
            _starter = _Starter()
        return _starter


class GraderServer:
    """Sends grading jobs to a grader server in its own bubblewrap sandbox."""

    def __init__(self, limits: tuple[int, int, int, int], disk_mb: int, seccomp: bytes):
        self.limits, self.disk_mb, self.seccomp = limits, disk_mb, seccomp
        self.lock = threading.Lock()
        self.proc: subprocess.Popen | None = None
        self.control: socket.socket | None = None
        self.slot: int | None = None  # the flock holding the server's uid

    def submit(self, job_fd: int, channel_fd: int, verdict_fd: int, cpu_s: int, timeout_s: int) -> None:
        """Hand one job to the server (restarting it once if it has died). The descriptors stay
        open here; the caller closes its copies."""
        message = f"{cpu_s} {timeout_s}".encode()
        with self.lock:
            for attempt in (0, 1):
                if self.proc is None or self.proc.poll() is not None:
                    self._start()
                try:
                    socket.send_fds(self.control, [message], [job_fd, channel_fd, verdict_fd])
                    return
                except OSError:
                    self._stop()
                    if attempt:
                        raise

    def close(self) -> None:
        with self.lock:
            self._stop()

    def _start(self) -> None:
        self._stop()
        if os.geteuid() == 0:  # a uid of its own, so that servers of other Sandboxes share no process count
            uid, self.slot = take_uid()
        else:
            uid, self.slot = GRADER_UID, None
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        r = sandbox_bwrap.pipe_with(self.seccomp)
        cpu_unlimited = (0, *self.limits[1:4], uid)
        cmd = sandbox_bwrap.command("sandbox_grader.py", cpu_unlimited, self.disk_mb, r, (theirs.fileno(),), "serve")
        try:
            self.proc = starter().popen(
                cmd,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                pass_fds=(theirs.fileno(), r),
                close_fds=True,
                start_new_session=True,
                env={},
            )
        finally:
            os.close(r)
            theirs.close()
        self.control = ours

    def _stop(self) -> None:
        if self.control is not None:
            self.control.close()
            self.control = None
        if self.proc is not None:
            try:
                os.killpg(self.proc.pid, 9)
            except (ProcessLookupError, PermissionError):
                pass
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
            self.proc = None
        if self.slot is not None:
            os.close(self.slot)
            self.slot = None
