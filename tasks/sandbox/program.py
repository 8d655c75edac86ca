"""The untrusted side of :mod:`tasks.sandbox`: run the program, then serve calls of its functions.

Started inside bubblewrap (``python -I -S -B -c "...; sandbox_program.main()" CPU_S MEMORY_MB NPROC
FSIZE_MB CHANNEL_FD``, see :func:`tasks.sandbox.bwrap.command`) with the program on stdin; the
channel to the grader becomes fd 3. Everything in this process is
the program's to change once it runs, this file included: nothing here is trusted, which is why
the grader (another process, in another sandbox) decides the verdict from the plain data it gets.

Protocol (frames of :mod:`sandbox_wire`), the grader speaking first: ``["names", [name, ...]]`` ->
``["ready", [[name, kind, payload], ...]]`` (kind ``call``, ``module`` with the module's name, or
``data`` with the value), or ``["load_error", kind, text]`` when the program itself failed (kind
``exit`` for SystemExit, else ``error``); then any number of ``["call", name, args, kwargs]`` ->
``["ok", value, same, changed]``, ``["raise", type_name, message, bases]`` (:func:`_raised`) or
``["exit", text]`` (the function raised SystemExit). In an ``ok`` reply, ``same`` is None or the
argument (its index, or its keyword) that the function returned, then sent as None, and ``changed``
the ``[index or keyword, value]`` of each list, dict, set, bytearray or deque argument whose value
the call changed; the grader changes its own argument objects to match, in place, and returns its
own argument for ``same``, so that ``f(a) is a``, ``f(a) is not a`` and a test of what ``f`` did to
``a`` answer as in one process.

Values of richer types than plain data cross as typed values (:func:`describe`): the standard
library's mappings, sequences and views by their contents, a subclass of a carried class by its
name and its base value, a namedtuple by its name, fields and items.
"""

import builtins
import sys
import types

import sandbox_child as child
import sandbox_wire as wire

PROGRAM_FILE = "<program>"
BUILTIN = {t: t.__name__ for t in (int, float, complex, str, bytes, bytearray, tuple, list, set, frozenset, dict)}
BUILTIN |= {type({}.keys()): "dict_keys", type({}.values()): "dict_values", type({}.items()): "dict_items"}
BUILTIN |= {memoryview: "memoryview", type(type.__dict__): "mappingproxy"}
STDLIB = {("collections", n): n for n in ("deque", "Counter", "OrderedDict", "defaultdict", "ChainMap")}
STDLIB |= {("collections", n): n for n in ("UserList", "UserDict", "UserString")}
STDLIB |= {("array", "array"): "array", ("fractions", "Fraction"): "Fraction", ("decimal", "Decimal"): "Decimal"}
# an exact copy of a value of a builtin class, through the base class's own methods
COPY = {"int": int.__index__, "float": float.__float__, "complex": complex.__complex__, "str": str.__str__}
COPY |= {"bytes": lambda v: bytes.__getitem__(v, slice(None)), "bytearray": bytearray}
COPY |= {"tuple": lambda v: tuple(tuple.__iter__(v)), "list": lambda v: list(list.__iter__(v))}
COPY |= {"set": lambda v: set(set.__iter__(v)), "frozenset": lambda v: frozenset(frozenset.__iter__(v))}
COPY |= {"dict": lambda v: dict(dict.items(v))}
WATCHED = (list, dict, set, bytearray)  # and deque: arguments whose changes go back to the grader
# the builtin exception classes, taken before the program runs (it may rebind builtins' names)
EXCEPTIONS = frozenset(c for c in vars(builtins).values() if isinstance(c, type) and issubclass(c, BaseException))


def _kind(cls) -> str | None:
    """The wire's name for a class it carries (that class exactly), else None."""
    kind = BUILTIN.get(cls)
    if kind is None:
        key = (getattr(cls, "__module__", None), getattr(cls, "__qualname__", None))
        kind = STDLIB.get(key) if type(key[0]) is str and type(key[1]) is str else None
        if kind is not None and getattr(sys.modules.get(key[0]), key[1], None) is not cls:
            return None
    return kind


def _named(cls) -> bool:
    name, qualname = cls.__name__, cls.__qualname__
    parts = qualname.split(".") if type(qualname) is str else [""]
    return type(name) is str and name.isidentifier() and all(p.isidentifier() or p == "<locals>" for p in parts)


