"""Hostile programs, graded through a code task's ``verify`` on real HumanEval and MBPP rows. Their functions
are wrong (None, a constant, or an object whose plain value is wrong), so only a grader they defeat could pass
them: 1. reaching the grader's objects, 2. values that claim to equal anything, 3. escaping the containment,
4. denying the grader service. The caller and the machine are left as they were. Then legitimate programs."""

from __future__ import annotations

import contextlib
import hashlib
import os
import socket
import tempfile
import textwrap
import uuid
from pathlib import Path

import psutil
import pytest
from shared_data import DATA

import tasks
from bench.registry import TASKS
from tasks.sandbox import bwrap as sandbox_bwrap

pytestmark = pytest.mark.usefixtures("machine_left_as_it_was")

# answers that are booleans, floats compared by difference, lists, tuples, strings and dicts
ROWS = {"humaneval": ("HumanEval/0", "HumanEval/2", "HumanEval/29", "HumanEval/107"), "mbpp": ("mbpp/11", "mbpp/277")}
# the wrong function a hostile program ends with, unless it defines its own; CALL, if any, attacks
ENTRY = '\nRESULT = vars().get("RESULT")\ndef ENTRY(*a, **k):\n    globals().get("CALL", int)()\n    return RESULT\n'


@pytest.fixture(scope="module")
def graded():
    """Code tasks on their rows, warmed up first (their grader servers predate every test); references pass."""
    if not (DATA / "SOURCES.md").is_file():
        pytest.skip(f"benchmark files not found at {DATA}")
    found = {}
    for name, ids in ROWS.items():
        cls = TASKS.get(name)
        t = cls(cls.Config(data_dir=str(DATA), workers=2, timeout_s=3.0, cpu_s=2))
        t.allow_code_execution()
        rows = [r for r in t.load("eval") if r["id"] in ids]
        assert len(rows) == len(ids) and all(o.correct for o in t.verify([r["answer"] for r in rows], rows))
        found[name] = (t, rows)
    yield found
    for t, _ in found.values():
        t._sandbox.close()


@pytest.fixture
def sandbox(graded):
    return graded["humaneval"][0]._sandbox


def graded_wrong(graded, program: str, names=tuple(ROWS)) -> list:
    """Grade ``program`` (``ENTRY`` stands for each row's entry point) on every row: never correct."""
    code, outcomes = textwrap.dedent(program), []
    code += "" if "def ENTRY(" in code else ENTRY
    for name in names:
        t, rows = graded[name]
        completions = [f"```python\n{code.replace('ENTRY', r['entry_point'])}\n```" for r in rows]
        for r, o in zip(rows, t.verify(completions, rows)):
            assert not o.correct and o.reward == 0.0 and o.error, (r["id"], o)
            outcomes.append(o)
    return outcomes


# 1. reaching the grader's objects: whatever the program reaches lives in its own process

