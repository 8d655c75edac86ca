"""Hostile programs against the code grader (tasks/sandbox.py), graded through a code task's ``verify``
on real HumanEval and MBPP rows. Every hostile program's functions are wrong (they return None, a
constant, or an object whose plain value is wrong), so a pass could only come from defeating the
grader. Classes: 1. reaching the grader's objects, 2. values that claim to equal anything,
3. escaping the containment, 4. denying the grader service. Each leaves the caller alive and the
machine as it was. Last, legitimate programs that must pass."""

from __future__ import annotations

import hashlib
import os
import socket
import tempfile
import textwrap
import time
import uuid
from pathlib import Path

import psutil
import pytest
from sandbox_support import LIMITS
from shared_data import DATA

import tasks
from bench.registry import TASKS
from tasks import sandbox_bwrap
from tasks.sandbox import Sandbox

pytestmark = pytest.mark.usefixtures("machine_left_as_it_was")

# answers that are booleans, floats compared by difference, lists, tuples, strings and dicts
ROWS = {"humaneval": ("HumanEval/0", "HumanEval/2", "HumanEval/29", "HumanEval/107"), "mbpp": ("mbpp/11", "mbpp/277")}


@pytest.fixture(scope="module")
def graded():
    """The two code tasks on their rows, started before the first test (so that their grader servers
    are not new to any test) and stopped after the last."""
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


@pytest.fixture(scope="module")
def sandbox():
    sb = Sandbox(LIMITS, workers=2)
    assert sb.run("def f():\n    return 1", "assert f() == 1").passed
    yield sb
    sb.close()


def graded_wrong(graded, program: str, names=tuple(ROWS)) -> list:
    """Grade ``program`` (``ENTRY`` stands for each row's entry point) on every row: never correct."""
    outcomes = []
    for name in names:
        t, rows = graded[name]
        code = textwrap.dedent(program)
        completions = [f"```python\n{code.replace('ENTRY', r['entry_point'])}\n```" for r in rows]
        for r, o in zip(rows, t.verify(completions, rows)):
            assert not o.correct and o.reward == 0.0 and o.error, (r["id"], o)
            outcomes.append(o)
    return outcomes


def gone(*marks: str, within: float = 5.0) -> bool:
    """No live process has one of ``marks`` as an argument (waits for a dying PID namespace)."""
    end = time.monotonic() + within
    while True:
        procs = psutil.process_iter(["cmdline", "status"])
        alive = [p.pid for p in procs if set(p.info["cmdline"] or ()) & set(marks) and p.info["status"] != "zombie"]
        if not alive or time.monotonic() > end:
            return not alive
        time.sleep(0.1)


# 1. reaching the grader's objects: whatever the program reaches lives in its own process

