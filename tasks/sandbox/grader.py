"""The trusted side of :mod:`tasks.sandbox`: run the tests against a proxy of the program.

:func:`serve` runs once per sandbox in its own bubblewrap sandbox, as a uid of its own (65533 when
not root); it forks a child per job (see there), whose fd 3 is the channel to that job's program and
fd 4 the verdict pipe to the parent. No program code ever runs in these processes: the names the
tests take from the program are proxies that send their arguments over the channel, and what comes
back is decoded by :func:`sandbox_wire.decode` into this process's own values. A builtin name is
never taken from the program, unless it is the entry point the task names (MBPP has a task whose
function is called ``sum``). A name the program binds to a module is bound to this process's own
import of that standard-library module only when the test's code itself mentions the module's
top-level package name (``import math`` in the program, ``math.isclose`` in the test), never for a
``__main__`` module or one of :data:`NEVER_IMPORTED` (whose import has effects: opening a browser,
running a test suite); otherwise the name stays unbound and the test fails with a NameError. So a
program cannot make the grader import a module of its choosing (``import venv.__main__ as check``
would run pip in the grader).

Typed values (:func:`build`) become this process's own objects: the standard library's classes,
and for a program's subclass of a carried class (or a namedtuple) a class made here, once per name
and base in a job (at most :data:`MAX_CLASSES`), with the program's name and none of its methods.
A call's reply may say that the program changed a list, dict, set, bytearray or deque argument, or
that its result is one of the arguments: the tests' own argument objects are then changed in place
(:func:`_write`) or returned, as in one process. An exception the program raised arrives by the
names of its class and of the builtin exception classes it derives from (:func:`_exception`): a
builtin's own exception is this process's builtin, the program's class (or a library's) a class
made here on those builtins, so ``except ValueError`` catches it exactly when one process would.

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
NEVER_IMPORTED = frozenset(
    {"antigravity", "this", "idlelib", "turtle", "turtledemo", "tkinter", "__hello__", "__phello__", "test", "lib2to3"}
)
MAX_CLASSES = 64  # classes build() and _exception() make in one job
BASES = {("builtins", n) for n in ("int", "float", "complex", "str", "bytes", "bytearray", "tuple", "list")}
BASES |= {("builtins", n) for n in ("set", "frozenset", "dict")} | {("array", "array"), ("fractions", "Fraction")}
BASES |= {("collections", n) for n in ("deque", "Counter", "OrderedDict", "defaultdict", "ChainMap", "UserList")}
BASES |= {("collections", "UserDict"), ("collections", "UserString"), ("decimal", "Decimal")}
HASHABLE_BASES = (int, float, complex, str, bytes, tuple, frozenset)
MADE: dict = {}  # (name, qualname, base, fields) -> the class made for it


class ProgramEnded(BaseException):
    """The program's process closed the channel (it exited or was killed). A BaseException, like
    the two below, so that a test's ``except Exception`` cannot swallow it."""


class ProgramExited(BaseException):
    """A function of the program raised SystemExit."""


class NotData(BaseException):
    """The program's process sent a malformed reply."""


class ProgramError(Exception):
    """The program raised an exception this process does not re-create (its type name is kept): one
    that is not an Exception, a StopIteration, or one its builtin class cannot make from a message."""


def _names(code) -> set:
    """Every name the test's code objects mention (globals, attributes, imports), recursively."""
    names, stack = set(), [code]
    while stack:
        c = stack.pop()
        names.update(c.co_names)
        stack.extend(k for k in c.co_consts if type(k) is type(code))
    return names


def _exception(type_name, message, bases):
    """The exception a ``raise`` reply stands for (``sandbox_program._raised``): with ``bases`` None
    the builtin exception ``type_name`` (a test that expects ValueError sees one), else a class made
    here by :func:`_made`, named ``type_name``, on the builtin exception classes ``bases`` names, so
    ``class ValueError(Exception)`` in the program is no ValueError here, while
    ``class MyErr(ValueError)`` is one. The program's own exception objects never cross."""
    text = message if type(message) is str else ""
    names = [type_name] if bases is None else bases
    classes = tuple(map(_builtin_exception, names)) if type(names) is list else ()
    if type(type_name) is not str or not classes or None in classes:
        return ProgramError(f"{type_name}: {text}" if type(type_name) is str else text)
    try:
        cls = classes[0] if bases is None else _made(type_name, type_name, classes, None)
    except (wire.WireError, TypeError) as exc:  # a malformed name, bases no class can have, too many
        raise NotData(f"the program's exception cannot be made here: {exc}") from None
    try:
        return cls(text)
    except Exception:  # noqa: BLE001 - one that needs more than a message (UnicodeDecodeError)
        return ProgramError(f"{type_name}: {text}")