REACH = {
    "stdlib-globals": """
        import os
        wire = os.walk.__globals__["sys"].modules["sandbox_wire"]
        wire.encode = lambda v, real=wire.encode: real(["ok", True] if type(v) is list and v[:1] == ["ok"] else v)""",
    "subclasses": """
        every = lambda cls: [c for sub in type.__subclasses__(cls) for c in [sub, *every(sub)]]
        Opaque = next(c for c in every(object) if c.__name__ == "Opaque")
        Opaque.__eq__, Opaque.__hash__ = lambda s, o: True, lambda s: 0
        RESULT = Opaque("bool", True, 1)""",
    "caller-frames": """
        import sys
        def CALL():
            f = sys._getframe()
            while "_reply" not in f.f_globals:  # up to sandbox_program's frame
                f = f.f_back
            f.f_globals["_reply"] = lambda fd, m, send=f.f_globals["wire"].send: send(fd, ["ok", True])""",
    "traceback-frames": """
        def CALL():
            try:
                raise RuntimeError
            except RuntimeError as e:
                f = e.__traceback__.tb_frame
            while "child" not in f.f_globals:
                f = f.f_back
            f.f_globals["child"].describe = lambda exc: "passed"
            raise SystemExit(0)""",
    "inspect-stack": """
        import inspect, os
        def CALL():
            for g in (info.frame.f_globals for info in inspect.stack() if "wire" in info.frame.f_globals):
                g["wire"].send = lambda fd, v: os.write(fd, b"passed\\n")""",
    "signal-handler": """
        import signal, sandbox_wire as wire
        def forge(sig, frame):
            while frame is not None:
                frame = frame.f_globals.get("wire", wire).send(3, ["ok", True]) or frame.f_back
        signal.signal(signal.SIGALRM, forge)
        signal.setitimer(signal.ITIMER_REAL, 0.002, 0.002)""",
    "gc": """
        import gc
        def CALL():
            for o in gc.get_objects():
                if type(o) is dict and o.get("__name__") == "sandbox_wire":
                    o["encode"] = lambda v: b"T"
                for ref in gc.get_referrers(o) if type(o) is list and o[:1] == ["names"] else ():
                    ref.update(namespace={}) if type(ref) is dict else None""",
    "audit-hook": """
        import os, sys, sandbox_wire as wire
        forged = wire.encode(["ok", True])
        sys.addaudithook(lambda event, args: os.write(3, len(forged).to_bytes(4, "big") + forged)
                         if event in ("open", "exec", "compile", "object.__setattr__") else None)
        CALL = lambda: open("x", "w").close()""",
    "every-fd": """
        import contextlib, os, sandbox_wire as wire
        for fd in [*map(int, os.listdir("/proc/self/fd")), *range(64)]:  # a forged ready, then a forged verdict
            with contextlib.suppress(OSError):
                wire.send(fd, ["ready", [["ENTRY", "data", True], ["check", "call", None]]])
                os.write(fd, b"passed\\n")""",
    "forged-replies-in-call": """
        import sandbox_wire as wire
        forged = [["ok", True]] * 50 + [["exit", "passed"], ["raise", "AssertionError", "passed"]]
        CALL = lambda: [wire.send(3, message) for message in forged]""",
    "builtins": "import builtins\nbuiltins.isinstance, builtins.bool = lambda v, t: True, lambda v=0: True\n"
    "builtins.type = lambda *a: int",
    "patched-sys-modules": """
        import os, sys, types
        fake, program = types.ModuleType("sandbox_wire"), sys.modules["sandbox_program"]
        fake.send, fake.receive = lambda fd, v: os.write(fd, b"\\0\\0\\0\\x01T"), sys.modules["sandbox_wire"].receive
        sys.modules["sandbox_wire"] = program.wire = fake
        program._describe_names = lambda ns, names: [[n, "module", "unittest.mock"] for n in names]""",
}
REACH |= {f"raises-{e}": f"def CALL():\n    raise {e}" for e in ("StopIteration", "GeneratorExit", "SystemExit")}


@pytest.mark.parametrize("program", REACH.values(), ids=REACH)
def test_reaching_the_grader(graded, program):
    graded_wrong(graded, program)


# 2. values that claim to equal anything: only their plain value crosses