REACH = {
    "stdlib-globals": """
        import os
        wire = os.walk.__globals__["sys"].modules["sandbox_wire"]
        real = wire.encode
        wire.encode = lambda v: real(["ok", True] if type(v) is list and v[:1] == ["ok"] else v)""",
    "subclasses": """
        def every(cls):
            for sub in type.__subclasses__(cls):
                yield sub
                yield from every(sub)
        Opaque = next(c for c in every(object) if c.__name__ == "Opaque")
        Opaque.__eq__, Opaque.__hash__ = lambda s, o: True, lambda s: 0
        RESULT = Opaque("bool", True)""",
    "caller-frames": """
        import sys
        def CALL():
            f = sys._getframe(1)
            while f is not None:
                if "_reply" in f.f_globals:
                    send = f.f_globals["wire"].send
                    f.f_globals["_reply"] = lambda fd, m: send(fd, ["ok", True])
                f = f.f_back""",
    "traceback-frames": """
        def CALL():
            try:
                raise RuntimeError
            except RuntimeError as e:
                f = e.__traceback__.tb_frame
            while f is not None:
                if "child" in f.f_globals:
                    f.f_globals["child"].describe = lambda exc: "passed"
                f = f.f_back
            raise SystemExit(0)""",
    "control-flow-exceptions": """
        n = [0]
        def CALL():
            n[0] += 1
            raise [StopIteration, GeneratorExit, KeyboardInterrupt, SystemExit, StopAsyncIteration][n[0] % 5]""",
    "inspect-stack": """
        import inspect, os
        def CALL():
            for info in inspect.stack():
                if "wire" in info.frame.f_globals:
                    info.frame.f_globals["wire"].send = lambda fd, v: os.write(fd, b"passed\\n")""",
    "signal-handler": """
        import signal, sandbox_wire as wire
        def forge(sig, frame):
            while frame is not None:
                frame.f_globals.get("wire", wire).send(3, ["ok", True])
                frame = frame.f_back
        signal.signal(signal.SIGALRM, forge)
        signal.setitimer(signal.ITIMER_REAL, 0.002, 0.002)""",
    "gc": """
        import gc
        def CALL():
            for o in gc.get_objects():
                if type(o) is dict and o.get("__name__") == "sandbox_wire":
                    o["encode"] = lambda v: b"T"
                if type(o) is list and o[:1] == ["names"]:
                    for ref in gc.get_referrers(o):
                        if type(ref) is dict:
                            ref["namespace"] = {}""",
    "audit-hook": """
        import os, sys, sandbox_wire as wire
        forged = wire.encode(["ok", True])
        sys.addaudithook(lambda event, args: os.write(3, len(forged).to_bytes(4, "big") + forged)
                         if event in ("open", "exec", "compile", "object.__setattr__") else None)
        def CALL():
            open("x", "w").close()""",
    "forged-ready-on-every-fd": """
        import os, sandbox_wire as wire
        for fd in map(int, os.listdir("/proc/self/fd")):
            try:
                wire.send(fd, ["ready", [["ENTRY", "data", True], ["check", "call", None]]])
            except OSError:
                pass""",
    "forged-ok-in-call": """
        import sandbox_wire as wire
        def CALL():
            for _ in range(50):
                wire.send(3, ["ok", True])""",
    "builtins": """
        import builtins
        builtins.isinstance = lambda v, t: True
        builtins.bool = lambda v=False: True
        builtins.type = lambda *a: int""",
    "patched-sys-modules": """
        import os, sys, types
        fake = types.ModuleType("sandbox_wire")
        fake.send = lambda fd, v: os.write(fd, b"\\0\\0\\0\\x01T")
        fake.receive = sys.modules["sandbox_wire"].receive
        sys.modules["sandbox_wire"] = sys.modules["sandbox_program"].wire = fake
        sys.modules["sandbox_program"]._describe_names = lambda ns, names: [[n, "module", "unittest.mock"] for n in names]""",
    "verdict-to-every-fd": """
        import os
        for fd in range(64):
            try:
                os.write(fd, b"passed\\n")
            except OSError:
                pass""",
}
ENTRY = "\nRESULT = globals().get('RESULT')\ndef ENTRY(*a, **k):\n    globals().get('CALL', lambda: None)()\n    return RESULT\n"


@pytest.mark.parametrize("program", REACH.values(), ids=REACH)
def test_reaching_the_grader(graded, program):
    graded_wrong(graded, textwrap.dedent(program) + ENTRY)


def test_stop_iteration_from_the_program_ends_a_test_loop(sandbox):
    """Known gap, not met by any HumanEval or MBPP test: the grader re-raises the program's
    StopIteration by name, and a C iterator in the test (map, filter) takes it as its end."""
    res = sandbox.run(
        "def f(x):\n    raise StopIteration", "assert all(map(f, [1, 2]))\nassert sum(map(f, [3])) == 0", "f"
    )
    if res.passed:
        pytest.xfail("StopIteration raised by the program ends map() in the test: the test passes")


# 2. values that claim to equal anything: only their plain value crosses

