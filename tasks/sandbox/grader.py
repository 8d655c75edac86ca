"""The trusted side of :mod:`tasks.sandbox`: run the tests against a proxy of the program.

:func:`serve` runs once per sandbox in its own bubblewrap sandbox, as uid 65533; it forks a child per
job (see there), whose fd 3 is the channel to that job's program and fd 4 the verdict pipe to the
parent. No program code ever runs in these processes: the names the tests take from the program
are proxies that send their arguments over the channel, and what comes back is decoded by
:func:`sandbox_wire.decode` into this process's own plain values. A builtin name is never taken
from the program, unless it is the entry point the task names (MBPP has a task whose function is
called ``sum``). A module name is bound to this process's own import of that standard-library
module.

Verdict line on fd 4: ``passed``, or ``failed TEXT``, ``exited TEXT`` (the program ended itself
before the tests finished), ``ended TEXT`` (its process died: the parent says why) or ``error
TEXT`` (the job itself was malformed).
"""

import builtins
import fcntl
import importlib
import os
import resource
import signal
import socket
import sys

import sandbox_child as child
import sandbox_wire as wire

TEST_FILE = "<test>"
NEVER_IMPORTED = frozenset({"antigravity", "this", "idlelib", "turtle", "turtledemo", "tkinter", "__hello__"})


class ProgramEnded(BaseException):
    """The program's process closed the channel (it exited or was killed). A BaseException, like
    the two below, so that a test's ``except Exception`` cannot swallow it."""


class ProgramExited(BaseException):
    """A function of the program raised SystemExit."""


class NotData(BaseException):
    """The program's process sent a malformed reply."""


class ProgramError(Exception):
    """The program raised an exception that is not a builtin one (its type name is kept)."""


def _names(code) -> set:
    """Every name the test's code objects mention (globals, attributes, imports), recursively."""
    names, stack = set(), [code]
    while stack:
        c = stack.pop()
        names.update(c.co_names)
        stack.extend(k for k in c.co_consts if type(k) is type(code))
    return names


def _exception(type_name, message):
    """A builtin exception of that name (so tests that expect, say, ValueError see one), else a
    ProgramError; the program's own exception objects never cross."""
    cls = getattr(builtins, type_name, None) if type(type_name) is str else None
    text = message if type(message) is str else ""
    # StopIteration would end a C iterator in the tests (map, filter, zip) as if it were done: as in
    # PEP 479 it becomes an error here, like any other non-builtin exception.
    if (
        isinstance(cls, type)
        and issubclass(cls, Exception)
        and not issubclass(cls, (StopIteration, StopAsyncIteration))
    ):
        try:
            return cls(text)
        except Exception:
            pass
    return ProgramError(f"{type_name}: {text}" if type(type_name) is str else text)


def _proxy(fd: int, name: str):
    def call(*args, **kwargs):
        try:
            wire.send(fd, ["call", name, list(args), dict(kwargs)])
            reply = wire.receive(fd)
        except (EOFError, BrokenPipeError, ConnectionResetError) as exc:
            raise ProgramEnded(f"the program's process ended while running {name}()") from exc
        except wire.WireError as exc:
            raise NotData(f"the program's process sent malformed data: {exc}") from None
        if type(reply) is list and len(reply) == 2 and reply[0] == "ok":
            return reply[1]
        if type(reply) is list and len(reply) == 3 and reply[0] == "raise":
            raise _exception(reply[1], reply[2])
        if type(reply) is list and len(reply) == 2 and reply[0] == "exit":
            raise ProgramExited(f"the program exited in {name}(): {reply[1]}")
        raise NotData(f"malformed reply to a call of {name}()")

    call.__name__ = call.__qualname__ = name
    return call


def _module(name):
    top = name.partition(".")[0] if type(name) is str else ""
    if top in sys.stdlib_module_names and top not in NEVER_IMPORTED:
        try:
            return importlib.import_module(name)
        except Exception:
            return None
    return None