LIAR = (  # a class L of the given base that claims to equal, and to be close to, anything
    "class L({}):\n    __eq__ = __lt__ = __le__ = __gt__ = __ge__ = lambda s, o: True\n"
    "    __ne__ = lambda s, o: False\n    __hash__ = lambda s: 0\n"
    "    __sub__ = __rsub__ = __abs__ = lambda s, *o: 0\nRESULT = {}"
)
LIARS = {
    "mock.ANY": "from unittest.mock import ANY as RESULT",
    "MagicMock": "from unittest import mock\nRESULT = mock.MagicMock()\nRESULT.__eq__.return_value = True\n"
    "RESULT.__sub__.return_value = RESULT.__abs__.return_value = 0",
    "ALWAYS_EQ": f"import contextlib\n{LIAR.format('object', 'L()')}\nwith contextlib.suppress(ImportError):\n"
    "    from test.support import ALWAYS_EQ as RESULT",
    "weakref.proxy": "import weakref\n" + LIAR.format("list", "weakref.proxy(KEEP := L())"),
    "MappingProxyType": "import types\n" + LIAR.format("dict", "types.MappingProxyType(L())"),
    "UserList-patched": "import collections\ncollections.UserList.__eq__ = lambda s, o: True\n"
    "RESULT = collections.UserList()",
    "namedtuple": "import collections\n" + LIAR.format("collections.namedtuple('P', 'a b')", "L(0, 0)"),
    "float-nan": LIAR.format("float", "L('nan')"),
    "decimal-sNaN": "import decimal\nRESULT = decimal.Decimal('sNaN')",
    "fraction": "import fractions\n" + LIAR.format("fractions.Fraction", "L(0)"),
    "deque": "import collections\n" + LIAR.format("collections.deque", "L()"),
    "iterator-of-liars": LIAR.format("object", "iter([L(), L()])"),
    "endless-iterator": "import itertools\n" + LIAR.format("object", "itertools.repeat(L())"),
    "liar-as-dict-key": LIAR.format("object", "{L(): True}"),
    "class-spoof": "class L:\n    __class__ = property(lambda s: int)\n    __eq__ = lambda s, o: True\n"
    "    __index__ = lambda s: 1\nRESULT = L()",
    "type-named-bool": "RESULT = type('bool', (), {'__eq__': lambda s, o: True, '__bool__': lambda s: True})()",
    "self-containing": "RESULT = []\nRESULT.append(RESULT)",
}
BASES = {"int": "0", "float": "0.0", "complex": "0j", "str": "''", "bytes": "b''", "list": "[]", "tuple": "()"}
BASES |= {"dict": "{}", "set": "set()", "frozenset": "frozenset()", "bytearray": "b''"}
for _base, _empty in BASES.items():  # each plain type, lying in Python and through a C slot of its own
    LIARS[f"{_base}-python"] = LIAR.format(_base, f"L({_empty})")
    LIARS[f"{_base}-C-slot"] = f"class L({_base}):\n    __eq__ = {_base}.__ne__\nRESULT = L()"


@pytest.mark.parametrize("setup", LIARS.values(), ids=LIARS)
def test_values_that_equal_anything(graded, setup):
    graded_wrong(graded, setup)


# 3. containment: nothing outside the sandbox is written, read, reached or left running


def test_writes_outside(graded, tmp_path):
    tmp_path.chmod(0o777)  # world-writable: only the sandbox may stop the program
    mark = uuid.uuid4().hex
    targets = [str(tmp_path / mark), f"{tempfile.gettempdir()}/creditbench-probe-{mark}"]
    scripts, stdlib = sandbox_bwrap.compiled_scripts(), Path(os.__file__).parent
    # the grader's own scripts and standard library: a program that changed them would change its grader
    guarded = [*scripts.rglob("*"), *stdlib.glob("collections/*"), *stdlib.glob("collections/*/*")]
    digests = {p: hashlib.sha256(p.read_bytes()).hexdigest() for p in guarded if p.is_file()}
    inside = [f"{sandbox_bwrap.INSIDE}/{p.relative_to(scripts)}" for p in scripts.rglob("*")]
    poison = [*map(str, guarded), *inside, str(stdlib / "sitecustomize.py"), f"{sandbox_bwrap.INSIDE}/evil.py"]
    program = f"""
        import contextlib, os
        def attempt(path):
            d, base = os.path.split(path)
            for how in [lambda: open(path, "a").write("x"), lambda: os.mkdir(path),
                        lambda: os.close(os.open(base, os.O_CREAT | os.O_WRONLY, dir_fd=os.open(d, os.O_RDONLY))),
                        lambda: open("/proc/self/root" + path, "a").write("x"),
                        lambda: open(f"/proc/{{os.getppid()}}/root" + path, "a").write("x"),
                        lambda: open("/proc/1/root" + path, "a").write("x"),
                        lambda: (os.symlink(path, "link"), open("link", "a").write("x")),
                        lambda: (os.symlink(d, "dir"), open("dir/" + base, "a").write("x")),
                        lambda: (open("mine", "w").close(), os.rename("mine", path))]:
                for step in (how, lambda: os.unlink("link"), lambda: os.unlink("dir"), lambda: os.unlink("mine")):
                    with contextlib.suppress(BaseException):
                        step()
        for path in {targets + poison!r}:
            attempt(path)
        CALL = lambda: attempt({targets[0]!r})
    """
    graded_wrong(graded, program, ("humaneval",))
    assert not any(os.path.lexists(t) for t in targets)
    assert {p: hashlib.sha256(p.read_bytes()).hexdigest() for p in guarded if p.is_file()} == digests
    assert sorted(os.listdir(scripts)) == sorted(["__pycache__", *sandbox_bwrap.SCRIPTS]) and len(digests) > 10
    assert not (stdlib / "sitecustomize.py").exists()