LIAR = "class Liar:\n    __eq__ = lambda s, o: True\n    __ne__ = lambda s, o: False\n    __hash__ = lambda s: 0\n"
LIARS = {
    "mock.ANY": "from unittest.mock import ANY as RESULT",
    "MagicMock": "from unittest import mock\nRESULT = mock.MagicMock()\nRESULT.__eq__.return_value = True\n"
    "RESULT.__sub__.return_value = RESULT.__abs__.return_value = 0",
    "ALWAYS_EQ": "try:\n    from test.support import ALWAYS_EQ as RESULT\nexcept ImportError:\n"
    f"{textwrap.indent(LIAR, '    ')}    RESULT = Liar()",
    "weakref.proxy": f"import weakref\n{LIAR}class LL(Liar, list): pass\nKEEP = LL()\nRESULT = weakref.proxy(KEEP)",
    "MappingProxyType": "import types\nclass D(dict):\n    __eq__ = lambda s, o: True\n"
    "RESULT = types.MappingProxyType(D())",
    "UserList-patched": "import collections\ncollections.UserList.__eq__ = lambda s, o: True\n"
    "RESULT = collections.UserList()",
    "namedtuple-eq": "import collections\nclass P(collections.namedtuple('P', 'a b')):\n"
    "    __eq__ = lambda s, o: True\n    __hash__ = tuple.__hash__\nRESULT = P(0, 0)",
    "float-nan": "class F(float):\n    __eq__ = __lt__ = __le__ = lambda s, o: True\n"
    "    __sub__ = __rsub__ = lambda s, o: F(0)\n    __abs__ = lambda s: F(0)\nRESULT = F('nan')",
    "iterator-of-liars": f"{LIAR}RESULT = iter([Liar(), Liar()])",
    "endless-generator": f"{LIAR}def gen():\n    while True:\n        yield Liar()\nRESULT = gen()",
    "class-spoof": "class Spoof:\n    __class__ = property(lambda s: int)\n    __eq__ = lambda s, o: True\n"
    "    __index__ = lambda s: 1\nRESULT = Spoof()",
    "type-named-bool": "RESULT = type('bool', (), {'__eq__': lambda s, o: True, '__bool__': lambda s: True})()",
    "liar-as-dict-key": f"{LIAR}RESULT = {{Liar(): True}}",
    "self-containing": "RESULT = []\nRESULT.append(RESULT)",
    "deque-subclass": "import collections\nclass Q(collections.deque):\n    __eq__ = lambda s, o: True\nRESULT = Q()",
}
BASES = {"int": "0", "float": "0.0", "complex": "0j", "str": "''", "bytes": "b''", "list": "[]", "tuple": "()"}
BASES |= {"dict": "{}", "set": "set()", "frozenset": "frozenset()"}
for _base, _empty in BASES.items():  # each plain type, lying in Python and through a C slot of its own
    LIARS[f"{_base}-python"] = (
        f"class L({_base}):\n    __eq__ = __lt__ = __le__ = __gt__ = lambda s, o: True\n"
        "    __ne__ = lambda s, o: False\n    __hash__ = lambda s: 0\n"
        f"    __sub__ = __rsub__ = __abs__ = lambda s, *o: 0\nRESULT = L({_empty})"
    )
    LIARS[f"{_base}-C-slot"] = (
        f"class L({_base}):\n    __eq__ = {_base}.__ne__\n    __hash__ = object.__hash__\nRESULT = L()"
    )


@pytest.mark.parametrize("setup", LIARS.values(), ids=LIARS)
def test_values_that_equal_anything(graded, setup):
    graded_wrong(graded, setup + ENTRY)


# 3. containment: nothing outside the sandbox is written, read, reached or left running


def fingerprint(paths) -> dict:
    return {p: hashlib.sha256(Path(p).read_bytes()).hexdigest() for p in paths if os.path.isfile(p)}