def describe(value):
    """``(kind, parts)`` for a value of a carried class other than the plain ones (``sandbox_wire.TYPED``),
    None to leave it to the plain encoding (its base value, an iterator's items, or an opaque marker)."""
    cls = type(value)
    base = next((b for b in cls.__mro__ if _kind(b) is not None), None)
    if base is None:
        return None
    kind = _kind(base)
    if base is cls:
        return _parts(kind, value)
    if not _named(cls):
        return None
    fields = getattr(cls, "_fields", None)
    if kind == "tuple" and type(fields) is tuple and all(type(f) is str for f in fields):
        return "namedtuple", [cls.__name__, cls.__qualname__, fields, tuple(tuple.__iter__(value))]
    if kind in COPY:
        plain = COPY[kind](value)
    elif kind == "defaultdict":
        plain = base(value.default_factory, value)
    elif kind in ("ChainMap", "array"):
        plain = base(*value.maps) if kind == "ChainMap" else base(value.typecode, value)
    else:  # deque, Counter, OrderedDict, UserList, UserDict, UserString, Fraction, Decimal
        plain = base(value)
    return "sub", [cls.__name__, cls.__qualname__, plain]


def _parts(kind: str, value):  # noqa: PLR0911 - one return per kind
    if kind in ("dict_keys", "dict_items"):
        return kind, [dict(value.mapping)]
    if kind == "dict_values":
        return kind, [list(value)]
    if kind in ("Counter", "OrderedDict", "UserDict", "mappingproxy"):
        return kind, [dict(value.items())]
    if kind == "defaultdict":
        factory = getattr(value.default_factory, "__name__", None)
        known = factory in wire.FACTORIES and value.default_factory is getattr(builtins, factory)
        return kind, [factory if known else None, dict(dict.items(value))]
    if kind in ("UserList", "UserString"):
        return kind, [list(value.data) if kind == "UserList" else str(value.data)]
    if kind == "ChainMap":
        return kind, [list(value.maps)]
    if kind == "array":
        return kind, [str(value.typecode), bytes(value.tobytes())]
    if kind == "memoryview":
        return kind, [str(value.format), bytes(value.tobytes()), tuple(map(int, value.shape))]
    return None  # deque, Fraction, Decimal: plain data


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
        wire.send(fd, ["raise", "ValueError", f"the program's result cannot be sent: {child.describe(exc)}", None])


def main() -> None:
    child.start()
    wire.ACCEPT_HANDLES = True
    wire.TYPED = describe
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
        _reply(fd, _call(namespace[name], args, kwargs))


def _call(function, args: list, kwargs: dict) -> list:
    """The reply to one call: its result (or the argument it is), and the arguments it changed."""
    arguments = [*enumerate(args), *kwargs.items()]
    deque = getattr(sys.modules.get("collections"), "deque", list)
    watched = [(key, value, wire.encode(value)) for key, value in arguments if isinstance(value, (*WATCHED, deque))]
    try:
        result = function(*args, **kwargs)
    except SystemExit as exc:
        return ["exit", child.describe(exc)]
    except BaseException as exc:  # noqa: BLE001 - exceptions go back to the tests
        return _raised(exc)
    same = next((key for key, value in arguments if value is result), None)
    try:
        changed = [[key, value] for key, value, before in watched if wire.encode(value) != before]
    except BaseException as exc:  # noqa: BLE001 - the program's failure
        text = f"an argument the program changed cannot be sent: {child.describe(exc)}"
        return ["raise", "ValueError", text, None]
    return ["ok", None if same is not None else result, same, changed]


def _raised(exc: BaseException) -> list:
    """The reply to a call that raised ``exc``: its class's name, its message, and ``bases``: None
    when the class is a builtin exception class itself, else the names of the builtin exception
    classes it derives from (those of its MRO that no other of them derives from). The grader
    re-creates the builtin by name, or makes a class of that name on those bases, so its ``except``
    clauses answer as in one process: ``except ValueError`` catches ``class MyErr(ValueError)`` and
    ``json.JSONDecodeError``, never the program's own ``class ValueError(Exception)``."""
    cls = type(exc)
    name = type.__getattribute__(cls, "__name__")
    if cls in EXCEPTIONS:
        return ["raise", name, _message(exc), None]
    found = [c for c in type.__getattribute__(cls, "__mro__") if c in EXCEPTIONS]
    bases = [c.__name__ for c in found if not any(o is not c and issubclass(o, c) for o in found)]
    return ["raise", name, _message(exc), bases]