SYSCALLS = """
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
def calls():  # new user and mount namespaces, a mount, attaching to pid 1, joining a namespace, chroot
    return [libc.unshare(0x10000000), libc.unshare(0x20000), libc.mount(b"none", b"/usr", b"tmpfs", 0, None),
            libc.ptrace(16, 1, 0, 0), libc.setns(0, 0), libc.chroot(b"/tmp")]
"""


def test_nothing_of_the_machine_is_visible_and_ctypes_calls_are_refused(graded, sandbox, tmp_path, monkeypatch):
    secret = uuid.uuid4().hex
    monkeypatch.setenv("CREDITBENCH_SECRET_PROBE", secret)
    (tmp_path / "visible").write_text(secret)
    home = [str(p) for p in Path.home().iterdir() if not sandbox_bwrap.python_executable().startswith(str(p))]
    root = Path(tasks.__file__).resolve().parents[1]
    paths = [str(root), str(root / "tasks" / "sandbox.py"), str(DATA), str(tmp_path / "visible"), *home[:20]]
    paths += ["/etc/passwd", "/etc/hostname", "/home", "/var", "/work", "/proc/1/root/work", "/sys/fs/cgroup"]
    program = SYSCALLS + textwrap.dedent(f"""
        import contextlib, glob
        def seen():
            found = [p for p in {paths!r} if os.path.lexists(p)]
            for p in glob.glob("/proc/*/environ") + glob.glob("/proc/*/cmdline") + glob.glob("/proc/*/task/*/environ"):
                with contextlib.suppress(OSError), open(p, "rb") as f:
                    text = f.read().decode("utf-8", "replace")
                    found += [p] if {secret!r} in text or "pytest" in text or "CREDITBENCH_SECRET" in text else []
            return found
        RESULT = seen() or calls()
    """)
    res = sandbox.run(program, "assert seen() == []\nassert calls() == [-1] * 6", "seen")
    assert res.passed, res  # the program found nothing of the machine, and the kernel refused its calls
    assert sum(os.path.lexists(p) for p in paths) >= 5  # while it looked for things that exist here
    graded_wrong(graded, program, ("mbpp",))