def test_writes_outside(graded, tmp_path):
    tmp_path.chmod(0o777)  # world-writable: only the sandbox may stop the program
    mark = uuid.uuid4().hex
    targets = [str(tmp_path / mark), f"{tempfile.gettempdir()}/creditbench-probe-{mark}"]
    scripts, stdlib = sandbox_bwrap.compiled_scripts(), Path(os.__file__).parent
    # the grader's own scripts and standard library: a program that changed them would change its grader
    guarded = [*scripts.rglob("*"), stdlib / "collections" / "__init__.py", *stdlib.glob("collections/__pycache__/*")]
    before = fingerprint(guarded)
    inside = [f"{sandbox_bwrap.INSIDE}/{p.relative_to(scripts)}" for p in scripts.rglob("*")]
    poison = [*map(str, guarded), *inside, str(stdlib / "sitecustomize.py"), f"{sandbox_bwrap.INSIDE}/evil.py"]
    program = f"""
        import os
        def attempt(path):
            d, base = os.path.split(path)
            for t in [lambda: open(path, "a").write("x"),
                      lambda: os.close(os.open(base, os.O_CREAT | os.O_WRONLY, dir_fd=os.open(d, os.O_RDONLY))),
                      lambda: open("/proc/self/root" + path, "a").write("x"),
                      lambda: open(f"/proc/{{os.getppid()}}/root" + path, "a").write("x"),
                      lambda: open("/proc/1/root" + path, "a").write("x"),
                      lambda: (os.symlink(path, "link"), open("link", "a").write("x")),
                      lambda: (os.symlink(d, "dir"), open("dir/" + base, "a").write("x")),
                      lambda: (open("mine", "w").close(), os.rename("mine", path)),
                      lambda: os.mkdir(path)]:
                for step in (t, lambda: os.unlink("link"), lambda: os.unlink("dir"), lambda: os.unlink("mine")):
                    try:
                        step()
                    except BaseException:
                        pass
        for path in {targets + poison!r}:
            attempt(path)
        def CALL():
            attempt({targets[0]!r})
    """
    graded_wrong(graded, textwrap.dedent(program) + ENTRY, ("humaneval",))
    assert not any(os.path.lexists(t) for t in targets)
    assert fingerprint(guarded) == before and not (stdlib / "sitecustomize.py").exists()
    assert sorted(os.listdir(scripts)) == sorted(["__pycache__", *sandbox_bwrap.SCRIPTS])


def test_nothing_of_the_machine_is_visible(graded, sandbox, tmp_path, monkeypatch):
    secret = uuid.uuid4().hex
    monkeypatch.setenv("CREDITBENCH_SECRET_PROBE", secret)
    (tmp_path / "visible").write_text(secret)
    python = sandbox_bwrap.python_executable()
    home = [str(p) for p in Path.home().iterdir() if not python.startswith(str(p))]  # all but the Python install
    root = Path(tasks.__file__).resolve().parents[1]
    paths = [str(root), str(root / "tasks" / "sandbox.py"), str(DATA), str(tmp_path / "visible"), *home[:20]]
    paths += ["/etc/passwd", "/etc/hostname", "/home", "/var", "/work", "/proc/1/root/work", "/sys/fs/cgroup"]
    program = f"""
        import glob, os
        def seen():
            found = [p for p in {paths!r} if os.path.lexists(p)]
            for p in glob.glob("/proc/*/environ") + glob.glob("/proc/*/cmdline") + glob.glob("/proc/*/task/*/environ"):
                try:
                    text = open(p, "rb").read().decode("utf-8", "replace")
                except OSError:
                    continue
                if {secret!r} in text or "pytest" in text or "CREDITBENCH_SECRET" in text:
                    found.append(p)
            return found
        RESULT = seen() or None
    """
    res = sandbox.run(textwrap.dedent(program), "assert seen() == []", "seen")
    assert res.passed, res  # the program found nothing of the machine
    assert sum(os.path.lexists(p) for p in paths) >= 5  # while the probe looked for things that exist here
    graded_wrong(graded, textwrap.dedent(program) + ENTRY, ("mbpp",))