def _builtin_exception(name):
    """The builtin exception class ``name``, if the tests may see it raised by a call; else None.
    StopIteration would end a C iterator in the tests (map, filter, zip) as if it were done: as in
    PEP 479 it becomes an error here, as do exceptions that are not Exceptions (KeyboardInterrupt)."""
    cls = getattr(builtins, name, None) if type(name) is str else None
    if isinstance(cls, type) and issubclass(cls, Exception):
        return None if issubclass(cls, (StopIteration, StopAsyncIteration)) else cls
    return None


def _proxy(fd: int, name: str):
    def call(*args, **kwargs):
        try:
            wire.send(fd, ["call", name, list(args), dict(kwargs)])
            reply = wire.receive(fd)
        except (EOFError, BrokenPipeError, ConnectionResetError) as exc:
            raise ProgramEnded(f"the program's process ended while running {name}()") from exc
        except wire.WireError as exc:
            raise NotData(f"the program's process sent malformed data: {exc}") from None
        if type(reply) is list and len(reply) == 4 and reply[0] == "ok" and type(reply[3]) is list:
            for change in reply[3]:
                if type(change) is not list or len(change) != 2:
                    raise NotData(f"malformed reply to a call of {name}()")
                _write(_argument(change[0], args, kwargs), change[1])
            return reply[1] if reply[2] is None else _argument(reply[2], args, kwargs)
        if type(reply) is list and len(reply) == 4 and reply[0] == "raise":
            raise _exception(reply[1], reply[2], reply[3])
        if type(reply) is list and len(reply) == 2 and reply[0] == "exit":
            raise ProgramExited(f"the program exited in {name}(): {reply[1]}")
        raise NotData(f"malformed reply to a call of {name}()")

    call.__name__ = call.__qualname__ = name
    return call


def _argument(key, args: tuple, kwargs: dict):
    """The tests' own argument the program's reply names (its index, or its keyword)."""
    if type(key) is int and 0 <= key < len(args):
        return args[key]
    if type(key) is str and key in kwargs:
        return kwargs[key]
    raise NotData("the program's process named an argument that was not passed")


def _write(target, value) -> None:
    """Give the tests' argument the value the program's call left in it, in place (its nested
    objects are replaced, not changed)."""
    collections = sys.modules.get("collections")
    deque = getattr(collections, "deque", list)
    mapping = (dict, getattr(collections, "UserDict", dict))
    if isinstance(target, mapping) and type(value) is dict or isinstance(target, set) and type(value) is set:
        target.clear()
        target.update(value)
    elif isinstance(target, deque) and type(value) is deque:
        target.clear()
        target.extend(value)
    elif isinstance(target, (list, getattr(collections, "UserList", list))) and type(value) is list:
        target[:] = value
    elif isinstance(target, bytearray) and type(value) is bytearray:
        target[:] = value
    else:
        raise NotData(f"the program's process changed a {type(target).__name__} argument into a {type(value).__name__}")


def build(items: list):
    """This process's own object for a typed value ``[kind, part, ...]`` (``sandbox_wire.BUILD``);
    the parts are already this process's objects. Any failure is the frame's: a WireError."""
    try:
        return _build(items[0], items[1:])
    except wire.WireError:
        raise
    except Exception:  # noqa: BLE001 - never an exception the tests could take for the program's
        raise wire.WireError(f"malformed {str(items[0])[:40]} value") from None


