"""The untrusted side of :mod:`tasks.sandbox`: run the program, then serve calls of its functions.

Started inside bubblewrap (``python -I -S -B -c "...; sandbox_program.main()" CPU_S MEMORY_MB NPROC
FSIZE_MB CHANNEL_FD``, see :func:`tasks.sandbox.bwrap.command`) with the program on stdin; the
channel to the grader becomes fd 3. Everything in this process is
the program's to change once it runs, this file included: nothing here is trusted, which is why
the grader (another process, in another sandbox) decides the verdict from the plain data it gets.

Protocol (frames of :mod:`sandbox_wire`), the grader speaking first:
``["names", [name, ...]]`` -> ``["ready", [[name, kind, payload], ...]]`` (kind ``call``,
``module`` with the module's name, or ``data`` with the value), or ``["load_error", kind, text]``
when the program itself failed (kind ``exit`` for SystemExit, else ``error``); then any number
of ``["call", name, args, kwargs]`` -> ``["ok", value]``, ``["raise", type_name, message]`` or
``["exit", text]`` (the function raised SystemExit).
"""

import builtins
import sys
import types

import sandbox_child as child
import sandbox_wire as wire

PROGRAM_FILE = "<program>"


def _describe_names(namespace: dict, wanted) -> list:
    found = []
    for name in wanted:
        if type(name) is not str or name.startswith("__") or name not in namespace:
            continue
        value = namespace[name]
        if isinstance(value, types.ModuleType):
            found.append([name, "module", getattr(value, "__name__", "")])
        elif callable(value):
            found.append([name, "call", None])
        else:
            found.append([name, "data", value])
    return found


def _message(exc: BaseException) -> str:
    try:
        return str(exc)[:300]
    except BaseException:  # noqa: BLE001 - the program's exception may not print
        return ""


def _reply(fd: int, message: list) -> None:
    try:
        wire.send(fd, message)
    except BaseException as exc:  # noqa: BLE001 - an unsendable value is the program's failure
        wire.send(fd, ["raise", "ValueError", f"the program's result cannot be sent: {child.describe(exc)}"])


def main() -> None:
    child.start()
    wire.ACCEPT_HANDLES = True
    program = child.read_stdin()
    fd = child.CHANNEL_FD
    module = types.ModuleType("__program__")  # not __main__: a demo block does not run
    namespace = module.__dict__
    namespace["__builtins__"] = builtins
    sys.modules["__main__"] = module
    sys.setrecursionlimit(3000)
    builtins.exit = builtins.quit = sys.exit  # what the skipped `site` would have added
    load_error = None
    try:
        exec(compile(program, PROGRAM_FILE, "exec", dont_inherit=True), namespace)  # noqa: S102
    except SystemExit as exc:
        load_error = ["load_error", "exit", child.describe(exc)]
    except BaseException as exc:  # noqa: BLE001 - the program's own failure, reported to the grader
        load_error = ["load_error", "error", child.describe(exc)]
    request = wire.receive(fd)
    if load_error is not None:
        wire.send(fd, load_error)
        return
    _reply(fd, ["ready", _describe_names(namespace, request[1])])
    while True:
        try:
            _, name, args, kwargs = wire.receive(fd)
        except EOFError:
            return
        try:
            result = namespace[name](*args, **kwargs)
            message = ["ok", result]
        except SystemExit as exc:
            message = ["exit", child.describe(exc)]
        except BaseException as exc:  # noqa: BLE001 - exceptions go back to the tests
            message = ["raise", type(exc).__name__, _message(exc)]
        _reply(fd, message)