SYSCALLS = """
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
def calls():  # new user and mount namespaces, a mount, attaching to pid 1, joining a namespace, chroot
    return [libc.unshare(0x10000000), libc.unshare(0x20000), libc.mount(b"none", b"/usr", b"tmpfs", 0, None),
            libc.ptrace(16, 1, 0, 0), libc.setns(0, 0), libc.chroot(b"/tmp")]
"""


def test_ctypes_system_calls_are_refused(sandbox):
    res = sandbox.run(SYSCALLS, "assert calls() == [-1] * 6", "calls")
    assert res.passed, res


def test_processes_do_not_outlive_the_program(graded):
    marks = [f"{4000 + uuid.uuid4().int % 5000}.{i}" for i in range(5)]  # unique arguments of `sleep`
    program = f"""
        import subprocess, time
        M = {marks!r}
        if libc.fork() == 0:
            libc.setsid()
            libc.execv(b"/bin/sleep", (ctypes.c_char_p * 3)(b"sleep", M[0].encode(), None))
            libc._exit(0)
        if os.fork() == 0:
            os.setsid()
            if os.fork() == 0:
                os.execv("/bin/sleep", ["sleep", M[1]])
            os._exit(0)
        if os.fork() == 0:
            os.setsid()
            if os.fork() != 0:
                os._exit(0)
            time.sleep(100)
        os.system(f"sleep {{M[2]}} &")
        subprocess.Popen(["sleep", M[3]], start_new_session=True)
        subprocess.Popen(["/bin/sh", "-c", f"nohup sleep {{M[4]}} >/dev/null 2>&1 &"])
        calls()
    """
    graded_wrong(graded, SYSCALLS + textwrap.dedent(program) + ENTRY)
    assert gone(*marks)


def test_network(graded, tmp_path):
    name = f"creditbench-probe-{uuid.uuid4().hex}"
    tcp, udp = socket.socket(), socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    abstract, path = socket.socket(socket.AF_UNIX), socket.socket(socket.AF_UNIX)
    with tcp, udp, abstract, path:
        for s, address in ((tcp, ("127.0.0.1", 0)), (udp, ("127.0.0.1", 0)), (abstract, "\0" + name)):
            s.bind(address)
        path.bind(str(tmp_path / "s"))
        tmp_path.chmod(0o777)
        (tmp_path / "s").chmod(0o777)
        for s in (tcp, abstract, path):
            s.listen()
        port, udp_port = tcp.getsockname()[1], udp.getsockname()[1]
        program = f"""
            import socket
            def CALL():
                for family, kind, to in [(socket.AF_INET, socket.SOCK_STREAM, ("127.0.0.1", {port})),
                                         (socket.AF_INET6, socket.SOCK_STREAM, ("::1", {port})),
                                         (socket.AF_INET, socket.SOCK_DGRAM, ("127.0.0.1", {udp_port})),
                                         (socket.AF_UNIX, socket.SOCK_STREAM, "\\0{name}"),
                                         (socket.AF_UNIX, socket.SOCK_STREAM, {str(tmp_path / "s")!r})]:
                    try:
                        s = socket.socket(family, kind)
                        s.settimeout(0.5)
                        s.connect(to)
                        s.send(b"x")
                    except OSError:
                        pass
            CALL()
        """
        graded_wrong(graded, textwrap.dedent(program) + ENTRY, ("mbpp",))
        for s in (tcp, udp, abstract, path):
            s.settimeout(0.2)
            with pytest.raises(socket.timeout):
                s.accept() if s is not udp else s.recv(1)


def test_fork_bomb(graded):
    program = """
        import os, time
        root = os.getpid()
        for _ in range(1000):
            try:
                os.fork()
            except OSError:
                break
        if os.getpid() != root:
            time.sleep(100)
    """
    graded_wrong(graded, textwrap.dedent(program) + ENTRY, ("mbpp",))
    assert psutil.pid_exists(os.getpid())


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
    "empty-frame": "L(0)",
    "forged-opaque-bool": "frame(OK + b'o' + L(5) + b'1bool')",
    "flood-of-frames": "frame(OK + b'T') * 1000",
    "truncated-then-exit": "L(100) + OK + b'l'",
}