def _bind(reply, wanted: set, fd: int) -> dict:
    namespace = {"__name__": "__test__", "__builtins__": builtins}
    for item in reply:
        if type(item) is not list or len(item) != 3 or type(item[0]) is not str or item[0] not in wanted:
            continue
        name, kind, payload = item
        if kind == "call":
            namespace[name] = _proxy(fd, name)
        elif kind == "module":
            module = _module(payload)
            if module is not None:
                namespace[name] = module
        elif kind == "data":
            namespace[name] = payload
    return namespace


def grade(test: str, entry_point: str, fd: int) -> tuple[str, str]:
    code = compile(test, TEST_FILE, "exec", dont_inherit=True)
    wanted = {n for n in _names(code) if not hasattr(builtins, n) and not n.startswith("__")}
    if entry_point:
        wanted.add(entry_point)
    try:
        wire.send(fd, ["names", sorted(wanted)])
        reply = wire.receive(fd)
    except (EOFError, BrokenPipeError, ConnectionResetError):
        return "ended", "the program's process ended before its tests started"
    if type(reply) is list and len(reply) == 3 and reply[0] == "load_error":
        status = "exited" if reply[1] == "exit" else "failed"
        detail = reply[2] if type(reply[2]) is str else "the program failed"
        return status, ("the program exited before its tests ran: " if status == "exited" else "") + detail
    if type(reply) is not list or len(reply) != 2 or reply[0] != "ready" or type(reply[1]) is not list:
        return "failed", "malformed reply from the program's process"
    namespace = _bind(reply[1], wanted, fd)
    try:
        exec(code, namespace)  # noqa: S102 - the task's own test code
    except ProgramEnded as exc:
        return "ended", str(exc)
    except ProgramExited as exc:
        return "exited", str(exc)
    except NotData as exc:
        return "failed", str(exc)
    except BaseException as exc:  # noqa: BLE001 - any failing test fails the program
        return "failed", child.describe(exc)
    return "passed", ""


def serve() -> None:
    """The grader's server: one per :class:`tasks.sandbox.Sandbox`, in its own bubblewrap sandbox,
    started once (a Python start costs more than a grading). Each job arrives on the control socket
    (fd 3) as ``CPU_S TIMEOUT_S`` with three descriptors: the job pipe (entry point and test code),
    the channel to that job's program and the verdict pipe. A forked child grades it under its own
    CPU limit and alarm, so jobs share no state; the server itself runs no test code."""
    child.start(child.GRADER_UID)
    control = socket.socket(fileno=child.CHANNEL_FD)
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # children are reaped by the kernel
    while True:
        try:
            message, fds, _, _ = socket.recv_fds(control, 64, 3)
        except InterruptedError:
            continue
        if not message:
            os._exit(0)  # the parent closed the control socket
        if len(fds) != 3:
            for fd in fds:
                os.close(fd)
            continue
        try:
            pid = os.fork()
        except OSError:
            pid = -1
        if pid == 0:
            control.close()
            try:
                cpu_s, timeout_s = map(int, message.split())
                _grade_job(fds, cpu_s, timeout_s)
            finally:
                os._exit(0)
        if pid < 0:
            os.write(fds[2], b"error the grader could not fork\n")
        for fd in fds:
            os.close(fd)


def _grade_job(fds: list[int], cpu_s: int, timeout_s: int) -> None:
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    job_fd = fcntl.fcntl(fds[0], fcntl.F_DUPFD, 32)  # clear of 3 and 4
    os.close(fds[0])
    child.place(fds[1:])  # channel -> 3, verdict -> 4
    resource.setrlimit(resource.RLIMIT_CPU, (cpu_s, cpu_s))
    signal.alarm(timeout_s + 1)  # ends a test that blocks; the parent stops waiting before this
    entry_point, _, test = child.read_stdin(job_fd).partition("\n")
    os.close(job_fd)
    sys.setrecursionlimit(3000)
    try:
        status, detail = grade(test, entry_point.strip(), child.CHANNEL_FD)
    except SyntaxError as exc:
        status, detail = "error", f"the test code does not compile: {child.describe(exc)}"
    except (wire.WireError, OSError) as exc:
        status, detail = "failed", f"the program's process sent malformed data: {child.describe(exc)}"
    line = status + (f" {detail}" if detail else "") + "\n"
    try:
        os.write(child.VERDICT_FD, line.encode("utf-8", "backslashreplace"))
    except OSError:
        pass