def test_processes_do_not_outlive_the_program_and_a_fork_bomb_is_bounded(graded):
    marks = [f"{4000 + uuid.uuid4().int % 5000}.{i}" for i in range(5)]  # unique arguments of `sleep`
    program = f"""
        import contextlib, subprocess, time
        M = {marks!r}
        if libc.fork() == 0:  # through the C library: a new session, then exec
            libc.setsid()
            libc.execv(b"/bin/sleep", (ctypes.c_char_p * 3)(b"sleep", M[0].encode(), None))
            libc._exit(0)
        for i in (1, 2):  # double-forked daemons, one exec'd and one still Python
            if os.fork() == 0:
                os.setsid()
                if os.fork() == 0:
                    os.execv("/bin/sleep", ["sleep", M[1]]) if i == 1 else time.sleep(100)
                os._exit(0)
        os.system(f"sleep {{M[2]}} &")
        subprocess.Popen(["sleep", M[3]], start_new_session=True)
        subprocess.Popen(["/bin/sh", "-c", f"nohup sleep {{M[4]}} >/dev/null 2>&1 &"])
        root = os.getpid()
        with contextlib.suppress(OSError):  # a fork bomb, until RLIMIT_NPROC stops it
            while True:
                os.fork()
        if os.getpid() != root:
            time.sleep(100)
    """
    graded_wrong(graded, SYSCALLS + textwrap.dedent(program))
    assert not [p for p in psutil.process_iter(["cmdline"]) if set(marks) & set(p.info["cmdline"] or ())]
    assert psutil.pid_exists(os.getpid())


def test_network(graded, tmp_path):
    tmp_path.chmod(0o777)
    name, path = f"\0creditbench-probe-{uuid.uuid4().hex}", str(tmp_path / "s")
    with contextlib.ExitStack() as stack:
        servers = [stack.enter_context(socket.socket(*family)) for family in [(), (socket.AF_UNIX,), (socket.AF_UNIX,)]]
        for s, address in zip(servers, [("127.0.0.1", 0), name, path]):
            s.bind(address)
            s.listen()
            s.settimeout(0.2)
        os.chmod(path, 0o777)
        port = servers[0].getsockname()[1]
        reach = [(socket.AF_INET, ("127.0.0.1", port)), (socket.AF_INET6, ("::1", port))]
        reach = [(int(f), to) for f, to in [*reach, (socket.AF_UNIX, name), (socket.AF_UNIX, path)]]
        program = f"""
            import contextlib, socket
            def CALL():
                for family, to in {reach!r}:
                    with contextlib.suppress(OSError), socket.socket(family) as s:
                        s.settimeout(0.5)
                        s.connect(to)
                        s.sendall(b"x")
            CALL()
        """
        graded_wrong(graded, program, ("mbpp",))
        for s in servers:
            with pytest.raises(socket.timeout):
                s.accept()


# 4. grader denial: malformed replies fail the program; the grader survives and grades the next job

FRAMES = """
import os, time
L = lambda n: n.to_bytes(4, "big")
OK = b"l" + L(2) + b"s" + L(2) + b"ok"
frame = lambda body: L(len(body)) + body
def send(data):
    while data:
        data = data[os.write(3, data):]
"""
BOMBS = {
    "deep-nesting": "frame(OK + b'l\\0\\0\\0\\x01' * 200_000 + b'N')",
    "claims-4GB": "b'\\xff\\xff\\xff\\xff' + OK",
    "over-MAX_FRAME": "L((32 << 20) + 1) + OK",
    "huge-int": "frame(OK + b'i' + L(30 << 20) + b'\\x7f' * (30 << 20))",
    "too-many-items": "frame(OK + b'l' + L((1 << 20) + 1) + b'N' * ((1 << 20) + 1))",
    "unknown-tag": "frame(OK + b'X')",
    "unhashable-key": "frame(OK + b'd' + L(2) + b'l' + L(0) + b'N')",
    "list-in-set-item": "frame(OK + b'S' + L(1) + b't' + L(1) + b'l' + L(0))",
    "length-past-frame": "frame(OK + b's' + L(1000) + b'abc')",
    "trailing-bytes": "frame(OK + b'T' + b'junk')",
    "bad-utf8": "frame(OK + b's' + L(2) + b'\\xff\\xfe')",
    "zero-step-range": "frame(OK + b'r' + L(3) + (b'i' + L(1) + b'\\0') * 3)",
    "bad-opaque": "frame(OK + b'o' + L(1) + b'x')",
    "forged-handle": "frame(OK + b'h' + bytes(8))",
    "huge-fraction": "frame(OK + b'Q' + L(2) + (b'i' + L(1 << 20) + b'\\x7f' * (1 << 20)) * 2)",
    "huge-decimal": "frame(OK + b'D' + L(1 << 24) + b'9' * ((1 << 24) - 12) + b'E99999999999')",
    "empty-frame": "L(0)",
    "flood-of-frames": "frame(OK + b'T') * 1000",
    "truncated-then-exit": "L(100) + OK + b'l'",
    "truncated-then-silence": "L(100) + OK",
}