@pytest.mark.parametrize("name", BOMBS)
def test_grader_denial(graded, name):
    t, rows = graded["humaneval"]
    server = t._sandbox._grader.proc.pid
    end = "os._exit(0)" if name.endswith("exit") else "return None"
    graded_wrong(graded, f"{FRAMES}def ENTRY(*a, **k):\n    send({BOMBS[name]})\n    {end}\n")
    assert all(o.correct for o in t.verify([r["answer"] for r in rows], rows))  # the next job
    assert t._sandbox._grader.proc.pid == server and t._sandbox._grader.proc.poll() is None


def test_truncated_frame_then_silence(graded):
    start = time.monotonic()
    program = f"{FRAMES}def ENTRY(*a, **k):\n    send(L(100) + OK)\n    time.sleep(60)\n"
    assert all(o.error.startswith("timeout") for o in graded_wrong(graded, program, ("mbpp",)))
    assert time.monotonic() - start < 10
    t, rows = graded["mbpp"]
    assert all(o.correct for o in t.verify([r["answer"] for r in rows], rows))


# legitimate programs pass: values that are plain data under another type, and contained processes

LEGIT = {
    "typing.NamedTuple": ("class P(typing.NamedTuple):\n    a: int\n    b: int\nRESULT = P(1, 2)", "(1, 2)"),
    "namedtuple": ("RESULT = collections.namedtuple('P', 'a b')(1, 2)", "(1, 2)"),
    "dict-subclass": ("class D(dict):\n    pass\nRESULT = D(a=[1, 2])", "{'a': [1, 2]}"),
    "str-subclass": ("class S(str):\n    pass\nRESULT = S('ab')", "'ab' and f().upper() == 'AB'"),
    "UserList": ("RESULT = collections.UserList([1, 2])", "[1, 2]"),
    "UserDict": ("RESULT = collections.UserDict(a=1)", "{'a': 1}"),
    "UserString": ("RESULT = collections.UserString('ab')", "'ab'"),
    "ChainMap": ("RESULT = collections.ChainMap({'a': 1}, {'b': 2})", "{'a': 1, 'b': 2}"),
    "OrderedDict": ("RESULT = collections.OrderedDict(b=2, a=1)", "{'a': 1, 'b': 2} and list(f()) == ['b', 'a']"),
    "Counter": ("RESULT = collections.Counter('aab')", "{'a': 2, 'b': 1}"),
    "deque": ("RESULT = collections.deque([1])", "collections.deque([1])"),
}


@pytest.mark.parametrize("setup, expected", LEGIT.values(), ids=LEGIT)
def test_legitimate_values_pass(sandbox, setup, expected):
    res = sandbox.run(
        f"import collections, typing\n{setup}\ndef f():\n    return RESULT", f"assert f() == {expected}", "f"
    )
    assert res.passed, res


def test_legitimate_generator_threads_and_subprocesses_pass(sandbox):
    program = """
        import subprocess, threading
        def gen():
            yield from (1, 2)
        def f():
            out = []
            ts = [threading.Thread(target=lambda: out.append(subprocess.run(["/bin/true"]).returncode)) for _ in "abc"]
            [t.start() for t in ts]
            [t.join() for t in ts]
            return out
    """
    res = sandbox.run(textwrap.dedent(program), "assert list(gen()) == [1, 2]\nassert f() == [0, 0, 0]", "f")
    assert res.passed, res


def test_correct_solutions_pass_through_verify(graded):
    t, rows = graded["humaneval"]
    fenced = "```python\ndef has_close_elements(numbers, threshold):\n    return any(abs(a - b) < threshold"
    fenced += " for i, a in enumerate(numbers) for b in numbers[i + 1:])\n```"
    assert t.verify([fenced], rows[:1])[0].correct
    for name in ROWS:
        t, rows = graded[name]
        assert all(o.correct for o in t.verify([r["answer"] for r in rows], rows))