def _build(kind: str, parts: list):  # noqa: C901, PLR0911, PLR0912 - one branch per kind
    import collections  # noqa: PLC0415 - only when a program returns one of these

    one = parts[0] if len(parts) == 1 else None
    if kind in ("Counter", "OrderedDict", "UserDict", "mappingproxy", "dict_keys", "dict_items") and type(one) is dict:
        if kind in ("dict_keys", "dict_items"):
            return one.keys() if kind == "dict_keys" else one.items()
        return type(type.__dict__)(one) if kind == "mappingproxy" else getattr(collections, kind)(one)
    if kind == "dict_values" and type(one) is list:
        return dict(enumerate(one)).values()
    if kind == "defaultdict" and len(parts) == 2 and type(parts[1]) is dict:
        factory = getattr(builtins, parts[0]) if type(parts[0]) is str and parts[0] in wire.FACTORIES else None
        return collections.defaultdict(factory, parts[1])
    if (kind, type(one)) in (("UserList", list), ("UserString", str)):
        return getattr(collections, kind)(one)
    if kind == "ChainMap" and type(one) is list and all(isinstance(m, collections.abc.Mapping) for m in one):
        return collections.ChainMap(*one)
    if kind == "array" and len(parts) == 2 and type(parts[0]) is str and type(parts[1]) is bytes:
        import array  # noqa: PLC0415

        made = array.array(parts[0])  # a ValueError for an unknown typecode
        made.frombytes(parts[1])
        return made
    if kind == "memoryview" and len(parts) == 3 and type(parts[0]) is str and type(parts[1]) is bytes:
        shape = parts[2]
        if type(shape) is not tuple or len(shape) > 64 or any(type(n) is not int for n in shape):
            raise wire.WireError("malformed memoryview")
        view = memoryview(parts[1])
        return view if parts[0] == "B" and shape == (len(view),) else view.cast(parts[0], list(shape))
    if kind == "namedtuple" and len(parts) == 4 and type(parts[2]) is tuple and type(parts[3]) is tuple:
        return _made(parts[0], parts[1], (tuple,), parts[2])._make(parts[3])
    if kind == "sub" and len(parts) == 3:
        value = parts[2]
        base = type(value)
        if (base.__module__, base.__qualname__) not in BASES or getattr(
            sys.modules.get(base.__module__), base.__qualname__, None
        ) is not base:
            raise wire.WireError("a subclass of a class the wire does not carry")
        cls = _made(parts[0], parts[1], (base,), None)
        if base is collections.defaultdict:
            return cls(value.default_factory, value)
        if base is collections.ChainMap:
            return cls(*value.maps)
        return cls(value.typecode, value) if base.__module__ == "array" else cls(value)
    raise wire.WireError(f"malformed {kind[:40]} value")


def _made(name, qualname, bases: tuple, fields):
    """The class standing for a program's subclass of ``bases`` (or namedtuple with ``fields``):
    its name and nothing of the program's, made once per job."""
    parts = qualname.split(".") if type(qualname) is str and len(qualname) <= 200 else [""]
    if type(name) is not str or not name.isidentifier() or not all(p.isidentifier() or p == "<locals>" for p in parts):
        raise wire.WireError("malformed class name")
    if fields is not None and (len(fields) > 255 or any(type(f) is not str for f in fields)):
        raise wire.WireError("malformed namedtuple fields")
    key = (name, qualname, bases, fields)
    cls = MADE.get(key)
    if cls is None:
        if len(MADE) >= MAX_CLASSES:
            raise wire.WireError(f"more than {MAX_CLASSES} classes in one job")
        if fields is None:
            cls = type(name, bases, {"__module__": "__program__", "__qualname__": qualname})
        else:
            import collections  # noqa: PLC0415

            cls = collections.namedtuple(name, fields, module="__program__")  # a ValueError for bad fields
            cls.__qualname__ = qualname
        MADE[key] = cls
        if bases[0] in HASHABLE_BASES:
            wire.HASHABLE.add(cls)
    return cls


def _module(name, mentioned: set):
    """This process's import of the standard-library module ``name``, if the test's code mentions
    its top-level package and importing it has no effect beyond defining it."""
    parts = name.split(".") if type(name) is str else [""]
    top = parts[0]
    if top not in mentioned or top not in sys.stdlib_module_names or top in NEVER_IMPORTED or "__main__" in parts:
        return None
    try:
        return importlib.import_module(name)
    except Exception:
        return None


def _bind(reply, wanted: set, mentioned: set, fd: int) -> dict:
    namespace = {"__name__": "__test__", "__builtins__": builtins}
    for item in reply:
        if type(item) is not list or len(item) != 3 or type(item[0]) is not str or item[0] not in wanted:
            continue
        name, kind, payload = item
        if kind == "call":
            namespace[name] = _proxy(fd, name)
        elif kind == "module":
            module = _module(payload, mentioned)
            if module is not None:
                namespace[name] = module
        elif kind == "data":
            namespace[name] = payload
    return namespace


def grade(test: str, entry_point: str, fd: int) -> tuple[str, str]:
    code = compile(test, TEST_FILE, "exec", dont_inherit=True)
    mentioned = _names(code)
    wanted = {n for n in mentioned if not hasattr(builtins, n) and not n.startswith("__")}
    if entry_point:
        wanted.add(entry_point)
    wire.BUILD = build
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
    namespace = _bind(reply[1], wanted, mentioned, fd)
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
    child.start()  # as the server's own uid (argv): no program's, nor another server's
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