@pytest.mark.parametrize("name", BOMBS)
def test_grader_denial(graded, name):
    silence = name.endswith("silence")  # the grader waits for the rest of the frame: the run times out
    t, rows = graded["mbpp" if silence else "humaneval"]
    server = t._sandbox._grader.proc.pid
    end = {"exit": "os._exit(0)", "silence": "time.sleep(60)"}.get(name.rpartition("-")[2], "return None")
    program = f"{FRAMES}def ENTRY(*a, **k):\n    send({BOMBS[name]})\n    {end}\n"
    out = graded_wrong(graded, program, ("mbpp",) if silence else tuple(ROWS))
    assert all(o.error.startswith("timeout") for o in out) or not silence
    assert all(o.correct for o in t.verify([r["answer"] for r in rows], rows))  # the next job
    assert t._sandbox._grader.proc.pid == server and t._sandbox._grader.proc.poll() is None


# legitimate programs pass: plain data of other types, own objects passed back, threads and processes

LEGIT = {
    "typing.NamedTuple": ("class P(typing.NamedTuple):\n    a: int\n    b: int\nRESULT = P(1, 2)", "f() == (1, 2)"),
    "namedtuple": ("RESULT = collections.namedtuple('P', 'a b')(1, 2)", "f() == (1, 2)"),
    "dict-subclass": ("class D(dict):\n    pass\nRESULT = D(a=[1, 2])", "f() == {'a': [1, 2]}"),
    "str-subclass": ("class S(str):\n    pass\nRESULT = S('ab')", "f() == 'ab' and f().upper() == 'AB'"),
    "UserList": ("RESULT = collections.UserList([1, 2])", "f() == [1, 2]"),
    "UserDict": ("RESULT = collections.UserDict(a=1)", "f() == {'a': 1}"),
    "UserString": ("RESULT = collections.UserString('ab')", "f() == 'ab'"),
    "ChainMap": ("RESULT = collections.ChainMap({'a': 1}, {'b': 2})", "f() == {'a': 1, 'b': 2}"),
    "OrderedDict": ("RESULT = collections.OrderedDict(b=2, a=1)", "f() == {'a': 1, 'b': 2} and [*f()] == ['b', 'a']"),
    "Counter": ("RESULT = collections.Counter('aab')", "f() == {'a': 2, 'b': 1}"),
    "deque": ("RESULT = collections.deque([1])", "f() == collections.deque([1])"),
    "generator": ("RESULT = None\ndef g():\n    yield from (1, 2)", "list(g()) == [1, 2]"),
    "own-object-back": ("class P:\n    v = 3\nRESULT = None\ndef x(p):\n    return p.v", "x(P()) == 3"),
    "threads-subprocess": (
        "import subprocess as sp, threading as th\nRESULT, ts = [], [th.Thread(target=lambda: RESULT.append("
        "sp.run(['/bin/true']).returncode)) for _ in 'abc']\n_ = [t.start() for t in ts], [t.join() for t in ts]",
        "f() == [0, 0, 0]",
    ),
}


@pytest.mark.parametrize("setup, test", LEGIT.values(), ids=LEGIT)
def test_legitimate_programs_pass(sandbox, setup, test):
    res = sandbox.run(f"import collections, typing\n{setup}\ndef f():\n    return RESULT", f"assert {test}", "f")
    assert res.passed, res
