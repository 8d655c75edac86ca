"""The parent's side of one sandboxed program's processes: start bubblewrap, feed it, read it, end it.

Used by :class:`tasks.sandbox.Sandbox`; nothing here trusts what the program writes.
"""

from __future__ import annotations

import json
import os
import select
import selectors
import signal
import subprocess
import time

READ_CHUNK = 1 << 16
VERDICT_CAP = 4096


def popen(cmd: list[str], env: dict[str, str], fds: tuple[int, ...], spawn=None) -> subprocess.Popen:
    """Start a sandbox's bubblewrap with pipes for its stdin, stdout and stderr (``spawn``: what
    calls Popen, by default this thread)."""
    return (spawn or subprocess.Popen)(
        cmd,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        pass_fds=fds,
        close_fds=True,
        start_new_session=True,
        env=env,
    )


def namespace_init(info_fd: int, bwrap_pid: int, deadline: float) -> int | None:
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


def kill(p: subprocess.Popen, init: int | None = None) -> None:
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


def communicate(
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
